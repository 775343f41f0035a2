import Foundation
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

    /// The fields of one object, typed: JSONDecoder tells a number from `true`.
    private struct Fields: Decodable {
        var name: String?
        var username: String?
        var password: String?
        var url: String?
        var urls: [String]?
        var notes: String?
        var tags: [String]?
        var totp: String?
        var origin: String?
        var created: Int64?
        var modified: Int64?
        var fingerprint_login: Bool?
        var user_prompt: String?
        var password_prompt: String?
        var type: ItemType?
        var fields: [CustomField]?
        var password_history: [PasswordChange]?
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
        for (index, range) in elements.enumerated() {
            try batch.addOwn(try item(bytes[range], position: "item \(index + 1)", now: now), entry: "item \(index + 1)")
        }
        return batch
    }

    /// Parses a streamed export, one element at a time as it is read.
    public static func batch(from stream: inout JSONArrayStream, now: Int64 = unixNow()) throws -> ImportBatch {
        var batch = ImportBatch()
        var index = 0
        while true {
            var element: [UInt8]
            do {
                guard let e = try stream.next() else { break }
                element = e
            } catch is JSONScan.Malformed {
                throw VaultError.usage(index == 0 ? "the input is not a JSON array of items" : "the JSON array breaks after item \(index)",
                                       hint: "see 'vault help import'")
            }
            index += 1
            defer { wipe(&element) }
            try batch.addOwn(try item(element[...], position: "item \(index)", now: now), entry: "item \(index)")
        }
        return batch
    }

    /// One element.
    static func item(_ slice: ArraySlice<UInt8>, position: String, now: Int64) throws -> Item {
        guard let o = Loose.json(slice) as? [String: Any] else { throw VaultError.usage("\(position) is not a JSON object") }
        let label = (o["name"] as? String).map { "\(position) ('\($0)')" } ?? position
        if let unknown = o.keys.sorted().first(where: { !keys.contains($0) }) {
            throw VaultError.usage("\(label) has an unknown key '\(unknown)'", hint: "keys: \(keys.sorted().joined(separator: ", "))")
        }
        for (list, allowed) in [("fields", fieldKeys), ("password_history", historyKeys)] {
            for (k, element) in ((o[list] as? [Any]) ?? []).enumerated() {
                guard let inner = element as? [String: Any] else { throw VaultError.usage("\(label): '\(list)[\(k)]' is not an object") }
                if let unknown = inner.keys.sorted().first(where: { !allowed.contains($0) }) {
                    throw VaultError.usage("\(label) has an unknown key '\(list)[\(k)].\(unknown)'", hint: "keys: \(allowed.sorted().joined(separator: ", "))")
                }
            }
        }
        let f: Fields
        func where_(_ path: [any CodingKey]) -> String {
            path.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined().trimmingCharacters(in: CharacterSet(charactersIn: "."))
                .replacingOccurrences(of: ".[", with: "[")
        }
        do {
            f = try JSONDecoder().decode(Fields.self, from: Data(slice))
        } catch let DecodingError.typeMismatch(_, context) {
            throw VaultError.usage("\(label): '\(where_(context.codingPath))' has the wrong type")
        } catch let DecodingError.dataCorrupted(context) {
            throw VaultError.usage("\(label): '\(where_(context.codingPath))' is not valid")
        } catch let DecodingError.valueNotFound(_, context) {
            // `"tags": [null]`: a null inside a list (a null value of a key reads as absent).
            throw VaultError.usage("\(label): '\(where_(context.codingPath))' holds a null")
        } catch let DecodingError.keyNotFound(key, context) {
            throw VaultError.usage("\(label): '\(where_(context.codingPath + [key]))' is missing")
        } catch {
            throw VaultError.usage("\(label) cannot be read")
        }
        guard let name = f.name else { throw VaultError.usage("\(position) has no name") }
        var urls = f.urls ?? []
        if let one = f.url { urls.insert(one, at: 0) }
        var item = Item(name: name, type: f.type ?? .login, username: f.username, password: f.password, urls: urls, notes: f.notes,
                        tags: f.tags ?? [], totp: f.totp, fields: f.fields ?? [], passwordHistory: f.password_history ?? [],
                        fingerprintLogin: f.fingerprint_login ?? false, origin: f.origin, now: now)
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
        item.userPrompt = f.user_prompt
        item.passwordPrompt = f.password_prompt
        item.created = f.created ?? now
        item.modified = f.modified ?? item.created
        return item
    }
}
