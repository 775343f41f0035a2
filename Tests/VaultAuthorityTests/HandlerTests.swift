import Foundation
import Testing
import VaultAuthority
import VaultKit

private let alice: UInt32 = 1001
private let bob: UInt32 = 1002

/// The daemon's request handler with fake peer uids and a scripted reader: the rules are
/// VaultKit's; what is tested here is that they hold per uid, over the protocol's requests.
@Suite struct HandlerTests {
    @Test func aMatchReleasesTheBoundKeyAndNothingElseDoes() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        let kek = try f.enrolAndBind(vault, as: alice)
        let stream = Stream()
        let opened = f.unlock(vault, as: alice, stream: stream)
        #expect(opened.reply == .key)
        #expect(opened.tail == kek)
        #expect(stream.notices == [.touchReader(prompt: "touch the reader")])

        // No finger, a non-matching finger, a cancelled scan: never a key.
        for script: ScanScript in [.noMatch, .interrupt(.timedOut), .interrupt(.userCancelled)] {
            f.readers.set([script])
            let r = f.unlock(vault, as: alice)
            #expect(r.tail.isEmpty, "\(script)")
            #expect(r.reply != .key)
            _ = try f.recordPasscode(vault, as: alice)
        }
    }

    /// `verify` answers with the token of its own match over the vault's nonce: one MAC per proof
    /// key registered for the vault (two after a re-bind under a new key), none for another user.
    @Test func verifyReturnsATokenUnderTheRegisteredProofKeys() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        let nonce = randomBytes(32)
        let r = f.send(.verify(slot: vault.reference, nonce: nonce, reuse: 0, prompt: "touch", scanTimeout: 5), as: alice)
        guard case .verified(let token) = r.reply else { Issue.record("\(r.reply)"); return }
        #expect(token.vaultID == vault.id && token.nonce == nonce && token.reusedAge == nil)
        #expect(try FreshMatchMAC.check(token, key: try SecretBytes(copying: vault.proofKey)))
        #expect(try !FreshMatchMAC.check(token, key: try SecretBytes.random(count: 32)))
        // Reused within the window: no scan, the age under the MAC.
        let scans = f.readers.scans
        let again = f.send(.verify(slot: vault.reference, nonce: randomBytes(32), reuse: 60, prompt: "touch", scanTimeout: 5), as: alice)
        guard case .verified(let reused) = again.reply else { Issue.record("\(again.reply)"); return }
        #expect(f.readers.scans == scans && reused.reusedAge == 0)
        #expect(try FreshMatchMAC.check(reused, key: try SecretBytes(copying: vault.proofKey)))
        // A second binding under another key (a rotation): a MAC under each.
        let rotated = vault.withNewProofKey().at(slot: 4)
        _ = try f.bind(rotated, as: alice)
        let both = f.send(.verify(slot: rotated.reference, nonce: randomBytes(32), reuse: 0, prompt: "touch", scanTimeout: 5), as: alice)
        guard case .verified(let two) = both.reply else { Issue.record("\(both.reply)"); return }
        #expect(two.macs.count == 2)
        #expect(try FreshMatchMAC.check(two, key: try SecretBytes(copying: vault.proofKey)) && FreshMatchMAC.check(two, key: try SecretBytes(copying: rotated.proofKey)))
        // No match, no token; a nonce of another length is refused before any scan.
        f.readers.set([.noMatch])
        #expect(f.send(.verify(slot: vault.reference, nonce: randomBytes(32), reuse: 0, prompt: "touch", scanTimeout: 5), as: alice).reply == .retryLimitExceeded)
        #expect(f.send(.verify(slot: vault.reference, nonce: randomBytes(16), reuse: 0, prompt: "touch", scanTimeout: 5), as: alice).exitCode == 2)
    }

    @Test func threeNonMatchesAreTheRetryLimitAndFiveLockOut() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        f.readers.set([.noMatch])
        let stream = Stream()
        #expect(f.unlock(vault, as: alice, stream: stream).reply == .retryLimitExceeded)
        #expect(stream.events == [.noMatch(triesLeft: 2), .noMatch(triesLeft: 1), .noMatch(triesLeft: 0)])
        #expect(stream.notices.count == 3)
        #expect(f.failures(of: alice) == 3)
        let second = Stream()
        let locked = f.unlock(vault, as: alice, stream: second)
        #expect(locked.exitCode == 17)
        #expect(second.events == [.noMatch(triesLeft: 2), .lockedOut])
        // Locked out: not even a scan.
        let scans = f.readers.scans
        f.readers.set([.match])
        #expect(f.unlock(vault, as: alice).exitCode == 17)
        #expect(f.readers.scans == scans)
    }

    @Test func oneUsersBindingsLockoutAndFingersAreInvisibleToAnother() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        let kek = try f.enrolAndBind(vault, as: alice)

        // Bob asks for Alice's slot: he has no prints, so no binding, and never a scan.
        let scans = f.readers.scans
        let asked = f.unlock(vault, as: bob)
        #expect(asked.exitCode == 16)
        #expect(asked.tail.isEmpty)
        #expect(f.readers.scans == scans)
        guard case .fingers(let bobs) = f.send(.fingers, as: bob).reply else { Issue.record("fingers"); return }
        #expect(bobs.isEmpty)

        // Bob enrols and binds the same vault id and slot (his copy of the vault has its own
        // proof key): he gets a key of his own.
        let bobsVault = vault.withNewProofKey()
        let bobsKey = try f.enrolAndBind(bobsVault, as: bob)
        #expect(bobsKey != kek)

        // Alice locks herself out; Bob is untouched.
        f.readers.set([.noMatch])
        _ = f.unlock(vault, as: alice)
        #expect(f.unlock(vault, as: alice).exitCode == 17)
        #expect(f.failures(of: alice) == 5)
        #expect(f.failures(of: bob) == 0)
        f.readers.set([.match])
        let bobOpens = f.unlock(bobsVault, as: bob)
        #expect(bobOpens.reply == .key)
        #expect(bobOpens.tail == bobsKey)

        // Bob's passcode unlock of the same vault id resets his record, not Alice's lockout.
        #expect(try f.recordPasscode(bobsVault, as: bob).reply == .recorded(bound: true))
        #expect(f.failures(of: alice) == 5)
        #expect(f.unlock(vault, as: alice).exitCode == 17)

        // Each uid's state is in its own folder.
        let names = try FileManager.default.contentsOfDirectory(atPath: f.handler.stateFolder).sorted()
        #expect(names == ["uid-\(alice)", "uid-\(bob)"])
    }

    @Test func aChallengeIssuedToOneUserServesNoOther() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        f.readers.set([.noMatch])
        _ = f.unlock(vault, as: alice)
        // Bob obtains a challenge; Alice's valid proof over it is refused (challenges are per uid).
        let bobs = try f.challenge(as: bob)
        let r = f.send(.recordPasscodeUnlock(proof: try vault.proof(.passcodeUnlock, challenge: bobs)), as: alice)
        #expect(r.exitCode == 10)
        #expect(f.failures(of: alice) == 3)
    }

    @Test func aSecondBindGivesAnotherKeyAndTheOldKeyIsNeverHandedOutAgain() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        let first = try f.enrolAndBind(vault, as: alice)
        let second = try f.bind(vault, as: alice)
        #expect(first != second)
        let rotated = vault.at(slot: vault.slot + 1)
        let third = try f.bind(rotated, as: alice)
        #expect(Set([first, second, third]).count == 3)
        let r = f.unlock(vault, as: alice)
        #expect(r.tail == second)
        #expect(f.unlock(rotated, as: alice).tail == third)
        // A slot id never bound answers 20 without a scan.
        let scans = f.readers.scans
        #expect(f.unlock(vault.at(slot: 99), as: alice).exitCode == 20)
        #expect(f.readers.scans == scans)
    }

    @Test func aForgedProofLeavesTheLockoutAndTheRealOneLiftsIt() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        f.readers.set([.noMatch])
        _ = f.unlock(vault, as: alice)
        _ = f.unlock(vault, as: alice)
        #expect(f.failures(of: alice) == 5)

        #expect(try f.recordPasscode(vault, as: alice, forged: true).exitCode == 10)
        // A replayed challenge, a proof for another purpose, a challenge never issued.
        let c = try f.challenge(as: alice)
        #expect(f.send(.recordPasscodeUnlock(proof: try vault.proof(.enroll, challenge: c)), as: alice).exitCode == 10)
        #expect(f.send(.recordPasscodeUnlock(proof: try vault.proof(.passcodeUnlock, challenge: c)), as: alice).exitCode == 10)
        #expect(f.send(.recordPasscodeUnlock(proof: try vault.proof(.passcodeUnlock, challenge: randomBytes(32))), as: alice).exitCode == 10)
        #expect(f.failures(of: alice) == 5)
        f.readers.set([.match])
        #expect(f.unlock(vault, as: alice).exitCode == 17)

        #expect(try f.recordPasscode(vault, as: alice).reply == .recorded(bound: true))
        #expect(f.failures(of: alice) == 0)
        #expect(f.unlock(vault, as: alice).reply == .key)
    }

    @Test func enrollingOnceBoundNeedsAProof() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        #expect(f.send(.enroll(finger: "left-index", sensor: nil, proof: nil, scanTimeout: 5), as: alice).exitCode == 10)
        let proof = try vault.proof(.enroll, challenge: try f.challenge(as: alice))
        guard case .enrolled(let finger) = f.send(.enroll(finger: "left-index", sensor: nil, proof: proof, scanTimeout: 5), as: alice).reply else {
            Issue.record("enrol with a proof failed"); return
        }
        #expect(finger.finger == "left-index")
        // The prints changed: the binding no longer opens (20) until the vault binds again.
        #expect(f.unlock(vault, as: alice).exitCode == 20)
    }

    @Test func testSettingsAreRefusedOutsideTestMode() throws {
        let f = try HandlerFixture(testMode: false)
        let r = f.send(.testSettings(bootID: "another-boot", now: 1), as: alice)
        #expect(r.exitCode == 2)
        #expect(r.error?.message.contains("--test-mode") == true)
        #expect(f.send(.ping, as: alice).reply == .pong(version: 1, testMode: false))
    }

    @Test func theRebootAndIntervalRulesUseTheUsersInjectedBootAndClock() throws {
        let f = try HandlerFixture(testMode: true, script: [.match])
        let vault = FakeVault()
        let strict = PasscodeRules(afterReboot: true, intervalHours: 48)
        #expect(f.send(.testSettings(bootID: "boot-1", now: 1_800_000_000), as: alice).reply == .done)
        _ = f.send(.enroll(finger: nil, sensor: nil, proof: nil, scanTimeout: 5), as: alice)
        _ = try f.bind(vault, as: alice, rules: strict)
        #expect(try f.recordPasscode(vault, as: alice).reply == .recorded(bound: true))
        #expect(f.unlock(vault, as: alice, rules: strict).reply == .key)

        // A reboot for Alice only.
        _ = f.send(.testSettings(bootID: "boot-2", now: 1_800_000_000), as: alice)
        let rebooted = f.unlock(vault, as: alice, rules: strict)
        #expect(rebooted.exitCode == 12)
        #expect(rebooted.error?.message.contains("first unlock since the machine started") == true)
        _ = try f.recordPasscode(vault, as: alice)
        #expect(f.unlock(vault, as: alice, rules: strict).reply == .key)

        // 49 hours later.
        _ = f.send(.testSettings(bootID: "boot-2", now: 1_800_000_000 + 49 * 3600), as: alice)
        #expect(f.unlock(vault, as: alice, rules: strict).error?.message.contains("48 h") == true)
    }

    @Test func aCancelEndsTheScanWithTheErrorItMeansAndTakesTheCountBack() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        let expected: [(ScanCancelReason, Int32, String)] = [
            (.fallback, 12, "you chose the passcode"), (.user, 11, "cancelled"), (.program, 18, "the scan was cancelled"),
        ]
        for (reason, code, message) in expected {
            f.readers.set([.waitForCancel])
            let session = ScanSession(uid: alice)
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { session.cancel(reason) }
            let r = f.send(.unlock(slot: vault.reference, rules: PasscodeRules(afterReboot: false, intervalHours: 0), prompt: "p", scanTimeout: 5),
                           as: alice, session: session)
            #expect(r.exitCode == code, "\(reason)")
            #expect(r.error?.message.contains(message) == true, "\(reason): \(String(describing: r.error))")
            #expect(f.failures(of: alice) == 0)
        }
    }

    @Test func aSecondScanWhileOneRunsIsBusyAndTheReaderIsFreeAfterward() throws {
        let f = try HandlerFixture(script: [.match], busyWait: 0.3)
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        _ = try f.enrolAndBind(vault, as: bob)
        f.readers.set([.waitForCancel, .match])
        let first = ScanSession(uid: alice)
        let done = DispatchSemaphore(value: 0)
        let before = f.readers.scans
        DispatchQueue.global().async {
            _ = f.send(.unlock(slot: vault.reference, rules: PasscodeRules(afterReboot: false, intervalHours: 0), prompt: "p", scanTimeout: 5),
                       as: alice, session: first)
            done.signal()
        }
        while f.readers.scans == before { Thread.sleep(forTimeInterval: 0.01) }
        let start = Date()
        let busy = f.unlock(vault, as: bob)
        #expect(busy.exitCode == 13)
        #expect(Date().timeIntervalSince(start) >= 0.25)
        #expect(f.failures(of: bob) == 0)
        // Bob's request that needs no reader is not held up.
        guard case .fingers(let fingers) = f.send(.fingers, as: bob).reply else { Issue.record("fingers"); return }
        #expect(fingers.count == 1)
        first.cancel(.program)
        done.wait()
        #expect(f.unlock(vault, as: bob).reply == .key)
    }
}
