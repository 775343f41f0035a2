import Foundation
import Testing
import VaultSystem

@Suite struct FileLockTests {
    /// Two open files of one lock (what two agents of one socket hold): one holds it, the other
    /// is told so at once or after a bounded wait, reads what the holder recorded, and gets the
    /// lock once it is released.
    @Test func oneHolderAtATimeWithoutWaitingForever() throws {
        let scratch = Scratch()
        let path = scratch.file("agent.sock.lock")
        let first = try FileLock(path: path)
        let second = try FileLock(path: path)
        #expect(try first.tryExclusive())
        try first.record("4242\n")
        #expect(try !second.tryExclusive())
        let start = MonotonicClock.seconds()
        #expect(try !second.exclusive(waitingAtMost: 0.1))
        #expect(MonotonicClock.seconds() - start >= 0.09)
        var asked = 0
        #expect(try !second.exclusive(waitingAtMost: 10) { asked += 1; return asked == 3 })
        #expect(asked == 3, "giving up is asked between tries")
        #expect(second.recorded() == "4242\n")
        first.unlock()
        #expect(try second.exclusive(waitingAtMost: 1))
        #expect(try !first.tryExclusive())
        #expect(scratch.mode(path) == 0o600)
    }

    @Test func aFilesIdentityIsItsDeviceAndInode() throws {
        let scratch = Scratch()
        let a = scratch.file("a"), b = scratch.file("b")
        #expect(FileManager.default.createFile(atPath: a, contents: Data()))
        #expect(FileManager.default.createFile(atPath: b, contents: Data()))
        let (sa, sb) = (try FileStatus.of(a), try FileStatus.of(b))
        #expect(sa.device == sb.device && sa.inode != sb.inode)
        try FileSystem.rename(b, to: a)
        #expect(try FileStatus.of(a).inode == sb.inode)
    }
}
