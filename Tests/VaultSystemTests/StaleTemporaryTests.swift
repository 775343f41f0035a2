import Foundation
import Testing
import VaultSystem

@Suite struct StaleTemporaryTests {
    @Test func oldTemporariesOfKilledWritersGoFreshOnesAndOthersStay() throws {
        let folder = NSTemporaryDirectory() + "stale-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        func file(_ name: String, age: TimeInterval) throws {
            let p = folder + "/" + name
            _ = FileManager.default.createFile(atPath: p, contents: Data("x".utf8))
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -age)], ofItemAtPath: p)
        }
        try file(".auth.sealed.tmp-1f2e", age: 600)
        try file(".prints.sealed.tmp-99", age: 5)
        try file("auth.sealed", age: 600)
        try file(".keep", age: 600)
        try FileManager.default.createSymbolicLink(atPath: folder + "/.link.tmp-7", withDestinationPath: folder + "/auth.sealed")
        #expect(AtomicFile.removeStaleTemporaries(in: folder) == 1)
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: folder))
        #expect(left == [".prints.sealed.tmp-99", "auth.sealed", ".keep", ".link.tmp-7"])
    }
}
