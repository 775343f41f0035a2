import VaultKit
import FoundationEssentials
internal import VaultSystem

/// The CSV exports vault reads, told apart by their header row; a column vault has no field for
/// becomes a custom text field of that name, never dropped.
public enum ForeignCSV {
    static let bitwarden = ["folder", "favorite", "type", "name", "notes", "fields", "reprompt", "login_uri", "login_username", "login_password", "login_totp"]
    static let keepassxc = ["Group", "Title", "Username", "Password", "URL", "Notes", "TOTP", "Icon", "Last Modified", "Created"]
    static let onePassword = ["Title", "Url", "Username", "Password", "OTPAuth", "Favorite", "Archived", "Tags", "Notes"]
    static let chrome = ["name", "url", "username", "password"]
    static let firefox = ["url", "username", "password", "httpRealm", "formActionOrigin", "guid", "timeCreated", "timeLastUsed", "timePasswordChanged"]

    /// The format whose header this is.
    static func detect(header: [String]) -> ImportFormat? {
        let h = Set(header)
        if h.isSuperset(of: ["type", "name", "login_uri", "login_username", "login_password"]) { return .bitwardenCSV }
        if h.isSuperset(of: ["Group", "Title", "Username", "Password", "URL", "Notes"]) { return .keepassxcCSV }
        if h.isSuperset(of: ["Title", "Username", "Password"]) && (h.contains("Url") || h.contains("OTPAuth")) { return .onePasswordCSV }
        if h.isSuperset(of: ["url", "username", "password", "formActionOrigin"]) || h.isSuperset(of: ["url", "username", "password", "guid"]) { return .firefoxCSV }
        if h.isSuperset(of: ["name", "url", "username", "password"]) { return .chromeCSV }
        return nil
    }

    /// Reads a CSV export of `format`.
    /// - Throws: `.usage` naming the line of a malformed row.
    public static func read(_ bytes: [UInt8], format: ImportFormat, now: Int64) throws -> ImportBatch {
        var reader = CSVReader(bytes)
        return try read(&reader, format: format, now: now)
    }

    /// Reads a CSV export of `format` row by row from `reader`.
    /// - Throws: `.usage` naming the line of a malformed row, a row over `ImportLimits.item`, or
    ///   an import that would hold more than `ImportLimits.held`.
    public static func read(_ reader: inout CSVReader, format: ImportFormat, now: Int64) throws -> ImportBatch {
        guard let header = try reader.next() else { throw VaultError.usage("the file is empty") }
        let required: [String]
        switch format {
        case .bitwardenCSV: required = ["type", "name", "login_uri", "login_username", "login_password"]
        case .keepassxcCSV: required = ["Group", "Title", "Username", "Password", "URL", "Notes"]
        case .onePasswordCSV: required = ["Title", "Username", "Password"]
        case .chromeCSV: required = ["name", "url", "username", "password"]
        case .firefoxCSV: required = ["url", "username", "password"]
        default: throw VaultError.usage("\(format.rawValue) is not a CSV format")
        }
        if let missing = required.first(where: { !header.fields.contains($0) }) {
            throw VaultError.usage("line 1: the header has no '\(missing)' column: this is not \(format.label)",
                                   hint: "the header found: \(header.fields.prefix(12).joinedText(separator: ","))")
        }
        var batch = ImportBatch()
        while let row = try reader.next() {
            guard row.fields.count == header.fields.count else {
                throw VaultError.usage("line \(row.line): \(row.fields.count) fields, the header has \(header.fields.count)")
            }
            var columns: [String: String] = [:]
            for (k, v) in zip(header.fields, row.fields) { columns[k] = v }
            let entry = "line \(row.line)"
            var used: Set<String> = []
            func take(_ key: String) -> String? {
                used.insert(key)
                guard let v = columns[key], !v.isEmpty else { return nil }
                return v
            }
            var item: Item
            switch format {
            case .bitwardenCSV:
                item = Item(name: take("name") ?? "untitled", now: now)
                switch take("type") ?? "login" {
                case "login": item.type = .login
                case "note": item.type = .note
                case let other: throw VaultError.usage("\(entry): unknown type '\(other)' (login or note)")
                }
                item.notes = take("notes")
                if let folder = take("folder") ?? take("collections") { item.tags += folder.split(separator: ",").map(String.init) }
                if take("favorite") == "1" { item.tags.append("favorite") }
                if take("reprompt") == "1" { item.fields.append(CustomField(name: "bitwarden reprompt", value: "on")) }
                item.urls = (take("login_uri") ?? "").split(separator: ",").map { $0.trimmed(.whitespaces) }.filter { !$0.isEmpty }
                item.username = take("login_username")
                item.password = take("login_password")
                item.totp = take("login_totp")
                // `fields` holds one `name: value` per line.
                for line in (take("fields") ?? "").split(separator: "\n", omittingEmptySubsequences: true) {
                    if let sep = line.byteRange(of: ": ") {
                        item.fields.append(CustomField(name: String(line[..<sep.lowerBound]), value: String(line[sep.upperBound...])))
                    } else {
                        item.fields.append(CustomField(name: String(line), value: ""))
                    }
                }
                VaultMeta.restore(into: &item)
            case .keepassxcCSV:
                item = Item(name: take("Title") ?? "untitled", now: now)
                item.username = take("Username")
                item.password = take("Password")
                if let u = take("URL") { item.urls = [u] }
                item.notes = take("Notes")
                item.totp = take("TOTP")
                if let g = take("Group") {
                    // The first component is the database's root group ("Root", "Passwords").
                    let path = g.split(separator: "/").dropFirst().joinedText(separator: "/")
                    if !path.isEmpty { item.tags = [path] }
                }
                if let icon = take("Icon"), icon != "0" { item.fields.append(CustomField(name: "keepass icon", value: icon)) }
                if let c = ForeignTime.iso(take("Created")) { item.created = c }
                item.modified = ForeignTime.iso(take("Last Modified")) ?? item.created
            case .onePasswordCSV:
                item = Item(name: take("Title") ?? "untitled", now: now)
                item.username = take("Username")
                item.password = take("Password")
                item.urls = (take("Url") ?? take("URL") ?? "").split(separator: ",").map { $0.trimmed(.whitespaces) }.filter { !$0.isEmpty }
                item.totp = take("OTPAuth")
                item.notes = take("Notes")
                item.tags = (take("Tags") ?? "").split(separator: ",").map { $0.trimmed(.whitespaces) }.filter { !$0.isEmpty }
                if take("Favorite") == "true" { item.tags.append("favorite") }
                if take("Archived") == "true" { item.tags.append("archived") }
                if item.username == nil && item.password == nil && item.urls.isEmpty && item.totp == nil { item.type = .note }
            case .chromeCSV:
                item = Item(name: take("name") ?? "untitled", now: now)
                if let u = take("url") { item.urls = [u] }
                item.username = take("username")
                item.password = take("password")
                item.notes = take("note")
            default: // .firefoxCSV
                let url = take("url")
                item = Item(name: url.flatMap { URLComponents(string: $0)?.host } ?? url ?? "untitled", now: now)
                if let url { item.urls = [url] }
                item.username = take("username")
                item.password = take("password")
                if let realm = take("httpRealm") { item.fields.append(CustomField(name: "http realm", value: realm)) }
                if let action = take("formActionOrigin") { item.fields.append(CustomField(name: "form action origin", kind: .url, value: action)) }
                if let c = take("timeCreated").flatMap(Int64.init) { item.created = c / 1000 }
                item.modified = take("timePasswordChanged").flatMap(Int64.init).map { $0 / 1000 } ?? item.created
                if let last = take("timeLastUsed").flatMap(Int64.init) {
                    item.fields.append(CustomField(name: "last used", value: ISOTime.string(last / 1000)))
                }
                if let guid = take("guid") { item.fields.append(CustomField(name: "firefox guid", value: guid)) }
            }
            for (k, v) in zip(header.fields, row.fields) where !used.contains(k) && !v.isEmpty {
                item.fields.append(CustomField(name: k, value: v))
            }
            try batch.add(item, entry: entry)
        }
        return batch
    }
}

/// Any CSV file (`--from csv`): each column goes to the field a column map names, in order.
/// The map is `--columns name,username,password,url,notes` (then a first row equal to the map,
/// in any case, is its header and skipped), else the file's header row read as one.
public enum MappedCSV {
    /// What a column can hold: the item's fields, `field:NAME` (a custom text field) or `-` (skipped).
    public static let targets = ["name", "username", "password", "url", "notes", "totp", "tags", "type", "-"]

    /// One column's place in an item.
    enum Target: Equatable {
        case name, username, password, url, notes, totp, tags, type, skip
        case field(String)
    }

    /// The map `columns` spells, checked: every target known, each at most once, a name or a URL.
    /// - Throws: `.usage` naming an unknown or repeated target.
    static func parse(_ columns: [String], what: String) throws -> [Target] {
        var seen: Set<String> = []
        let map = try columns.map { raw -> Target in
            let c = raw.trimmed(.whitespaces)
            if c.lowercased().hasPrefix("field:") {
                let name = String(c.dropFirst(6)).trimmed(.whitespaces)
                guard !name.isEmpty else { throw VaultError.usage("\(what): 'field:' needs a name (field:NAME)") }
                return .field(name)
            }
            let t = c.lowercased()
            guard targets.contains(t) else {
                let near = Spelling.nearest(to: t, among: targets.filter { $0 != "-" })
                throw VaultError.usage("\(what): unknown column '\(c)'",
                                       hint: (near.map { "did you mean '\($0)'? " } ?? "") + "columns: \(targets.joinedText(separator: ", ")), field:NAME")
            }
            if t != "-" {
                guard seen.insert(t).inserted else { throw VaultError.usage("\(what): the column '\(t)' is named twice") }
            }
            switch t {
            case "name": return .name
            case "username": return .username
            case "password": return .password
            case "url": return .url
            case "notes": return .notes
            case "totp": return .totp
            case "tags": return .tags
            case "type": return .type
            default: return .skip
            }
        }
        guard map.contains(.name) || map.contains(.url) else {
            throw VaultError.usage("\(what): no 'name' or 'url' column: an item needs a name", hint: "e.g. --columns name,username,password,url,notes")
        }
        return map
    }

    /// Reads `reader` with the column map `columns` (nil: the header row is the map).
    /// - Throws: `.usage` for a bad map, a row with another number of fields (naming its line),
    ///   an unknown type, or the limits of `ImportBatch`.
    public static func read(_ reader: inout CSVReader, columns: [String]?, now: Int64) throws -> ImportBatch {
        guard let first = try reader.next() else { throw VaultError.usage("the file is empty") }
        let map: [Target]
        var pending: CSVReader.Row?
        if let columns {
            map = try parse(columns, what: "--columns")
            let header = first.fields.map { $0.trimmed(.whitespaces).lowercased() }
            if header != columns.map({ $0.trimmed(.whitespaces).lowercased() }) { pending = first }
        } else {
            map = try parse(first.fields, what: "line 1 (the header; or give --columns)")
        }
        var batch = ImportBatch()
        while let row = try pending.take() ?? reader.next() {
            guard row.fields.count == map.count else {
                throw VaultError.usage("line \(row.line): \(row.fields.count) fields, the column map has \(map.count)")
            }
            var item = Item(name: "untitled", now: now)
            var named = false
            for (target, raw) in zip(map, row.fields) where !raw.isEmpty {
                switch target {
                case .name: item.name = raw; named = true
                case .username: item.username = raw
                case .password: item.password = raw
                case .url: item.urls = [raw]
                case .notes: item.notes = raw
                case .totp: item.totp = raw
                case .tags: item.tags = raw.split(separator: ",").map { $0.trimmed(.whitespaces) }.filter { !$0.isEmpty }
                case .type:
                    guard let type = ItemType(rawValue: raw.lowercased()) else {
                        throw VaultError.usage("line \(row.line): unknown type '\(raw)'", hint: "types: \(ItemType.allCases.map(\.rawValue).joinedText(separator: ", "))")
                    }
                    item.type = type
                case .field(let name): item.fields.append(CustomField(name: name, value: raw))
                case .skip: break
                }
            }
            if !named, let url = item.urls.first { item.name = URLComponents(string: url)?.host ?? url }
            try batch.add(item, entry: "line \(row.line)")
        }
        return batch
    }
}
