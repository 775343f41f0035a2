public import VaultKit
internal import FoundationEssentials
internal import VaultSystem

/// The formats `vault import` reads (`--from`), each an export of a manager people leave.
public enum ImportFormat: String, CaseIterable, Sendable {
    case vault
    case encrypted
    case bitwarden
    case bitwardenCSV = "bitwarden-csv"
    case keepassxcCSV = "keepassxc-csv"
    case keepassXML = "keepass-xml"
    case onePasswordCSV = "1password-csv"
    case onePUX = "1pux"
    case chromeCSV = "chrome-csv"
    case firefoxCSV = "firefox-csv"
    case pass
    /// Any CSV file, read through a column map (`--columns`, else its header row).
    case csv

    /// What the detection message calls it ("this looks like a Bitwarden JSON export").
    public var label: String {
        switch self {
        case .vault: "vault's own JSON"
        case .encrypted: "an encrypted vault export"
        case .bitwarden: "a Bitwarden JSON export"
        case .bitwardenCSV: "a Bitwarden CSV export"
        case .keepassxcCSV: "a KeePassXC CSV export"
        case .keepassXML: "a KeePass XML export"
        case .onePasswordCSV: "a 1Password CSV export"
        case .onePUX: "a 1Password 1PUX export"
        case .chromeCSV: "a Chrome CSV export"
        case .firefoxCSV: "a Firefox CSV export"
        case .pass: "a pass password store"
        case .csv: "a CSV file"
        }
    }

    /// The magic bytes of vault's encrypted export.
    public static let encryptedMagic = Array("VAULTENC".utf8)

    /// The format `bytes` look like, or nil. Reads only the start (and a CSV header).
    public static func detect(_ bytes: [UInt8]) -> ImportFormat? {
        if bytes.starts(with: encryptedMagic) || bytes.starts(with: Array(EncryptedExport.armorBegin.utf8)) { return .encrypted }
        if bytes.starts(with: [0x50, 0x4B, 0x03, 0x04]) { return .onePUX }
        var body = bytes[...]
        if body.starts(with: [0xEF, 0xBB, 0xBF]) { body = body.dropFirst(3) }
        guard let first = body.firstIndex(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else { return nil }
        switch body[first] {
        case UInt8(ascii: "["): return .vault
        case UInt8(ascii: "{"): return .bitwarden
        case UInt8(ascii: "<"): return .keepassXML
        default:
            var reader = CSVReader(Array(bytes.prefix(64 * 1024)))
            guard let header = try? reader.next() else { return nil }
            return ForeignCSV.detect(header: header.fields)
        }
    }
}

/// What an import found: the items, and what could not be kept and why.
public struct ImportBatch: Sendable {
    /// The items, names unique.
    public var items: [Item] = []
    /// Things the source held that vault cannot keep, by reason ("attachments: vault stores no
    /// files"), with how many.
    public var notKept: [String: Int] = [:]
    /// Entries skipped on purpose (in a trash or recycle bin), by reason.
    public var skipped: [String: Int] = [:]
    /// Items whose name was changed to be unique or valid.
    public var renamed = 0
    private var names: Set<String> = []

    /// An empty batch.
    public init() {}

    /// Notes that `count` things of kind `reason` were not kept.
    public mutating func drop(_ reason: String, _ count: Int = 1) {
        if count > 0 { notKept[reason, default: 0] += count }
    }

    /// What the items held count for (`ImportLimits.size(of:)`), at most `ImportLimits.held`.
    public private(set) var heldSize = 0

    /// Counts `item` among those held.
    /// - Throws: `.usage` naming `entry` when it is over `ImportLimits.item`, or the items held
    ///   would pass `ImportLimits.held`.
    private mutating func hold(_ item: Item, entry: String) throws {
        let size = ImportLimits.size(of: item)
        guard size <= ImportLimits.item else { throw ImportLimits.tooLarge(entry) }
        guard heldSize + size <= ImportLimits.held else {
            throw VaultError.usage("\(entry): the import holds more than \(ImportLimits.text(ImportLimits.held)) of items before it writes them",
                                   hint: "import the export in parts (a vault or folder at a time); vault's own JSON without --force or --dry-run is written as it is read")
        }
        heldSize += size
    }

    /// Adds a foreign item: its name made valid and unique (`name (2)`), its TOTP secret checked
    /// and made an otpauth URI.
    /// - Throws: `.usage` naming `entry` when its TOTP secret is invalid, when it is over
    ///   `ImportLimits.item`, or the batch would pass `ImportLimits.held`.
    public mutating func add(_ item: Item, entry: String) throws {
        try hold(item, entry: entry)
        var item = item
        let wanted = item.name
        var base = (try? Item.normalize(name: Self.cleanName(wanted))) ?? "untitled"
        if base.count > 240 { base = String(base.prefix(240)) }
        let name = Self.unique(base, in: &names, next: &nextSuffix)
        if name != wanted { renamed += 1 }
        item.name = name
        if let t = item.totp {
            if t.isEmpty {
                item.totp = nil
            } else if t.lowercased().hasPrefix("steam://") {
                // Steam Guard codes are not RFC 6238: kept as a hidden field, not as a TOTP secret.
                item.totp = nil
                item.fields.append(CustomField(name: "steam guard", kind: .hidden, value: t))
            } else {
                do { item.totp = try OTP.normalize(t, label: name) } catch let e as VaultError {
                    throw VaultError.usage("\(entry): \(e.message)")
                }
            }
        }
        item.fields = Self.uniqueFieldNames(item.fields)
        if item.passwordHistory.count > Item.historyLimit { item.passwordHistory.removeFirst(item.passwordHistory.count - Item.historyLimit) }
        items.append(item)
    }

    /// Adds one of vault's own items (its name kept exactly; a duplicate is an error).
    /// - Throws: `.usage` naming `entry` for a duplicate, an item over `ImportLimits.item`, or a
    ///   batch that would pass `ImportLimits.held`.
    mutating func addOwn(_ item: Item, entry: String) throws {
        try hold(item, entry: entry)
        try claim(item.name, entry: entry)
        items.append(item)
    }

    /// Counts one of vault's own items on its way straight to the vault (a streamed import): with
    /// `claimingName`, its name checked as `addOwn` does (else the vault's unique index of names
    /// answers, with `givenTwice`); the item itself not kept (`count` and `counts` grow).
    /// - Throws: `.usage` naming `entry` for a duplicate or an item over `ImportLimits.item`.
    mutating func passOwn(_ item: Item, entry: @autoclosure () -> String, claimingName: Bool = true) throws {
        guard ImportLimits.size(of: item) <= ImportLimits.item else { throw ImportLimits.tooLarge(entry()) }
        if claimingName { try claim(item.name, entry: entry()) }
        streamed[item.type, default: 0] += 1
    }

    private mutating func claim(_ name: String, entry: String) throws {
        guard names.insert(name).inserted else { throw Self.givenTwice(name, entry: entry) }
    }

    /// The error for one of vault's own items whose name, as given, an earlier item had.
    public static func givenTwice(_ name: String, entry: String) -> VaultError {
        .usage("\(entry): the name '\(name)' appears twice")
    }

    /// The items counted by `passOwn`, by type.
    private var streamed: [ItemType: Int] = [:]

    /// `name` without control characters and surrounding spaces (`untitled` when nothing is left).
    static func cleanName(_ name: String) -> String {
        let kept = String(String.UnicodeScalarView(name.unicodeScalars.filter {
            $0.properties.generalCategory != .control && $0.properties.generalCategory != .format && $0 != "\u{FFFD}"
        }))
        let parts = kept.split(separator: "/", omittingEmptySubsequences: false).map { p -> String in
            p == ".." || p == "." ? "_" : String(p)
        }
        let s = parts.joined(separator: "/").trimmed(.whitespaces)
        return s.isEmpty ? "untitled" : s
    }

    /// Custom fields with unique names (a second `code` becomes `code (2)`).
    static func uniqueFieldNames(_ fields: [CustomField]) -> [CustomField] {
        var seen: Set<String> = [], next: [String: Int] = [:], out: [CustomField] = []
        for var f in fields {
            f.name = unique(f.name.isEmpty ? "field" : f.name, in: &seen, next: &next)
            out.append(f)
        }
        return out
    }

    /// `base`, or `base (2)`, `base (3)`, ... when taken, inserted into `taken`. `next` keeps the
    /// number to try first for each base given twice, so a thousand copies of one name cost a
    /// thousand steps, not half a million.
    static func unique(_ base: String, in taken: inout Set<String>, next: inout [String: Int]) -> String {
        var name = base
        if taken.contains(name) {
            var n = next[base] ?? 2
            repeat {
                name = "\(base) (\(n))"
                n += 1
            } while taken.contains(name)
            next[base] = n
        }
        taken.insert(name)
        return name
    }

    /// The number to try first for each name given twice (`unique`).
    private var nextSuffix: [String: Int] = [:]

    /// The items, handed over: the batch keeps only its counts (the name set is freed, so a
    /// large import does not hold it while the items are sealed).
    public mutating func takeItems() -> [Item] {
        names = []
        nextSuffix = [:]
        counts = countsByType
        count = counts.reduce(0) { $0 + $1.1 }
        defer { items = [] }
        return items
    }

    /// After `takeItems`: how many items of each type and in all.
    public private(set) var counts: [(ItemType, Int)] = []
    /// After `takeItems`: how many items.
    public private(set) var count = 0

    /// How many items of each type (those held and those streamed past).
    public var countsByType: [(ItemType, Int)] {
        ItemType.allCases.compactMap { t in
            let n = items.lazy.filter { $0.type == t }.count + (streamed[t] ?? 0)
            return n > 0 ? (t, n) : nil
        }
    }
}

/// Times as managers write them.
enum ForeignTime {
    /// Seconds since 1970 of an ISO 8601 time (with or without fractions), nil when it is not one.
    static func iso(_ s: String?) -> Int64? {
        guard let s, !s.isEmpty else { return nil }
        if let d = (try? Date(s, strategy: .iso8601)) ?? (try? Date(s, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))) {
            return Int64(d.timeIntervalSince1970)
        }
        return nil
    }
}

/// Reading values out of parsed JSON (`JSONValue.plainObject`) without trusting their types, as
/// the importers read Foundation's `JSONSerialization` objects before.
enum Loose {
    static func string(_ v: Any?) -> String? {
        switch v {
        case let s as String: return s
        case let n as JSONNumber: return n.stringValue
        case let b as Bool: return b ? "1" : "0"
        default: return nil
        }
    }

    static func nonEmpty(_ v: Any?) -> String? {
        guard let s = string(v), !s.isEmpty else { return nil }
        return s
    }

    /// `true`/`false`, or a number 0 or 1 (as `NSNumber` bridged to `Bool`); nil otherwise.
    static func bool(_ v: Any?) -> Bool? {
        switch v {
        case let b as Bool: return b
        case let n as JSONNumber:
            let d = n.doubleValue
            return d == 0 ? false : d == 1 ? true : nil
        default: return nil
        }
    }

    /// A value another manager holds that vault has no place for, as text for a custom field.
    static func text(_ v: Any) -> String? {
        if v is JSONNull { return nil }
        if let s = v as? String { return s.isEmpty ? nil : s }
        if let n = v as? JSONNumber { return n.stringValue }
        if let b = v as? Bool { return b ? "1" : "0" }
        if let a = v as? [Any], a.isEmpty { return nil }
        if let o = v as? [String: Any], o.isEmpty { return nil }
        guard v is [Any] || v is [String: Any] else { return nil }
        return JSONText.text(v)
    }

    /// Parses one JSON value, as leniently as Foundation's reader did (a key given twice keeps its
    /// last value, a trailing comma; a UTF-8 byte-order mark before it is passed over).
    static func json(_ bytes: ArraySlice<UInt8>) -> Any? {
        var b = bytes
        if b.starts(with: [0xEF, 0xBB, 0xBF]) { b = b.dropFirst(3) }
        return (try? JSONValue.parse(b, lenient: true))?.plainObject
    }
}
