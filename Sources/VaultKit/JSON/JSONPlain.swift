/// JSON `null` in an untyped value tree (`[String: Any]`, `[Any]`): what Foundation's `NSNull`
/// was in vault's outputs and in the importers' trees. `JSONText` writes it as `null`.
package struct JSONNull: Sendable, Equatable {
    /// The one null.
    package init() {}
}

/// A JSON number in an untyped value tree, kept as its text (so `JSONText` writes back exactly
/// what was read), read as Foundation's `NSNumber` was by the importers.
package struct JSONNumber: Sendable, Equatable, CustomStringConvertible {
    /// The number as the JSON text wrote it (RFC 8259's grammar: `JSONValue` checked it).
    package let text: String

    /// A number of the text `text` (valid JSON number grammar).
    package init(text: String) { self.text = text }

    /// The nearest Double.
    package var doubleValue: Double { Double(text) ?? .nan }

    /// The integer value, truncated toward zero as `NSNumber.int64Value` does; 0 when it does
    /// not fit.
    package var int64Value: Int64 {
        if let n = Int64(text) { return n }
        let d = doubleValue.rounded(.towardZero)
        return Int64(exactly: d) ?? 0
    }

    /// `int64Value` as an Int.
    package var intValue: Int { Int(int64Value) }

    /// The number as text, as `NSNumber.stringValue` gave it for what `JSONSerialization` read:
    /// an integer's digits, else the Double's text (`1.0`, `1000.0` for `1e3`).
    package var stringValue: String {
        if let n = Int64(text) { return String(n) }
        if let n = UInt64(text) { return String(n) }
        return "\(doubleValue)"
    }

    /// `stringValue`.
    package var description: String { stringValue }
}

extension JSONValue {
    /// The value as an untyped tree, as Foundation's `JSONSerialization` gave the importers:
    /// `String`, `Bool`, `JSONNumber`, `JSONNull`, `[Any]`, `[String: Any]` (a key given twice
    /// keeps its last value).
    package var plainObject: Any {
        switch self {
        case .string(let s): return s
        case .number(let text): return JSONNumber(text: text)
        case .bool(let b): return b
        case .null: return JSONNull()
        case .array(let elements): return elements.map(\.plainObject)
        case .object(let members):
            var o: [String: Any] = Dictionary(minimumCapacity: members.count)
            for m in members { o[m.key] = m.value.plainObject }
            return o
        }
    }
}
