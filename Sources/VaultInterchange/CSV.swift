import VaultKit
import FoundationEssentials
import VaultSystem

/// CSV as RFC 4180 defines it (fields in double quotes may hold commas, quotes written twice and
/// line breaks; CRLF or LF rows), read row by row from chunks as they arrive, so an export is
/// never held whole: the reader holds the chunk being read and the row being built. A row longer
/// than `rowLimit` bytes is refused as soon as it passes the bound. A UTF-8 byte order mark
/// (Firefox writes one) is skipped.
public struct CSVReader {
    /// A row and the line it starts on (from 1).
    public struct Row: Sendable {
        /// The fields.
        public var fields: [String]
        /// The line of the file the row starts on.
        public var line: Int
    }

    private var bytes: [UInt8]
    private var i = 0
    /// The bytes dropped before `bytes[0]`.
    private var dropped = 0
    private var line = 1
    private var eof = false
    private var started = false
    private let read: () throws -> [UInt8]?
    /// The longest row read.
    public let rowLimit: Int

    /// A reader of `prefix` (bytes already read) followed by `read`'s chunks (nil at the end).
    public init(prefix: [UInt8], rowLimit: Int = ImportLimits.item, read: @escaping () throws -> [UInt8]?) {
        bytes = prefix
        self.rowLimit = rowLimit
        self.read = read
    }

    /// A reader over `bytes`.
    public init(_ bytes: [UInt8]) {
        self.init(prefix: bytes) { nil }
    }

    /// Whether the byte `ahead` of `i` exists, reading chunks as needed (the bytes before `i`
    /// are dropped and wiped first, so `i` may change).
    private mutating func has(_ ahead: Int) throws -> Bool {
        while i + ahead >= bytes.count {
            guard !eof else { return false }
            guard var chunk = try read(), !chunk.isEmpty else {
                eof = true
                return false
            }
            var next: [UInt8] = []
            next.reserveCapacity(bytes.count - i + chunk.count)
            next += bytes[i...]
            next += chunk
            wipe(&chunk)
            wipe(&bytes)
            bytes = next
            dropped += i
            i = 0
        }
        return true
    }

    /// The next row, nil at the end.
    /// - Throws: `.usage` naming the line of a quote that is not closed or a quote inside an
    ///   unquoted field, a field that is not UTF-8, or a row longer than `rowLimit`.
    public mutating func next() throws -> Row? {
        if !started {
            started = true
            if try has(2), bytes[i] == 0xEF, bytes[i + 1] == 0xBB, bytes[i + 2] == 0xBF { i += 3 }
        }
        // Blank lines between rows (a trailing newline, a blank last line) are not rows.
        while try has(0), bytes[i] == 0x0A || bytes[i] == 0x0D {
            if bytes[i] == 0x0A { line += 1 }
            i += 1
        }
        guard try has(0) else { return nil }
        let start = line, rowStart = dropped + i
        var fields: [String] = []
        var field: [UInt8] = []
        defer { wipe(&field) }
        var quoted = false, wasQuoted = false
        func text(_ f: [UInt8]) throws -> String {
            guard let s = String(validating: f, as: UTF8.self) else { throw VaultError.usage("line \(start): a field is not valid UTF-8") }
            return s
        }
        while try has(0) {
            guard dropped + i - rowStart < rowLimit else { throw ImportLimits.tooLarge("line \(start)") }
            let c = bytes[i]
            if quoted {
                if c == 0x22 {
                    if try has(1), bytes[i + 1] == 0x22 {
                        field.append(0x22)
                        i += 2
                    } else {
                        quoted = false
                        i += 1
                    }
                    continue
                }
                if c == 0x0A { line += 1 }
                field.append(c)
                i += 1
                continue
            }
            switch c {
            case 0x22:
                guard field.isEmpty, !wasQuoted else { throw VaultError.usage("line \(line): a quote inside an unquoted field (RFC 4180 quotes the whole field)") }
                quoted = true
                wasQuoted = true
                i += 1
            case 0x2C:
                fields.append(try text(field))
                field.removeAll(keepingCapacity: true)
                wasQuoted = false
                i += 1
            case 0x0D where try has(1) && bytes[i + 1] == 0x0A:
                i += 1
            case 0x0A:
                i += 1
                line += 1
                fields.append(try text(field))
                return Row(fields: fields, line: start)
            default:
                guard !wasQuoted else { throw VaultError.usage("line \(line): text after a closing quote") }
                field.append(c)
                i += 1
            }
        }
        if quoted { throw VaultError.usage("line \(start): a quoted field is not closed before the end of the file") }
        fields.append(try text(field))
        return Row(fields: fields, line: start)
    }

    /// One field quoted for writing when it needs to be.
    public static func quote(_ s: String) -> String {
        s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) ? "\"" + s.replacingEvery("\"", with: "\"\"") + "\"" : s
    }
}
