import FoundationEssentials
import VaultAgent
import VaultKit
import VaultSync
import VaultSystem

/// `vault remote`, `vault sync`, `vault clone`: one vault on every machine through a git remote
/// (VaultSync does the work; docs/cli.md has the merge rules).
enum SyncCommands {
    static var all: [CommandSpec] { [remote, sync, clone] }

    /// The options of `remote`, declared once.
    enum RemoteOptions {
        static let json = OptionSpec.flag("--json", "print {\"vault\", \"remote\", \"auto\", \"pending\", \"devices\"} (show)")
        static let auto = OptionSpec.flag("--auto", "set: sync in the background after each write (as 'vault settings --sync-auto on')")
        static let noAuto = OptionSpec.flag("--no-auto", "set: no background sync after writes")
    }

    static let remote = CommandSpec(
        name: "remote", summary: "set, show or remove the git remote the vault syncs with",
        usage: "vault remote set URL [--auto | --no-auto] | vault remote show [--json] | vault remote remove | vault remote revoke DEVICE",
        options: [RemoteOptions.json, RemoteOptions.auto, RemoteOptions.noAuto] + Auth.options, arguments: 1...2,
        examples: """
        vault remote set git@github.com:me/vault-sync.git
        vault remote set /srv/backup/vault.git --auto
        vault remote show
        vault remote revoke 0f3a9c1e5b7d2f4a6c8e0b1d3f5a7c9e
        """,
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            guard loc.exists else { throw VaultError.vaultNotFound(name: loc.name, path: loc.folder) }
            if inv.has(RemoteOptions.auto) && inv.has(RemoteOptions.noAuto) { throw VaultError.usage("--auto and --no-auto contradict each other") }
            if (inv.has(RemoteOptions.auto) || inv.has(RemoteOptions.noAuto)) && inv.arguments[0] != "set" {
                throw VaultError.usage("--auto and --no-auto go with 'vault remote set URL'")
            }
            switch (inv.arguments[0], inv.arguments.count) {
            case ("set", 2):
                try SyncRemote.set(inv.arguments[1], location: loc, environment: ctx.environment)
                if inv.has(RemoteOptions.auto) || inv.has(RemoteOptions.noAuto) { try SyncRemote.setAuto(inv.has(RemoteOptions.auto), location: loc) }
                let auto = SyncRemote.isAuto(location: loc)
                ctx.say("vault: vault '\(loc.name)' syncs with \(inv.arguments[1]); " + (auto ? "after each write, in the background" : "run 'vault sync'"))
            case ("show", 1):
                let url = try SyncRemote.show(location: loc, environment: ctx.environment)
                if inv.has(RemoteOptions.json) {
                    ctx.stdout.write(jsonText(["vault": loc.name, "remote": url.map { $0 as Any } ?? JSONNull(),
                                               "auto": url != nil && SyncRemote.isAuto(location: loc),
                                               "pending": url != nil && SyncPending.isPending(loc, environment: ctx.environment),
                                               "devices": try SyncRemote.devices(location: loc, environment: ctx.environment)] as [String: Any]))
                } else if let url {
                    ctx.stdout.write(url + "\n")
                    if SyncRemote.isAuto(location: loc) { ctx.say("vault: syncs after each write (--auto)") }
                    if SyncPending.isPending(loc, environment: ctx.environment) { ctx.say("vault: a change here may not be on the remote yet: 'vault sync' sends it") }
                    for d in try SyncRemote.devices(location: loc, environment: ctx.environment) { ctx.say("vault: device \(d)") }
                } else {
                    throw VaultError.failure("vault '\(loc.name)' has no remote", hint: "set one with 'vault remote set URL'")
                }
            case ("revoke", 2):
                // A signed commit of this machine: the key is needed here (a session does not lend it).
                let vault = try Auth.unlock(try VaultStore.open(loc), inv, ctx, purpose: "revoke a device")
                let engine = try SyncEngine(vault: vault, environment: ctx.environment, interactive: !inv.noInput && ctx.terminal.isAvailable)
                _ = try engine.revoke(inv.arguments[1].lowercased())
                ctx.say("vault: device \(inv.arguments[1].lowercased()) of vault '\(loc.name)' is revoked: its commits are refused from now on")
            case ("remove", 1):
                try SyncRemote.remove(location: loc, environment: ctx.environment)
                ctx.say("vault: vault '\(loc.name)' has no remote now (its sync history stays in \(loc.folder)/sync.git)")
            default:
                throw VaultError.usage("usage: vault remote set URL | show | remove | revoke DEVICE")
            }
        })

    /// The options of `sync`, declared once.
    enum SyncOptions {
        static let json = OptionSpec.flag("--json", "print the summary (or with --conflicts the list) as JSON")
        static let conflicts = OptionSpec.flag("--conflicts", "list the conflicts syncs resolved, and how (nothing is synced)")
        static let reveal = OptionSpec.flag("--reveal", "with --conflicts: also print the secret values a conflict set aside")
        static let background = OptionSpec.flag("--background",
            "what a write starts with --auto: the session's agent syncs; without a session, push what this machine committed (no key, fast-forward only)")
    }

    static let sync = CommandSpec(
        name: "sync", summary: "commit this machine's changes, fetch, merge item by item, push",
        usage: "vault sync [--json] | vault sync --conflicts [--reveal] [--json] | vault sync --background",
        options: [SyncOptions.json, SyncOptions.conflicts, SyncOptions.reveal, SyncOptions.background] + Auth.options,
        examples: """
        vault sync
        vault sync --json --passcode-fd 3 3<passcode
        vault sync --conflicts
        """,
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            if inv.has(SyncOptions.background) {
                if inv.has(SyncOptions.conflicts) || inv.has(SyncOptions.json) { throw VaultError.usage("--background takes no other option") }
                // The session when there is one (a full sync in the agent), else a push of what
                // is committed: never a prompt, never the key in this process.
                if let session = (try? SessionAccess.open(loc, environment: ctx.environment)) ?? nil {
                    _ = try session.sync()
                } else if try !SyncPending.pushCommitted(loc, environment: ctx.environment) {
                    throw VaultError.failure("the remote did not take this machine's commits", hint: "run 'vault sync'")
                }
                return
            }
            // In an unlock session the agent syncs, and lists conflicts: the key stays there.
            // Only `--reveal` (the secret values set aside) opens the key in this process.
            if !inv.has(SyncOptions.reveal), let session = try openSession(loc, inv, ctx) as? SessionAccess {
                if inv.has(SyncOptions.conflicts) {
                    let list = try session.syncConflicts().map { c in
                        (record: ConflictSummary(kind: c.kind, item: "", name: c.name, field: c.field, kept: c.kept, lost: c.lost, secret: c.secret, time: c.time),
                         text: c.text)
                    }
                    try listConflicts(list, reveal: false, json: inv.has(SyncOptions.json), ctx)
                } else {
                    report(try session.sync(), vault: loc.name, json: inv.has(SyncOptions.json), ctx)
                }
                return
            }
            let store = try VaultStore.open(loc)
            let vault = try unlockForSync(store, inv, ctx)
            let engine = try SyncEngine(vault: vault, environment: ctx.environment, interactive: !inv.noInput && ctx.terminal.isAvailable)
            if inv.has(SyncOptions.conflicts) {
                try listConflicts(try engine.conflicts(), reveal: inv.has(SyncOptions.reveal), json: inv.has(SyncOptions.json), ctx)
                return
            }
            report(try engine.sync(), vault: store.location.name, json: inv.has(SyncOptions.json), ctx)
        })

    /// The vault opened here for `sync --conflicts --reveal` (or a sync without a session).
    /// Revealing the secret values a conflict set aside needs the vault key in this process,
    /// and an unlock session never lends its key to another process (nor sends those values):
    /// with a session open it still authenticates, and a script that cannot (no
    /// `--passcode-fd`, no terminal) is told why rather than asked to open a session.
    static func unlockForSync(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> UnlockedVault {
        let asked = inv.has(AuthOptions.passcode) || inv.has(GlobalOptions.passcodeFD)
        let session = asked ? nil : (try? SessionAccess.open(store.location, environment: ctx.environment)) ?? nil
        if session != nil, !inv.noInput, ctx.terminal.isAvailable {
            ctx.say("vault: the unlock session does not lend the vault key to 'sync --conflicts --reveal'; authenticating here")
        }
        do {
            return try Auth.unlock(store, inv, ctx, purpose: "sync the vault")
        } catch VaultError.passcodeNeeded(let why) where session != nil {
            throw VaultError.failure(
                "vault sync --conflicts --reveal needs the vault key in this process and the unlock session of '\(store.location.name)' does not lend it (\(why))",
                hint: "pass the passcode with --passcode-fd N, or run 'vault sync --conflicts --reveal' at a terminal (finger or passcode)")
        }
    }

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

    /// The commands that write items: after one succeeds on a vault set to `--auto`, a sync starts.
    static let writeCommands: Set<String> = ["add", "edit", "rm", "mv", "import", "generate", "otp"]

    /// After a write: when the vault syncs automatically, commits the change to the sync
    /// repository here when this process opened the vault itself (no network: the key is here
    /// already, and only while the sync lock is free, so the write never waits on a sync),
    /// else marks it pending (`sync.pending`); then starts `vault sync --background` detached
    /// (a session of its own, no terminal, output discarded: it can name items) and returns at
    /// once. Each write starts its own; they queue on `sync.lock`. In an unlock session the
    /// child has the agent sync; without one it pushes what this machine committed (no key
    /// needed). What it cannot do (a remote that moved, a write left pending) waits for the next
    /// `vault sync`, the next write that commits, or the next `vault unlock`: never lost, since
    /// the write is in vault.db and every sync sends the rows changed since the last.
    static func afterWrite(_ inv: Invocation, _ ctx: CommandContext) {
        defer { ctx.writeVault = nil }
        guard writeCommands.contains(inv.command.name), let loc = try? location(inv, ctx), loc.exists,
              SyncRemote.isAuto(location: loc) else { return }
        var committed = false
        if let vault = ctx.writeVault {
            committed = (try? SyncEngine(vault: vault, environment: ctx.environment, interactive: false).commitAfterWrite()) ?? false
        }
        if !committed { SyncPending.mark(loc) }
        startBackgroundSync(loc, ctx)
    }

    /// Starts `vault sync --background` for `loc`, detached; does not wait for it. It gets
    /// /dev/null as 0, 1 and 2 and no other descriptor of this process (a `--passcode-fd` pipe,
    /// say: it outlives the command, and needs none).
    static func startBackgroundSync(_ loc: VaultLocation, _ ctx: CommandContext) {
        let exe = ProcessIdentity.runningExecutable
        let inherited = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap(Int32.init).filter { $0 > 2 }
        _ = try? ChildProcess.spawn(SpawnRequest(
            path: exe, arguments: [exe, "sync", "--vault", loc.name, "--no-input", "--background"], environment: ctx.environment,
            fileActions: [.open(0, "/dev/null", .readOnly), .open(1, "/dev/null", .writeOnly), .open(2, "/dev/null", .writeOnly)]
                + inherited.map { .close($0) },
            newSession: true))
    }

    /// After `vault unlock` opened a session: a vault set to `--auto` with a change that may
    /// not be on the remote has the new session sync it in the background.
    static func afterUnlock(_ loc: VaultLocation, _ ctx: CommandContext) {
        guard SyncRemote.isAuto(location: loc), SyncPending.isPending(loc, environment: ctx.environment) else { return }
        startBackgroundSync(loc, ctx)
    }

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
