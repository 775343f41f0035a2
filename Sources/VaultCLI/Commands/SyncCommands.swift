import Foundation
import VaultKit
import VaultSync
import VaultSystem

/// `vault remote`, `vault sync`, `vault clone`: one vault on every machine through a git remote
/// (VaultSync does the work; docs/cli.md has the merge rules).
enum SyncCommands {
    static var all: [CommandSpec] { [remote, sync, clone] }

    /// The options of `remote`, declared once.
    enum RemoteOptions {
        static let json = OptionSpec.flag("--json", "print {\"vault\", \"remote\"} (show)")
    }

    static let remote = CommandSpec(
        name: "remote", summary: "set, show or remove the git remote the vault syncs with",
        usage: "vault remote set URL | vault remote show [--json] | vault remote remove",
        options: [RemoteOptions.json], arguments: 1...2,
        examples: """
        vault remote set git@github.com:me/vault-sync.git
        vault remote set /srv/backup/vault.git
        vault remote show
        """,
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            guard loc.exists else { throw VaultError.vaultNotFound(name: loc.name, path: loc.folder) }
            switch (inv.arguments[0], inv.arguments.count) {
            case ("set", 2):
                try SyncRemote.set(inv.arguments[1], location: loc, environment: ctx.environment)
                ctx.say("vault: vault '\(loc.name)' syncs with \(inv.arguments[1]); run 'vault sync'")
            case ("show", 1):
                let url = try SyncRemote.show(location: loc, environment: ctx.environment)
                if inv.has(RemoteOptions.json) {
                    ctx.stdout.write(jsonText(["vault": loc.name, "remote": url.map { $0 as Any } ?? NSNull()] as [String: Any]))
                } else if let url {
                    ctx.stdout.write(url + "\n")
                } else {
                    throw VaultError.failure("vault '\(loc.name)' has no remote", hint: "set one with 'vault remote set URL'")
                }
            case ("remove", 1):
                try SyncRemote.remove(location: loc, environment: ctx.environment)
                ctx.say("vault: vault '\(loc.name)' has no remote now (its sync history stays in \(loc.folder)/sync.git)")
            default:
                throw VaultError.usage("usage: vault remote set URL | show | remove")
            }
        })

    /// The options of `sync`, declared once.
    enum SyncOptions {
        static let json = OptionSpec.flag("--json", "print the summary (or with --conflicts the list) as JSON")
        static let conflicts = OptionSpec.flag("--conflicts", "list the conflicts syncs resolved, and how (nothing is synced)")
        static let reveal = OptionSpec.flag("--reveal", "with --conflicts: also print the secret values a conflict set aside")
    }

    static let sync = CommandSpec(
        name: "sync", summary: "commit this machine's changes, fetch, merge item by item, push",
        usage: "vault sync [--json] | vault sync --conflicts [--reveal] [--json]",
        options: [SyncOptions.json, SyncOptions.conflicts, SyncOptions.reveal] + Auth.options,
        examples: """
        vault sync
        vault sync --json --passcode-fd 3 3<passcode
        vault sync --conflicts
        """,
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let vault = try Auth.unlock(store, inv, ctx, purpose: "sync the vault")
            let engine = try SyncEngine(vault: vault, environment: ctx.environment, interactive: !inv.noInput && ctx.terminal.isAvailable)
            if inv.has(SyncOptions.conflicts) {
                try listConflicts(try engine.conflicts(), reveal: inv.has(SyncOptions.reveal), json: inv.has(SyncOptions.json), ctx)
                return
            }
            report(try engine.sync(), vault: store.location.name, json: inv.has(SyncOptions.json), ctx)
        })

    /// The options of `clone`, declared once.
    enum CloneOptions {
        static let recovery = OptionSpec.flag("--recovery", "open the cloned vault with the recovery key instead of the passcode")
        static let json = OptionSpec.flag("--json", "print the summary as JSON")
    }

    static let clone = CommandSpec(
        name: "clone", summary: "start this machine's copy of a vault from its git remote (passcode or recovery key)",
        usage: "vault clone URL [--vault NAME] [--recovery [--recovery-key-fd N]] [--json]",
        options: [CloneOptions.recovery, VaultCommands.RecoverOptions.recoveryKeyFD, CloneOptions.json], arguments: 1...1,
        examples: """
        vault clone git@github.com:me/vault-sync.git
        vault clone /srv/backup/vault.git --vault work --passcode-fd 3 3<passcode
        vault clone URL --recovery --recovery-key-fd 3 3<recovery-key.txt
        """,
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            let url = inv.arguments[0]
            try SyncRemote.check(url)
            if loc.exists {
                throw VaultError.alreadyExists("vault '\(loc.name)'")
            }
            var made = false
            do {
                let header = try SyncRemote.cloneHeader(url, location: loc, environment: ctx.environment)
                try VaultStore.createEmpty(at: loc, vaultID: header.vaultID, generation: header.generation, slots: header.slots)
                made = true
                let store = try VaultStore.open(loc)
                let vault = inv.has(CloneOptions.recovery) || inv.has(VaultCommands.RecoverOptions.recoveryKeyFD)
                    ? try Auth.unlockWithRecoveryKey(store, inv, ctx)
                    : try Auth.unlockWithPasscode(store, inv, ctx, why: "the cloned vault opens with its passcode")
                let engine = try SyncEngine(vault: vault, environment: ctx.environment, interactive: !inv.noInput && ctx.terminal.isAvailable)
                let summary = try engine.clone()
                ctx.say("vault: cloned vault '\(loc.name)' (\(summary.received) item\(summary.received == 1 ? "" : "s")); bind a finger on this machine with 'vault enroll --bind'")
                if inv.has(CloneOptions.json) { report(summary, vault: loc.name, json: true, ctx) }
            } catch {
                // A clone that did not finish leaves nothing: the next attempt starts afresh.
                if made || FileSystem.exists(loc.folder + "/sync.git") { SyncRemote.discardClone(loc) }
                throw error
            }
        })

    static func report(_ s: SyncSummary, vault: String, json: Bool, _ ctx: CommandContext) {
        if json {
            ctx.stdout.write(jsonText(["vault": vault, "sent": s.sent, "received": s.received, "deleted": s.deleted,
                                       "merged": s.merged, "retries": s.retries, "conflicts": s.conflicts, "head": s.head]))
            return
        }
        ctx.say("vault: synced '\(vault)': \(s.sent) sent, \(s.received) received, \(s.deleted) deleted" + (s.merged ? " (merged)" : ""))
        for c in s.conflicts { ctx.say("vault: resolved: " + c) }
    }

    static func listConflicts(_ list: [(record: ConflictSummary, text: String)], reveal: Bool, json: Bool, _ ctx: CommandContext) throws {
        if json {
            let rows: [[String: Any]] = list.map { c in
                var o: [String: Any] = ["kind": c.record.kind, "item": c.record.name, "time": c.record.time]
                if let f = c.record.field { o["field"] = f }
                if !c.record.secret || reveal {
                    if let k = c.record.kept { o["kept"] = k }
                    if let l = c.record.lost { o["lost"] = l }
                }
                return o
            }
            ctx.stdout.write(jsonText(rows))
            return
        }
        if list.isEmpty { ctx.say("vault: no conflicts were resolved"); return }
        for c in list {
            var line = c.text
            if let lost = c.record.lost, c.record.kind == "field" { line += c.record.secret && !reveal ? "; set aside: (secret, --reveal)" : "; set aside: \(lost)" }
            ctx.stdout.write(line + "\n")
        }
    }
}
