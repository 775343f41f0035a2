import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit

/// A temporary folder, removed with the value.
final class TempFolder: @unchecked Sendable {
    let path: String
    init(_ prefix: String = "authd-test") {
        path = NSTemporaryDirectory() + prefix + "-" + hexString(randomBytes(6))
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

let testSensor = SensorIdentity(driver: "virtual_device", deviceID: "0")

/// What a scripted reader does at the next scans, in order; the last one repeats.
enum ScanScript: Sendable {
    /// The finger matches the first print.
    case match
    /// A clean non-match.
    case noMatch
    /// The scan ends with this interruption.
    case interrupt(ScanInterruption)
    /// The scan waits until the request is cancelled (or 10 s pass: then a timeout).
    case waitForCancel
}

/// A reader whose scans follow a script shared by every request (as one physical reader is),
/// counting them. Its enrolment returns a fake print named after the finger.
final class ScriptedReaders: ReaderSource, @unchecked Sendable {
    private let lock = NSLock()
    private var script: [ScanScript]
    private(set) var scansStarted = 0
    private(set) var opened = 0
    private(set) var scanTimeouts: [Double] = []

    init(_ script: [ScanScript] = [.match]) {
        self.script = script
    }

    /// Replaces the script.
    func set(_ script: [ScanScript]) { lock.withLock { self.script = script } }
    var scans: Int { lock.withLock { scansStarted } }

    /// The scan timeout each scan was given, in order.
    var timeouts: [Double] { lock.withLock { scanTimeouts } }

    fileprivate func nextStep(timeout: Double) -> ScanScript {
        lock.withLock {
            scansStarted += 1
            scanTimeouts.append(timeout)
            return script.count > 1 ? script.removeFirst() : (script.first ?? .noMatch)
        }
    }

    func open(prefer: SensorIdentity?, session: ScanSession) throws -> any SessionReader {
        lock.withLock { opened += 1 }
        return Reader(source: self, session: session)
    }

    final class Reader: SessionReader {
        let source: ScriptedReaders
        let session: ScanSession
        init(source: ScriptedReaders, session: ScanSession) {
            self.source = source
            self.session = session
        }
        var identity: SensorIdentity { testSensor }
        var storesPrints: Bool { false }
        func chipPrints() throws -> [String] { [] }
        func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
            switch source.nextStep(timeout: session.scanTimeout) {
            case .match: return 0
            case .noMatch: return nil
            case .interrupt(let i): throw i
            case .waitForCancel:
                let done = DispatchSemaphore(value: 0)
                let reason = Mutex<ScanCancelReason?>(nil)
                let cancelled = session.whileCancellable(onCancel: { r in
                    reason.withLock { $0 = r }
                    done.signal()
                }) { done.wait(timeout: .now() + 10) == .success }
                guard cancelled, let r = reason.withLock({ $0 }) else { throw ScanInterruption.timedOut }
                switch r {
                case .user: throw ScanInterruption.userCancelled
                case .fallback: throw ScanInterruption.fallbackRequested
                case .program: throw ScanInterruption.programCancelled
                }
            }
        }
        func enroll(finger: String) throws -> [UInt8] { Array("FP3 fake print \(finger)".utf8) }
        func deletePrint(_ data: [UInt8]) throws {}
    }
}

/// Collects what a session streams.
final class Stream: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [AuthorityReply] = []
    func add(_ r: AuthorityReply) { lock.withLock { items.append(r) } }
    var all: [AuthorityReply] { lock.withLock { items } }
    var events: [AuthorityEvent] { all.compactMap { if case .event(let e) = $0 { e } else { nil } } }
    var notices: [ScanNotice] { all.compactMap { if case .notice(let n) = $0 { n } else { nil } } }
}

/// A handler over a temporary state folder and a scripted reader, called as any uid: as a uid
/// with an account unless told otherwise (the uids are made up; the server looks each up).
final class HandlerFixture: @unchecked Sendable {
    let folder = TempFolder("authd-state")
    let readers: ScriptedReaders
    let handler: AuthorityRequestHandler

    init(testMode: Bool = true, script: [ScanScript] = [.match]) throws {
        readers = ScriptedReaders(script)
        handler = try AuthorityRequestHandler(stateFolder: folder.path + "/state", testMode: testMode, readers: readers)
    }

    /// Sends `request` as `uid`; returns the response and what was streamed.
    @discardableResult
    func send(_ request: AuthorityRequest, as uid: UInt32, hasAccount: Bool = true, key: [UInt8] = [], session: ScanSession? = nil,
              stream: Stream = Stream()) -> AuthorityResponse {
        handler.handle(request, key: key, session: session ?? ScanSession(uid: uid, hasAccount: hasAccount, send: { stream.add($0) }))
    }
}

/// Which key of its binding a fake vault's slot is sealed with (what a real vault keeps in the
/// slot's parameters): moved on by each unlock the fake "commits".
final class FakeSlotKey: @unchecked Sendable {
    private let lock = NSLock()
    private var id: String?
    var current: String? {
        get { lock.withLock { id } }
        set { lock.withLock { id = newValue } }
    }
}

/// A vault as the authority sees it: an id, a slot, a proof key, and the key its slot is sealed with.
struct FakeVault {
    let id: [UInt8]
    let slot: Int64
    let proofKey: [UInt8]
    let key: FakeSlotKey
    init(slot: Int64 = 3) {
        id = randomBytes(16)
        self.slot = slot
        proofKey = randomBytes(32)
        key = FakeSlotKey()
    }
    var reference: SlotReference { SlotReference(vaultID: id, slotID: slot, keyID: key.current) }
    func at(slot: Int64) -> FakeVault { FakeVault(id: id, slot: slot, proofKey: proofKey, key: FakeSlotKey()) }
    /// The same vault id and slot with another proof key (another user's vault of that id).
    func withNewProofKey() -> FakeVault { FakeVault(id: id, slot: slot, proofKey: randomBytes(32), key: FakeSlotKey()) }
    private init(id: [UInt8], slot: Int64, proofKey: [UInt8], key: FakeSlotKey) {
        self.id = id
        self.slot = slot
        self.proofKey = proofKey
        self.key = key
    }

    /// A proof for `purpose` and `subject` over `challenge` (`forged`: under another key).
    func proof(_ purpose: ProofPurpose, challenge: [UInt8], subject: [UInt8] = [], forged: Bool = false) throws -> AuthorityProof {
        let key = try SecretBytes(copying: forged ? randomBytes(32) : proofKey)
        return AuthorityProof(vaultID: id, challenge: challenge,
                              mac: try AuthorityProofMAC.mac(key: key, purpose: purpose, vaultID: id, challenge: challenge, subject: subject))
    }

    /// A bind request of this vault's slot, proven over `challenge` (`confirm`: fingers confirmed).
    /// `prover`: the vault as it was before a rotation (its key proves the binding of this one's).
    func bindRequest(challenge: [UInt8], rules: PasscodeRules, confirm: [String] = [], forged: Bool = false,
                     prover: FakeVault? = nil) throws -> BindRequest {
        let ref = SlotReference(vaultID: id, slotID: slot)
        let subject = try BindRequest.subject(slot: ref, proofKey: try SecretBytes(copying: proofKey), confirm: confirm)
        return BindRequest(slot: ref, sensor: nil, rules: rules,
                           proof: try (prover ?? self).proof(.bind, challenge: challenge, subject: subject, forged: forged),
                           confirm: confirm, label: "fake")
    }
}

extension AuthorityResponse {
    /// The error of a `failed` reply.
    var error: VaultError? { if case .failed(let e) = reply { e } else { nil } }
    var exitCode: Int32? { error?.exitCode }
    /// Whether the reply is a key (`unlock`).
    var isKey: Bool { if case .key = reply { true } else { false } }
    /// The slot key of a `bound` or `key` reply (a `key` reply's tail also holds the next key).
    var slotKey: [UInt8] { Array(tail.prefix(32)) }
}

extension HandlerFixture {
    func challenge(as uid: UInt32) throws -> [UInt8] {
        guard case .challenge(let c) = send(.challenge, as: uid).reply else { throw VaultError.failure("no challenge") }
        return c
    }

    /// Enrols (no proof: the first finger) and binds `vault`, confirming that finger; returns the slot key.
    func enrolAndBind(_ vault: FakeVault, as uid: UInt32, finger: String = "right-index") throws -> [UInt8] {
        let enrolled = send(.enroll(finger: finger, sensor: nil, proof: nil, label: nil, scanTimeout: 5), as: uid)
        guard case .enrolled = enrolled.reply else { throw VaultError.failure("enrol: \(enrolled.reply)") }
        return try bind(vault, as: uid, confirm: [finger])
    }

    func bind(_ vault: FakeVault, as uid: UInt32, rules: PasscodeRules = PasscodeRules(afterReboot: false, intervalHours: 0),
              confirm: [String] = [], provenBy prover: FakeVault? = nil) throws -> [UInt8] {
        let r = send(.bind(request: try vault.bindRequest(challenge: try challenge(as: uid), rules: rules, confirm: confirm, prover: prover)),
                     as: uid, key: vault.proofKey)
        guard case .bound(let binding, _, _) = r.reply, r.tail.count == 32 else { throw VaultError.failure("bind: \(r.reply)") }
        vault.key.current = binding.keyID
        return r.tail
    }

    /// Unlocks `vault`'s slot; a granted next key is taken as committed (`commit` false: as by a
    /// client that crashed before re-sealing its slot).
    func unlock(_ vault: FakeVault, as uid: UInt32, stream: Stream = Stream(), rules: PasscodeRules = PasscodeRules(afterReboot: false, intervalHours: 0),
                scanTimeout: Double = 5, session: ScanSession? = nil, commit: Bool = true) -> AuthorityResponse {
        let r = send(.unlock(slot: vault.reference, rules: rules, prompt: "touch the reader", scanTimeout: scanTimeout), as: uid, session: session, stream: stream)
        if commit, case .key(let next?) = r.reply { vault.key.current = next.keyID }
        return r
    }

    func failures(of uid: UInt32) -> Int {
        guard case .status(let s) = send(.status(slot: nil, sensor: nil, rules: PasscodeRules()), as: uid).reply else { return -1 }
        return s.failedMatches
    }

    func recordPasscode(_ vault: FakeVault, as uid: UInt32, forged: Bool = false) throws -> AuthorityResponse {
        send(.recordPasscodeUnlock(proof: try vault.proof(.passcodeUnlock, challenge: try challenge(as: uid), forged: forged)), as: uid)
    }
}

/// Hands a value to another thread in a test.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
