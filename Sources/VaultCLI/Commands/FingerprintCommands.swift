import VaultKit

enum FingerprintCommands {
    static let all: [CommandSpec] = []
}

extension Auth {
    /// Fingerprint fields of `vault status`.
    static func statusFields(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> [String: Any] { [:] }
    /// A passcode or recovery unlock succeeded: resets the fingerprint lockout.
    static func passcodeSucceeded(_ store: VaultStore, _ ctx: CommandContext) throws {}
}
