/// An item's released secrets, lent: the plaintext of a secrets record (docs/format.md,
/// "Records") holding the fields released, read in place where it lies (guarded memory). Valid
/// only during the call that lends it. It was checked when it was lent (fields in order and in
/// bounds, texts UTF-8), so reading it cannot fail.
public struct ItemSecrets {
    let record: UnsafeRawBufferPointer

    /// Lends a checked record.
    init(checked record: UnsafeRawBufferPointer) { self.record = record }

    /// Checks `record` against the overview it belongs to.
    /// - Throws: `RecordFormatError` for a malformed record.
    init(checking record: UnsafeRawBufferPointer, of item: Item) throws(RecordFormatError) {
        try SecretsRecord.check(record, against: item)
        self.record = record
    }

    /// Lends `record`, a secrets record's plaintext (an agent's reply copied into guarded
    /// memory), checked against the overview `item` it belongs to.
    /// - Throws: `.corrupt` for a malformed record.
    public init(record: UnsafeRawBufferPointer, of item: Item) throws {
        do { try self.init(checking: record, of: item) } catch {
            throw VaultError.corrupt("item '\(item.name)' is unreadable (its secrets record: \(error.reason))")
        }
    }

    /// Lends the secrets record's plaintext (the agent sends it as a frame's tail).
    public func withRecord<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try body(record) }

    private func forEachField(_ body: (UInt8, UnsafeRawBufferPointer) throws -> Void) rethrows {
        guard var r = try? RecordReader(record, kind: .secrets) else { return }
        while let next = try? r.next(repeatable: SecretsRecord.repeatable), let (t, v) = Optional(next) { try body(t, v) }
    }

    /// The bytes of `field` (the password, the TOTP secret for `totp`, `totp-uri` and `otp`,
    /// the notes, a secret custom field `.custom(name)`, even one named like a built-in field),
    /// nil when the item has none or it was not released.
    public func value(of field: ItemField) -> UnsafeRawBufferPointer? {
        (try? SecretsRecord.value(of: field, in: record)) ?? nil
    }

    /// The password history, oldest first: when each password was replaced, and its bytes.
    public func forEachFormerPassword(_ body: (_ replaced: Int64, _ password: UnsafeRawBufferPointer) throws -> Void) rethrows {
        try forEachField { t, v in
            guard t == SecretsRecord.history, let when = try? RecordReader.int64(UnsafeRawBufferPointer(rebasing: v[0..<8])) else { return }
            try body(when, UnsafeRawBufferPointer(rebasing: v[8...]))
        }
    }

    /// How many former passwords were released.
    public var formerPasswordCount: Int {
        var n = 0
        forEachField { t, _ in if t == SecretsRecord.history { n += 1 } }
        return n
    }

    /// Whether `field` (as `value(of:)` names them, or `.history`) was released and the item has it.
    public func has(_ field: ItemField) -> Bool {
        field == .history ? formerPasswordCount > 0 : value(of: field) != nil
    }

    /// Fills `item`'s secrets as `String`s, for the paths that still hand secrets out as text
    /// (the clipboard, `login`, references, a Bitwarden export).
    /// - Throws: `.corrupt` for a secret of a field `item` does not have.
    public func decode(into item: inout Item) throws {
        do { try SecretsRecord.decode(record, into: &item) } catch {
            throw VaultError.corrupt("item '\(item.name)' is unreadable (its secrets record: \(error.reason))")
        }
    }
}

/// An item as a release hands it out: its overview (no secret) and the secrets released, as a
/// secrets record in guarded memory. What `VaultAccess.releaseSecrets` returns, in-process and
/// through the agent (where the record is the reply frame's binary tail).
public final class ReleasedItem {
    /// The item without its secrets, and what it has.
    public let overview: ItemOverview
    private let record: SecretOutput

    /// The overview and a secrets record in guarded memory, checked against it.
    init(overview: ItemOverview, record: SecretOutput) throws {
        try record.withUnsafeBytes { plain in _ = try ItemSecrets(record: plain, of: overview.item) }
        self.overview = overview
        self.record = record
    }

    /// An item as received from the agent: the overview, and the secrets record of the reply's
    /// tail, copied into guarded memory (the caller wipes the tail).
    /// - Throws: `.corrupt` for a malformed record.
    public convenience init(overview: ItemOverview, secretsRecord: UnsafeRawBufferPointer) throws {
        let record = try SecretOutput(capacity: secretsRecord.count)
        record.append(secretsRecord)
        try self.init(overview: overview, record: record)
    }

    /// An item with nothing released: its overview alone (no secrets record was opened).
    public convenience init(withholdingAllOf overview: ItemOverview) throws {
        let record = try SecretOutput(capacity: 2)
        record.append(RecordWriter.version)
        record.append(RecordKind.secrets.rawValue)
        try self.init(overview: overview, record: record)
    }

    /// The item's name.
    public var name: String { overview.item.name }

    /// Lends the released secrets.
    public func withSecrets<R>(_ body: (ItemSecrets) throws -> R) rethrows -> R {
        try record.withWholeBytes { try body(ItemSecrets(checked: $0)) }
    }

    /// Lends the secrets record's plaintext (the agent sends it as a frame's tail).
    public func withRecord<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try record.withWholeBytes(body)
    }

    /// The item with its released secrets as `String`s (the others withheld, as the overview has them).
    public func item() throws -> Item {
        var item = overview.item
        try withSecrets { try $0.decode(into: &item) }
        return item
    }
}

/// One row of an export: an item's overview with its secrets lent (valid during the call), or a
/// row that failed authentication.
public enum ReleasedEntry {
    /// A readable item and all its secrets.
    case item(ItemOverview, ItemSecrets)
    /// A row that could not be opened, by its row id (hex).
    case damaged(rowID: String)

    /// The entry with its secrets decoded into the item's `String`s (the paths that hand text out).
    public func decoded() throws -> ItemEntry {
        switch self {
        case .item(let overview, let secrets):
            var item = overview.item
            try secrets.decode(into: &item)
            return .item(item)
        case .damaged(let id): return .damaged(rowID: id)
        }
    }
}

/// An item's two opened records as export reads them, lent (valid only during the call that
/// lends them): the overview's and the secrets' plaintexts where they were opened, in guarded
/// memory, each checked as decoding checks it (the secrets against the overview), with where
/// every field lies. Export writes its JSON from here (`ExportJSON.write`) with no `Item`, no
/// `String` and no array per item; the paths that take the item as text decode it.
public struct ReleasedRecords {
    let overview: UnsafeRawBufferPointer
    let layout: OverviewLayout
    let secretsRecord: UnsafeRawBufferPointer
    let secretsLayout: SecretsLayout

    /// Lends two opened records once both check.
    /// - Throws: `RecordFormatError` for a record that decoding would refuse.
    init(overview: UnsafeRawBufferPointer, secrets: UnsafeRawBufferPointer) throws(RecordFormatError) {
        let layout = try OverviewLayout(checking: overview)
        secretsLayout = try SecretsLayout(checking: secrets, against: overview, layout)
        self.overview = overview
        self.layout = layout
        secretsRecord = secrets
    }

    /// The released secrets, lent.
    public var secrets: ItemSecrets { ItemSecrets(checked: secretsRecord) }

    /// Whether the item has fingerprint login on (its sealed flag).
    public var fingerprintLogin: Bool { layout.fingerprintLogin }

    /// The item's name (for a message).
    public var name: String { String(decoding: overview.fieldBytes(layout.name), as: UTF8.self) }

    /// The overview decoded (the paths that hand the item out as `String`s).
    /// - Throws: `.corrupt`, which a checked record never gives.
    public func decodedOverview() throws -> ItemOverview { try ItemOverview(record: overview) }
}

/// One row of an export read as records: an item's two records lent, or a row that failed
/// authentication or does not decode.
public enum ReleasedRecordsEntry {
    /// A readable item's records.
    case item(ReleasedRecords)
    /// A row that could not be opened or read, by its row id (hex).
    case damaged(rowID: String)
}
