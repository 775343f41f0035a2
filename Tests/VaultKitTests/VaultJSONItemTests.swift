import Testing
@testable import VaultKit
@testable import VaultInterchange

/// The decoder of one element of vault's JSON as it was before it read in place: a `JSONValue`
/// tree per element, then checked key by key (copied from VaultJSON.swift as of commit 7f51e18).
/// The in-place reader must give what it gave, item or error, for every input.
enum ReferenceVaultJSON {
    /// One element, read by `JSONValue` (one strict pass) and checked key by key: an unknown key,
    /// a wrong type, an invalid value or a null in a list names the item and the key's path.
    static func item(_ slice: ArraySlice<UInt8>, position: String, now: Int64) throws -> Item {
        guard let o = try? JSONValue.parse(slice), case .object(let members) = o else { throw VaultError.usage("\(position) is not a JSON object") }
        var label = position
        if case .string(let n)? = o["name"] { label = "\(position) ('\(n)')" }
        if let unknown = members.map(\.key).sorted().first(where: { !VaultJSON.keys.contains($0) }) {
            throw VaultError.usage("\(label) has an unknown key '\(unknown)'", hint: "keys: \(VaultJSON.keys.sorted().joined(separator: ", "))")
        }
        for (list, allowed) in [("fields", VaultJSON.fieldKeys), ("password_history", VaultJSON.historyKeys)] {
            guard case .array(let elements)? = o[list] else { continue }
            for (k, element) in elements.enumerated() {
                guard case .object(let inner) = element else { throw VaultError.usage("\(label): '\(list)[\(k)]' is not an object") }
                if let unknown = inner.map(\.key).sorted().first(where: { !allowed.contains($0) }) {
                    throw VaultError.usage("\(label) has an unknown key '\(list)[\(k)].\(unknown)'", hint: "keys: \(allowed.sorted().joined(separator: ", "))")
                }
            }
        }
        let f = Typed(label: label)
        guard let name = try f.string(o["name"], "name") else { throw VaultError.usage("\(position) has no name") }
        let username = try f.string(o["username"], "username"), password = try f.string(o["password"], "password")
        var urls = try f.strings(o["urls"], "urls") ?? []
        if let one = try f.string(o["url"], "url") { urls.insert(one, at: 0) }
        let notes = try f.string(o["notes"], "notes"), tags = try f.strings(o["tags"], "tags") ?? [], totp = try f.string(o["totp"], "totp")
        let origin = try f.string(o["origin"], "origin"), created = try f.int64(o["created"], "created"), modified = try f.int64(o["modified"], "modified")
        let fingerprintLogin = try f.bool(o["fingerprint_login"], "fingerprint_login")
        let userPrompt = try f.string(o["user_prompt"], "user_prompt"), passwordPrompt = try f.string(o["password_prompt"], "password_prompt")
        let type = try f.string(o["type"], "type").map { t in
            guard let type = ItemType(rawValue: t) else { throw VaultError.usage("\(label): 'type' is not valid") }
            return type
        }
        let fields: [CustomField] = try f.objects(o["fields"], "fields") { e, path in
            let kindName = try f.required(f.string(e["kind"], path + ".kind"), path + ".kind", e)
            guard let kind = CustomFieldKind(rawValue: kindName) else { throw VaultError.usage("\(label): '\(path).kind' is not valid") }
            return CustomField(name: try f.required(f.string(e["name"], path + ".name"), path + ".name", e), kind: kind,
                               value: try f.required(f.string(e["value"], path + ".value"), path + ".value", e))
        } ?? []
        let history: [PasswordChange] = try f.objects(o["password_history"], "password_history") { e, path in
            PasswordChange(password: try f.required(f.string(e["password"], path + ".password"), path + ".password", e),
                           replaced: try f.required(f.int64(e["replaced"], path + ".replaced"), path + ".replaced", e))
        } ?? []
        var item = Item(name: name, type: type ?? .login, username: username, password: password, urls: urls, notes: notes,
                        tags: tags, totp: totp, fields: fields, passwordHistory: history,
                        fingerprintLogin: fingerprintLogin ?? false, origin: origin, now: now)
        if let t = item.totp {
            do { item.totp = try OTP.normalize(t, label: name) } catch let e as VaultError { throw VaultError.usage("\(label): 'totp': \(e.message)") }
        }
        for k in item.fields.indices where item.fields[k].kind == .totp {
            do { item.fields[k].value = try OTP.normalize(item.fields[k].value, label: name) } catch let e as VaultError {
                throw VaultError.usage("\(label): 'fields[\(k)].value': \(e.message)")
            }
        }
        var seen: Set<String> = []
        for field in item.fields where !seen.insert(field.name).inserted {
            throw VaultError.usage("\(label): the custom field '\(field.name)' appears twice")
        }
        guard item.passwordHistory.count <= Item.historyLimit else {
            throw VaultError.usage("\(label): 'password_history' holds more than \(Item.historyLimit) passwords")
        }
        item.userPrompt = userPrompt
        item.passwordPrompt = passwordPrompt
        item.created = created ?? now
        item.modified = modified ?? item.created
        return item
    }

    /// Reads typed values out of one item's `JSONValue`s; a key that is absent or null is nil (as
    /// an optional field reads), a value of another type is an error naming the item and the path.
    private struct Typed {
        let label: String

        func wrongType(_ path: String) -> VaultError { .usage("\(label): '\(path)' has the wrong type") }

        func string(_ v: JSONValue?, _ path: String) throws -> String? {
            switch v {
            case nil, .null?: return nil
            case .string(let s)?: return s
            default: throw wrongType(path)
            }
        }

        func int64(_ v: JSONValue?, _ path: String) throws -> Int64? {
            switch v {
            case nil, .null?: return nil
            case .number?:
                guard let n = v?.int64 else { throw VaultError.usage("\(label): '\(path)' is not valid") }
                return n
            default: throw wrongType(path)
            }
        }

        func bool(_ v: JSONValue?, _ path: String) throws -> Bool? {
            switch v {
            case nil, .null?: return nil
            case .bool(let b)?: return b
            default: throw wrongType(path)
            }
        }

        /// A list of strings; a null inside it is an error (only a whole key may be null).
        func strings(_ v: JSONValue?, _ path: String) throws -> [String]? {
            switch v {
            case nil, .null?: return nil
            case .array(let elements)?:
                return try elements.enumerated().map { k, e in
                    if e == .null { throw VaultError.usage("\(label): '\(path)[\(k)]' holds a null") }
                    guard case .string(let s) = e else { throw wrongType("\(path)[\(k)]") }
                    return s
                }
            default: throw wrongType(path)
            }
        }

        /// A list of objects, each read by `read` with its path (`fields[2]`).
        func objects<T>(_ v: JSONValue?, _ path: String, _ read: (JSONValue, String) throws -> T) throws -> [T]? {
            switch v {
            case nil, .null?: return nil
            case .array(let elements)?: return try elements.enumerated().map { k, e in try read(e, "\(path)[\(k)]") }
            default: throw wrongType(path)
            }
        }

        /// A key a list's object must have: missing, or null, is an error.
        func required<T>(_ value: T?, _ path: String, _ object: JSONValue) throws -> T {
            if let value { return value }
            let key = String(path[path.index(after: path.lastIndex(of: ".")!)...])
            throw VaultError.usage("\(label): '\(path)' \(object[key] == nil ? "is missing" : "holds a null")")
        }
    }
}

/// `VaultJSON.item` (the in-place reader) against `ReferenceVaultJSON` (the tree it replaced) over
/// odd elements: escapes, non-ASCII, empty and null values, every key and field kind, numbers at
/// the edges, unknown and repeated keys, wrong types, nesting, truncated and damaged text.
@Suite struct VaultJSONItemTests {
    static let now: Int64 = 1_700_000_000

    /// The item, or the error, each decoder gives for `bytes`.
    func both(_ bytes: [UInt8]) -> (new: Result<Item, VaultError>, old: Result<Item, VaultError>) {
        func run(_ body: () throws -> Item) -> Result<Item, VaultError> {
            do { return .success(try body()) } catch let e as VaultError { return .failure(e) } catch {
                return .failure(.failure("not a VaultError: \(error)"))
            }
        }
        let new = run { try bytes.withUnsafeBufferPointer { try VaultJSON.item($0, index: 7, now: Self.now) } }
        let old = run { try ReferenceVaultJSON.item(bytes[...], position: "item 7", now: Self.now) }
        return (new, old)
    }

    func agree(_ bytes: [UInt8]) {
        let (new, old) = both(bytes)
        #expect(new == old, "\(String(decoding: bytes, as: UTF8.self))")
    }

    static let full = #"{"name":"mail \u00e9\ud83d\ude00","username":"me@example.com","password":"p\"w\\d\/\b\f\n\r\t\u0000","url":"https://a.example","urls":["https://b.example",""],"notes":"line 1\nline 2 é😀","tags":["work","a/b",""],"totp":"JBSWY3DPEHPK3PXP","origin":"git","created":1600000000,"modified":-0,"fingerprint_login":true,"user_prompt":"login:","password_prompt":"Password:","type":"login","fields":[{"name":"pin","kind":"hidden","value":"1234"},{"name":"site","kind":"url","value":"https://c.example"},{"name":"note","kind":"text","value":""},{"name":"code","kind":"totp","value":"otpauth://totp/x?secret=JBSWY3DPEHPK3PXP"}],"password_history":[{"password":"old","replaced":1500000000},{"password":"","replaced":0}]}"#

    static let elements: [String] = [
        full,
        #"{"name":"a"}"#, #" { "name" : "a" } "#, "{\n\t\"name\"\r\n:\"a\"}", #"{}"#, #"{"name":""}"#, #"{"name":null}"#,
        #"{"name":"a","username":null,"password":null,"urls":null,"tags":null,"fields":null,"password_history":null,"created":null,"fingerprint_login":null,"type":null}"#,
        #"{"na\u006de":"escaped key"}"#, #"{"name":"a","na\u006de":"b"}"#, #"{"name":"a","name":"b"}"#,
        #"{"name":"a","zzz":1,"aaa":2}"#, #"{"name":"a","\u00e9":1}"#, #"{"name":"a","e\u0301":1,"\u00e9":2}"#, #"{"name":"a","":1}"#,
        #"{"name":"a","Name":1}"#, #"{"name":"a","\u212Aind":1}"#, #"{"name":"a","URL":"x"}"#, #"{"name":"a","url ":"x"}"#,
        #"{"name":5}"#, #"{"name":["a"]}"#, #"{"name":{"a":1}}"#, #"{"name":true}"#,
        #"{"name":"a","password":123}"#, #"{"name":"a","urls":"x"}"#, #"{"name":"a","urls":[]}"#, #"{"name":"a","urls":[ ]}"#,
        #"{"name":"a","urls":["x",null]}"#, #"{"name":"a","urls":["x",1]}"#, #"{"name":"a","urls":[1,"x"]}"#, #"{"name":"a","urls":["x",]}"#,
        #"{"name":"a","urls":["x" "y"]}"#, #"{"name":"a","tags":[["x"]]}"#, #"{"name":"a","tags":[{}]}"#, #"{"name":"a","tags":[null]}"#,
        #"{"name":"a","url":"first","urls":["second"]}"#, #"{"name":"a","tags":[ "x" , "y" ]}"#,
        #"{"name":"a","created":0}"#, #"{"name":"a","created":-9223372036854775808}"#, #"{"name":"a","created":9223372036854775807}"#,
        #"{"name":"a","created":9223372036854775808}"#, #"{"name":"a","created":-9223372036854775809}"#, #"{"name":"a","created":1.5}"#,
        #"{"name":"a","created":1e3}"#, #"{"name":"a","created":1E+3}"#, #"{"name":"a","created":-0.0}"#, #"{"name":"a","created":01}"#,
        #"{"name":"a","created":-}"#, #"{"name":"a","created":1.}"#, #"{"name":"a","created":.5}"#, #"{"name":"a","created":+1}"#,
        #"{"name":"a","created":"1"}"#, #"{"name":"a","created":true}"#, #"{"name":"a","modified":5}"#, #"{"name":"a","created":5}"#,
        #"{"name":"a","fingerprint_login":false}"#, #"{"name":"a","fingerprint_login":1}"#, #"{"name":"a","fingerprint_login":tru}"#,
        #"{"name":"a","fingerprint_login":nul}"#, #"{"name":"a","fingerprint_login":falsey}"#,
        #"{"name":"a","type":"note"}"#, #"{"name":"a","type":"ssh-key"}"#, #"{"name":"a","type":"secret-service"}"#, #"{"name":"a","type":"spaceship"}"#,
        #"{"name":"a","type":1}"#, #"{"name":"a","totp":"not base32 !"}"#, #"{"name":"a","totp":""}"#,
        #"{"name":"a","fields":[]}"#, #"{"name":"a","fields":[1]}"#, #"{"name":"a","fields":{}}"#, #"{"name":"a","fields":"x"}"#,
        #"{"name":"a","fields":[{"name":"x","kind":"text","value":"1","extra":2}]}"#, #"{"name":"a","fields":[{"name":"x","kind":"text"}]}"#,
        #"{"name":"a","fields":[{"name":"x","kind":"bogus","value":"1"}]}"#, #"{"name":"a","fields":[{"name":null,"kind":"text","value":"1"}]}"#,
        #"{"name":"a","fields":[{"name":"x","kind":"text","value":"1"},{"name":"x","kind":"hidden","value":"2"}]}"#,
        #"{"name":"a","fields":[{"name":"x","kind":"totp","value":"bad secret"}]}"#,
        #"{"name":5,"fields":[1]}"#, #"{"pasword":"p","fields":[{"zz":1}]}"#, #"{"name":"a","password_history":[{"password":"p"}]}"#,
        #"{"name":"a","password_history":[{"password":"p","replaced":1.5}]}"#, #"{"name":"a","password_history":[{"password":1,"replaced":1}]}"#,
        #"{"name":"a","password_history":[{"password":"p","replaced":1,"x":1}]}"#, #"{"name":"a","password_history":[1]}"#,
        #"{"name":"a","password_history":[{"password":"1","replaced":1},{"password":"2","replaced":1},{"password":"3","replaced":1},{"password":"4","replaced":1},{"password":"5","replaced":1},{"password":"6","replaced":1},{"password":"7","replaced":1},{"password":"8","replaced":1},{"password":"9","replaced":1},{"password":"10","replaced":1},{"password":"11","replaced":1}]}"#,
        #"{"name":"a","password":"\ud83d"}"#, #"{"name":"a","password":"\ude00"}"#, #"{"name":"a","password":"\ud83dx"}"#,
        #"{"name":"a","password":"\u12"}"#, #"{"name":"a","password":"\x"}"#, #"{"name":"a","password":"\u00G0"}"#,
        "{\"name\":\"a\",\"password\":\"tab\there\"}", "{\"name\":\"a\u{01}\"}",
        #"{"name":"a",}"#, #"{"name":"a""password":"p"}"#, #"{"name":"a":"b"}"#, #"{"name" "a"}"#, #"{name:"a"}"#, #"{'name':'a'}"#,
        #"{"name":"a"} x"#, #"{"name":"a"}}"#, #"{"name":"a""#, #"{"name":"a"#, #"{"name":"#, #"{"#, "", " ", #"[]"#, #"[{"name":"a"}]"#,
        #""a""#, "1", "null", "true",
        #"{"name":"a","x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
        #"{"name":"a","tags":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
        #"{"name":"a","x":{"y":[1,2,{"z":null}],"w":"\u00e9"}}"#,
        #"{"name":"a","x":[1,]}"#, #"{"name":"a","x":{"k":1,}}"#, #"{"name":"a","x":{"k":1,"k":2}}"#,
        #"{"name":" a"}"#, #"{"name":"a/../b"}"#, #"{"name":"e\u0301"}"#, #"{"name":"\u00e9"}"#,
    ]

    @Test func everyOddElementDecodesAsTheTreeDid() throws {
        for e in Self.elements { agree(Array(e.utf8)) }
        // The corpus holds items as well as refusals, the full one with every key.
        let decoded = Self.elements.filter { (try? both(Array($0.utf8)).new.get()) != nil }
        #expect(decoded.count >= 25)
        let item = try both(Array(Self.full.utf8)).new.get()
        #expect(item.fields.count == 4 && item.passwordHistory.count == 2 && item.urls.count == 3 && item.fingerprintLogin)
        #expect(item.password == "p\"w\\d/\u{8}\u{C}\n\r\t\u{0}" && item.name == "mail \u{E9}\u{1F600}" && item.modified == 0)
    }

    /// Bytes that are not UTF-8 in keys and values, and a byte-order mark.
    @Test func invalidUTF8AsTheTreeRefusedIt() {
        let cases: [[UInt8]] = [
            Array(#"{"name":""#.utf8) + [0xFF] + Array(#""}"#.utf8),
            Array(#"{"name":"a","password":""#.utf8) + [0xC3] + Array(#""}"#.utf8),
            Array(#"{"name":"a","password":""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""}"#.utf8),
            Array(#"{"name":"a","tags":[""#.utf8) + [0xC0, 0xAF] + Array(#""]}"#.utf8),
            Array(#"{"name":"a",""#.utf8) + [0xFE] + Array(#"":1}"#.utf8),
            Array(#"{"name":"a",""#.utf8) + [0xE9] + Array(#"\u0041":1}"#.utf8),
            [0xEF, 0xBB, 0xBF] + Array(#"{"name":"a"}"#.utf8),
        ]
        for c in cases { agree(c) }
    }

    /// Every prefix of the full item (text cut anywhere), and every byte of it replaced by each
    /// of the grammar's own bytes, a digit, a letter and a byte that is not UTF-8.
    @Test func truncatedAndDamagedTextAsTheTreeDid() {
        let full = Array(Self.full.utf8)
        for n in 0..<full.count { agree(Array(full[..<n])) }
        let bytes: [UInt8] = [0x22, 0x5C, 0x2C, 0x3A, 0x7B, 0x7D, 0x5B, 0x5D, 0x20, 0x30, 0x2D, 0x6E, 0x61, 0xFF]
        for i in 0..<full.count {
            for b in bytes where b != full[i] {
                var damaged = full
                damaged[i] = b
                agree(damaged)
            }
        }
    }

    /// Two faults in either order, with and without a name first: the checks run in one order,
    /// whatever the keys' order, as the tree's did.
    @Test func twoFaultsAreReportedAsTheTreeReportedThem() {
        let faults = [#""name":5"#, #""password":1"#, #""tags":[null]"#, #""created":1.5"#, #""type":"x""#, #""zz":1"#,
                      #""fields":[1]"#, #""password_history":[{"password":"p"}]"#, #""url":[]"#, #""fingerprint_login":"yes""#]
        for a in faults {
            for b in faults where a != b {
                agree(Array("{\(a),\(b)}".utf8))
                agree(Array("{\(b),\(a)}".utf8))
                agree(Array(#"{"name":"n","#.utf8) + Array("\(a),\(b)}".utf8))
            }
        }
    }

    /// A number's text read as `Int64(String)` reads it.
    @Test func numbersReadAsInt64Reads() {
        for t in ["0", "-0", "7", "-7", "1700000000", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                  "-9223372036854775809", "99999999999999999999", "1.0", "1e3", "-", ""] {
            let got = Array(t.utf8).withUnsafeBufferPointer { ItemMembers.int64($0) }
            #expect(got == Int64(t), "\(t)")
        }
    }
}

extension VaultJSONItemTests {
    /// The key table: every key found by its bytes, its spelling one of `VaultJSON.keys`, and
    /// `ItemKey.count` the number of keys.
    @Test func theKeyTableIsVaultJSONsKeys() {
        #expect(ItemKey.count == ItemKey.allCases.count)
        #expect(Set(ItemKey.allCases.map { "\($0.text)" }) == VaultJSON.keys)
        for key in ItemKey.allCases {
            #expect(Array("\(key.text)".utf8).withUnsafeBufferPointer { ItemKey.find($0) } == key)
            #expect(Array("\(key.text)x".utf8).withUnsafeBufferPointer { ItemKey.find($0) } == nil)
        }
    }
}
