import VaultKit

/// The CLI's link to the system key authority (`vault-authd`). Until the daemon's client is part
/// of the build, the system authority never answers, and asking for it is exit 15 with a hint.
enum SystemAuthorityLink {
    /// Whether a `vault-authd` answers at `socket` as its own system user.
    static func answers(_ socket: String) -> Bool { false }

    /// A client of the daemon at `socket`.
    /// - Throws: `.biometryNotAvailable` naming the socket when it does not answer.
    static func connect(_ socket: String, _ inv: Invocation, _ ctx: CommandContext, timeout: Double, interactive: Bool) throws -> any KeyAuthority {
        throw VaultError.biometryNotAvailable("the system key authority (vault-authd) does not answer at \(socket)")
    }
}
