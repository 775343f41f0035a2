import FoundationEssentials
import VaultKit

/// `vault repair`: the item rows that cannot be opened, listed and (with --remove) deleted, so one
/// bad row never blocks a rotation for good.
enum RepairCommand {
    /// The options of `repair`, declared once: the table lists them and the command reads them.
    enum RepairOptions {
        static let remove = OptionSpec.flag("--remove", "delete the damaged rows (asks on a terminal; --force otherwise)")
        static let force = OptionSpec.flag("--force", "with --remove: do not ask")
        static let json = OptionSpec.flag("--json", "print JSON")
    }

    static let repair = CommandSpec(
        name: "repair", summary: "list item rows that cannot be opened, and remove them with --remove (needs the passcode)",
        usage: "vault repair [--remove] [--force] [--json]",
        options: [
            RepairOptions.remove,
            RepairOptions.force,
            RepairOptions.json,
        ],
        examples: "vault repair\nvault repair --remove --force --passcode-fd 3 3<passcode",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            if inv.has(RepairOptions.remove) && !inv.has(RepairOptions.force) && (inv.noInput || !ctx.terminal.isAvailable) {
                throw VaultError.usage("refusing to delete rows without confirmation", hint: "pass --force")
            }
            // The passcode, not a finger: removing data is the owner's decision.
            let vault = try Auth.unlockWithPasscode(store, inv, ctx, why: "repair needs the passcode")
            let damaged = try vault.damagedRows()
            var removed = 0
            if inv.has(RepairOptions.remove), !damaged.isEmpty {
                if !inv.has(RepairOptions.force) {
                    let answer = ctx.terminal.readLine(prompt: "delete \(damaged.count) damaged row\(damaged.count == 1 ? "" : "s")? [y/N] ") ?? ""
                    guard ["y", "yes"].contains(answer.lowercased()) else { throw VaultError.userCancel }
                }
                removed = try vault.removeDamagedRows(damaged)
            }
            if inv.has(RepairOptions.json) {
                ctx.stdout.write(jsonText(["damaged": damaged, "removed": removed]))
            } else {
                for id in damaged { ctx.stdout.write(id + "\n") }
            }
            if damaged.isEmpty {
                ctx.say("vault: every item row of vault '\(store.location.name)' opens")
            } else if inv.has(RepairOptions.remove) {
                ctx.say("vault: removed \(removed) damaged row\(removed == 1 ? "" : "s")")
            } else {
                ctx.say("vault: \(damaged.count) row\(damaged.count == 1 ? "" : "s") cannot be opened; 'vault repair --remove\(store.location.name == "default" ? "" : " --vault \(store.location.name)")' deletes \(damaged.count == 1 ? "it" : "them")")
            }
        })
}
