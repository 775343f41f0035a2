import Foundation
import VaultKit

/// An open vault as commands use it: directly (the key in this process, after authenticating
/// here) or through the unlock session's agent (the key stays in the agent). Commands go through
/// this one protocol, so every one of them works both ways.
protocol VaultAccess: AnyObject {
    /// The vault's name.
    var vaultName: String { get }
    /// Reads one item (`.itemNotFound`, `.corrupt`).
    func item(named name: String) throws -> Item
    /// Every row (damaged ones reported as such).
    func allItems() throws -> [ItemEntry]
    /// Whether an item exists.
    func contains(_ name: String) throws -> Bool
    /// Adds (or with `replace`, replaces) an item.
    func add(_ item: Item, replace: Bool) throws
    /// Replaces the item called `name` with `item` (which may carry a new name).
    func put(_ item: Item, replacing name: String) throws
    /// Deletes an item.
    func remove(_ name: String) throws
    /// Writes an audit record of a secret released to `command`.
    func recordRelease(item: String, field: String, command: String) throws
    /// The audit log.
    func auditRecords(limit: Int?) throws -> [Result<AuditRecord, VaultError>]
}

extension UnlockedVault: VaultAccess {
    var vaultName: String { store.location.name }

    func put(_ item: Item, replacing name: String) throws {
        try update(name) { $0 = item }
    }

    func recordRelease(item: String, field: String, command: String) throws {
        try appendAudit(AuditRecord(item: item, field: field, command: command, uid: getuid(), pid: getpid()))
    }
}

extension VaultAccess {
    /// Reads `name`, changes it, writes it back.
    func update(_ name: String, _ change: (inout Item) throws -> Void) throws {
        var item = try self.item(named: name)
        try change(&item)
        item.modified = unixNow()
        try put(item, replacing: name)
    }
}

/// Opens the vault named by `--vault`: through the unlock session when one is open, otherwise by
/// authenticating here (finger or passcode). `purpose` is shown at the prompt.
func openAccess(_ inv: Invocation, _ ctx: CommandContext, purpose: String) throws -> any VaultAccess {
    let loc = try location(inv, ctx)
    if let session = try SessionAccess.connect(loc, inv, ctx) { return session }
    let store = try VaultStore.open(loc)
    return try Auth.unlock(store, inv, ctx, purpose: purpose)
}
