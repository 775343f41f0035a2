import VaultKit

/// Every command hands out secrets through here, so fingerprint login is enforced on every path
/// (get, --clip, run, login, export, the credential helpers, through a session or not): an item
/// with the switch on is released only after a fresh match, made here when the vault refuses.
enum Release {
    /// The item with the secrets named in `fields`, after a fresh match when its switch is on.
    static func item(_ name: String, fields: [String], command: String, from vault: any VaultAccess,
                     _ inv: Invocation, _ ctx: CommandContext) throws -> Item {
        do {
            return try vault.release(named: name, fields: fields, command: command, freshMatch: false)
        } catch VaultError.freshMatchNeeded(let item) {
            try freshMatch(for: item, vault, inv, ctx)
            return try vault.release(named: name, fields: fields, command: command, freshMatch: true)
        }
    }

    /// The item's overview with the secrets named in `fields` in guarded memory, after a fresh
    /// match when its switch is on.
    static func secrets(_ name: String, fields: [String], command: String, from vault: any VaultAccess,
                        _ inv: Invocation, _ ctx: CommandContext) throws -> ReleasedItem {
        do {
            return try vault.releaseSecrets(named: name, fields: fields, command: command, freshMatch: false)
        } catch VaultError.freshMatchNeeded(let item) {
            try freshMatch(for: item, vault, inv, ctx)
            return try vault.releaseSecrets(named: name, fields: fields, command: command, freshMatch: true)
        }
    }

    /// One secret in guarded memory, after a fresh match when the item's switch is on.
    static func secret(_ name: String, field: String, command: String, from vault: any VaultAccess,
                       _ inv: Invocation, _ ctx: CommandContext) throws -> SecretBytes {
        do {
            return try vault.releaseSecret(named: name, field: field, command: command, freshMatch: false)
        } catch VaultError.freshMatchNeeded(let item) {
            try freshMatch(for: item, vault, inv, ctx)
            return try vault.releaseSecret(named: name, field: field, command: command, freshMatch: true)
        }
    }

    /// Every item with its secrets lent from guarded memory, streamed (export), after one fresh
    /// match when any has the switch on (the vault refuses before releasing anything).
    static func each(command: String, from vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext,
                     _ body: (ReleasedEntry) throws -> Void) throws {
        do {
            try vault.releaseEachSecrets(command: command, freshMatch: false, body)
        } catch VaultError.freshMatchNeeded(let item) {
            try freshMatch(for: item, vault, inv, ctx)
            try vault.releaseEachSecrets(command: command, freshMatch: true, body)
        }
    }

    /// The scan fingerprint login demands (a finger this command already matched counts).
    static func freshMatch(for item: String, _ vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext) throws {
        try Auth.requireFreshMatch(vault, inv, ctx, prompt: "touch the fingerprint reader to release '\(item)' (fingerprint login is on)")
    }
}
