public import VaultKit
import FoundationEssentials
import VaultSystem

/// Bitwarden's unencrypted JSON export (`bw export --format json`, or the web vault's
/// "File format: .json"): `{"encrypted": false, "folders": [...], "items": [...]}`, item types
/// 1 login, 2 secure note, 3 card, 4 identity, 5 SSH key.
public enum BitwardenJSON {
    /// Item keys read into vault's own fields (or knowingly not kept); any other key with a value
    /// becomes a custom field.
    static let placed: Set<String> = [
        "id", "organizationId", "folderId", "collectionIds", "type", "reprompt", "name", "notes", "favorite", "fields",
        "login", "secureNote", "card", "identity", "sshKey", "passwordHistory", "revisionDate", "creationDate", "deletedDate",
        "attachments", "key",
    ]

    /// Reads an export.
    /// - Throws: `.usage` naming the entry (by position and name) or the byte's line.
    public static func read(_ bytes: [UInt8], now: Int64) throws -> ImportBatch {
        try read(JSONStreamReader(prefix: bytes) { nil }, now: now)
    }

    /// Reads an export from `reader` as its text arrives: each element of `items` is decoded once
    /// it is read (at most `ImportLimits.item` of text), other keys are passed over unread.
    /// Folders are named on the items at the end, so they may come before or after the items
    /// (vault's own Bitwarden export writes them last).
    /// - Throws: `.usage` naming the entry (by position and name) or the byte's line.
    public static func read(_ reader: JSONStreamReader, now: Int64) throws -> ImportBatch {
        var folders: [String: String] = [:]
        var batch = ImportBatch()
        // The items whose folder or collections are named once every folder is known.
        var foldered: [(index: Int, folder: String?, collections: [String])] = []
        var sawItems = false
        do {
            var index = 0
            try reader.eachMember { key in
                switch key {
                case "encrypted", "passwordProtected":
                    var flag = try reader.value(limit: ImportLimits.item, values: ImportLimits.jsonValues)
                    defer { wipe(&flag) }
                    if Loose.bool(Loose.json(flag[...])) == true {
                        throw VaultError.usage("this Bitwarden export is encrypted", hint: "export it again as '.json' (not '.json (Encrypted)'), import it, then delete it")
                    }
                case "folders" where try reader.peek() == 0x5B, "collections" where try reader.peek() == 0x5B:
                    try reader.eachElement {
                        let f = Loose.json(try reader.value(limit: ImportLimits.item, values: ImportLimits.jsonValues)[...]) as? [String: Any]
                        if let id = Loose.string(f?["id"]), let name = Loose.nonEmpty(f?["name"]) { folders[id] = name }
                    }
                case "items":
                    sawItems = true
                    try reader.eachElement {
                        index += 1
                        let start = try reader.offset()
                        var element: [UInt8]
                        do { element = try reader.value(limit: ImportLimits.item, values: ImportLimits.jsonValues) } catch let e as JSONValueTooLarge {
                            throw ImportLimits.tooLarge("entry \(index) (line \(reader.line(of: start)))", e)
                        }
                        defer { wipe(&element) }
                        guard let o = Loose.json(element[...]) as? [String: Any] else {
                            throw VaultError.usage("entry \(index) (line \(reader.line(of: start))) is not a valid JSON object")
                        }
                        let entry = "entry \(index)" + (Loose.string(o["name"]).map { " ('\($0)')" } ?? "")
                        guard let (item, tagsFromMeta) = try item(o, entry: entry, batch: &batch, now: now) else { return }
                        try batch.add(item, entry: entry)
                        let folder = Loose.string(o["folderId"]), collections = ((o["collectionIds"] as? [Any]) ?? []).compactMap { $0 as? String }
                        if !tagsFromMeta, folder != nil || !collections.isEmpty { foldered.append((batch.items.count - 1, folder, collections)) }
                    }
                default:
                    try reader.skip()
                }
            }
            try reader.finish()
        } catch let e as JSONScan.Malformed {
            throw VaultError.usage("line \(reader.line(of: e.offset)): the Bitwarden export is not valid JSON (\(e.reason))")
        } catch let e as JSONValueTooLarge {
            throw ImportLimits.tooLarge("the value at line \(reader.line(of: e.offset)) of the Bitwarden export", e)
        }
        guard sawItems else { throw VaultError.usage("the Bitwarden export has no \"items\" array") }
        for (index, folder, collections) in foldered {
            let names = (folder.map { [$0] } ?? []) + collections
            batch.items[index].tags.insert(contentsOf: names.compactMap { folders[$0] }, at: 0)
        }
        return batch
    }

    /// The item of one element, and whether its tags came from a `vault:meta` field (then its
    /// folders are not added); nil for one in the trash. Folders and collections are named by
    /// the caller.
    static func item(_ o: [String: Any], entry: String, batch: inout ImportBatch, now: Int64) throws -> (Item, tagsFromMeta: Bool)? {
        if let deleted = o["deletedDate"], !(deleted is JSONNull) {
            batch.skipped["in Bitwarden's trash", default: 0] += 1
            return nil
        }
        guard let type = (o["type"] as? JSONNumber)?.intValue else { throw VaultError.usage("\(entry) has no numeric \"type\"") }
        guard let name = Loose.string(o["name"]) else { throw VaultError.usage("\(entry) has no \"name\"") }
        var item = Item(name: name, now: now)
        item.notes = Loose.nonEmpty(o["notes"])
        if let created = ForeignTime.iso(Loose.string(o["creationDate"])) { item.created = created }
        item.modified = ForeignTime.iso(Loose.string(o["revisionDate"])) ?? item.created
        if Loose.bool(o["favorite"]) == true { item.tags.append("favorite") }
        if (o["reprompt"] as? JSONNumber)?.intValue == 1 {
            item.fields.append(CustomField(name: "bitwarden reprompt", value: "on"))
        }
        switch type {
        case 1:
            item.type = .login
            if let login = o["login"] as? [String: Any] {
                item.username = Loose.nonEmpty(login["username"])
                item.password = Loose.nonEmpty(login["password"])
                item.totp = Loose.nonEmpty(login["totp"])
                for case let u as [String: Any] in (login["uris"] as? [Any]) ?? [] {
                    if let uri = Loose.nonEmpty(u["uri"]) { item.urls.append(uri) }
                }
                if let passkeys = login["fido2Credentials"] as? [Any] { batch.drop("passkeys: vault keeps no FIDO2 credentials", passkeys.count) }
                for (k, v) in login.sorted(by: { $0.key < $1.key })
                where !["username", "password", "totp", "uris", "fido2Credentials", "passwordRevisionDate"].contains(k) {
                    if let t = Loose.text(v) { item.fields.append(CustomField(name: "login \(k)", value: t)) }
                }
            }
        case 2:
            item.type = .note
        case 3:
            item.type = .card
            let c = o["card"] as? [String: Any] ?? [:]
            for (key, label, kind) in [("cardholderName", "cardholder", CustomFieldKind.text), ("brand", "brand", .text),
                                       ("number", "number", .hidden), ("expMonth", "expiry month", .text),
                                       ("expYear", "expiry year", .text), ("code", "security code", .hidden)] {
                if let v = Loose.nonEmpty(c[key]) { item.fields.append(CustomField(name: label, kind: kind, value: v)) }
            }
            for (k, v) in c.sorted(by: { $0.key < $1.key }) where !["cardholderName", "brand", "number", "expMonth", "expYear", "code"].contains(k) {
                if let t = Loose.text(v) { item.fields.append(CustomField(name: k, value: t)) }
            }
        case 4:
            item.type = .identity
            let i = o["identity"] as? [String: Any] ?? [:]
            let order = ["title", "firstName", "middleName", "lastName", "address1", "address2", "address3", "city", "state",
                         "postalCode", "country", "company", "email", "phone", "ssn", "username", "passportNumber", "licenseNumber"]
            for k in order + i.keys.sorted().filter({ !order.contains($0) }) {
                guard let v = i[k], let t = Loose.text(v) else { continue }
                let hidden = ["ssn", "passportNumber", "licenseNumber"].contains(k)
                item.fields.append(CustomField(name: k, kind: hidden ? .hidden : .text, value: t))
            }
        case 5:
            item.type = .note
            item.fields.append(CustomField(name: "bitwarden type", value: "ssh key"))
            let s = o["sshKey"] as? [String: Any] ?? [:]
            for k in s.keys.sorted() {
                if let t = Loose.text(s[k]!) { item.fields.append(CustomField(name: k, kind: k == "privateKey" ? .hidden : .text, value: t)) }
            }
        default:
            item.type = .note
            item.fields.append(CustomField(name: "bitwarden type", value: String(type)))
        }
        for (index, f) in ((o["fields"] as? [Any]) ?? []).enumerated() {
            guard let f = f as? [String: Any] else { throw VaultError.usage("\(entry): fields[\(index)] is not an object") }
            let fname = Loose.string(f["name"]) ?? "field \(index + 1)"
            let value = Loose.string(f["value"]) ?? ""
            switch (f["type"] as? JSONNumber)?.intValue ?? 0 {
            case 1: item.fields.append(CustomField(name: fname, kind: .hidden, value: value))
            case 3: item.fields.append(CustomField(name: fname, value: "linked to " + (Loose.string(f["linkedId"]) ?? "?")))
            default: item.fields.append(CustomField(name: fname, value: value))
            }
        }
        var history: [PasswordChange] = []
        for case let h as [String: Any] in (o["passwordHistory"] as? [Any]) ?? [] {
            guard let p = Loose.string(h["password"]) else { continue }
            history.append(PasswordChange(password: p, replaced: ForeignTime.iso(Loose.string(h["lastUsedDate"])) ?? item.modified))
        }
        item.passwordHistory = history.sorted { $0.replaced < $1.replaced }
        if let a = o["attachments"] as? [Any] { batch.drop("attachments: vault stores no files", a.count) }
        for (k, v) in o.sorted(by: { $0.key < $1.key }) where !placed.contains(k) {
            if let t = Loose.text(v) { item.fields.append(CustomField(name: k, value: t)) }
        }
        let tagsFromMeta = VaultMeta.restore(into: &item)
        return (item, tagsFromMeta)
    }

    /// Bitwarden JSON of `items` (what `vault export --format bitwarden` prints), all at once.
    public static func export(_ items: [Item]) -> [String: Any] {
        var e = Exporter()
        let out = items.map { e.object($0) }
        return ["encrypted": false, "folders": e.folders, "items": out]
    }

    /// Bitwarden JSON one item at a time (the export streams): logins are type 1, every other
    /// type a secure note; custom fields keep their values (hidden and TOTP ones as hidden
    /// fields); tags become folders (the first) and, with what Bitwarden has no place for, a
    /// hidden `vault:meta` field vault reads back. `folders` is complete after the last item.
    public struct Exporter {
        private var folderIDs: [String: String] = [:]
        /// The folders the items named so far, as Bitwarden lists them.
        public private(set) var folders: [[String: Any]] = []

        /// A new exporter.
        public init() {}

        /// The item as a Bitwarden item object.
        public mutating func object(_ item: Item) -> [String: Any] {
            var o: [String: Any] = ["id": UUID().uuidString.lowercased(), "organizationId": JSONNull(), "collectionIds": JSONNull(),
                                    "name": item.name, "notes": item.notes ?? JSONNull(), "favorite": false, "reprompt": 0,
                                    "creationDate": ISOTime.string(item.created),
                                    "revisionDate": ISOTime.string(item.modified),
                                    "deletedDate": JSONNull()]
            if let tag = item.tags.first {
                if folderIDs[tag] == nil {
                    folderIDs[tag] = UUID().uuidString.lowercased()
                    folders.append(["id": folderIDs[tag]!, "name": tag])
                }
                o["folderId"] = folderIDs[tag]!
            } else {
                o["folderId"] = JSONNull()
            }
            if item.type == .login {
                o["type"] = 1
                o["login"] = ["username": item.username ?? JSONNull(), "password": item.password ?? JSONNull(), "totp": item.totp ?? JSONNull(),
                              "uris": item.urls.map { ["match": JSONNull(), "uri": $0] }, "fido2Credentials": [Any]()] as [String: Any]
            } else {
                o["type"] = 2
                o["secureNote"] = ["type": 0]
            }
            var fields: [[String: Any]] = item.fields.map { ["name": $0.name, "value": $0.value, "type": $0.kind.isSecret ? 1 : 0, "linkedId": JSONNull()] }
            if let meta = VaultMeta.encode(item) { fields.append(["name": VaultMeta.fieldName, "value": meta, "type": 1, "linkedId": JSONNull()]) }
            o["fields"] = fields
            o["passwordHistory"] = item.passwordHistory.reversed().map {
                ["lastUsedDate": ISOTime.string($0.replaced), "password": $0.password]
            }
            return o
        }
    }
}

/// What a Bitwarden export cannot hold of a vault item, in one hidden field `vault:meta` (JSON),
/// so vault → Bitwarden → vault loses nothing; Bitwarden shows it as a hidden field.
enum VaultMeta {
    static let fieldName = "vault:meta"

    static func encode(_ item: Item) -> String? {
        var m: [String: Any] = [:]
        if item.type != .login && item.type != .note { m["type"] = item.type.rawValue }
        if item.type != .login {
            // A note carries these only through the meta field.
            if let v = item.username { m["username"] = v }
            if let v = item.password { m["password"] = v }
            if let v = item.totp { m["totp"] = v }
            if !item.urls.isEmpty { m["urls"] = item.urls }
        }
        if item.tags.count > 1 { m["tags"] = item.tags }
        let kinds = item.fields.filter { $0.kind != .text && $0.kind != .hidden }.map { [$0.name, $0.kind.rawValue] }
        if !kinds.isEmpty { m["kinds"] = kinds }
        if item.fingerprintLogin { m["fingerprint_login"] = true }
        if let v = item.origin { m["origin"] = v }
        if let v = item.userPrompt { m["user_prompt"] = v }
        if let v = item.passwordPrompt { m["password_prompt"] = v }
        guard !m.isEmpty else { return nil }
        // Foundation's writer escaped `/` as `\/`; kept, so an export's bytes do not change (a
        // `/` occurs only inside a JSON string).
        return JSONText.text(m).replacingEvery("/", with: "\\/")
    }

    /// Applies the item's `vault:meta` field, if any, and removes it; returns whether it set the
    /// tags (the item's folders are then in it already).
    @discardableResult
    static func restore(into item: inout Item) -> Bool {
        guard let k = item.fields.firstIndex(where: { $0.name == fieldName }),
              let m = Loose.json(Array(item.fields[k].value.utf8)[...]) as? [String: Any] else { return false }
        item.fields.remove(at: k)
        if let t = (m["type"] as? String).flatMap(ItemType.init(rawValue:)) { item.type = t }
        if let v = m["username"] as? String { item.username = v }
        if let v = m["password"] as? String { item.password = v }
        if let v = m["totp"] as? String { item.totp = v }
        if let v = m["urls"] as? [String] { item.urls = v }
        if let v = m["tags"] as? [String] { item.tags = v }
        for case let pair as [String] in (m["kinds"] as? [Any]) ?? [] where pair.count == 2 {
            if let kind = CustomFieldKind(rawValue: pair[1]), let f = item.fields.firstIndex(where: { $0.name == pair[0] }) { item.fields[f].kind = kind }
        }
        if let v = Loose.bool(m["fingerprint_login"]) { item.fingerprintLogin = v }
        item.origin = m["origin"] as? String ?? item.origin
        item.userPrompt = m["user_prompt"] as? String ?? item.userPrompt
        item.passwordPrompt = m["password_prompt"] as? String ?? item.passwordPrompt
        return m["tags"] is [String]
    }
}
