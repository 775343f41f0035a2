import Foundation
import Testing
import VaultSystem

@Suite struct FileDescriptorTests {
    @Test func writeAllToAFullDeviceThrowsNoSpace() {
        let error = systemError {
            let full = try FileDescriptor.open("/dev/full", .writeOnly)
            try full.writeAll(Array(repeating: 0x41, count: 10))
        }
        #expect(error?.isFull == true)
        #expect(error?.call == "write")
        #expect(error?.path == "/dev/full")
    }

    @Test func writeAllOnARawDescriptorNamesIt() throws {
        let full = try FileDescriptor.open("/dev/full", .writeOnly)
        let error = systemError { try writeAll(fd: full.rawValue, bytes: [1, 2, 3], label: "standard output") }
        #expect(error?.description == "write standard output: No space left on device")
    }

    @Test func writeAllWaitsOnAFullNonBlockingPipe() throws {
        var pipe = try UnixPipe()
        try pipe.writeEnd.setNonBlocking(true)
        let total = 1 << 20  // far more than a pipe buffer holds
        let reader = pipe.readEnd.take()
        let received = ReceivedCount()
        let thread = Thread {
            let input = FileDescriptor(owning: reader)
            received.set((try? input.readAll(limit: total * 2).count) ?? -1)
        }
        thread.start()
        try pipe.writeEnd.writeAll(Array(repeating: 7, count: total))
        try pipe.writeEnd.close()
        #expect(received.wait() == total)
    }

    @Test func readExactlyAndReadAll() throws {
        let scratch = Scratch()
        let path = scratch.file("data")
        try AtomicFile.write(Array(0..<100), to: path)
        let fd = try FileDescriptor.open(path, .readOnly)
        let first = try fd.readExactly(10), rest = try fd.readExactly(200), none = try fd.readExactly(5)
        #expect(first == Array(0..<10))
        #expect(rest == Array(10..<100))
        #expect(none == [])
        let again = try FileDescriptor.open(path, .readOnly)
        let error = systemError { _ = try again.readAll(limit: 50) }
        #expect(error?.code == Errno.tooLarge)
        let whole = try FileDescriptor.open(path, .readOnly).readAll(limit: 100)
        #expect(whole.count == 100)
    }

    /// readAll reads in chunks sized to the limit: a file of exactly the limit is read, one byte
    /// over is refused, across the chunk size too; an empty file is no bytes.
    @Test func readAllAtAndAcrossItsLimitAndChunks() throws {
        let scratch = Scratch()
        for size in [0, 1, 4095, 4096, 16383, 16384, 16385, 40000] {
            let path = scratch.file("data-\(size)")
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            try AtomicFile.write(bytes, to: path)
            #expect(try FileDescriptor.open(path, .readOnly).readAll(limit: size) == bytes, "size \(size) at its limit")
            #expect(try FileDescriptor.open(path, .readOnly).readAll(limit: Int.max) == bytes, "size \(size), no limit")
            if size > 0 {
                let error = systemError { _ = try FileDescriptor.open(path, .readOnly).readAll(limit: size - 1) }
                #expect(error?.code == Errno.tooLarge, "size \(size) one over its limit")
            }
        }
    }

    /// The session and terminal of a process, read from /proc as bytes, are what a split of
    /// the same line as text gives, and the session is getsid's.
    @Test func terminalSessionReadsProcStat() throws {
        for pid in [getpid(), getppid(), 1] {
            let line = String(decoding: try FileDescriptor.open("/proc/\(pid)/stat", .readOnly).readAll(limit: 4096), as: UTF8.self)
            let fields = line[line.index(after: line.lastIndex(of: ")")!)...].split(separator: " ")
            let got = try ProcessIdentity.terminalSession(of: pid)
            #expect(got.sessionID == Int32(fields[3]) && got.terminal == Int32(fields[4]), "pid \(pid): \(line)")
        }
        #expect(try ProcessIdentity.terminalSession(of: getpid()).sessionID == getsid(0))
        #expect(throws: SystemError.self) { try ProcessIdentity.terminalSession(of: Int32.max) }
    }

    @Test func deinitClosesAndTakeReleases() throws {
        var raw: Int32 = -1
        do {
            let fd = try FileDescriptor.open("/dev/null", .readOnly)
            raw = fd.rawValue
            let open = isOpen(raw)
            #expect(open)
        }
        #expect(!isOpen(raw))
        var fd = try FileDescriptor.open("/dev/null", .readOnly)
        let taken = fd.take()
        let valid = fd.isValid
        #expect(!valid)
        _ = consume fd
        #expect(isOpen(taken))
        var owner = FileDescriptor(owning: taken)
        try owner.close()
        #expect(!isOpen(taken))
        #expect(!isTerminal(taken))
    }

    @Test func descriptorsAreCloseOnExec() throws {
        let fd = try FileDescriptor.open("/dev/null", .readOnly)
        let raw = fd.rawValue
        let flags = try String(contentsOfFile: "/proc/self/fdinfo/\(raw)", encoding: .utf8)
        // O_CLOEXEC is 02000000 (octal) in fdinfo's flags.
        let octal = flags.split(separator: "\n").first { $0.hasPrefix("flags:") }?.split(separator: "\t").last ?? ""
        #expect((Int(octal, radix: 8) ?? 0) & 0o2000000 != 0)
    }
}

/// A value one thread sets and another waits for.
final class ReceivedCount: @unchecked Sendable {
    private let condition = NSCondition()
    private var value: Int?
    func set(_ v: Int) { condition.lock(); value = v; condition.broadcast(); condition.unlock() }
    func wait() -> Int? {
        condition.lock()
        defer { condition.unlock() }
        let limit = Date(timeIntervalSinceNow: 20)
        while value == nil && condition.wait(until: limit) {}
        return value
    }
}
