import VaultKit
import FoundationEssentials

/// Finds the elements of a JSON array, or the members of a JSON object, as byte ranges without
/// decoding them, so an import decodes one item at a time instead of holding the whole document
/// decoded next to its text (100,000 items stay one copy of the text plus the items).
public enum JSONScan {
    /// What a scan found wrong, with the byte offset.
    public struct Malformed: Error, Sendable {
        /// Where, counted in bytes from the start.
        public let offset: Int
        /// What is wrong.
        public let reason: String
    }

    /// Index past the white space at `i`.
    static func skipSpace(_ b: [UInt8], _ i: Int, _ end: Int) -> Int {
        var i = i
        while i < end, b[i] == 0x20 || b[i] == 0x0A || b[i] == 0x0D || b[i] == 0x09 { i += 1 }
        return i
    }

    /// The end (exclusive) of the JSON value starting at `i`: strings, brackets and scalars are
    /// walked, not checked (the decoder of each element checks it).
    static func valueEnd(_ b: [UInt8], _ i: Int, _ end: Int) throws(Malformed) -> Int {
        guard i < end else { throw Malformed(offset: i, reason: "a value is missing") }
        var depth = 0, j = i, inString = false, escaped = false
        while j < end {
            let c = b[j]
            if inString {
                if escaped { escaped = false } else if c == 0x5C { escaped = true } else if c == 0x22 {
                    inString = false
                    if depth == 0 { return j + 1 }
                }
            } else {
                switch c {
                case 0x22: inString = true
                case 0x5B, 0x7B: depth += 1
                case 0x5D, 0x7D:
                    if depth == 0 { return j }
                    depth -= 1
                    if depth == 0 { return j + 1 }
                case 0x2C, 0x3A, 0x20, 0x0A, 0x0D, 0x09: if depth == 0 { return j }
                default: break
                }
            }
            j += 1
        }
        if inString || depth > 0 { throw Malformed(offset: i, reason: "the document ends inside a value") }
        return j
    }

    /// The elements of the array that `bytes[range]` holds.
    public static func elements(_ b: [UInt8], in range: Range<Int>? = nil) throws(Malformed) -> [Range<Int>] {
        let r = range ?? 0..<b.count
        var i = skipSpace(b, r.lowerBound, r.upperBound)
        guard i < r.upperBound, b[i] == 0x5B else { throw Malformed(offset: i, reason: "not a JSON array") }
        i = skipSpace(b, i + 1, r.upperBound)
        var out: [Range<Int>] = []
        if i < r.upperBound, b[i] == 0x5D { return try finish(b, i + 1, r.upperBound, out) }
        while true {
            let e = try valueEnd(b, i, r.upperBound)
            guard e > i else { throw Malformed(offset: i, reason: "an element is missing") }
            out.append(i..<e)
            i = skipSpace(b, e, r.upperBound)
            guard i < r.upperBound else { throw Malformed(offset: i, reason: "the array is not closed") }
            if b[i] == 0x5D { return try finish(b, i + 1, r.upperBound, out) }
            guard b[i] == 0x2C else { throw Malformed(offset: i, reason: "expected ',' or ']'") }
            i = skipSpace(b, i + 1, r.upperBound)
        }
    }

    /// The members (key, value range) of the object that `bytes[range]` holds.
    public static func members(_ b: [UInt8], in range: Range<Int>? = nil) throws(Malformed) -> [(key: String, value: Range<Int>)] {
        let r = range ?? 0..<b.count
        var i = skipSpace(b, r.lowerBound, r.upperBound)
        guard i < r.upperBound, b[i] == 0x7B else { throw Malformed(offset: i, reason: "not a JSON object") }
        i = skipSpace(b, i + 1, r.upperBound)
        var out: [(key: String, value: Range<Int>)] = []
        if i < r.upperBound, b[i] == 0x7D { return try finish(b, i + 1, r.upperBound, out) }
        while true {
            guard i < r.upperBound, b[i] == 0x22 else { throw Malformed(offset: i, reason: "expected a key") }
            let keyEnd = try valueEnd(b, i, r.upperBound)
            guard let key = try? JSONDecoder().decode(String.self, from: Data(b[i..<keyEnd])) else { throw Malformed(offset: i, reason: "a key is not a string") }
            i = skipSpace(b, keyEnd, r.upperBound)
            guard i < r.upperBound, b[i] == 0x3A else { throw Malformed(offset: i, reason: "expected ':'") }
            i = skipSpace(b, i + 1, r.upperBound)
            let e = try valueEnd(b, i, r.upperBound)
            out.append((key, i..<e))
            i = skipSpace(b, e, r.upperBound)
            guard i < r.upperBound else { throw Malformed(offset: i, reason: "the object is not closed") }
            if b[i] == 0x7D { return try finish(b, i + 1, r.upperBound, out) }
            guard b[i] == 0x2C else { throw Malformed(offset: i, reason: "expected ',' or '}'") }
            i = skipSpace(b, i + 1, r.upperBound)
        }
    }

    private static func finish<T>(_ b: [UInt8], _ i: Int, _ end: Int, _ out: T) throws(Malformed) -> T {
        let j = skipSpace(b, i, end)
        guard j == end else { throw Malformed(offset: j, reason: "text follows the document") }
        return out
    }
}

extension JSONScan {
    /// The line (from 1) of byte `offset`.
    public static func line(of offset: Int, in b: [UInt8]) -> Int {
        var n = 1
        for k in 0..<min(offset, b.count) where b[k] == 0x0A { n += 1 }
        return n
    }
}

/// The elements of a JSON array read from a stream in chunks (vault's own export from a file or
/// a pipe): each element is handed out as soon as it is complete and its bytes are then dropped,
/// so an import of 100,000 items never holds the document's text, only the items. Elements are
/// split, not checked: the caller decodes each. An element over `elementLimit` bytes, or nesting
/// deeper than `JSONDepth.limit`, is refused before any decoder sees it.
public struct JSONArrayStream {
    private let reader: JSONStreamReader
    private var opened = false
    private var closed = false
    /// The largest element handed out.
    public let elementLimit: Int

    /// A stream that starts with `prefix` (bytes already read) and continues with `read`'s
    /// chunks (nil at the end).
    public init(prefix: [UInt8] = [], elementLimit: Int = ImportLimits.item, read: @escaping () throws -> [UInt8]?) {
        reader = JSONStreamReader(prefix: prefix, read: read)
        self.elementLimit = elementLimit
    }

    /// The next element's bytes, nil after the closing bracket.
    /// - Throws: `JSONScan.Malformed` when the text is not an array, `JSONValueTooLarge` for an
    ///   element over `elementLimit`.
    public mutating func next() throws -> [UInt8]? {
        try withNext { Array($0) }
    }

    /// Lends the next element's bytes where the stream holds them (valid during `body`, wiped
    /// when dropped), nil after the closing bracket: `next()` without a copy per element.
    /// - Throws: what `next()` throws, or what `body` throws.
    public mutating func withNext<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) throws -> R? {
        if closed { return nil }
        if !opened {
            try reader.enterArray()
            opened = true
        }
        guard try reader.nextElement() else {
            closed = true
            try reader.finish()
            return nil
        }
        return try reader.withValue(limit: elementLimit, body)
    }
}
