import Foundation
import Testing
@testable import VaultKit
@testable import VaultInterchange

/// `JSONValue`, the strict reader of each element `vault import` reads: it agrees with Foundation's
/// JSONSerialization on valid JSON and refuses what RFC 8259 refuses (and a key given twice).
@Suite struct JSONValueTests {
    func parse(_ text: String) throws(JSONValue.Malformed) -> JSONValue { try JSONValue.parse(Array(text.utf8)[...]) }

    /// The same value as JSONSerialization reads it (numbers compared as doubles).
    func same(_ v: JSONValue, _ f: Any) -> Bool {
        switch v {
        case .string(let s): return (f as? String) == s
        case .number(let n): return (f as? NSNumber).map { Double(n) == $0.doubleValue } ?? false
        case .bool(let b): return (f as? Bool) == b
        case .null: return f is NSNull
        case .array(let a):
            guard let fa = f as? [Any], fa.count == a.count else { return false }
            return zip(a, fa).allSatisfy { same($0, $1) }
        case .object(let o):
            guard let fo = f as? [String: Any], fo.count == o.count else { return false }
            return o.allSatisfy { m in fo[m.key].map { same(m.value, $0) } ?? false }
        }
    }

    @Test(arguments: [
        #"{"name":"a","urls":["https://x"],"created":1700000000,"fingerprint_login":true,"notes":null}"#,
        #"[1, -0, 2.5, -3e2, 4E+1, 0.5e-3, true, false, null, "", {}, []]"#,
        #"  "\u00e9t\u00e9 \ud83d\ude00 \" \\ \/ \b\f\n\r\t"  "#,
        #"{"a":{"b":{"c":[[["deep"]]]}}}"#,
        "\"caf\u{e9} \u{1F600} \u{200B}\"",
        #"-1234567890123456789"#,
    ])
    func validJSONReadsAsJSONSerializationReadsIt(text: String) throws {
        let ours = try parse(text)
        let theirs = try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
        #expect(same(ours, theirs), "\(ours) vs \(theirs)")
    }

    @Test(arguments: [
        ("", "a value is missing"), ("{", "an object key must be a string"), (#"{"a" 1}"#, "':' expected"),
        (#"{"a":1,}"#, "an object key must be a string"), ("[1,]", "not a JSON value"), ("[1 2]", "',' or ']' expected"),
        ("01", "text after the value"), ("1.", "a digit must follow '.'"), ("-", "a number needs a digit"), ("1e", "exponent"),
        ("tru", "not a JSON value"), ("nul", "not a JSON value"), ("'a'", "not a JSON value"), (#""abc"#, "not closed"),
        ("\"a\u{1}b\"", "control character"), (#""\x""#, "unknown escape"), (#""\u12""#, "four hex digits"),
        (#""\ud800""#, "lone surrogate"), (#""\udc00x""#, "lone surrogate"), (#""\ud800\u0041""#, "lone surrogate"),
        (#"{"a":1,"a":2}"#, "the key 'a' appears twice"), ("{} {}", "text after the value"), ("NaN", "not a JSON value"),
    ])
    func malformedJSONIsRefusedWithTheReason(text: String, reason: String) {
        do {
            _ = try parse(text)
            Issue.record("'\(text)' was read")
        } catch {
            #expect(error.reason.contains(reason), "'\(text)': \(error.reason)")
        }
    }

    @Test func invalidUTF8InAStringIsRefusedWithOrWithoutEscapes() {
        for bytes: [UInt8] in [[0x22, 0xE9, 0x22], [0x22, 0x5C, 0x6E, 0xC3, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22]] {
            #expect(throws: JSONValue.Malformed.self) { _ = try JSONValue.parse(bytes[...]) }
        }
    }

    @Test func nestingIsBounded() throws {
        let limit = JSONValue.depthLimit
        _ = try parse(String(repeating: "[", count: limit) + String(repeating: "]", count: limit))
        #expect(throws: JSONValue.Malformed(offset: limit, reason: "nested too deeply")) {
            _ = try parse(String(repeating: "[", count: limit + 1) + String(repeating: "]", count: limit + 1))
        }
        // Far deeper input fails at the limit, not with the stack.
        #expect(throws: JSONValue.Malformed.self) { _ = try parse(String(repeating: "[", count: 1_000_000)) }
    }

    @Test func integersReadOnlyWhenWholeAndInRange() throws {
        #expect(try parse("1700000000").int64 == 1_700_000_000)
        #expect(try parse("-9223372036854775808").int64 == Int64.min)
        #expect(try parse("9223372036854775808").int64 == nil)
        #expect(try parse("1.0").int64 == nil && parse("1e3").int64 == nil)
    }

    /// Each refusal of an item names the item and the path of the key, as the import reports it.
    @Test(arguments: [
        (#"[{"name":"x","password":123}]"#, "item 1 ('x'): 'password' has the wrong type"),
        (#"[{"name":"x","tags":[null]}]"#, "item 1 ('x'): 'tags[0]' holds a null"),
        (#"[{"name":"x","tags":["a",2]}]"#, "item 1 ('x'): 'tags[1]' has the wrong type"),
        (#"[{"name":"x","created":1.5}]"#, "item 1 ('x'): 'created' is not valid"),
        (#"[{"name":"x","created":"1"}]"#, "item 1 ('x'): 'created' has the wrong type"),
        (#"[{"name":"x","type":"spaceship"}]"#, "item 1 ('x'): 'type' is not valid"),
        (#"[{"name":"x","fingerprint_login":1}]"#, "item 1 ('x'): 'fingerprint_login' has the wrong type"),
        (#"[{"name":"x","fields":[{"name":"a","kind":"text"}]}]"#, "item 1 ('x'): 'fields[0].value' is missing"),
        (#"[{"name":"x","fields":[{"name":null,"kind":"text","value":"v"}]}]"#, "item 1 ('x'): 'fields[0].name' holds a null"),
        (#"[{"name":"x","fields":[{"name":"a","kind":"secret","value":"v"}]}]"#, "item 1 ('x'): 'fields[0].kind' is not valid"),
        (#"[{"name":"x","fields":[1]}]"#, "item 1 ('x'): 'fields[0]' is not an object"),
        (#"[{"name":"x","password_history":[{"password":"p"}]}]"#, "item 1 ('x'): 'password_history[0].replaced' is missing"),
        (#"[{"name":"x","pasword":"p"}]"#, "item 1 ('x') has an unknown key 'pasword'"),
        (#"[{"name":"x","name":"y"}]"#, "item 1 is not a JSON object"),
        (#"[{"username":"u"}]"#, "item 1 has no name"),
        (#"[[1]]"#, "item 1 is not a JSON object"),
    ])
    func anItemIsRefusedNamingTheKey(text: String, message: String) {
        do {
            _ = try VaultJSON.items(from: Array(text.utf8), now: 1)
            Issue.record("'\(text)' was imported")
        } catch let e as VaultError {
            #expect(e.message == message && e.exitCode == VaultError.usage("").exitCode, "\(e)")
        } catch {
            Issue.record("not a VaultError: \(error)")
        }
    }

    @Test func everyKeyOfAnItemIsRead() throws {
        let text = #"""
        [{"name":"n","type":"card","username":"u","password":"p\u00e9","url":"https://a","urls":["https://b"],"notes":"line\nnext",
          "tags":["t"],"totp":"otpauth://totp/n?secret=JBSWY3DPEHPK3PXP","origin":"bitwarden","created":5,"modified":7,
          "fingerprint_login":true,"user_prompt":"User:","password_prompt":"Pass:",
          "fields":[{"name":"pin","kind":"hidden","value":"1234"}],"password_history":[{"password":"old","replaced":6}]}]
        """#
        let item = try #require(try VaultJSON.items(from: Array(text.utf8), now: 1).first)
        #expect(item.name == "n" && item.type == .card && item.username == "u" && item.password == "pé")
        #expect(item.urls == ["https://a", "https://b"] && item.notes == "line\nnext" && item.tags == ["t"])
        #expect(item.totp?.hasPrefix("otpauth://totp/") == true && item.origin == "bitwarden")
        #expect(item.created == 5 && item.modified == 7 && item.fingerprintLogin && item.userPrompt == "User:" && item.passwordPrompt == "Pass:")
        #expect(item.fields == [CustomField(name: "pin", kind: .hidden, value: "1234")])
        #expect(item.passwordHistory == [PasswordChange(password: "old", replaced: 6)])
    }
}
