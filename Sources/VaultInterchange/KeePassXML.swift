internal import CXML2
import FoundationEssentials
import VaultKit
internal import VaultSystem

/// KeePass 2 XML as KeePassXC writes it (`keepassxc-cli export -f xml`, "Export > KeePass XML"):
/// `KeePassFile/Root/Group...`, each `Entry` with `String` key/value pairs (`Value
/// ProtectInMemory="True"` marks a protected one), `Times`, `Tags`, `Binary` attachments and a
/// `History` of former versions. Groups become `a/b` tags (below the root group); the recycle
/// bin is skipped. Read with libxml2's pull reader (opened with `dlopen` on first use, see
/// CXML2/shim.h), one node at a time from the bytes as they arrive (never the whole file); no
/// network, no DTD (a document type is refused). Each entry becomes an item as soon as it ends;
/// text is kept only for the elements an item takes it from, at most `ImportLimits.item` for an
/// entry and its history (attachments in `Meta` and `Binary` are passed over, as libxml2 bounds a
/// text node to 10 MB), and a tag longer than `ImportLimits.xmlTag` is refused before libxml2 sees it.
package final class KeePassXMLReader {
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
    /// Whether the element open last is one whose text an item takes (`collected`).
    private var collecting = false
    private var key: String?
    private var protected = false
    private var recycleBin: String?
    private var failure: String?
    private var batch = ImportBatch()
    private let now: Int64
    /// The entries (outside a history) read so far, and what the one being read keeps, counted
    /// as `ImportLimits.size(of:)` counts an item.
    private var entryCount = 0, entrySize = 0

    /// The elements whose text is kept, by parent and name.
    private static let collected: Set<String> = [
        "Meta/RecycleBinUUID", "Group/Name", "Group/UUID", "String/Key", "String/Value", "Times/CreationTime",
        "Times/LastModificationTime", "Entry/Tags",
    ]

    private init(now: Int64) { self.now = now }

    /// libxml2's reader functions, or why libxml2 could not be opened; loaded once, on first use.
    private static let loaded: Result<vault_xml2_api, VaultError> = LibraryTable.load(vault_xml2_open)
        .mapError { .failure("reading KeePass XML needs libxml2, which cannot be loaded (\($0.message))", hint: "install the Debian package libxml2") }

    /// The first error libxml2 reported, kept by the reader's error handler.
    private final class ErrorBox { var message: String? }

    /// Parses the export that starts with `prefix` (bytes already read) and continues with
    /// `read`'s chunks (nil at the end) into a batch.
    /// - Throws: `.usage` naming the line of a malformed document, an entry over
    ///   `ImportLimits.item`, a tag over `ImportLimits.xmlTag`, or an entry's invalid TOTP secret.
    package static func read(prefix: [UInt8], read: @escaping () throws -> [UInt8]?, now: Int64) throws -> ImportBatch {
        let xml = try loaded.get()
        let feed = XMLFeed(prefix: prefix, read: read)
        guard try feed.hasInput() else { throw VaultError.usage("line 1: the KeePass XML is empty") }
        let reader = KeePassXMLReader(now: now)
        let options: Int32 = VAULT_XML_PARSE_NONET | VAULT_XML_PARSE_NOERROR | VAULT_XML_PARSE_NOWARNING
        let errors = ErrorBox()
        let line: Int = try withExtendedLifetime((errors, feed)) {
            guard let r = xml.xmlReaderForIO({ context, buffer, count in
                Unmanaged<XMLFeed>.fromOpaque(context!).takeUnretainedValue().fill(buffer, Int(count))
            }, nil, Unmanaged.passUnretained(feed).toOpaque(), nil, nil, options) else {
                throw VaultError.usage("line 1: the KeePass XML cannot be read (libxml2 refused it)")
            }
            defer { xml.xmlFreeTextReader(r) }
            xml.xmlTextReaderSetErrorHandler(r, { arg, message, _, _ in
                guard let arg else { return }
                let box = Unmanaged<ErrorBox>.fromOpaque(arg).takeUnretainedValue()
                if box.message == nil, let message {
                    box.message = String(cString: message).trimmed()
                }
            }, Unmanaged.passUnretained(errors).toOpaque())
            try reader.pull(r, xml)
            return Int(xml.xmlTextReaderGetParserLineNumber(r))
        }
        if let refused = feed.failure { throw refused }
        if reader.failure != nil || errors.message != nil || !reader.path.isEmpty {
            let why = reader.failure ?? errors.message ?? "<\(reader.path.last!)> is not closed"
            throw VaultError.usage("line \(line): the KeePass XML cannot be read (\(why))")
        }
        guard reader.sawRoot else { throw VaultError.usage("line 1: this XML is not a KeePass export (no KeePassFile/Root)") }
        return reader.batch
    }

    /// Reads every node of `r`, calling the element handlers below; stops at the first error
    /// (libxml2's, kept by the error handler, or `failure`).
    /// - Throws: what an entry's item throws (too large, an invalid TOTP secret).
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
                if empty { try didEnd(name) }
            case VAULT_XML_READER_END_ELEMENT:
                try didEnd(string(xml.xmlTextReaderConstName(r)))
            case VAULT_XML_READER_TEXT, VAULT_XML_READER_CDATA,
                 VAULT_XML_READER_WHITESPACE, VAULT_XML_READER_SIGNIFICANT_WHITESPACE:
                guard collecting else { continue }
                text += string(xml.xmlTextReaderConstValue(r))
                if text.utf8.count > ImportLimits.item {
                    throw ImportLimits.tooLarge(entries.isEmpty ? "the value at line \(xml.xmlTextReaderGetParserLineNumber(r))" : "entry \(entryCount + 1)")
                }
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
            item.totp = seed.lowercased().hasPrefix("otpauth://") ? seed : "otpauth://totp/?secret=\(seed.replacingEvery(" ", with: ""))&period=\(period)&digits=\(digits)"
        }
        let placed: Set<String> = ["Title", "UserName", "Password", "URL", "Notes", "otp", "TOTP Seed", "TOTP Settings"]
        for s in e.strings where !placed.contains(s.key) && !s.value.isEmpty {
            let isURL = s.key.hasPrefix("KP2A_URL") || s.key.hasPrefix("URL")
            item.fields.append(CustomField(name: s.key, kind: s.protected ? .hidden : (isURL ? .url : .text), value: s.value))
        }
        if !e.group.isEmpty { item.tags.append(e.group.joinedText(separator: "/")) }
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
        collecting = path.count >= 2 && Self.collected.contains(path[path.count - 2] + "/" + name)
        switch name {
        case "Root": sawRoot = true
        case "Group": groups.append((nil, nil))
        case "Entry":
            var e = Entry()
            // The root group's name is not a folder of the user's.
            e.group = groups.dropFirst().compactMap(\.name)
            e.inRecycleBin = recycleBin != nil && groups.contains { $0.uuid == recycleBin }
            if entries.isEmpty { entrySize = 0 }
            entries.append(e)
        case "Value" where path.dropLast().last == "String":
            protected = attributes["ProtectInMemory"] == "True" || attributes["Protected"] == "True"
        case "Binary" where path.dropLast().last == "Entry":
            if !entries.isEmpty { entries[entries.count - 1].attachments += 1 }
        default: break
        }
    }

    /// Counts `bytes` of text in `values` strings toward the entry being read.
    /// - Throws: `ImportLimits.tooLarge` once the entry passes `ImportLimits.item`.
    private func keep(_ bytes: Int, values: Int) throws {
        entrySize += bytes + values * ImportLimits.valueOverhead
        if entrySize > ImportLimits.item {
            let title = entries.first?.value("Title").map { " ('\($0)')" } ?? ""
            throw ImportLimits.tooLarge("entry \(entryCount + 1)\(title)")
        }
    }

    private func didEnd(_ name: String) throws {
        // A damaged export must not pass as whole, whatever libxml2 would recover from.
        guard path.last == name else {
            failure = "</\(name)> closes <\(path.last ?? "nothing")>"
            return
        }
        defer {
            path.removeLast()
            text = ""
            collecting = path.count >= 2 && Self.collected.contains(path[path.count - 2] + "/" + path[path.count - 1])
        }
        let parent = path.dropLast().last
        switch (name, parent) {
        case ("RecycleBinUUID", "Meta"): recycleBin = text
        case ("Name", "Group"): groups[groups.count - 1].name = text
        case ("UUID", "Group"): groups[groups.count - 1].uuid = text
        case ("Group", _): groups.removeLast()
        case ("Key", "String"): key = text
        case ("Value", "String"):
            if let key, !entries.isEmpty {
                // Of a former version, only the password is kept.
                if entries.count == 1 || key == "Password" {
                    try keep(key.utf8.count + text.utf8.count, values: 2)
                    entries[entries.count - 1].strings.append((key, text, protected))
                }
            }
            key = nil
            protected = false
        case ("CreationTime", "Times"): if !entries.isEmpty { entries[entries.count - 1].created = Self.time(text) }
        case ("LastModificationTime", "Times"): if !entries.isEmpty { entries[entries.count - 1].modified = Self.time(text) }
        case ("Tags", "Entry"):
            if !entries.isEmpty {
                let tags = text.split(whereSeparator: { $0 == ";" || $0 == "," }).map { $0.trimmed(.whitespaces) }.filter { !$0.isEmpty }
                try keep(tags.reduce(0) { $0 + $1.utf8.count }, values: tags.count)
                entries[entries.count - 1].tags = tags
            }
        case ("Entry", _):
            let e = entries.removeLast()
            if parent == "History", !entries.isEmpty {
                entries[entries.count - 1].history.append(e)
            } else {
                entryCount += 1
                if e.inRecycleBin {
                    batch.skipped["in KeePass's recycle bin", default: 0] += 1
                } else {
                    let item = Self.item(e, now: now, batch: &batch)
                    try batch.add(item, entry: "entry \(entryCount) ('\(e.value("Title") ?? "")')")
                }
            }
        default: break
        }
    }

    /// An ISO 8601 time, or KDBX 4's base64 of little-endian seconds since year 1.
    static func time(_ s: String) -> Int64? {
        if let d = try? Date(s, strategy: .iso8601) { return Int64(d.timeIntervalSince1970) }
        guard let raw = Data(base64Encoded: s), raw.count == 8 else { return nil }
        let seconds = raw.reversed().reduce(Int64(0)) { $0 << 8 | Int64($1) }
        return seconds - 62_135_596_800
    }
}


/// What libxml2 reads through its input callback: the bytes already read, then the export's
/// chunks as they arrive, each byte looked at for a tag (from `<` to `>`, quoted attribute values
/// included) longer than `ImportLimits.xmlTag` before libxml2 sees it. Comments, CDATA sections,
/// processing instructions and declarations (`<!`, `<?`) are not tags here.
private final class XMLFeed {
    private let read: () throws -> [UInt8]?
    private var pending: [UInt8]
    private var at = 0
    /// Why the input stopped early: an I/O error or a tag too long (libxml2 saw an I/O error).
    private(set) var failure: VaultError?
    /// The bytes of the tag open so far (0: not in a tag), its quote, and whether its `<` was the
    /// last byte seen.
    private var tag = 0, quote: UInt8 = 0, opened = false
    private var line = 1

    init(prefix: [UInt8], read: @escaping () throws -> [UInt8]?) {
        pending = prefix
        self.read = read
    }

    deinit { wipe(&pending) }

    /// Whether there is any input, reading the first chunk if need be.
    func hasInput() throws -> Bool {
        if at < pending.count { return true }
        guard let chunk = try read(), !chunk.isEmpty else { return false }
        pending = chunk
        at = 0
        return true
    }

    /// libxml2's read callback: up to `count` bytes into `out`; 0 at the end, -1 on an error.
    func fill(_ out: UnsafeMutablePointer<CChar>, _ count: Int) -> Int32 {
        guard failure == nil else { return -1 }
        while at >= pending.count {
            do {
                guard var chunk = try read(), !chunk.isEmpty else { return 0 }
                swap(&pending, &chunk)
                wipe(&chunk)
                at = 0
            } catch {
                failure = error as? VaultError ?? .io(path: "the KeePass XML", "\(error)")
                return -1
            }
        }
        let n = min(count, pending.count - at)
        let tooLong = pending.withUnsafeBufferPointer { b in scan(b, at..<(at + n)) }
        if tooLong {
            failure = .usage("line \(line): a tag is longer than \(ImportLimits.xmlTag >> 10) KiB",
                             hint: "a KeePass export's tags are a few dozen bytes: this is not one")
            return -1
        }
        pending.withUnsafeBytes { b in
            UnsafeMutableRawPointer(out).copyMemory(from: b.baseAddress! + at, byteCount: n)
        }
        at += n
        return Int32(n)
    }

    /// Follows `b[range]` through tags; true when one passes the bound.
    private func scan(_ b: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        for k in range {
            let c = b[k]
            if c == 0x0A { line += 1 }
            if tag == 0 {
                if c == 0x3C {
                    tag = 1
                    quote = 0
                    opened = true
                }
                continue
            }
            if opened {
                opened = false
                if c == 0x21 || c == 0x3F {
                    tag = 0
                    continue
                }
            }
            if quote != 0 {
                if c == quote { quote = 0 }
            } else if c == 0x22 || c == 0x27 {
                quote = c
            } else if c == 0x3E {
                tag = 0
                continue
            }
            tag += 1
            if tag > ImportLimits.xmlTag { return true }
        }
        return false
    }
}
