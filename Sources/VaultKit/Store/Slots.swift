import FoundationEssentials
import VaultSystem

/// The kinds of key slot. Each kind has a sealer (what writes a slot: it needs no secret of the
/// slot's own for the recovery kind, only its public key) and an opener (what unwraps one), as
/// age has recipients and identities.
package enum SlotKind: String, Codable, CaseIterable, Sendable {
    /// Argon2id of the passcode.
    case passcode
    /// Sealed to the recovery key's X25519 public key.
    case recovery
    /// A key from the key authority, released by a live match.
    case fingerprint
}

/// One key slot: the master key wrapped under a key-encryption key of some kind.
package struct KeySlot: Sendable, Equatable {
    /// Row id, bound into the associated data.
    package var id: Int64
    /// What opens it.
    package var kind: SlotKind
    /// The key generation the slot belongs to.
    package var generation: Int64
    /// Public parameters (JSON): KDF parameters, the recovery public key, or the fingerprint binding.
    package var params: [UInt8]
    var nonce: [UInt8]
    var wrapped: [UInt8]

    /// The fingerprint binding of a fingerprint slot.
    /// - Throws: `.corrupt` when the parameters are unreadable.
    package func fingerprintBinding() throws -> FingerprintBinding {
        guard kind == .fingerprint, let b = try? WireJSON.decode(FingerprintBinding.self, from: params) else {
            throw VaultError.corrupt("the fingerprint slot's binding is unreadable")
        }
        return b
    }

    /// The Argon2id parameters of a passcode slot, refused outside the accepted range before any
    /// derivation runs (tampered parameters must not run "forever" or take all memory).
    /// - Throws: `.corrupt`.
    package func passcodeParameters() throws -> KDFParameters {
        guard kind == .passcode, let p = try? WireJSON.decode(KDFParameters.self, from: params) else {
            throw VaultError.corrupt("the passcode slot's parameters are unreadable")
        }
        guard KDFParameters.acceptedMemoryBytes.contains(p.memoryBytes), KDFParameters.acceptedOperations.contains(p.operations) else {
            throw VaultError.corrupt("the passcode slot asks for Argon2id with \(p.memoryBytes) bytes and \(p.operations) passes, outside the accepted range")
        }
        return p
    }
}

/// The public parameters of a fingerprint slot, bound into its associated data.
package struct FingerprintBinding: Codable, Equatable, Sendable {
    /// The reader the vault was bound on.
    package var sensor: SensorIdentity
    /// The domain state (hex) at binding time.
    package var domainState: String
    /// The kind of key authority that holds the binding (absent in slots made before there was a
    /// choice: the embedded one).
    package var authority: AuthorityKind?
    /// Which of the binding's keys seals the slot (hex; each fingerprint unlock re-seals the slot
    /// with a new one). Absent in slots made before keys rolled: the binding's first key.
    package var keyID: String?
    /// Creates a binding.
    package init(sensor: SensorIdentity, domainState: DomainState, authority: AuthorityKind? = nil, keyID: String? = nil) {
        self.sensor = sensor
        self.domainState = domainState.hex
        self.authority = authority
        self.keyID = keyID
    }

    /// The authority that holds it.
    package var authorityKind: AuthorityKind { authority ?? .embedded }
}

/// The public parameters of a recovery slot.
struct RecoveryParams: Codable {
    var v = 1
    /// The recovery key's X25519 public key (hex).
    var publicKey: String
}

/// A slot's parameters and wrapped key, as a sealer makes them.
package struct SealedSlot: Sendable {
    let params: [UInt8]
    let nonce: [UInt8]
    let wrapped: [UInt8]
}

/// Writes a slot of one kind. `associatedData(params)` is the slot's AD over its parameters.
package protocol SlotSealer {
    /// The kind written.
    var kind: SlotKind { get }
    /// Wraps `masterKey` into slot `slotID`.
    func seal(_ masterKey: borrowing SecretBytes, slotID: Int64, associatedData: ([UInt8]) -> [UInt8]) throws -> SealedSlot
}

/// Opens slots of one kind.
package protocol SlotOpener {
    /// The kind opened.
    var kind: SlotKind { get }
    /// Unwraps the master key, or throws `CryptoError` when this opener does not open `slot`.
    func open(_ slot: KeySlot, associatedData: [UInt8]) throws -> SecretBytes
}

/// A passcode slot's parameters as stored: the Argon2id parameters and, for a passcode on the
/// TPM, the TPM object and its salt (`tpm`, absent otherwise, so older slots read unchanged).
struct PasscodeSlotParameters: Codable {
    var memoryBytes: Int
    var operations: Int
    var salt: [UInt8]
    var tpm: PasscodeTPMParameters?

    init(_ kdf: KDFParameters, tpm: PasscodeTPMParameters?) {
        memoryBytes = kdf.memoryBytes
        operations = kdf.operations
        salt = kdf.salt
        self.tpm = tpm
    }
}

/// The TPM half of a passcode slot (docs/format.md, "Passcode on the TPM").
package struct PasscodeTPMParameters: Codable, Equatable, Sendable {
    /// Format of this record.
    var v = 1
    /// 16 random bytes, bound into the authValue.
    var salt: [UInt8]
    /// The sealed object (`TPMSealedRecord`), DA-protected, whose authValue derives from the passcode.
    var sealed: [UInt8]
}

extension KeySlot {
    /// The TPM half of a passcode slot, nil when the passcode is not on the TPM.
    /// - Throws: `.corrupt` when the parameters are unreadable.
    package func passcodeTPM() throws -> PasscodeTPMParameters? {
        guard kind == .passcode, let p = try? WireJSON.decode(PasscodeSlotParameters.self, from: params) else {
            throw VaultError.corrupt("the passcode slot's parameters are unreadable")
        }
        guard let t = p.tpm else { return nil }
        guard t.v == 1, t.salt.count == 16 else { throw VaultError.corrupt("the passcode slot's TPM parameters are unreadable") }
        return t
    }

    /// Whether the passcode of this slot needs the TPM.
    package var passcodeIsOnTPM: Bool { (try? passcodeTPM()) != nil }
}

/// The passcode-on-TPM derivation: Argon2id output `A`; authValue = BLAKE2b-256(key = A,
/// `len‖"vault-passcode-tpm-auth-v1"`, `len‖vault_id`, `len‖tpm salt`); the TPM unseals the 32-byte
/// `S` for that authValue only (a wrong one counts towards its lockout); KEK = BLAKE2b-256(key =
/// S‖A, `len‖"vault-passcode-tpm-kek-v1"`, `len‖vault_id`). Without this machine's TPM, `A` alone
/// (what an offline guesser can compute) yields nothing.
enum PasscodeTPM {
    static func authValue(_ a: borrowing SecretBytes, vaultID: [UInt8], salt: [UInt8]) throws -> SecretBytes {
        var w = ByteWriter(label: "vault-passcode-tpm-auth-v1")
        w.append(vaultID)
        w.append(salt)
        var h = try KeyedHash.hash(w.bytes, key: a, outputLength: 32)
        defer { wipe(&h) }
        return try SecretBytes(copying: h)
    }

    static func kek(_ s: borrowing SecretBytes, _ a: borrowing SecretBytes, vaultID: [UInt8]) throws -> SecretBytes {
        let key = try SecretBytes(zeroed: s.count + a.count)
        key.withUnsafeMutableBytes { k in
            s.withUnsafeBytes { k.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            a.withUnsafeBytes { (k.baseAddress! + s.count).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        }
        var w = ByteWriter(label: "vault-passcode-tpm-kek-v1")
        w.append(vaultID)
        var h = try KeyedHash.hash(w.bytes, key: key, outputLength: 32)
        defer { wipe(&h) }
        return try SecretBytes(copying: h)
    }

    /// The TPM's answer to a wrong passcode: how many tries are left before it locks.
    static func wrongPasscode(_ tpm: TPMDevice) -> VaultError {
        guard let state = try? tpm.dictionaryAttackState() else { return .wrongPasscode }
        if state.lockedOut { return .tpmLockout(seconds: state.recoverySeconds) }
        let n = state.triesLeft
        return .authenticationFailed("wrong passcode, \(n) \(n == 1 ? "try" : "tries") before the TPM locks")
    }

    /// Unseals `S` for the passcode's `A`.
    static func unseal(_ t: PasscodeTPMParameters, a: borrowing SecretBytes, vaultID: [UInt8], tpm: TPMDevice?, what: String) throws -> SecretBytes {
        guard let tpm else {
            throw VaultError.tpmUnavailable("the passcode of \(what) is on a TPM, and none is reachable here (VAULT_TPM_TCTI, /dev/tpmrm0)")
        }
        let record = try TPMSealedRecord(encoded: t.sealed, what: "the passcode slot's TPM object")
        let auth = try authValue(a, vaultID: vaultID, salt: t.salt)
        do throws(TPMFailure) {
            return try tpm.unseal(record.object, authValue: auth)
        } catch .wrongAuthorization {
            throw wrongPasscode(tpm)
        } catch .lockout {
            throw VaultError.tpmLockout(seconds: (try? tpm.dictionaryAttackState())?.recoverySeconds)
        } catch {
            throw error.vaultError("the passcode slot of \(what)")
        }
    }
}

/// Where a new passcode slot puts its passcode: Argon2id alone, or Argon2id and the TPM.
package struct PasscodeTPMTarget: Sendable {
    /// The TPM that rate-limits the passcode.
    package var device: TPMDevice
    /// The vault's id (bound into the derivation).
    package var vaultID: [UInt8]
    /// Creates a target.
    package init(device: TPMDevice, vaultID: [UInt8]) {
        self.device = device
        self.vaultID = vaultID
    }
}

/// A passcode slot: Argon2id under fresh parameters (and, with a TPM target, an object the TPM
/// unseals only for an authValue from the passcode).
package final class PasscodeSealer: SlotSealer {
    package var kind: SlotKind { .passcode }
    let kek: SecretBytes
    let parameters: KDFParameters
    let tpm: PasscodeTPMParameters?

    /// Derives the key now (the expensive part, and the TPM sealing), so a transaction does not wait for it.
    /// - Throws: `TPMFailure`'s vault errors when the TPM cannot seal.
    package init(passcode: borrowing SecretBytes, parameters: KDFParameters, tpm target: PasscodeTPMTarget? = nil) throws {
        let a = try PasswordKDF.deriveKey(password: passcode, parameters: parameters)
        self.parameters = parameters
        guard let target else {
            kek = a
            tpm = nil
            return
        }
        let salt = randomBytes(16)
        let s = try SecretBytes.random(count: 32)
        let auth = try PasscodeTPM.authValue(a, vaultID: target.vaultID, salt: salt)
        let policy = TPMSealPolicy(pcr7: false, dictionaryAttackProtected: true)
        let object: TPMSealedObject
        do throws(TPMFailure) { object = try target.device.seal(s, authValue: auth, policy: policy) } catch {
            throw error.vaultError("the passcode slot")
        }
        tpm = PasscodeTPMParameters(salt: salt, sealed: TPMSealedRecord(object: object, policy: policy).encoded)
        kek = try PasscodeTPM.kek(s, a, vaultID: target.vaultID)
    }

    package func seal(_ masterKey: borrowing SecretBytes, slotID: Int64, associatedData: ([UInt8]) -> [UInt8]) throws -> SealedSlot {
        let params = tpm == nil ? try WireJSON.encode(parameters)
                                : try WireJSON.encode(PasscodeSlotParameters(parameters, tpm: tpm))
        let s = try masterKey.withUnsafeBytes { try AEAD.seal($0, key: kek, associatedData: associatedData(params)) }
        return SealedSlot(params: params, nonce: s.nonce, wrapped: s.ciphertext)
    }
}

/// Opens a passcode slot with the passcode (and, for a passcode on the TPM, `tpm`).
package final class PasscodeOpener: SlotOpener {
    package var kind: SlotKind { .passcode }
    let passcode: SecretBytes
    let vaultID: [UInt8]
    let tpm: TPMDevice?
    let vaultName: String
    /// Copies the passcode.
    package init(passcode: borrowing SecretBytes, vaultID: [UInt8] = [], tpm: TPMDevice? = nil, vaultName: String = "this vault") throws {
        self.passcode = try passcode.duplicate()
        self.vaultID = vaultID
        self.tpm = tpm
        self.vaultName = vaultName
    }

    /// - Throws: `CryptoError` for a wrong passcode; for a passcode on the TPM, the TPM's own
    ///   answers (`.authenticationFailed` with the tries left, `.tpmLockout`, `.tpmUnavailable`).
    package func open(_ slot: KeySlot, associatedData: [UInt8]) throws -> SecretBytes {
        let a = try PasswordKDF.deriveKey(password: passcode, parameters: try slot.passcodeParameters())
        guard let t = try slot.passcodeTPM() else {
            return try AEAD.open(slot.wrapped, key: a, nonce: slot.nonce, associatedData: associatedData)
        }
        let s = try PasscodeTPM.unseal(t, a: a, vaultID: vaultID, tpm: tpm, what: "vault '\(vaultName)'")
        let kek = try PasscodeTPM.kek(s, a, vaultID: vaultID)
        return try AEAD.open(slot.wrapped, key: kek, nonce: slot.nonce, associatedData: associatedData)
    }
}

/// A recovery slot: sealed to the recovery key's public key (rotation needs no secret for it).
package struct RecoverySealer: SlotSealer {
    package var kind: SlotKind { .recovery }
    let publicKey: [UInt8]

    package func seal(_ masterKey: borrowing SecretBytes, slotID: Int64, associatedData: ([UInt8]) -> [UInt8]) throws -> SealedSlot {
        let params = try WireJSON.encode(RecoveryParams(publicKey: hexString(publicKey)))
        let s = try X25519Seal.seal(masterKey, to: publicKey, associatedData: associatedData(params))
        return SealedSlot(params: params, nonce: s.nonce, wrapped: s.sealed)
    }

    /// The sealer of an existing recovery slot (same recovery key), or nil when unreadable.
    static func reusing(_ slot: KeySlot) -> RecoverySealer? {
        guard slot.kind == .recovery, let p = try? WireJSON.decode(RecoveryParams.self, from: slot.params),
              let pk = bytesFromHex(p.publicKey) else { return nil }
        return RecoverySealer(publicKey: pk)
    }
}

/// Opens a recovery slot with the recovery key.
final class RecoveryOpener: SlotOpener {
    var kind: SlotKind { .recovery }
    let scalar: SecretBytes
    init(scalar: consuming SecretBytes) { self.scalar = scalar }

    func open(_ slot: KeySlot, associatedData: [UInt8]) throws -> SecretBytes {
        try X25519Seal.open(slot.wrapped, nonce: slot.nonce, secret: scalar, associatedData: associatedData)
    }
}

/// A fingerprint slot: a new binding in the key authority, whose key wraps the master key.
/// The authority is asked inside `seal`, when the slot id is known; the proof key it registers
/// derives from the master key being wrapped, and the binding is proven by `prover` (the vault
/// as it is unlocked now: during a rotation, under its old key).
package struct FingerprintSealer: SlotSealer {
    package var kind: SlotKind { .fingerprint }
    let authority: any KeyAuthority
    let prover: UnlockedVault
    let sensor: SensorIdentity?
    let rules: PasscodeRules
    let confirm: [String]
    /// What changed in the prints since the vault was last bound, once sealed.
    let report: BindingReport

    /// A sealer binding through `authority` on `sensor` (nil: the authority's choice), proven by
    /// `prover`; `confirm` names the fingers the owner confirms explicitly.
    package init(authority: any KeyAuthority, prover: UnlockedVault, sensor: SensorIdentity?, rules: PasscodeRules,
                confirm: [String] = [], report: BindingReport = BindingReport()) {
        self.authority = authority
        self.prover = prover
        self.sensor = sensor
        self.rules = rules
        self.confirm = confirm
        self.report = report
    }

    package func seal(_ masterKey: borrowing SecretBytes, slotID: Int64, associatedData: ([UInt8]) -> [UInt8]) throws -> SealedSlot {
        let proofKey = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/authority-proof")
        let slot = SlotReference(vaultID: prover.store.vaultID, slotID: slotID)
        let subject = try BindRequest.subject(slot: slot, proofKey: proofKey, confirm: confirm)
        let grant: BindingGrant = try prover.proven(.bind, by: authority, subject: subject) {
            try authority.bind(BindRequest(slot: slot, sensor: sensor, rules: rules, proof: $0, confirm: confirm, label: prover.store.location.name),
                               proofKey: proofKey)
        }
        report.changes = grant.changes
        report.owner = grant.owner
        let params = try WireJSON.encode(grant.binding)
        let s = try masterKey.withUnsafeBytes { try AEAD.seal($0, key: grant.kek, associatedData: associatedData(params)) }
        return SealedSlot(params: params, nonce: s.nonce, wrapped: s.ciphertext)
    }
}

/// What a binding reported: the changes of the prints since the vault was last bound (the CLI
/// shows them), and whether the vault manages the fingerprints.
package final class BindingReport {
    /// The changes, oldest first.
    package var changes: [PrintChange] = []
    /// Whether the vault is an owner vault.
    package var owner = true
    /// An empty report.
    package init() {}
}

/// Opens a fingerprint slot with the key the authority released.
final class FingerprintOpener: SlotOpener {
    var kind: SlotKind { .fingerprint }
    let kek: SecretBytes
    init(kek: consuming SecretBytes) { self.kek = kek }

    func open(_ slot: KeySlot, associatedData: [UInt8]) throws -> SecretBytes {
        try AEAD.open(slot.wrapped, key: kek, nonce: slot.nonce, associatedData: associatedData)
    }
}

extension KDFParameters {
    /// Memory accepted from a slot: 8 MiB to 4 GiB.
    package static let acceptedMemoryBytes = (8 << 20)...(4 << 30)
    /// Passes accepted from a slot.
    package static let acceptedOperations = 1...20
}
