internal import CXML2
import Foundation
import VaultKit
internal import VaultSystem

/// KeePass 2 XML as KeePassXC writes it (`keepassxc-cli export -f xml`, "Export > KeePass XML"):
/// `KeePassFile/Root/Group...`, each `Entry` with `String` key/value pairs (`Value
/// ProtectInMemory="True"` marks a protected one), `Times`, `Tags`, `Binary` attachments and a
/// `History` of former versions. Groups become `a/b` tags (below the root group); the recycle
/// bin is skipped. Read with libxml2's pull reader (opened with `dlopen` on first use, see
/// CXML2/shim.h), one node at a time; no network, no DTD (a document type is refused).
final class KeePassXMLReader {
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

    /// libxml2's reader functions, or why libxml2 could not be opened; loaded once, on first use.
    private static let loaded: Result<vault_xml2_api, VaultError> = LibraryTable.load(vault_xml2_open)
        .mapError { .failure("reading KeePass XML needs libxml2, which cannot be loaded (\($0.message))", hint: "install the Debian package libxml2") }

    /// The first error libxml2 reported, kept by the reader's error handler.
    private final class ErrorBox { var message: String? }

    /// Parses `bytes` into a batch.
    static func read(_ bytes: [UInt8], now: Int64) throws -> ImportBatch {
        let xml = try loaded.get()
        let reader = KeePassXMLReader()
        guard bytes.count < Int(Int32.max) else { throw VaultError.usage("the KeePass XML is larger than 2 GiB") }
        let options: Int32 = VAULT_XML_PARSE_NONET | VAULT_XML_PARSE_NOERROR | VAULT_XML_PARSE_NOWARNING
        let errors = ErrorBox()
        let line: Int = try bytes.withUnsafeBufferPointer { buffer in
            guard let base = buffer.baseAddress, !buffer.isEmpty else { throw VaultError.usage("line 1: the KeePass XML is empty") }
            guard let r = xml.xmlReaderForMemory(UnsafeRawPointer(base).assumingMemoryBound(to: CChar.self), Int32(buffer.count), nil, nil, options) else {
                throw VaultError.usage("line 1: the KeePass XML cannot be read (libxml2 refused it)")
            }
            defer { xml.xmlFreeTextReader(r) }
            xml.xmlTextReaderSetErrorHandler(r, { arg, message, _, _ in
                guard let arg else { return }
                let box = Unmanaged<ErrorBox>.fromOpaque(arg).takeUnretainedValue()
                if box.message == nil, let message {
                    box.message = String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
                }
            }, Unmanaged.passUnretained(errors).toOpaque())
            try withExtendedLifetime(errors) { try reader.pull(r, xml) }
            return Int(xml.xmlTextReaderGetParserLineNumber(r))
        }
        if reader.failure != nil || errors.message != nil || !reader.path.isEmpty {
            let why = reader.failure ?? errors.message ?? "<\(reader.path.last!)> is not closed"
            throw VaultError.usage("line \(line): the KeePass XML cannot be read (\(why))")
        }
        guard reader.sawRoot else { throw VaultError.usage("line 1: this XML is not a KeePass export (no KeePassFile/Root)") }
        var batch = ImportBatch()
        for (index, e) in reader.finished.enumerated() {
            if e.inRecycleBin { batch.skipped["in KeePass's recycle bin", default: 0] += 1; continue }
            try batch.add(item(e, now: now, batch: &batch), entry: "entry \(index + 1) ('\(e.value("Title") ?? "")')")
        }
        return batch
    }

    /// Reads every node of `r`, calling the element handlers below; stops at the first error
    /// (libxml2's, kept by the error handler, or `failure`).
    private func pull(_ r: OpaquePointer, _ xml: vault_xml2_api) throws {
        func string(_ p: UnsafePointer<UInt8>?) -> String { p.map { String(cString: $0) } ?? "" }
        while failure == nil {
            let rc = xml.xmlTextReaderRead(r)
            if rc == 0 { return }
            if rc < 0 { if failure == nil, path.isEmpty { failure = "malformed XML" }; return }
            switch xml.xmlTextReaderNodeType(r) {
            case VAULT_XML_READER_ELEMENT:
                let name = string(xml.xmlTextReaderConstName(r))
                var attributes: [String: String] = [:]
                for attribute in ["ProtectInMemory", "Protected"] where xml.xmlTextReaderMoveToAttribute(r, attribute) == 1 {
                    attributes[attribute] = string(xml.xmlTextReaderConstValue(r))
                    _ = xml.xmlTextReaderMoveToElement(r)
                }
                let empty = xml.xmlTextReaderIsEmptyElement(r) == 1
                didStart(name, attributes: attributes)
                if empty { didEnd(name) }
            case VAULT_XML_READER_END_ELEMENT:
                didEnd(string(xml.xmlTextReaderConstName(r)))
            case VAULT_XML_READER_TEXT, VAULT_XML_READER_CDATA,
                 VAULT_XML_READER_WHITESPACE, VAULT_XML_READER_SIGNIFICANT_WHITESPACE:
                text += string(xml.xmlTextReaderConstValue(r))
            case VAULT_XML_READER_DOCUMENT_TYPE:
                failure = "a document type declaration; a KeePass export has none"
            default: break
            }
        }
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

    private func didStart(_ name: String, attributes: [String: String]) {
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

    private func didEnd(_ name: String) {
        // A damaged export must not pass as whole, whatever libxml2 would recover from.
        guard path.last == name else {
            failure = "</\(name)> closes <\(path.last ?? "nothing")>"
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

