import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// vault-authd's fprintd backend against real fprintd (private bus, polkit stand-in, libfprint's
/// virtual readers): the daemon runs as `vault-auth` with `CAP_DAC_READ_SEARCH` only, claims the
/// device for the calling user's name, and the user's client is `SystemKeyAuthority` in a process
/// of that user.
@Suite(.serialized, .enabled(if: PrivateFprintd.unavailable == nil, "\(PrivateFprintd.unavailable ?? "")"))
struct FprintdTests {
    /// vault-authd with `--backend fprintd` on `fprintd`'s bus.
    func daemon(_ fprintd: PrivateFprintd) throws -> SystemDaemon {
        try SystemDaemon(environment: ["DBUS_SYSTEM_BUS_ADDRESS=\(fprintd.address)"],
                         arguments: ["--backend", "fprintd", "--fprintd-state", fprintd.state], capabilities: "+dac_read_search")
    }

    /// Unlocks, answering each scan with the next of `scans` (the last repeats); `beforeScan`
    /// runs at each touch prompt before the scan is fed.
    func unlock(_ client: ClientProcess, _ vault: FakeVault, _ fprintd: PrivateFprintd, scans: [String],
                beforeScan: () throws -> Void = {}, events: ((AuthorityEvent) -> Void)? = nil) throws -> ClientResult {
        var left = scans
        return try client.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 20, cancel: nil),
                              events: events, onNotice: { notice in
            if case .touchReader = notice {
                try beforeScan()
                let next = left.count > 1 ? left.removeFirst() : (left.first ?? "nobody")
                try fprintd.scan("SCAN \(next)")
            }
        })
    }

    func enroll(_ client: ClientProcess, _ fprintd: PrivateFprintd, finger: String, print: String, vault: FakeVault? = nil) throws -> (ClientResult, [ScanNotice]) {
        var notices: [ScanNotice] = []
        let r = try client.run(.enroll(finger: finger, vaultID: vault?.id, proofKey: vault?.proofKey), onNotice: { notice in
            notices.append(notice)
            if case .enrolling(_, _, let stages) = notice {
                for _ in 0..<stages { try fprintd.scan("SCAN \(print)") }
            }
        })
        return (r, notices)
    }

    @Test func enrolThroughVaultServesFprintdVerifyAndUnlocksWhileForgedMatchesRetryLimitAndLockoutHold() throws {
        let fprintd = try PrivateFprintd()
        let daemon = try daemon(fprintd)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)

        // Enrol through vault: five touches, into fprintd (for the user's own name).
        let (enrolled, notices) = try enroll(alice, fprintd, finger: "right-index", print: "alice-1")
        #expect(enrolled.ok, "\(enrolled.message ?? "") \(daemon.daemon.log)")
        #expect(notices.first == .enrolling(finger: "right-index", reader: "Virtual device for debugging", stages: 5))
        #expect(notices.last == .enrollProgress(completed: 5, total: 5, advice: nil))
        let files = try FileManager.default.subpathsOfDirectory(atPath: fprintd.state + "/" + TestUsers.alice)
        #expect(files.contains { $0.hasSuffix("/7") }, "fprintd stored right-index (7): \(files)")
        // The same print serves fprintd's own clients (sudo, the login screen).
        #expect(try fprintd.tool("fprintd-verify", [TestUsers.alice], ready: "Verify started") { try fprintd.scan("SCAN alice-1") } == 0)
        let asked = fprintd.polkitLog
        for action in ["net.reactivated.fprint.device.setusername", "net.reactivated.fprint.device.enroll"] {
            #expect(asked.contains(action), "polkit was asked for \(action):\n\(asked)")
        }

        // Bind, unlock by a match.
        let vault = FakeVault()
        let kek = try #require(try alice.bind(vault, confirm: ["right-index"]).key)
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-1"]).key == kek)
        #expect(fprintd.polkitLog.contains("net.reactivated.fprint.device.verify"))

        // A verify-match emitted on the bus by another process during the scan is no match.
        let events = Mutex<[AuthorityEvent]>([])
        let forged = try unlock(alice, vault, fprintd, scans: ["someone-else"], beforeScan: {
            let r = try fprintd.gdbus(["emit", "--system", "--object-path", "/net/reactivated/Fprint/Device/0",
                                       "--signal", "net.reactivated.Fprint.Device.VerifyStatus", "verify-match", "true"])
            #expect(r.code == 0, "gdbus emit: \(r.stderr)")
        }, events: { e in events.withLock { $0.append(e) } })
        #expect(forged.key == nil && forged.retryLimit, "three non-matches despite three forged matches: \(forged)")
        #expect(events.withLock { $0 } == [.noMatch(triesLeft: 2), .noMatch(triesLeft: 1), .noMatch(triesLeft: 0)])
        // Two more failures: the lockout, counted by vault's authority.
        let locked = try unlock(alice, vault, fprintd, scans: ["someone-else"])
        #expect(locked.exitCode == 17 && locked.key == nil, "\(locked)")
    }

    @Test func fingersEnrolledOutsideVaultServeABindingAndAnyChangeOutsideInvalidatesIt() throws {
        let fprintd = try PrivateFprintd()
        let daemon = try daemon(fprintd)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let user = TestUsers.alice
        func fprintdEnroll(_ finger: String, _ print: String) throws -> Int32 {
            try fprintd.tool("fprintd-enroll", ["-f", finger, user]) { for _ in 0..<5 { try fprintd.scan("SCAN \(print)") } }
        }

        // No fingers anywhere: 16.
        let vault = FakeVault()
        #expect(try alice.bind(vault).exitCode == 16)
        // Enrolled with fprintd-enroll: vault takes it without a scan, binds, unlocks.
        #expect(try fprintdEnroll("right-index-finger", "alice-1") == 0)
        let (taken, notices) = try enroll(alice, fprintd, finger: "right-index", print: "unused")
        #expect(taken.ok && notices.isEmpty, "no enrolment scan for a finger fprintd has: \(notices) \(taken)")
        var kek = try #require(try alice.bind(vault, confirm: ["right-index"]).key)
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-1"]).key == kek)

        let other = FakeVault()
        let second = try alice.bind(other)
        #expect(second.key != nil && second.owner == false, "a vault bound after the first does not manage the fingers")

        // Another finger enrolled outside vault (as the user's own code could, through fprintd):
        // every binding of the user is 20, and re-binding says what changed and binds to it only
        // when an owner vault confirms it explicitly.
        #expect(try fprintdEnroll("left-thumb", "alice-2") == 0)
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-1"]).exitCode == 20)
        #expect(try unlock(alice, other, fprintd, scans: ["alice-1"]).exitCode == 20)
        #expect(try alice.status(other).bindingCurrent == false)
        let unconfirmed = try alice.bind(vault)
        #expect(unconfirmed.exitCode == 20 && unconfirmed.key == nil)
        #expect(unconfirmed.message?.contains("left-thumb was enrolled or changed on ") == true
                && unconfirmed.message?.contains("outside vault") == true, "\(unconfirmed.message ?? "")")
        #expect(try alice.bind(other, confirm: ["left-thumb"]).exitCode == 20, "a vault that does not manage the fingers cannot confirm")
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-2"]).exitCode == 20, "nothing was bound meanwhile")
        let confirmed = try alice.bind(vault, confirm: ["left-thumb"])
        kek = try #require(confirmed.key)
        #expect(confirmed.changes?.contains { $0.hasPrefix("left-thumb was enrolled or changed on ") } == true, "\(confirmed.changes ?? [])")
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-2"]).key == kek)
        #expect(try alice.bind(other).key != nil, "once confirmed, every vault binds")

        // Re-enrolling the same finger (a byte-identical file on virtual_device): 20 again.
        #expect(try fprintdEnroll("left-thumb", "alice-2") == 0)
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-2"]).exitCode == 20)
        #expect(try alice.bind(vault).exitCode == 20)
        kek = try #require(try alice.bind(vault, confirm: ["left-thumb"]).key)

        // fprintd-delete outside vault: 20.
        #expect(try fprintd.tool("fprintd-delete", [user]) == 0)
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-1"]).exitCode == 20)
    }

    @Test func aSecondClientHoldingTheDeviceIs13AndFprintdStoppingMidScanEndsTheScan() throws {
        let fprintd = try PrivateFprintd()
        let daemon = try daemon(fprintd)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try enroll(alice, fprintd, finger: "right-index", print: "alice-1").0.ok)
        let vault = FakeVault()
        #expect(try alice.bind(vault, confirm: ["right-index"]).key != nil)

        // Another client (root, for its own name) claims the device and keeps it.
        let holder = try ChildProcess.spawn(
            path: PrivateFprintd.python,
            arguments: [PrivateFprintd.python, "-c", """
                import dbus, time
                bus = dbus.SystemBus()
                dev = dbus.Interface(bus.get_object('net.reactivated.Fprint', '/net/reactivated/Fprint/Device/0'), 'net.reactivated.Fprint.Device')
                dev.Claim('')
                print('claimed', flush=True)
                time.sleep(60)
                """],
            environment: fprintd.environment,
            fileActions: [.open(0, "/dev/null", .readOnly), .open(1, fprintd.base + "/holder.log", .writeOnly, [.create, .append]), .dup2(from: 1, to: 2)])
        let end = MonotonicClock.seconds() + 10
        while !fprintd.log("holder.log").contains("claimed") && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.02) }
        let busy = try unlock(alice, vault, fprintd, scans: ["alice-1"])
        #expect(busy.exitCode == 13 && busy.message?.contains("another program is using the reader") == true, "\(busy)")
        try? holder.send(.kill)
        _ = try? holder.wait()

        // fprintd stops while the daemon waits for a finger: the scan ends (13 or 15), no hang.
        let started = MonotonicClock.seconds()
        let stopped = try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 20, cancel: nil),
                                    timeout: 30, onNotice: { notice in
            if case .touchReader = notice { fprintd.stopFprintd() }
        })
        #expect([13, 15].contains(stopped.exitCode ?? 0) && stopped.key == nil, "\(stopped)")
        #expect(MonotonicClock.seconds() - started < 10, "the scan ended soon after fprintd stopped")
        // fprintd gone: 15, with a hint.
        let gone = try unlock(alice, vault, fprintd, scans: ["alice-1"])
        #expect(gone.exitCode == 15 && gone.message?.contains("fprintd") == true, "\(gone)")
    }

    @Test func polkitRefusingTheDaemonIs6NamingTheAction() throws {
        let fprintd = try PrivateFprintd(allowed: ["net.reactivated.fprint.device.verify", "net.reactivated.fprint.device.enroll"])
        let daemon = try daemon(fprintd)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let r = try alice.run(.enroll(finger: "right-index", vaultID: nil, proofKey: nil))
        #expect(r.exitCode == 6 && r.message?.contains("net.reactivated.fprint.device.setusername") == true, "\(r)")
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/lib/polkit-1/polkitd"), "Debian's polkitd is not installed (package polkitd)"))
    func theShippedPolkitRuleLetsVaultAuthAloneClaimForTheCaller() throws {
        let rule = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
            + "/Vault/50-vault-auth-fprintd.rules"
        let fprintd = try PrivateFprintd(realPolkitRules: [rule])
        let daemon = try daemon(fprintd)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try enroll(alice, fprintd, finger: "right-index", print: "alice-1").0.ok, "real polkitd with the shipped rule")
        let vault = FakeVault()
        let kek = try #require(try alice.bind(vault, confirm: ["right-index"]).key)
        #expect(try unlock(alice, vault, fprintd, scans: ["alice-1"]).key == kek)
        // The rule is for vault-auth alone: an ordinary user may not claim for another name.
        let pkcheck = try runProgram("/usr/bin/setpriv", ["--reuid=\(TestUsers.alice)", "--regid=\(TestUsers.alice)", "--init-groups",
                                                          "/usr/bin/env", "DBUS_SYSTEM_BUS_ADDRESS=\(fprintd.address)", "/bin/sh", "-c",
                                                          "exec pkcheck --action-id net.reactivated.fprint.device.setusername --process $$"])
        #expect(pkcheck.code != 0, "\(pkcheck.stdout) \(pkcheck.stderr)")

        // Without the rule, Debian's polkitd refuses vault-auth: 6, naming the action.
        let bare = try PrivateFprintd(realPolkitRules: [])
        let bareDaemon = try self.daemon(bare)
        let refused = try ClientProcess(user: TestUsers.alice, daemon: bareDaemon).run(.enroll(finger: "right-index", vaultID: nil, proofKey: nil))
        #expect(refused.exitCode == 6 && refused.message?.contains("net.reactivated.fprint.device") == true, "\(refused)")
    }

    @Test func virtualImageEnrolsAndMatchesRealMinutiaeThroughFprintd() throws {
        let fprintd = try PrivateFprintd(driver: "virtual_image")
        let daemon = try daemon(fprintd)
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let prints = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().path
            + "/FingerprintKitTests/Fixtures"
        let enrolled = try alice.run(.enroll(finger: "right-index", vaultID: nil, proofKey: nil), onNotice: { notice in
            // fprintd asks an image reader for one more touch than libfprint's five (num-enroll-stages 6).
            if case .enrolling(_, _, let stages) = notice { try fprintd.images(Array(repeating: prints + "/probe.pgm", count: stages)) }
        })
        #expect(enrolled.ok, "\(enrolled)")
        // fprintd's own verify accepts the print vault enrolled: another impression matches.
        #expect(try fprintd.tool("fprintd-verify", [TestUsers.alice], ready: "Verify started") {
            try fprintd.images([prints + "/matching.pgm"])
        } == 0)
        let vault = FakeVault()
        let kek = try #require(try alice.bind(vault, confirm: ["right-index"]).key)
        func unlockWith(_ image: String) throws -> ClientResult {
            try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 20, cancel: nil), onNotice: { notice in
                if case .touchReader = notice { try fprintd.images([prints + "/" + image]) }
            })
        }
        #expect(try unlockWith("matching.pgm").key == kek, "another impression of the enrolled finger matches")
        #expect(try unlockWith("nonmatching.pgm").retryLimit, "another finger does not (three tries)")
    }
}
