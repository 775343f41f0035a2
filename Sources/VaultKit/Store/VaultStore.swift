import FoundationEssentials
import VaultSystem

/// A vault database, opened but locked: it can list its slots and unlock, nothing more.
public final class VaultStore {
    /// The schema version this code writes (it reads 1 too, and migrates it at the first unlock).
    public static let schemaVersion = 3

    /// Where the vault lives.
    public let location: VaultLocation
    let db: Database
    /// The random 16-byte vault identifier, bound into every record.
    public let vaultID: [UInt8]

    /// A store over an open database (a clone builds its database through this, `createEmpty`).
    convenience init(syncLocation location: VaultLocation, db: Database, vaultID: [UInt8]) {
        self.init(location: location, db: db, vaultID: vaultID)
    }

    private init(location: VaultLocation, db: Database, vaultID: [UInt8]) {
        self.location = location
        self.db = db
        self.vaultID = vaultID
    }

    /// The items table of schema 3 (schema 2 had no `login_hint`; schema 1 had one sealed JSON
    /// record per row).
    static let itemsTable = """
        CREATE TABLE items(id BLOB PRIMARY KEY, name_mac BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL,
                           overview_nonce BLOB NOT NULL, overview BLOB NOT NULL,
                           secrets_nonce BLOB NOT NULL, secrets BLOB NOT NULL, login_hint INTEGER)
        """

    /// The rows whose fingerprint login is on or unknown, so that `mayHaveFingerprintLogin` reads
    /// an index of those few instead of the table.
    static let loginHintIndex = "CREATE INDEX items_login_hint ON items(login_hint) WHERE login_hint IS NOT 0"

    /// Every table of a new vault (schema 3).
    static let schemaSQL = """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
        CREATE TABLE slots(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, generation INTEGER NOT NULL,
                           params BLOB NOT NULL, nonce BLOB NOT NULL, wrapped BLOB NOT NULL);
        \(itemsTable);
        \(loginHintIndex);
        CREATE TABLE audit(id INTEGER PRIMARY KEY, generation INTEGER NOT NULL,
                           nonce BLOB NOT NULL, sealed BLOB NOT NULL);
        """

    // MARK: creating and opening

    /// Creates a new vault with a random master key, a passcode slot and a recovery slot. The
    /// database is built under a temporary name and linked into place only once committed, so a
    /// crash never leaves a half-made vault that blocks the next `init`.
    /// - Returns: the unlocked vault and the recovery key, to be shown once.
    /// - Throws: `VaultError.failure` if a vault already exists there, `.io` on file problems.
    /// - Parameter showRecoveryKey: called with the recovery key once the database is complete
    ///   and before it is linked into place, so a vault never exists whose key was not shown; when
    ///   it throws (the key could not be written), no vault is made.
    public static func create(at location: VaultLocation, passcode: borrowing SecretBytes, kdf: KDFParameters,
                              showRecoveryKey: (String) throws -> Void = { _ in }) throws -> (vault: UnlockedVault, recoveryKey: String) {
        if location.exists { throw exists(location) }
        try PrivateFiles.makeFolder(location.folder)
        try PrivateFiles.checkPrivate(location.folder, isDirectory: true)
        // A killed `init` leaves its temporary database; an old one is no one's.
        VaultSystem.AtomicFile.removeStaleTemporaries(in: location.folder, markers: [".vault.db.new-"])
        let temporary = location.folder + "/.vault.db.new-" + hexString(randomBytes(6))
        defer { for suffix in ["", "-wal", "-shm", "-journal"] { try? FileSystem.remove(temporary + suffix) } }
        let vmk = try SecretBytes.random(count: 32)
        let recovery = try RecoveryKey.generate()
        let passcodeSealer = try PasscodeSealer(passcode: passcode, parameters: kdf)
        do {
            let db = try Database(path: temporary, create: true)
            // The mode is set, not assumed from the umask (SQLite gives its -wal and -shm files
            // the database file's mode).
            do { try FileSystem.setPermissions(temporary, 0o600) } catch { throw error.vaultError }
            let store = VaultStore(location: location, db: db, vaultID: randomBytes(16))
            let unlocked = try UnlockedVault(store: store, masterKey: vmk.duplicate(), generation: 1, slotSequence: 0)
            try db.transaction {
                try db.execute(schemaSQL)
                try store.setMeta("schema_version", .integer(Int64(schemaVersion)))
                try store.setMeta("vault_id", .blob(store.vaultID))
                try store.setMeta("key_generation", .integer(1))
                try store.setMeta("created", .integer(Int64(Date().timeIntervalSince1970)))
                try store.setMeta("settings", .blob(try WireJSON.encode(VaultSettings())))
                try unlocked.insertSlot(passcodeSealer, generation: 1)
                try unlocked.insertSlot(RecoverySealer(publicKey: try recovery.publicKey()), generation: 1)
                try unlocked.recordKeyCheck()
            }
            // Everything into the main file, so the WAL can go with the connection.
            try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        if location.exists { throw exists(location) }
        try showRecoveryKey(recovery.text)
        // link(2) refuses to replace a vault another process created meanwhile.
        do {
            try FileSystem.link(temporary, to: location.databasePath)
        } catch {
            if error.isExists { throw exists(location) }
            throw error.vaultError
        }
        let store = try VaultStore.open(location)
        return (try store.adopt(masterKey: vmk, generation: 1), recovery.text)
    }

    private static func exists(_ location: VaultLocation) -> VaultError {
        .failure("a vault named '\(location.name)' already exists at \(location.folder)", hint: "pick another name with --vault NAME")
    }

    /// Opens an existing vault after checking that its folder and files are private.
    /// - Throws: `.vaultNotFound`, `.insecurePermissions`, `.corrupt` (not a vault database),
    ///   `.newerFormat` (written by a newer program).
    public static func open(_ location: VaultLocation) throws -> VaultStore {
        guard location.exists else {
            throw VaultError.vaultNotFound(name: location.name, path: location.folder)
        }
        try PrivateFiles.checkPrivate(location.folder, isDirectory: true)
        // A killed `init` may have left its temporary (a second name of this very file, once linked).
        VaultSystem.AtomicFile.removeStaleTemporaries(in: location.folder, markers: [".vault.db.new-"])
        for suffix in ["", "-wal", "-shm"] {
            try PrivateFiles.checkPrivate(location.databasePath + suffix, isDirectory: false)
        }
        let db = try Database(path: location.databasePath, create: false)
        let hasMeta = try db.query("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'")
        guard !hasMeta.isEmpty else { throw VaultError.corrupt("\(location.databasePath) holds no vault") }
        let version = try db.query("SELECT value FROM meta WHERE key='schema_version'").first?.first?.int
        guard let version else { throw VaultError.corrupt("\(location.databasePath) has no schema version") }
        if version > Int64(schemaVersion) { throw VaultError.newerFormat(found: Int(version), supported: schemaVersion) }
        guard version >= 1 else { throw VaultError.corrupt("\(location.databasePath) has schema version \(version)") }
        guard let id = try db.query("SELECT value FROM meta WHERE key='vault_id'").first?.first?.bytes, id.count == 16 else {
            throw VaultError.corrupt("\(location.databasePath) has no vault id")
        }
        // A schema 1 vault opens (its slots are unchanged); its items are migrated at the first
        // unlock, which has the key their records need (`UnlockedVault.migrateIfNeeded`).
        return VaultStore(location: location, db: db, vaultID: id)
    }

    /// The schema version of the database as it is now (1 until a schema 1 vault's first unlock).
    public func storedSchemaVersion() throws -> Int {
        Int(try meta("schema_version")?.int ?? 0)
    }

    /// When and from which schema the vault was migrated, if it was.
    public func migration() throws -> (fromSchema: Int, at: Int64)? {
        guard let from = try meta("migrated_from")?.int, let at = try meta("migrated_at")?.int else { return nil }
        return (Int(from), at)
    }

    // MARK: metadata

    func setMeta(_ key: String, _ value: SQLValue) throws {
        try db.query("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                     [.text(key), value])
    }

    func meta(_ key: String) throws -> SQLValue? {
        try db.query("SELECT value FROM meta WHERE key=?", [.text(key)]).first?.first
    }

    /// The current key generation: slots and items of other generations are not part of the vault.
    public func keyGeneration() throws -> Int64 {
        guard let g = try meta("key_generation")?.int else { throw VaultError.corrupt("missing key generation") }
        return g
    }

    /// The vault's settings.
    /// - Throws: `.settingsDamaged` naming the vault when the row is unreadable: a damaged row
    ///   never silently becomes the defaults (which could turn `biometrics` into its fallback).
    public func settings() throws -> VaultSettings {
        guard let raw = try meta("settings")?.bytes else { return VaultSettings() }
        guard let s = try? WireJSON.decode(VaultSettings.self, from: raw) else {
            throw VaultError.settingsDamaged(vault: location.name)
        }
        return s
    }

    /// Replaces the vault's settings.
    public func setSettings(_ settings: VaultSettings) throws {
        try db.transaction { try setMeta("settings", .blob(try WireJSON.encode(settings))) }
    }

    /// Whether some item may have fingerprint login on, read before the vault opens (from the
    /// rows' login hints: schema 3). False only when every row says off; a vault not yet at
    /// schema 3, or a row whose hint is unknown, answers true. It chooses which authentication a
    /// command asks for first and never what it releases (the sealed flag decides that).
    public func mayHaveFingerprintLogin() throws -> Bool {
        guard try storedSchemaVersion() >= 3 else { return true }
        return !(try db.query("SELECT 1 FROM items WHERE login_hint IS NOT 0 LIMIT 1").isEmpty)
    }

    /// The number of item rows.
    public func itemCount() throws -> Int {
        Int(try db.query("SELECT count(*) FROM items").first?.first?.int ?? 0)
    }

    // MARK: slots

    /// The slots of the current key generation.
    /// - Throws: `.corrupt` for a slot of a kind this program does not know.
    package func slots() throws -> [KeySlot] {
        let gen = try keyGeneration()
        return try db.query("SELECT id, kind, params, nonce, wrapped FROM slots WHERE generation=? ORDER BY id", [.integer(gen)]).map {
            guard let kind = $0[1].string.flatMap(SlotKind.init(rawValue:)) else {
                throw VaultError.corrupt("a key slot of unknown kind '\($0[1].string ?? "")'")
            }
            return KeySlot(id: $0[0].int ?? 0, kind: kind, generation: gen, params: $0[2].bytes ?? [],
                           nonce: $0[3].bytes ?? [], wrapped: $0[4].bytes ?? [])
        }
    }

    /// The slot of `kind`, if any.
    package func slot(_ kind: SlotKind) throws -> KeySlot? { try slots().first { $0.kind == kind } }

    /// The fingerprint slot, as the key authority knows it.
    package func fingerprintSlot() throws -> (reference: SlotReference, binding: FingerprintBinding)? {
        guard let slot = try slot(.fingerprint) else { return nil }
        let binding = try slot.fingerprintBinding()
        return (SlotReference(vaultID: vaultID, slotID: slot.id, keyID: binding.keyID), binding)
    }

    /// The associated data of a slot: vault id, slot id, kind, parameters and key generation.
    func slotAD(id: Int64, kind: SlotKind, params: [UInt8], generation: Int64) -> [UInt8] {
        var w = ByteWriter(label: "vault-slot-v1")
        w.append(vaultID)
        w.append(id)
        w.append(kind.rawValue)
        w.append(params)
        w.append(generation)
        return w.bytes
    }

    /// Unwraps the master key from `slot` with `opener` and opens the vault. `slotSequence` is
    /// the slot sequence read before `slot` was (see `UnlockedVault.slotSequenceSeen`).
    /// - Throws: `CryptoError` when the opener does not open the slot.
    func open(_ slot: KeySlot, with opener: any SlotOpener, slotSequence: Int64, migrating: Bool = true) throws -> UnlockedVault {
        let vmk = try opener.open(slot, associatedData: slotAD(id: slot.id, kind: slot.kind, params: slot.params, generation: slot.generation))
        let vault = try UnlockedVault(store: self, masterKey: vmk, generation: slot.generation, slotSequence: slotSequence)
        try vault.recordKeyCheck()
        if migrating { try vault.migrateIfNeeded() }
        return vault
    }

    // MARK: unlocking (the passcode and recovery paths are reached through `KeyAuthority`,
    // which records the unlock: see Authentication.swift)

    /// Unlocks with the passcode.
    /// - Throws: `.passcodeNotSet` without a passcode slot, `.authenticationFailed` for a wrong
    ///   passcode (or an altered slot: the two cannot be told apart), `.corrupt` for parameters
    ///   outside the accepted range.
    /// `migrating` false leaves a schema 1 vault as it is (tests that build one).
    ///
    /// A passcode typed in another normalisation form than NFC is tried in NFC first (what vault
    /// seals since passcodes are normalised); a vault whose passcode was sealed as other bytes
    /// before opens with those bytes, and its passcode slot is sealed again in NFC (best effort).
    func unlock(passcode: borrowing SecretBytes, migrating: Bool = true) throws -> UnlockedVault {
        guard let nfc = PasscodeRule.form(passcode, decomposed: false) else { return try unlockExactly(passcode: passcode, migrating: migrating) }
        do {
            return try unlockExactly(passcode: nfc, migrating: migrating)
        } catch VaultError.wrongPasscode {
            if !nfc.isEqual(to: passcode), let vault = try? unlockExactly(passcode: passcode, migrating: migrating) {
                try? vault.changePasscode(to: nfc, kdf: nil)
                return vault
            }
            if let nfd = PasscodeRule.form(passcode, decomposed: true), !nfd.isEqual(to: nfc), !nfd.isEqual(to: passcode),
               let vault = try? unlockExactly(passcode: nfd, migrating: migrating) {
                try? vault.changePasscode(to: nfc, kdf: nil)
                return vault
            }
            throw VaultError.wrongPasscode
        }
    }

    private func unlockExactly(passcode: borrowing SecretBytes, migrating: Bool) throws -> UnlockedVault {
        let sequence = try slotSequence()
        guard let slot = try slot(.passcode) else { throw VaultError.passcodeNotSet }
        do {
            return try open(slot, with: try PasscodeOpener(passcode: passcode, vaultID: vaultID, tpm: location.tpm, vaultName: location.name),
                            slotSequence: sequence, migrating: migrating)
        } catch is CryptoError {
            throw VaultError.wrongPasscode
        }
    }

    /// Unlocks with the recovery key as printed by `vault init` (case, spaces and dashes ignored).
    /// - Throws: `.authenticationFailed` for a mistyped or wrong key.
    func unlock(recoveryKey text: String) throws -> UnlockedVault {
        let key = try RecoveryKey.parse(text)
        let sequence = try slotSequence()
        guard let slot = try slot(.recovery) else {
            throw VaultError.authenticationFailed("this vault has no recovery slot")
        }
        do {
            return try open(slot, with: RecoveryOpener(scalar: try key.scalar()), slotSequence: sequence)
        } catch is CryptoError {
            throw VaultError.authenticationFailed("wrong recovery key")
        }
    }

    /// Unlocks through the fingerprint slot with the key the authority released, then re-seals
    /// the slot with the grant's next key (in place: same id, so unlock sessions stay valid),
    /// only if the slot is still as it was read: a concurrent unlock that re-sealed it first, or
    /// a rotation, wins. A re-seal that cannot be written leaves the slot opening as before.
    /// - Throws: `.domainStateChanged` when the key does not open the slot.
    func unlock(fingerprintSlot slot: KeySlot, grant: UnlockGrant) throws -> UnlockedVault {
        let vault: UnlockedVault
        do {
            // The caller read the slot: the sequence read now may be later than the one it came
            // with, which matters only to a rotation, and rotations unlock with the passcode or
            // the recovery key.
            vault = try open(slot, with: FingerprintOpener(kek: try grant.kek.duplicate()), slotSequence: try slotSequence())
        } catch is CryptoError {
            throw VaultError.domainStateChanged
        }
        if let next = grant.next { _ = try? vault.reseal(fingerprintSlot: slot, with: next) }
        return vault
    }
}
