import FoundationEssentials
import VaultAgent
import VaultKit

/// Opens the vault named by `--vault`: through the unlock session when one is open, otherwise by
/// authenticating here (finger or passcode). `purpose` is shown at the prompt.
func openAccess(_ inv: Invocation, _ ctx: CommandContext, purpose: String) throws -> any VaultAccess {
    let loc = try location(inv, ctx)
    if let session = try openSession(loc, inv, ctx) { return session }
    let store = try VaultStore.open(loc)
    let vault = try Auth.unlock(store, inv, ctx, purpose: purpose)
    if SyncCommands.writeCommands.contains(inv.command.name) { ctx.writeVault = vault }
    return vault
}

/// The unlock session of `location`, or nil when none is open or the passcode was asked for.
/// An ended session answers 19 to a script (`--no-input` or no terminal); a person at a
/// terminal is told and authenticates again instead.
func openSession(_ location: VaultLocation, _ inv: Invocation, _ ctx: CommandContext) throws -> (any VaultAccess)? {
    if inv.has(AuthOptions.passcode) || inv.has(GlobalOptions.passcodeFD) { return nil }
    do {
        return try SessionAccess.open(location, environment: ctx.environment)
    } catch let e as VaultError where e.kind == .invalidContext {
        guard !inv.noInput && ctx.terminal.isAvailable else { throw e }
        ctx.say("vault: \(e.message); authenticating again")
        return nil
    }
}
