import FoundationEssentials
import VaultSystem

/// Schema 1 to schema 3: each item's one sealed JSON record becomes two sealed binary records
/// (overview and secrets) with its login hint. Schema 2 to schema 3: each row gains its login
/// hint (`login_hint`, the fingerprint-login flag in the clear, read from its overview). Both need
/// the item key, so they run at the first unlock, in one write transaction: a crash at any instant
/// leaves the old vault or the new one, whole.
extension UnlockedVault {
    /// Migrates the items when the database is older than this program's schema; nothing otherwise.
    /// - Throws: `.keysRotated` when the key is not the vault's current generation, or a store error
    ///   (the vault is then left as it was).
    func migrateIfNeeded() throws {
        guard try store.storedSchemaVersion() < VaultStore.schemaVersion else { return }
        try db.transaction {
            // Another process may have migrated it since the check above.
            let from = try store.storedSchemaVersion()
            guard from < VaultStore.schemaVersion else { return }
            guard try store.keyGeneration() == generation else { throw VaultError.keysRotated }
            if from == 1 { try migrateSchema1Rows() } else { try addLoginHints() }
            try db.execute(VaultStore.loginHintIndex)
            try store.setMeta("schema_version", .integer(Int64(VaultStore.schemaVersion)))
            try store.setMeta("migrated_from", .integer(Int64(from)))
            try store.setMeta("migrated_at", .integer(unixNow()))
        }
    }

    /// Schema 2 rows gain `login_hint`, each from its own overview (a row no key opens keeps an
    /// unknown hint, NULL).
    private func addLoginHints() throws {
        try db.execute("ALTER TABLE items ADD COLUMN login_hint INTEGER")
        // Read first, then written: a row is not updated under the statement reading the table.
        let rows = try db.prepare("SELECT \(ItemRow.overviewColumns) FROM items")
        let scratch = try RecordScratch()
        var hints: [(id: [UInt8], hint: Int64)] = []
        while let r = try rows.next() {
            let row = ItemRow(r)
            guard let on = try? withOverview(row, scratch: scratch, { try OverviewRecord.fingerprintLoginIsOn($0) }) else { continue }
            hints.append((row.id, ItemRow.loginHint(on)))
        }
        let update = try db.prepare("UPDATE items SET login_hint=? WHERE id=?")
        for (id, hint) in hints {
            try update.bind([.integer(hint), .blob(id)])
            _ = try update.next()
        }
    }

    /// Schema 1's one sealed JSON record per row becomes the two records of schema 3.
    private func migrateSchema1Rows() throws {
        try db.execute(VaultStore.itemsTable.replacingEvery("CREATE TABLE items(", with: "CREATE TABLE items_v2("))
        let insert = try db.prepare("INSERT INTO items_v2(\(ItemRow.columns)) VALUES(\(ItemRow.placeholders))")
        let rows = try db.prepare("SELECT id, name_mac, nonce, sealed, generation FROM items")
        let scratch = try RecordScratch()
        while let r = try rows.next() {
            let id = r[0].bytes ?? [], mac = r[1].bytes ?? [], nonce = r[2].bytes ?? [], sealed = r[3].bytes ?? []
            let row: ItemRow
            if let item = try? openSchema1(id: id, nameMAC: mac, nonce: nonce, sealed: sealed, generation: r[4].int ?? -1, scratch: scratch) {
                row = try seal(item, id: id)
            } else {
                // A row no key opens stays a row no key opens (listed as damaged, removable
                // with `vault repair --remove`), rather than stopping the migration.
                row = ItemRow(id: id, nameMAC: mac, generation: r[4].int ?? -1, overviewNonce: nonce, overview: sealed)
            }
            try insert.bind(row.values)
            _ = try insert.next()
        }
        try db.execute("DROP TABLE items")
        try db.execute("ALTER TABLE items_v2 RENAME TO items")
    }

    /// Opens a schema 1 row: XChaCha20-Poly1305 over the item's JSON, associated data
    /// "vault-item-v1", vault id, item id, format version 1, key generation; the name must hash to
    /// the row's index entry.
    func openSchema1(id: [UInt8], nameMAC mac: [UInt8], nonce: [UInt8], sealed: [UInt8], generation rowGeneration: Int64,
                             scratch: RecordScratch) throws -> Item {
        guard rowGeneration == generation else { throw CryptoError.authenticationFailed }
        var w = ByteWriter(label: "vault-item-v1")
        w.append(store.vaultID)
        w.append(id)
        w.append(UInt32(1))
        w.append(rowGeneration)
        let item = try scratch.open(sealed, key: itemKey, nonce: nonce, associatedData: w.bytes) { plain in
            try JSONDecoder().decode(Item.self, from: Data(plain))
        }
        guard constantTimeEqual(try nameMAC(item.name), mac) else { throw CryptoError.authenticationFailed }
        return item
    }
}
