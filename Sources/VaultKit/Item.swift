import Foundation

/// A saved login. Everything here, the name included, lives only inside the sealed record.
public struct Item: Codable, Equatable, Sendable {
    /// The item's name (its key for `get`, `rm`, ...).
    public var name: String
    /// The account name.
    public var username: String?
    /// The secret.
    public var password: String?
    /// Where the login is used.
    public var urls: [String]
    /// Free text.
    public var notes: String?
    /// Labels for search.
    public var tags: [String]
    /// An `otpauth://` URI holding a TOTP secret.
    public var totp: String?
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

    /// A new item stamped with the current time.
    public init(name: String, username: String? = nil, password: String? = nil, urls: [String] = [],
                notes: String? = nil, tags: [String] = [], totp: String? = nil, fingerprintLogin: Bool = false,
                origin: String? = nil, now: Int64 = unixNow()) {
        self.name = name
        self.username = username
        self.password = password
        self.urls = urls
        self.notes = notes
        self.tags = tags
        self.totp = totp
        self.fingerprintLogin = fingerprintLogin
        self.origin = origin
        created = now
        modified = now
    }

    /// Checks and normalises an item name: Unicode NFC, no leading or trailing space, no control
    /// characters, no `..` component, at most 256 characters.
    public static func normalize(name: String) throws -> String {
        let n = name.precomposedStringWithCanonicalMapping
        guard !n.isEmpty, n.count <= 256, n.utf8.count <= 1024 else {
            throw VaultError.usage("an item name must be 1 to 256 characters (at most 1024 bytes)")
        }
        guard n.trimmingCharacters(in: .whitespaces) == n else {
            throw VaultError.usage("an item name cannot start or end with a space")
        }
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
        guard !n.split(separator: "/", omittingEmptySubsequences: false).contains(where: { $0 == ".." || $0 == "." }) else {
            throw VaultError.usage("an item name cannot contain '.' or '..' components")
        }
        return n
    }

    /// The value of a named field, or nil when the item has none (`username`, `password`, `url`,
    /// `notes`, `tags`, `totp`, `name`).
    public func field(_ field: String) throws -> String? {
        switch field {
        case "name": name
        case "username", "user": username
        case "password": password
        case "url": urls.first
        case "urls": urls.isEmpty ? nil : urls.joined(separator: "\n")
        case "notes": notes
        case "tags": tags.isEmpty ? nil : tags.joined(separator: ",")
        case "totp": totp
        default:
            throw VaultError.usage("unknown field '\(field)'", hint: "fields: \(Item.fieldNames.joined(separator: ", "))")
        }
    }

    /// The fields `field(_:)` knows.
    public static let fieldNames = ["name", "username", "password", "url", "urls", "notes", "tags", "totp"]
}

/// A vault's own settings (policy and passcode rules), stored in the clear in the vault database:
/// they only ever make unlocking stricter than the passcode, which always works.
public struct VaultSettings: Codable, Equatable, Sendable {
    /// The default policy of this vault's unlocks.
    public var policy: AuthPolicy = .biometricsOrPasscode
    /// Hours after a passcode unlock before the passcode is asked again (0 = never).
    public var passcodeIntervalHours: Int = 48
    /// Whether the first unlock after a reboot needs the passcode.
    public var passcodeAfterReboot: Bool = true

    /// Default settings.
    public init() {}

    /// The rules the key authority applies before a scan.
    public var passcodeRules: PasscodeRules {
        PasscodeRules(afterReboot: passcodeAfterReboot, intervalHours: passcodeIntervalHours)
    }
}

/// The current time in whole seconds since 1970.
public func unixNow() -> Int64 { Int64(Date().timeIntervalSince1970) }
