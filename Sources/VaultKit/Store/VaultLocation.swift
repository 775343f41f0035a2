import FoundationEssentials
import VaultSystem

/// Where a vault lives: `$VAULT_HOME/NAME/vault.db`, with `VAULT_HOME` defaulting to
/// `$XDG_DATA_HOME/vault` (else `~/.local/share/vault`).
public struct VaultLocation: Sendable, Equatable {
    /// The vault's name (`--vault`, `VAULT_NAME`, or `default`).
    public let name: String
    /// The root holding every vault of the user.
    public let root: String

    /// The vault's folder (0700).
    public var folder: String { root + "/" + name }
    /// The TPM a passcode on the TPM uses (`VAULT_TPM_TCTI`, else `/dev/tpmrm0`), nil when none.
    package var tpm: TPMDevice?

    /// The database file (0600).
    public var databasePath: String { folder + "/vault.db" }

    /// Resolves a location from an explicit name and the environment.
    /// - Throws: `VaultError.usage` for a name that is not a plain file name.
    public init(name explicit: String?, environment: [String: String]) throws {
        let name = explicit ?? environment["VAULT_NAME"].flatMap { $0.isEmpty ? nil : $0 } ?? "default"
        try VaultLocation.validate(name: name)
        self.name = name
        tpm = TPMDevice.fromEnvironment(environment)
        if let home = environment["VAULT_HOME"], !home.isEmpty {
            root = home.hasPrefix("/") ? home : FileManager.default.currentDirectoryPath + "/" + home
        } else if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            root = data + "/vault"
        } else {
            root = (environment["HOME"] ?? ProcessIdentity.homeDirectory(of: ProcessIdentity.uid) ?? "/") + "/.local/share/vault"
        }
    }

    init(uncheckedRoot: String, name: String) {
        self.root = uncheckedRoot
        self.name = name
    }

    /// A vault name is one path component of letters, digits, `.`, `_` and `-`, not starting with `.`.
    static func validate(name: String) throws {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        guard !name.isEmpty, name.count <= 64, !name.hasPrefix("."), name.allSatisfy({ allowed.contains($0) }) else {
            throw VaultError.usage("invalid vault name '\(name)'", hint: "use letters, digits, '.', '_' and '-'")
        }
    }

    /// Whether a vault database exists here.
    public var exists: Bool { FileSystem.exists(databasePath) }
}
