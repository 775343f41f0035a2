import FoundationEssentials
internal import VaultSystem

/// What an item is: a login (the default), a secure note, a payment card, an identity or an SSH
/// key (`ssh-key`: its public key, private key and signing policy are custom fields, see
/// `SSHKeyFields`). What another manager's item holds beyond these goes into custom fields.
public enum ItemType: String, Codable, CaseIterable, Sendable {
    case login, note, card, identity
    /// An item a Secret Service client stored (`vault secret-service`): its label, attributes and
    /// content type are text fields (`secret-service.*`, in the overview, searchable), its secret
    /// the password (docs/format.md, "Secret Service items").
    case secretService = "secret-service"
    case sshKey = "ssh-key"
}

/// The custom fields of an `ssh-key` item (docs/format.md): `public-key`, the authorized_keys
/// line (text); `private-key`, an unencrypted openssh-key-v1 file (hidden: a secret, released
/// only with a fresh match, since `vault ssh-key` turns fingerprint login on); `confirm`, when
/// the SSH agent asks for a finger (`sign`, `session` or `none`).
public enum SSHKeyFields {
    /// The authorized_keys line.
    public static let publicKey = "public-key"
    /// The private key, an openssh-key-v1 file.
    public static let privateKey = "private-key"
    /// The agent's policy.
    public static let confirm = "confirm"
}

/// How a custom field's value is treated: `text` and `url` are shown in summaries, `hidden` and
/// `totp` are masked like a password and reading one is an audited release.
public enum CustomFieldKind: String, Codable, CaseIterable, Sendable {
    case text, hidden, url, totp

    /// Whether reading the value is a release (audited, masked in summaries).
    public var isSecret: Bool { self == .hidden || self == .totp }
}

/// A named value of an item beyond the built-in fields (a card's number, a security question).
public struct CustomField: Codable, Equatable, Sendable {
    /// The field's name as the user sees it (unique within the item).
    public var name: String
    /// How the value is treated.
    public var kind: CustomFieldKind
    /// The value.
    public var value: String

    /// A custom field.
    public init(name: String, kind: CustomFieldKind = .text, value: String) {
        self.name = name
        self.kind = kind
        self.value = value
    }
}

/// A password an item had before, and when it stopped being the current one.
public struct PasswordChange: Codable, Equatable, Sendable {
    /// The former password.
    public var password: String
    /// When it was replaced, seconds since 1970.
    public var replaced: Int64

    /// A history entry.
    public init(password: String, replaced: Int64) {
        self.password = password
        self.replaced = replaced
    }
}

/// A saved item. Everything here, the name included, lives only inside the item's two sealed
/// records: the overview (what listings and matching read) and the secrets (the password, the TOTP
/// secret, notes, custom field values, password history; opened only when released).
public struct Item: Codable, Equatable, Sendable {
    /// The item's name (its key for `get`, `rm`, ...).
    public var name: String
    /// What the item is.
    public var type: ItemType
    /// The account name.
    public var username: String?
    /// The secret.
    public var password: String?
    /// Where the login is used.
    public var urls: [String]
    /// Free text.
    public var notes: String?
    /// Labels for search; a folder of another manager is kept as an `a/b` tag.
    public var tags: [String]
    /// An `otpauth://` URI holding a TOTP or HOTP secret.
    public var totp: String?
    /// Fields beyond the built-in ones, in their order.
    public var fields: [CustomField]
    /// Former passwords, oldest first (at most `Item.historyLimit`).
    public var passwordHistory: [PasswordChange]
    /// Whether `vault login` may fill this login after a fresh fingerprint match (off by default).
    public var fingerprintLogin: Bool
    /// Who stored it when not a person (`git`, `docker`).
    public var origin: String?
    /// The pattern `vault login` recognises the program's username prompt by (else the default).
    public var userPrompt: String?
    /// The pattern `vault login` recognises the program's password prompt by (else the default).
    public var passwordPrompt: String?
    /// Creation time, seconds since 1970.
    public var created: Int64
    /// Last change, seconds since 1970.
    public var modified: Int64

    private enum CodingKeys: String, CodingKey {
        case name, type, username, password, urls, notes, tags, totp, fields, passwordHistory, fingerprintLogin, origin,
             userPrompt, passwordPrompt, created, modified
    }

    /// Decodes an item; `type`, `fields` and `passwordHistory` default when absent (records and
    /// frames written before they existed).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        type = try c.decodeIfPresent(ItemType.self, forKey: .type) ?? .login
        username = try c.decodeIfPresent(String.self, forKey: .username)
        password = try c.decodeIfPresent(String.self, forKey: .password)
        urls = try c.decode([String].self, forKey: .urls)
        notes = try c.decodeIfPresent(String.self, forKey: .notes)
        tags = try c.decode([String].self, forKey: .tags)
        totp = try c.decodeIfPresent(String.self, forKey: .totp)
        fields = try c.decodeIfPresent([CustomField].self, forKey: .fields) ?? []
        passwordHistory = try c.decodeIfPresent([PasswordChange].self, forKey: .passwordHistory) ?? []
        fingerprintLogin = try c.decode(Bool.self, forKey: .fingerprintLogin)
        origin = try c.decodeIfPresent(String.self, forKey: .origin)
        userPrompt = try c.decodeIfPresent(String.self, forKey: .userPrompt)
        passwordPrompt = try c.decodeIfPresent(String.self, forKey: .passwordPrompt)
        created = try c.decode(Int64.self, forKey: .created)
        modified = try c.decode(Int64.self, forKey: .modified)
    }

    /// How many former passwords an item keeps.
    public static let historyLimit = 10

    /// A new item stamped with the current time.
    public init(name: String, type: ItemType = .login, username: String? = nil, password: String? = nil, urls: [String] = [],
                notes: String? = nil, tags: [String] = [], totp: String? = nil, fields: [CustomField] = [],
                passwordHistory: [PasswordChange] = [], fingerprintLogin: Bool = false,
                origin: String? = nil, now: Int64 = unixNow()) {
        self.name = name
        self.type = type
        self.username = username
        self.password = password
        self.urls = urls
        self.notes = notes
        self.tags = tags
        self.totp = totp
        self.fields = fields
        self.passwordHistory = passwordHistory
        self.fingerprintLogin = fingerprintLogin
        self.origin = origin
        created = now
        modified = now
    }

    /// Sets a new password, keeping the one it replaces in the history (the newest
    /// `historyLimit` kept).
    public mutating func replacePassword(with new: String?, now: Int64 = unixNow()) {
        if let old = password, old != new {
            passwordHistory.append(PasswordChange(password: old, replaced: now))
            if passwordHistory.count > Item.historyLimit { passwordHistory.removeFirst(passwordHistory.count - Item.historyLimit) }
        }
        password = new
    }

    /// The custom field called `name`, if any.
    public func customField(_ name: String) -> CustomField? { fields.first { $0.name == name } }

    /// Checks and normalises an item name: Unicode NFC, no leading or trailing space, no control
    /// characters, no `..` component, at most 256 characters.
    public static func normalize(name: String) throws -> String {
        // Printable ASCII is already NFC and holds no control, format or replacement character:
        // only the Unicode checks below cost (Foundation's normalisation about 4 µs a name, the
        // scalar properties as much again: 16% of an import before).
        let ascii = asciiShape(name)
        let printableASCII = ascii.printable
        let n = printableASCII ? name : name.nfc
        guard !n.isEmpty, (printableASCII ? n.utf8.count : n.count) <= 256, n.utf8.count <= 1024 else {
            throw VaultError.usage("an item name must be 1 to 256 characters (at most 1024 bytes)")
        }
        guard printableASCII ? !ascii.spaceAtAnEnd : n.trimmed(.whitespaces) == n else {
            throw VaultError.usage("an item name cannot start or end with a space")
        }
        if !printableASCII {
            guard !n.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw VaultError.usage("an item name cannot contain control characters")
            }
            guard !n.unicodeScalars.contains("\u{FFFD}") else {
                throw VaultError.usage("an item name cannot contain U+FFFD (the replacement character: was it given as invalid UTF-8?)")
            }
            // Zero-width and bidi controls make one name look like another (`git\u{200B}hub`).
            guard !n.unicodeScalars.contains(where: { $0.properties.generalCategory == .format }) else {
                throw VaultError.usage("an item name cannot contain invisible format characters (zero-width, bidi controls)")
            }
        }
        guard (printableASCII ? !ascii.dot : !n.utf8.contains(0x2E)) || !n.split(separator: "/", omittingEmptySubsequences: false).contains(where: { $0 == ".." || $0 == "." }) else {
            throw VaultError.usage("an item name cannot contain '.' or '..' components")
        }
        return n
    }

    /// Whether every byte of `name` is printable ASCII (U+0020 to U+007E), and if so whether it
    /// starts or ends with a space and holds a `.`: read in place, one pass (what `normalize`
    /// asks of the UTF-8 view of an ASCII name).
    private static func asciiShape(_ name: String) -> (printable: Bool, spaceAtAnEnd: Bool, dot: Bool) {
        var name = name
        return name.withUTF8 { b in
            guard let p = b.baseAddress, b.count > 0 else { return (true, false, false) }
            var dot = false
            var k = 0
            while k < b.count {
                let c = p[k]
                guard c >= 0x20 && c < 0x7F else { return (false, false, false) }
                if c == 0x2E { dot = true }
                k += 1
            }
            return (true, p[0] == 0x20 || p[b.count - 1] == 0x20, dot)
        }
    }
}

/// A vault's own settings (policy and passcode rules), stored in the clear in the vault database:
/// they only ever make unlocking stricter than the passcode, which always works.
public struct VaultSettings: Codable, Equatable, Sendable {
    /// The default policy of this vault's unlocks.
    package var policy: AuthPolicy = .biometricsOrPasscode
    /// Hours after a passcode unlock before the passcode is asked again (0 = never).
    public var passcodeIntervalHours: Int = 48
    /// Whether the first unlock after a reboot needs the passcode.
    public var passcodeAfterReboot: Bool = true
    /// Who the vault's Secret Service collection releases a secret to once unlocked (nil, as in
    /// rows written before the setting: `.session`).
    public var secretServiceApproval: SecretServiceApproval?

    /// Default settings.
    public init() {}

    /// The rules the key authority applies before a scan.
    package var passcodeRules: PasscodeRules {
        PasscodeRules(afterReboot: passcodeAfterReboot, intervalHours: passcodeIntervalHours)
    }
}

/// How `vault secret-service` releases the secrets of a vault's collection
/// (`vault settings --secret-service-approval`).
public enum SecretServiceApproval: String, Codable, Sendable, CaseIterable {
    /// To every client while the vault is unlocked (items with fingerprint login on still need
    /// a match per client).
    case session
    /// Each requesting client (its executable and process start time) only after a fresh
    /// finger match of its own, remembered until the vault locks: every item as if its
    /// fingerprint login were on, for Secret Service clients.
    case perClient = "per-client"
}

/// The current time in whole seconds since 1970.
public func unixNow() -> Int64 { Int64(Date().timeIntervalSince1970) }
