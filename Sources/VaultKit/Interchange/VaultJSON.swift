import Foundation

/// vault's own portable JSON: an array of objects, one per item, with every field an item holds
/// (the fingerprint-login switch and the login prompt patterns included), so `export | import`
/// loses nothing. Reading is strict: an unknown key or a wrong type is a usage error naming the
/// item and the key, never silently dropped.
public enum VaultJSON {
    /// The keys of one item object.
    public static let keys: Set<String> = [
        "name", "username", "password", "url", "urls", "notes", "tags", "totp", "origin", "created", "modified",
        "fingerprint_login", "user_prompt", "password_prompt",
    ]

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
    }

    /// Parses an export. Items without `created` are stamped `now`.
    /// - Throws: `.usage` naming the item (by position and name) and the key.
    public static func items(from bytes: [UInt8], now: Int64 = unixNow()) throws -> [Item] {
        guard !JSONDepth.exceeds(bytes), let array = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [Any] else {
            throw VaultError.usage("the input is not a JSON array of items", hint: "see 'vault help import'")
        }
        return try array.enumerated().map { index, element in
            let position = "item \(index + 1)"
            guard let o = element as? [String: Any] else { throw VaultError.usage("\(position) is not a JSON object") }
            let label = (o["name"] as? String).map { "\(position) ('\($0)')" } ?? position
            if let unknown = o.keys.sorted().first(where: { !keys.contains($0) }) {
                throw VaultError.usage("\(label) has an unknown key '\(unknown)'", hint: "keys: \(keys.sorted().joined(separator: ", "))")
            }
            let f: Fields
            do {
                f = try JSONDecoder().decode(Fields.self, from: try JSONSerialization.data(withJSONObject: o))
            } catch let DecodingError.typeMismatch(_, context) {
                throw VaultError.usage("\(label): '\(context.codingPath.first?.stringValue ?? "?")' has the wrong type")
            } catch let DecodingError.dataCorrupted(context) {
                throw VaultError.usage("\(label): '\(context.codingPath.first?.stringValue ?? "?")' is not valid")
            } catch let DecodingError.valueNotFound(_, context) {
                // `"tags": [null]`: a null inside a list (a null value of a key reads as absent).
                throw VaultError.usage("\(label): '\(context.codingPath.first?.stringValue ?? "?")' holds a null")
            } catch {
                throw VaultError.usage("\(label) cannot be read")
            }
            guard let name = f.name else { throw VaultError.usage("\(position) has no name") }
            var urls = f.urls ?? []
            if let one = f.url { urls.insert(one, at: 0) }
            var item = Item(name: name, username: f.username, password: f.password, urls: urls, notes: f.notes,
                            tags: f.tags ?? [], totp: f.totp, fingerprintLogin: f.fingerprint_login ?? false,
                            origin: f.origin, now: now)
            item.userPrompt = f.user_prompt
            item.passwordPrompt = f.password_prompt
            item.created = f.created ?? now
            item.modified = f.modified ?? item.created
            return item
        }
    }
}
