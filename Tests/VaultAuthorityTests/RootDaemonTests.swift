import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// The built vault-authd as the `vault-auth` user (started with `setpriv`, in test mode, on
/// libfprint's virtual_device), driven by `SystemKeyAuthority` in client processes running as
/// two ordinary users. Needs root: useradd, setpriv, and feeding the daemon's reader socket.
@Suite(.serialized, .enabled(if: runningAsRoot, "needs root: creates the vault-auth, authd-alice and authd-bob users and starts processes as them with setpriv (CI runs as root)"))
struct RootDaemonTests {
    @Test func enrolBindUnlockAndLockoutAsAnOrdinaryUserNoneOfWhichTheUserCanUndo() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let aliceUID = try #require(TestUsers.uid(TestUsers.alice))
        #expect(try alice.run(.probe).ok, "the client checks the socket and the peer are vault-auth's")

        // Enrol (five touches), bind, and open by a matching finger.
        var notices: [ScanNotice] = []
        #expect(try alice.enroll("alice-finger", on: daemon, notices: { notices.append($0) }).ok)
        #expect(notices.first == .enrolling(finger: "right-index", reader: "Virtual device for debugging", stages: 5))
        #expect(notices.last == .enrollProgress(completed: 5, total: 5, advice: nil))
        let vault = FakeVault()
        let bound = try alice.bind(vault, confirm: ["right-index"])
        let kek = try #require(bound.key)
        #expect(kek.count == 32)
        let opened = try alice.unlock(vault, on: daemon, scans: ["alice-finger"])
        #expect(opened.key == kek)
        #expect(try alice.bind(vault).key != kek, "a second bind gives another key")
        let rebound = try alice.status(vault)
        #expect(rebound.kind == "system" && rebound.bindingCurrent == true)
        let current = try #require(try alice.unlock(vault, on: daemon, scans: ["alice-finger"]).nextKey, "the key the slot is re-sealed with")

        // Three non-matches: the retry limit, narrated; two more: the lockout.
        let events = Mutex<[AuthorityEvent]>([])
        let three = try alice.unlock(vault, on: daemon, scans: ["someone-else"], events: { e in events.withLock { $0.append(e) } })
        #expect(three.retryLimit && three.key == nil)
        #expect(events.withLock { $0 } == [.noMatch(triesLeft: 2), .noMatch(triesLeft: 1), .noMatch(triesLeft: 0)])
        let five = try alice.unlock(vault, on: daemon, scans: ["someone-else"])
        #expect(five.exitCode == 17 && five.key == nil)

        // The daemon's files: the daemon's, out of the user's reach.
        let mine = daemon.state + "/uid-\(aliceUID)"
        let daemonUID = try #require(TestUsers.uid(TestUsers.daemon))
        for file in ["device-secret", "prints.sealed", "auth.sealed"] {
            let st = try FileStatus.of(mine + "/" + file)
            #expect(st.owner == daemonUID && st.permissions == 0o600, "\(file)")
            let read = try alice.run(.readFile(path: mine + "/" + file))
            #expect(!read.ok && read.message?.contains("Permission denied") == true, "\(file): \(String(describing: read.message))")
        }
        #expect(try FileStatus.of(mine).permissions == 0o700)
        // Not dumpable: its /proc files are root's, so not even its own uid's processes read them.
        let pid = daemon.daemon.child.pid
        #expect(try FileStatus.of("/proc/\(pid)/environ").owner == 0)
        #expect(try alice.run(.readFile(path: "/proc/\(pid)/environ")).message?.contains("Permission denied") == true)
        #expect(try FileStatus.of(daemon.state).permissions == 0o700)
        // No file of the user's holds the device secret.
        let secret = try #require(FileManager.default.contents(atPath: mine + "/device-secret"))
        #expect(secret.count == 32)
        if let home = TestUsers.home(TestUsers.alice), let files = FileManager.default.enumerator(atPath: home) {
            for case let name as String in files {
                guard let data = FileManager.default.contents(atPath: home + "/" + name), data.count < 1 << 20 else { continue }
                #expect(data.range(of: secret) == nil, "\(name)")
            }
        }

        // Deleting everything the user owns, a new client process, a forged proof: still locked.
        if let home = TestUsers.home(TestUsers.alice) {
            for sub in [".local", ".cache", ".config"] { try? FileManager.default.removeItem(atPath: home + "/" + sub) }
        }
        let again = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try again.status().failedMatches == 5)
        #expect(try again.unlock(vault, on: daemon, scans: ["alice-finger"]).exitCode == 17)
        #expect(try again.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: true)).exitCode == 10)
        #expect(try again.status().failedMatches == 5)

        // The passcode's proof lifts it; the finger opens again.
        #expect(try again.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "owner")
        #expect(try again.status().failedMatches == 0)
        #expect(try again.unlock(vault, on: daemon, scans: ["alice-finger"]).key == current)
        #expect(daemon.daemon.isRunning)
    }

    @Test func twoUsersCannotUseListOrDisturbEachOthersBindingsOrCounters() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let bob = try ClientProcess(user: TestUsers.bob, daemon: daemon)
        #expect(try alice.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        _ = try alice.bind(vault, confirm: ["right-index"])

        // Bob sees nothing of Alice's and gets no scan for her slot.
        #expect(try bob.run(.fingers).fingers == 0)
        #expect(try bob.unlock(vault, on: daemon, scans: ["alice-finger"]).exitCode == 16)
        // With a print of his own the same slot is still not his (20), Alice's finger included.
        #expect(try bob.enroll("bob-finger", on: daemon).ok)
        let bobsVault = vault.withNewProofKey()
        #expect(try bob.run(.status(vaultID: vault.id, slot: vault.slot)).bindingCurrent == false)
        let bobs = try #require(try bob.bind(bobsVault, confirm: ["right-index"]).key)
        #expect(try bob.unlock(bobsVault, on: daemon, scans: ["alice-finger"]).retryLimit, "Alice's finger is not Bob's")
        #expect(try bob.unlock(bobsVault, on: daemon, scans: ["bob-finger"]).key == bobs)

        // Bob's failures and passcode unlocks leave Alice's record alone, and the reverse.
        _ = try bob.unlock(bobsVault, on: daemon, scans: ["nobody"])
        #expect(try bob.status().failedMatches == 3)
        #expect(try alice.status().failedMatches == 0)
        #expect(try bob.run(.recordPasscode(vaultID: vault.id, proofKey: bobsVault.proofKey, forged: false)).recorded == "owner")
        #expect(try alice.run(.recordPasscode(vaultID: vault.id, proofKey: bobsVault.proofKey, forged: false)).exitCode == 10)
        #expect(try alice.status().fingers == 1 && bob.status().fingers == 1)
    }

    @Test func aClientKilledMidScanFreesTheReaderForTheRequestWaitingItsTurn() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try alice.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        let kek = try #require(try alice.bind(vault, confirm: ["right-index"]).key)

        let doomed = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let first = try doomed.start(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 60, cancel: nil))
        #expect(first == .touchReader(prompt: "touch the reader"))
        // While it scans, a request that may wait 2 s waits (and says so), then is busy (13).
        let start = MonotonicClock.seconds()
        var told: [ScanNotice] = []
        let busy = try alice.unlock(vault, on: daemon, scans: [], scanTimeout: 2, notices: { told.append($0) })
        #expect(busy.exitCode == 13, "\(String(describing: busy.message))")
        #expect(MonotonicClock.seconds() - start >= 1.8)
        #expect(told == [.waitingForReader])
        // One that may wait 30 s is queued; killing the scanning client gives it the reader.
        let waiter = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let queued = try waiter.start(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 30, cancel: nil))
        #expect(queued == .waitingForReader)
        doomed.kill()
        let after = MonotonicClock.seconds()
        var handedOver: Double?
        let opened = try waiter.finish(onNotice: { notice in
            if case .touchReader = notice {
                handedOver = MonotonicClock.seconds() - after
                try daemon.reader("SCAN alice-finger")
            }
        })
        #expect(opened.key == kek)
        #expect(try #require(handedOver) < 5, "the reader came free at once")
        // The killed scan was not counted.
        #expect(try alice.status().failedMatches == 0)
    }

    @Test func aStoppedClientHoldingTheReaderLosesItWithinSecondsAndTheNextUserWaitsItsTurn() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let bob = try ClientProcess(user: TestUsers.bob, daemon: daemon)
        #expect(try alice.enroll("alice-finger", on: daemon).ok)
        #expect(try bob.enroll("bob-finger", on: daemon).ok)
        let alices = FakeVault(), bobs = FakeVault()
        let kek = try #require(try alice.bind(alices, confirm: ["right-index"]).key)
        #expect(try bob.bind(bobs, confirm: ["right-index"]).key != nil)

        // Bob's client asks for a scan of 300 s (clamped to 30), gets the reader, and is stopped.
        let stopped = try ClientProcess(user: TestUsers.bob, daemon: daemon)
        let first = try stopped.start(.unlock(vaultID: bobs.id, slot: bobs.slot, keyID: bobs.key.current, rules: relaxedRules, scanTimeout: 300, cancel: nil))
        #expect(first == .touchReader(prompt: "touch the reader"))
        try stopped.stop()
        let start = MonotonicClock.seconds()
        // Alice's unlock waits its turn, told so, and gets the reader long before 30 s.
        var told: [ScanNotice] = []
        var handedOver: Double?
        let opened = try alice.unlock(alices, on: daemon, scans: ["alice-finger"], scanTimeout: 30, notices: { n in
            told.append(n)
            if case .touchReader = n, handedOver == nil { handedOver = MonotonicClock.seconds() - start }
        })
        #expect(opened.key == kek, "\(String(describing: opened.message))")
        #expect(told.first == .waitingForReader && told.contains(.touchReader(prompt: "touch the reader")), "\(told)")
        let held = try #require(handedOver)
        #expect(held < 20, "the stopped client held the reader \(held) s")
        print("root: a SIGSTOPped client (scan timeout 300 s asked) held the reader \(String(format: "%.1f", held)) s after it stopped")

        // Bob's client, resumed, learns why its request ended (18); nothing was counted.
        try stopped.resume()
        let late = try stopped.finish(timeout: 30)
        #expect(late.exitCode == 18 && late.message?.contains("did not read") == true, "\(String(describing: late.message))")
        #expect(try bob.status().failedMatches == 0)
    }

    @Test func aScanTimeoutOf300SecondsIsClampedTo30() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try alice.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        _ = try alice.bind(vault, confirm: ["right-index"])
        let start = MonotonicClock.seconds()
        let r = try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 300, cancel: nil), timeout: 120)
        let took = MonotonicClock.seconds() - start
        #expect(r.exitCode == 18, "\(String(describing: r.message))")
        #expect(took >= 25 && took < 90, "no finger: the scan ended after \(took) s")
        print("root: a scan asked for 300 s with no finger ended after \(String(format: "%.1f", took)) s")
        #expect(try alice.status().failedMatches == 0)
    }

    @Test func uidsWithoutAnAccountShareFourConnectionsAndNeverGetState() throws {
        let daemon = try SystemDaemon()
        let subordinate = try (200_001...200_004).map { uid -> ClientProcess in
            guard TestUsers.uid("\(uid)") == nil else { throw VaultError.failure("uid \(uid) has an account here") }
            return try ClientProcess(uidWithoutAccount: UInt32(uid), daemon: daemon)
        }
        // Three of them try 50 connections each: 4 are taken in all, the rest refused.
        var held = 0
        for client in subordinate.prefix(3) {
            let r = try client.run(.holdConnections(count: 50), timeout: 120)
            #expect(r.ok, "\(String(describing: r.message))")
            held += r.held ?? 0
            #expect((r.held ?? 0) + (r.refused ?? 0) == 50)
            if (r.refused ?? 0) > 0 { #expect(r.message?.contains("without an account") == true, "\(String(describing: r.message))") }
        }
        #expect(held == AuthorityLimits.connectionsWithoutAccount)
        // A fourth is refused; the users are served, up to their own 32 each.
        #expect(try subordinate[3].run(.probe).ok == false)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try alice.run(.holdConnections(count: 40)).held == AuthorityLimits.connectionsPerUID)
        let bob = try ClientProcess(user: TestUsers.bob, daemon: daemon)
        #expect(try bob.run(.probe).ok)
        #expect(try bob.status().kind == "system")
        _ = try alice.run(.releaseConnections)
        for client in subordinate.prefix(3) { _ = try client.run(.releaseConnections) }

        // Such a uid can ask, but not enrol or bind, and gets no folder.
        let nobody = subordinate[3]
        #expect(try nobody.run(.probe).ok)
        #expect(try nobody.run(.challenge).ok)
        #expect(try nobody.status().fingers == 0)
        #expect(try nobody.run(.fingers).fingers == 0)
        let enrol = try nobody.run(.enroll(finger: nil, vaultID: nil, proofKey: nil))
        #expect(enrol.exitCode == 15 && enrol.message?.contains("uid 200004 has none") == true, "\(String(describing: enrol.message))")
        let vault = FakeVault()
        #expect(try nobody.bind(vault).exitCode == 15)
        #expect(try nobody.unlock(vault, on: daemon, scans: []).exitCode == 16)

        // A user with no state asks everything that makes none: still no folder; enrolling makes it.
        let bobUID = try #require(TestUsers.uid(TestUsers.bob))
        #expect(try bob.run(.challenge).ok)
        #expect(try bob.run(.fingers).fingers == 0)
        #expect(try bob.status(vault).bindingCurrent == false)
        #expect(try bob.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "not-bound")
        #expect(try bob.unlock(vault, on: daemon, scans: []).exitCode == 16)
        let none = try FileSystem.contents(of: daemon.state).filter { $0 != "reserve" }
        #expect(none.isEmpty, "\(none)")
        #expect(try bob.enroll("bob-finger", on: daemon).ok)
        #expect(try FileSystem.contents(of: daemon.state).filter { $0 != "reserve" } == ["uid-\(bobUID)"])
        #expect(daemon.daemon.isRunning)
    }

    @Test func theIdleStateOfAUidWithoutAnAccountIsRemovedAtStartAndNoOtherState() throws {
        try TestUsers.ensure()
        let aliceUID = try #require(TestUsers.uid(TestUsers.alice))
        let stale: UInt32 = 200_123, recent: UInt32 = 200_124
        #expect(TestUsers.uid("\(stale)") == nil && TestUsers.uid("\(recent)") == nil)
        let daemon = try SystemDaemon(prepareState: { state in
            for uid in [stale, recent, aliceUID] {
                let folder = state + "/uid-\(uid)"
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
                guard FileManager.default.createFile(atPath: folder + "/device-secret", contents: Data(randomBytes(32)),
                                                     attributes: [.posixPermissions: 0o600]) else { throw VaultError.failure("cannot write in \(folder)") }
                _ = try runProgram("/usr/bin/chown", ["-R", "\(TestUsers.daemon):\(TestUsers.daemon)", folder])
            }
            // Two hours unchanged: the stale one, and Alice's (which has an account).
            for uid in [stale, aliceUID] {
                let folder = state + "/uid-\(uid)"
                _ = try runProgram("/usr/bin/touch", ["-h", "-d", "2 hours ago", folder + "/device-secret", folder])
            }
        })
        let left = try FileSystem.contents(of: daemon.state).filter { $0 != "reserve" }.sorted()
        #expect(left == ["uid-\(recent)", "uid-\(aliceUID)"].sorted(), "\(left)")
        #expect(daemon.daemon.logText.contains("removed the idle state of 1 uid without an account: uid-\(stale)"), "\(daemon.daemon.logText)")
        // The uid whose state was just changed keeps it for now; it is never used either.
        let client = try ClientProcess(uidWithoutAccount: recent, daemon: daemon)
        #expect(try client.run(.fingers).fingers == 0)
    }

    @Test func cancelsTimeoutsRulesAndNewPrintsEndTheScanWithTheirExitCodes() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try alice.enroll("alice-finger", on: daemon, finger: "right-index").ok)
        let vault = FakeVault()
        _ = try alice.bind(vault, rules: PasscodeRules(afterReboot: true, intervalHours: 48), confirm: ["right-index"])
        #expect(try alice.run(.testSettings(bootID: "boot-1", now: 1_800_000_000)).ok)
        #expect(try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "owner")
        let strict = PasscodeRules(afterReboot: true, intervalHours: 48)

        // Enter (fallback) and Ctrl-C (user) from the client's side: 12 and 11, not counted.
        for (reason, code) in [(ScanCancelReason.fallback, Int32(12)), (.user, 11)] {
            let r = try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: strict, scanTimeout: 20, cancel: reason))
            #expect(r.exitCode == code, "\(reason): \(String(describing: r.message))")
        }
        // No finger within the scan timeout: 18.
        let slow = try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: strict, scanTimeout: 1, cancel: nil))
        #expect(slow.exitCode == 18)
        #expect(try alice.status().failedMatches == 0)

        // The daemon's injected reboot and clock: 12 before any scan.
        #expect(try alice.run(.testSettings(bootID: "boot-2", now: 1_800_000_000)).ok)
        #expect(try alice.unlock(vault, on: daemon, scans: [], rules: strict).exitCode == 12)
        _ = try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false))
        #expect(try alice.run(.testSettings(bootID: "boot-2", now: 1_800_000_000 + 49 * 3600)).ok)
        let late = try alice.unlock(vault, on: daemon, scans: [], rules: strict)
        #expect(late.exitCode == 12 && late.message?.contains("48 h") == true)
        #expect(try alice.run(.testSettings(bootID: nil, now: nil)).ok)
        _ = try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false))

        // A new finger (with the vault's proof) changes the prints: the old binding answers 20.
        #expect(try alice.enroll("alice-second", on: daemon, finger: "left-index", vault: vault).ok)
        let changed = try alice.unlock(vault, on: daemon, scans: ["alice-finger"])
        #expect(changed.exitCode == 20, "\(String(describing: changed.message))")
    }

    @Test func twentyConcurrentClientProcessesOfTwoUsersAreServed() throws {
        let daemon = try SystemDaemon()
        let vaults = [FakeVault(), FakeVault()]
        let setup = [try ClientProcess(user: TestUsers.alice, daemon: daemon), try ClientProcess(user: TestUsers.bob, daemon: daemon)]
        for (i, c) in setup.enumerated() {
            #expect(try c.enroll("finger-\(i)", on: daemon).ok)
            #expect(try c.bind(vaults[i], confirm: ["right-index"]).key != nil)
        }
        let clients = try (0..<20).map { try ClientProcess(user: $0 % 2 == 0 ? TestUsers.alice : TestUsers.bob, daemon: daemon) }
        let served = Mutex(0)
        let moved = Unchecked(clients)
        DispatchQueue.concurrentPerform(iterations: 20) { i in
            let v = vaults[i % 2]
            guard let r = try? moved.value[i].run(.burst(vaultID: v.id, slot: v.slot, proofKey: v.proofKey, rounds: 5)) else { return }
            if r.ok && r.recorded == "owner" && r.bindingCurrent == true { served.withLock { $0 += 1 } } else { Issue.record("client \(i): \(r)") }
        }
        #expect(served.withLock { $0 } == 20)
        #expect(daemon.daemon.isRunning)
    }
}
