import VaultKit
import FoundationEssentials
import VaultSystem

/// 1Password's unencrypted export (1PUX): a zip whose `export.data` is JSON
/// `{"accounts": [{"attrs": {...}, "vaults": [{"attrs": {"name": ...}, "items": [...]}]}]}`.
/// Each item has a `categoryUuid` (001 login, 002 credit card, 003 secure note, 004 identity,
/// 005 password, others), `details` (`loginFields`, `notesPlain`, `sections` of typed fields,
/// `passwordHistory`) and an `overview` (`title`, `url`, `urls`, `tags`). This reads `export.data`;
/// the zip is opened by the caller (libarchive).
public enum OnePUX {
    /// 1Password's expiry number YYYYMM as `YYYY-MM` (`%04d-%02d`).
    static func monthYear(_ n: Int) -> String {
        func padded(_ v: Int, _ width: Int) -> String {
            let digits = String(v)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return padded(n / 100, 4) + "-" + padded(n % 100, 2)
    }

    /// Reads `export.data`.
    /// - Throws: `.usage` naming the entry.
    public static func read(exportData bytes: [UInt8], now: Int64) throws -> ImportBatch {
        try read(JSONStreamReader(prefix: bytes) { nil }, now: now)
    }

    /// Reads `export.data` from `reader` as it is inflated: each item is decoded once its text is
    /// read (at most `ImportLimits.item`), every other key passed over unread. A vault's name may
    /// come before or after its items (it is added to their tags when the vault ends).
    /// - Throws: `.usage` naming the entry, or what is wrong with the JSON.
    public static func read(_ reader: JSONStreamReader, now: Int64) throws -> ImportBatch {
        var batch = ImportBatch()
        var index = 0
        // A key of another type than the export's is passed over, as if absent.
        func whenNext(is byte: UInt8, _ body: () throws -> Void) throws {
            if try reader.peek() == byte { try body() } else { try reader.skip() }
        }
        do {
            guard try reader.peek() == 0x7B else { throw VaultError.usage("export.data in the 1PUX archive is not a JSON object") }
            try reader.eachMember { key in
                guard key == "accounts" else { return try reader.skip() }
                try whenNext(is: 0x5B) {
                    try reader.eachElement {
                        try whenNext(is: 0x7B) {
                            try reader.eachMember { key in
                                guard key == "vaults" else { return try reader.skip() }
                                try whenNext(is: 0x5B) {
                                    try reader.eachElement {
                                        try whenNext(is: 0x7B) { try readVault(reader, index: &index, into: &batch, now: now) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            try reader.finish()
        } catch let e as JSONScan.Malformed {
            throw VaultError.usage("export.data in the 1PUX archive is not valid JSON (line \(reader.line(of: e.offset)): \(e.reason))")
        } catch let e as JSONValueTooLarge {
            throw ImportLimits.tooLarge("the value at line \(reader.line(of: e.offset)) of export.data", e)
        }
        return batch
    }

    /// Reads the object of one vault: its `attrs` and its `items`.
    private static func readVault(_ reader: JSONStreamReader, index: inout Int, into batch: inout ImportBatch, now: Int64) throws {
        var vaultName: String?
        let first = batch.items.count
        try reader.eachMember { key in
            switch key {
            case "attrs":
                var attrs = try reader.value(limit: ImportLimits.item, values: ImportLimits.jsonValues)
                defer { wipe(&attrs) }
                vaultName = Loose.nonEmpty((Loose.json(attrs[...]) as? [String: Any])?["name"])
            case "items" where try reader.peek() == 0x5B:
                try reader.eachElement {
                    index += 1
                    var element: [UInt8]
                    do { element = try reader.value(limit: ImportLimits.item, values: ImportLimits.jsonValues) } catch let e as JSONValueTooLarge {
                        throw ImportLimits.tooLarge("entry \(index)", e)
                    }
                    defer { wipe(&element) }
                    // Some versions wrap each item as {"item": {...}}.
                    guard var o = Loose.json(element[...]) as? [String: Any] else { throw VaultError.usage("entry \(index) is not a JSON object") }
                    if let inner = o["item"] as? [String: Any] { o = inner }
                    let title = Loose.string((o["overview"] as? [String: Any])?["title"])
                    let entry = "entry \(index)" + (title.map { " ('\($0)')" } ?? "")
                    if Loose.bool(o["trashed"]) == true || Loose.string(o["state"]) == "deleted" {
                        batch.skipped["in 1Password's trash", default: 0] += 1
                        return
                    }
                    try batch.add(item(o, entry: entry, batch: &batch, now: now), entry: entry)
                }
            default:
                try reader.skip()
            }
        }
        if let vaultName {
            for k in first..<batch.items.count { batch.items[k].tags.insert(vaultName, at: 0) }
        }
    }

    /// The item of one element (its vault's name is added to its tags by the caller).
    static func item(_ o: [String: Any], entry: String, batch: inout ImportBatch, now: Int64) throws -> Item {
        guard let overview = o["overview"] as? [String: Any], let details = o["details"] as? [String: Any] else {
            throw VaultError.usage("\(entry) has no \"overview\" and \"details\"")
        }
        var item = Item(name: Loose.string(overview["title"]) ?? "untitled", now: now)
        let category = Loose.string(o["categoryUuid"]) ?? "001"
        switch category {
        case "001", "005": item.type = .login
        case "002": item.type = .card
        case "003": item.type = .note
        case "004": item.type = .identity
        default:
            item.type = .note
            item.fields.append(CustomField(name: "1password category", value: Self.categories[category] ?? category))
        }
        if let c = (o["createdAt"] as? JSONNumber)?.int64Value { item.created = c }
        item.modified = (o["updatedAt"] as? JSONNumber)?.int64Value ?? item.created
        if let u = Loose.nonEmpty(overview["url"]) { item.urls.append(u) }
        for case let u as [String: Any] in (overview["urls"] as? [Any]) ?? [] {
            if let url = Loose.nonEmpty(u["url"]), !item.urls.contains(url) { item.urls.append(url) }
        }
        for case let t as String in (overview["tags"] as? [Any]) ?? [] { item.tags.append(t) }
        if (o["favIndex"] as? JSONNumber)?.intValue ?? 0 > 0 { item.tags.append("favorite") }
        if Loose.string(o["state"]) == "archived" { item.tags.append("archived") }
        item.notes = Loose.nonEmpty(details["notesPlain"])
        for case let f as [String: Any] in (details["loginFields"] as? [Any]) ?? [] {
            guard let value = Loose.nonEmpty(f["value"]) else { continue }
            switch Loose.string(f["designation"]) {
            case "username" where item.username == nil: item.username = value
            case "password" where item.password == nil: item.password = value
            default:
                let name = Loose.nonEmpty(f["name"]) ?? Loose.nonEmpty(f["id"]) ?? "login field"
                item.fields.append(CustomField(name: name, kind: Loose.string(f["fieldType"]) == "P" ? .hidden : .text, value: value))
            }
        }
        if let password = Loose.nonEmpty(details["password"]), item.password == nil { item.password = password }
        for case let section as [String: Any] in (details["sections"] as? [Any]) ?? [] {
            let sectionTitle = Loose.nonEmpty(section["title"])
            for case let f as [String: Any] in (section["fields"] as? [Any]) ?? [] {
                guard let valueObject = f["value"] as? [String: Any], let (kindName, raw) = valueObject.first else { continue }
                var name = Loose.nonEmpty(f["title"]) ?? Loose.nonEmpty(f["id"]) ?? kindName
                if let sectionTitle, item.fields.contains(where: { $0.name == name }) { name = "\(sectionTitle): \(name)" }
                switch kindName {
                case "totp":
                    guard let v = Loose.nonEmpty(raw) else { continue }
                    if item.totp == nil { item.totp = v } else {
                        item.fields.append(CustomField(name: name, kind: .totp, value: try OTP.normalize(v, label: name)))
                    }
                case "concealed", "creditCardNumber":
                    if let v = Loose.nonEmpty(raw) { item.fields.append(CustomField(name: name, kind: .hidden, value: v)) }
                case "url":
                    if let v = Loose.nonEmpty(raw) { item.fields.append(CustomField(name: name, kind: .url, value: v)) }
                case "date":
                    if let n = (raw as? JSONNumber)?.doubleValue, n.isFinite, abs(n) < 1e15 {
                        item.fields.append(CustomField(name: name, value: String(ISOTime.string(Int64(n.rounded(.down))).prefix(10))))
                    }
                case "monthYear":
                    // 1Password writes an expiry as the number YYYYMM.
                    if let n = (raw as? JSONNumber)?.intValue, n > 0 { item.fields.append(CustomField(name: name, value: Self.monthYear(n))) }
                case "email":
                    if let e = raw as? [String: Any], let v = Loose.nonEmpty(e["email_address"]) {
                        item.fields.append(CustomField(name: name, value: v))
                    } else if let v = Loose.nonEmpty(raw) { item.fields.append(CustomField(name: name, value: v)) }
                case "address":
                    if let a = raw as? [String: Any] {
                        let parts = ["street", "city", "state", "zip", "country"].compactMap { Loose.nonEmpty(a[$0]) }
                        if !parts.isEmpty { item.fields.append(CustomField(name: name, value: parts.joinedText(separator: ", "))) }
                    }
                default:
                    if let v = Loose.text(raw) { item.fields.append(CustomField(name: name, value: v)) }
                }
            }
        }
        var history: [PasswordChange] = []
        for case let h as [String: Any] in (details["passwordHistory"] as? [Any]) ?? [] {
            if let p = Loose.string(h["value"]) { history.append(PasswordChange(password: p, replaced: (h["time"] as? JSONNumber)?.int64Value ?? item.modified)) }
        }
        item.passwordHistory = history.sorted { $0.replaced < $1.replaced }
        if details["documentAttributes"] != nil { batch.drop("attachments: vault stores no files") }
        if let passkey = details["passkey"], !(passkey is JSONNull) { batch.drop("passkeys: vault keeps no FIDO2 credentials") }
        return item
    }

    static let categories = [
        "006": "document", "100": "software license", "101": "bank account", "102": "database", "103": "driver license",
        "104": "outdoor license", "105": "membership", "106": "passport", "107": "reward program", "108": "social security number",
        "109": "wireless router", "110": "server", "111": "email account", "112": "api credential", "113": "medical record",
        "114": "ssh key", "115": "crypto wallet",
    ]
}
