import Foundation
import Synchronization
import Testing
@testable import VaultKit

/// A reader that answers every scan with `answer` (an index into the prints, or nil for no match)
/// and counts the scans.
private final class ScriptedReader: FingerprintReader {
    let identity: SensorIdentity
    var answer: Int?
    private(set) var scans = 0
    init(identity: SensorIdentity, answer: Int?) {
        self.identity = identity
        self.answer = answer
    }
    func chipPrints() throws -> [String] { [] }
    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        scans += 1
        return answer
    }
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

/// One vault, bound to one enrolled (fake) print, and the state folder of its key authority.
@Suite struct AuthContextTests {
    let root = TempRoot()
    var stateFolder: String { root.path + "/state/vault" }

    /// Creates the vault, enrols a print in an authority with `bootID` and `clock`, binds the vault,
    /// and records the passcode unlock that `vault init` records.
    fileprivate func boundVault(bootID: String, clock: TestClock) throws -> VaultStore {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret(passcodeText), kdf: fastKDF)
        try created.vault.add(Item(name: "gh", password: "pw"))
        let authority = try authority(bootID: bootID, clock: clock)
        try authority.add(EnrolledPrint(finger: "right-index", sensor: sensor, data: Array("FP3 fake print".utf8)))
        try created.vault.bindFingerprint(authority: authority, sensor: sensor, domainState: try authority.domainState(chipPrints: []))
        try authority.recordPasscodeUnlock()
        return try VaultStore.open(try root.location())
    }

    fileprivate func authority(bootID: String, clock: TestClock) throws -> EmbeddedKeyAuthority {
        try EmbeddedKeyAuthority(folder: stateFolder, bootID: bootID, clock: { clock.now })
    }

    /// A context whose reader must not be opened and which can read no passcode.
    fileprivate func contextThatMustNotScan(_ authority: any KeyAuthority, policy: AuthPolicy = .biometricsOrPasscode,
                                sourceLocation: SourceLocation = #_sourceLocation) -> AuthContext {
        AuthContext(authority: authority, policy: policy,
                    openReader: { _ in
                        Issue.record("the reader was opened although the passcode is required", sourceLocation: sourceLocation)
                        return ScriptedReader(identity: sensor, answer: 0)
                    },
                    readPasscode: { _ in nil }, say: { _ in })
    }

    /// A context with a reader that matches (print 0) and, optionally, a passcode.
    fileprivate func matchingContext(_ authority: any KeyAuthority, reader: ScriptedReader, passcode: String? = nil,
                         policy: AuthPolicy = .biometricsOrPasscode) -> AuthContext {
        AuthContext(authority: authority, policy: policy, openReader: { _ in reader },
                    readPasscode: { _ in
                        guard let passcode else { return nil }
                        return try secret(passcode)
                    }, say: { _ in })
    }

    @Test func theFingerOpensTheVaultOnTheSameBootWithinTheInterval() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        clock.advance(hours: 47)
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let context = matchingContext(authority, reader: reader)
        #expect(try context.passcodeRule(settings: store.settings()) == nil)
        let vault = try context.unlock(store)
        #expect(try vault.item(named: "gh").password == "pw")
        #expect(reader.scans == 1)
    }

    @Test func theFirstUnlockAfterARebootNeedsThePasscode() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let rebooted = try authority(bootID: "boot-2", clock: clock)
        clock.advance(hours: 0, seconds: 60)

        for policy in AuthPolicy.allCases {
            let context = contextThatMustNotScan(rebooted, policy: policy)
            #expect(isPasscodeNeeded(try context.passcodeRule(settings: store.settings())))
            let error = #expect(throws: VaultError.self) { try context.unlock(store) }
            #expect(isPasscodeNeeded(error), "\(policy): \(String(describing: error))")
        }

        // The passcode given: it opens, and the new boot is recorded, so the finger is back.
        let reader = ScriptedReader(identity: sensor, answer: 0)
        let withPasscode = matchingContext(rebooted, reader: reader, passcode: passcodeText)
        #expect(try withPasscode.unlock(store).item(named: "gh").password == "pw")
        #expect(reader.scans == 0, "the passcode, not the finger, opened it")
        #expect(try rebooted.record().lastPasscodeBootID == "boot-2")
        let again = matchingContext(rebooted, reader: reader)
        #expect(try again.passcodeRule(settings: store.settings()) == nil)
        _ = try again.unlock(store)
        #expect(reader.scans == 1)

        // The rule can be switched off.
        var settings = try store.settings()
        settings.passcodeAfterReboot = false
        #expect(try contextThatMustNotScan(try authority(bootID: "boot-3", clock: clock)).passcodeRule(settings: settings) == nil)
    }

    @Test func fortyEightHoursWithoutThePasscodeNeedThePasscode() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        clock.advance(hours: 48)
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == nil, "exactly 48 h is still within")
        clock.advance(hours: 0, seconds: 1)
        let context = contextThatMustNotScan(authority)
        #expect(isPasscodeNeeded(try context.passcodeRule(settings: store.settings())))
        let error = #expect(throws: VaultError.self) { try context.unlock(store) }
        #expect(isPasscodeNeeded(error), "\(String(describing: error))")

        // Configurable: 0 switches the interval off, a longer one moves the limit.
        var settings = try store.settings()
        settings.passcodeIntervalHours = 0
        #expect(try context.passcodeRule(settings: settings) == nil)
        settings.passcodeIntervalHours = 72
        #expect(try context.passcodeRule(settings: settings) == nil)

        // A passcode unlock starts the interval again.
        let reader = ScriptedReader(identity: sensor, answer: 0)
        _ = try matchingContext(authority, reader: reader, passcode: passcodeText).unlock(store)
        #expect(try matchingContext(authority, reader: reader).passcodeRule(settings: store.settings()) == nil)
    }

    @Test func fiveFailedMatchesLockOutUntilAPasscodeUnlock() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        for n in 1...4 {
            #expect(try authority.recordFailedMatch() == n)
            #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == nil)
        }
        #expect(try authority.recordFailedMatch() == lockoutThreshold)
        // Another instance (another process) sees the same record.
        let other = try self.authority(bootID: "boot-1", clock: clock)
        #expect(try other.record().failedMatches == 5)
        for policy in AuthPolicy.allCases {
            let context = contextThatMustNotScan(other, policy: policy)
            #expect(try context.passcodeRule(settings: store.settings()) == .biometryLockout)
            #expect(throws: VaultError.biometryLockout) { try context.unlock(store) }
        }
        // A match cannot lift it (there is no scan), a passcode unlock does.
        try other.recordPasscodeUnlock()
        #expect(try authority.record().failedMatches == 0)
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == nil)
    }

    @Test func failedScansInAnEvaluationCountTowardsTheLockout() throws {
        let clock = TestClock(1_800_000_000)
        let store = try boundVault(bootID: "boot-1", clock: clock)
        let authority = try authority(bootID: "boot-1", clock: clock)
        let stranger = ScriptedReader(identity: sensor, answer: nil)
        #expect(throws: VaultError.authenticationFailed("no match: retry limit exceeded")) {
            try matchingContext(authority, reader: stranger).unlock(store)
        }
        #expect(stranger.scans == 3)
        #expect(try authority.record().failedMatches == 3)
        // Two more: the fifth failure ends the evaluation with the lockout.
        #expect(throws: VaultError.biometryLockout) {
            try matchingContext(authority, reader: stranger, policy: .biometrics).unlock(store)
        }
        #expect(stranger.scans == 5)
        #expect(try authority.record().failedMatches == 5)
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
        var authority = try authority(bootID: "boot-1", clock: clock)
        #expect(try authority.record().failedMatches >= lockoutThreshold)
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == .biometryLockout)

        try put(original.prefix(10))
        authority = try self.authority(bootID: "boot-1", clock: clock)
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == .biometryLockout)

        // A sealed record from another device secret (another state folder) does not open either.
        let foreign = root.path + "/foreign"
        let stranger = try EmbeddedKeyAuthority(folder: foreign, bootID: "boot-1", clock: { clock.now })
        try stranger.recordPasscodeUnlock()
        try put(try Data(contentsOf: URL(fileURLWithPath: foreign + "/auth.sealed")))
        authority = try self.authority(bootID: "boot-1", clock: clock)
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == .biometryLockout)

        // Deleting the record does not give the finger back without the passcode either.
        try FileManager.default.removeItem(atPath: path)
        authority = try self.authority(bootID: "boot-1", clock: clock)
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) != nil)

        // The passcode writes a fresh, authentic record.
        try authority.recordPasscodeUnlock()
        #expect(try contextThatMustNotScan(authority).passcodeRule(settings: store.settings()) == nil)
    }
}
