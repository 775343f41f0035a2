import Foundation
import Synchronization
import Testing
@testable import VaultKit
import VaultSystem

/// The reserve's bookkeeping on an ordinary folder (a truly full file system is in
/// VaultAuthorityTests' FullDiskTests, as root).
@Suite struct StateReserveTests {
    final class Folder {
        let path = NSTemporaryDirectory() + "reserve-" + UUID().uuidString.prefix(8)
        init() { try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    final class Log: Sendable {
        let lines = Mutex<[String]>([])
        func add(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    @Test func madeWithRealBlocksGivenBackPieceByPieceThenWholeAgain() throws {
        let folder = Folder(), log = Log()
        let reserve = StateReserve(path: folder.path + "/reserve", log: { log.add($0) })
        #expect(reserve.held == 0)
        #expect(reserve.replenish())
        let made = try FileStatus.of(reserve.path)
        #expect(made.size == 1 << 20 && made.allocatedBytes >= made.size && made.permissions == 0o600, "\(made)")
        // Not zeros (a compressing file system would store nothing for them).
        let bytes = try #require(FileManager.default.contents(atPath: reserve.path))
        #expect(Set(bytes.prefix(4096)).count > 200)
        #expect(log.all.isEmpty, "a first reserve is not news")

        // A small write gets one 64 KiB piece, a larger one more.
        #expect(reserve.release(for: 300, writing: "auth.sealed") == StateReserve.piece)
        #expect(reserve.held == (1 << 20) - StateReserve.piece)
        #expect(reserve.release(for: 100 << 10, writing: "prints.sealed") == 2 * StateReserve.piece)
        #expect(log.all.last?.contains("gave back 128 KiB of the reserve, 832 KiB left") == true, "\(log.all)")

        #expect(reserve.replenish())
        #expect(try reserve.held == 1 << 20 && FileStatus.of(reserve.path).allocatedBytes >= 1 << 20)
        #expect(log.all.last?.contains("is whole again (1024 KiB)") == true, "\(log.all)")

        // What is left at the end goes whole; then there is nothing to give.
        let small = StateReserve(path: folder.path + "/small", size: StateReserve.piece, log: { log.add($0) })
        #expect(small.replenish())
        #expect(small.release(for: 0, writing: "x") == StateReserve.piece)
        #expect(!FileSystem.exists(small.path))
        #expect(small.release(for: 0, writing: "x") == 0)
        #expect(log.all.last?.contains("no reserve is left") == true)
    }

    @Test func aFullDiskIsRetriedOnceAfterAPieceOtherErrorsAreNot() throws {
        let folder = Folder()
        let reserve = StateReserve(path: folder.path + "/reserve")
        #expect(reserve.replenish())
        var calls = 0
        // Both forms a full disk reaches the reserve in: the system's error and VaultKit's exit 6.
        for full in [SystemError(call: "write", path: "x", code: Errno.noSpace) as any Error,
                     SystemError(call: "write", path: "x", code: Errno.quotaExceeded).vaultError] {
            calls = 0
            let value = try reserve.retryingWhenFull("x") { () throws -> Int in
                calls += 1
                if calls == 1 { throw full }
                return 7
            }
            #expect(value == 7 && calls == 2)
        }
        #expect(reserve.held == (1 << 20) - 2 * StateReserve.piece)

        calls = 0
        #expect(throws: VaultError.self) {
            try reserve.retryingWhenFull("x") { () throws -> Int in calls += 1; throw VaultError.io(path: "x", "Permission denied") }
        }
        #expect(calls == 1)
        calls = 0
        #expect(throws: SystemError.self) {
            try reserve.retryingWhenFull("x") { () throws -> Int in calls += 1; throw SystemError(call: "write", code: Errno.noSpace) }
        }
        #expect(calls == 2, "tried once more, no further")
        #expect(reserve.held == (1 << 20) - 3 * StateReserve.piece)

        // No reserve: the first error stands.
        try FileSystem.remove(reserve.path)
        calls = 0
        #expect(throws: SystemError.self) {
            try reserve.retryingWhenFull("x") { () throws -> Int in calls += 1; throw SystemError(call: "write", code: Errno.noSpace) }
        }
        #expect(calls == 1)

        // The sealed writes' path: an ordinary write just writes.
        try reserve.write([1, 2, 3], to: folder.path + "/auth.sealed")
        #expect(FileManager.default.contents(atPath: folder.path + "/auth.sealed") == Data([1, 2, 3]))
    }
}
