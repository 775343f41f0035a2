import Foundation
import Testing
@testable import VaultKit
@testable import VaultInterchange

/// The importers read other managers' JSON through `JSONValue.plainObject` and `Loose` where
/// they used Foundation's `JSONSerialization`: each reading is checked against what Foundation
/// gives for the same text.
@Suite struct JSONPlainTests {
    /// What `Loose.string` gave for a `JSONSerialization` value before.
    static func foundationString(_ v: Any?) -> String? {
        switch v {
        case let s as String: return s
        case let n as NSNumber: return n.stringValue
        default: return nil
        }
    }

    static let numbers = ["0", "1", "-1", "1.5", "1.0", "2.50", "1e3", "-0", "123456789012", "9007199254740993", "1E-2", "-12.75"]

    @Test func numbersReadAsNSNumberDid() throws {
        for text in Self.numbers {
            let theirs = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) as? NSNumber)
            guard case .number(let t) = try JSONValue.parse(Array(text.utf8)[...]) else {
                Issue.record("\(text) is not a number")
                continue
            }
            let mine = JSONNumber(text: t)
            #expect(mine.stringValue == theirs.stringValue, "\(text)")
            #expect(mine.int64Value == theirs.int64Value, "\(text)")
            #expect(mine.doubleValue == theirs.doubleValue, "\(text)")
            #expect(Loose.string(mine) == Self.foundationString(theirs), "\(text)")
        }
    }

    @Test func looseReadsTreesAsFoundationsDid() throws {
        let text = #"{"name":"x","favorite":true,"reprompt":1,"off":0,"n":null,"k":1,"k":2,"a/b":"c/d","nested":{"z":[1,"two",false]},"s":"é\n"}"#
        let theirs = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let mine = try #require(Loose.json(Array(text.utf8)[...]) as? [String: Any])
        #expect(Set(mine.keys) == Set(theirs.keys))
        for key in theirs.keys {
            #expect(Loose.string(mine[key]) == Self.foundationString(theirs[key]), "\(key)")
            #expect((mine[key] is JSONNull) == (theirs[key] is NSNull), "\(key)")
        }
        #expect(Loose.bool(mine["favorite"]) == (theirs["favorite"] as? Bool))
        #expect(Loose.bool(mine["reprompt"]) == (theirs["reprompt"] as? Bool))
        #expect(Loose.bool(mine["off"]) == (theirs["off"] as? Bool))
        #expect(Loose.bool(mine["name"]) == (theirs["name"] as? Bool))
        #expect(Loose.string(mine["k"]) == "2", "a key given twice keeps its last value, as JSONSerialization did")
        #expect(Loose.text(mine["nested"]!) == #"{"z":[1,"two",false]}"#)
        #expect(Loose.json(Array("\u{FEFF}[1]".utf8)[...]) is [Any])
        for text in ["[1,]", #"{"a":1,}"#, "[01]", "[1.]", "[1] x", "[,]", "{,}"] {
            let theirs = try? JSONSerialization.jsonObject(with: Data(text.utf8))
            let mine = Loose.json(Array(text.utf8)[...])
            #expect((mine == nil) == (theirs == nil), "\(text)")
        }
    }

    @Test func theMetaFieldIsWrittenAsFoundationWroteIt() throws {
        var item = Item(name: "n/a", type: .card)
        item.username = "u\"/\\"
        item.password = "p\u{1}\t\u{7F}é"
        item.urls = ["https://h/p?q=1"]
        item.tags = ["a", "b/c"]
        item.fingerprintLogin = true
        item.userPrompt = "(login|user)[^\\n:]*:\\s*$"
        item.fields = [CustomField(name: "pin", kind: .hidden, value: "1"), CustomField(name: "site", kind: .url, value: "x")]
        let mine = try #require(VaultMeta.encode(item))
        var m: [String: Any] = ["type": item.type.rawValue, "username": item.username!, "password": item.password!, "urls": item.urls,
                                "tags": item.tags, "kinds": [["site", CustomFieldKind.url.rawValue]], "fingerprint_login": true,
                                "user_prompt": item.userPrompt!]
        if let origin = item.origin { m["origin"] = origin }
        let theirs = String(decoding: try JSONSerialization.data(withJSONObject: m, options: [.sortedKeys]), as: UTF8.self)
        #expect(mine == theirs)
        var back = Item(name: "n/a", type: .login)
        back.fields = [CustomField(name: VaultMeta.fieldName, value: mine), CustomField(name: "site", value: "x")]
        #expect(VaultMeta.restore(into: &back))
        #expect(back.type == .card && back.username == item.username && back.password == item.password && back.fingerprintLogin)
        #expect(back.fields.map(\.kind) == [.url] && back.tags == ["a", "b/c"] && back.userPrompt == item.userPrompt)
    }

    @Test func foreignTimesReadAsISO8601DateFormatterRead() {
        let f = ISO8601DateFormatter()
        let g = ISO8601DateFormatter()
        g.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for s in ["2023-11-14T22:13:20Z", "2023-11-14T22:13:20+01:00", "2023-11-14T22:13:20.5Z", "2023-11-14T22:13:20.123-05:30",
                  "1970-01-01T00:00:00Z", "2023-11-14", "not a time", "2023-11-14 22:13:20Z"] {
            let theirs = (f.date(from: s) ?? g.date(from: s)).map { Int64($0.timeIntervalSince1970) }
            #expect(ForeignTime.iso(s) == theirs, "\(s)")
        }
    }

    @Test func monthYearMatchesStringFormat() {
        for n in [1, 12, 202_312, 99_901, 1_000_001] {
            #expect(OnePUX.monthYear(n) == String(format: "%04d-%02d", n / 100, n % 100))
        }
    }
}
