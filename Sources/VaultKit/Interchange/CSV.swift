import Foundation

/// CSV as RFC 4180 defines it (fields in double quotes may hold commas, quotes written twice and
/// line breaks; CRLF or LF rows), read row by row from the bytes so a large export is never
/// held twice. A UTF-8 byte order mark (Firefox writes one) is skipped.
public struct CSVReader {
    /// A row and the line it starts on (from 1).
    public struct Row: Sendable {
        /// The fields.
        public var fields: [String]
        /// The line of the file the row starts on.
        public var line: Int
    }

    private let bytes: [UInt8]
    private var i: Int
    private var line = 1

    /// A reader over `bytes`.
    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
        i = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
    }

    /// The next row, nil at the end.
    /// - Throws: `.usage` naming the line of a quote that is not closed or a quote inside an
    ///   unquoted field, or a field that is not UTF-8.
    public mutating func next() throws -> Row? {
        // Blank lines between rows (a trailing newline, a blank last line) are not rows.
        while i < bytes.count, bytes[i] == 0x0A || bytes[i] == 0x0D {
            if bytes[i] == 0x0A { line += 1 }
            i += 1
        }
        guard i < bytes.count else { return nil }
        let start = line
        var fields: [String] = []
        var field: [UInt8] = []
        var quoted = false, wasQuoted = false
        func text(_ f: [UInt8]) throws -> String {
            guard let s = String(validating: f, as: UTF8.self) else { throw VaultError.usage("line \(start): a field is not valid UTF-8") }
            return s
        }
        while i < bytes.count {
            let c = bytes[i]
            if quoted {
                if c == 0x22 {
                    if i + 1 < bytes.count, bytes[i + 1] == 0x22 { field.append(0x22); i += 2; continue }
                    quoted = false
                    i += 1
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
            case 0x0D where i + 1 < bytes.count && bytes[i + 1] == 0x0A:
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
        s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) ? "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : s
    }
}
