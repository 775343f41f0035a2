import Foundation
import Testing
import VaultSystem

@Suite struct ProcessHardeningTests {
    @Test func theUserDatabaseNamesThisUidAndHasNoAccountOfAnUnusedOne() {
        #expect(ProcessIdentity.lookUpUser(ProcessIdentity.uid) == .account(name: NSUserName()))
        #expect(ProcessIdentity.userName(of: ProcessIdentity.uid) == NSUserName())
        // Far above any subordinate range useradd hands out (100000 + 65536 per user).
        #expect(ProcessIdentity.lookUpUser(3_999_999_999) == .noAccount)
        #expect(ProcessIdentity.userName(of: 3_999_999_999) == nil)
    }

    @Test func bootIDIsTheKernelsUUID() throws {
        let id = try ProcessIdentity.bootID()
        #expect(id.count == 36)
        #expect(id == (try String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8))
            .trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(ProcessIdentity.pid == getpid())
        #expect(ProcessIdentity.uid == getuid())
    }
}

extension ProcessHardeningTests {
    /// In a forked child (making the test process itself undumpable would hide /proc/self from it).
    @Test func disableCoreDumpsTurnsOffDumpingAndCoreFiles() {
        let child = fork()
        if child == 0 {
            var code: Int32 = 0
            if !ProcessHardening.isDumpable { code = 2 }
            if (try? ProcessHardening.disableCoreDumps()) == nil { code = 3 }
            if ProcessHardening.isDumpable { code = 4 }
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_CORE.rawValue), &limit)
            if limit.rlim_cur != 0 || limit.rlim_max != 0 { code = 5 }
            _exit(code)
        }
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        #expect(status == 0, "child status \(status)")
    }

    @Test func closeInheritedDescriptorsClosesFromTheFirstGiven() {
        let child = fork()
        if child == 0 {
            let kept = dup2(1, 40), closed = dup2(1, 41)
            ProcessHardening.closeInheritedDescriptors(from: 41)
            _exit(kept == 40 && closed == 41 && isOpen(40) && !isOpen(41) && isOpen(1) ? 0 : 1)
        }
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        #expect(status == 0)
    }
}
