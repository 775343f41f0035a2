public import VaultKit
import FoundationEssentials
import VaultSystem

/// vault's own portable JSON: an array of objects, one per item, with every field an item holds
/// (the fingerprint-login switch and the login prompt patterns included), so `export | import`
/// loses nothing. Reading is strict: an unknown key or a wrong type is a usage error naming the
/// item and the key, never silently dropped.
public enum VaultJSON {
    /// The keys of one item object.
    public static let keys: Set<String> = [
        "name", "username", "password", "url", "urls", "notes", "tags", "totp", "origin", "created", "modified",
        "fingerprint_login", "user_prompt", "password_prompt", "type", "fields", "password_history",
    ]
    /// The keys of one object of `fields`.
    public static let fieldKeys: Set<String> = ["name", "kind", "value"]
    /// The keys of one object of `password_history`.
    public static let historyKeys: Set<String> = ["password", "replaced"]

    /// One item as an object (secrets included: the caller released them).
    public static func object(_ item: Item) -> [String: Any] {
        var o: [String: Any] = ["name": item.name, "urls": item.urls, "tags": item.tags,
                                "fingerprint_login": item.fingerprintLogin, "created": item.created, "modified": item.modified]
        if let v = item.username { o["username"] = v }
        if let v = item.password { o["password"] = v }
        if let v = item.notes { o["notes"] = v }
        if let v = item.totp { o["totp"] = v }
        if let v = item.origin { o["origin"] = v }
        if let v = item.userPrompt { o["user_prompt"] = v }
        if let v = item.passwordPrompt { o["password_prompt"] = v }
        o["type"] = item.type.rawValue
        if !item.fields.isEmpty { o["fields"] = item.fields.map { ["name": $0.name, "kind": $0.kind.rawValue, "value": $0.value] } }
        if !item.passwordHistory.isEmpty { o["password_history"] = item.passwordHistory.map { ["password": $0.password, "replaced": $0.replaced] } }
        return o
    }

    /// Parses an export, one element at a time (the array is split without decoding it whole).
    /// Items without `created` are stamped `now`.
    /// - Throws: `.usage` naming the item (by position and name) and the key.
    public static func items(from bytes: [UInt8], now: Int64 = unixNow()) throws -> [Item] {
        try batch(from: bytes, now: now).items
    }

    /// Parses an export into a batch (names kept exactly; a name given twice is an error).
    public static func batch(from bytes: [UInt8], now: Int64 = unixNow()) throws -> ImportBatch {
        guard !JSONDepth.exceeds(bytes), let elements = try? JSONScan.elements(bytes) else {
            throw VaultError.usage("the input is not a JSON array of items", hint: "see 'vault help import'")
        }
        var batch = ImportBatch()
        try bytes.withUnsafeBufferPointer { b in
            for (index, range) in elements.enumerated() {
                guard range.count <= ImportLimits.item else { throw ImportLimits.tooLarge("item \(index + 1)") }
                try batch.addOwn(try item(UnsafeBufferPointer(rebasing: b[range]), index: index + 1, now: now), entry: "item \(index + 1)")
            }
        }
        return batch
    }

    /// Parses a streamed export, one element at a time as it is read.
    public static func batch(from stream: inout JSONArrayStream, now: Int64 = unixNow()) throws -> ImportBatch {
        var batch = ImportBatch(), index = 0
        while let item = try next(from: &stream, index: &index, now: now) { try batch.addOwn(item, entry: "item \(index)") }
        return batch
    }

    /// The next item of a streamed export, or nil at its end: what a streamed import pulls into
    /// the vault one at a time. `index` counts the elements read (for messages); `batch` counts
    /// the items by type without keeping them, and with `checkingNames` refuses a name given
    /// twice (without it, the caller's vault does: its unique index of names answers).
    public static func next(from stream: inout JSONArrayStream, index: inout Int, now: Int64, counting batch: inout ImportBatch,
                            checkingNames: Bool = true) throws -> Item? {
        let item = try next(from: &stream, index: &index, now: now)
        if let item { try batch.passOwn(item, entry: "item \(index)", claimingName: checkingNames) }
        return item
    }

    private static func next(from stream: inout JSONArrayStream, index: inout Int, now: Int64) throws -> Item? {
        do {
            // Decoded where the stream holds the element's bytes (no copy of each element).
            return try stream.withNext { element in
                index += 1
                return try item(element, index: index, now: now)
            }
        } catch is JSONScan.Malformed {
            throw VaultError.usage(index == 0 ? "the input is not a JSON array of items" : "the JSON array breaks after item \(index)",
                                   hint: "see 'vault help import'")
        } catch is JSONValueTooLarge {
            throw ImportLimits.tooLarge("item \(index + 1)")
        }
    }

    /// One element (item `index`, from 1), read in place in one strict pass (`ItemMembers`, the
    /// grammar `JSONValue` reads) and checked key by key: an unknown key, a wrong type, an
    /// invalid value or a null in a list names the item and the key's path. The checks run in
    /// one fixed order, whatever the order of the keys, so an element with two faults is
    /// refused for the same one every time.
    static func item(_ element: UnsafeBufferPointer<UInt8>, index: Int, now: Int64) throws -> Item {
        guard let o = try? ItemMembers(element) else { throw VaultError.usage("item \(index) is not a JSON object") }
        let f = Typed(index: index, name: o[.name])
        if let unknown = o.unknown.min() {
            throw VaultError.usage("\(f.label) has an unknown key '\(unknown)'", hint: "keys: \(keys.sorted().joined(separator: ", "))")
        }
        try checkKeys(of: o[.fields], "fields", allowed: fieldKeys, f)
        try checkKeys(of: o[.passwordHistory], "password_history", allowed: historyKeys, f)
        guard let name = try f.string(o[.name], "name") else { throw VaultError.usage("\(f.position) has no name") }
        let username = try f.string(o[.username], "username"), password = try f.string(o[.password], "password")
        var urls = try f.strings(o[.urls], "urls") ?? []
        if let one = try f.string(o[.url], "url") { urls.insert(one, at: 0) }
        let notes = try f.string(o[.notes], "notes"), tags = try f.strings(o[.tags], "tags") ?? [], totp = try f.string(o[.totp], "totp")
        let origin = try f.string(o[.origin], "origin"), created = try f.int64(o[.created], "created"), modified = try f.int64(o[.modified], "modified")
        let fingerprintLogin = try f.bool(o[.fingerprintLogin], "fingerprint_login")
        let userPrompt = try f.string(o[.userPrompt], "user_prompt"), passwordPrompt = try f.string(o[.passwordPrompt], "password_prompt")
        let type = try f.string(o[.type], "type").map { t in
            guard let type = ItemType(rawValue: t) else { throw VaultError.usage("\(f.label): 'type' is not valid") }
            return type
        }
        let fields: [CustomField] = try f.objects(o[.fields], "fields") { e, path in
            let kindName = try f.required(f.string(e["kind"], path + ".kind"), path + ".kind", e)
            guard let kind = CustomFieldKind(rawValue: kindName) else { throw VaultError.usage("\(f.label): '\(path).kind' is not valid") }
            return CustomField(name: try f.required(f.string(e["name"], path + ".name"), path + ".name", e), kind: kind,
                               value: try f.required(f.string(e["value"], path + ".value"), path + ".value", e))
        } ?? []
        let history: [PasswordChange] = try f.objects(o[.passwordHistory], "password_history") { e, path in
            PasswordChange(password: try f.required(f.string(e["password"], path + ".password"), path + ".password", e),
                           replaced: try f.required(f.int64(e["replaced"], path + ".replaced"), path + ".replaced", e))
        } ?? []
        var item = Item(name: name, type: type ?? .login, username: username, password: password, urls: urls, notes: notes,
                        tags: tags, totp: totp, fields: fields, passwordHistory: history,
                        fingerprintLogin: fingerprintLogin ?? false, origin: origin, now: now)
        if let t = item.totp {
            do { item.totp = try OTP.normalize(t, label: name) } catch let e as VaultError { throw VaultError.usage("\(f.label): 'totp': \(e.message)") }
        }
        for k in item.fields.indices where item.fields[k].kind == .totp {
            do { item.fields[k].value = try OTP.normalize(item.fields[k].value, label: name) } catch let e as VaultError {
                throw VaultError.usage("\(f.label): 'fields[\(k)].value': \(e.message)")
            }
        }
        var seen: Set<String> = []
        for field in item.fields where !seen.insert(field.name).inserted {
            throw VaultError.usage("\(f.label): the custom field '\(field.name)' appears twice")
        }
        guard item.passwordHistory.count <= Item.historyLimit else {
            throw VaultError.usage("\(f.label): 'password_history' holds more than \(Item.historyLimit) passwords")
        }
        item.userPrompt = userPrompt
        item.passwordPrompt = passwordPrompt
        item.created = created ?? now
        item.modified = modified ?? item.created
        return item
    }

    /// Checks that each element of the list `member` (when it is one) is an object of `allowed` keys.
    private static func checkKeys(of member: ItemMember, _ list: String, allowed: Set<String>, _ f: Typed) throws {
        guard case .value(.array(let elements)) = member else { return }
        for (k, element) in elements.enumerated() {
            guard case .object(let inner) = element else { throw VaultError.usage("\(f.label): '\(list)[\(k)]' is not an object") }
            if let unknown = inner.map(\.key).sorted().first(where: { !allowed.contains($0) }) {
                throw VaultError.usage("\(f.label) has an unknown key '\(list)[\(k)].\(unknown)'", hint: "keys: \(allowed.sorted().joined(separator: ", "))")
            }
        }
    }

    /// Reads typed values out of one item's members (and the `JSONValue`s of its lists of
    /// objects); a key that is absent or null is nil (as an optional field reads), a value of
    /// another type is an error naming the item and the path.
    private struct Typed {
        /// The item's position (from 1), and its name when that is a string (for the label).
        let index: Int
        let name: String?

        init(index: Int, name member: ItemMember) {
            self.index = index
            if case .string(let n) = member { name = n } else { name = nil }
        }

        /// How messages name the item: `item 3`.
        var position: String { "item \(index)" }
        /// How messages name the item once its name is known: `item 3 ('mail')`.
        var label: String { name.map { "\(position) ('\($0)')" } ?? position }

        func wrongType(_ path: String) -> VaultError { .usage("\(label): '\(path)' has the wrong type") }

        func string(_ m: ItemMember, _ path: String) throws -> String? {
            switch m {
            case .absent, .null: return nil
            case .string(let s): return s
            default: throw wrongType(path)
            }
        }

        func int64(_ m: ItemMember, _ path: String) throws -> Int64? {
            switch m {
            case .absent, .null: return nil
            case .number(let n):
                guard let n else { throw VaultError.usage("\(label): '\(path)' is not valid") }
                return n
            default: throw wrongType(path)
            }
        }

        func bool(_ m: ItemMember, _ path: String) throws -> Bool? {
            switch m {
            case .absent, .null: return nil
            case .bool(let b): return b
            default: throw wrongType(path)
            }
        }

        /// A list of strings; a null inside it is an error (only a whole key may be null).
        func strings(_ m: ItemMember, _ path: String) throws -> [String]? {
            switch m {
            case .absent, .null: return nil
            case .strings(let s): return s
            case .value(.array(let elements)):
                return try elements.enumerated().map { k, e in
                    if e == .null { throw VaultError.usage("\(label): '\(path)[\(k)]' holds a null") }
                    guard case .string(let s) = e else { throw wrongType("\(path)[\(k)]") }
                    return s
                }
            default: throw wrongType(path)
            }
        }

        /// A list of objects, each read by `read` with its path (`fields[2]`).
        func objects<T>(_ m: ItemMember, _ path: String, _ read: (JSONValue, String) throws -> T) throws -> [T]? {
            switch m {
            case .absent, .null: return nil
            case .value(.array(let elements)): return try elements.enumerated().map { k, e in try read(e, "\(path)[\(k)]") }
            default: throw wrongType(path)
            }
        }

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

        /// A key a list's object must have: missing, or null, is an error.
        func required<T>(_ value: T?, _ path: String, _ object: JSONValue) throws -> T {
            if let value { return value }
            let key = String(path[path.index(after: path.lastIndex(of: ".")!)...])
            throw VaultError.usage("\(label): '\(path)' \(object[key] == nil ? "is missing" : "holds a null")")
        }
    }
}
