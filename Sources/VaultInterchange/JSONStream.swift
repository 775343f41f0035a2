import VaultKit
import FoundationEssentials
import VaultSystem

/// A JSON value larger than the reader was asked to hold.
public struct JSONValueTooLarge: Error, Sendable {
    /// Where the value starts, counted in bytes from the start of the document.
    public let offset: Int
    /// The bound it passed: bytes, or with `counted`, values.
    public let limit: Int
    /// Whether it holds more values (keys and elements) than `limit`, rather than more bytes.
    public var counted = false
}

/// A JSON document read from chunks as they arrive and walked a value at a time: into an object
/// (its keys in turn), into an array (its elements in turn), one value's bytes (up to a limit), or
/// a value skipped without being held. The importers of Bitwarden JSON and of 1PUX's `export.data`
/// and `JSONArrayStream` (vault's own JSON) stand on it: it holds the chunk being read and the one
/// value asked for, never the document, and wipes bytes as it drops them. Values are split, not
/// checked (the caller decodes each); nesting deeper than `JSONDepth.limit`, counting the
/// containers entered, is refused before any decoder sees it.
public final class JSONStreamReader {
    private var buffer: [UInt8]
    private var pos = 0
    private var eof = false
    private let read: () throws -> [UInt8]?
    /// The bytes dropped before `buffer[0]`, and the line breaks among them.
    private var dropped = 0, droppedLines = 0
    /// The containers entered, innermost last: whether it is an object, and whether it has had
    /// a member yet.
    private var open: [(object: Bool, first: Bool)] = []

    /// The longest key read (keys are names, not data).
    static let keyLimit = 64 << 10

    /// A reader of `prefix` (bytes already read) followed by `read`'s chunks (nil at the end).
    public init(prefix: [UInt8] = [], read: @escaping () throws -> [UInt8]?) {
        buffer = prefix
        self.read = read
    }

    deinit { wipe(&buffer) }

    /// The line (from 1) of byte `offset` of the document, while that byte is still held (the
    /// value just read, or where a `Malformed` was thrown); else the line of the first byte held.
    public func line(of offset: Int) -> Int {
        let end = max(0, min(offset - dropped, buffer.count))
        return buffer.withUnsafeBufferPointer { b in droppedLines + 1 + Self.lineBreaks(b, 0..<end) }
    }

    /// The first byte of what comes next, past white space (nil at the end of the input).
    public func peek() throws -> UInt8? {
        while true {
            pos = buffer.withUnsafeBufferPointer { b in
                // Written out (no helper call per byte): a debug build runs this loop over every
                // byte of white space an input holds.
                guard let p = b.baseAddress else { return 0 }
                var i = pos
                let n = b.count
                while i < n {
                    let c = p[i]
                    guard c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 else { break }
                    i += 1
                }
                return i
            }
            if pos < buffer.count { return buffer[pos] }
            if !(try more()) { return nil }
        }
    }

    /// Where what comes next starts (past white space), counted in bytes from the start.
    public func offset() throws -> Int {
        _ = try peek()
        return dropped + pos
    }

    /// Enters the object that comes next.
    /// - Throws: `JSONScan.Malformed` when something else comes, or nesting passes the limit.
    public func enterObject() throws { try enter(0x7B, object: true) }

    /// Enters the array that comes next.
    /// - Throws: `JSONScan.Malformed` when something else comes, or nesting passes the limit.
    public func enterArray() throws { try enter(0x5B, object: false) }

    private func enter(_ byte: UInt8, object: Bool) throws {
        guard try peek() == byte else { throw fail(object ? "not a JSON object" : "not a JSON array") }
        guard open.count < JSONDepth.limit else { throw fail("nested deeper than \(JSONDepth.limit) levels") }
        pos += 1
        open.append((object, true))
    }

    /// The key of the next member of the object entered last, the reader then at its value (which
    /// the caller reads or skips); nil at the object's end, which is left.
    /// - Throws: `JSONScan.Malformed`.
    public func nextKey() throws -> String? {
        guard open.last?.object == true else { throw fail("not in an object") }
        guard var c = try peek() else { throw fail("the document ends inside an object") }
        if c == 0x7D {
            pos += 1
            open.removeLast()
            return nil
        }
        if !open[open.count - 1].first {
            guard c == 0x2C else { throw fail("expected ',' or '}'") }
            pos += 1
            guard let next = try peek() else { throw fail("the document ends inside an object") }
            c = next
        }
        guard c == 0x22 else { throw fail("expected a key") }
        open[open.count - 1].first = false
        let start = dropped + pos
        var text = try scan(keep: true, limit: Self.keyLimit)
        defer { wipe(&text) }
        guard case .string(let key)? = try? JSONValue.parse(text[...]) else {
            throw JSONScan.Malformed(offset: start, reason: "a key is not a string")
        }
        guard try peek() == 0x3A else { throw fail("expected ':'") }
        pos += 1
        return key
    }

    /// Whether the array entered last has another element, the reader then at it (which the
    /// caller reads or skips); false at the array's end, which is left.
    /// - Throws: `JSONScan.Malformed`.
    public func nextElement() throws -> Bool {
        guard open.last?.object == false else { throw fail("not in an array") }
        guard let c = try peek() else { throw fail("the array is not closed") }
        if c == 0x5D {
            pos += 1
            open.removeLast()
            return false
        }
        if !open[open.count - 1].first {
            guard c == 0x2C else { throw fail("expected ',' or ']'") }
            pos += 1
            guard let next = try peek() else { throw fail("the array is not closed") }
            if next == 0x5D { throw fail("an element is missing") }
        }
        open[open.count - 1].first = false
        return true
    }

    /// Enters the object that comes next and calls `body` with each key, the reader at the key's
    /// value, which `body` reads or skips; the object is left at its end.
    /// - Throws: `JSONScan.Malformed`, or what `body` throws.
    public func eachMember(_ body: (String) throws -> Void) throws {
        try enterObject()
        while let key = try nextKey() { try body(key) }
    }

    /// Enters the array that comes next and calls `body` at each element, which `body` reads or
    /// skips; the array is left at its end.
    /// - Throws: `JSONScan.Malformed`, or what `body` throws.
    public func eachElement(_ body: () throws -> Void) throws {
        try enterArray()
        while try nextElement() { try body() }
    }

    /// The bytes of the value that comes next (a copy the caller wipes).
    /// - Throws: `JSONValueTooLarge` over `limit` bytes (found after at most one chunk more) or
    ///   when it holds more than `values` keys and elements, `JSONScan.Malformed`.
    public func value(limit: Int, values: Int = .max) throws -> [UInt8] {
        try scan(keep: true, limit: limit, values: values)
    }

    /// Lends the bytes of the value that comes next where the reader holds them (valid during
    /// `body`, wiped when the reader drops them): `value(limit:values:)` without the copy.
    /// - Throws: what `value(limit:values:)` throws, or what `body` throws (the reader is then
    ///   past the value).
    public func withValue<R>(limit: Int, values: Int = .max, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) throws -> R {
        let range = try span(limit: limit, values: values)
        pos = range.upperBound
        return try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[range])) }
    }

    /// Passes over the value that comes next without holding it.
    /// - Throws: `JSONScan.Malformed`.
    public func skip() throws {
        _ = try scan(keep: false, limit: 0)
    }

    /// Checks that nothing but white space follows the document.
    /// - Throws: `JSONScan.Malformed`.
    public func finish() throws {
        guard try peek() == nil else { throw fail("text follows the document") }
    }

    /// The error at the current position.
    private func fail(_ reason: String) -> JSONScan.Malformed {
        JSONScan.Malformed(offset: dropped + pos, reason: reason)
    }

    /// Appends the next chunk, first dropping (and wiping) the bytes before `pos`; false at the end.
    private func more() throws -> Bool {
        guard !eof else { return false }
        guard var chunk = try read(), !chunk.isEmpty else {
            eof = true
            return false
        }
        defer { wipe(&chunk) }
        var next: [UInt8] = []
        next.reserveCapacity(buffer.count - pos + chunk.count)
        next += buffer[pos...]
        next += chunk
        droppedLines += buffer.withUnsafeBufferPointer { Self.lineBreaks($0, 0..<pos) }
        dropped += pos
        wipe(&buffer)
        buffer = next
        pos = 0
        return true
    }

    /// Where the value at `pos` ends, walking strings and brackets (scalars end at a delimiter);
    /// with `keep`, its bytes are returned and held meanwhile (at most `limit`), else they are
    /// dropped as the walk goes on. The reader is then past the value.
    private func scan(keep: Bool, limit: Int, values: Int = .max) throws -> [UInt8] {
        if keep {
            let range = try span(limit: limit, values: values)
            pos = range.upperBound
            return Array(buffer[range])
        }
        _ = try walkValue(keep: false, limit: 0, values: .max)
        return []
    }

    /// Where the value at `pos` lies in `buffer` (held whole, at most `limit` bytes); the reader
    /// is left at its start.
    private func span(limit: Int, values: Int) throws -> Range<Int> {
        let end = try walkValue(keep: true, limit: limit, values: values)
        return pos..<end
    }

    /// Walks the value at `pos` (see `scan`) and returns the index in `buffer` just past it;
    /// with `keep`, the reader stays at its start, else at its end.
    private func walkValue(keep: Bool, limit: Int, values: Int) throws -> Int {
        guard try peek() != nil else { throw fail("a value is missing") }
        var state = ScanState()
        state.outer = open.count
        state.valueLimit = values
        var j = pos
        while true {
            let end = buffer.withUnsafeBufferPointer { b in Self.walk(b, from: j, &state) }
            if let end {
                j = end
                break
            }
            if let deep = state.tooDeepAt { throw JSONScan.Malformed(offset: dropped + deep, reason: "nested deeper than \(JSONDepth.limit) levels") }
            if state.values > values { throw JSONValueTooLarge(offset: dropped + pos, limit: values, counted: true) }
            if keep {
                guard buffer.count - pos <= limit else { throw JSONValueTooLarge(offset: dropped + pos, limit: limit) }
            } else {
                pos = buffer.count
            }
            let scanned = buffer.count - pos
            guard try more() else {
                if state.inString || state.depth > 0 { throw JSONScan.Malformed(offset: dropped + buffer.count, reason: "the document ends inside a value") }
                j = buffer.count
                break
            }
            j = pos + scanned
        }
        if let deep = state.tooDeepAt { throw JSONScan.Malformed(offset: dropped + deep, reason: "nested deeper than \(JSONDepth.limit) levels") }
        if state.values > values { throw JSONValueTooLarge(offset: dropped + pos, limit: values, counted: true) }
        guard j > pos else { throw fail("a value is missing") }
        if keep, j - pos > limit { throw JSONValueTooLarge(offset: dropped + pos, limit: limit) }
        if !keep { pos = j }
        return j
    }

    /// Where a walk over a value stands between chunks.
    private struct ScanState {
        var depth = 0
        var inString = false
        var escaped = false
        /// Containers entered before the walk began (for the nesting bound).
        var outer = 0
        /// Where nesting passed the bound.
        var tooDeepAt: Int?
        /// The values begun inside the containers walked (each `[`, `{`, `,` and `:`), and how
        /// many may be.
        var values = 0
        var valueLimit = Int.max
    }

    /// Walks `b` from `i`: the index just past the value when it ends in `b`, else nil (`state`
    /// carries on into the next chunk). A scalar ends at a delimiter, which is not part of it.
    private static func walk(_ b: UnsafeBufferPointer<UInt8>, from i: Int, _ state: inout ScanState) -> Int? {
        guard let p = b.baseAddress else { return nil }
        var j = i
        let n = b.count
        while j < n {
            let c = p[j]
            if state.inString {
                if state.escaped {
                    state.escaped = false
                } else if c == 0x5C {
                    state.escaped = true
                } else if c == 0x22 {
                    state.inString = false
                    if state.depth == 0 { return j + 1 }
                }
                j += 1
                continue
            }
            switch c {
            case 0x22: state.inString = true
            case 0x5B, 0x7B:
                state.depth += 1
                state.values += 1
                if state.depth + state.outer > JSONDepth.limit {
                    state.tooDeepAt = j
                    return nil
                }
                if state.values > state.valueLimit { return nil }
            case 0x5D, 0x7D:
                if state.depth == 0 { return j }
                state.depth -= 1
                if state.depth == 0 { return j + 1 }
            case 0x2C, 0x3A:
                if state.depth == 0 { return j }
                state.values += 1
                if state.values > state.valueLimit { return nil }
            case 0x20, 0x0A, 0x0D, 0x09:
                if state.depth == 0 { return j }
            default: break
            }
            j += 1
        }
        return nil
    }

    private static func lineBreaks(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int {
        CLibrary.count(of: 0x0A, in: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(b)[range]))
    }
}
