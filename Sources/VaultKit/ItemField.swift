/// A field of an item, as every command names one: `get --field`, `edit --clear`, `run --env
/// VAR=NAME.FIELD`, a reference's `FIELD` (`vault://ITEM/FIELD`), a release, an audit record.
/// The user's spelling becomes a field in one place, `init(parsing:)`; a custom field is a case
/// with its name, the password history and the TOTP forms are cases, not strings.
public enum ItemField: Hashable, Sendable, CustomStringConvertible {
    /// The item's name.
    case name
    /// The item's type (`login`, `note`, ...).
    case type
    /// The account name (also spelled `user`).
    case username
    /// The password: a secret.
    case password
    /// The first URL.
    case url
    /// Every URL, one a line.
    case urls
    /// The notes: a secret (kept with the secrets).
    case notes
    /// The tags, comma-separated.
    case tags
    /// The TOTP secret, an `otpauth://` URI. `get --field totp` prints its current code (as
    /// `vault otp`), a reference `totp` too; `run`'s `NAME.totp` is the URI.
    case totp
    /// The TOTP secret's `otpauth://` URI (`totp-uri`), wherever it is named.
    case totpURI
    /// The TOTP secret's current code (`otp`), wherever it is named: computed (VaultOTP) from
    /// the secret, which is what is released.
    case otp
    /// The former passwords, newest first, one a line: a secret.
    case history
    /// The pattern `vault login` recognises the username prompt by.
    case userPrompt
    /// The pattern `vault login` recognises the password prompt by.
    case passwordPrompt
    /// A custom field, by its exact name (a hidden or TOTP one is a secret).
    case custom(String)

    /// The built-in fields, in the order help lists them.
    public static let builtIn: [ItemField] = [
        .name, .type, .username, .password, .url, .urls, .notes, .tags, .totp, .totpURI, .otp, .history, .userPrompt, .passwordPrompt,
    ]

    /// The fields `edit --clear` empties.
    public static let clearable: [ItemField] = [.username, .url, .notes, .tags, .totp, .password, .userPrompt, .passwordPrompt]

    /// Other spellings of built-in fields (`run`'s `NAME.user`).
    static let aliases: [String: ItemField] = ["user": .username]

    /// The field the user's `spelling` names: a built-in field's name or alias in any case
    /// (`password`, `USERNAME`, `user`, `totp-uri`), else the custom field of exactly that name.
    /// A built-in name always means the built-in field. This is the one place a field's name is
    /// read; `checked(in:)` says whether an item has it.
    public init(parsing spelling: String) {
        let lower = spelling.lowercased()
        if let b = ItemField.builtIn.first(where: { $0.spelling == lower }) ?? ItemField.aliases[lower] { self = b } else { self = .custom(spelling) }
    }

    /// The built-in field spelled `spelling` exactly (the wire's and the audit log's names), nil
    /// for any other text.
    public init?(builtIn spelling: String) {
        guard let b = ItemField.builtIn.first(where: { $0.spelling == spelling }) else { return nil }
        self = b
    }

    /// The canonical spelling: a built-in field's name (`username`, `totp-uri`, `user-prompt`),
    /// a custom field's own name. What audit records, JSON keys and messages say.
    public var spelling: String {
        switch self {
        case .name: "name"
        case .type: "type"
        case .username: "username"
        case .password: "password"
        case .url: "url"
        case .urls: "urls"
        case .notes: "notes"
        case .tags: "tags"
        case .totp: "totp"
        case .totpURI: "totp-uri"
        case .otp: "otp"
        case .history: "history"
        case .userPrompt: "user-prompt"
        case .passwordPrompt: "password-prompt"
        case .custom(let name): name
        }
    }

    /// The canonical spelling.
    public var description: String { spelling }

    /// Whether this is a built-in field (not a custom one).
    public var isBuiltIn: Bool {
        if case .custom = self { false } else { true }
    }

    /// The field whose stored value this one reads: the TOTP secret (`totp`) for `otp` and
    /// `totp-uri`, every other field itself. What a release of this field releases and audits.
    public var source: ItemField {
        switch self {
        case .otp, .totpURI: .totp
        default: self
        }
    }

    /// Whether this field's value is one value of the secrets record (the password, the TOTP
    /// secret, the notes, a secret custom field), so that `VaultAccess.releaseSecret` hands it
    /// out alone; the password history is many.
    public func isSingleSecret(of item: Item) -> Bool {
        item.isSecretField(self) && self != .history
    }

    /// This field, when `item` has it: a built-in field always, a custom field only if the item
    /// has one of that name.
    /// - Throws: `.usage` for a custom field the item does not have, with the nearest field's
    ///   name ("did you mean") and the list of fields.
    public func checked(in item: Item) throws -> ItemField {
        guard case .custom(let name) = self, item.customField(name) == nil else { return self }
        throw VaultError.usage("unknown field '\(name)'", hint: ItemField.hint(for: name, in: item))
    }

    /// The hint of an unknown field `name`: the nearest known field's name, then the built-in
    /// fields and `item`'s custom ones.
    public static func hint(for name: String, in item: Item?) -> String {
        let custom = item?.fields.map(\.name) ?? []
        let near = Spelling.nearest(to: name, among: builtIn.map(\.spelling) + custom)
        return (near.map { "did you mean '\($0)'? " } ?? "") + "fields: \(builtIn.map(\.spelling).joinedText(separator: ", "))"
            + (custom.isEmpty ? "" : ", or one of this item's: " + custom.joinedText(separator: ", "))
    }
}

/// On a wire (the agent's `release`, an `ItemChange`'s `clear`): a built-in field as its name
/// (`"password"`), a custom field as `{"custom": NAME}`. Any other name is a decoding error.
extension ItemField: Codable {
    private struct CustomKey: CodingKey {
        var stringValue: String { "custom" }
        var intValue: Int? { nil }
        init() {}
        init?(stringValue: String) { guard stringValue == "custom" else { return nil } }
        init?(intValue: Int) { nil }
    }

    /// Encodes the field (see the type's comment).
    public func encode(to encoder: any Encoder) throws {
        if case .custom(let name) = self {
            var c = encoder.container(keyedBy: CustomKey.self)
            try c.encode(name, forKey: CustomKey())
        } else {
            var c = encoder.singleValueContainer()
            try c.encode(spelling)
        }
    }

    /// Decodes a field.
    /// - Throws: `DecodingError` for a name that is no built-in field, or another shape.
    public init(from decoder: any Decoder) throws {
        if let c = try? decoder.singleValueContainer(), let name = try? c.decode(String.self) {
            guard let field = ItemField(builtIn: name) else {
                throw DecodingError.dataCorruptedError(in: c, debugDescription: "unknown field '\(name)'")
            }
            self = field
            return
        }
        let c = try decoder.container(keyedBy: CustomKey.self)
        self = .custom(try c.decode(String.self, forKey: CustomKey()))
    }
}

/// Which fields a release hands out: the one typed set every release takes (in-process, through
/// the agent, on its wire).
public enum FieldSelection: Equatable, Sendable {
    /// Every secret the item has now: its password, TOTP secret, notes and each hidden or TOTP
    /// custom field (what `get --reveal` shows). Former passwords are released only when named
    /// (`.history`).
    case all
    /// These fields, in this order (audit records follow it). Non-secret fields named are read
    /// from the overview, and audited when the item has them.
    case fields([ItemField])

    /// Nothing released.
    public static let nothing = FieldSelection.fields([])

    /// Whether nothing is named.
    public var isEmpty: Bool { self == .nothing }

    /// The fields meant for `item`, each once, by the field it reads (`otp` and `totp-uri`
    /// are `totp`): `.all` the item's current secrets (password, TOTP, notes, secret custom
    /// fields, whether or not it has a value for them), `.fields` those named.
    public func resolved(for item: Item) -> [ItemField] {
        let named: [ItemField] = switch self {
        case .all: [.password, .totp, .notes] + item.fields.filter(\.kind.isSecret).map { .custom($0.name) }
        case .fields(let fields): fields.map(\.source)
        }
        var seen = Set<ItemField>()
        return named.filter { seen.insert($0).inserted }
    }
}

/// On the agent's wire: `.all` as `"all"`, `.fields` as an array of fields (`["password",
/// {"custom": "pin"}]`).
extension FieldSelection: Codable {
    /// Encodes the selection.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .all:
            var c = encoder.singleValueContainer()
            try c.encode("all")
        case .fields(let fields):
            var c = encoder.unkeyedContainer()
            for f in fields { try c.encode(f) }
        }
    }

    /// Decodes a selection.
    /// - Throws: `DecodingError` for another string than `"all"`, an unknown field.
    public init(from decoder: any Decoder) throws {
        if let c = try? decoder.singleValueContainer(), let word = try? c.decode(String.self) {
            guard word == "all" else { throw DecodingError.dataCorruptedError(in: c, debugDescription: "a field selection is \"all\" or a list of fields") }
            self = .all
            return
        }
        var c = try decoder.unkeyedContainer()
        var fields: [ItemField] = []
        while !c.isAtEnd { fields.append(try c.decode(ItemField.self)) }
        self = .fields(fields)
    }
}

/// The values of fields, and the rule of fingerprint login: which releases need a fresh match.
extension Item {
    /// The value of `field` as text, nil when the item has none (`urls` one a line, `tags`
    /// comma-separated, `history` newest first one a line). `otp` has no stored value (its code
    /// is computed from `totp`): nil.
    public func value(of field: ItemField) -> String? {
        switch field {
        case .name: name
        case .type: type.rawValue
        case .username: username
        case .password: password
        case .url: urls.first
        case .urls: urls.isEmpty ? nil : urls.joinedText(separator: "\n")
        case .notes: notes
        case .tags: tags.isEmpty ? nil : tags.joinedText(separator: ",")
        case .totp, .totpURI: totp
        case .otp: nil
        case .history: passwordHistory.isEmpty ? nil : passwordHistory.reversed().map(\.password).joinedText(separator: "\n")
        case .userPrompt: userPrompt
        case .passwordPrompt: passwordPrompt
        case .custom(let name): customField(name)?.value
        }
    }

    /// Whether `field` names a value of the secrets record (the password, the TOTP secret in any
    /// form, the notes, the history, a hidden or TOTP custom field of this item): reading it is
    /// a release.
    public func isSecretField(_ field: ItemField) -> Bool {
        switch field {
        case .password, .totp, .totpURI, .otp, .notes, .history: true
        case .custom(let name): customField(name)?.kind.isSecret ?? false
        case .name, .type, .username, .url, .urls, .tags, .userPrompt, .passwordPrompt: false
        }
    }

    /// Whether handing out `fields` of this item needs a fresh fingerprint match: with
    /// fingerprint login on, any selection with a secret in it (`.all` always).
    public func releaseNeedsFreshMatch(_ fields: FieldSelection) -> Bool {
        guard fingerprintLogin else { return false }
        return switch fields {
        case .all: true
        case .fields(let named): named.contains { isSecretField($0) }
        }
    }

    /// This item with every secret `fields` does not name withheld (as its overview has them).
    public func withholdingSecrets(except fields: FieldSelection) -> Item {
        let keep = Set(fields.resolved(for: self))
        var item = self
        if !keep.contains(.password) { item.password = nil }
        if !keep.contains(.totp) { item.totp = nil }
        if !keep.contains(.notes) { item.notes = nil }
        if !keep.contains(.history) { item.passwordHistory = [] }
        for k in item.fields.indices where item.fields[k].kind.isSecret && !keep.contains(.custom(item.fields[k].name)) {
            item.fields[k].value = ""
        }
        return item
    }
}

extension ItemOverview {
    /// Whether the item has a value for `field`, told without opening a secret: a secret by
    /// the overview's flags (a secret custom field by its name), any other field by its value.
    public func has(_ field: ItemField) -> Bool {
        switch field.source {
        case .password: hasPassword
        case .totp: hasTOTP
        case .notes: hasNotes
        case .history: historyCount > 0
        case .custom(let name): item.customField(name) != nil
        default: item.value(of: field) != nil
        }
    }
}

/// The nearest of some known words to a mistyped one: the "did you mean" of unknown commands,
/// options and fields.
package enum Spelling {
    /// The candidate meant by a mistyped `word`: one it is a prefix of (the shortest), else the
    /// nearest within a small distance counting a swap of two neighbours as one edit (`lsit` is
    /// one edit from `list`), else nil. Distance 1 for words up to 4 characters, 2 beyond.
    /// Leading dashes are ignored for the prefix (`--fi` is a prefix of `--field`).
    package static func nearest(to word: String, among candidates: [String]) -> String? {
        let bare = word.drop { $0 == "-" }
        if bare.count >= 2 {
            let prefixed = candidates.filter { $0.drop { $0 == "-" }.hasPrefix(bare) }
            if let best = prefixed.min(by: { $0.count < $1.count }) { return best }
        }
        let limit = word.count <= 4 ? 1 : 2
        let scored = candidates.map { ($0, distance(word, $0)) }.filter { $0.1 <= limit }
        return scored.min { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0.count < $1.0.count) }?.0
    }

    /// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
    /// neighbouring characters each count one.
    package static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var d = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1) }
            }
        }
        return d[a.count][b.count]
    }
}
