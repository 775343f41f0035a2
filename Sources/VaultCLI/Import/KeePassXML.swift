import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import VaultKit

/// KeePass 2 XML as KeePassXC writes it (`keepassxc-cli export -f xml`, "Export > KeePass XML"):
/// `KeePassFile/Root/Group...`, each `Entry` with `String` key/value pairs (`Value
/// ProtectInMemory="True"` marks a protected one), `Times`, `Tags`, `Binary` attachments and a
/// `History` of former versions. Groups become `a/b` tags (below the root group); the recycle
/// bin is skipped. Read with Foundation's SAX parser (libxml2), one entry at a time.
final class KeePassXMLReader: NSObject, XMLParserDelegate {
    struct Entry {
        var strings: [(key: String, value: String, protected: Bool)] = []
        var created: Int64?
        var modified: Int64?
        var tags: [String] = []
        var attachments = 0
        var history: [Entry] = []
        var group: [String] = []
        var inRecycleBin = false

        func value(_ key: String) -> String? {
            guard let v = strings.first(where: { $0.key == key })?.value, !v.isEmpty else { return nil }
            return v
        }
    }

    private var path: [String] = []
    private var groups: [(name: String?, uuid: String?)] = []
    private var entries: [Entry] = []
    private var text = ""
    private var key: String?
    private var protected = false
    private var recycleBin: String?
    private var finished: [Entry] = []
    private var failure: String?

    /// Parses `bytes` into a batch.
    static func read(_ bytes: [UInt8], now: Int64) throws -> ImportBatch {
        let reader = KeePassXMLReader()
        let parser = XMLParser(data: Data(bytes))
        parser.shouldResolveExternalEntities = false
        parser.delegate = reader
        if !parser.parse() || reader.failure != nil || !reader.path.isEmpty {
            let why = reader.failure ?? (reader.path.isEmpty ? nil : "<\(reader.path.last!)> is not closed") ?? parser.parserError.map { ($0 as NSError).localizedDescription } ?? "malformed XML"
            throw VaultError.usage("line \(parser.lineNumber): the KeePass XML cannot be read (\(why))")
        }
        guard reader.sawRoot else { throw VaultError.usage("line 1: this XML is not a KeePass export (no KeePassFile/Root)") }
        var batch = ImportBatch()
        for (index, e) in reader.finished.enumerated() {
            if e.inRecycleBin { batch.skipped["in KeePass's recycle bin", default: 0] += 1; continue }
            try batch.add(item(e, now: now, batch: &batch), entry: "entry \(index + 1) ('\(e.value("Title") ?? "")')")
        }
        return batch
    }

    private var sawRoot = false

    private static func item(_ e: Entry, now: Int64, batch: inout ImportBatch) -> Item {
        var item = Item(name: e.value("Title") ?? "untitled", now: now)
        item.username = e.value("UserName")
        item.password = e.value("Password")
        if let u = e.value("URL") { item.urls.append(u) }
        item.notes = e.value("Notes")
        item.totp = e.value("otp")
        if item.totp == nil, let seed = e.value("TOTP Seed") {
            // KeePassXC before 2.6: `TOTP Seed` and `TOTP Settings` ("30;6").
            let settings = (e.value("TOTP Settings") ?? "30;6").split(separator: ";")
            let period = settings.first.map(String.init) ?? "30", digits = settings.dropFirst().first.map(String.init) ?? "6"
            item.totp = seed.lowercased().hasPrefix("otpauth://") ? seed : "otpauth://totp/?secret=\(seed.replacingOccurrences(of: " ", with: ""))&period=\(period)&digits=\(digits)"
        }
        let placed: Set<String> = ["Title", "UserName", "Password", "URL", "Notes", "otp", "TOTP Seed", "TOTP Settings"]
        for s in e.strings where !placed.contains(s.key) && !s.value.isEmpty {
            let isURL = s.key.hasPrefix("KP2A_URL") || s.key.hasPrefix("URL")
            item.fields.append(CustomField(name: s.key, kind: s.protected ? .hidden : (isURL ? .url : .text), value: s.value))
        }
        if !e.group.isEmpty { item.tags.append(e.group.joined(separator: "/")) }
        item.tags += e.tags
        if let c = e.created { item.created = c }
        item.modified = e.modified ?? item.created
        var seen: Set<String> = [item.password ?? ""]
        for old in e.history.sorted(by: { ($0.modified ?? 0) < ($1.modified ?? 0) }).reversed() {
            guard let p = old.value("Password"), !seen.contains(p) else { continue }
            seen.insert(p)
            item.passwordHistory.insert(PasswordChange(password: p, replaced: old.modified ?? item.modified), at: 0)
        }
        batch.drop("attachments: vault stores no files", e.attachments)
        return item
    }

    func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        path.append(name)
        text = ""
        switch name {
        case "Root": sawRoot = true
        case "Group": groups.append((nil, nil))
        case "Entry":
            var e = Entry()
            // The root group's name is not a folder of the user's.
            e.group = groups.dropFirst().compactMap(\.name)
            e.inRecycleBin = recycleBin != nil && groups.contains { $0.uuid == recycleBin }
            entries.append(e)
        case "Value" where path.dropLast().last == "String":
            protected = attributes["ProtectInMemory"] == "True" || attributes["Protected"] == "True"
        case "Binary" where path.dropLast().last == "Entry":
            if !entries.isEmpty { entries[entries.count - 1].attachments += 1 }
        default: break
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) { text += string }

    func parser(_ parser: XMLParser, didEndElement name: String, namespaceURI: String?, qualifiedName: String?) {
        // libxml2 recovers from a mismatched end tag; a damaged export must not pass as whole.
        guard path.last == name else {
            failure = "</\(name)> closes <\(path.last ?? "nothing")>"
            parser.abortParsing()
            return
        }
        defer { path.removeLast() }
        let parent = path.dropLast().last
        switch (name, parent) {
        case ("RecycleBinUUID", "Meta"): recycleBin = text
        case ("Name", "Group"): groups[groups.count - 1].name = text
        case ("UUID", "Group"): groups[groups.count - 1].uuid = text
        case ("Group", _): groups.removeLast()
        case ("Key", "String"): key = text
        case ("Value", "String"):
            if let key, !entries.isEmpty { entries[entries.count - 1].strings.append((key, text, protected)) }
            key = nil
            protected = false
        case ("CreationTime", "Times"): if !entries.isEmpty { entries[entries.count - 1].created = Self.time(text) }
        case ("LastModificationTime", "Times"): if !entries.isEmpty { entries[entries.count - 1].modified = Self.time(text) }
        case ("Tags", "Entry"):
            if !entries.isEmpty {
                entries[entries.count - 1].tags = text.split(whereSeparator: { $0 == ";" || $0 == "," }).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            }
        case ("Entry", _):
            let e = entries.removeLast()
            if parent == "History", !entries.isEmpty { entries[entries.count - 1].history.append(e) } else { finished.append(e) }
        default: break
        }
        text = ""
    }

    /// An ISO 8601 time, or KDBX 4's base64 of little-endian seconds since year 1.
    static func time(_ s: String) -> Int64? {
        if let d = ISO8601DateFormatter().date(from: s) { return Int64(d.timeIntervalSince1970) }
        guard let raw = Data(base64Encoded: s), raw.count == 8 else { return nil }
        let seconds = raw.reversed().reduce(Int64(0)) { $0 << 8 | Int64($1) }
        return seconds - 62_135_596_800
    }
}

