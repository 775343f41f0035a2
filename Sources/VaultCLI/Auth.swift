import VaultKit

/// Authentication for every command that needs the vault key. (Fingerprint and sessions plug in here.)
enum Auth {
    /// Options of commands that authenticate.
    static let options: [OptionSpec] = []

    /// Unlocks `store` for `purpose` (shown at the prompt).
    static func unlock(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext, purpose: String) throws -> UnlockedVault {
        let passcode = try SecretInput.passcode(ctx, inv, vault: store.location.name)
        return try store.unlock(passcode: passcode)
    }
}
