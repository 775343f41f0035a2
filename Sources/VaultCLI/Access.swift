import Foundation
import VaultKit

/// Opens the vault named by `--vault`: through the unlock session when one is open, otherwise by
/// authenticating here (finger or passcode). `purpose` is shown at the prompt.
func openAccess(_ inv: Invocation, _ ctx: CommandContext, purpose: String) throws -> any VaultAccess {
    let loc = try location(inv, ctx)
    if let session = try SessionAccess.connect(loc, inv, ctx) { return session }
    let store = try VaultStore.open(loc)
    return try Auth.unlock(store, inv, ctx, purpose: purpose)
}
