import FoundationEssentials

/// A vault whose master key is in memory: reads and writes items, re-wraps slots.
/// The master key and its subkeys live in guarded memory and are wiped when this object ends.
public final class UnlockedVault {
    /// The locked store underneath.
    public let store: VaultStore
    let masterKey: SecretBytes
    let itemKey: SecretBytes
    let indexKey: SecretBytes
    let auditKey: SecretBytes
    /// The key generation the master key belongs to.
    public let generation: Int64
    /// How this vault was unlocked in this process (nil: a key handed over, as in the agent).
    package internal(set) var authentication: AuthOutcome?
    /// The vault's slot sequence (`VaultStore.slotSequence`) as this process last knew it: read
    /// before the slot it unlocked with, then moved on by every slot it makes itself. A rotation
    /// re-makes every slot from what it knew, so it refuses when another process has changed a
    /// slot since (it would undo a concurrent passcode change).
    var slotSequenceSeen: Int64
    /// Why the key authority did not record this vault's passcode unlock (nil: it did, or the
    /// vault was not opened with a passcode): the vault opened all the same.
    public var unrecorded: String?
    /// What puts that right, when something does (a key the authority does not hold any more).
    public var unrecordedHint: String?
    /// What the key authority recorded of this vault's passcode unlock (nil: nothing, or not
    /// opened with a passcode).
    package var passcodeRecord: PasscodeRecord?
    /// The nonces this vault issued for fresh fingerprint matches (`freshMatchNonce(for:)`): a
    /// token is accepted only over one of them, once. They go with this object (an agent's
    /// session, a command).
    package let freshMatches = FreshMatchBook()

    /// The start of every item record's associated data: its label and the vault id
    /// (`recordAD`; the loops over every row write only the rest per record).
    let recordADPrefix: [UInt8]

    init(store: VaultStore, masterKey: consuming SecretBytes, generation: Int64, slotSequence: Int64) throws {
        self.store = store
        var prefix = ByteWriter(label: "vault-record-v2")
        prefix.append(store.vaultID)
        recordADPrefix = prefix.bytes
        itemKey = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/item-key")
        indexKey = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/name-index")
        auditKey = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/audit-key")
        self.masterKey = masterKey
        self.generation = generation
        slotSequenceSeen = slotSequence
    }

    var db: Database { store.db }

    // MARK: slots

    /// Wraps the master key into a new slot made by `sealer`.
    @discardableResult
    func insertSlot(_ sealer: any SlotSealer, generation: Int64) throws -> Int64 {
        // Slot ids never repeat (a counter in meta), so an old slot can never pass for a new one.
        let highest = max(try store.meta("slot_seq")?.int ?? 0,
                          (try db.query("SELECT coalesce(max(id), 0) FROM slots").first?.first?.int) ?? 0)
        let id = highest + 1
        let kind = sealer.kind
        // Sealed before the counter moves: a sealer that fails (no reader for a fingerprint
        // slot, which a rotation carries on without) leaves the counter as this process knows it.
        let sealed = try sealer.seal(masterKey, slotID: id) { params in
            store.slotAD(id: id, kind: kind, params: params, generation: generation)
        }
        try store.setMeta("slot_seq", .integer(id))
        try db.query("INSERT INTO slots(id, kind, generation, params, nonce, wrapped) VALUES(?,?,?,?,?,?)",
                     [.integer(id), .text(kind.rawValue), .integer(generation), .blob(sealed.params), .blob(sealed.nonce), .blob(sealed.wrapped)])
        slotSequenceSeen = id
        return id
    }

    /// Replaces the passcode slot (the other slots and every item stay as they are).
    /// `kdf` nil keeps the current cost with a fresh salt. `onTPM` nil keeps the passcode where it
    /// is (on the TPM or not); true puts it on the TPM of the vault's location, false takes it off.
    /// - Throws: `.tpmUnavailable` when the passcode is to be on a TPM and none is reachable.
    public func changePasscode(to passcode: borrowing SecretBytes, kdf: KDFParameters?, onTPM: Bool? = nil) throws {
        var params = kdf ?? KDFParameters()
        let current = try store.slot(.passcode)
        if kdf == nil, let old = try? current?.passcodeParameters() {
            params.memoryBytes = old.memoryBytes
            params.operations = old.operations
        }
        let target = try passcodeTarget(onTPM: onTPM ?? current?.passcodeIsOnTPM ?? false)
        let sealer = try PasscodeSealer(passcode: passcode, parameters: params, tpm: target)
        try writeTransaction {
            try db.query("DELETE FROM slots WHERE kind='passcode'")
            try insertSlot(sealer, generation: generation)
        }
    }

    /// Whether this vault's passcode is on the TPM (its slot's unseal is rate-limited by the TPM).
    public var passcodeIsOnTPM: Bool { (try? store.slot(.passcode))??.passcodeIsOnTPM ?? false }

    /// The TPM a new passcode slot seals to, when `onTPM`.
    /// - Throws: `.tpmUnavailable` when none is reachable from the vault's location.
    func passcodeTarget(onTPM: Bool) throws -> PasscodeTPMTarget? {
        guard onTPM else { return nil }
        guard let device = store.location.tpm else {
            throw VaultError.tpmUnavailable("vault '\(store.location.name)' keeps its passcode on the TPM, and none is reachable here (VAULT_TPM_TCTI, /dev/tpmrm0)")
        }
        return PasscodeTPMTarget(device: device, vaultID: store.vaultID)
    }

    /// Binds (or re-binds) this vault's one fingerprint slot through `authority`: a new binding
    /// there, a new slot here. Open sessions and the old binding stop working.
    /// `confirm`: fingers no vault vouched for that the owner confirms explicitly. - Returns:
    /// what changed in the prints since the vault was last bound, and whether it is an owner.
    @discardableResult
    package func bindFingerprint(authority: any KeyAuthority, sensor: SensorIdentity?, confirm: [String] = []) throws -> BindingReport {
        let report = BindingReport()
        let sealer = FingerprintSealer(authority: authority, prover: self, sensor: sensor,
                                       rules: try store.settings().passcodeRules, confirm: confirm, report: report)
        try writeTransaction {
            try db.query("DELETE FROM slots WHERE kind='fingerprint'")
            try insertSlot(sealer, generation: generation)
        }
        return report
    }

    /// Re-wraps the master key in `slot` (a fingerprint slot as it was read) under `next`'s key
    /// and parameters, in place, if the row is unchanged since. - Returns: whether it was written.
    @discardableResult
    func reseal(fingerprintSlot slot: KeySlot, with next: NextSlotKey) throws -> Bool {
        let params = try WireJSON.encode(next.binding)
        let ad = store.slotAD(id: slot.id, kind: .fingerprint, params: params, generation: slot.generation)
        let s = try masterKey.withUnsafeBytes { try AEAD.seal($0, key: next.kek, associatedData: ad) }
        return try writeTransaction {
            try db.query("UPDATE slots SET params=?, nonce=?, wrapped=? WHERE id=? AND kind='fingerprint' AND nonce=? AND wrapped=?",
                         [.blob(params), .blob(s.nonce), .blob(s.ciphertext), .integer(slot.id), .blob(slot.nonce), .blob(slot.wrapped)])
            return db.changes > 0
        }
    }

    /// Removes every slot of `kind`.
    package func removeSlots(kind: SlotKind) throws {
        try writeTransaction { try db.query("DELETE FROM slots WHERE kind=?", [.text(kind.rawValue)]) }
    }

    /// One write transaction that first checks the vault still has the key generation this key
    /// belongs to: a rotation that committed meanwhile makes the write fail instead of writing
    /// rows no one can open.
    /// - Throws: `.sessionInvalid` ("the vault's keys were rotated while this command ran").
    @discardableResult
    func writeTransaction<T>(_ body: () throws -> T) throws -> T {
        try db.transaction {
            guard try store.keyGeneration() == generation else {
                throw VaultError.keysRotated
            }
            return try body()
        }
    }

    // MARK: key check

    /// A MAC of the master key stored in the vault, so a key handed over (to the agent) is
    /// checked before it is adopted; written on the first unlock through a slot when missing.
    func keyCheck() throws -> [UInt8] {
        try KeyedHash.hash(Array("vault-key-check-v1".utf8) + store.vaultID, key: masterKey, outputLength: 32)
    }

    /// Stores the key check when the vault has none for this generation.
    func recordKeyCheck() throws {
        let want = try keyCheck()
        if try store.meta("key_check")?.bytes == want { return }
        guard try store.keyGeneration() == generation else { return }
        try store.setMeta("key_check", .blob(want))
    }

}

/// One row of a listing: an item, or a row that failed authentication.
public enum ItemEntry: Sendable {
    /// A readable item.
    case item(Item)
    /// A row that could not be opened, by its row id (hex).
    case damaged(rowID: String)
}

extension UnlockedVault {
    /// Lends the master key, to hand it to the unlock session's agent over its private socket.
    public func withMasterKey<R>(_ body: (borrowing SecretBytes) throws -> R) rethrows -> R {
        try body(masterKey)
    }
}

extension VaultStore {
    /// A vault opened with a master key handed over by an unlocking process (the agent's side).
    /// The key must match the vault's key check: an arbitrary key is never adopted.
    /// - Throws: `.sessionInvalid` when the vault's key generation moved on since,
    ///   `.authenticationFailed` when the key is not this vault's.
    public func adopt(masterKey: consuming SecretBytes, generation: Int64) throws -> UnlockedVault {
        guard try keyGeneration() == generation else { throw VaultError.sessionInvalid("was invalidated by a key rotation") }
        let vault = try UnlockedVault(store: self, masterKey: masterKey, generation: generation, slotSequence: try slotSequence())
        guard let stored = try meta("key_check")?.bytes, constantTimeEqual(stored, try vault.keyCheck()) else {
            throw VaultError.authenticationFailed("the key handed over is not this vault's key")
        }
        try vault.migrateIfNeeded()
        return vault
    }

    /// A counter that changes whenever a slot is made or replaced (rotation, re-bind, passcode
    /// change): an unlock session compares it to decide whether it is still valid.
    public func slotSequence() throws -> Int64 {
        try meta("slot_seq")?.int ?? 0
    }

    /// ``keyGeneration()`` and ``slotSequence()`` in one query (an agent asks both before every
    /// request it serves from a session).
    public func keyGenerationAndSlotSequence() throws -> (generation: Int64, slotSequence: Int64) {
        var generation: Int64?, sequence: Int64 = 0
        for row in try db.query("SELECT key, value FROM meta WHERE key IN ('key_generation', 'slot_seq')") {
            switch row.first?.string {
            case "key_generation": generation = row.last?.int
            case "slot_seq": sequence = row.last?.int ?? 0
            default: break
            }
        }
        guard let generation else { throw VaultError.corrupt("missing key generation") }
        return (generation, sequence)
    }
}

extension VaultLocation {
    /// A location from an explicit root and name (the agent receives both from its client).
    public init(root: String, name: String) throws {
        try VaultLocation.validate(name: name)
        guard root.hasPrefix("/") else { throw VaultError.usage("vault root must be an absolute path") }
        self.init(uncheckedRoot: root, name: name)
    }
}
