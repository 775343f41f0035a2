import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

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
        #expect(opened.isKey)
        #expect(opened.slotKey == kek)
        #expect(stream.notices == [.touchReader(prompt: "touch the reader")])

        // No finger, a non-matching finger, a cancelled scan: never a key.
        for script: ScanScript in [.noMatch, .interrupt(.timedOut), .interrupt(.userCancelled)] {
            f.readers.set([script])
            let r = f.unlock(vault, as: alice)
            #expect(r.tail.isEmpty, "\(script)")
            #expect(!r.isKey)
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
        // A second binding under another key (a rotation, proven by the old key): a MAC under
        // each until the new key proves itself.
        let rotated = vault.withNewProofKey().at(slot: 4)
        _ = try f.bind(rotated, as: alice, provenBy: vault)
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
        #expect(bobOpens.isKey)
        #expect(bobOpens.slotKey == bobsKey)

        // Bob's passcode unlock of the same vault id resets his record, not Alice's lockout.
        #expect(try f.recordPasscode(bobsVault, as: bob).reply == .recorded(record: .owner))
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
        #expect(r.slotKey == second)
        #expect(f.unlock(rotated, as: alice).slotKey == third)
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

        #expect(try f.recordPasscode(vault, as: alice).reply == .recorded(record: .owner))
        #expect(f.failures(of: alice) == 0)
        #expect(f.unlock(vault, as: alice).isKey)
    }

    @Test func enrollingOnceBoundNeedsAProof() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        #expect(f.send(.enroll(finger: "left-index", sensor: nil, proof: nil, label: nil, scanTimeout: 5), as: alice).exitCode == 10)
        let proof = try vault.proof(.enroll, challenge: try f.challenge(as: alice), subject: Array("left-index".utf8))
        guard case .enrolled(let finger) = f.send(.enroll(finger: "left-index", sensor: nil, proof: proof, label: nil, scanTimeout: 5), as: alice).reply else {
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
        #expect(f.send(.ping, as: alice).reply == .pong(version: 2, testMode: false))
    }

    @Test func theRebootAndIntervalRulesUseTheUsersInjectedBootAndClock() throws {
        let f = try HandlerFixture(testMode: true, script: [.match])
        let vault = FakeVault()
        let strict = PasscodeRules(afterReboot: true, intervalHours: 48)
        #expect(f.send(.testSettings(bootID: "boot-1", now: 1_800_000_000), as: alice).reply == .done)
        _ = f.send(.enroll(finger: nil, sensor: nil, proof: nil, label: nil, scanTimeout: 5), as: alice)
        _ = try f.bind(vault, as: alice, rules: strict, confirm: ["right-index"])
        #expect(try f.recordPasscode(vault, as: alice).reply == .recorded(record: .owner))
        #expect(f.unlock(vault, as: alice, rules: strict).isKey)

        // A reboot for Alice only.
        _ = f.send(.testSettings(bootID: "boot-2", now: 1_800_000_000), as: alice)
        let rebooted = f.unlock(vault, as: alice, rules: strict)
        #expect(rebooted.exitCode == 12)
        #expect(rebooted.error?.message.contains("first unlock since the machine started") == true)
        _ = try f.recordPasscode(vault, as: alice)
        #expect(f.unlock(vault, as: alice, rules: strict).isKey)

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
            let session = ScanSession(uid: alice, hasAccount: true)
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { session.cancel(reason) }
            let r = f.send(.unlock(slot: vault.reference, rules: PasscodeRules(afterReboot: false, intervalHours: 0), prompt: "p", scanTimeout: 5),
                           as: alice, session: session)
            #expect(r.exitCode == code, "\(reason)")
            #expect(r.error?.message.contains(message) == true, "\(reason): \(String(describing: r.error))")
            #expect(f.failures(of: alice) == 0)
        }
    }

    @Test func aSecondScanWaitsItsTurnForAtMostItsScanTimeoutThenIsBusy() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault(), bobs = vault.withNewProofKey()
        _ = try f.enrolAndBind(vault, as: alice)
        _ = try f.enrolAndBind(bobs, as: bob)
        f.readers.set([.waitForCancel, .match])
        let first = ScanSession(uid: alice, hasAccount: true)
        let done = DispatchSemaphore(value: 0)
        let before = f.readers.scans
        DispatchQueue.global().async {
            _ = f.unlock(vault, as: alice, session: first)
            done.signal()
        }
        while f.readers.scans == before { Thread.sleep(forTimeInterval: 0.01) }
        // Bob waits in the queue, told so, for his own scan timeout (1 s), then is busy (13).
        let start = MonotonicClock.seconds()
        let stream = Stream()
        let busy = f.unlock(bobs, as: bob, stream: stream, scanTimeout: 1)
        #expect(busy.exitCode == 13, "\(busy.reply)")
        #expect(busy.error?.message.contains("in use by another request for 1 s") == true)
        #expect(MonotonicClock.seconds() - start >= 0.9)
        #expect(stream.notices == [.waitingForReader])
        #expect(f.failures(of: bob) == 0)
        // Bob's request that needs no reader is not held up.
        guard case .fingers(let fingers) = f.send(.fingers, as: bob).reply else { Issue.record("fingers"); return }
        #expect(fingers.count == 1)
        // One that may wait long enough gets the reader as soon as Alice's scan ends.
        let waited = Stream()
        let second = DispatchSemaphore(value: 0)
        let answer = Mutex<AuthorityReply?>(nil)
        DispatchQueue.global().async {
            let r = f.unlock(bobs, as: bob, stream: waited, scanTimeout: 20).reply
            answer.withLock { $0 = r }
            second.signal()
        }
        while waited.notices.isEmpty { Thread.sleep(forTimeInterval: 0.01) }
        first.cancel(.program)
        done.wait()
        #expect(second.wait(timeout: .now() + 10) == .success)
        #expect({ if case .key? = answer.withLock({ $0 }) { true } else { false } }())
        #expect(waited.notices == [.waitingForReader, .touchReader(prompt: "touch the reader")])
    }

    @Test func waitersGetTheReaderFirstComeFirstServed() throws {
        let f = try HandlerFixture(script: [.match])
        let uids: [UInt32] = [alice, bob, 1003, 1004]
        // The same vault id in each user's copy; each has its own binding and slot key.
        let base = FakeVault()
        let vaults = Dictionary(uniqueKeysWithValues: uids.map { ($0, $0 == alice ? base : base.withNewProofKey()) })
        for uid in uids { _ = try f.enrolAndBind(vaults[uid]!, as: uid) }
        let vault = base
        f.readers.set([.waitForCancel, .match])
        let holder = ScanSession(uid: alice, hasAccount: true)
        let group = DispatchGroup()
        let before = f.readers.scans
        DispatchQueue.global().async(group: group) { _ = f.unlock(vault, as: alice, session: holder) }
        while f.readers.scans == before { Thread.sleep(forTimeInterval: 0.01) }
        // Three more queue up in a known order (each is queued before the next asks).
        let order = Mutex<[UInt32]>([])
        for uid in uids.dropFirst() {
            let stream = Stream()
            DispatchQueue.global().async(group: group) {
                let r = f.unlock(vaults[uid]!, as: uid, stream: stream, scanTimeout: 20)
                #expect(r.isKey, "\(uid)")
                order.withLock { $0.append(uid) }
            }
            while stream.notices.isEmpty { Thread.sleep(forTimeInterval: 0.01) }
        }
        holder.cancel(.program)
        #expect(group.wait(timeout: .now() + 20) == .success)
        #expect(order.withLock { $0 } == Array(uids.dropFirst()))
    }

    @Test func aScanTimeoutIsClampedTo30SecondsBeforeTheReaderSeesIt() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: alice)
        #expect(f.unlock(vault, as: alice, scanTimeout: 300).isKey)
        #expect(f.unlock(vault, as: alice, scanTimeout: 12).isKey)
        #expect(f.readers.timeouts == [30, 12])
    }
}
