import FoundationEssentials
import VaultSystem

/// The two sealed records of an item (record format 2, docs/format.md): the overview, which
/// listings, searches and matching open, and the secrets, opened only when one is released.
public enum RecordKind: UInt8, Sendable {
    /// Name, type, username, URLs, tags, times, switches, prompt patterns, non-secret custom fields.
    case overview = 1
    /// Password, TOTP secret, notes, secret custom field values, password history.
    case secrets = 2

    var label: String { self == .overview ? "overview" : "secrets" }
}

/// Why a record's plaintext was refused (it authenticated, so only a bug or a newer writer makes one).
struct RecordFormatError: Error, Equatable {
    let reason: String
}

/// The binary record encoding: a version byte (2), a kind byte, then fields, each a tag byte, a
/// LEB128 length and that many bytes. Tags appear in ascending order; a tag may repeat only
/// where the format says so; an unknown tag or a length past the end refuses the record.
struct RecordWriter {
    /// The record format version this code writes and reads.
    static let version: UInt8 = 2
    private(set) var bytes: [UInt8]

    init(kind: RecordKind, capacity: Int = 128) {
        bytes = []
        bytes.reserveCapacity(capacity)
        bytes.append(Self.version)
        bytes.append(kind.rawValue)
    }

    /// Starts a new record of `kind` in the same storage (an import encodes every item's
    /// records into two writers): what was written is zeroed first, the capacity kept.
    mutating func restart(kind: RecordKind) {
        zero()
        bytes.removeAll(keepingCapacity: true)
        bytes.append(Self.version)
        bytes.append(kind.rawValue)
    }

    /// Overwrites what was written with zeros (a secrets record, once sealed), keeping the length.
    mutating func zero() {
        bytes.withUnsafeMutableBytes { b in _ = b.initializeMemory(as: UInt8.self, repeating: 0) }
    }

    mutating func length(_ n: Int) {
        var n = UInt64(n)
        repeat {
            let low = UInt8(n & 0x7f)
            n >>= 7
            bytes.append(n == 0 ? low : low | 0x80)
        } while n != 0
    }

    /// How many bytes `length(n)` writes.
    static func lengthSize(_ n: Int) -> Int {
        var n = UInt64(n), size = 1
        while n >= 0x80 {
            n >>= 7
            size += 1
        }
        return size
    }

    mutating func field(_ tag: UInt8, _ value: some Collection<UInt8>) {
        bytes.append(tag)
        length(value.count)
        bytes.append(contentsOf: value)
    }

    mutating func field(_ tag: UInt8, _ text: String?) {
        guard var text else { return }
        text.withUTF8 { u in
            bytes.append(tag)
            length(u.count)
            bytes.append(contentsOf: u)
        }
    }

    /// A field of one byte.
    mutating func field(_ tag: UInt8, byte: UInt8) {
        bytes.append(tag)
        bytes.append(1)
        bytes.append(byte)
    }

    mutating func field(_ tag: UInt8, int64 n: Int64) {
        bytes.append(tag)
        bytes.append(8)
        appendBigEndian(n)
    }

    /// `n` as 8 big-endian bytes.
    static func bigEndian(_ n: Int64) -> [UInt8] {
        let u = UInt64(bitPattern: n)
        return (0..<8).map { UInt8(truncatingIfNeeded: u >> (56 - 8 * UInt64($0))) }
    }

    private mutating func appendBigEndian(_ n: Int64) {
        withUnsafeBytes(of: UInt64(bitPattern: n).bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// A field of two parts: a LEB128-prefixed name and the rest (custom fields), after the
    /// `prefix` bytes (a kind byte, or none).
    mutating func field(_ tag: UInt8, prefix: UInt8?, name: String, value: String) {
        let nameCount = name.utf8.count
        bytes.append(tag)
        length((prefix == nil ? 0 : 1) + Self.lengthSize(nameCount) + nameCount + value.utf8.count)
        if let prefix { bytes.append(prefix) }
        length(nameCount)
        bytes.append(contentsOf: name.utf8)
        bytes.append(contentsOf: value.utf8)
    }

    /// A former password: when it was replaced (8 big-endian bytes), then the password.
    mutating func field(_ tag: UInt8, replaced: Int64, password: String) {
        bytes.append(tag)
        length(8 + password.utf8.count)
        appendBigEndian(replaced)
        bytes.append(contentsOf: password.utf8)
    }

    /// Wipes the encoding (a secrets record is built in ordinary memory only briefly).
    mutating func wipeBytes() { wipe(&bytes) }
}

/// Reads fields out of a record's plaintext in place (the plaintext stays where it was opened:
/// for a secrets record, guarded memory).
struct RecordReader {
    private let base: UnsafeRawBufferPointer
    private var offset: Int
    private var lastTag: UInt8 = 0

    /// Checks the header.
    init(_ record: UnsafeRawBufferPointer, kind: RecordKind) throws(RecordFormatError) {
        guard record.count >= 2 else { throw RecordFormatError(reason: "too short") }
        guard record[0] == RecordWriter.version else { throw RecordFormatError(reason: "record version \(record[0])") }
        guard record[1] == kind.rawValue else { throw RecordFormatError(reason: "a \(record[1]) record where a \(kind.label) record belongs") }
        base = record
        offset = 2
    }

    private mutating func length() throws(RecordFormatError) -> Int {
        var n = 0, shift = 0
        while true {
            guard offset < base.count, shift < 35 else { throw RecordFormatError(reason: "a bad length") }
            let b = base[offset]
            offset += 1
            n |= Int(b & 0x7f) << shift
            if b & 0x80 == 0 { return n }
            shift += 7
        }
    }

    /// The next field, or nil at the end. `repeatable` lists the tags that may appear more than once.
    mutating func next(repeatable: Set<UInt8>) throws(RecordFormatError) -> (tag: UInt8, value: UnsafeRawBufferPointer)? {
        guard offset < base.count else { return nil }
        let tag = base[offset]
        offset += 1
        guard tag > lastTag || (tag == lastTag && repeatable.contains(tag)) else {
            throw RecordFormatError(reason: "field \(tag) out of order")
        }
        lastTag = tag
        let n = try length()
        guard n <= base.count - offset else { throw RecordFormatError(reason: "field \(tag) runs past the record") }
        let value = UnsafeRawBufferPointer(rebasing: base[offset..<(offset + n)])
        offset += n
        return (tag, value)
    }

    /// The text `value` holds, refused unless it is UTF-8 (`isUTF8`, what `String(validating:as:)`
    /// accepts). Checked here, then made by `String(decoding:as:)`, which has nothing left to
    /// repair: `String(validating:as:)` is generic at run time, and looked its metadata up for
    /// every text (a `ls` of 100,000 names spent 6 % of its instructions there).
    static func text(_ value: UnsafeRawBufferPointer) throws(RecordFormatError) -> String {
        guard isUTF8(value) else { throw RecordFormatError(reason: "text that is not UTF-8") }
        return String(decoding: value, as: UTF8.self)
    }

    /// Refuses what `text` refuses, making no String.
    static func checkText(_ value: UnsafeRawBufferPointer) throws(RecordFormatError) {
        guard isUTF8(value) else { throw RecordFormatError(reason: "text that is not UTF-8") }
    }

    /// Whether `value` is well-formed UTF-8 (Unicode's table 3-7: what `String(validating:as:)`
    /// accepts), read in place, eight ASCII bytes at a time: a record's texts and secrets are
    /// checked without a String or a generic parser per value.
    static func isUTF8(_ value: UnsafeRawBufferPointer) -> Bool {
        guard let base = value.baseAddress else { return true }
        let n = value.count
        var i = 0
        while i < n {
            if n - i >= 8, base.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 {
                i += 8
                continue
            }
            let b0 = base.load(fromByteOffset: i, as: UInt8.self)
            if b0 < 0x80 {
                i += 1
                continue
            }
            // The sequence's length, and the range its second byte must be in (which refuses
            // overlong forms, surrogates and code points past U+10FFFF).
            let length: Int, low: UInt8, high: UInt8
            switch b0 {
            case 0xC2...0xDF: (length, low, high) = (2, 0x80, 0xBF)
            case 0xE0: (length, low, high) = (3, 0xA0, 0xBF)
            case 0xE1...0xEC, 0xEE...0xEF: (length, low, high) = (3, 0x80, 0xBF)
            case 0xED: (length, low, high) = (3, 0x80, 0x9F)
            case 0xF0: (length, low, high) = (4, 0x90, 0xBF)
            case 0xF1...0xF3: (length, low, high) = (4, 0x80, 0xBF)
            case 0xF4: (length, low, high) = (4, 0x80, 0x8F)
            default: return false
            }
            guard n - i >= length else { return false }
            let b1 = base.load(fromByteOffset: i + 1, as: UInt8.self)
            guard b1 >= low && b1 <= high else { return false }
            var k = 2
            while k < length {
                guard base.load(fromByteOffset: i + k, as: UInt8.self) & 0xC0 == 0x80 else { return false }
                k += 1
            }
            i += length
        }
        return true
    }

    static func int64(_ value: UnsafeRawBufferPointer) throws(RecordFormatError) -> Int64 {
        guard value.count == 8 else { throw RecordFormatError(reason: "a time of \(value.count) bytes") }
        var u: UInt64 = 0
        for b in value { u = u << 8 | UInt64(b) }
        return Int64(bitPattern: u)
    }

    /// Splits a two-part field: a LEB128-prefixed name, then the value.
    static func named(_ value: UnsafeRawBufferPointer, skipping prefix: Int = 0) throws(RecordFormatError) -> (name: String, value: UnsafeRawBufferPointer) {
        guard value.count >= prefix else { throw RecordFormatError(reason: "a short custom field") }
        var r = RecordReader(unchecked: UnsafeRawBufferPointer(rebasing: value[prefix...]))
        let n = try r.length()
        guard n <= r.base.count - r.offset else { throw RecordFormatError(reason: "a custom field name past its field") }
        let name = try text(UnsafeRawBufferPointer(rebasing: r.base[r.offset..<(r.offset + n)]))
        return (name, UnsafeRawBufferPointer(rebasing: r.base[(r.offset + n)...]))
    }

    private init(unchecked base: UnsafeRawBufferPointer) {
        self.base = base
        offset = 0
    }
}

/// The overview record: tags and what they hold (docs/format.md, "Records").
enum OverviewRecord {
    static let name: UInt8 = 1, type: UInt8 = 2, username: UInt8 = 3, url: UInt8 = 4, tag: UInt8 = 5
    static let created: UInt8 = 6, modified: UInt8 = 7, flags: UInt8 = 8, origin: UInt8 = 9
    static let userPrompt: UInt8 = 10, passwordPrompt: UInt8 = 11, field: UInt8 = 12, historyCount: UInt8 = 13
    static let repeatable: Set<UInt8> = [url, tag, field]

    static let fingerprintLogin: UInt8 = 1, hasPassword: UInt8 = 2, hasTOTP: UInt8 = 4, hasNotes: UInt8 = 8

    static let types: [ItemType] = [.login, .note, .card, .identity, .secretService, .sshKey]
    static let kinds: [CustomFieldKind] = [.text, .hidden, .url, .totp]

    /// The overview of `item` (its secrets left out), encoded.
    static func encode(_ item: Item) -> [UInt8] {
        encode(item, flags: (item.password != nil, item.totp != nil, item.notes != nil), historyCount: item.passwordHistory.count)
    }

    /// An overview encoded from an item whose secrets may already be withheld, with what it has.
    static func encode(_ item: Item, flags has: (password: Bool, totp: Bool, notes: Bool), historyCount: Int) -> [UInt8] {
        var w = RecordWriter(kind: .overview)
        encode(item, flags: has, historyCount: historyCount, into: &w)
        return w.bytes
    }

    /// The overview of `item`, encoded into `w` (restarted first: an import reuses one writer).
    static func encode(_ item: Item, into w: inout RecordWriter) {
        encode(item, flags: (item.password != nil, item.totp != nil, item.notes != nil), historyCount: item.passwordHistory.count, into: &w)
    }

    private static func encode(_ item: Item, flags has: (password: Bool, totp: Bool, notes: Bool), historyCount: Int, into w: inout RecordWriter) {
        w.restart(kind: .overview)
        w.field(name, item.name)
        w.field(type, byte: typeCode(item.type))
        w.field(username, item.username)
        for u in item.urls { w.field(url, u) }
        for t in item.tags { w.field(tag, t) }
        w.field(created, int64: item.created)
        w.field(modified, int64: item.modified)
        var f: UInt8 = 0
        if item.fingerprintLogin { f |= fingerprintLogin }
        if has.password { f |= hasPassword }
        if has.totp { f |= hasTOTP }
        if has.notes { f |= hasNotes }
        w.field(flags, byte: f)
        w.field(origin, item.origin)
        w.field(userPrompt, item.userPrompt)
        w.field(passwordPrompt, item.passwordPrompt)
        for c in item.fields {
            w.field(field, prefix: kindCode(c.kind), name: c.name, value: c.kind.isSecret ? "" : c.value)
        }
        if historyCount > 0 {
            let n = UInt32(clamping: historyCount)
            w.field(OverviewRecord.historyCount, [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)])
        }
    }

    /// The byte `types` gives `type` (its position).
    static func typeCode(_ type: ItemType) -> UInt8 {
        switch type {
        case .login: 0
        case .note: 1
        case .card: 2
        case .identity: 3
        case .secretService: 4
        case .sshKey: 5
        }
    }

    /// The byte `kinds` gives `kind` (its position).
    static func kindCode(_ kind: CustomFieldKind) -> UInt8 {
        switch kind {
        case .text: 0
        case .hidden: 1
        case .url: 2
        case .totp: 3
        }
    }

    /// Decodes an overview's plaintext.
    static func decode(_ record: UnsafeRawBufferPointer) throws(RecordFormatError) -> ItemOverview {
        var r = try RecordReader(record, kind: .overview)
        var item = Item(name: "", now: 0)
        var sawName = false, sawFlags = false
        var f: UInt8 = 0
        var history = 0
        while let (t, v) = try r.next(repeatable: repeatable) {
            switch t {
            case name: item.name = try RecordReader.text(v); sawName = true
            case type:
                guard v.count == 1, Int(v[0]) < types.count else { throw RecordFormatError(reason: "an unknown item type") }
                item.type = types[Int(v[0])]
            case username: item.username = try RecordReader.text(v)
            case url: item.urls.append(try RecordReader.text(v))
            case tag: item.tags.append(try RecordReader.text(v))
            case created: item.created = try RecordReader.int64(v)
            case modified: item.modified = try RecordReader.int64(v)
            case flags:
                guard v.count == 1 else { throw RecordFormatError(reason: "bad flags") }
                f = v[0]
                sawFlags = true
            case origin: item.origin = try RecordReader.text(v)
            case userPrompt: item.userPrompt = try RecordReader.text(v)
            case passwordPrompt: item.passwordPrompt = try RecordReader.text(v)
            case field:
                guard v.count >= 1, Int(v[0]) < kinds.count else { throw RecordFormatError(reason: "an unknown custom field kind") }
                let (n, value) = try RecordReader.named(v, skipping: 1)
                item.fields.append(CustomField(name: n, kind: kinds[Int(v[0])], value: try RecordReader.text(value)))
            case historyCount:
                guard v.count == 4 else { throw RecordFormatError(reason: "a bad history count") }
                history = Int(v[0]) << 24 | Int(v[1]) << 16 | Int(v[2]) << 8 | Int(v[3])
            default: throw RecordFormatError(reason: "unknown overview field \(t)")
            }
        }
        guard sawName, sawFlags else { throw RecordFormatError(reason: "an overview without a name or flags") }
        item.fingerprintLogin = f & fingerprintLogin != 0
        return ItemOverview(item: item, hasPassword: f & hasPassword != 0, hasTOTP: f & hasTOTP != 0,
                            hasNotes: f & hasNotes != 0, historyCount: history)
    }

    /// Checks an overview's plaintext as `decode` does, building nothing (a listing of names
    /// reads the name in place and refuses what `decode` refuses, with the same reasons).
    static func check(_ record: UnsafeRawBufferPointer) throws(RecordFormatError) {
        var r = try RecordReader(record, kind: .overview)
        var sawName = false, sawFlags = false
        while let (t, v) = try r.next(repeatable: repeatable) {
            switch t {
            case name: try RecordReader.checkText(v); sawName = true
            case type:
                guard v.count == 1, Int(v[0]) < types.count else { throw RecordFormatError(reason: "an unknown item type") }
            case username, url, tag, origin, userPrompt, passwordPrompt: try RecordReader.checkText(v)
            case created, modified:
                guard v.count == 8 else { throw RecordFormatError(reason: "a time of \(v.count) bytes") }
            case flags:
                guard v.count == 1 else { throw RecordFormatError(reason: "bad flags") }
                sawFlags = true
            case field:
                guard v.count >= 1, Int(v[0]) < kinds.count else { throw RecordFormatError(reason: "an unknown custom field kind") }
                try RecordReader.checkText(try RecordReader.named(v, skipping: 1).value)
            case historyCount:
                guard v.count == 4 else { throw RecordFormatError(reason: "a bad history count") }
            default: throw RecordFormatError(reason: "unknown overview field \(t)")
            }
        }
        guard sawName, sawFlags else { throw RecordFormatError(reason: "an overview without a name or flags") }
    }

    /// Whether an overview's plaintext (checked) has fingerprint login on: its flags, in place.
    static func fingerprintLoginIsOn(_ record: UnsafeRawBufferPointer) throws(RecordFormatError) -> Bool {
        var r = try RecordReader(record, kind: .overview)
        while let (t, v) = try r.next(repeatable: repeatable), t <= flags {
            if t == flags { return v.count == 1 && v[0] & fingerprintLogin != 0 }
        }
        return false
    }

    /// Only the name of an overview's plaintext (a rotation re-indexes names without decoding the rest).
    static func name(of record: UnsafeRawBufferPointer) throws(RecordFormatError) -> String {
        try RecordReader.text(try nameBytes(of: record))
    }

    /// The UTF-8 bytes of an overview's name, in place (its first field).
    static func nameBytes(of record: UnsafeRawBufferPointer) throws(RecordFormatError) -> UnsafeRawBufferPointer {
        var r = try RecordReader(record, kind: .overview)
        guard let (t, v) = try r.next(repeatable: repeatable), t == name else { throw RecordFormatError(reason: "an overview without a name") }
        return v
    }
}

/// The secrets record: tags and what they hold (docs/format.md, "Records").
enum SecretsRecord {
    static let password: UInt8 = 1, totp: UInt8 = 2, notes: UInt8 = 3, field: UInt8 = 4, history: UInt8 = 5
    static let repeatable: Set<UInt8> = [field, history]

    /// `item`'s secrets record, encoded (the caller wipes it once sealed).
    static func encode(_ item: Item) -> [UInt8] {
        var w = RecordWriter(kind: .secrets, capacity: 64)
        encode(item, into: &w)
        return w.bytes
    }

    /// `item`'s secrets record, encoded into `w` (restarted first, what it held zeroed; the
    /// caller zeroes it once sealed).
    static func encode(_ item: Item, into w: inout RecordWriter) {
        w.restart(kind: .secrets)
        w.field(password, item.password)
        w.field(totp, item.totp)
        w.field(notes, item.notes)
        for c in item.fields where c.kind.isSecret { w.field(field, prefix: nil, name: c.name, value: c.value) }
        for h in item.passwordHistory { w.field(history, replaced: h.replaced, password: h.password) }
    }

    /// Fills `item`'s secrets from a secrets record's plaintext (the values of secret custom fields
    /// the overview named; a value for a field the overview does not name refuses the record).
    static func decode(_ record: UnsafeRawBufferPointer, into item: inout Item) throws(RecordFormatError) {
        var r = try RecordReader(record, kind: .secrets)
        while let (t, v) = try r.next(repeatable: repeatable) {
            switch t {
            case password: item.password = try RecordReader.text(v)
            case totp: item.totp = try RecordReader.text(v)
            case notes: item.notes = try RecordReader.text(v)
            case field:
                let (n, value) = try RecordReader.named(v)
                guard let k = item.fields.firstIndex(where: { $0.name == n && $0.kind.isSecret }) else {
                    throw RecordFormatError(reason: "a secret for a field the overview does not have")
                }
                item.fields[k].value = try RecordReader.text(value)
            case history:
                guard v.count >= 8 else { throw RecordFormatError(reason: "a short history entry") }
                let when = try RecordReader.int64(UnsafeRawBufferPointer(rebasing: v[0..<8]))
                item.passwordHistory.append(PasswordChange(password: try RecordReader.text(UnsafeRawBufferPointer(rebasing: v[8...])), replaced: when))
            default: throw RecordFormatError(reason: "unknown secrets field \(t)")
            }
        }
    }

    /// The bytes of one field of a secrets record's plaintext, in place (nil when absent, or
    /// when `field` is no single value of the record): the password, the TOTP secret (for
    /// `totp`, `totp-uri`, `otp`), the notes, or a secret custom field.
    static func value(of field: ItemField, in record: UnsafeRawBufferPointer) throws(RecordFormatError) -> UnsafeRawBufferPointer? {
        var r = try RecordReader(record, kind: .secrets)
        let wanted: UInt8
        var customName: String?
        switch field.source {
        case .password: wanted = password
        case .totp: wanted = totp
        case .notes: wanted = notes
        case .custom(let name): wanted = self.field; customName = name
        default: return nil
        }
        while let (t, v) = try r.next(repeatable: repeatable) {
            guard t == wanted else { continue }
            guard let customName else { return v }
            let (n, value) = try RecordReader.named(v)
            if n == customName { return value }
        }
        return nil
    }
}

extension SecretsRecord {
    /// Whether a field of a secrets record is one of `fields` (their sources: `password`,
    /// `totp`, `notes`, `history`, `.custom(name)` for a secret custom field).
    static func isNamed(_ tag: UInt8, _ value: UnsafeRawBufferPointer, in fields: Set<ItemField>) throws(RecordFormatError) -> Bool {
        switch tag {
        case password: return fields.contains(.password)
        case totp: return fields.contains(.totp)
        case notes: return fields.contains(.notes)
        case history: return fields.contains(.history)
        case field: return fields.contains(.custom(try RecordReader.named(value).name))
        default: throw RecordFormatError(reason: "unknown secrets field \(tag)")
        }
    }

    /// A new secrets record holding only the fields of `record` named in `fields`, written into
    /// guarded memory (the values go from one guarded buffer to the other, never a String).
    static func keeping(_ fields: Set<ItemField>, of record: UnsafeRawBufferPointer) throws -> SecretOutput {
        var r = try RecordReader(record, kind: .secrets)
        let out = try SecretOutput(capacity: record.count)
        out.append(RecordWriter.version)
        out.append(RecordKind.secrets.rawValue)
        while let (t, v) = try r.next(repeatable: repeatable) {
            guard try isNamed(t, v, in: fields) else { continue }
            out.append(t)
            var n = UInt64(v.count)
            repeat {
                let low = UInt8(n & 0x7f)
                n >>= 7
                out.append(n == 0 ? low : low | 0x80)
            } while n != 0
            out.append(v)
        }
        return out
    }

    /// Checks a secrets record's plaintext without decoding it: its fields are in order and in
    /// bounds, every text is UTF-8, a history entry has its time, and every secret custom field
    /// is one the overview `item` names as secret (as `decode` requires).
    static func check(_ record: UnsafeRawBufferPointer, against item: Item) throws(RecordFormatError) {
        var r = try RecordReader(record, kind: .secrets)
        func utf8(_ v: UnsafeRawBufferPointer) throws(RecordFormatError) {
            guard RecordReader.isUTF8(v) else { throw RecordFormatError(reason: "text that is not UTF-8") }
        }
        while let (t, v) = try r.next(repeatable: repeatable) {
            switch t {
            case password, totp, notes: try utf8(v)
            case field:
                let (n, value) = try RecordReader.named(v)
                guard item.fields.contains(where: { $0.name == n && $0.kind.isSecret }) else {
                    throw RecordFormatError(reason: "a secret for a field the overview does not have")
                }
                try utf8(value)
            case history:
                guard v.count >= 8 else { throw RecordFormatError(reason: "a short history entry") }
                try utf8(UnsafeRawBufferPointer(rebasing: v[8...]))
            default: throw RecordFormatError(reason: "unknown secrets field \(t)")
            }
        }
    }
}

extension ItemOverview {
    /// Decodes an overview record's plaintext (as the agent's index and its listing pages carry).
    /// - Throws: `VaultError.corrupt` for a malformed record.
    public init(record: UnsafeRawBufferPointer) throws {
        do {
            self = try OverviewRecord.decode(record)
        } catch {
            throw VaultError.corrupt("an overview record is unreadable (\(error.reason))")
        }
    }

    /// The name of an overview record's plaintext, the whole record checked as `init(record:)`
    /// checks it but nothing else built (a listing of names).
    /// - Throws: `.corrupt`, as `init(record:)`, for a malformed record.
    public static func checkedName(ofRecord record: UnsafeRawBufferPointer) throws -> String {
        do {
            try OverviewRecord.check(record)
            return try OverviewRecord.name(of: record)
        } catch {
            throw VaultError.corrupt("an overview record is unreadable (\(error.reason))")
        }
    }

    /// Decodes an overview record held in an array.
    public init(record: [UInt8]) throws {
        self = try record.withUnsafeBytes { try ItemOverview(record: $0) }
    }

    /// The UTF-8 bytes of the item's name in an overview record, in place (empty for a malformed
    /// record). Names are NFC, so their byte order is the order of their strings: the agent's
    /// index sorts and searches on these without decoding.
    public static func nameBytes(ofRecord record: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        (try? OverviewRecord.nameBytes(of: record)) ?? UnsafeRawBufferPointer(rebasing: record[0..<0])
    }

    /// The item's name as an overview record holds it, without decoding the rest.
    public static func name(ofRecord record: UnsafeRawBufferPointer) throws -> String {
        do { return try OverviewRecord.name(of: record) } catch { throw VaultError.corrupt("an overview record is unreadable (\(error.reason))") }
    }

    /// This overview, encoded as its record (the plaintext the vault seals).
    public var record: [UInt8] { OverviewRecord.encode(item, flags: (hasPassword, hasTOTP, hasNotes), historyCount: historyCount) }
}

/// What `vault search TERM` matches: the term, case-insensitively, in an item's name, username,
/// URLs or tags (never in a secret: notes and passwords are in the secrets record). Matching reads
/// an overview record's text fields in place, so a search decodes only what it finds; the agent and
/// an in-process search use this one matcher.
public struct OverviewMatcher: Sendable {
    private let folded: [UInt8]
    private let unicodeTerm: String?
    /// The fields searched (name, username, URLs, tags), one bit per tag: no set made per record.
    private static let searched: UInt32 = 1 << UInt32(OverviewRecord.name) | 1 << UInt32(OverviewRecord.username)
        | 1 << UInt32(OverviewRecord.url) | 1 << UInt32(OverviewRecord.tag)

    /// A matcher for `term`.
    public init(term: String) {
        let lower = term.lowercased()
        if lower.utf8.allSatisfy({ $0 < 0x80 }) {
            folded = Array(lower.utf8)
            unicodeTerm = nil
        } else {
            folded = []
            unicodeTerm = lower
        }
    }

    /// Whether the overview record `record` matches (a malformed record does not).
    public func matches(_ record: UnsafeRawBufferPointer) -> Bool {
        guard var r = try? RecordReader(record, kind: .overview) else { return false }
        while let next = try? r.next(repeatable: OverviewRecord.repeatable), let (tag, value) = Optional(next) {
            guard tag < 32, Self.searched & 1 << UInt32(tag) != 0 else { continue }
            if let unicodeTerm {
                if String(decoding: value, as: UTF8.self).lowercased().contains(unicodeTerm) { return true }
            } else if Self.containsFolded(value, folded) {
                return true
            }
        }
        return false
    }

    /// Whether `overview` matches (the same rule, for overviews already decoded).
    public func matches(_ overview: ItemOverview) -> Bool {
        overview.record.withUnsafeBytes { matches($0) }
    }

    private static func containsFolded(_ hay: UnsafeRawBufferPointer, _ needle: [UInt8]) -> Bool {
        if needle.isEmpty { return true }
        guard hay.count >= needle.count else { return false }
        @inline(__always) func fold(_ b: UInt8) -> UInt8 { b >= 65 && b <= 90 ? b | 0x20 : b }
        let first = needle[0]
        for i in 0...(hay.count - needle.count) where fold(hay[i]) == first {
            var k = 1
            while k < needle.count, fold(hay[i + k]) == needle[k] { k += 1 }
            if k == needle.count { return true }
        }
        return false
    }
}
