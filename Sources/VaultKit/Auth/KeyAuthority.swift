import FoundationEssentials
internal import VaultSystem

/// A reader as the vault sees it: which sensor it is.
package struct SensorIdentity: Codable, Equatable, Hashable, Sendable {
    /// libfprint driver name.
    package var driver: String
    /// libfprint device id.
    package var deviceID: String
    /// Creates an identity.
    package init(driver: String, deviceID: String) {
        self.driver = driver
        self.deviceID = deviceID
    }
    /// `driver/device-id`, as bound into fingerprint slots.
    package var canonical: String { driver + "/" + deviceID }
}

/// One enrolled finger as the authority shows it: which finger, on which reader, since when.
/// The biometric data itself never leaves the authority.
package struct EnrolledFinger: Codable, Equatable, Sendable {
    /// Which finger (`right-index`...).
    package var finger: String
    /// The reader it was enrolled on.
    package var sensor: SensorIdentity
    /// When it was enrolled (seconds since 1970).
    package var enrolled: Int64
    /// Whether the owner stands behind it: enrolled with the proof of an owner vault, or confirmed
    /// explicitly at a binding. False for a print enrolled with no proof (before any vault was
    /// bound) that no binding confirmed yet: no vault binds to it until it is confirmed or removed.
    package var confirmed: Bool
    /// The vault whose proof enrolled it, as that vault's client named it (shown, not trusted);
    /// nil when no vault's proof did.
    package var enrolledBy: String?
    /// Creates a record.
    package init(finger: String, sensor: SensorIdentity, enrolled: Int64, confirmed: Bool = true, enrolledBy: String? = nil) {
        self.finger = finger
        self.sensor = sensor
        self.enrolled = enrolled
        self.confirmed = confirmed
        self.enrolledBy = enrolledBy
    }
}

/// One change of the enrolled prints, as the authority recorded it: shown to the owner before a
/// vault is bound to the prints it produced ("left-thumb was enrolled on 2026-12-01 18:14 by a
/// request that no vault of yours signed").
package struct PrintChange: Codable, Equatable, Sendable {
    /// What happened.
    package enum Kind: String, Codable, Sendable {
        /// A finger was enrolled through the authority.
        case enrolled
        /// A finger was removed through the authority.
        case removed
        /// Every print and binding was forgotten.
        case reset
        /// The reader's own list changed outside vault (fprintd's fingers, a match-on-chip list).
        case outside
    }
    /// What happened.
    package var kind: Kind
    /// Which finger (empty for a reset).
    package var finger: String
    /// When (seconds since 1970).
    package var time: Int64
    /// The vault whose valid proof made the change, as its client named it; nil when no vault of
    /// this user signed it.
    package var by: String?
    /// Creates a change.
    package init(kind: Kind, finger: String, time: Int64, by: String?) {
        self.kind = kind
        self.finger = finger
        self.time = time
        self.by = by
    }

    /// The sentence shown to the person, without the `vault:` prefix.
    package var sentence: String {
        let when = PrintChange.format(time)
        let who = by.map { "by vault '\($0)'" } ?? "by a request that no vault of yours signed"
        switch kind {
        case .enrolled: return "\(finger) was enrolled on \(when) \(who)"
        case .removed: return "\(finger) was removed on \(when) \(who)"
        case .reset: return "every fingerprint was forgotten on \(when) \(who)"
        case .outside: return "\(finger) was enrolled or changed on \(when) outside vault (the reader's own list, e.g. fprintd)"
        }
    }

    /// `yyyy-MM-dd HH:mm` in the local time zone.
    static func format(_ time: Int64) -> String { ISOTime.localMinutes(time) }
}

/// BLAKE2b-256 over the sorted enrolled prints, the enrolment epoch and (match-on-chip) the chip's list.
package struct DomainState: Codable, Equatable, Sendable {
    /// The 32 bytes.
    package let bytes: [UInt8]
    /// Creates a state from its bytes.
    package init(bytes: [UInt8]) { self.bytes = bytes }
    /// Lower-case hex, as `vault status --json` shows it.
    package var hex: String { hexString(bytes) }
}

/// The passcode rules of a vault the authority applies before a scan: the first unlock after a
/// reboot and any unlock after `intervalHours` without a passcode unlock need the passcode.
package struct PasscodeRules: Codable, Equatable, Sendable {
    /// Whether the first unlock after a reboot needs the passcode.
    package var afterReboot: Bool
    /// Hours after a passcode unlock before the passcode is needed again (0: never).
    package var intervalHours: Int
    /// Creates rules.
    package init(afterReboot: Bool = true, intervalHours: Int = 48) {
        self.afterReboot = afterReboot
        self.intervalHours = intervalHours
    }
    /// The stricter of two rule sets: a request can tighten what was registered, never loosen it.
    package func stricter(_ other: PasscodeRules) -> PasscodeRules {
        let interval = [intervalHours, other.intervalHours].filter { $0 > 0 }.min() ?? 0
        return PasscodeRules(afterReboot: afterReboot || other.afterReboot, intervalHours: interval)
    }
}

/// What the holder of a vault master key shows the authority: a keyed BLAKE2b, under a key derived
/// from the master key and registered when the vault was bound, over a fresh challenge of the
/// authority and the purpose. A bare request cannot reset a lockout or enrol a finger.
package struct AuthorityProof: Codable, Equatable, Sendable {
    /// The vault whose key proves it.
    package var vaultID: [UInt8]
    /// The authority's challenge (single use).
    package var challenge: [UInt8]
    /// The MAC (over the purpose, the vault id, the challenge and what the request asks for).
    package var mac: [UInt8]
    /// Creates a proof.
    package init(vaultID: [UInt8], challenge: [UInt8], mac: [UInt8]) {
        self.vaultID = vaultID
        self.challenge = challenge
        self.mac = mac
    }
}

/// What the key authority hands out after its own match for fingerprint login: the vault's
/// single-use nonce, how old the match was when one was reused, and a keyed BLAKE2b under each
/// proof key the authority registered for the vault (a rotation can leave two bindings with
/// different keys). The vault accepts it only when the nonce is one it issued for this very use
/// and not yet used, and one MAC equals its own (`FreshMatchMAC`); a client cannot make one
/// without the proof key, which the vault's master key derives and the authority keeps.
public struct FreshMatchToken: Codable, Equatable, Sendable {
    /// The vault the match was for.
    public var vaultID: [UInt8]
    /// The vault's nonce (32 bytes, single use).
    public var nonce: [UInt8]
    /// The age in seconds of the match the authority reused; nil after a scan for this request.
    public var reusedAge: Int64?
    /// One MAC per proof key the authority holds for the vault (32 bytes each).
    public var macs: [[UInt8]]
    /// Creates a token.
    public init(vaultID: [UInt8], nonce: [UInt8], reusedAge: Int64?, macs: [[UInt8]]) {
        self.vaultID = vaultID
        self.nonce = nonce
        self.reusedAge = reusedAge
        self.macs = macs
    }
    /// The most MACs a token carries (an authority keeps at most 3 bindings per vault).
    public static let maximumMACs = 4
    /// The oldest match an authority may reuse (seconds): the reuse window's upper end.
    public static let maximumReuse: Int64 = 300
}

/// What a proof is for (bound into its MAC, so a proof for one purpose serves no other).
package enum ProofPurpose: String, Codable, Sendable {
    /// A passcode or recovery-key unlock: resets the lockout, restarts the passcode clock.
    case passcodeUnlock = "passcode-unlock"
    /// Enrolling a finger.
    case enroll
    /// Removing a finger.
    case unenroll
    /// Forgetting every print and binding.
    case resetPrints = "reset-prints"
    /// Binding a slot of a vault the authority already knows (and registering its next proof key).
    case bind
    /// Handing the authority the vault's next proof key (a rotation), under a key it holds.
    case rekey
}

/// Which vault slot a request is about: the vault and its fingerprint slot's id.
package struct SlotReference: Codable, Equatable, Sendable {
    /// The vault id.
    package var vaultID: [UInt8]
    /// The fingerprint slot's id (slot ids never repeat within a vault).
    package var slotID: Int64
    /// Which of the binding's keys the slot is sealed with now (`FingerprintBinding.keyID`; nil:
    /// the binding's first key, in slots made before keys rolled).
    package var keyID: String?
    /// Creates a reference.
    package init(vaultID: [UInt8], slotID: Int64, keyID: String? = nil) {
        self.vaultID = vaultID
        self.slotID = slotID
        self.keyID = keyID
    }
}

/// What a binding asks of the authority besides the proof key (which travels apart, as a secret).
package struct BindRequest: Codable, Equatable, Sendable {
    /// The slot to bind.
    package var slot: SlotReference
    /// The reader (nil: the authority's choice).
    package var sensor: SensorIdentity?
    /// The vault's passcode rules.
    package var rules: PasscodeRules
    /// A proof of this vault's registered key (purpose `bind`, subject ``subject(proofKey:)``):
    /// needed for every binding of a vault the authority knows; nil for a vault it never bound.
    package var proof: AuthorityProof?
    /// Fingers enrolled without a vault's proof (or changed outside vault) that the caller
    /// confirms explicitly: only an owner vault's binding can confirm.
    package var confirm: [String]
    /// The vault's name as this user calls it (shown in the history of changes, not trusted).
    package var label: String?
    /// Creates a request.
    package init(slot: SlotReference, sensor: SensorIdentity?, rules: PasscodeRules, proof: AuthorityProof? = nil,
                confirm: [String] = [], label: String? = nil) {
        self.slot = slot
        self.sensor = sensor
        self.rules = rules
        self.proof = proof
        self.confirm = confirm
        self.label = label
    }

    /// What the proof of a binding covers: the slot, the proof key registered next and the
    /// fingers confirmed, so a proof made for one binding serves no other.
    package static func subject(slot: SlotReference, proofKey: borrowing SecretBytes, confirm: [String]) throws -> [UInt8] {
        var w = ByteWriter(label: "vault-bind-subject-v1")
        w.append(slot.slotID)
        w.append(try KeyedHash.hash(proofKey.exposedBytes(), key: [], outputLength: 32))
        for f in confirm.sorted() { w.append(f) }
        return w.bytes
    }
}

/// What a passcode (or recovery-key) unlock recorded with the authority.
package enum PasscodeRecord: String, Codable, Sendable {
    /// The authority knows no such vault: nothing was recorded.
    case notBound = "not-bound"
    /// This vault's own passcode clock restarted; it is not one of the vaults that manage the
    /// fingerprints, so the lockout (if any) stays.
    case vault
    /// An owner vault: the lockout is lifted and every passcode clock restarted.
    case owner
}

/// The keys of one fingerprint unlock: the key the slot is sealed with now, and the key (with
/// its parameters) the caller re-seals the slot with at once, so a key seen in one unlock opens
/// nothing after the next one.
package final class UnlockGrant {
    /// The key that opens the slot as it is.
    package let kek: SecretBytes
    /// The slot's next key, nil when the authority could not make one now (the slot stays as it is).
    package let next: NextSlotKey?
    /// A grant of `kek`, and of `next`.
    package init(kek: consuming SecretBytes, next: NextSlotKey?) {
        self.kek = kek
        self.next = next
    }
}

/// The key a fingerprint slot is re-sealed with after an unlock, and the slot's new parameters.
package final class NextSlotKey {
    /// The key.
    package let kek: SecretBytes
    /// The parameters (the new key's id).
    package let binding: FingerprintBinding
    /// A next key.
    package init(kek: consuming SecretBytes, binding: FingerprintBinding) {
        self.kek = kek
        self.binding = binding
    }
}

/// A new binding: the key of the fingerprint slot about to be written, and its public parameters.
package struct BindingGrant: ~Copyable {
    /// The slot's key-encryption key.
    package let kek: SecretBytes
    /// The parameters stored in the slot (reader and domain state at binding time).
    package let binding: FingerprintBinding
    /// What changed in the prints since this vault was last bound (shown to the person).
    package let changes: [PrintChange]
    /// Whether the vault is one of the vaults that manage the fingerprints (an owner vault).
    package let owner: Bool
    /// A grant of `kek` for a slot with `binding` (an authority over a socket builds it from the reply).
    package init(kek: consuming SecretBytes, binding: FingerprintBinding, changes: [PrintChange] = [], owner: Bool = true) {
        self.kek = kek
        self.binding = binding
        self.changes = changes
        self.owner = owner
    }
}

/// Narration the authority sends while it works (the CLI shows it; a daemon streams it).
package enum AuthorityEvent: Codable, Equatable, Sendable {
    /// A scan did not match; `triesLeft` more this evaluation.
    case noMatch(triesLeft: Int)
    /// A scan failed in a way worth retrying ("center your finger").
    case retry(advice: String, triesLeft: Int)
    /// This failure locked fingerprint out.
    case lockedOut

    /// The line shown to the person, with the `vault:` prefix.
    package var message: String {
        func tries(_ n: Int) -> String { "\(n) \(n == 1 ? "try" : "tries") left" }
        switch self {
        case .noMatch(let left): return left > 0 ? "vault: no match, \(tries(left))" : "vault: no match"
        case .retry(let advice, let left): return "vault: \(advice)" + (left > 0 ? " (\(tries(left)))" : "")
        case .lockedOut: return "vault: no match; fingerprint is now locked out"
        }
    }
}

/// Which kind of authority is in use, and what it protects against (for `status` and `doctor`).
package enum AuthorityKind: String, Codable, Sendable {
    /// In the vault process, state in the user's files.
    case embedded
    /// The system daemon `vault-authd`, state out of the user's reach.
    case system

    /// One sentence on what it protects against.
    package var protection: String {
        switch self {
        case .embedded:
            "protects against a person at the reader, not against code running as you (the state is in your files)"
        case .system:
            "only a live match on the reader releases a fingerprint key; your own processes cannot read or reset it"
        }
    }
}

/// The authority's view for `vault status`.
package struct AuthorityStatus: Codable, Equatable, Sendable {
    /// Embedded or system.
    package var kind: AuthorityKind
    /// The enrolled fingers.
    package var fingers: [EnrolledFinger]
    /// Why the prints could not be read, when they could not.
    package var printsError: String?
    /// Consecutive failed matches.
    package var failedMatches: Int
    /// The failures that lock fingerprint out.
    package var threshold: Int
    /// The reader the domain state was computed for.
    package var sensor: SensorIdentity?
    /// The current domain state of that reader.
    package var domainState: DomainState?
    /// Whether the slot asked about is bound to the current prints (nil: no slot asked about).
    package var bindingCurrent: Bool?
    /// When the passcode is next needed by the 48 h rule (seconds since 1970), nil when never.
    package var passcodeDue: Int64?
    /// Whether the reboot rule already asks for the passcode.
    package var passcodeAfterRebootDue: Bool
    /// What protects the authority's device secret at rest (nil: an authority that does not say).
    package var secrets: SecretProtection? = nil
    /// The system authority's reader backend and why it is in use ("fprintd (it owns
    /// net.reactivated.Fprint on the system bus)"); nil for the embedded authority.
    package var readerBackend: String? = nil
    /// The fingers the reader backend itself keeps for this user (fprintd's, vault's names), which
    /// `vault enroll --finger F` takes without a scan; nil when the backend keeps none.
    package var backendFingers: [String]? = nil
    /// Whether the vault of the slot asked about is an owner vault (nil: none asked about, or
    /// the authority does not know it).
    package var owner: Bool? = nil
}

/// The seam that holds the device secret, the enrolled prints, the bindings and the lockout
/// counter, and runs the match itself. It hands out a fingerprint slot key only after its own live
/// match, or for a brand-new binding; counters are reset only with a proof of the vault master key.
/// The embedded authority implements it in-process; `vault-authd` implements the same requests
/// over a socket, so nothing here assumes shared memory with the caller.
package protocol KeyAuthority: AnyObject {
    /// Embedded or system.
    var kind: AuthorityKind { get }
    /// The enrolled fingers.
    func fingers() throws -> [EnrolledFinger]
    /// The reader this authority would use (`prefer` when present), opening it.
    /// - Throws: 15 no reader, 13 busy.
    func reader(prefer: SensorIdentity?) throws -> SensorIdentity
    /// A fresh single-use challenge for a proof.
    func challenge() throws -> [UInt8]
    /// Binds `request.slot`: a fresh binding secret, the vault's passcode rules. The first
    /// binding of a vault registers `proofKey` as the key its proofs are checked under (the
    /// first vault of a user becomes an owner vault); every later one needs `request.proof`
    /// under the registered key, and a different `proofKey` (after a rotation) is held as the
    /// next key until a proof under it arrives. Prints enrolled without an owner's proof must be
    /// in `request.confirm`. An old key is never handed out again.
    /// - Throws: 10 no valid proof, 15 no reader, 16 no prints on the reader, 20 unconfirmed
    ///   prints (named, with when and by whom).
    func bind(_ request: BindRequest, proofKey: borrowing SecretBytes) throws -> BindingGrant
    /// A live match for the binding of `slot` (sealed now with `slot.keyID`), then its key and
    /// the key to re-seal the slot with. Applies the lockout and (with the stricter of `rules`
    /// and the registered rules) the reboot and 48 h rules before any scan.
    /// - Throws: 10 retry limit (`retryLimitExceeded`), 11, 12, 13, 15, 16, 17, 18, 20.
    func unlock(_ slot: SlotReference, rules: PasscodeRules, prompt: String, events: (AuthorityEvent) -> Void) throws -> UnlockGrant
    /// A live match for the binding of `slot`, no key (fingerprint login). One of this binding's
    /// matches at most `reuse` seconds old counts (0: a scan always). The lockout applies; the
    /// passcode rules do not. - Returns: the token of that match over `nonce` (the vault's
    /// single-use nonce, 32 bytes), MAC'd under every proof key registered for the vault: what
    /// the vault (or the agent holding it) checks before it releases an item with fingerprint
    /// login on. - Throws: as `unlock` (no passcode rules); `.usage` for a nonce not 32 bytes.
    func verify(_ slot: SlotReference, nonce: [UInt8], reuse: Int, prompt: String, events: (AuthorityEvent) -> Void) throws -> FreshMatchToken
    /// Records a passcode (or recovery-key) unlock: restarts the vault's passcode clock and, for
    /// an owner vault, resets the lockout and restarts every passcode clock.
    /// - Returns: what was recorded (`notBound`: the vault is not known here, nothing recorded).
    /// - Throws: `.authenticationFailed` for a forged proof.
    @discardableResult
    func recordPasscodeUnlock(_ proof: AuthorityProof) throws -> PasscodeRecord
    /// Takes `proofKey` as the vault's next key, for a proof (purpose `rekey`, subject
    /// `AuthorityProofMAC.keySubject(proofKey)`) under its registered or its next key. The new
    /// key stays the next one until a proof under it arrives (a rotation that never commits
    /// leaves the vault's key as it was). - Returns: `notBound` when the vault is not known here.
    /// - Throws: `.proofRefused` for a proof under no key held for the vault.
    @discardableResult
    func rekey(_ proof: AuthorityProof, proofKey: borrowing SecretBytes) throws -> PasscodeRecord
    /// Registers `proofKey` as the key of the known vault `vaultID` after a live match of a
    /// confirmed print on the reader: the way back for a vault whose key the authority no longer
    /// holds (a copy restored from an older backup). The vault's other registrations (owner or
    /// not) stay. - Returns: `notBound` when the vault is not known here (a bind registers it).
    /// - Throws: as `verify` (10 retry limit, 11, 13, 15, 16, 17, 18).
    @discardableResult
    func reregister(vaultID: [UInt8], proofKey: borrowing SecretBytes, label: String?, prompt: String,
                    events: (AuthorityEvent) -> Void) throws -> PasscodeRecord
    /// How many seconds the caller must wait before trying a passcode for `vault`: nothing for the
    /// first wrong ones, then growing, as iOS does; counted from the last wrong one.
    func beginPasscodeAttempt(vaultID: [UInt8]) throws -> Int
    /// A wrong passcode for `vault`: counted where the lockout lives (a passcode unlock recorded
    /// with `recordPasscodeUnlock` clears the count). Not counted before the try, so processes
    /// that unlock at the same time with the right passcode never delay one another.
    func recordPasscodeFailure(vaultID: [UInt8]) throws
    /// Enrols a finger on the reader (the authority runs the enrolment). Needs the proof of an
    /// owner vault (purpose `enroll`, subject the finger's name), or no owner vault at all (the
    /// first finger: enrolled unconfirmed). `label`: the proving vault's name, for the history.
    func enroll(finger: String?, sensor: SensorIdentity?, proof: AuthorityProof?, label: String?) throws -> EnrolledFinger
    /// Removes a finger's prints (every reader); returns what went. Needs an owner vault's
    /// proof (subject the finger's name) once there is one.
    func unenroll(finger: String, proof: AuthorityProof?, label: String?) throws -> [EnrolledFinger]
    /// Forgets every print and binding: with an owner vault's proof, or for a damaged state
    /// (after the owner proved a passcode in the caller), or when no owner vault exists.
    func resetPrints(proof: AuthorityProof?) throws
    /// The view for `vault status`, with the binding of `slot` checked when given.
    func status(slot: SlotReference?, sensor: SensorIdentity?, rules: PasscodeRules) throws -> AuthorityStatus
}

/// The failed matches that lock fingerprint out.
package let lockoutThreshold = 5

/// The tries one evaluation allows.
package let triesPerEvaluation = 3

/// The wait before a passcode attempt after `failures` wrong ones in a row: none for the first
/// three, then 1, 2, 4, 8, 16 and at most 30 seconds.
package func passcodeDelay(afterFailures failures: Int) -> Int {
    failures < 3 ? 0 : min(1 << min(failures - 3, 5), 30)
}

/// Thrown by `KeyAuthority.unlock` and `verify` when three scans did not match: the caller decides
/// whether the passcode follows (policy) or the evaluation fails (10).
package struct RetryLimitExceeded: Error, Equatable, Sendable {
    /// Creates the error.
    package init() {}
}

extension UnlockedVault {
    /// The key the authority checks proofs with: registered at binding time, derived from the
    /// master key, useless for opening anything.
    package func proofKey() throws -> SecretBytes {
        try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/authority-proof")
    }

    /// A proof that this process holds the vault's master key, for `purpose` and `subject`
    /// (what the request asks for), over `challenge`.
    package func proof(_ purpose: ProofPurpose, challenge: [UInt8], subject: [UInt8] = []) throws -> AuthorityProof {
        try proof(purpose, challenge: challenge, subject: subject, key: try proofKey())
    }

    /// The same under `key` (an earlier generation's proof key).
    func proof(_ purpose: ProofPurpose, challenge: [UInt8], subject: [UInt8], key: borrowing SecretBytes) throws -> AuthorityProof {
        AuthorityProof(vaultID: store.vaultID, challenge: challenge,
                       mac: try AuthorityProofMAC.mac(key: key, purpose: purpose, vaultID: store.vaultID, challenge: challenge, subject: subject))
    }

    /// A fresh proof from `authority` for `purpose` and `subject`.
    package func proof(_ purpose: ProofPurpose, for authority: any KeyAuthority, subject: [UInt8] = []) throws -> AuthorityProof {
        try proof(purpose, challenge: try authority.challenge(), subject: subject)
    }
}

/// The proof's MAC, shared by the prover and every authority.
package enum AuthorityProofMAC {
    /// BLAKE2b-256 keyed with the proof key over the purpose, the vault id, the challenge and
    /// the subject (the finger enrolled or removed, the slot bound: see `BindRequest.subject`).
    package static func mac(key: borrowing SecretBytes, purpose: ProofPurpose, vaultID: [UInt8], challenge: [UInt8],
                           subject: [UInt8] = []) throws -> [UInt8] {
        var w = ByteWriter(label: "vault-authority-proof-v2")
        w.append(purpose.rawValue)
        w.append(vaultID)
        w.append(challenge)
        w.append(subject)
        return try KeyedHash.hash(w.bytes, key: key, outputLength: 32)
    }

    /// Whether `proof` is a valid MAC for `purpose` and `subject` under `key` (constant time).
    package static func check(_ proof: AuthorityProof, purpose: ProofPurpose, subject: [UInt8] = [], key: borrowing SecretBytes) throws -> Bool {
        constantTimeEqual(try mac(key: key, purpose: purpose, vaultID: proof.vaultID, challenge: proof.challenge, subject: subject), proof.mac)
    }

    /// The subject of an enrolment or removal proof: the finger's name (empty: the authority's choice).
    package static func fingerSubject(_ finger: String?) -> [UInt8] { Array((finger ?? "").utf8) }

    /// The subject of a `rekey` proof: the hash of the proof key handed over, so a proof made
    /// for one key registers no other.
    package static func keySubject(_ proofKey: borrowing SecretBytes) throws -> [UInt8] {
        var w = ByteWriter(label: "vault-rekey-subject-v1")
        w.append(try KeyedHash.hash(proofKey.exposedBytes(), key: [], outputLength: 32))
        return w.bytes
    }
}

/// The fresh-match token's MAC, shared by every authority (which makes it) and the vault (which
/// checks it), in the style of `AuthorityProofMAC` under another label, so neither MAC can pass
/// for the other.
package enum FreshMatchMAC {
    /// BLAKE2b-256 keyed with the proof key over the vault id, the vault's nonce and the age of
    /// the match reused (-1 for a scan made for this request).
    package static func mac(key: borrowing SecretBytes, vaultID: [UInt8], nonce: [UInt8], reusedAge: Int64?) throws -> [UInt8] {
        var w = ByteWriter(label: "vault-fresh-match-v1")
        w.append(vaultID)
        w.append(nonce)
        w.append(reusedAge ?? -1)
        return try KeyedHash.hash(w.bytes, key: key, outputLength: 32)
    }

    /// The token an authority hands out after its match: one MAC per distinct proof key in `keys`.
    package static func token(vaultID: [UInt8], nonce: [UInt8], reusedAge: Int64?, keys: [[UInt8]]) throws -> FreshMatchToken {
        var macs: [[UInt8]] = []
        for k in keys {
            let mac = try mac(key: try SecretBytes(copying: k), vaultID: vaultID, nonce: nonce, reusedAge: reusedAge)
            if !macs.contains(mac) { macs.append(mac) }
        }
        return FreshMatchToken(vaultID: vaultID, nonce: nonce, reusedAge: reusedAge, macs: macs)
    }

    /// Whether one of `token`'s MACs is the MAC under `key` (each compared in constant time).
    package static func check(_ token: FreshMatchToken, key: borrowing SecretBytes) throws -> Bool {
        let mine = try mac(key: key, vaultID: token.vaultID, nonce: token.nonce, reusedAge: token.reusedAge)
        var found = false
        for m in token.macs.prefix(FreshMatchToken.maximumMACs) where constantTimeEqual(mine, m) { found = true }
        return found
    }
}
