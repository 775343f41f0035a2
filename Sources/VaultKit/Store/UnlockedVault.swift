import Foundation

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
    public internal(set) var authentication: AuthOutcome?
    /// The vault's slot sequence (`VaultStore.slotSequence`) as this process last knew it: read
    /// before the slot it unlocked with, then moved on by every slot it makes itself. A rotation
    /// re-makes every slot from what it knew, so it refuses when another process has changed a
    /// slot since (it would undo a concurrent passcode change).
    var slotSequenceSeen: Int64

    init(store: VaultStore, masterKey: consuming SecretBytes, generation: Int64, slotSequence: Int64) throws {
        self.store = store
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
        try store.setMeta("slot_seq", .integer(id))
        let kind = sealer.kind
        let sealed = try sealer.seal(masterKey, slotID: id) { params in
            store.slotAD(id: id, kind: kind, params: params, generation: generation)
        }
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
    public func bindFingerprint(authority: any KeyAuthority, sensor: SensorIdentity?) throws {
        let sealer = FingerprintSealer(authority: authority, vaultID: store.vaultID, sensor: sensor,
                                       rules: try store.settings().passcodeRules)
        try writeTransaction {
            try db.query("DELETE FROM slots WHERE kind='fingerprint'")
            try insertSlot(sealer, generation: generation)
        }
    }

    /// Removes every slot of `kind`.
    public func removeSlots(kind: SlotKind) throws {
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

    // MARK: items

    /// The associated data of an item row: vault id, item id, format version, key generation.
    func itemAD(id: [UInt8], generation: Int64) -> [UInt8] {
        var w = ByteWriter(label: "vault-item-v1")
        w.append(store.vaultID)
        w.append(id)
        w.append(formatVersion)
        w.append(generation)
        return w.bytes
    }

    /// The keyed BLAKE2b index of a (normalised) name.
    func nameMAC(_ normalized: String) throws -> [UInt8] {
        try KeyedHash.hash(Array(normalized.utf8), key: indexKey, outputLength: 32)
    }

    func seal(_ item: Item, id: [UInt8]) throws -> (nonce: [UInt8], sealed: [UInt8]) {
        let plain = try JSONEncoder().encode(item)
        let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: itemKey, associatedData: itemAD(id: id, generation: generation)) }
        return (s.nonce, s.ciphertext)
    }

    func open(id: [UInt8], nameMAC: [UInt8], nonce: [UInt8], sealed: [UInt8], generation rowGeneration: Int64) throws -> Item {
        let scratch = try SecretBytes(zeroed: max(sealed.count, AEAD.tagLength))
        return try open(id: id, nameMAC: nameMAC, nonce: nonce, sealed: sealed, generation: rowGeneration, scratch: scratch)
    }

    /// Opens a row into `scratch` (guarded memory reused across rows by a rotation) and decodes it;
    /// the record's name must hash to the row's index entry.
    func open(id: [UInt8], nameMAC: [UInt8], nonce: [UInt8], sealed: [UInt8], generation rowGeneration: Int64,
              scratch: borrowing SecretBytes) throws -> Item {
        guard rowGeneration == generation else { throw CryptoError.authenticationFailed }
        let n = try AEAD.open(sealed, key: itemKey, nonce: nonce, associatedData: itemAD(id: id, generation: rowGeneration), into: scratch)
        let item = try scratch.withUnsafeBytes { try JSONDecoder().decode(Item.self, from: Data($0.prefix(n))) }
        guard constantTimeEqual(try self.nameMAC(item.name), nameMAC) else { throw CryptoError.authenticationFailed }
        return item
    }

    /// Throws `.keysRotated` when the vault's key generation is no longer this key's. A read that
    /// found no row, or a row it cannot open, calls it before saying so: after a rotation every
    /// row is indexed and sealed under keys this process does not have, and "no such item" or
    /// "damaged" would be false. Generations only grow, so a generation still ours after the read
    /// was ours during it.
    func checkStillCurrent() throws {
        guard try store.keyGeneration() == generation else { throw VaultError.keysRotated }
    }

    /// Reads one item.
    /// - Throws: `.itemNotFound`, `.corrupt` naming the item when its row fails authentication,
    ///   `.keysRotated` when a rotation committed since this vault was unlocked.
    public func item(named name: String) throws -> Item {
        let n = try Item.normalize(name: name)
        guard let row = try db.query("SELECT id, name_mac, nonce, sealed, generation FROM items WHERE name_mac=?",
                                     [.blob(try nameMAC(n))]).first else {
            try checkStillCurrent()
            throw VaultError.itemNotFound(n)
        }
        do {
            return try open(id: row[0].bytes ?? [], nameMAC: row[1].bytes ?? [], nonce: row[2].bytes ?? [],
                            sealed: row[3].bytes ?? [], generation: row[4].int ?? -1)
        } catch is CryptoError {
            try checkStillCurrent()
            throw VaultError.corrupt("item '\(n)' failed authentication")
        } catch is DecodingError {
            throw VaultError.corrupt("item '\(n)' is unreadable")
        }
    }

    /// Whether an item of that name exists.
    /// - Throws: `.keysRotated` when a rotation committed since this vault was unlocked.
    public func contains(_ name: String) throws -> Bool {
        let n = try Item.normalize(name: name)
        let found = !(try db.query("SELECT 1 FROM items WHERE name_mac=?", [.blob(try nameMAC(n))]).isEmpty)
        if !found { try checkStillCurrent() }
        return found
    }

    /// Every row, secrets withheld: a damaged row is reported by its id instead of aborting the listing.
    public func allItems() throws -> [ItemEntry] {
        try allItemsWithSecrets().map { entry in
            guard case .item(let i) = entry else { return entry }
            return .item(ItemOverview(i).item)
        }
    }

    /// Every row with its secrets (export through `releaseAll`, repair).
    /// - Throws: `.keysRotated` instead of reporting rows damaged when a rotation committed since
    ///   this vault was unlocked.
    func allItemsWithSecrets() throws -> [ItemEntry] {
        let entries: [ItemEntry] = try db.query("SELECT id, name_mac, nonce, sealed, generation FROM items").map { row in
            let id = row[0].bytes ?? []
            do {
                return .item(try open(id: id, nameMAC: row[1].bytes ?? [], nonce: row[2].bytes ?? [],
                                      sealed: row[3].bytes ?? [], generation: row[4].int ?? -1))
            } catch {
                return .damaged(rowID: hexString(id))
            }
        }
        if entries.contains(where: { if case .damaged = $0 { true } else { false } }) { try checkStillCurrent() }
        return entries
    }

    /// Adds an item. With `replace`, an existing item of that name is overwritten (its creation time kept).
    /// - Throws: `.alreadyExists` unless `replace`.
    public func add(_ item: Item, replace: Bool = false) throws {
        var item = item
        item.name = try Item.normalize(name: item.name)
        let mac = try nameMAC(item.name)
        try writeTransaction {
            if let existing = try db.query("SELECT id FROM items WHERE name_mac=?", [.blob(mac)]).first {
                guard replace else { throw VaultError.alreadyExists(item.name) }
                if let old = try? self.item(named: item.name) { item.created = old.created }
                try db.query("DELETE FROM items WHERE id=?", [existing[0]])
            }
            let id = randomBytes(16)
            let s = try seal(item, id: id)
            try db.query("INSERT INTO items(id, name_mac, generation, nonce, sealed) VALUES(?,?,?,?,?)",
                         [.blob(id), .blob(mac), .integer(generation), .blob(s.nonce), .blob(s.sealed)])
        }
    }

    /// Changes an item in place (fresh nonce); a changed name moves its index entry.
    /// - Throws: `.itemNotFound`, `.alreadyExists` when the new name is taken.
    public func update(_ name: String, now: Int64 = unixNow(), _ change: (inout Item) throws -> Void) throws {
        let n = try Item.normalize(name: name)
        try writeTransaction {
            var item = try self.item(named: n)
            guard let row = try db.query("SELECT id FROM items WHERE name_mac=?", [.blob(try nameMAC(n))]).first,
                  let id = row[0].bytes else { throw VaultError.itemNotFound(n) }
            try change(&item)
            item.name = try Item.normalize(name: item.name)
            item.modified = now
            let mac = try nameMAC(item.name)
            if item.name != n, !(try db.query("SELECT 1 FROM items WHERE name_mac=?", [.blob(mac)]).isEmpty) {
                throw VaultError.alreadyExists(item.name)
            }
            let s = try seal(item, id: id)
            try db.query("UPDATE items SET name_mac=?, nonce=?, sealed=?, generation=? WHERE id=?",
                         [.blob(mac), .blob(s.nonce), .blob(s.sealed), .integer(generation), .blob(id)])
        }
    }

    /// Deletes an item (SQLite's secure_delete overwrites the freed page content).
    /// - Throws: `.itemNotFound`.
    public func remove(_ name: String) throws {
        let n = try Item.normalize(name: name)
        try writeTransaction {
            try db.query("DELETE FROM items WHERE name_mac=?", [.blob(try nameMAC(n))])
            if db.changes == 0 { throw VaultError.itemNotFound(n) }
        }
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
        return vault
    }

    /// A counter that changes whenever a slot is made or replaced (rotation, re-bind, passcode
    /// change): an unlock session compares it to decide whether it is still valid.
    public func slotSequence() throws -> Int64 {
        try meta("slot_seq")?.int ?? 0
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

extension UnlockedVault {
    /// Adds many items in one transaction (import). With `replace`, existing names are overwritten;
    /// otherwise the first existing name aborts the whole import (nothing is written).
    /// - Returns: the number of items written.
    @discardableResult
    public func add(contentsOf items: [Item], replace: Bool) throws -> Int {
        let insert = try db.prepare("INSERT INTO items(id, name_mac, generation, nonce, sealed) VALUES(?,?,?,?,?)")
        let remove = try db.prepare("DELETE FROM items WHERE name_mac=?")
        let exists = try db.prepare("SELECT 1 FROM items WHERE name_mac=?")
        return try writeTransaction {
            var seen = Set<[UInt8]>()
            for var item in items {
                item.name = try Item.normalize(name: item.name)
                let mac = try nameMAC(item.name)
                guard seen.insert(mac).inserted else { throw VaultError.usage("'\(item.name)' appears twice in the import") }
                try exists.bind([.blob(mac)])
                if try exists.next() != nil {
                    guard replace else { throw VaultError.alreadyExists(item.name) }
                    try remove.bind([.blob(mac)])
                    _ = try remove.next()
                }
                let id = randomBytes(16)
                let s = try seal(item, id: id)
                try insert.bind([.blob(id), .blob(mac), .integer(generation), .blob(s.nonce), .blob(s.sealed)])
                _ = try insert.next()
            }
            return items.count
        }
    }
}

extension UnlockedVault {
    /// The item rows that cannot be opened with this key (damaged, or written under another key
    /// generation), by row id (hex).
    public func damagedRows() throws -> [String] {
        try allItemsWithSecrets().compactMap { if case .damaged(let id) = $0 { id } else { nil } }
    }

    /// Removes the rows named (hex row ids) that still cannot be opened, in one write transaction;
    /// a readable row is never removed this way. - Returns: how many went.
    @discardableResult
    public func removeDamagedRows(_ ids: [String]) throws -> Int {
        try writeTransaction {
            let damaged = Set(try damagedRows())
            var n = 0
            for id in ids where damaged.contains(id) {
                guard let raw = bytesFromHex(id) else { continue }
                try db.query("DELETE FROM items WHERE id=?", [.blob(raw)])
                n += db.changes
            }
            return n
        }
    }
}
