import VaultKit

/// The keys of one item object of vault's JSON (`VaultJSON.keys`), as the reader of an element
/// finds them: by their bytes, with no String per key.
enum ItemKey: Int, CaseIterable {
    case name, username, password, url, urls, notes, tags, totp, origin, created, modified
    case fingerprintLogin, userPrompt, passwordPrompt, type, fields, passwordHistory

    /// How many keys there are (`allCases.count`, without building the list).
    static let count = 17

    /// The key as the JSON spells it.
    var text: StaticString {
        switch self {
        case .name: "name"
        case .username: "username"
        case .password: "password"
        case .url: "url"
        case .urls: "urls"
        case .notes: "notes"
        case .tags: "tags"
        case .totp: "totp"
        case .origin: "origin"
        case .created: "created"
        case .modified: "modified"
        case .fingerprintLogin: "fingerprint_login"
        case .userPrompt: "user_prompt"
        case .passwordPrompt: "password_prompt"
        case .type: "type"
        case .fields: "fields"
        case .passwordHistory: "password_history"
        }
    }

    /// The key whose spelling is `b` (unescaped), or nil: compared byte by byte against the few
    /// keys of that length. Every key is ASCII, and no other string is canonically equivalent to
    /// one (the only non-ASCII scalars that decompose to ASCII are U+212A KELVIN SIGN, U+037E and
    /// U+1FEF, to `K`, `;` and `` ` ``, none in a key), so this finds what `String ==` would.
    static func find(_ b: UnsafeBufferPointer<UInt8>) -> ItemKey? {
        switch b.count {
        case 3: return Self.url.matches(b) ? Self.url : nil
        case 4:
            guard b[0] == 0x74 else { return Self.name.matches(b) ? Self.name : Self.urls.matches(b) ? Self.urls : nil }
            return Self.tags.matches(b) ? Self.tags : Self.totp.matches(b) ? Self.totp : Self.type.matches(b) ? Self.type : nil
        case 5: return Self.notes.matches(b) ? Self.notes : nil
        case 6: return Self.origin.matches(b) ? Self.origin : Self.fields.matches(b) ? Self.fields : nil
        case 7: return Self.created.matches(b) ? Self.created : nil
        case 8: return Self.username.matches(b) ? Self.username : Self.password.matches(b) ? Self.password : Self.modified.matches(b) ? Self.modified : nil
        case 11: return Self.userPrompt.matches(b) ? Self.userPrompt : nil
        case 15: return Self.passwordPrompt.matches(b) ? Self.passwordPrompt : nil
        case 16: return Self.passwordHistory.matches(b) ? Self.passwordHistory : nil
        case 17: return Self.fingerprintLogin.matches(b) ? Self.fingerprintLogin : nil
        default: return nil
        }
    }

    private func matches(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        let t = text
        guard t.utf8CodeUnitCount == b.count else { return false }
        let p = t.utf8Start
        var k = 0
        while k < b.count {
            guard p[k] == b[k] else { return false }
            k += 1
        }
        return true
    }
}

/// One member's value as the element reader keeps it: strings decoded, a list of strings as
/// `[String]`, a number checked against the grammar and read as `JSONValue.int64` reads one,
/// anything else (an object, a list that is not all strings, the lists of objects) as the
/// `JSONValue` the strict parser makes of it.
enum ItemMember {
    case absent
    case null
    case string(String)
    case strings([String])
    case bool(Bool)
    /// The number as a 64-bit integer, nil when it has a fraction or an exponent or does not fit.
    case number(Int64?)
    case value(JSONValue)
}

/// One item object of vault's JSON read in place, in one pass with `JSONValue.Reader` (the
/// grammar `JSONValue.parse` reads, strictly): what `parse` refuses is refused (bad UTF-8, a lone
/// surrogate escape, a key given twice, text after the object, nesting over the bound), and
/// what it accepts gives the values `parse` gives, each known key's in its slot. No tree is built
/// but for the lists of objects (`fields`, `password_history`) and values of a wrong type.
struct ItemMembers {
    private var slots = [ItemMember](repeating: .absent, count: ItemKey.count)
    /// The keys that are not item keys, in the order met.
    private(set) var unknown: [String] = []

    subscript(key: ItemKey) -> ItemMember { slots[key.rawValue] }

    /// Reads `element`, which must be one JSON object and nothing else but white space.
    /// - Throws: `JSONValue.Malformed` where `JSONValue.parse` would refuse it, or when it is
    ///   another value than an object.
    init(_ element: UnsafeBufferPointer<UInt8>) throws(JSONValue.Malformed) {
        var r = JSONValue.Reader(element)
        r.skipSpace()
        guard r.i < r.b.count, r.b[r.i] == 0x7B else { throw r.fail("not an object") }
        r.i += 1
        r.skipSpace()
        if r.i < r.b.count, r.b[r.i] == 0x7D {
            r.i += 1
        } else {
            var seen: UInt32 = 0
            while true {
                r.skipSpace()
                guard r.i < r.b.count, r.b[r.i] == 0x22 else { throw r.fail("an object key must be a string") }
                let key = try Self.key(&r)
                switch key {
                case .known(let k):
                    guard seen & (1 << k.rawValue) == 0 else { throw r.fail("a key appears twice") }
                    seen |= 1 << k.rawValue
                case .other(let s):
                    guard !unknown.contains(s) else { throw r.fail("a key appears twice") }
                    unknown.append(s)
                }
                r.skipSpace()
                guard r.i < r.b.count, r.b[r.i] == 0x3A else { throw r.fail("':' expected after a key") }
                r.i += 1
                r.skipSpace()
                switch key {
                case .known(let k): slots[k.rawValue] = try Self.member(&r, strings: k == .urls || k == .tags)
                case .other: _ = try r.value(depth: 1)
                }
                r.skipSpace()
                guard r.i < r.b.count else { throw r.fail("the object is not closed") }
                if r.b[r.i] == 0x2C {
                    r.i += 1
                    continue
                }
                guard r.b[r.i] == 0x7D else { throw r.fail("',' or '}' expected") }
                r.i += 1
                break
            }
        }
        r.skipSpace()
        guard r.i == r.b.count else { throw r.fail("text after the value") }
    }

    private enum Key {
        case known(ItemKey)
        case other(String)
    }

    /// The key at `r.i` (its opening quote): an item key found by its bytes when it has no
    /// escape, else unescaped first.
    private static func key(_ r: inout JSONValue.Reader) throws(JSONValue.Malformed) -> Key {
        let at = r.i
        if let plain = r.plainString() {
            let bytes = UnsafeBufferPointer(rebasing: r.b[plain])
            if let k = ItemKey.find(bytes) { return .known(k) }
            guard let s = String(validating: bytes, as: UTF8.self) else { throw r.fail("a string is not valid UTF-8") }
            return .other(s)
        }
        r.i = at
        let s = try r.string()
        var text = s
        let known = text.withUTF8 { ItemKey.find($0) }
        return known.map { .known($0) } ?? .other(s)
    }

    /// The value at `r.i` (a member's, inside the element's object). With `strings`, a list of
    /// strings only is read as `[String]`; any other list is read again as a `JSONValue`.
    private static func member(_ r: inout JSONValue.Reader, strings: Bool) throws(JSONValue.Malformed) -> ItemMember {
        guard r.i < r.b.count else { throw r.fail("a value is missing") }
        switch r.b[r.i] {
        case 0x22: return .string(try r.string())
        case 0x74 where r.take("true"): return .bool(true)
        case 0x66 where r.take("false"): return .bool(false)
        case 0x6E where r.take("null"): return .null
        case 0x2D, 0x30...0x39:
            let text = try r.numberText()
            return .number(int64(UnsafeBufferPointer(rebasing: r.b[text])))
        case 0x5B where strings:
            let start = r.i
            if let list = try stringList(&r) { return .strings(list) }
            r.i = start
            return .value(try r.value(depth: 1))
        default:
            return .value(try r.value(depth: 1))
        }
    }

    /// The list at `r.i` when every element is a string; nil at the first element that is not
    /// one (the caller reads the list again).
    private static func stringList(_ r: inout JSONValue.Reader) throws(JSONValue.Malformed) -> [String]? {
        r.i += 1
        r.skipSpace()
        var out: [String] = []
        if r.i < r.b.count, r.b[r.i] == 0x5D {
            r.i += 1
            return out
        }
        while true {
            r.skipSpace()
            guard r.i < r.b.count, r.b[r.i] == 0x22 else { return nil }
            out.append(try r.string())
            r.skipSpace()
            guard r.i < r.b.count else { throw r.fail("the array is not closed") }
            if r.b[r.i] == 0x2C {
                r.i += 1
                continue
            }
            guard r.b[r.i] == 0x5D else { throw r.fail("',' or ']' expected") }
            r.i += 1
            return out
        }
    }

    /// A number's text (checked against the grammar) as `Int64(String)` reads it: digits after
    /// an optional minus, nil for a fraction, an exponent or a value that does not fit.
    static func int64(_ t: UnsafeBufferPointer<UInt8>) -> Int64? {
        var k = 0
        let negative = t.first == 0x2D
        if negative { k = 1 }
        guard k < t.count else { return nil }
        var v: Int64 = 0
        while k < t.count {
            let c = t[k]
            guard c >= 0x30, c <= 0x39 else { return nil }
            let d = Int64(c - 0x30)
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) = negative ? m.subtractingReportingOverflow(d) : m.addingReportingOverflow(d)
            if o1 || o2 { return nil }
            v = a
            k += 1
        }
        return v
    }
}
