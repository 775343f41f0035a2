/// Where an item's fields lie in its two opened records (docs/format.md, "Record encoding"),
/// found by one walk over each that also checks it as decoding would: export writes its JSON
/// from these offsets, with no `Item`, no `String` and no array built per item.

/// Where one field's value lies in a record: its offset and length; a `count` below zero means
/// the record has no such field.
struct FieldSpan {
    var start = 0
    var count = -1

    var isPresent: Bool { count >= 0 }
}

/// The fields of one repeatable tag (the format keeps them consecutive): where the first one's
/// tag byte is, where the last one's value ends, and how many there are.
struct FieldRun {
    var start = 0
    var end = 0
    var count = 0
}

/// Walks a record's fields by offset. The checked form refuses what `RecordReader` refuses, with
/// its reasons (a bad length, a field past the end, a tag out of order or repeated where the
/// format does not allow it); the unchecked form walks a run already checked.
struct RecordWalk {
    private let base: UnsafeRawPointer
    private let end: Int
    private(set) var offset: Int
    private var lastTag: UInt8 = 0
    /// One bit per repeatable tag (tags below 32).
    private let repeatable: UInt32

    /// A walk of `record`'s fields after its header, which is checked.
    init(_ record: UnsafeRawBufferPointer, kind: RecordKind, repeatable: UInt32) throws(RecordFormatError) {
        guard record.count >= 2, let base = record.baseAddress else { throw RecordFormatError(reason: "too short") }
        let version = base.load(as: UInt8.self), k = base.load(fromByteOffset: 1, as: UInt8.self)
        guard version == RecordWriter.version else { throw RecordFormatError(reason: "record version \(version)") }
        guard k == kind.rawValue else { throw RecordFormatError(reason: "a \(k) record where a \(kind.label) record belongs") }
        self.base = base
        end = record.count
        offset = 2
        self.repeatable = repeatable
    }

    /// A walk of the fields from `start` to `end` of `record` (a `FieldRun` checked before).
    init(unchecked record: UnsafeRawBufferPointer, from start: Int, to end: Int) {
        base = record.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!
        self.end = end
        offset = start
        repeatable = 0
    }

    /// The bit of `tag` in a `repeatable` mask.
    static func bit(_ tag: UInt8) -> UInt32 { tag < 32 ? 1 << UInt32(tag) : 0 }

    /// A LEB128 length at `at` (at most 5 bytes, inside `limit`): the length and the offset after it.
    @inline(__always)
    static func length(_ base: UnsafeRawPointer, at: Int, limit: Int) throws(RecordFormatError) -> (Int, Int) {
        var n = 0, shift = 0, i = at
        while true {
            guard i < limit, shift < 35 else { throw RecordFormatError(reason: "a bad length") }
            let b = base.load(fromByteOffset: i, as: UInt8.self)
            i += 1
            n |= Int(b & 0x7f) << shift
            if b & 0x80 == 0 { return (n, i) }
            shift += 7
        }
    }

    /// The next field (its tag, and where its value lies), nil at the end.
    mutating func next() throws(RecordFormatError) -> (tag: UInt8, value: FieldSpan)? {
        guard offset < end else { return nil }
        let tag = base.load(fromByteOffset: offset, as: UInt8.self)
        guard tag > lastTag || (tag == lastTag && repeatable & Self.bit(tag) != 0) else {
            throw RecordFormatError(reason: "field \(tag) out of order")
        }
        lastTag = tag
        let (n, start) = try Self.length(base, at: offset + 1, limit: end)
        guard n <= end - start else { throw RecordFormatError(reason: "field \(tag) runs past the record") }
        offset = start + n
        return (tag, FieldSpan(start: start, count: n))
    }

    /// The next field of a run checked before, nil at its end.
    mutating func nextUnchecked() -> (tag: UInt8, value: FieldSpan)? {
        guard offset < end else { return nil }
        let tag = base.load(fromByteOffset: offset, as: UInt8.self)
        let (n, i) = Self.lengthUnchecked(base, at: offset + 1)
        offset = i + n
        return (tag, FieldSpan(start: i, count: n))
    }

    /// The LEB128 length at `offset` of a run checked before, and where its bytes start.
    static func lengthUnchecked(_ base: UnsafeRawPointer, at offset: Int) -> (length: Int, start: Int) {
        var n = 0, shift = 0, i = offset
        while true {
            let b = base.load(fromByteOffset: i, as: UInt8.self)
            i += 1
            n |= Int(b & 0x7f) << shift
            if b & 0x80 == 0 { return (n, i) }
            shift += 7
        }
    }

    /// Splits a two-part field at `value` (`prefix` bytes, a LEB128-prefixed name, then the
    /// value), refusing what `RecordReader.named` refuses, the name's UTF-8 included.
    static func named(_ record: UnsafeRawBufferPointer, _ value: FieldSpan, skipping prefix: Int = 0) throws(RecordFormatError)
        -> (name: FieldSpan, value: FieldSpan) {
        guard value.count >= prefix, let base = record.baseAddress else { throw RecordFormatError(reason: "a short custom field") }
        let limit = value.start + value.count
        let (n, start) = try length(base, at: value.start + prefix, limit: limit)
        guard n <= limit - start else { throw RecordFormatError(reason: "a custom field name past its field") }
        let name = FieldSpan(start: start, count: n)
        try RecordReader.checkText(record.fieldBytes(name))
        return (name, FieldSpan(start: start + n, count: limit - start - n))
    }

    /// Splits a two-part field checked before.
    static func namedUnchecked(_ record: UnsafeRawBufferPointer, _ value: FieldSpan, skipping prefix: Int = 0) -> (name: FieldSpan, value: FieldSpan) {
        let (n, i) = lengthUnchecked(record.baseAddress!, at: value.start + prefix)
        return (FieldSpan(start: i, count: n), FieldSpan(start: i + n, count: value.start + value.count - i - n))
    }
}

extension UnsafeRawBufferPointer {
    /// The bytes of `span` (present) in this record.
    func fieldBytes(_ span: FieldSpan) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: baseAddress.map { $0 + span.start }, count: span.count)
    }

    /// The big-endian Int64 at `span` (8 bytes, checked before).
    func int64(at start: Int) -> Int64 {
        Int64(bitPattern: UInt64(bigEndian: loadUnaligned(fromByteOffset: start, as: UInt64.self)))
    }
}

/// Where an overview record's fields lie, found by one walk that checks the record as
/// `OverviewRecord.check` (and so `decode`) does, refusing the same records with the same reasons.
struct OverviewLayout {
    var name = FieldSpan()
    /// The type's index in `OverviewRecord.types` (0, a login, when the record has none).
    var type: UInt8 = 0
    var username = FieldSpan()
    var urls = FieldRun()
    var tags = FieldRun()
    var created: Int64 = 0
    var modified: Int64 = 0
    var flags: UInt8 = 0
    var origin = FieldSpan()
    var userPrompt = FieldSpan()
    var passwordPrompt = FieldSpan()
    var fields = FieldRun()
    /// Whether some custom field is secret (hidden or TOTP): only then may the secrets record
    /// hold custom field values.
    var secretFields = 0

    static let repeatable = RecordWalk.bit(OverviewRecord.url) | RecordWalk.bit(OverviewRecord.tag) | RecordWalk.bit(OverviewRecord.field)

    /// The layout of `record`, checked.
    /// - Throws: `RecordFormatError` for a record `OverviewRecord.check` refuses.
    init(checking record: UnsafeRawBufferPointer) throws(RecordFormatError) {
        var walk = try RecordWalk(record, kind: .overview, repeatable: Self.repeatable)
        var sawFlags = false
        func run(_ r: inout FieldRun, _ v: FieldSpan, tagAt: Int) {
            if r.count == 0 { r.start = tagAt }
            r.end = v.start + v.count
            r.count += 1
        }
        func text(_ v: FieldSpan) throws(RecordFormatError) { try RecordReader.checkText(record.fieldBytes(v)) }
        var tagAt = walk.offset
        while let (t, v) = try walk.next() {
            switch t {
            case OverviewRecord.name: try text(v); name = v
            case OverviewRecord.type:
                guard v.count == 1, Int(record[v.start]) < OverviewRecord.types.count else { throw RecordFormatError(reason: "an unknown item type") }
                type = record[v.start]
            case OverviewRecord.username: try text(v); username = v
            case OverviewRecord.url: try text(v); run(&urls, v, tagAt: tagAt)
            case OverviewRecord.tag: try text(v); run(&tags, v, tagAt: tagAt)
            case OverviewRecord.origin: try text(v); origin = v
            case OverviewRecord.userPrompt: try text(v); userPrompt = v
            case OverviewRecord.passwordPrompt: try text(v); passwordPrompt = v
            case OverviewRecord.created, OverviewRecord.modified:
                guard v.count == 8 else { throw RecordFormatError(reason: "a time of \(v.count) bytes") }
                if t == OverviewRecord.created { created = record.int64(at: v.start) } else { modified = record.int64(at: v.start) }
            case OverviewRecord.flags:
                guard v.count == 1 else { throw RecordFormatError(reason: "bad flags") }
                flags = record[v.start]
                sawFlags = true
            case OverviewRecord.field:
                guard v.count >= 1, Int(record[v.start]) < OverviewRecord.kinds.count else {
                    throw RecordFormatError(reason: "an unknown custom field kind")
                }
                try text(try RecordWalk.named(record, v, skipping: 1).value)
                if OverviewRecord.kinds[Int(record[v.start])].isSecret { secretFields += 1 }
                run(&fields, v, tagAt: tagAt)
            case OverviewRecord.historyCount:
                guard v.count == 4 else { throw RecordFormatError(reason: "a bad history count") }
            default: throw RecordFormatError(reason: "unknown overview field \(t)")
            }
            tagAt = walk.offset
        }
        guard name.isPresent, sawFlags else { throw RecordFormatError(reason: "an overview without a name or flags") }
    }

    /// Whether the item has fingerprint login on.
    var fingerprintLogin: Bool { flags & OverviewRecord.fingerprintLogin != 0 }
}

/// Where a secrets record's fields lie, found by one walk that checks the record against its
/// overview as `SecretsRecord.check` does.
struct SecretsLayout {
    var password = FieldSpan()
    var totp = FieldSpan()
    var notes = FieldSpan()
    var fields = FieldRun()
    var history = FieldRun()

    static let repeatable = RecordWalk.bit(SecretsRecord.field) | RecordWalk.bit(SecretsRecord.history)

    /// The layout of `record`, checked against `overview` (laid out as `layout`): every secret
    /// custom field value must belong to a hidden or TOTP field the overview names.
    /// - Throws: `RecordFormatError` for a record `SecretsRecord.check` refuses.
    init(checking record: UnsafeRawBufferPointer, against overview: UnsafeRawBufferPointer, _ layout: OverviewLayout) throws(RecordFormatError) {
        var walk = try RecordWalk(record, kind: .secrets, repeatable: Self.repeatable)
        func utf8(_ v: FieldSpan) throws(RecordFormatError) {
            guard RecordReader.isUTF8(record.fieldBytes(v)) else { throw RecordFormatError(reason: "text that is not UTF-8") }
        }
        var tagAt = walk.offset
        while let (t, v) = try walk.next() {
            switch t {
            case SecretsRecord.password: try utf8(v); password = v
            case SecretsRecord.totp: try utf8(v); totp = v
            case SecretsRecord.notes: try utf8(v); notes = v
            case SecretsRecord.field:
                let (n, value) = try RecordWalk.named(record, v)
                guard layout.secretFields > 0, layout.secretField(named: record.fieldBytes(n), in: overview) != nil else {
                    throw RecordFormatError(reason: "a secret for a field the overview does not have")
                }
                try utf8(value)
                if fields.count == 0 { fields.start = tagAt }
                fields.end = v.start + v.count
                fields.count += 1
            case SecretsRecord.history:
                guard v.count >= 8 else { throw RecordFormatError(reason: "a short history entry") }
                try utf8(FieldSpan(start: v.start + 8, count: v.count - 8))
                if history.count == 0 { history.start = tagAt }
                history.end = v.start + v.count
                history.count += 1
            default: throw RecordFormatError(reason: "unknown secrets field \(t)")
            }
            tagAt = walk.offset
        }
    }

    /// The value of the first secret custom field value whose name is `name` (as `String`s
    /// compare), nil when the record has none.
    func value(named name: UnsafeRawBufferPointer, in record: UnsafeRawBufferPointer) -> FieldSpan? {
        guard fields.count > 0 else { return nil }
        var walk = RecordWalk(unchecked: record, from: fields.start, to: fields.end)
        while let (_, v) = walk.nextUnchecked() {
            let (n, value) = RecordWalk.namedUnchecked(record, v)
            if sameName(record.fieldBytes(n), name) { return value }
        }
        return nil
    }
}

extension OverviewLayout {
    /// The first hidden or TOTP custom field of the overview `record` whose name is `name` (as
    /// `String`s compare), nil when none.
    func secretField(named name: UnsafeRawBufferPointer, in record: UnsafeRawBufferPointer) -> FieldSpan? {
        guard fields.count > 0 else { return nil }
        var walk = RecordWalk(unchecked: record, from: fields.start, to: fields.end)
        while let (_, v) = walk.nextUnchecked() {
            guard OverviewRecord.kinds[Int(record[v.start])].isSecret else { continue }
            if sameName(record.fieldBytes(RecordWalk.namedUnchecked(record, v, skipping: 1).name), name) { return v }
        }
        return nil
    }
}

/// Whether two names (valid UTF-8) are equal as `String`s are: the same bytes, or, when either
/// is not ASCII, canonically equivalent (what the decoded `Item`'s names compared, which
/// `SecretsRecord.check` and `value(of:)` use; an ASCII name has no other form).
func sameName(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    if a.count == b.count, a.elementsEqual(b) { return true }
    func ascii(_ s: UnsafeRawBufferPointer) -> Bool { !s.contains { $0 >= 0x80 } }
    if ascii(a) && ascii(b) { return false }
    return String(decoding: a, as: UTF8.self) == String(decoding: b, as: UTF8.self)
}
