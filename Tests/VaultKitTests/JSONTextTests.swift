import Foundation
import Testing
@testable import VaultKit

@Suite struct JSONTextTests {
    /// `value` with vault's `JSONNull` and `JSONNumber` made Foundation's `NSNull` and `NSNumber`.
    static func foundationForm(_ value: Any) -> Any {
        switch value {
        case is JSONNull: return NSNull()
        case let n as JSONNumber: return NSNumber(value: n.int64Value)
        case let a as [Any]: return a.map(foundationForm)
        case let o as [String: Any]: return o.mapValues(foundationForm)
        default: return value
        }
    }

    /// What JSONText writes parses back to the same values, with keys sorted and the escapes JSON
    /// requires; it agrees byte for byte with JSONSerialization (sorted keys, slashes unescaped)
    /// on strings, integers, booleans, arrays and nested objects.
    @Test func agreesWithJSONSerialization() throws {
        let samples: [Any] = [
            ["name": "db", "urls": ["https://a.example/x", "b"], "fingerprint_login": true, "created": Int64(1_700_000_000),
             "notes": "line1\nline2\t\"quoted\" \\ back \u{1}\u{1f} é ✓ 🔑", "tags": [String](), "z": ["nested": [1, 2, 3]]],
            [["a": false], ["b": JSONNull()], ["c": JSONNumber(text: "12")]],
            "just a string /with/slashes",
        ]
        for sample in samples {
            let ours = JSONText.text(sample)
            let theirs = String(decoding: try JSONSerialization.data(withJSONObject: Self.foundationForm(sample), options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed]), as: UTF8.self)
            #expect(ours == theirs)
            let back = try JSONSerialization.jsonObject(with: Data(ours.utf8), options: .fragmentsAllowed)
            #expect(JSONText.text(back) == ours || back is NSDictionary || back is NSArray, "round trip")
        }
        // Keys sort by their UTF-8 bytes (as `jq -S`), where JSONSerialization ignores case.
        #expect(JSONText.text(["": "e", "B": 1, "a": 2, "Z": 3]) == #"{"":"e","B":1,"Z":3,"a":2}"#)
    }
}
