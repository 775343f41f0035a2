import FoundationEssentials

/// JSON text for vault's outputs (`--json`, `export`): objects with sorted keys, strings as UTF-8
/// with only what JSON requires escaped (quote, backslash, control characters; `/` is left
/// alone), written straight into a byte buffer. Foundation's `JSONSerialization` bridges every
/// dictionary to `NSDictionary` and sorts keys through `NSString.compare`: measured at about 80% of
/// an export's time, which this writer removes (docs/performance.md).
package enum JSONText {
    /// Appends `value` (String, Bool, integers, Double, arrays, `[String: Any]`, nil or JSONNull
    /// as `null`, a `JSONNumber` as its text, a `JSONSecret`) to `out`. Anything else is written as its description, quoted.
    package static func append(_ value: Any?, to out: inout [UInt8]) {
        write(value, to: &out)
    }

    /// Appends `value` to guarded memory: a `JSONSecret` in it goes from its guarded bytes into
    /// the output, escaped byte by byte, and is never a `String`.
    package static func append(_ value: Any?, to out: SecretOutput) {
        var o = out
        write(value, to: &o)
    }

    static func write<Out: JSONOutput>(_ value: Any?, to out: inout Out) {
        guard let value else { out.append(ascii: "null"); return }
        switch value {
        case let s as String: appendString(s, to: &out)
        case let s as JSONSecret: appendString(bytes: s.bytes, to: &out)
        case let b as Bool: out.append(ascii: b ? "true" : "false")
        case let n as Int: out.append(ascii: String(n))
        case let n as Int64: out.append(ascii: String(n))
        case let n as Int32: out.append(ascii: String(n))
        case let n as UInt32: out.append(ascii: String(n))
        case let n as UInt64: out.append(ascii: String(n))
        case let d as Double:
            if d.isFinite, d == d.rounded(), abs(d) < 1e15 { out.append(ascii: String(Int64(d))) } else if d.isFinite {
                out.append(ascii: "\(d)")
            } else {
                out.append(ascii: "null")
            }
        case let o as [String: Any]:
            out.append(UInt8(ascii: "{"))
            var first = true
            for key in o.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                write(o[key] ?? nil, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case let a as [Any]:
            out.append(UInt8(ascii: "["))
            for (i, element) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case is JSONNull: out.append(ascii: "null")
        case let n as JSONNumber: out.append(ascii: n.text)
        default: appendString("\(value)", to: &out)
        }
    }

    /// `value` as JSON text.
    package static func text(_ value: Any?) -> String {
        var out: [UInt8] = []
        append(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static let hex = Array("0123456789abcdef".utf8)

    static func appendString<Out: JSONOutput>(_ s: String, to out: inout Out) {
        var s = s
        s.withUTF8 { appendString(bytes: UnsafeRawBufferPointer($0), to: &out) }
    }

    /// Appends `bytes` (UTF-8) as a JSON string, escaping what JSON requires, byte by byte; the
    /// runs between escapes are copied whole.
    static func appendString<Out: JSONOutput>(bytes: UnsafeRawBufferPointer, to out: inout Out) {
        out.append(UInt8(ascii: "\""))
        var run = 0
        for i in 0..<bytes.count {
            let b = bytes[i]
            guard b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") else { continue }
            if run < i { out.appendRun(UnsafeRawBufferPointer(rebasing: bytes[run..<i])) }
            run = i + 1
            out.append(UInt8(ascii: "\\"))
            switch b {
            case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
            case 0x0A: out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(UInt8(ascii: "r"))
            case 0x09: out.append(UInt8(ascii: "t"))
            case 0x08: out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(UInt8(ascii: "f"))
            default:
                out.append(UInt8(ascii: "u")); out.append(0x30); out.append(0x30)
                out.append(hex[Int(b >> 4)]); out.append(hex[Int(b & 15)])
            }
        }
        if run < bytes.count { out.appendRun(UnsafeRawBufferPointer(rebasing: bytes[run...])) }
        out.append(UInt8(ascii: "\""))
    }
}

/// A secret's bytes as a value of a JSON object given to `JSONText` (lent from guarded memory,
/// valid only while the object is written): written as a JSON string, escaped byte by byte
/// into the output, never decoded into a `String`.
package struct JSONSecret {
    /// The secret's UTF-8 bytes.
    package let bytes: UnsafeRawBufferPointer
    /// A value for the bytes lent.
    package init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }
}

/// Where `JSONText` writes: an ordinary buffer, or guarded memory (`SecretOutput`).
protocol JSONOutput {
    mutating func append(_ byte: UInt8)
    /// Appends bytes that need no escaping, as they are.
    mutating func appendRun(_ bytes: UnsafeRawBufferPointer)
}

extension JSONOutput {
    /// Appends text that is never a secret (a number, a keyword).
    mutating func append(ascii text: String) {
        var text = text
        text.withUTF8 { appendRun(UnsafeRawBufferPointer($0)) }
    }
}

extension [UInt8]: JSONOutput {
    mutating func appendRun(_ bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }
}

extension SecretOutput: JSONOutput {
    func appendRun(_ bytes: UnsafeRawBufferPointer) { append(bytes) }
}
