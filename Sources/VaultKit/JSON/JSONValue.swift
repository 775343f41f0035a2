import VaultSystem

/// One JSON value (RFC 8259) read strictly from bytes: what `vault import` reads each element of
/// vault's own JSON with. It replaces a JSONSerialization pass (for the keys) followed by a
/// JSONDecoder pass (for the types) over every element: one pass over the bytes, no Foundation
/// bridging, about five times faster at 100,000 items. Objects keep their keys in order and a key
/// given twice is refused; numbers keep their text, read as integers on demand.
package indirect enum JSONValue: Equatable, Sendable {
    case string(String)
    /// The number's text, checked against the JSON grammar.
    case number(String)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    package static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)), (.number(let x), .number(let y)): x == y
        case (.bool(let x), .bool(let y)): x == y
        case (.null, .null): true
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// Why the bytes are not one JSON value, with the byte offset.
    package struct Malformed: Error, Equatable, Sendable {
        /// Counted from the start of the bytes read.
        package let offset: Int
        /// What is wrong.
        package let reason: String
    }

    /// Arrays and objects nested deeper than this are refused: `JSONDepth`'s bound, the one every
    /// reader of vault's keeps.
    package static let depthLimit = JSONDepth.limit

    /// The one value `bytes` holds (white space around it allowed, nothing else).
    /// - Throws: `Malformed` at the first byte that breaks the grammar, a string that is not UTF-8,
    ///   a lone surrogate escape, a key given twice, or nesting over `depthLimit`.
    ///   `lenient` reads another manager's export as Foundation's `JSONSerialization` did: a key
    ///   given twice is kept (`plainObject` takes the last value), a comma may end an array or
    ///   an object.
    package static func parse(_ bytes: ArraySlice<UInt8>, lenient: Bool = false) throws(Malformed) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (b: UnsafeBufferPointer<UInt8>) throws(Malformed) -> JSONValue in
            try parse(b, lenient: lenient)
        }
    }

    /// The one value `b` holds, as `parse(_:lenient:)` reads it: for bytes lent from guarded
    /// memory (an opened record), read where they are.
    package static func parse(_ b: UnsafeBufferPointer<UInt8>, lenient: Bool = false) throws(Malformed) -> JSONValue {
        var reader = Reader(b: b, i: 0, lenient: lenient)
        reader.skipSpace()
        let value = try reader.value(depth: 0)
        reader.skipSpace()
        guard reader.i == b.count else { throw reader.fail("text after the value") }
        return value
    }

    /// The member `key` of an object (nil for any other value, or when absent).
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// The number as a 64-bit integer: nil when it has a fraction or an exponent, or does not fit.
    package var int64: Int64? {
        guard case .number(let text) = self else { return nil }
        return Int64(text)
    }

    /// The strict reader `parse` runs, lent to readers that decode a value in place (vault
    /// JSON's items): the same grammar, so what they accept is what `parse` accepts.
    package struct Reader {
        package let b: UnsafeBufferPointer<UInt8>
        /// The next byte to read.
        package var i: Int
        var lenient = false

        init(b: UnsafeBufferPointer<UInt8>, i: Int, lenient: Bool) {
            self.b = b
            self.i = i
            self.lenient = lenient
        }

        /// A strict reader of `b` from its first byte.
        package init(_ b: UnsafeBufferPointer<UInt8>) {
            self.init(b: b, i: 0, lenient: false)
        }

        package func fail(_ reason: String) -> Malformed { Malformed(offset: i, reason: reason) }

        package mutating func skipSpace() {
            guard let p = b.baseAddress else { return }
            let n = b.count
            while i < n, p[i] == 0x20 || p[i] == 0x0A || p[i] == 0x0D || p[i] == 0x09 { i += 1 }
        }

        /// The index of the first byte from `from` that ends a string's plain run: a quote, a
        /// backslash or a control character (`b.count` when none). Written over the base pointer
        /// (no bounds check or helper call per byte: a debug build runs this over every string).
        func plainEnd(from: Int) -> Int {
            guard let p = b.baseAddress else { return from }
            let n = b.count
            var j = from
            while j < n {
                let c = p[j]
                if c == 0x22 || c == 0x5C || c < 0x20 { break }
                j += 1
            }
            return j
        }

        mutating func literal(_ word: StaticString, _ value: JSONValue) throws(Malformed) -> JSONValue {
            let n = word.utf8CodeUnitCount
            guard i + n <= b.count, (0..<n).allSatisfy({ b[i + $0] == word.utf8Start[$0] }) else { throw fail("not a JSON value") }
            i += n
            return value
        }

        /// The value at `i`, `depth` the containers it is inside.
        package mutating func value(depth: Int) throws(Malformed) -> JSONValue {
            guard i < b.count else { throw fail("a value is missing") }
            switch b[i] {
            case 0x22: return .string(try string())
            case 0x7B: return try object(depth: depth + 1)
            case 0x5B: return try array(depth: depth + 1)
            case 0x74: return try literal("true", .bool(true))
            case 0x66: return try literal("false", .bool(false))
            case 0x6E: return try literal("null", .null)
            case 0x2D, 0x30...0x39: return try number()
            default: throw fail("not a JSON value")
            }
        }

        mutating func object(depth: Int) throws(Malformed) -> JSONValue {
            guard depth <= JSONValue.depthLimit else { throw fail("nested too deeply") }
            i += 1
            var members: [(key: String, value: JSONValue)] = []
            skipSpace()
            if i < b.count, b[i] == 0x7D { i += 1; return .object(members) }
            while true {
                skipSpace()
                if lenient, i < b.count, b[i] == 0x7D, !members.isEmpty { i += 1; return .object(members) }
                guard i < b.count, b[i] == 0x22 else { throw fail("an object key must be a string") }
                let at = i
                let key = try string()
                if !lenient, members.contains(where: { $0.key == key }) { throw Malformed(offset: at, reason: "the key '\(key)' appears twice") }
                skipSpace()
                guard i < b.count, b[i] == 0x3A else { throw fail("':' expected after a key") }
                i += 1
                skipSpace()
                members.append((key, try value(depth: depth)))
                skipSpace()
                guard i < b.count else { throw fail("the object is not closed") }
                if b[i] == 0x2C { i += 1; continue }
                guard b[i] == 0x7D else { throw fail("',' or '}' expected") }
                i += 1
                return .object(members)
            }
        }

        mutating func array(depth: Int) throws(Malformed) -> JSONValue {
            guard depth <= JSONValue.depthLimit else { throw fail("nested too deeply") }
            i += 1
            var elements: [JSONValue] = []
            skipSpace()
            if i < b.count, b[i] == 0x5D { i += 1; return .array(elements) }
            while true {
                skipSpace()
                if lenient, i < b.count, b[i] == 0x5D, !elements.isEmpty { i += 1; return .array(elements) }
                elements.append(try value(depth: depth))
                skipSpace()
                guard i < b.count else { throw fail("the array is not closed") }
                if b[i] == 0x2C { i += 1; continue }
                guard b[i] == 0x5D else { throw fail("',' or ']' expected") }
                i += 1
                return .array(elements)
            }
        }

        mutating func number() throws(Malformed) -> JSONValue {
            let text = try numberText()
            return .number(String(decoding: UnsafeBufferPointer(rebasing: b[text]), as: UTF8.self))
        }

        /// Whether `word` (`true`, `false`, `null`) is at `i`; `i` then past it.
        package mutating func take(_ word: StaticString) -> Bool {
            let n = word.utf8CodeUnitCount
            guard i + n <= b.count, (0..<n).allSatisfy({ b[i + $0] == word.utf8Start[$0] }) else { return false }
            i += n
            return true
        }

        /// Where the number at `i` lies, checked against the grammar; `i` ends past it.
        package mutating func numberText() throws(Malformed) -> Range<Int> {
            let start = i
            func digits(_ r: inout Reader) -> Int {
                let s = r.i
                while r.i < r.b.count, (0x30...0x39).contains(r.b[r.i]) { r.i += 1 }
                return r.i - s
            }
            if b[i] == 0x2D { i += 1 }
            guard i < b.count, (0x30...0x39).contains(b[i]) else { throw fail("a number needs a digit") }
            if b[i] == 0x30 { i += 1 } else { _ = digits(&self) }
            if i < b.count, b[i] == 0x2E {
                i += 1
                guard digits(&self) > 0 else { throw fail("a digit must follow '.'") }
            }
            if i < b.count, b[i] == 0x65 || b[i] == 0x45 {
                i += 1
                if i < b.count, b[i] == 0x2B || b[i] == 0x2D { i += 1 }
                guard digits(&self) > 0 else { throw fail("a digit must follow the exponent") }
            }
            return start..<i
        }

        /// The bytes of the string at `i` (its opening quote) when it holds no escape and no
        /// control character, not checked as UTF-8 (the caller checks them, or calls `string`):
        /// `i` then past its closing quote. Else nil, `i` unmoved.
        package mutating func plainString() -> Range<Int>? {
            let j = plainEnd(from: i + 1)
            guard j < b.count, b[j] == 0x22 else { return nil }
            defer { i = j + 1 }
            return (i + 1)..<j
        }

        /// A string at `i` (its opening quote), unescaped; `i` ends past the closing quote.
        package mutating func string() throws(Malformed) -> String {
            i += 1
            let start = i
            // Most strings have no escape: checked as UTF-8 in place.
            i = plainEnd(from: i)
            guard i < b.count else { throw fail("the string is not closed") }
            if b[i] == 0x22 {
                defer { i += 1 }
                guard let s = String(validating: UnsafeBufferPointer(rebasing: b[start..<i]), as: UTF8.self) else {
                    throw Malformed(offset: start, reason: "a string is not valid UTF-8")
                }
                return s
            }
            var out = Array(b[start..<i])
            defer { wipe(&out) }
            while true {
                guard i < b.count else { throw fail("the string is not closed") }
                let c = b[i]
                if c == 0x22 { i += 1; break }
                guard c >= 0x20 else { throw fail("a control character must be escaped in a string") }
                guard c == 0x5C else { out.append(c); i += 1; continue }
                i += 1
                guard i < b.count else { throw fail("the string is not closed") }
                let e = b[i]
                i += 1
                switch e {
                case 0x22, 0x5C, 0x2F: out.append(e)
                case 0x62: out.append(0x08)
                case 0x66: out.append(0x0C)
                case 0x6E: out.append(0x0A)
                case 0x72: out.append(0x0D)
                case 0x74: out.append(0x09)
                case 0x75:
                    var scalar = try hex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        guard i + 1 < b.count, b[i] == 0x5C, b[i + 1] == 0x75 else { throw fail("a lone surrogate escape") }
                        i += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("a lone surrogate escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        throw fail("a lone surrogate escape")
                    }
                    out.append(contentsOf: String(Character(Unicode.Scalar(scalar)!)).utf8)
                default: throw fail("an unknown escape (the byte is not repeated: a string may be a secret)")
                }
            }
            guard let s = String(validating: out, as: UTF8.self) else { throw Malformed(offset: start, reason: "a string is not valid UTF-8") }
            return s
        }

        mutating func hex4() throws(Malformed) -> UInt32 {
            guard i + 4 <= b.count else { throw fail("\\u needs four hex digits") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = b[i]
                let d: UInt8
                switch c {
                case 0x30...0x39: d = c - 0x30
                case 0x41...0x46: d = c - 0x41 + 10
                case 0x61...0x66: d = c - 0x61 + 10
                default: throw fail("\\u needs four hex digits")
                }
                v = v << 4 | UInt32(d)
                i += 1
            }
            return v
        }
    }
}
