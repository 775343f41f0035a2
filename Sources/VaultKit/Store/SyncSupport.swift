import FoundationEssentials
import VaultSystem

/// The secrets a vault syncs with (docs/format.md, "The sync repository"): the repository key,
/// shared by every machine of the vault, and this machine's own device key and id. Kept in
/// guarded memory; stored in vault.db sealed under the master key (re-sealed by a rotation).
package final class SyncSecrets {
    /// The repository key (32 bytes): every sealed file of the repository is under keys from it.
    package let repoKey: SecretBytes
    /// This machine's Ed25519 secret key (64 bytes), which signs its commits.
    package let deviceKey: SecretBytes
    /// This machine's device id (16 random bytes): its name in the repository.
    package let deviceID: [UInt8]

    /// Sync secrets from their parts.
    package init(repoKey: consuming SecretBytes, deviceKey: consuming SecretBytes, deviceID: [UInt8]) {
        self.repoKey = repoKey
        self.deviceKey = deviceKey
        self.deviceID = deviceID
    }

    /// The public half of the device key.
    package var devicePublicKey: [UInt8] { deviceKey.withUnsafeBytes { Array($0[32..<64]) } }

    /// A key derived from the repository key for one purpose (`vault/v1/sync-...`).
    package func derived(_ context: String) throws -> SecretBytes {
        try KeyedHash.deriveKey(from: repoKey, context: context)
    }
}

extension KeySlot {
    /// A slot as read from elsewhere (a sync repository's header), to be stored as it is.
    package init(id: Int64, kind: SlotKind, generation: Int64, params: [UInt8], sealedNonce: [UInt8], wrapped: [UInt8]) {
        self.init(id: id, kind: kind, generation: generation, params: params, nonce: sealedNonce, wrapped: wrapped)
    }

    /// The nonce the master key was wrapped with.
    package var sealedNonce: [UInt8] { nonce }
    /// The wrapped master key.
    package var wrappedKey: [UInt8] { wrapped }
}

extension UnlockedVault {
    private func syncSecretsAD(generation: Int64) -> [UInt8] {
        var w = ByteWriter(label: "vault-sync-secrets-v1")
        w.append(store.vaultID)
        w.append(generation)
        return w.bytes
    }

    private func repoKeyAD(generation: Int64) -> [UInt8] {
        var w = ByteWriter(label: "vault-sync-repo-key-v1")
        w.append(store.vaultID)
        w.append(generation)
        return w.bytes
    }

    /// The vault's sync secrets, nil when it never synced.
    /// - Throws: `.corrupt` when the row does not open.
    package func syncSecrets() throws -> SyncSecrets? {
        guard let raw = try store.meta("sync_secrets")?.bytes else { return nil }
        guard raw.count > 24 else { throw VaultError.corrupt("the vault's sync secrets are damaged") }
        let key = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/sync-secrets")
        let plain: SecretBytes
        do {
            plain = try AEAD.open(Array(raw[24...]), key: key, nonce: Array(raw[0..<24]), associatedData: syncSecretsAD(generation: generation))
        } catch {
            throw VaultError.corrupt("the vault's sync secrets failed authentication")
        }
        guard plain.count == 32 + 64 + 16 else { throw VaultError.corrupt("the vault's sync secrets are damaged") }
        return plain.withUnsafeBytes { b in
            // Both halves are copied straight from the guarded buffer into guarded memory.
            guard let rk = try? SecretBytes(copying: UnsafeRawBufferPointer(rebasing: b[0..<32])),
                  let dk = try? SecretBytes(copying: UnsafeRawBufferPointer(rebasing: b[32..<96])) else { return nil }
            return SyncSecrets(repoKey: rk, deviceKey: dk, deviceID: Array(b[96..<112]))
        }
    }

    /// Stores the sync secrets (a first sync, a clone).
    package func storeSyncSecrets(_ secrets: SyncSecrets) throws {
        let sealed = try sealSyncSecrets(secrets, under: self)
        try writeTransaction { try store.setMeta("sync_secrets", .blob(sealed)) }
    }

    private func sealSyncSecrets(_ secrets: SyncSecrets, under vault: UnlockedVault) throws -> [UInt8] {
        let plain = try SecretBytes(zeroed: 112)
        plain.withUnsafeMutableBytes { out in
            secrets.repoKey.withUnsafeBytes { out.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: 32) }
            secrets.deviceKey.withUnsafeBytes { (out.baseAddress! + 32).copyMemory(from: $0.baseAddress!, byteCount: 64) }
            secrets.deviceID.withUnsafeBytes { (out.baseAddress! + 96).copyMemory(from: $0.baseAddress!, byteCount: 16) }
        }
        let key = try KeyedHash.deriveKey(from: vault.masterKey, context: "vault/v1/sync-secrets")
        let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: vault.syncSecretsAD(generation: vault.generation)) }
        return s.nonce + s.ciphertext
    }

    /// Re-seals the sync secrets under `fresh`'s key (a rotation, inside its transaction).
    func reseal(syncSecretsInto fresh: UnlockedVault) throws {
        guard let secrets = try syncSecrets() else { return }
        try store.setMeta("sync_secrets", .blob(try sealSyncSecrets(secrets, under: fresh)))
    }

    /// The repository key sealed under this master key, for the repository's header.
    package func sealRepoKey(_ secrets: SyncSecrets) throws -> [UInt8] {
        let key = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/sync-repo-key")
        let s = try secrets.repoKey.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: repoKeyAD(generation: generation)) }
        return s.nonce + s.ciphertext
    }

    /// Opens a header's sealed repository key with this master key.
    /// - Throws: `.corrupt` when it does not open (another vault's, or altered).
    package func openRepoKey(_ sealed: [UInt8]) throws -> SecretBytes {
        guard sealed.count > 24 else { throw VaultError.corrupt("the repository's header holds no repository key") }
        let key = try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/sync-repo-key")
        do {
            return try AEAD.open(Array(sealed[24...]), key: key, nonce: Array(sealed[0..<24]), associatedData: repoKeyAD(generation: generation))
        } catch {
            throw VaultError.corrupt("the repository's header: its repository key does not open with this vault's key")
        }
    }

    /// The passcode and recovery slots as stored (the header carries them; device-bound slots never).
    package func portableSlots() throws -> [KeySlot] {
        try store.slots().filter { $0.kind == .passcode || $0.kind == .recovery }
    }

    /// Every item row's stamp (`BLAKE2b-256(overview_nonce ‖ secrets_nonce)`), by item id: every
    /// write draws fresh nonces, so a stamp that moved means the row was written.
    package func rowStamps() throws -> [[UInt8]: [UInt8]] {
        var out: [[UInt8]: [UInt8]] = [:]
        let statement = try db.prepare("SELECT id, overview_nonce, secrets_nonce FROM items")
        while let r = try statement.next() {
            out[r[0].bytes ?? []] = SHA2.sha256((r[1].bytes ?? []) + (r[2].bytes ?? []))
        }
        return out
    }

    /// The items of these ids (absent ids are left out), secrets included.
    /// - Throws: `.corrupt` naming a row that does not open (a damaged row never syncs).
    package func items(ids: [[UInt8]]) throws -> [(id: [UInt8], item: Item)] {
        let scratch = try RecordScratch()
        var out: [(id: [UInt8], item: Item)] = []
        out.reserveCapacity(ids.count)
        let statement = try db.prepare("SELECT \(ItemRow.columns) FROM items WHERE id=?")
        for id in ids {
            try statement.bind([.blob(id)])
            guard let r = try statement.next() else { continue }
            do {
                out.append((id, try openItem(ItemRow(r), scratch: scratch)))
            } catch {
                try checkStillCurrent()
                throw VaultError.corrupt("item row \(hexString(id)) does not open: repair it ('vault repair') before syncing")
            }
        }
        return out
    }

    /// Writes what a sync brought, in one write transaction that first checks no row changed
    /// since `expected` was read (a write meanwhile makes it write nothing): the rows of
    /// `deletes` and of `upserts` go, then `upserts` are written under their own ids.
    /// - Returns: the stamps of the rows written.
    /// - Throws: `.failure` when the vault changed meanwhile, `.alreadyExists` for a name clash.
    package func applySync(deletes: [[UInt8]], upserts: [(id: [UInt8], item: Item)],
                           expected: [[UInt8]: [UInt8]]) throws -> [[UInt8]: [UInt8]] {
        try withLargePageCache { try writeTransaction {
            guard try rowStamps() == expected else {
                throw VaultError.failure("the vault changed while it synced; nothing of the remote's was written",
                                         hint: "run 'vault sync' again")
            }
            let delete = try db.prepare("DELETE FROM items WHERE id=?")
            for id in deletes + upserts.map(\.id) {
                try delete.bind([.blob(id)])
                _ = try delete.next()
            }
            let insert = try db.prepare("INSERT INTO items(\(ItemRow.columns)) VALUES(\(ItemRow.placeholders))")
            var stamps: [[UInt8]: [UInt8]] = [:]
            for (id, item) in upserts {
                var item = item
                item.name = try Item.normalize(name: item.name)
                let row = try seal(item, id: id)
                try insert.bind(row.values)
                do { _ = try insert.next() } catch { throw VaultError.alreadyExists(item.name) }
                stamps[id] = SHA2.sha256(row.overviewNonce + row.secretsNonce)
            }
            return stamps
        } }
    }
}

/// An item's two records as one byte string (the plaintext of a repository's item file).
package enum SyncRecords {
    /// `u32 len ‖ overview record ‖ u32 len ‖ secrets record` (the caller wipes it once sealed).
    package static func encode(_ item: Item) -> [UInt8] {
        let o = OverviewRecord.encode(item)
        var s = SecretsRecord.encode(item)
        defer { wipe(&s) }
        var out: [UInt8] = []
        out.reserveCapacity(8 + o.count + s.count)
        for part in [o, s] {
            let n = UInt32(part.count)
            out += [UInt8(n >> 24 & 0xff), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
            out += part
        }
        return out
    }

    /// The item of `encode`'s bytes (zero padding after them allowed).
    /// - Throws: `.corrupt` when they do not decode.
    package static func decode(_ bytes: UnsafeRawBufferPointer) throws -> Item {
        func length(at i: Int) throws -> Int {
            guard i + 4 <= bytes.count else { throw VaultError.corrupt("a short item record") }
            return Int(bytes[i]) << 24 | Int(bytes[i + 1]) << 16 | Int(bytes[i + 2]) << 8 | Int(bytes[i + 3])
        }
        let o = try length(at: 0)
        guard 4 + o <= bytes.count else { throw VaultError.corrupt("a short item record") }
        let s = try length(at: 4 + o)
        guard 8 + o + s <= bytes.count, bytes[(8 + o + s)...].allSatisfy({ $0 == 0 }) else { throw VaultError.corrupt("a malformed item record") }
        do throws(RecordFormatError) {
            var item = try OverviewRecord.decode(UnsafeRawBufferPointer(rebasing: bytes[4..<(4 + o)])).item
            try SecretsRecord.decode(UnsafeRawBufferPointer(rebasing: bytes[(8 + o)..<(8 + o + s)]), into: &item)
            return item
        } catch {
            throw VaultError.corrupt("an item record is unreadable (\(error.reason))")
        }
    }
}

extension VaultStore {
    /// Creates a vault database holding only `slots` (a clone's: the passcode and recovery slots
    /// of a repository's header) under `vaultID` and `generation`; it is unlocked through those
    /// slots as any vault, then filled. Built under a temporary name and linked into place.
    /// - Throws: `.failure` when a vault exists there, `.io` on file problems.
    package static func createEmpty(at location: VaultLocation, vaultID: [UInt8], generation: Int64, slots: [KeySlot]) throws {
        if location.exists { throw VaultError.failure("a vault named '\(location.name)' already exists at \(location.folder)", hint: "pick another name with --vault NAME") }
        try PrivateFiles.makeFolder(location.folder)
        try PrivateFiles.checkPrivate(location.folder, isDirectory: true)
        let temporary = location.folder + "/.vault.db.new-" + hexString(randomBytes(6))
        defer { for suffix in ["", "-wal", "-shm", "-journal"] { try? FileSystem.remove(temporary + suffix) } }
        do {
            let db = try Database(path: temporary, create: true)
            do { try FileSystem.setPermissions(temporary, 0o600) } catch { throw error.vaultError }
            let store = VaultStore(syncLocation: location, db: db, vaultID: vaultID)
            try db.transaction {
                try db.execute(VaultStore.schemaSQL)
                try store.setMeta("schema_version", .integer(Int64(schemaVersion)))
                try store.setMeta("vault_id", .blob(vaultID))
                try store.setMeta("key_generation", .integer(generation))
                try store.setMeta("created", .integer(unixNow()))
                try store.setMeta("settings", .blob(try WireJSON.encode(VaultSettings())))
                try store.setMeta("slot_seq", .integer(slots.map(\.id).max() ?? 0))
                for s in slots {
                    try db.query("INSERT INTO slots(id, kind, generation, params, nonce, wrapped) VALUES(?,?,?,?,?,?)",
                                 [.integer(s.id), .text(s.kind.rawValue), .integer(generation), .blob(s.params), .blob(s.nonce), .blob(s.wrapped)])
                }
            }
            try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        do {
            try FileSystem.link(temporary, to: location.databasePath)
        } catch {
            if error.isExists { throw VaultError.failure("a vault named '\(location.name)' already exists at \(location.folder)") }
            throw error.vaultError
        }
    }
}

extension UnlockedVault {
    /// A second handle on this vault: its own database connection and a copy of the key in
    /// guarded memory (the agent syncs a session's vault on it, outside its lock).
    package func reopened() throws -> UnlockedVault {
        let key = try masterKey.withUnsafeBytes { try SecretBytes(copying: $0) }
        return try VaultStore.open(store.location).adopt(masterKey: key, generation: generation)
    }

    /// The id of the item called `name`, nil when there is none.
    package func itemID(named name: String) throws -> [UInt8]? {
        let n = try Item.normalize(name: name)
        return try db.query("SELECT id FROM items WHERE name_mac=?", [.blob(try nameMAC(n))]).first?.first?.bytes
    }
}
