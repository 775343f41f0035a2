import Foundation
import Synchronization
import Testing
@testable import VaultKit
import VaultSystem

/// A reader that answers every scan with `answer` (an index into the prints, or nil for no match),
/// or throws `interruption`, and counts the scans. Its enrolment returns a fixed fake print.
private final class ScriptedReader: FingerprintReader {
    let identity: SensorIdentity
    var answer: Int?
    var interruption: ScanInterruption?
    private(set) var scans = 0
    init(identity: SensorIdentity, answer: Int?) {
        self.identity = identity
        self.answer = answer
    }
    func chipPrints() throws -> [String] { [] }
    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        scans += 1
        if let interruption { throw interruption }
        return answer
    }
    func enroll(finger: String) throws -> [UInt8] { Array("FP3 fake print \(finger)".utf8) }
    func deletePrint(_ data: [UInt8]) throws {}
}

/// A clock the test moves.
private final class TestClock: Sendable {
    private let seconds: Mutex<Int64>
    init(_ start: Int64) { seconds = Mutex(start) }
    var now: Int64 { seconds.withLock { $0 } }
    func advance(hours: Int64, seconds extra: Int64 = 0) { seconds.withLock { $0 += hours * 3600 + extra } }
}

private let sensor = SensorIdentity(driver: "virtual_device", deviceID: "0")
private let passcodeText = "pass code 1"

private func isPasscodeNeeded(_ e: VaultError?) -> Bool {
    if case .passcodeNeeded = e { return true }
    return false
}

/// One vault, bound through an embedded authority to one enrolled (fake) print.
@Suite struct AuthContextTests {
    let root = TempRoot()
    /// This test's own challenges: the process-wide book is purged by other tests' clocks.
    let book = ChallengeBook()
    var stateFolder: String { root.path + "/state/vault" }

    /// Creates the vault, enrols a print through an authority with `bootID` and `clock` (whose
    /// reader is `reader`), binds the vault, and records the passcode unlock `vault init` records.
    fileprivate func boundVault(bootID: String, clock: TestClock, reader: ScriptedReader? = nil) throws -> VaultStore {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        try created.vault.add(Item(name: "gh", password: "pw"))
        let authority = try authority(bootID: bootID, clock: clock, reader: reader ?? ScriptedReader(identity: sensor, answer: 0))
        _ = try authority.enroll(finger: "right-index", sensor: sensor, proof: nil, label: nil)
        try created.vault.bindFingerprint(authority: authority, sensor: sensor, confirm: ["right-index"])
        #expect(authority.recordUnlock(of: created.vault) == .owner)
        return try VaultStore.open(try root.location())
    }

    fileprivate func authority(bootID: String, clock: TestClock, reader: ScriptedReader? = nil) throws -> EmbeddedKeyAuthority {
        try EmbeddedKeyAuthority(folder: stateFolder, bootID: bootID, clock: { clock.now }, challenges: book, openReader: { _ in
            guard let reader else { throw VaultError.biometryNotAvailable("no reader in this test") }
            return reader
        })
    }

    /// An authority whose reader must not be opened.
    fileprivate func authorityThatMustNotScan(bootID: String, clock: TestClock, sourceLocation: SourceLocation = #_sourceLocation) throws -> EmbeddedKeyAuthority {
        try EmbeddedKeyAuthority(folder: stateFolder, bootID: bootID, clock: { clock.now }, challenges: book, openReader: { _ in
            Issue.record("the reader was opened although the passcode is required", sourceLocation: sourceLocation)
            return ScriptedReader(identity: sensor, answer: 0)
        })
    }

    /// A context over `authority` that can read `passcode` (nil: none).
    fileprivate func context(_ authority: any KeyAuthority, passcode: String? = nil, policy: AuthPolicy = .biometricsOrPasscode,
                             clock: TestClock? = nil) -> AuthContext {
        AuthContext(authority: authority, policy: policy,
                    readPasscode: { _ in
                        guard let passcode else { return nil }
                        return try secret(passcode)
                    }, say: { _ in }, clock: { clock?.now ?? unixNow() })
    }

    fileprivate func failures(_ authority: EmbeddedKeyAuthority) throws -> Int {
        try authority.status(slot: nil, sensor: nil, rules: PasscodeRules()).failedMatches
    }

    @Test func theFingerOpensTheVaultOnTheSameBootWithinTheInterval() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        clock.advance(hours: 47)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let vault = try context(try authority(bootID: "boot-1", clock: clock, reader: reader), clock: clock).unlock(store)
        #expect(try vault.item(named: "gh").password == "pw")
        #expect(reader.scans == 1)
        #expect(vault.authentication == .fingerprint(at: clock.now))
    }

    @Test func theFirstUnlockAfterARebootNeedsThePasscode() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        clock.advance(hours: 0, seconds: 60)
        for policy in AuthPolicy.allCases {
            let rebooted = try authorityThatMustNotScan(bootID: "boot-2", clock: clock)
            let error = #expect(throws: VaultError.self) { try context(rebooted, policy: policy).unlock(store) }
            #expect(isPasscodeNeeded(error), "\(policy): \(String(describing: error))")
        }

        // The passcode given: it opens, and the new boot is recorded, so the finger is back.
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let rebooted = try authority(bootID: "boot-2", clock: clock, reader: reader)
        let opened = try context(rebooted, passcode: passcodeText).unlock(store)
        #expect(try opened.item(named: "gh").password == "pw")
        #expect(opened.authentication == .passcode)
        #expect(reader.scans == 0, "the passcode, not the finger, opened it")
        _ = try context(rebooted).unlock(store)
        #expect(reader.scans == 1)
    }

    @Test func theRebootRuleCanBeSwitchedOffByRebindingWithLooserRules() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        var settings = try store.settings()
        settings.passcodeAfterReboot = false
        try store.setSettings(settings)
        // The binding keeps the rules it was made with: a request cannot loosen them.
        let error = #expect(throws: VaultError.self) { try context(try authorityThatMustNotScan(bootID: "boot-3", clock: clock)).unlock(store) }
        #expect(isPasscodeNeeded(error))
        // A new binding (what `vault settings` does after the passcode) carries the new rules.
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        try authority.unlock(store, passcode: try secret(passcodeText)).bindFingerprint(authority: authority, sensor: sensor)
        let rebooted = try self.authority(bootID: "boot-3", clock: clock, reader: reader)
        _ = try context(rebooted).unlock(try VaultStore.open(try root.location()))
        #expect(reader.scans == 1)
    }

    @Test func fortyEightHoursWithoutThePasscodeNeedThePasscode() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        clock.advance(hours: 48)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        _ = try context(try authority(bootID: "boot-1", clock: clock, reader: reader)).unlock(store)
        #expect(reader.scans == 1, "exactly 48 h is still within")
        clock.advance(hours: 0, seconds: 1)
        let error = #expect(throws: VaultError.self) { try context(try authorityThatMustNotScan(bootID: "boot-1", clock: clock)).unlock(store) }
        #expect(isPasscodeNeeded(error), "\(String(describing: error))")

        // A passcode unlock starts the interval again.
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        _ = try context(authority, passcode: passcodeText).unlock(store)
        _ = try context(authority).unlock(store)
        #expect(reader.scans == 2)
    }

    @Test func fiveFailedMatchesLockOutUntilAPasscodeUnlock() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let stranger = ScriptedReader(identity: sensor, answer: nil)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: stranger)
        #expect(throws: VaultError.authenticationFailed("3 fingers did not match")) { try context(authority).unlock(store) }
        #expect(stranger.scans == 3)
        #expect(try failures(authority) == 3)
        // Two more: the fifth failure ends the evaluation with the lockout.
        #expect(throws: VaultError.biometryLockout) { try context(authority, policy: .biometrics).unlock(store) }
        #expect(stranger.scans == 5)
        // Another instance (another process) sees the same record, and never scans.
        for policy in AuthPolicy.allCases {
            let other = try authorityThatMustNotScan(bootID: "boot-1", clock: clock)
            #expect(try failures(authority) == 5)
            #expect(throws: VaultError.biometryLockout) { try context(other, policy: policy).unlock(store) }
        }
        // A passcode unlock lifts it.
        _ = try authority.unlock(store, passcode: try secret(passcodeText))
        #expect(try failures(authority) == 0)
        stranger.answer = 0
        _ = try context(authority).unlock(store)
    }

    @Test func aForgedOrReplayedProofLeavesTheLockoutInPlace() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let stranger = ScriptedReader(identity: sensor, answer: nil)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: stranger)
        _ = try? context(authority).unlock(store)
        _ = try? context(authority, policy: .biometrics).unlock(store)
        #expect(try failures(authority) == 5)

        // A bare request, a MAC under the wrong key, and a proof for another purpose all fail.
        var forged = AuthorityProof(vaultID: store.vaultID, challenge: try authority.challenge(), mac: Array(repeating: 0, count: 32))
        #expect(throws: VaultError.self) { try authority.recordPasscodeUnlock(forged) }
        let wrongKey = try SecretBytes.random(count: 32)
        let challenge = try authority.challenge()
        forged.challenge = challenge
        forged.mac = try AuthorityProofMAC.mac(key: wrongKey, purpose: .passcodeUnlock, vaultID: store.vaultID, challenge: challenge)
        #expect(throws: VaultError.self) { try authority.recordPasscodeUnlock(forged) }
        let vault = try store.unlock(passcode: try secret(passcodeText))  // the key, without recording
        let enrolProof = try vault.proof(.enroll, for: authority)
        #expect(throws: VaultError.self) { try authority.recordPasscodeUnlock(enrolProof) }
        // A valid proof works once; replaying its challenge does not.
        let good = try vault.proof(.passcodeUnlock, for: authority)
        #expect(try failures(authority) == 5)
        #expect(try authority.recordPasscodeUnlock(good) == .owner)
        #expect(try failures(authority) == 0)
        _ = try? context(authority).unlock(store)
        _ = try? context(authority, policy: .biometrics).unlock(store)
        #expect(try failures(authority) == 5)
        #expect(throws: VaultError.self) { try authority.recordPasscodeUnlock(good) }
        #expect(try failures(authority) == 5)
        // A vault never bound here proves nothing.
        let otherRoot = TempRoot()
        let other = try VaultStore.create(at: try otherRoot.location(), passcode: try secret("other pass"), kdf: fastKDF)
        #expect(try authority.recordPasscodeUnlock(try other.vault.proof(.passcodeUnlock, for: authority)) == .notBound)
        #expect(try failures(authority) == 5)
    }

    /// A passcode unlock that leaves the lockout record as it was writes nothing (no sealed file
    /// replaced, no fsync); one with something to record (failures to clear, a clock to restart)
    /// writes it, and what it wrote is what is read back.
    @Test func anUnchangedRecordIsNotRewritten() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        let vault = try store.unlock(passcode: try secret(passcodeText))
        let path = stateFolder + "/auth.sealed"
        let written = try Data(contentsOf: URL(fileURLWithPath: path))
        // The same second, nothing to clear: the file is not replaced (same bytes, same inode).
        let inode = try FileStatus.of(path).inode
        #expect(try authority.recordPasscodeUnlock(try vault.proof(.passcodeUnlock, for: authority)) == .owner)
        #expect(try FileStatus.of(path).inode == inode)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == written)
        // A vault not bound here, with no failures counted: nothing to write either.
        let otherRoot = TempRoot()
        let other = try VaultStore.create(at: try otherRoot.location(), passcode: try secret("other pass"), kdf: fastKDF)
        #expect(try authority.recordPasscodeUnlock(try other.vault.proof(.passcodeUnlock, for: authority)) == .notBound)
        #expect(try FileStatus.of(path).inode == inode)
        // A failure counted for it, then its unlock clears it: two writes.
        try authority.recordPasscodeFailure(vaultID: other.vault.store.vaultID)
        let counted = try FileStatus.of(path).inode
        #expect(counted != inode)
        #expect(try authority.beginPasscodeAttempt(vaultID: other.vault.store.vaultID) == passcodeDelay(afterFailures: 1))
        #expect(try authority.recordPasscodeUnlock(try other.vault.proof(.passcodeUnlock, for: authority)) == .notBound)
        #expect(try FileStatus.of(path).inode != counted)
        #expect(try authority.beginPasscodeAttempt(vaultID: other.vault.store.vaultID) == 0)
        // A second later the owner's clock moves: written.
        clock.advance(hours: 0, seconds: 1)
        let before = try FileStatus.of(path).inode
        #expect(try authority.recordPasscodeUnlock(try vault.proof(.passcodeUnlock, for: authority)) == .owner)
        #expect(try FileStatus.of(path).inode != before)
    }

    @Test func aNewBindingNeverReissuesAnOldKey() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        let vault = try store.unlock(passcode: try secret(passcodeText))
        let proofKey = try vault.proofKey()
        let ref = SlotReference(vaultID: store.vaultID, slotID: 999)
        func request() throws -> BindRequest {
            BindRequest(slot: ref, sensor: sensor, rules: PasscodeRules(),
                        proof: try vault.proof(.bind, for: authority, subject: try BindRequest.subject(slot: ref, proofKey: proofKey, confirm: [])))
        }
        let first = try authority.bind(try request(), proofKey: proofKey)
        let second = try authority.bind(try request(), proofKey: proofKey)
        let different = !first.kek.isEqual(to: second.kek)
        #expect(different, "binding again makes a new key")
        // The key of the newest binding comes back only through a match.
        let secondRef = SlotReference(vaultID: store.vaultID, slotID: 999, keyID: second.binding.keyID)
        let released = try authority.unlock(secondRef, rules: PasscodeRules(), prompt: "touch", events: { _ in })
        let same = released.kek.isEqual(to: second.kek)
        #expect(same)
        #expect(reader.scans == 1)
        reader.answer = nil
        #expect(throws: RetryLimitExceeded.self) { _ = try authority.unlock(secondRef, rules: PasscodeRules(), prompt: "touch", events: { _ in }) }
        // An unknown slot (a slot the authority never bound) is a changed binding, not a key.
        #expect(throws: VaultError.domainStateChanged) {
            _ = try authority.unlock(SlotReference(vaultID: store.vaultID, slotID: 12345), rules: PasscodeRules(), prompt: "t", events: { _ in })
        }
    }

    @Test func enrollingOnceAVaultIsBoundNeedsItsProof() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        #expect(throws: VaultError.self) { _ = try authority.enroll(finger: "left-index", sensor: sensor, proof: nil, label: nil) }
        let vault = try store.unlock(passcode: try secret(passcodeText))
        // A proof for another finger than the one asked for proves nothing.
        #expect(throws: VaultError.self) {
            _ = try authority.enroll(finger: "left-index", sensor: sensor, proof: try vault.proof(.enroll, for: authority, subject: Array("right-ring".utf8)), label: nil)
        }
        let done = try authority.enroll(finger: nil, sensor: sensor, proof: try vault.proof(.enroll, for: authority), label: "default")
        #expect(done.finger == "left-index", "the first free finger in the usual order")
        #expect(try authority.fingers().map(\.finger) == ["right-index", "left-index"])
        // The prints changed: the old binding no longer opens the vault.
        #expect(throws: VaultError.domainStateChanged) { try context(authority).unlock(store) }
        #expect(throws: VaultError.self) {
            _ = try authority.unenroll(finger: "left-index", proof: try vault.proof(.enroll, for: authority, subject: Array("left-index".utf8)), label: nil)
        }
        #expect(throws: VaultError.self) { _ = try authority.unenroll(finger: "left-index", proof: nil, label: nil) }
        #expect(try authority.unenroll(finger: "left-index", proof: try vault.proof(.unenroll, for: authority, subject: Array("left-index".utf8)),
                                       label: nil).count == 1)
    }

    @Test func aFailedMatchThatCannotBeRecordedGetsNoScan() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let stranger = ScriptedReader(identity: sensor, answer: nil)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: stranger)
        // The state folder read-only: no failure can be written, so no scan happens (fail closed).
        chmod(stateFolder, 0o500)
        defer { chmod(stateFolder, 0o700) }
        guard getuid() != 0 else {
            // root writes through the mode bits; replace the auth record by a folder instead.
            chmod(stateFolder, 0o700)
            try? FileManager.default.removeItem(atPath: stateFolder + "/auth.sealed")
            try FileManager.default.createDirectory(atPath: stateFolder + "/auth.sealed", withIntermediateDirectories: false)
            defer { try? FileManager.default.removeItem(atPath: stateFolder + "/auth.sealed") }
            #expect(throws: VaultError.self) { try context(authority, policy: .biometrics).unlock(store) }
            #expect(stranger.scans == 0)
            return
        }
        #expect(throws: VaultError.self) { try context(authority, policy: .biometrics).unlock(store) }
        #expect(stranger.scans == 0)
    }

    @Test func aScanInterruptionIsNotAFailedMatch() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let reader = ScriptedReader(identity: sensor, answer: nil)
        reader.interruption = .userCancelled
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        #expect(throws: VaultError.userCancel) { try context(authority, policy: .biometrics).unlock(store) }
        reader.interruption = .retry(advice: "center your finger")
        var said: [String] = []
        let ctx = AuthContext(authority: authority, policy: .biometrics, readPasscode: { _ in nil }, say: { said.append($0) })
        #expect(throws: VaultError.authenticationFailed("3 fingers did not match")) { try ctx.unlock(store) }
        #expect(said.first == "vault: center your finger (2 tries left)")
        #expect(try failures(authority) == 0)
    }

    @Test func freshMatchesAreReusedOnlyWithinTheWindow() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        let vault = try authority.unlock(store, passcode: try secret(passcodeText))
        try vault.add(Item(name: "guarded", password: "g-pw", fingerprintLogin: true))
        func match(reuse: Int = 0, unlocked: UnlockedVault? = nil, matchedAt: Int64? = nil) throws -> FreshMatchToken {
            try context(authority, clock: clock).requireFreshMatch(store, nonce: try vault.freshMatchNonce(for: .release(item: "guarded")),
                                                                   unlocked: unlocked, matchedAt: matchedAt, reuse: reuse, prompt: "log in")
        }
        let first = try match()
        #expect(reader.scans == 1 && first.reusedAge == nil)
        #expect(try vault.release(named: "guarded", fields: .fields([.password]), command: "login", freshMatch: first).password == "g-pw")
        clock.advance(hours: 0, seconds: 100)
        let reused = try match(reuse: 120)
        #expect(reader.scans == 1, "a match 100 s old counts with --reuse 120")
        #expect(reused.reusedAge == 100)
        #expect(try vault.release(named: "guarded", fields: .fields([.password]), command: "login", freshMatch: reused).password == "g-pw")
        _ = try match(reuse: 60)
        #expect(reader.scans == 2)
        // A vault this very command unlocked by a finger asks no second time: the authority
        // reuses that match (its own record), for as long as the command has had it.
        let unlocked = try context(authority, clock: clock).unlock(store)
        #expect(reader.scans == 3)
        clock.advance(hours: 0, seconds: 20)
        let own = try context(authority, clock: clock).requireFreshMatch(store, nonce: try unlocked.freshMatchNonce(for: .release(item: "guarded")),
                                                                         unlocked: unlocked, prompt: "log in")
        #expect(reader.scans == 3 && own.reusedAge == 20)
        #expect(try unlocked.release(named: "guarded", fields: .fields([.password]), command: "login", freshMatch: own).password == "g-pw")
        // So does a match the command had verified before (`matchedAt`); one older than 300 s does not.
        _ = try match(matchedAt: clock.now - 20)
        #expect(reader.scans == 3)
        clock.advance(hours: 0, seconds: 301)
        _ = try match(matchedAt: clock.now - 301)
        #expect(reader.scans == 4)
    }

    /// The token of a fresh match is checked by the vault itself: issued by this vault for this
    /// use, used once, within its lifetime, MAC'd under the vault's proof key.
    @Test func aFreshMatchTokenServesOneUseOfOneItemOnceAndCannotBeForged() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        let vault = try authority.unlock(store, passcode: try secret(passcodeText))
        try vault.add(Item(name: "guarded", password: "g-pw", fingerprintLogin: true))
        try vault.add(Item(name: "other", password: "o-pw", fingerprintLogin: true))
        let slot = try #require(try store.fingerprintSlot()).reference
        let seconds = Mutex(0.0)
        vault.freshMatches.clock = { seconds.withLock { $0 } }
        func token(_ purpose: FreshMatchPurpose, of v: UnlockedVault? = nil) throws -> FreshMatchToken {
            try authority.verify(slot, nonce: try (v ?? vault).freshMatchNonce(for: purpose), reuse: 0, prompt: "touch", events: { _ in })
        }
        func refused(_ t: FreshMatchToken?, _ item: String = "guarded", sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(throws: VaultError.freshMatchNeeded(item: item), sourceLocation: sourceLocation) {
                _ = try vault.releaseSecret(named: item, field: .password, command: "get", freshMatch: t)
            }
        }
        let before = try vault.auditRecords().count
        refused(nil)
        // Of another item, of the switch, for the whole vault: not this release.
        refused(try token(.release(item: "other")))
        refused(try token(.fingerprintLoginSwitch(item: "guarded")))
        refused(try token(.releaseAll))
        // Forged: a MAC under another key, a flipped MAC, a claimed age the MAC does not cover.
        var forged = try token(.release(item: "guarded"))
        forged.macs = [randomBytes(32)]
        refused(forged)
        var flipped = try token(.release(item: "guarded"))
        flipped.macs[0][0] ^= 1
        refused(flipped)
        var aged = try token(.release(item: "guarded"))
        aged.reusedAge = 0
        refused(aged)
        // Made by the authority over a nonce this vault never issued (another unlock's).
        let elsewhere = try authority.unlock(try VaultStore.open(try root.location()), passcode: try secret(passcodeText))
        refused(try token(.release(item: "guarded"), of: elsewhere))
        // Too old: the nonce lived past its minute.
        let late = try token(.release(item: "guarded"))
        seconds.withLock { $0 += FreshMatchBook.lifetime + 1 }
        refused(late)
        #expect(try vault.auditRecords().count == before, "a refused release is not logged")
        // A valid one releases once, and only once.
        let good = try token(.release(item: "guarded"))
        #expect(Array(try vault.releaseSecret(named: "guarded", field: .password, command: "get", freshMatch: good).exposedBytes()) == Array("g-pw".utf8))
        refused(good)
        #expect(try vault.auditRecords().count == before + 1)
        // A bounded book: nonces asked for in a loop push the oldest out.
        let kept = try token(.release(item: "guarded"))
        for _ in 0..<vault.freshMatches.capacity { _ = try vault.freshMatchNonce(for: .release(item: "other")) }
        #expect(vault.freshMatches.outstanding == vault.freshMatches.capacity)
        refused(kept)
    }

    /// Turning fingerprint login off is an update like another, and only a token for this item's
    /// switch lets it through; turning it on, or any other change, needs none.
    @Test func turningFingerprintLoginOffNeedsATokenForThatSwitch() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        let vault = try authority.unlock(store, passcode: try secret(passcodeText))
        try vault.add(Item(name: "guarded", password: "g-pw", fingerprintLogin: true))
        let slot = try #require(try store.fingerprintSlot()).reference
        func token(_ purpose: FreshMatchPurpose) throws -> FreshMatchToken {
            try authority.verify(slot, nonce: try vault.freshMatchNonce(for: purpose), reuse: 0, prompt: "touch", events: { _ in })
        }
        var off = ItemChange()
        off.fingerprintLogin = false
        off.username = "changed"
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) { try vault.update("guarded", off) }
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) { try vault.update("guarded", off, freshMatch: try token(.release(item: "guarded"))) }
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) {
            try vault.update("guarded") { $0.fingerprintLogin = false }
        }
        #expect(try vault.item(named: "guarded").fingerprintLogin && vault.item(named: "guarded").username == nil, "nothing changed")
        var other = ItemChange()
        other.username = "u"
        try vault.update("guarded", other)
        #expect(try vault.item(named: "guarded").username == "u")
        let t = try token(.fingerprintLoginSwitch(item: "guarded"))
        try vault.update("guarded", off, freshMatch: t)
        #expect(try !vault.item(named: "guarded").fingerprintLogin)
        var on = ItemChange()
        on.fingerprintLogin = true
        try vault.update("guarded", on)
        #expect(try vault.item(named: "guarded").fingerprintLogin)
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) { try vault.update("guarded", off, freshMatch: t) }
    }

    /// After a rotation the authority may hold the old binding's proof key beside the new one:
    /// the token carries a MAC under each, and the vault finds its own.
    @Test func aTokenCarriesOneMACPerProofKeyOfTheVault() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        let old = try authority.unlock(store, passcode: try secret(passcodeText))
        let rotation = try old.rotate(passcode: try secret(passcodeText), kdf: fastKDF, recovery: .keep, authority: authority)
        #expect(rotation.fingerprintBound)
        let vault = rotation.vault
        try vault.add(Item(name: "guarded", password: "g-pw", fingerprintLogin: true))
        let slot = try #require(try vault.store.fingerprintSlot()).reference
        let token = try authority.verify(slot, nonce: try vault.freshMatchNonce(for: .release(item: "guarded")), reuse: 0, prompt: "touch", events: { _ in })
        #expect(token.macs.count == 2, "the binding before the rotation and the one after")
        #expect(try vault.release(named: "guarded", fields: .fields([.password]), command: "get", freshMatch: token).password == "g-pw")
    }

    @Test func anAlteredOrTruncatedLockoutRecordReadsAsLockedOut() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let path = stateFolder + "/auth.sealed"
        let original = try Data(contentsOf: URL(fileURLWithPath: path))
        func put(_ data: Data) throws {
            try data.write(to: URL(fileURLWithPath: path))
            chmod(path, 0o600)
        }
        var altered = original
        altered[altered.count - 1] ^= 0x01
        try put(altered)
        #expect(throws: VaultError.biometryLockout) { try context(try authorityThatMustNotScan(bootID: "boot-1", clock: clock)).unlock(store) }

        try put(original.prefix(10))
        #expect(throws: VaultError.biometryLockout) { try context(try authorityThatMustNotScan(bootID: "boot-1", clock: clock)).unlock(store) }

        // Deleting the record does not give the finger back without the passcode either.
        try FileManager.default.removeItem(atPath: path)
        let error = #expect(throws: VaultError.self) { try context(try authorityThatMustNotScan(bootID: "boot-1", clock: clock)).unlock(store) }
        #expect(isPasscodeNeeded(error))

        // The passcode writes a fresh, authentic record.
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        _ = try authority.unlock(store, passcode: try secret(passcodeText))
        _ = try context(authority).unlock(store)
        #expect(reader.scans == 1)
    }

    @Test func aDamagedSettingsRowIsAnErrorNotTheDefaults() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        var s = VaultSettings()
        s.policy = .biometrics
        try created.vault.store.setSettings(s)
        try created.vault.store.db.query("UPDATE meta SET value=? WHERE key='settings'", [.blob(Array("{\"policy\":7".utf8))])
        #expect(throws: VaultError.settingsDamaged(vault: "default")) { _ = try created.vault.store.settings() }
        #expect(VaultError.settingsDamaged(vault: "default").exitCode == 5)
    }

    @Test func tamperedKDFParametersAreRefusedBeforeDeriving() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        let store = created.vault.store
        let slot = try #require(try store.slot(.passcode))
        var p = try slot.passcodeParameters()
        p.operations = Int(UInt32.max)
        try store.db.query("UPDATE slots SET params=? WHERE id=?", [.blob(Array(try JSONEncoder().encode(p))), .integer(slot.id)])
        let started = Date()
        #expect(throws: VaultError.self) { _ = try store.unlock(passcode: try secret(passcodeText)) }
        #expect(Date().timeIntervalSince(started) < 5, "refused before running Argon2id")
        do {
            _ = try store.unlock(passcode: try secret(passcodeText))
        } catch let e as VaultError {
            #expect(e.exitCode == 5, "\(e)")
        }
    }

    @Test func anArbitraryKeyIsNotAdopted() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        let store = try VaultStore.open(try root.location())
        #expect(throws: VaultError.self) { _ = try store.adopt(masterKey: try SecretBytes.random(count: 32), generation: 1) }
        let key = try created.vault.masterKey.duplicate()
        #expect(try store.adopt(masterKey: key, generation: 1).generation == 1)
    }

    @Test func anItemWithFingerprintLoginIsReleasedOnlyWithAFreshMatch() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        let vault = created.vault
        try vault.add(Item(name: "guarded", username: "u", password: "pw", fingerprintLogin: true))
        try vault.add(Item(name: "plain", password: "pw2"))
        let peer = Requester(uid: 4242, pid: 77)
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) {
            _ = try vault.releaseSecrets(named: "guarded", fields: .fields([.password]), command: "get", to: peer).item()
        }
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) { try vault.releaseEach(command: "export", to: peer) { _ in } }
        #expect(try vault.auditRecords().isEmpty, "a refused release is not logged")
        // A field that is not secret needs no touch; with the match, the password comes out.
        #expect(try vault.releaseSecrets(named: "guarded", fields: .fields([.username]), command: "get", to: peer).item().password == nil)
        let token = try vault.tokenOfItsOwnProofKey(for: .release(item: "guarded"))
        #expect(try vault.releaseSecrets(named: "guarded", fields: .fields([.password]), command: "get", to: peer, freshMatch: token).item().password == "pw")
        #expect(try vault.releaseSecrets(named: "plain", fields: .fields([.password]), command: "get", to: peer).item().password == "pw2")
        let records = try vault.auditRecords().compactMap { try? $0.get() }
        #expect(records.map(\.item) == ["guarded", "guarded", "plain"] && records.allSatisfy { $0.uid == 4242 && $0.pid == 77 })
    }


    @Test func wrongPasscodesGrowTheWaitBeforeTheNextTryUntilOneIsRight() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        var waits: [Int] = []
        func attempt(_ text: String) -> Bool {
            (try? authority.unlock(store, passcode: try secret(text), waiting: { waits.append($0) })) != nil
        }
        for _ in 1...6 { #expect(!attempt("wrong guess")) }
        #expect(waits == [1, 2, 4], "no wait for the first three, then 1, 2, 4 s (the clock does not move)")
        // Another process sees the same count; the time waited counts towards the next wait.
        // (The last try counts from when its own 4 s wait ended.)
        clock.advance(hours: 0, seconds: 12)
        let other = try self.authority(bootID: "boot-1", clock: clock)
        _ = try? other.unlock(store, passcode: try secret("wrong again"), waiting: { waits.append($0) })
        #expect(waits == [1, 2, 4], "8 s after the last try: the 8 s wait is over")
        // The right passcode (after its wait) clears the count.
        #expect(attempt(passcodeText))
        waits.removeAll()
        for _ in 1...3 { #expect(!attempt("wrong guess")) }
        #expect(waits.isEmpty)
        #expect(passcodeDelay(afterFailures: 100) == 30)
    }

}

/// The authority believes no caller: what code running as the user can send it (a bind of an
/// invented vault, proofs under keys it chose, a captured slot key) changes nothing of the
/// owner's vaults. The daemon hosts this same authority per uid; RootAttackTests sends the same
/// requests to the real daemon as an ordinary user.
extension AuthContextTests {
    /// An attacker's vault: an id and a key it made itself, bound through the same authority.
    fileprivate func inventedVault(_ authority: EmbeddedKeyAuthority) throws -> (ref: SlotReference, key: [UInt8], owner: Bool) {
        let ref = SlotReference(vaultID: randomBytes(16), slotID: 1)
        let key = try SecretBytes.random(count: 32)
        let grant = try authority.bind(BindRequest(slot: ref, sensor: sensor, rules: PasscodeRules()), proofKey: key)
        return (ref, key.exposedBytes(), grant.owner)
    }

    fileprivate func isFinger(_ vault: UnlockedVault) -> Bool {
        if case .fingerprint = vault.authentication { return true }
        return false
    }

    fileprivate func proof(_ purpose: ProofPurpose, _ vaultID: [UInt8], key: borrowing SecretBytes, subject: [UInt8] = [],
                           _ authority: EmbeddedKeyAuthority) throws -> AuthorityProof {
        let c = try authority.challenge()
        return AuthorityProof(vaultID: vaultID, challenge: c,
                              mac: try AuthorityProofMAC.mac(key: key, purpose: purpose, vaultID: vaultID, challenge: c, subject: subject))
    }

    @Test func anInventedVaultIsNotAnOwnerAndItsProofsChangeNothingOfTheOwners() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let reader = ScriptedReader(identity: sensor, answer: nil)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        // Lock the owner out.
        _ = try? context(authority, policy: .biometrics).unlock(store)
        _ = try? context(authority, policy: .biometrics).unlock(store)
        #expect(try failures(authority) == 5)

        let (ref, keyBytes, owner) = try inventedVault(authority)
        #expect(!owner)
        let key = try SecretBytes(copying: keyBytes)
        // Its passcode record restarts its own clock only: the lockout stays.
        #expect(try authority.recordPasscodeUnlock(try proof(.passcodeUnlock, ref.vaultID, key: key, authority)) == .vault)
        #expect(try failures(authority) == 5)
        // It enrols nothing, removes nothing, resets nothing.
        #expect(throws: VaultError.self) {
            _ = try authority.enroll(finger: "left-thumb", sensor: sensor,
                                     proof: try proof(.enroll, ref.vaultID, key: key, subject: Array("left-thumb".utf8), authority), label: "evil")
        }
        #expect(throws: VaultError.self) {
            _ = try authority.unenroll(finger: "right-index",
                                       proof: try proof(.unenroll, ref.vaultID, key: key, subject: Array("right-index".utf8), authority), label: nil)
        }
        #expect(throws: VaultError.self) { try authority.resetPrints(proof: try proof(.resetPrints, ref.vaultID, key: key, authority)) }
        #expect(throws: VaultError.self) { try authority.resetPrints(proof: nil) }
        #expect(try authority.fingers().map(\.finger) == ["right-index"])
        // The owner's passcode lifts it and the owner's finger opens again, with its binding intact.
        _ = try authority.unlock(store, passcode: try secret(passcodeText))
        #expect(try failures(authority) == 0)
        reader.answer = 0
        #expect(try context(authority, policy: .biometrics).unlock(store).authentication != nil)
    }

    @Test func nobodyButTheVaultsKeyHolderBindsItsSlotsAndThePasscodeAndRecoveryKeyAlwaysOpen() throws {
        let clock = TestClock(1_800_000_000)
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        let recovery = created.recoveryKey
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        _ = try authority.enroll(finger: "right-index", sensor: sensor, proof: nil, label: nil)
        try created.vault.bindFingerprint(authority: authority, sensor: sensor, confirm: ["right-index"])
        let store = try VaultStore.open(try root.location())
        let live = try #require(try store.fingerprintSlot()).reference
        // The live slot id, and three spare slots, bound with a key the attacker chose: refused.
        let attackerKey = try SecretBytes.random(count: 32)
        for slot in [live.slotID, 900, 901, 902] {
            let ref = SlotReference(vaultID: store.vaultID, slotID: slot)
            for p in [nil, try proof(.bind, store.vaultID, key: attackerKey,
                                     subject: try BindRequest.subject(slot: ref, proofKey: attackerKey, confirm: []), authority)] {
                let e = #expect(throws: VaultError.self) {
                    _ = try authority.bind(BindRequest(slot: ref, sensor: sensor, rules: PasscodeRules(), proof: p), proofKey: attackerKey)
                }
                #expect(e?.exitCode == 10)
            }
        }
        // The passcode and the recovery key open, and record (the registered key was never replaced).
        let byPasscode = try authority.unlock(store, passcode: try secret(passcodeText))
        #expect(byPasscode.unrecorded == nil)
        let byRecovery = try authority.unlock(store, recoveryKey: recovery)
        #expect(byRecovery.unrecorded == nil)
        #expect(isFinger(try context(authority, policy: .biometrics).unlock(store)))

        // An authority that refuses every proof (another machine's, a restored state): the
        // passcode and the recovery key still open; why it was not recorded is kept.
        let elsewhere = try EmbeddedKeyAuthority(folder: root.path + "/elsewhere", bootID: "boot-1", clock: { clock.now }, challenges: book,
                                                 openReader: { _ in reader })
        _ = try elsewhere.enroll(finger: "right-index", sensor: sensor, proof: nil, label: nil)
        let squat = try SecretBytes.random(count: 32)
        _ = try elsewhere.bind(BindRequest(slot: SlotReference(vaultID: store.vaultID, slotID: 1), sensor: sensor, rules: PasscodeRules(),
                                           confirm: ["right-index"]), proofKey: squat)
        let opened = try elsewhere.unlock(store, passcode: try secret(passcodeText))
        #expect(opened.unrecorded == VaultError.proofRefused.message)
        #expect(opened.unrecordedHint?.contains("vault enroll --bind --reregister") == true)
        #expect(try elsewhere.unlock(store, recoveryKey: recovery).unrecorded != nil)
    }

    @Test func aSlotKeySeenInOneUnlockOpensNothingAfterTheNext() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: reader)
        // What a library preloaded into one `vault` process sees: the key of that unlock, and the
        // key the slot is re-sealed with.
        let before = try #require(try store.slot(.fingerprint))
        let seen = try authority.unlock(try #require(try store.fingerprintSlot()).reference, rules: PasscodeRules(), prompt: "t", events: { _ in })
        let captured = [seen.kek.exposedBytes(), try #require(seen.next).kek.exposedBytes()]
        _ = try store.unlock(fingerprintSlot: before, grant: seen)
        let afterFirst = try #require(try store.slot(.fingerprint))
        #expect(afterFirst.id == before.id && afterFirst.nonce != before.nonce, "re-sealed in place")
        // The owner unlocks again: the slot is re-sealed with a key no one saw.
        _ = try context(authority).unlock(store)
        let afterSecond = try #require(try store.slot(.fingerprint))
        for key in captured {
            let opener = FingerprintOpener(kek: try SecretBytes(copying: key))
            #expect(throws: (any Error).self) {
                _ = try opener.open(afterSecond, associatedData: store.slotAD(id: afterSecond.id, kind: .fingerprint,
                                                                             params: afterSecond.params, generation: afterSecond.generation))
            }
        }
        // The key ids of both are gone from the authority: an old copy of the vault is exit 20.
        let oldRef = SlotReference(vaultID: store.vaultID, slotID: before.id, keyID: try before.fingerprintBinding().keyID)
        #expect(throws: VaultError.domainStateChanged) { _ = try authority.unlock(oldRef, rules: PasscodeRules(), prompt: "t", events: { _ in }) }
        // The finger still opens, every time.
        for _ in 0..<3 { #expect(isFinger(try context(authority).unlock(store))) }
    }

    @Test func concurrentUnlocksAndACrashBeforeTheResealLeaveASlotThatOpens() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        let slot = try #require(try store.slot(.fingerprint))
        let ref = try #require(try store.fingerprintSlot()).reference
        // Two unlocks of the same slot at once: each gets the key and a next key of its own.
        let a = try authority.unlock(ref, rules: PasscodeRules(), prompt: "t", events: { _ in })
        let b = try authority.unlock(ref, rules: PasscodeRules(), prompt: "t", events: { _ in })
        // A crashed before re-sealing; B re-sealed: the finger opens.
        _ = try store.unlock(fingerprintSlot: slot, grant: b)
        #expect(try context(authority).unlock(store).authentication != nil)
        // A's late re-seal finds the slot changed and leaves it alone.
        _ = try store.unlock(fingerprintSlot: slot, grant: a)
        #expect(try context(authority).unlock(store).authentication != nil)
        // A crash between the daemon's answer and the re-seal: the slot is as it was, and opens.
        let current = try #require(try store.fingerprintSlot()).reference
        _ = try authority.unlock(current, rules: PasscodeRules(), prompt: "t", events: { _ in })
        #expect(try context(authority).unlock(store).authentication != nil)
    }

    @Test func aRotationRegistersItsNewProofKeyOnlyOnceItProvesItself() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        let vault = try authority.unlock(store, passcode: try secret(passcodeText))
        let rotated = try vault.rotate(passcode: try secret(passcodeText), kdf: nil, recovery: .keep, authority: authority)
        #expect(rotated.fingerprintBound)
        // Both keys prove until the new one did; then only the new one.
        let stale = try store.unlock(passcode: try secret(passcodeText), migrating: false)
        #expect(authority.recordUnlock(of: rotated.vault) == .owner)
        #expect(throws: VaultError.self) { try authority.recordPasscodeUnlock(try vault.proof(.passcodeUnlock, for: authority)) }
        #expect(try authority.recordPasscodeUnlock(try stale.proof(.passcodeUnlock, for: authority)) == .owner)
        #expect(try context(authority).unlock(try VaultStore.open(try root.location())).authentication != nil)
    }

    @Test func aFingerNoVaultVouchedForIsShownAndBoundToOnlyWhenAnOwnerConfirmsIt() throws {
        let clock = TestClock(1_800_000_000)
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        let authority = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        // Enrolled with no proof (no vault bound yet): unconfirmed, and no vault binds to it as is.
        let intruder = try authority.enroll(finger: "left-thumb", sensor: sensor, proof: nil, label: nil)
        #expect(!intruder.confirmed)
        let refused = #expect(throws: VaultError.self) { try created.vault.bindFingerprint(authority: authority, sensor: sensor) }
        #expect(refused?.exitCode == 20)
        #expect(refused?.message.contains("left-thumb was enrolled on ") == true && refused?.message.contains("by a request that no vault of yours signed") == true,
                "\(refused?.message ?? "")")
        #expect(refused?.hint?.contains("--confirm left-thumb") == true)
        // Removed (nobody owns the prints yet), then the owner's own finger, confirmed at the bind.
        #expect(try authority.unenroll(finger: "left-thumb", proof: nil, label: nil).count == 1)
        _ = try authority.enroll(finger: "right-index", sensor: sensor, proof: nil, label: nil)
        let report = try created.vault.bindFingerprint(authority: authority, sensor: sensor, confirm: ["right-index"])
        #expect(report.owner)
        #expect(report.changes.map(\.kind) == [.enrolled], "\(report.changes)")
        // A second finger with the owner's proof is named in the next binding's report.
        let added = try created.vault.enroll(finger: "left-index", through: authority)
        #expect(added.confirmed && added.enrolledBy == "default")
        let next = try created.vault.bindFingerprint(authority: authority, sensor: sensor)
        #expect(next.changes.map(\.sentence).contains { $0.hasPrefix("left-index was enrolled on ") && $0.hasSuffix("by vault 'default'") },
                "\(next.changes.map(\.sentence))")
    }
}

/// The key authority kept in step with the vault's master key (issue: the passcode and the
/// recovery key open the vault after any honest sequence of events).
extension AuthContextTests {
    /// Locks fingerprint out (five failed matches) through `authority`.
    fileprivate func lockOut(_ store: VaultStore, _ authority: EmbeddedKeyAuthority, clock: TestClock) throws {
        let stranger = try self.authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: nil))
        _ = try? context(stranger, policy: .biometrics).unlock(store)
        _ = try? context(stranger, policy: .biometrics).unlock(store)
        #expect(try failures(authority) == 5)
    }

    @Test func aRotationTheAuthorityNeverHeardOfIsCaughtUpAtTheNextPasscode() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        try lockOut(store, authority, clock: clock)
        // Two rotations the authority is not told of (as with a daemon that did not answer).
        var vault = try store.unlock(passcode: try secret(passcodeText))
        for _ in 0..<2 { vault = try vault.rotate(passcode: try secret(passcodeText), kdf: fastKDF, recovery: .keep, authority: nil).vault }
        // The passcode opens it, and its unlock is recorded: the lockout is lifted.
        let opened = try authority.unlock(store, passcode: try secret(passcodeText))
        #expect(opened.unrecorded == nil, "\(opened.unrecorded ?? "")")
        #expect(opened.passcodeRecord == .owner)
        #expect(try failures(authority) == 0)
        // From now on the current key proves directly (the next key was adopted).
        #expect(try opened.proof(.passcodeUnlock, for: authority).vaultID == store.vaultID)
        #expect(try authority.recordPasscodeUnlock(try opened.proof(.passcodeUnlock, for: authority)) == .owner)
    }

    @Test func aRotationAnnouncesItsKeyBeforeItCommitsAndAnUncommittedOneChangesNothing() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)  // no reader: no fingerprint slot is made
        let vault = try store.unlock(passcode: try secret(passcodeText))
        let rotated = try vault.rotate(passcode: try secret(passcodeText), kdf: fastKDF, recovery: .keep, authority: authority)
        #expect(rotated.authorityNotTold == nil)
        #expect(!rotated.fingerprintBound)
        // The new key proves at once (it was the next one there), without the earlier keys.
        #expect(try authority.recordPasscodeUnlock(try rotated.vault.proof(.passcodeUnlock, for: authority)) == .owner)
        // A key announced for a rotation that never commits leaves the vault's key working.
        let next = try SecretBytes.random(count: 32)
        let proof = try rotated.vault.proof(.rekey, for: authority, subject: try AuthorityProofMAC.keySubject(next))
        #expect(try authority.rekey(proof, proofKey: next) == .owner)
        #expect(try authority.recordPasscodeUnlock(try rotated.vault.proof(.passcodeUnlock, for: authority)) == .owner)
    }

    @Test func aRekeyNeedsAProofUnderAKeyTheAuthorityHoldsForThatKey() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        let vault = try store.unlock(passcode: try secret(passcodeText))
        let mine = try SecretBytes.random(count: 32)
        // Under a random key: refused, and the vault's own proofs still work.
        let challenge = try authority.challenge()
        let forged = AuthorityProof(vaultID: store.vaultID, challenge: challenge,
                                    mac: try AuthorityProofMAC.mac(key: try SecretBytes.random(count: 32), purpose: .rekey, vaultID: store.vaultID,
                                                                   challenge: challenge, subject: try AuthorityProofMAC.keySubject(mine)))
        #expect(throws: VaultError.proofRefused) { try authority.rekey(forged, proofKey: mine) }
        // A valid proof made for another key registers nothing for this one.
        let other = try SecretBytes.random(count: 32)
        let forOther = try vault.proof(.rekey, for: authority, subject: try AuthorityProofMAC.keySubject(other))
        #expect(throws: VaultError.proofRefused) { try authority.rekey(forOther, proofKey: mine) }
        // A proof for another purpose is no rekey.
        let unlockProof = try vault.proof(.passcodeUnlock, for: authority)
        #expect(throws: VaultError.proofRefused) { try authority.rekey(unlockProof, proofKey: mine) }
        #expect(try authority.recordPasscodeUnlock(try vault.proof(.passcodeUnlock, for: authority)) == .owner)
    }

    @Test func anAuthorityStateRestoredFromAnOlderBackupIsCaughtUpUpToEightRotationsBack() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let backup = root.path + "/state-backup"
        try FileManager.default.copyItem(atPath: stateFolder, toPath: backup)
        func restore() throws {
            try FileManager.default.removeItem(atPath: stateFolder)
            try FileManager.default.copyItem(atPath: backup, toPath: stateFolder)
        }
        var vault = try store.unlock(passcode: try secret(passcodeText))
        for _ in 0..<8 {
            vault = try vault.rotate(passcode: try secret(passcodeText), kdf: fastKDF, recovery: .keep,
                                     authority: try authority(bootID: "boot-1", clock: clock)).vault
        }
        try restore()
        var opened = try authority(bootID: "boot-1", clock: clock).unlock(try VaultStore.open(try root.location()), passcode: try secret(passcodeText))
        #expect(opened.unrecorded == nil, "eight rotations back: \(opened.unrecorded ?? "")")
        // One more rotation than the vault remembers: it still opens, and says what puts it right.
        try restore()
        vault = try opened.rotate(passcode: try secret(passcodeText), kdf: fastKDF, recovery: .keep, authority: nil).vault
        opened = try authority(bootID: "boot-1", clock: clock).unlock(try VaultStore.open(try root.location()), passcode: try secret(passcodeText))
        #expect(opened.unrecorded != nil)
        #expect(opened.unrecordedHint?.contains("vault enroll --bind --reregister") == true, "\(opened.unrecordedHint ?? "")")
        #expect(vault.generation == 10)
    }

    @Test func reregisteringTakesALiveMatchOfAConfirmedPrint() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        // A copy of the vault from before a rotation the authority saw.
        let copy = root.path + "/vault-copy"
        let folder = try root.location().folder
        try FileManager.default.copyItem(atPath: folder, toPath: copy)
        let vault = try store.unlock(passcode: try secret(passcodeText))
        let seen = try authority(bootID: "boot-1", clock: clock)
        let rotated = try vault.rotate(passcode: try secret(passcodeText), kdf: fastKDF, recovery: .keep, authority: seen)
        #expect(seen.recordUnlock(of: rotated.vault) == .owner)  // the new key proved itself: the old one is gone there
        try FileManager.default.removeItem(atPath: folder)
        try FileManager.default.copyItem(atPath: copy, toPath: folder)
        let old = try VaultStore.open(try root.location())
        let stranger = ScriptedReader(identity: sensor, answer: nil)
        let refusing = try authority(bootID: "boot-1", clock: clock, reader: stranger)
        let opened = try refusing.unlock(old, passcode: try secret(passcodeText))
        #expect(opened.unrecorded != nil)
        // No match: nothing changes (and the failures count toward the lockout).
        #expect(throws: RetryLimitExceeded.self) {
            try refusing.reregister(vaultID: old.vaultID, proofKey: try opened.proofKey(), label: nil, prompt: "", events: { _ in })
        }
        #expect(stranger.scans == 3)
        #expect(throws: VaultError.proofRefused) { try refusing.recordPasscodeUnlock(try opened.proof(.passcodeUnlock, for: refusing)) }
        // A match: the copy's key is the vault's key there now.
        let owner = try authority(bootID: "boot-1", clock: clock, reader: ScriptedReader(identity: sensor, answer: 0))
        #expect(try owner.reregister(vaultID: old.vaultID, proofKey: try opened.proofKey(), label: nil, prompt: "", events: { _ in }) == .owner)
        #expect(try owner.recordPasscodeUnlock(try opened.proof(.passcodeUnlock, for: owner)) == .owner)
        #expect(try failures(owner) == 0)
    }
}
