import Foundation

/// JSON text for vault's outputs (`--json`, `export`): objects with sorted keys, strings as UTF-8
/// with only what JSON requires escaped (quote, backslash, control characters; `/` is left
/// alone), written straight into a byte buffer. Foundation's `JSONSerialization` bridges every
/// dictionary to `NSDictionary` and sorts keys through `NSString.compare`: measured at about 80% of
/// an export's time, which this writer removes (docs/performance.md).
public enum JSONText {
    /// Appends `value` (String, Bool, integers, Double, arrays, `[String: Any]`, nil or NSNull
    /// as `null`) to `out`. Anything else is written as its description, quoted.
    public static func append(_ value: Any?, to out: inout [UInt8]) {
        guard let value else { out += Array("null".utf8); return }
        switch value {
        case let s as String: appendString(s, to: &out)
        case let b as Bool: out += Array((b ? "true" : "false").utf8)
        case let n as Int: out += Array(String(n).utf8)
        case let n as Int64: out += Array(String(n).utf8)
        case let n as Int32: out += Array(String(n).utf8)
        case let n as UInt32: out += Array(String(n).utf8)
        case let n as UInt64: out += Array(String(n).utf8)
        case let d as Double:
            if d.isFinite, d == d.rounded(), abs(d) < 1e15 { out += Array(String(Int64(d)).utf8) } else if d.isFinite {
                out += Array("\(d)".utf8)
            } else {
                out += Array("null".utf8)
            }
        case let o as [String: Any]:
            out.append(UInt8(ascii: "{"))
            var first = true
            for key in o.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                append(o[key] ?? nil, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case let a as [Any]:
            out.append(UInt8(ascii: "["))
            for (i, element) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                append(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case is NSNull: out += Array("null".utf8)
        default: appendString("\(value)", to: &out)
        }
    }

    /// `value` as JSON text.
    public static func text(_ value: Any?) -> String {
        var out: [UInt8] = []
        append(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static let hex = Array("0123456789abcdef".utf8)

    static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x08: out += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: out += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0..<0x20: out += [UInt8(ascii: "\\"), UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 15)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
