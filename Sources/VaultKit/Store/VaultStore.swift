import Foundation

/// The format version bound into every record's associated data.
let formatVersion: UInt32 = 1

/// A vault database, opened but locked: it can list its slots and unlock, nothing more.
public final class VaultStore {
    /// The schema version this code writes and reads.
    public static let schemaVersion = 1

    /// Where the vault lives.
    public let location: VaultLocation
    let db: Database
    /// The random 16-byte vault identifier, bound into every record.
    public let vaultID: [UInt8]

    private init(location: VaultLocation, db: Database, vaultID: [UInt8]) {
        self.location = location
        self.db = db
        self.vaultID = vaultID
    }

    // MARK: creating and opening

    /// Creates a new vault with a random master key, a passcode slot and a recovery slot.
    /// - Returns: the unlocked vault and the recovery key, to be shown once.
    /// - Throws: `VaultError.failure` if a vault already exists there, `.io` on file problems.
    public static func create(at location: VaultLocation, passcode: borrowing SecretBytes,
                              kdf: KDFParameters) throws -> (vault: UnlockedVault, recoveryKey: String) {
        if location.exists {
            throw VaultError.failure("a vault named '\(location.name)' already exists at \(location.folder)",
                                     hint: "pick another name with --vault NAME")
        }
        try PrivateFiles.makeFolder(location.folder)
        try PrivateFiles.checkPrivate(location.folder, isDirectory: true)
        let old = umask(0o077)
        defer { umask(old) }
        let db = try Database(path: location.databasePath, create: true)
        let vaultID = randomBytes(16)
        let store = VaultStore(location: location, db: db, vaultID: vaultID)
        let vmk = try SecretBytes.random(count: 32)
        let recovery = try RecoveryKey.generate()
        let unlocked = try UnlockedVault(store: store, masterKey: vmk.duplicate(), generation: 1)
        try db.transaction {
            try db.execute("""
                CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
                CREATE TABLE slots(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, generation INTEGER NOT NULL,
                                   params BLOB NOT NULL, nonce BLOB NOT NULL, wrapped BLOB NOT NULL);
                CREATE TABLE items(id BLOB PRIMARY KEY, name_mac BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL,
                                   nonce BLOB NOT NULL, sealed BLOB NOT NULL);
                CREATE TABLE audit(id INTEGER PRIMARY KEY, generation INTEGER NOT NULL,
                                   nonce BLOB NOT NULL, sealed BLOB NOT NULL);
                """)
            try store.setMeta("schema_version", .integer(Int64(schemaVersion)))
            try store.setMeta("vault_id", .blob(vaultID))
            try store.setMeta("key_generation", .integer(1))
            try store.setMeta("created", .integer(Int64(Date().timeIntervalSince1970)))
            try store.setMeta("settings", .blob(Array(try JSONEncoder().encode(VaultSettings()))))
            try unlocked.writePasscodeSlot(passcode: passcode, kdf: kdf, generation: 1)
            try unlocked.writeRecoverySlot(publicKey: try recovery.publicKey(), generation: 1)
        }
        return (unlocked, recovery.text)
    }

    /// Opens an existing vault after checking that its folder and files are private.
    /// - Throws: `.vaultNotFound`, `.insecurePermissions`, `.corrupt` (not a vault database),
    ///   `.newerFormat` (written by a newer program).
    public static func open(_ location: VaultLocation) throws -> VaultStore {
        guard location.exists else {
            throw VaultError.vaultNotFound(name: location.name, path: location.folder)
        }
        try PrivateFiles.checkPrivate(location.folder, isDirectory: true)
        for suffix in ["", "-wal", "-shm"] {
            try PrivateFiles.checkPrivate(location.databasePath + suffix, isDirectory: false)
        }
        let old = umask(0o077)
        defer { umask(old) }
        let db = try Database(path: location.databasePath, create: false)
        let hasMeta = try db.query("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'")
        guard !hasMeta.isEmpty else { throw VaultError.corrupt("\(location.databasePath) holds no vault") }
        let version = try db.query("SELECT value FROM meta WHERE key='schema_version'").first?.first?.int
        guard let version else { throw VaultError.corrupt("\(location.databasePath) has no schema version") }
        if version > Int64(schemaVersion) { throw VaultError.newerFormat(found: Int(version), supported: schemaVersion) }
        if version < Int64(schemaVersion) { try migrate(db, from: Int(version)) }
        guard let id = try db.query("SELECT value FROM meta WHERE key='vault_id'").first?.first?.bytes, id.count == 16 else {
            throw VaultError.corrupt("\(location.databasePath) has no vault id")
        }
        return VaultStore(location: location, db: db, vaultID: id)
    }

    /// Schema migrations, one step per version, all inside one transaction. Version 1 is the first.
    static func migration(from version: Int) -> ((Database) throws -> Void)? {
        switch version {
        default: nil
        }
    }

    private static func migrate(_ db: Database, from version: Int) throws {
        try db.transaction {
            for v in version..<schemaVersion {
                guard let step = migration(from: v) else { throw VaultError.corrupt("unknown schema version \(v)") }
                try step(db)
                try db.query("UPDATE meta SET value=? WHERE key='schema_version'", [.integer(Int64(v + 1))])
            }
        }
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
    public func settings() throws -> VaultSettings {
        guard let raw = try meta("settings")?.bytes,
              let s = try? JSONDecoder().decode(VaultSettings.self, from: Data(raw)) else { return VaultSettings() }
        return s
    }

    /// Replaces the vault's settings.
    public func setSettings(_ settings: VaultSettings) throws {
        try db.transaction { try setMeta("settings", .blob(Array(try JSONEncoder().encode(settings)))) }
    }

    /// The number of item rows.
    public func itemCount() throws -> Int {
        Int(try db.query("SELECT count(*) FROM items").first?.first?.int ?? 0)
    }

    // MARK: slots

    /// The slots of the current key generation.
    public func slots() throws -> [KeySlot] {
        let gen = try keyGeneration()
        return try db.query("SELECT id, kind, params, nonce, wrapped FROM slots WHERE generation=? ORDER BY id", [.integer(gen)]).map {
            KeySlot(id: $0[0].int ?? 0, kind: $0[1].string ?? "", generation: gen, params: $0[2].bytes ?? [],
                    nonce: $0[3].bytes ?? [], wrapped: $0[4].bytes ?? [])
        }
    }

    /// The associated data of a slot: vault id, slot id, kind, parameters and key generation.
    func slotAD(id: Int64, kind: String, params: [UInt8], generation: Int64) -> [UInt8] {
        var w = ByteWriter(label: "vault-slot-v1")
        w.append(vaultID)
        w.append(id)
        w.append(kind)
        w.append(params)
        w.append(generation)
        return w.bytes
    }

    /// Unwraps the master key from `slot` with its key-encryption key.
    func unwrap(_ slot: KeySlot, kek: borrowing SecretBytes) throws -> SecretBytes {
        let ad = slotAD(id: slot.id, kind: slot.kind, params: slot.params, generation: slot.generation)
        return try AEAD.open(slot.wrapped, key: kek, nonce: slot.nonce, associatedData: ad)
    }

    // MARK: unlocking

    /// Unlocks with the passcode.
    /// - Throws: `.passcodeNotSet` without a passcode slot, `.authenticationFailed` for a wrong
    ///   passcode (or an altered slot: the two cannot be told apart).
    public func unlock(passcode: borrowing SecretBytes) throws -> UnlockedVault {
        guard let slot = try slots().first(where: { $0.kind == "passcode" }) else { throw VaultError.passcodeNotSet }
        guard let params = try? JSONDecoder().decode(KDFParameters.self, from: Data(slot.params)) else {
            throw VaultError.corrupt("the passcode slot's parameters are unreadable")
        }
        let kek = try PasswordKDF.deriveKey(password: passcode, parameters: params)
        do {
            let vmk = try unwrap(slot, kek: kek)
            return try UnlockedVault(store: self, masterKey: vmk, generation: slot.generation)
        } catch is CryptoError {
            throw VaultError.authenticationFailed("wrong passcode")
        }
    }

    /// Unlocks with the recovery key as printed by `vault init` (case, spaces and dashes ignored).
    /// - Throws: `.authenticationFailed` for a mistyped or wrong key.
    public func unlock(recoveryKey text: String) throws -> UnlockedVault {
        let key = try RecoveryKey.parse(text)
        guard let slot = try slots().first(where: { $0.kind == "recovery" }) else {
            throw VaultError.authenticationFailed("this vault has no recovery slot")
        }
        do {
            let scalar = try key.scalar()
            let ad = slotAD(id: slot.id, kind: slot.kind, params: slot.params, generation: slot.generation)
            let vmk = try X25519Seal.open(slot.wrapped, nonce: slot.nonce, secret: scalar, associatedData: ad)
            return try UnlockedVault(store: self, masterKey: vmk, generation: slot.generation)
        } catch is CryptoError {
            throw VaultError.authenticationFailed("wrong recovery key")
        }
    }

    /// Unlocks through a slot whose key-encryption key the caller derives (the fingerprint slot).
    /// - Throws: `.authenticationFailed` when the derived key does not open the slot.
    public func unlock(slot: KeySlot, kek: borrowing SecretBytes) throws -> UnlockedVault {
        do {
            let vmk = try unwrap(slot, kek: kek)
            return try UnlockedVault(store: self, masterKey: vmk, generation: slot.generation)
        } catch is CryptoError {
            throw VaultError.authenticationFailed("the \(slot.kind) slot did not open")
        }
    }
}

/// One key slot: the master key wrapped under a key-encryption key of some kind.
public struct KeySlot: Sendable, Equatable {
    /// Row id, bound into the associated data.
    public var id: Int64
    /// `passcode`, `recovery` or `fingerprint`.
    public var kind: String
    /// The key generation the slot belongs to.
    public var generation: Int64
    /// Public parameters (JSON): KDF parameters, or the fingerprint binding.
    public var params: [UInt8]
    var nonce: [UInt8]
    var wrapped: [UInt8]
}
