import FoundationEssentials
import VaultSystem

/// One item row as stored (schema 3): its id, the keyed hash of its name, the key generation it
/// was sealed under, its two sealed records, and the login hint. The secrets record's associated
/// data includes the overview's nonce, so a secrets record opens only next to the overview written
/// with it.
///
/// The login hint is the item's fingerprint-login flag in the clear (1 on, 0 off, NULL unknown):
/// the only thing a command reads before the vault opens, to choose which authentication to ask
/// for first (`VaultStore.mayHaveFingerprintLogin`). It decides no access: the sealed flag in the
/// overview is what every release checks, so a changed hint only adds a prompt.
struct ItemRow {
    var id: [UInt8]
    var nameMAC: [UInt8]
    var generation: Int64
    var overviewNonce: [UInt8]
    var overview: [UInt8]
    var secretsNonce: [UInt8]
    var secrets: [UInt8]
    var loginHint: Int64?

    static let columns = "id, name_mac, generation, overview_nonce, overview, secrets_nonce, secrets, login_hint"
    static let overviewColumns = "id, name_mac, generation, overview_nonce, overview"
    /// What opening both records reads: `columns` without the login hint.
    static let recordColumns = "id, name_mac, generation, overview_nonce, overview, secrets_nonce, secrets"
    /// One placeholder per column of `columns`, for an INSERT of `values`.
    static let placeholders = "?,?,?,?,?,?,?,?"
    /// Every column but the id, for an UPDATE of `values` without its first.
    static let updateSet = "name_mac=?, generation=?, overview_nonce=?, overview=?, secrets_nonce=?, secrets=?, login_hint=?"

    init(id: [UInt8], nameMAC: [UInt8], generation: Int64, overviewNonce: [UInt8], overview: [UInt8],
         secretsNonce: [UInt8] = [], secrets: [UInt8] = [], loginHint: Int64? = nil) {
        self.id = id
        self.nameMAC = nameMAC
        self.generation = generation
        self.overviewNonce = overviewNonce
        self.overview = overview
        self.secretsNonce = secretsNonce
        self.secrets = secrets
        self.loginHint = loginHint
    }

    /// A row read with `columns` (or `overviewColumns`: the secrets and the hint left empty).
    init(_ r: [SQLValue]) {
        self.init(id: r[0].bytes ?? [], nameMAC: r[1].bytes ?? [], generation: r[2].int ?? -1,
                  overviewNonce: r[3].bytes ?? [], overview: r[4].bytes ?? [],
                  secretsNonce: r.count > 6 ? r[5].bytes ?? [] : [], secrets: r.count > 6 ? r[6].bytes ?? [] : [],
                  loginHint: r.count > 7 ? r[7].int : nil)
    }

    /// The hint of an item whose fingerprint login is `on`.
    static func loginHint(_ on: Bool) -> Int64 { on ? 1 : 0 }

    var values: [SQLValue] {
        [.blob(id), .blob(nameMAC), .integer(generation), .blob(overviewNonce), .blob(overview), .blob(secretsNonce), .blob(secrets),
         loginHint.map { .integer($0) } ?? .null]
    }

    /// A row copied out of the statement that holds it.
    init(_ c: ItemRowColumns) {
        self.init(id: Array(c.id), nameMAC: Array(c.nameMAC), generation: c.generation, overviewNonce: Array(c.overviewNonce),
                  overview: Array(c.overview), secretsNonce: Array(c.secretsNonce), secrets: Array(c.secrets), loginHint: c.loginHint)
    }

    /// Lends this row's columns as a loop over the table reads them in place.
    func withColumns(_ body: (ItemRowColumns) throws -> Void) rethrows {
        try id.withUnsafeBytes { id in
            try nameMAC.withUnsafeBytes { nameMAC in
                try overviewNonce.withUnsafeBytes { overviewNonce in
                    try overview.withUnsafeBytes { overview in
                        try secretsNonce.withUnsafeBytes { secretsNonce in
                            try secrets.withUnsafeBytes { secrets in
                                try body(ItemRowColumns(id: id, nameMAC: nameMAC, generation: generation, overviewNonce: overviewNonce,
                                                        overview: overview, secretsNonce: secretsNonce, secrets: secrets, loginHint: loginHint))
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An item row's columns where the statement that read it holds them (`Statement.bytes`),
/// valid only until that statement steps again: the loops over every row (listings, export,
/// repair, rotation) open each record from here, with no array per column.
struct ItemRowColumns {
    var id: UnsafeRawBufferPointer
    var nameMAC: UnsafeRawBufferPointer
    var generation: Int64
    var overviewNonce: UnsafeRawBufferPointer
    var overview: UnsafeRawBufferPointer
    var secretsNonce: UnsafeRawBufferPointer
    var secrets: UnsafeRawBufferPointer
    var loginHint: Int64?
}

extension ItemRowColumns {
    /// The current row of `statement`, selected with `ItemRow.columns` (or `overviewColumns`, `recordColumns`)
    /// from column `first` on, each column read as `ItemRow(_:)` reads a `[SQLValue]` row.
    init(_ statement: Statement, from first: Int32 = 0) {
        let n = statement.columnCount - first
        let none = UnsafeRawBufferPointer(start: nil, count: 0)
        self.init(id: statement.bytes(first), nameMAC: statement.bytes(first + 1), generation: statement.integer(first + 2) ?? -1,
                  overviewNonce: statement.bytes(first + 3), overview: statement.bytes(first + 4),
                  secretsNonce: n > 6 ? statement.bytes(first + 5) : none, secrets: n > 6 ? statement.bytes(first + 6) : none,
                  loginHint: n > 7 ? statement.integer(first + 7) : nil)
    }
}

/// The associated data of item records (`UnlockedVault.recordAD`, the same bytes) built in one
/// buffer reused for every record of a loop, instead of an array per record. Public bytes: plain
/// memory.
final class RecordADBuffer {
    private var storage: UnsafeMutableRawBufferPointer
    private static let overviewLabel: (length: UInt32, bytes: UInt64) = label(RecordKind.overview.label)
    private static let secretsLabel: (length: UInt32, bytes: UInt64) = label(RecordKind.secrets.label)

    /// A kind's label as `ByteWriter` writes it: its length, then its bytes (at most 8), as one word.
    private static func label(_ s: String) -> (UInt32, UInt64) {
        precondition(s.utf8.count <= 8)
        var word: UInt64 = 0
        withUnsafeMutableBytes(of: &word) { w in for (i, b) in s.utf8.enumerated() { w[i] = b } }
        return (UInt32(s.utf8.count), word)
    }

    init() { storage = .allocate(byteCount: 256, alignment: 8) }

    deinit { storage.deallocate() }

    /// The associated data of a `kind` record of row `id` under key `generation` (a secrets
    /// record's includes `overviewNonce`) in the vault whose `recordADPrefix` is `prefix`,
    /// valid until the next call.
    func bytes(prefix: [UInt8], id: UnsafeRawBufferPointer, kind: RecordKind, generation: Int64,
               overviewNonce: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)) -> UnsafeRawBufferPointer {
        let label = kind == .secrets ? Self.secretsLabel : Self.overviewLabel
        let needed = prefix.count + 4 + id.count + 4 + 8 + 4 + 8 + 4 + overviewNonce.count
        if needed > storage.count {
            storage.deallocate()
            storage = .allocate(byteCount: max(needed, 2 * storage.count), alignment: 8)
        }
        let out = storage.baseAddress!
        prefix.withUnsafeBytes { out.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        var at = prefix.count
        out.storeBytes(of: UInt32(id.count).bigEndian, toByteOffset: at, as: UInt32.self)
        if let base = id.baseAddress { (out + at + 4).copyMemory(from: base, byteCount: id.count) }
        at += 4 + id.count
        out.storeBytes(of: label.length.bigEndian, toByteOffset: at, as: UInt32.self)
        out.storeBytes(of: label.bytes, toByteOffset: at + 4, as: UInt64.self)
        at += 4 + Int(label.length)
        out.storeBytes(of: UInt32(RecordWriter.version).bigEndian, toByteOffset: at, as: UInt32.self)
        out.storeBytes(of: UInt64(bitPattern: generation).bigEndian, toByteOffset: at + 4, as: UInt64.self)
        at += 12
        if kind == .secrets {
            out.storeBytes(of: UInt32(overviewNonce.count).bigEndian, toByteOffset: at, as: UInt32.self)
            if let base = overviewNonce.baseAddress { (out + at + 4).copyMemory(from: base, byteCount: overviewNonce.count) }
            at += 4 + overviewNonce.count
        }
        return UnsafeRawBufferPointer(start: out, count: at)
    }
}

/// A new item's row as an import seals it, in buffers reused for every item (public bytes: the
/// id, the name's index entry, the nonces and ciphertexts, bound to the INSERT in place, as a
/// rotation's `ResealedColumns` are). The two records' plaintexts are encoded into two writers
/// reused the same way; the secrets record, in ordinary memory as `SecretsRecord.encode`'s was,
/// is zeroed as soon as it is sealed.
final class NewItemRow {
    let id = UnsafeMutableRawBufferPointer.allocate(byteCount: 16, alignment: 8)
    let columns = ResealedColumns()
    private var overview = RecordWriter(kind: .overview, capacity: 512)
    private var secrets = RecordWriter(kind: .secrets, capacity: 512)

    deinit {
        id.deallocate()
        secrets.wipeBytes()
    }

    /// Seals `item` (its name normalised) under `vault`'s key with a fresh id and nonces: the
    /// bytes `UnlockedVault.seal(_:id:)` gives for that id and those nonces.
    func seal(_ item: Item, in vault: UnlockedVault) throws {
        RandomPool.shared.fill(id)
        let id = UnsafeRawBufferPointer(self.id)
        OverviewRecord.encode(item, into: &overview)
        RandomPool.shared.fill(columns.overviewNonce)
        let overviewNonce = UnsafeRawBufferPointer(columns.overviewNonce)
        try overview.bytes.withUnsafeBytes { plain in
            let ad = columns.associatedData.bytes(prefix: vault.recordADPrefix, id: id, kind: .overview, generation: vault.generation)
            try AEAD.seal(plain, key: vault.itemKey, nonce: overviewNonce, associatedData: ad, into: columns.overview(sealing: plain.count))
        }
        SecretsRecord.encode(item, into: &secrets)
        defer { secrets.zero() }
        RandomPool.shared.fill(columns.secretsNonce)
        try secrets.bytes.withUnsafeBytes { plain in
            let ad = columns.associatedData.bytes(prefix: vault.recordADPrefix, id: id, kind: .secrets, generation: vault.generation,
                                                  overviewNonce: overviewNonce)
            try AEAD.seal(plain, key: vault.itemKey, nonce: UnsafeRawBufferPointer(columns.secretsNonce), associatedData: ad,
                          into: columns.secrets(sealing: plain.count))
        }
        var name = item.name
        try name.withUTF8 { try KeyedHash.hash(UnsafeRawBufferPointer($0), key: vault.indexKey, into: columns.nameMAC) }
        columns.loginHint = ItemRow.loginHint(item.fingerprintLogin)
    }

    /// Binds the row to `insert` (`ItemRow.columns`, then `before` as ?9 when given), in place:
    /// the caller steps it and resets it before the next row is sealed.
    func bind(to insert: Statement, generation: Int64, before: Int64?) throws {
        try insert.bind(borrowing: UnsafeRawBufferPointer(id), at: 1)
        try insert.bind(borrowing: UnsafeRawBufferPointer(columns.nameMAC), at: 2)
        try insert.bind(generation, at: 3)
        try insert.bind(borrowing: UnsafeRawBufferPointer(columns.overviewNonce), at: 4)
        try insert.bind(borrowing: columns.sealedOverview, at: 5)
        try insert.bind(borrowing: UnsafeRawBufferPointer(columns.secretsNonce), at: 6)
        try insert.bind(borrowing: columns.sealedSecrets, at: 7)
        try insert.bind(columns.loginHint, at: 8)
        if let before { try insert.bind(before, at: 9) }
    }
}

/// A guarded buffer reused for every record one operation opens (a listing of 100,000 items makes
/// one guarded allocation, not one per item); it grows when a record does not fit.
/// The associated data of the record being opened and the name index checked against the row's
/// are built in buffers of their own, reused the same way.
final class RecordScratch {
    private(set) var buffer: SecretBytes
    /// The associated data of the record being opened.
    let associatedData = RecordADBuffer()
    /// The index entry of the name of the overview just opened (public: the rows hold it).
    let nameMAC = UnsafeMutableRawBufferPointer.allocate(byteCount: 32, alignment: 8)

    init(capacity: Int = 4096) throws { buffer = try SecretBytes(zeroed: capacity) }

    deinit { nameMAC.deallocate() }

    /// Opens `sealed` into the buffer and lends the plaintext; the plaintext is wiped after `body`.
    /// The buffer is borrowed once for the open, the lending and the wipe (each access to it is
    /// checked at run time: a loop over every row pays it per record).
    func open<R: ~Copyable>(_ sealed: UnsafeRawBufferPointer, key: borrowing SecretBytes, nonce: UnsafeRawBufferPointer,
                            associatedData: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        if sealed.count > buffer.count { buffer = try SecretBytes(zeroed: max(sealed.count, buffer.count * 2)) }
        return try buffer.withUnsafeMutableBytes { b in
            let plain = UnsafeMutableRawBufferPointer(rebasing: b[0..<(try AEAD.open(sealed, key: key, nonce: nonce, associatedData: associatedData, into: b))])
            defer { SecretBytes.wipe(plain) }
            return try body(UnsafeRawBufferPointer(plain))
        }
    }

    /// Opens `sealed` (arrays: a schema 1 row) into the buffer, as the form over bytes in place does.
    func open<R: ~Copyable>(_ sealed: [UInt8], key: borrowing SecretBytes, nonce: [UInt8], associatedData: [UInt8],
                            _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        if sealed.count > buffer.count { buffer = try SecretBytes(zeroed: max(sealed.count, buffer.count * 2)) }
        let n = try AEAD.open(sealed, key: key, nonce: nonce, associatedData: associatedData, into: buffer)
        defer { buffer.wipe(prefix: n) }
        return try buffer.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }
}

/// One row of a listing as read: an overview record's plaintext (lent, valid during the call),
/// or a row that failed authentication.
public enum OverviewRecordEntry {
    /// The checked plaintext of an overview record.
    case record(UnsafeRawBufferPointer)
    /// A row that could not be opened, by its row id (hex).
    case damaged(rowID: String)
}

/// One row of a listing: an item's overview, or a row that failed authentication.
public enum OverviewEntry: Sendable {
    /// A readable item, secrets withheld.
    case item(ItemOverview)
    /// A row that could not be opened, by its row id (hex).
    case damaged(rowID: String)
}

extension UnlockedVault {
    // MARK: records

    /// The associated data of a record: vault id, item id, record kind, format version, key
    /// generation, and for a secrets record the nonce of its overview.
    func recordAD(id: [UInt8], kind: RecordKind, generation: Int64, overviewNonce: [UInt8] = []) -> [UInt8] {
        var w = ByteWriter(label: "vault-record-v2")
        w.append(store.vaultID)
        w.append(id)
        w.append(kind.label)
        w.append(UInt32(RecordWriter.version))
        w.append(generation)
        if kind == .secrets { w.append(overviewNonce) }
        return w.bytes
    }

    /// The keyed BLAKE2b index of a (normalised) name.
    func nameMAC(_ normalized: String) throws -> [UInt8] {
        try KeyedHash.hash(Array(normalized.utf8), key: indexKey, outputLength: 32)
    }

    /// Seals `item` into a row with id `id` under this key.
    func seal(_ item: Item, id: [UInt8]) throws -> ItemRow {
        let overview = OverviewRecord.encode(item)
        let o = try overview.withUnsafeBytes { try AEAD.seal($0, key: itemKey, associatedData: recordAD(id: id, kind: .overview, generation: generation)) }
        var secrets = SecretsRecord.encode(item)
        defer { wipe(&secrets) }
        let s = try secrets.withUnsafeBytes {
            try AEAD.seal($0, key: itemKey, associatedData: recordAD(id: id, kind: .secrets, generation: generation, overviewNonce: o.nonce))
        }
        return ItemRow(id: id, nameMAC: try nameMAC(item.name), generation: generation, overviewNonce: o.nonce, overview: o.ciphertext,
                       secretsNonce: s.nonce, secrets: s.ciphertext, loginHint: ItemRow.loginHint(item.fingerprintLogin))
    }

    /// Opens a row's overview; its name must hash to the row's index entry.
    /// - Throws: `CryptoError` when it fails authentication, `RecordFormatError` when it is malformed.
    func openOverview(_ row: ItemRow, scratch: RecordScratch) throws -> ItemOverview {
        try withOverview(row, scratch: scratch) { try OverviewRecord.decode($0) }
    }

    /// Opens the overview of a row read in place, as `openOverview` does.
    func openOverview(_ row: ItemRowColumns, scratch: RecordScratch) throws -> ItemOverview {
        try withOverview(row, scratch: scratch) { try OverviewRecord.decode($0) }
    }

    /// Opens a row's overview record into `scratch` and lends its plaintext, once it has
    /// authenticated and its name hashes to the row's index entry (the one check every reader
    /// of an overview goes through).
    func withOverview<R>(_ row: ItemRow, scratch: RecordScratch, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        var result: R?
        try row.withColumns { result = try withOverview($0, scratch: scratch, body) }
        return result!
    }

    /// Opens the overview record of a row read in place, as `withOverview` does: the associated
    /// data and the name's index entry are built in `scratch`'s buffers, the name read where it lies.
    func withOverview<R>(_ row: ItemRowColumns, scratch: RecordScratch, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        guard row.generation == generation else { throw CryptoError.authenticationFailed }
        let ad = scratch.associatedData.bytes(prefix: recordADPrefix, id: row.id, kind: .overview, generation: row.generation)
        return try scratch.open(row.overview, key: itemKey, nonce: row.overviewNonce, associatedData: ad) { plain in
            // The name as `OverviewRecord.name(of:)` reads it (refused unless UTF-8), hashed in place.
            let name = try OverviewRecord.nameBytes(of: plain)
            try RecordReader.checkText(name)
            try KeyedHash.hash(name, key: indexKey, into: scratch.nameMAC)
            guard constantTimeEqual(UnsafeRawBufferPointer(scratch.nameMAC), row.nameMAC) else { throw CryptoError.authenticationFailed }
            return try body(plain)
        }
    }

    /// Opens a row's secrets record and lends its plaintext (in guarded memory, wiped after).
    func withSecrets<R: ~Copyable>(_ row: ItemRow, scratch: RecordScratch, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        var result: R?
        try row.withColumns { result = try withSecrets($0, scratch: scratch, body) }
        return result.take()!
    }

    /// Opens the secrets record of a row read in place, as `withSecrets` does.
    func withSecrets<R: ~Copyable>(_ row: ItemRowColumns, scratch: RecordScratch, _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        guard row.generation == generation else { throw CryptoError.authenticationFailed }
        let ad = scratch.associatedData.bytes(prefix: recordADPrefix, id: row.id, kind: .secrets, generation: row.generation,
                                              overviewNonce: row.overviewNonce)
        return try scratch.open(row.secrets, key: itemKey, nonce: row.secretsNonce, associatedData: ad, body)
    }

    /// Opens both records of a row into a whole item.
    func openItem(_ row: ItemRow, scratch: RecordScratch) throws -> Item {
        var item: Item?
        try row.withColumns { item = try openItem($0, scratch: scratch) }
        return item!
    }

    /// Opens both records of a row read in place into a whole item.
    func openItem(_ row: ItemRowColumns, scratch: RecordScratch) throws -> Item {
        var item = try openOverview(row, scratch: scratch).item
        try withSecrets(row, scratch: scratch) { try SecretsRecord.decode($0, into: &item) }
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

    /// The row of the item called `normalized`, or `.itemNotFound`.
    func row(named normalized: String, overviewOnly: Bool = false) throws -> ItemRow {
        let columns = overviewOnly ? ItemRow.overviewColumns : ItemRow.columns
        guard let r = try db.query("SELECT \(columns) FROM items WHERE name_mac=?", [.blob(try nameMAC(normalized))]).first else {
            try checkStillCurrent()
            throw VaultError.itemNotFound(normalized)
        }
        return ItemRow(r)
    }

    /// Runs a read of one item, turning a record that fails authentication into `.corrupt` naming it.
    func reading<R: ~Copyable>(_ normalized: String, record: RecordKind, _ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch is CryptoError {
            try checkStillCurrent()
            throw VaultError.corrupt("item '\(normalized)' failed authentication (its \(record.label) record)")
        } catch is RecordFormatError {
            throw VaultError.corrupt("item '\(normalized)' is unreadable (its \(record.label) record)")
        }
    }

    // MARK: reading

    /// Reads one item, secrets included.
    /// - Throws: `.itemNotFound`, `.corrupt` naming the item when a record fails authentication,
    ///   `.keysRotated` when a rotation committed since this vault was unlocked.
    public func item(named name: String) throws -> Item {
        let n = try Item.normalize(name: name)
        let row = try row(named: n)
        let scratch = try RecordScratch(capacity: row.secrets.count + row.overview.count)
        var item = try reading(n, record: .overview) { try openOverview(row, scratch: scratch).item }
        try reading(n, record: .secrets) { try withSecrets(row, scratch: scratch) { try SecretsRecord.decode($0, into: &item) } }
        return item
    }

    /// Reads one item's overview (its secrets record is not opened).
    public func overview(named name: String) throws -> ItemOverview {
        let n = try Item.normalize(name: name)
        let row = try row(named: n, overviewOnly: true)
        return try reading(n, record: .overview) { try openOverview(row, scratch: try RecordScratch(capacity: row.overview.count)) }
    }

    /// Whether an item of that name exists.
    /// - Throws: `.keysRotated` when a rotation committed since this vault was unlocked.
    public func contains(_ name: String) throws -> Bool {
        let n = try Item.normalize(name: name)
        let found = !(try db.query("SELECT 1 FROM items WHERE name_mac=?", [.blob(try nameMAC(n))]).isEmpty)
        if !found { try checkStillCurrent() }
        return found
    }

    /// Streams every row's overview record as read, checked (it authenticates and its name
    /// hashes to the row's index entry) but not decoded: the plaintext is lent to `body` from the
    /// one guarded buffer every row is opened into, valid only during the call. No secrets record
    /// is opened. A damaged row is reported by its id instead of aborting the listing.
    /// - Throws: `.keysRotated` instead of reporting rows damaged when a rotation committed since.
    public func forEachOverviewRecord(_ body: (OverviewRecordEntry) throws -> Void) throws {
        let scratch = try RecordScratch()
        let statement = try db.prepare("SELECT \(ItemRow.overviewColumns) FROM items")
        var checked = false
        while try statement.step() {
            let row = ItemRowColumns(statement)
            var opened = false
            do {
                try withOverview(row, scratch: scratch) { plain in
                    opened = true
                    try body(.record(plain))
                }
            } catch where !opened && (error is CryptoError || error is RecordFormatError) {
                if !checked { try checkStillCurrent(); checked = true }
                try body(.damaged(rowID: hexString(Array(row.id))))
            }
        }
    }

    /// The name of the first item with fingerprint login on, nil when none (export's check before
    /// it releases anything): every overview opened and checked as `forEachOverview` checks it,
    /// only the first such item's name decoded.
    /// - Throws: `.corrupt` for an overview that does not decode, as `forEachOverview`.
    func firstFingerprintLoginItem() throws -> String? {
        var found: String?
        try forEachOverviewRecord { e in
            guard case .record(let plain) = e else { return }
            do throws(RecordFormatError) {
                try OverviewRecord.check(plain)
                if found == nil, try OverviewRecord.fingerprintLoginIsOn(plain) { found = try OverviewRecord.name(of: plain) }
            } catch {
                throw VaultError.corrupt("an item's overview record is unreadable (\(error.reason))")
            }
        }
        return found
    }

    /// Streams every row's overview, decoded, as read (no secrets record is opened); with a
    /// matcher, only the overviews it matches are decoded and passed on.
    public func forEachOverview(matcher: OverviewMatcher?, _ body: (OverviewEntry) throws -> Void) throws {
        try forEachOverviewRecord { entry in
            switch entry {
            case .record(let plain):
                if let matcher, !matcher.matches(plain) { return }
                do {
                    try body(.item(try ItemOverview(record: plain)))
                } catch let e as RecordFormatError {
                    throw VaultError.corrupt("an item's overview record is unreadable (\(e.reason))")
                }
            case .damaged(let id): try body(.damaged(rowID: id))
            }
        }
    }

    /// The encoded overview record of one item (the agent's index keeps these bytes).
    public func overviewRecord(named name: String) throws -> [UInt8] {
        let n = try Item.normalize(name: name)
        let row = try row(named: n, overviewOnly: true)
        let scratch = try RecordScratch(capacity: row.overview.count)
        return try reading(n, record: .overview) {
            try withOverview(row, scratch: scratch) { plain in
                _ = try OverviewRecord.decode(plain)
                return Array(plain)
            }
        }
    }

    /// A number that changes whenever another connection commits to the vault (SQLite's
    /// `data_version`): a cache of this vault's overviews is current while it stays the same and
    /// every write went through this object.
    public func changeCounter() throws -> Int64 {
        try db.query("PRAGMA data_version").first?.first?.int ?? 0
    }

    /// Streams every item with its secrets, as read (export, repair): one guarded buffer for all.
    /// - Throws: `.keysRotated` instead of reporting rows damaged when a rotation committed since.
    func forEachItem(_ body: (ItemEntry) throws -> Void) throws {
        let scratch = try RecordScratch()
        let statement = try db.prepare("SELECT \(ItemRow.columns) FROM items")
        var checked = false
        while try statement.step() {
            let row = ItemRowColumns(statement)
            let entry: ItemEntry
            do {
                entry = .item(try openItem(row, scratch: scratch))
            } catch {
                if !checked { try checkStillCurrent(); checked = true }
                entry = .damaged(rowID: hexString(Array(row.id)))
            }
            try body(entry)
        }
    }

    /// Streams every item's two records lent in place (export): the overview opened into one
    /// guarded buffer and the secrets into another, both reused for every row, and both checked
    /// (`ReleasedRecords`) before they are lent. A row that cannot be opened or read is
    /// reported damaged; an error of `body` ends the stream.
    /// - Throws: `.keysRotated` instead of reporting rows damaged when a rotation committed since.
    func forEachItemRecords(_ body: (ReleasedRecordsEntry) throws -> Void) throws {
        let overviews = try RecordScratch(), secrets = try RecordScratch()
        let statement = try db.prepare("SELECT \(ItemRow.recordColumns) FROM items")
        var checked = false
        while try statement.step() {
            let row = ItemRowColumns(statement)
            var lent = false
            do {
                try withOverview(row, scratch: overviews) { overview in
                    try withSecrets(row, scratch: secrets) { plain in
                        let records = try ReleasedRecords(overview: overview, secrets: plain)
                        lent = true
                        try body(.item(records))
                    }
                }
            } catch where !lent {
                if !checked { try checkStillCurrent(); checked = true }
                try body(.damaged(rowID: hexString(Array(row.id))))
            }
        }
    }

    /// Every item with its secrets.
    func allItemsWithSecrets() throws -> [ItemEntry] {
        var out: [ItemEntry] = []
        try forEachItem { out.append($0) }
        return out
    }

    // MARK: writing

    /// Adds an item. With `replace`, an existing item of that name is overwritten (its creation time kept).
    /// - Throws: `.alreadyExists` unless `replace`.
    public func add(_ item: Item, replace: Bool = false) throws {
        var item = item
        item.name = try Item.normalize(name: item.name)
        let mac = try nameMAC(item.name)
        try writeTransaction {
            if let existing = try db.query("SELECT id FROM items WHERE name_mac=?", [.blob(mac)]).first {
                guard replace else { throw VaultError.alreadyExists(item.name) }
                if let old = try? self.overview(named: item.name) { item.created = old.item.created }
                try db.query("DELETE FROM items WHERE id=?", [existing[0]])
            }
            try db.query("INSERT INTO items(\(ItemRow.columns)) VALUES(\(ItemRow.placeholders))", try seal(item, id: randomBytes(16)).values)
        }
    }

    /// Changes an item in place (fresh nonces); a changed name moves its index entry. Every
    /// update comes here: one that turns the item's fingerprint login off is written only with
    /// `freshMatch`, a token for `.fingerprintLoginSwitch` of this item (`requireFreshMatch`).
    /// - Throws: `.itemNotFound`, `.alreadyExists` when the new name is taken, `.freshMatchNeeded`.
    package func update(_ name: String, now: Int64 = unixNow(), freshMatch: FreshMatchToken? = nil,
                       _ change: (inout Item) throws -> Void) throws {
        let n = try Item.normalize(name: name)
        try writeTransaction {
            let row = try row(named: n)
            let scratch = try RecordScratch(capacity: row.secrets.count + row.overview.count)
            var item = try reading(n, record: .overview) { try openOverview(row, scratch: scratch).item }
            try reading(n, record: .secrets) { try withSecrets(row, scratch: scratch) { try SecretsRecord.decode($0, into: &item) } }
            let guarded = item.fingerprintLogin
            try change(&item)
            if guarded && !item.fingerprintLogin { try requireFreshMatch(freshMatch, for: .fingerprintLoginSwitch(item: n), item: n) }
            item.name = try Item.normalize(name: item.name)
            item.modified = now
            let mac = try nameMAC(item.name)
            if item.name != n, !(try db.query("SELECT 1 FROM items WHERE name_mac=?", [.blob(mac)]).isEmpty) {
                throw VaultError.alreadyExists(item.name)
            }
            let sealed = try seal(item, id: row.id)
            try db.query("UPDATE items SET \(ItemRow.updateSet) WHERE id=?",
                         Array(sealed.values.dropFirst()) + [.blob(row.id)])
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

    /// Adds the items `next` yields, one at a time, in one transaction (an import that holds one
    /// decoded item at a time). With `replace`, existing names are overwritten; otherwise the
    /// first existing name aborts the whole import (nothing is written). Returns how many.
    @discardableResult
    public func add(replace: Bool, from next: () throws -> Item?) throws -> Int {
        try add(replace: replace, givenTwice: nil, from: next)
    }

    /// Adds the items `next` yields as `add(replace:from:)` does; an item whose name an earlier
    /// item of the import had throws `givenTwice(name)`, the name as this item gives it (a
    /// streamed import names the element; two names with one normal form are canonically
    /// equivalent, so equal as Strings, as a set of the names given would find them).
    @discardableResult
    public func add(replace: Bool, givenTwice: ((String) -> VaultError)?, from next: () throws -> Item?) throws -> Int {
        // name_mac is UNIQUE: the insert itself finds an existing name, with no lookup or set of
        // names of its own per item. A name met twice in the import is told from one already in
        // the vault by its row: rows this import wrote have rowids above every row before it
        // (vault never writes a rowid of its own, so SQLite gives each new row max(rowid) + 1).
        // With `replace` the upsert replaces only rows from before the import, and moves the row
        // it replaced above them too.
        let insert = try db.prepare(replace
            ? """
              INSERT INTO items(\(ItemRow.columns)) VALUES(\(ItemRow.placeholders)) ON CONFLICT(name_mac) DO UPDATE SET
              rowid=(SELECT max(rowid) + 1 FROM items), id=excluded.id, generation=excluded.generation, overview_nonce=excluded.overview_nonce, overview=excluded.overview,
              secrets_nonce=excluded.secrets_nonce, secrets=excluded.secrets, login_hint=excluded.login_hint WHERE items.rowid <= ?9
              """
            : "INSERT INTO items(\(ItemRow.columns)) VALUES(\(ItemRow.placeholders)) ON CONFLICT(name_mac) DO NOTHING")
        return try withLargePageCache {
            try writeTransaction {
                let before = try db.query("SELECT coalesce(max(rowid), 0) FROM items").first?.first?.int ?? 0
                let row = NewItemRow()
                var count = 0
                while var item = try next() {
                    let given = item.name
                    item.name = try Item.normalize(name: given)
                    try row.seal(item, in: self)
                    try row.bind(to: insert, generation: generation, before: replace ? before : nil)
                    _ = try insert.step()
                    let changed = db.changes
                    try insert.reset()
                    if changed == 0 {
                        let mac = Array(UnsafeRawBufferPointer(row.columns.nameMAC))
                        let earlier = try db.query("SELECT rowid FROM items WHERE name_mac=?", [.blob(mac)]).first?.first?.int ?? 0
                        if earlier > before {
                            if let givenTwice { throw givenTwice(given) }
                            throw VaultError.usage("'\(item.name)' appears twice in the import")
                        }
                        throw VaultError.alreadyExists(item.name)
                    }
                    count += 1
                }
                return count
            }
        }
    }

    /// Runs `body` (one large write transaction: an import, a rotation) with a 128 MiB page cache
    /// instead of SQLite's 2 MiB: with the small one, SQLite spills dirty pages to the WAL in the
    /// middle of the transaction and reads index pages again (half the SQL time at 100k rows).
    func withLargePageCache<T>(_ body: () throws -> T) throws -> T {
        try db.execute("PRAGMA cache_size = -131072")
        defer { try? db.execute("PRAGMA cache_size = -2000") }
        return try body()
    }

    // MARK: repair

    /// The item rows that cannot be opened with this key (damaged, or written under another key
    /// generation), by row id (hex).
    public func damagedRows() throws -> [String] {
        var out: [String] = []
        try forEachItem { if case .damaged(let id) = $0 { out.append(id) } }
        return out
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
