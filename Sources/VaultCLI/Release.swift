import VaultKit

/// Every command hands out secrets through here, so fingerprint login is enforced on every path
/// (get, --clip, run, login, export, the credential helpers, through a session or not): an item
/// with the switch on is released only with a key authority's token over a nonce of the vault
/// that holds the key (this process's, or the agent's), made here when the vault refuses. The
/// vault checks the token (`UnlockedVault.requireFreshMatch`); nothing here is taken on trust.
enum Release {
    /// The item with the secrets `fields` selects, after a fresh match when its switch is on.
    static func item(_ name: String, fields: FieldSelection, command: String, from vault: any VaultAccess,
                     _ inv: Invocation, _ ctx: CommandContext) throws -> Item {
        try guarded(vault, inv, ctx) { try vault.release(named: name, fields: fields, command: command, freshMatch: $0) }
    }

    /// The item's overview with the secrets `fields` selects in guarded memory, after a fresh
    /// match when its switch is on.
    static func secrets(_ name: String, fields: FieldSelection, command: String, from vault: any VaultAccess,
                        _ inv: Invocation, _ ctx: CommandContext) throws -> ReleasedItem {
        try guarded(vault, inv, ctx) { try vault.releaseSecrets(named: name, fields: fields, command: command, freshMatch: $0) }
    }

    /// One secret in guarded memory, after a fresh match when the item's switch is on.
    static func secret(_ name: String, field: ItemField, command: String, from vault: any VaultAccess,
                       _ inv: Invocation, _ ctx: CommandContext) throws -> SecretBytes {
        try guarded(vault, inv, ctx) { try vault.releaseSecret(named: name, field: field, command: command, freshMatch: $0) }
    }

    /// Every item's two records lent from guarded memory, streamed (export), after one fresh
    /// match for the whole vault when any has the switch on (the vault refuses before releasing
    /// anything).
    static func each(command: String, from vault: UnlockedVault, _ inv: Invocation, _ ctx: CommandContext,
                     _ body: (ReleasedRecordsEntry) throws -> Void) throws {
        try guarded(vault, inv, ctx, purpose: { _ in .releaseAll }) { try vault.releaseEachRecords(command: command, freshMatch: $0, body) }
    }

    /// Runs `body` with `first` (nil: no token); when the vault answers that an item needs a
    /// fresh match, makes one for `purpose(item)` and runs `body` again with its token. A token
    /// refused once more (its nonce outlived a slow scan, or was used) gets one more match, which
    /// reuses the one this command just made: no second touch.
    static func guarded<T: ~Copyable>(_ vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext, first: FreshMatchToken? = nil,
                                      purpose: (String) -> FreshMatchPurpose = { .release(item: $0) }, reuse: Int = 0,
                                      prompt: (String) -> String = releasePrompt,
                                      _ body: (FreshMatchToken?) throws -> T) throws -> T {
        var token = first
        var matches = 0
        while true {
            do {
                return try body(token)
            } catch VaultError.freshMatchNeeded(let item) where matches < 2 {
                matches += 1
                token = try freshMatch(purpose(item), vault, inv, ctx, reuse: reuse, prompt: prompt(item))
            }
        }
    }

    /// The prompt of a release of `item`.
    static func releasePrompt(_ item: String) -> String {
        "touch the fingerprint reader to release '\(item)' (fingerprint login is on)"
    }

    /// The match fingerprint login demands for `purpose`: a nonce of `vault`, verified by the key
    /// authority (one this command already made counts), as the token the vault checks.
    static func freshMatch(_ purpose: FreshMatchPurpose, _ vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext,
                           reuse: Int = 0, prompt: String) throws -> FreshMatchToken {
        try Auth.requireFreshMatch(vault, inv, ctx, purpose: purpose, reuse: reuse, prompt: prompt)
    }
}
