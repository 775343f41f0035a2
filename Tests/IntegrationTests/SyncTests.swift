import Foundation
import Testing

/// `vault remote`, `vault sync`, `vault clone` with three machines (three vault homes, each its
/// own state and key authority) and a local bare repository as the remote, all real processes
/// (vault, git).
@Suite struct SyncTests {
    /// Three machines and a remote, all in temporary folders of this test.
    final class Machines {
        let a = Sandbox(), b = Sandbox(), c = Sandbox()
        let remote: String
        var all: [Sandbox] { [a, b, c] }

        init() {
            remote = a.home + "/remote.git"
            let r = plainGit(["init", "--quiet", "--bare", remote])
            #expect(r.status == 0, "\(r.stderr)")
        }

        /// A vault on `a` with `items` (name, username, password), synced, cloned on b and c.
        func start(_ items: [(String, String, String)]) -> String {
            let recovery = a.initVault()
            for (n, u, p) in items { add(a, n, u, p) }
            syncOK(a.vault(["remote", "set", remote]))
            syncOK(a.vault(["sync"], passcode: Sandbox.passcode))
            for m in [b, c] { syncOK(m.vault(["clone", remote], passcode: Sandbox.passcode)) }
            return recovery
        }

        func add(_ m: Sandbox, _ name: String, _ user: String, _ password: String) {
            syncOK(m.vault(["add", name, "--username", user, "--password-stdin"], passcode: Sandbox.passcode, stdin: password + "\n"))
        }

        func sync(_ m: Sandbox) { syncOK(m.vault(["sync"], passcode: Sandbox.passcode)) }

        /// Syncs every machine in `order`, then twice more all round: every change has reached everyone.
        func settle(_ order: [Sandbox]) {
            for m in order { sync(m) }
            for _ in 0..<2 { for m in all { sync(m) } }
        }

        /// Every machine's export, as compared field by field.
        func exports() -> [[String: [String: String]]] {
            all.map { export($0) }
        }
    }

    static func export(_ m: Sandbox) -> [String: [String: String]] {
        let r = m.vault(["export"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        let list = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [[String: Any]] ?? []
        var out: [String: [String: String]] = [:]
        for item in list {
            var fields: [String: String] = [:]
            for (k, v) in item where k != "modified" {
                let data = (try? JSONSerialization.data(withJSONObject: ["v": v], options: [.sortedKeys])) ?? Data()
                fields[k] = String(decoding: data, as: UTF8.self)
            }
            out[item["name"] as? String ?? ""] = fields
        }
        return out
    }

    static func expectConverged(_ m: Machines, _ comment: Comment? = nil) -> [String: [String: String]] {
        let e = m.exports()
        #expect(e[0] == e[1], comment)
        #expect(e[1] == e[2], comment)
        return e[0]
    }

    static let orders: [[Int]] = [[0, 1, 2], [2, 1, 0], [1, 2, 0]]

    @Test(arguments: orders)
    func concurrentEditsConvergeWithNothingLost(order: [Int]) {
        let m = Machines()
        _ = m.start([("mail", "alice", "pw-0"), ("bank", "bob", "pw-1"), ("old", "carol", "pw-2")])
        // Different fields of one item, the same field twice, edit against delete, one name added twice.
        syncOK(m.a.vault(["edit", "mail", "--username", "alice-a"], passcode: Sandbox.passcode))
        syncOK(m.b.vault(["edit", "mail", "--url", "https://mail.example"], passcode: Sandbox.passcode))
        syncOK(m.a.vault(["edit", "bank", "--password-stdin"], passcode: Sandbox.passcode, stdin: "bank-from-a\n"))
        syncOK(m.c.vault(["edit", "bank", "--password-stdin"], passcode: Sandbox.passcode, stdin: "bank-from-c\n"))
        syncOK(m.a.vault(["rm", "old", "--force"], passcode: Sandbox.passcode))
        syncOK(m.b.vault(["edit", "old", "--username", "carol-b"], passcode: Sandbox.passcode))
        m.add(m.b, "twice", "from-b", "twice-b")
        m.add(m.c, "twice", "from-c", "twice-c")
        let boxes = order.map { m.all[$0] }
        m.settle(boxes)
        let items = SyncTests.expectConverged(m, "order \(order)")
        #expect(items["mail"]?["username"] == #"{"v":"alice-a"}"#)
        #expect(items["mail"]?["urls"] == #"{"v":["https:\/\/mail.example"]}"#)
        // The edit beat the delete.
        #expect(items["old"]?["username"] == #"{"v":"carol-b"}"#)
        // Both passwords survive: one current, the other in the history.
        let bank = (items["bank"]?["password"] ?? "") + (items["bank"]?["password_history"] ?? "")
        #expect(bank.contains("bank-from-a") && bank.contains("bank-from-c"), "\(bank)")
        // Both items called "twice" survive, one renamed with a suffix.
        let twice = items.filter { $0.key.hasPrefix("twice") }
        #expect(twice.count == 2 && items["twice (2)"] != nil, "\(items.keys.sorted())")
        #expect(Set(twice.values.compactMap { $0["password"] }) == [#"{"v":"twice-b"}"#, #"{"v":"twice-c"}"#])
        let conflicts = m.a.vault(["sync", "--conflicts", "--json"], passcode: Sandbox.passcode)
        #expect(conflicts.status == 0)
        #expect(conflicts.stdout.contains("\"password\"") && conflicts.stdout.contains("renamed") && conflicts.stdout.contains("edit-kept"),
                "\(conflicts.stdout)")
        #expect(!conflicts.stdout.contains("bank-from"), "a secret set aside is printed only with --reveal")
    }

    @Test func rotationOnOneMachineMergesWithEditsOnAnother() {
        let m = Machines()
        _ = m.start([("db", "admin", "pw-db"), ("web", "www", "pw-web")])
        syncOK(m.a.vault(["rotate"], passcode: Sandbox.passcode))
        syncOK(m.b.vault(["edit", "db", "--username", "root"], passcode: Sandbox.passcode))
        m.add(m.c, "new", "n", "pw-new")
        m.settle([m.b, m.a, m.c])
        let items = SyncTests.expectConverged(m)
        #expect(items["db"]?["username"] == #"{"v":"root"}"#)
        #expect(items["new"] != nil && items.count == 3)
        // A machine started after the rotation opens with the same passcode.
        let d = Sandbox()
        syncOK(d.vault(["clone", m.remote], passcode: Sandbox.passcode))
        #expect(SyncTests.export(d) == items)
    }

    @Test func seededRandomSoakConverges() {
        let m = Machines()
        _ = m.start([("seed-0", "u0", "p0")])
        var rng = SeededGenerator(seed: 20_261_226)
        var names = ["seed-0"]
        for step in 0..<60 {
            let box = m.all[Int(rng.next() % 3)]
            switch rng.next() % 5 {
            case 0, 1:
                let name = "item-\(rng.next() % 12)"
                let r = box.vault(["add", name, "--username", "u\(step)", "--password-stdin"], passcode: Sandbox.passcode, stdin: "p\(step)\n")
                if r.status == 0 { names.append(name) }
            case 2:
                _ = box.vault(["edit", names[Int(rng.next() % UInt64(names.count))], "--username", "e\(step)"], passcode: Sandbox.passcode)
            case 3:
                _ = box.vault(["edit", names[Int(rng.next() % UInt64(names.count))], "--password-stdin"], passcode: Sandbox.passcode, stdin: "q\(step)\n")
            default:
                m.sync(box)
            }
            if rng.next() % 4 == 0 { _ = box.vault(["rm", names[Int(rng.next() % UInt64(names.count))], "--force"], passcode: Sandbox.passcode) }
        }
        m.settle(m.all)
        _ = SyncTests.expectConverged(m)
    }

    @Test func theRemoteSeesNoNameAndNoSecret() {
        let m = Machines()
        _ = m.start([("github-personal", "alice@example.org", "hunter2-very-secret"), ("bank", "bob-account", "s3cr3t-bank-pin")])
        syncOK(m.b.vault(["edit", "bank", "--notes-stdin"], passcode: Sandbox.passcode, stdin: "pin-notes-9911\n"))
        m.settle(m.all)
        let fsck = plainGit(["--git-dir=" + m.remote, "fsck", "--strict"])
        #expect(fsck.status == 0, "\(fsck.stdout)\(fsck.stderr)")
        let log = plainGit(["--git-dir=" + m.remote, "log", "-p", "--all", "--format=raw"])
        let objects = plainGit(["--git-dir=" + m.remote, "cat-file", "--batch-all-objects", "--batch"])
        #expect(log.status == 0 && objects.status == 0)
        for secret in ["github-personal", "alice@example.org", "hunter2-very-secret", "bank", "bob-account", "s3cr3t-bank-pin", "pin-notes-9911"] {
            #expect(!log.stdout.contains(secret), "\(secret) in git log")
            #expect(!objects.stdout.contains(secret), "\(secret) in an object")
        }
    }

    /// A work tree of the remote, to play the attacker with plain git.
    static func attackerCheckout(_ m: Machines) -> String {
        let work = m.a.home + "/attacker"
        #expect(plainGit(["clone", "--quiet", "--branch", "vault", m.remote, work]).status == 0)
        return work
    }

    static func expectRefused(_ box: Sandbox, _ what: String, before: [String: [String: String]]) {
        let r = box.vault(["sync"], passcode: Sandbox.passcode)
        #expect(r.status == 5, "\(what): \(r.stderr)")
        #expect(r.stderr.contains("remote"), "\(what): \(r.stderr)")
        #expect(export(box) == before, "\(what): the vault changed")
    }

    @Test func aCommitSignedByAnUnknownKeyIsRefused() {
        let m = Machines()
        _ = m.start([("one", "u", "p1"), ("two", "v", "p2")])
        let before = SyncTests.export(m.b)
        let work = SyncTests.attackerCheckout(m)
        let items = (try? FileManager.default.contentsOfDirectory(atPath: work + "/items")) ?? []
        try? Data("garbage".utf8).write(to: URL(fileURLWithPath: work + "/items/" + items[0]))
        #expect(plainGit(["-C", work, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-am", "vault sync 00"]).status == 0)
        #expect(plainGit(["-C", work, "push", "--quiet", "origin", "vault"]).status == 0)
        SyncTests.expectRefused(m.b, "unsigned commit", before: before)
    }

    @Test func aSwappedItemFileIsRefused() {
        let m = Machines()
        _ = m.start([("one", "u", "p1"), ("two", "v", "p2")])
        let before = SyncTests.export(m.b)
        let work = SyncTests.attackerCheckout(m)
        let items = ((try? FileManager.default.contentsOfDirectory(atPath: work + "/items")) ?? []).sorted()
        let x = work + "/items/" + items[0], y = work + "/items/" + items[1]
        let dx = FileManager.default.contents(atPath: x)!, dy = FileManager.default.contents(atPath: y)!
        try? dy.write(to: URL(fileURLWithPath: x))
        try? dx.write(to: URL(fileURLWithPath: y))
        // The commit reuses the head's message, signature included: it signs another tree.
        let message = plainGit(["-C", work, "log", "-1", "--format=%B"]).stdout
        #expect(plainGit(["-C", work, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "--quiet", "-a", "-m", message]).status == 0)
        #expect(plainGit(["-C", work, "push", "--quiet", "origin", "vault"]).status == 0)
        SyncTests.expectRefused(m.b, "swapped item files", before: before)
    }

    @Test func aRolledBackOrForcePushedRemoteIsRefused() {
        let m = Machines()
        _ = m.start([("one", "u", "p1")])
        let old = plainGit(["--git-dir=" + m.remote, "rev-parse", "refs/heads/vault"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        m.add(m.a, "two", "v", "p2")
        m.sync(m.a)
        m.sync(m.b)
        let before = SyncTests.export(m.b)
        // Rolled back: the branch points at an older (genuine, signed) commit.
        #expect(plainGit(["--git-dir=" + m.remote, "update-ref", "refs/heads/vault", old]).status == 0)
        SyncTests.expectRefused(m.b, "rolled back", before: before)
        // A fork: c, which never saw the later commits, pushes on top of the old one (force-pushed
        // over them): genuine signatures, but b's history is gone from it.
        m.add(m.c, "fork", "w", "p3")
        m.sync(m.c)
        SyncTests.expectRefused(m.b, "force-pushed fork", before: before)
    }

    @Test func aKilledSyncLeavesTheVaultWholeAndALaterSyncCompletes() {
        let m = Machines()
        _ = m.start((0..<40).map { ("item-\($0)", "user-\($0)", "pw-\($0)") })
        var rng = SeededGenerator(seed: 7)
        for round in 0..<6 {
            syncOK(m.a.vault(["edit", "item-\(round)", "--username", "a-\(round)"], passcode: Sandbox.passcode))
            m.add(m.b, "b-\(round)", "u", "p")
            m.sync(m.b)
            let pid = start(vaultBinary, ["sync", "--passcode-fd", "3"], env: m.a.env, fds: [3: Sandbox.passcode + "\n"])
            usleep(useconds_t(rng.next() % 400_000))
            kill(pid, SIGKILL)
            _ = reap(pid)
            let ls = m.a.vault(["ls"], passcode: Sandbox.passcode)
            #expect(ls.status == 0, "round \(round): \(ls.stderr)")
            #expect(ls.stdout.contains("item-0"), "round \(round)")
        }
        m.settle(m.all)
        let items = SyncTests.expectConverged(m)
        #expect(items.count == 46, "\(items.keys.sorted())")
    }

    /// In an unlock session the agent syncs (the key stays there): a script needs no passcode,
    /// and the session serves what came at once. `--conflicts` is answered by the agent too,
    /// without secret values; `--reveal` needs the key in the process and says so.
    @Test func aSyncInASessionRunsInTheAgent() {
        let m = Machines()
        _ = m.start([("mail", "alice", "pw-0")])
        var r = m.b.vault(["sync", "--no-input"])
        #expect(r.status == 12, "without a session: the passcode error (\(r.status)): \(r.stderr)")
        syncOK(m.b.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: Sandbox.passcode))
        defer {
            let s = (try? JSONSerialization.jsonObject(with: Data(m.b.vault(["status", "--json"]).stdout.utf8))) as? [String: Any]
            if let pid = (s?["session"] as? [String: Any])?["agent_pid"] as? Int { kill(pid_t(pid), SIGTERM) }
            m.b.vault(["lock", "--all"])
        }
        m.add(m.a, "bank", "bob", "pw-1")
        m.sync(m.a)
        syncOK(m.b.vault(["edit", "mail", "--username", "alice-b", "--no-input"]))
        r = m.b.vault(["sync", "--no-input", "--json"])
        syncOK(r)
        let summary = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any]
        #expect(summary?["received"] as? Int == 1 && summary?["sent"] as? Int == 1, "\(r.stdout)")
        #expect(m.b.vault(["get", "bank", "--field", "password", "--no-input"]).stdout == "pw-1\n")
        m.sync(m.a)
        #expect(m.a.vault(["get", "mail", "--field", "username"], passcode: Sandbox.passcode).stdout == "alice-b\n")
        // The same field on both machines: the session's agent lists the conflict (the key
        // stays there), without the value set aside of a secret field.
        syncOK(m.a.vault(["edit", "mail", "--username", "alice-a2"], passcode: Sandbox.passcode))
        syncOK(m.a.vault(["edit", "bank", "--password-stdin"], passcode: Sandbox.passcode, stdin: "bank-from-a\n"))
        m.sync(m.a)
        syncOK(m.b.vault(["edit", "mail", "--username", "alice-b2", "--no-input"]))
        syncOK(m.b.vault(["edit", "bank", "--password-stdin", "--no-input"], stdin: "bank-from-b\n"))
        syncOK(m.b.vault(["sync", "--no-input"]))
        r = m.b.vault(["sync", "--conflicts", "--json", "--no-input"])
        syncOK(r)
        let rows = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [[String: Any]] ?? []
        #expect(rows.contains { $0["item"] as? String == "mail" && $0["field"] as? String == "username" && $0["lost"] != nil }, "\(r.stdout)")
        #expect(rows.contains { $0["item"] as? String == "bank" && $0["field"] as? String == "password" }, "\(r.stdout)")
        #expect(!r.stdout.contains("bank-from"), "the agent sends no secret value set aside: \(r.stdout)")
        r = m.b.vault(["sync", "--conflicts", "--no-input"])
        syncOK(r)
        #expect(r.stdout.contains("'mail': username changed on two machines") && r.stdout.contains("(secret, --reveal)"), "\(r.stdout)")
        // Revealing them needs the key here, which the session does not lend.
        r = m.b.vault(["sync", "--conflicts", "--reveal", "--no-input"])
        #expect(r.status == 1, "\(r.status): \(r.stderr)")
        #expect(r.stderr.contains("does not lend it") && r.stderr.contains("--passcode-fd"), "\(r.stderr)")
        r = m.b.vault(["sync", "--conflicts", "--reveal"], passcode: Sandbox.passcode)
        syncOK(r)
        #expect(r.stdout.contains("bank-from"), "\(r.stdout)")
    }

    /// A remote whose branch went away (deleted, or the repository replaced by an empty one) is
    /// refused on the first sync of a new process: the state that remembers the branch is read
    /// before the first fetch. b does not push its copy over the hole.
    @Test func aRemoteWhoseBranchWentAwayIsRefused() {
        let m = Machines()
        _ = m.start([("one", "u", "p1")])
        m.add(m.a, "two", "v", "p2")
        m.sync(m.a)
        m.sync(m.b)
        let before = SyncTests.export(m.b)
        #expect(plainGit(["--git-dir=" + m.remote, "update-ref", "-d", "refs/heads/vault"]).status == 0)
        SyncTests.expectRefused(m.b, "branch deleted", before: before)
        #expect(plainGit(["--git-dir=" + m.remote, "rev-parse", "--verify", "--quiet", "refs/heads/vault"]).status != 0,
                "b pushed its copy over a branch that went away")
    }

    /// `--auto` with no unlock session: the write commits its change to the sync repository
    /// itself (it holds the key) and a detached `vault sync --background` pushes it with no key.
    /// The remote is reached through an ssh stand-in that waits while a gate file exists: the
    /// write returns while the push it started still waits at the gate; that push killed (its
    /// whole process group) loses nothing (the next sync sends it); with the gate open, a write
    /// reaches the remote by itself.
    @Test func autoSyncWithoutASessionNeverWaitsOnTheRemoteAndLosesNothing() {
        let m = Machines()
        _ = m.start([("mail", "alice", "pw-0")])
        let gate = m.b.home + "/gate", callers = m.b.home + "/ssh-callers", gaveUp = m.b.home + "/ssh-gave-up"
        let standIn = m.b.home + "/ssh-stand-in"
        // git runs it as `ssh-stand-in HOST COMMAND` (GIT_SSH_VARIANT=simple); it records its
        // parent (git), waits while the gate exists (giving up after a minute), then runs
        // COMMAND (git-receive-pack or git-upload-pack of the local path) here.
        let script = """
        #!/bin/sh
        echo $PPID >> \(callers)
        n=0
        while [ -e \(gate) ]; do
            n=$((n + 1)); if [ $n -gt 1200 ]; then touch \(gaveUp); exit 1; fi
            sleep 0.05
        done
        shift
        exec sh -c "$1"

        """
        #expect(FileManager.default.createFile(atPath: standIn, contents: Data(script.utf8), attributes: [.posixPermissions: 0o755]))
        m.b.env["GIT_SSH_COMMAND"] = standIn
        m.b.env["GIT_SSH_VARIANT"] = "simple"
        syncOK(m.b.vault(["remote", "set", "ssh://stand-in" + m.remote]))
        syncOK(m.b.vault(["settings", "--sync-auto", "on"]))
        #expect(m.b.vault(["settings", "--json"]).stdout.contains("\"sync_auto\":true"))
        m.sync(m.b)
        try? FileManager.default.removeItem(atPath: callers)

        // The remote blocked: the write returns; its background push is at the gate, still waiting.
        #expect(FileManager.default.createFile(atPath: gate, contents: Data()))
        syncOK(m.b.vault(["add", "auto-1", "--password-stdin"], passcode: Sandbox.passcode, stdin: "secret-1\n"))
        var git: pid_t = 0
        for _ in 0..<600 where git == 0 {
            let text = (try? String(contentsOfFile: callers, encoding: .utf8)) ?? ""
            git = text.split(separator: "\n").first.flatMap { pid_t(String($0)) } ?? 0
            if git == 0 { usleep(50_000) }
        }
        #expect(git > 0, "the write started no background sync that reached the remote")
        #expect(git > 0 && kill(git, 0) == 0 && !FileManager.default.fileExists(atPath: gaveUp),
                "the write returned only after its push ended: it waited on the remote")
        m.sync(m.a)
        #expect(!m.a.vault(["ls"], passcode: Sandbox.passcode).stdout.contains("auto-1"), "the gate let the push through")
        // The background sync killed at the gate, with its git: nothing is lost.
        if git > 0 {
            let group = getpgid(git)
            #expect(group > 1 && group != getpgrp())
            if group > 1 && group != getpgrp() { kill(-group, SIGKILL) }
        }
        var r = m.b.vault(["remote", "show", "--json"])
        #expect(r.stdout.contains("\"pending\":true"), "\(r.stdout)")
        try? FileManager.default.removeItem(atPath: gate)
        m.sync(m.b)
        r = m.b.vault(["remote", "show", "--json"])
        #expect(r.stdout.contains("\"pending\":false"), "\(r.stdout)")
        m.sync(m.a)
        #expect(m.a.vault(["get", "auto-1", "--field", "password"], passcode: Sandbox.passcode).stdout == "secret-1\n")

        // The gate open: a write reaches the remote by itself (no session, no sync run on b).
        syncOK(m.b.vault(["edit", "mail", "--username", "alice-auto"], passcode: Sandbox.passcode))
        var seen = false
        for _ in 0..<240 where !seen {
            m.sync(m.a)
            seen = m.a.vault(["get", "mail", "--field", "username"], passcode: Sandbox.passcode).stdout == "alice-auto\n"
            if !seen { usleep(250_000) }
        }
        #expect(seen, "b's write never reached the remote without a session")
        syncOK(m.b.vault(["settings", "--sync-auto", "off"]))
        #expect(m.b.vault(["remote", "show", "--json"]).stdout.contains("\"auto\":false"))
    }

    /// `vault remote set URL --auto`: each write through the session starts a background sync
    /// (the write returns at once); writes made while one runs are taken by the next, so the
    /// other machine ends with every one of them.
    @Test func autoSyncAfterEachWriteInASession() {
        let m = Machines()
        _ = m.start([("mail", "alice", "pw-0")])
        syncOK(m.b.vault(["remote", "set", m.remote, "--auto"]))
        var r = m.b.vault(["remote", "show", "--json"])
        #expect(r.stdout.contains("\"auto\":true"), "\(r.stdout)")
        syncOK(m.b.vault(["unlock", "--scope", "user", "--timeout", "120"], passcode: Sandbox.passcode))
        defer {
            let s = (try? JSONSerialization.jsonObject(with: Data(m.b.vault(["status", "--json"]).stdout.utf8))) as? [String: Any]
            if let pid = (s?["session"] as? [String: Any])?["agent_pid"] as? Int { kill(pid_t(pid), SIGTERM) }
            m.b.vault(["lock", "--all"])
        }
        // Writes in a row: the later ones land while the earlier ones' syncs run.
        for i in 0..<5 { syncOK(m.b.vault(["add", "auto-\(i)", "--password-stdin", "--no-input"], stdin: "secret-\(i)\n")) }
        syncOK(m.b.vault(["edit", "mail", "--username", "alice-auto", "--no-input"]))
        // a never syncs by itself: it sees b's writes once b's background syncs pushed them.
        var seen = false
        for _ in 0..<240 where !seen {
            m.sync(m.a)
            let names = m.a.vault(["ls"], passcode: Sandbox.passcode).stdout
            let user = m.a.vault(["get", "mail", "--field", "username"], passcode: Sandbox.passcode).stdout
            seen = (0..<5).allSatisfy { names.contains("auto-\($0)\n") } && user == "alice-auto\n"
            if !seen { usleep(250_000) }
        }
        #expect(seen, "a never got every write b made (auto sync)")
        #expect(m.a.vault(["get", "auto-4", "--field", "password"], passcode: Sandbox.passcode).stdout == "secret-4\n")
        r = m.b.vault(["remote", "show"])
        #expect(r.stdout == m.remote + "\n" && r.stderr.contains("--auto"), "\(r.stdout) \(r.stderr)")
        syncOK(m.b.vault(["remote", "set", m.remote, "--no-auto"]))
        r = m.b.vault(["remote", "show", "--json"])
        #expect(r.stdout.contains("\"auto\":false"), "\(r.stdout)")
    }

    /// `vault remote revoke DEVICE`: the device leaves `remote show`; the revoked machine is
    /// told when it syncs and pushes nothing; a commit it signs on top of the revocation anyway
    /// (its repository edited behind its back, as a modified client would) is refused by a
    /// machine that saw the revocation, exit 5, its vault unchanged.
    @Test func aRevokedDeviceIsRefused() {
        let m = Machines()
        _ = m.start([("one", "u", "p1")])
        m.add(m.c, "from-c", "w", "p3")
        m.sync(m.c)
        let author = plainGit(["--git-dir=" + m.remote, "log", "-1", "--format=%an", "refs/heads/vault"]).stdout
        let device = String(author.trimmingCharacters(in: .whitespacesAndNewlines).dropFirst("vault-".count))
        #expect(device.count == 32, "\(author)")
        m.sync(m.a)
        var devices = json(m.a.vault(["remote", "show", "--json"]).stdout)["devices"] as? [String] ?? []
        #expect(devices.count == 3 && devices.contains(device), "\(devices)")
        #expect(m.a.vault(["remote", "revoke", "00000000000000000000000000000000"], passcode: Sandbox.passcode).status == 2)
        syncOK(m.a.vault(["remote", "revoke", device], passcode: Sandbox.passcode))
        devices = json(m.a.vault(["remote", "show", "--json"]).stdout)["devices"] as? [String] ?? []
        #expect(devices.count == 2 && !devices.contains(device), "\(devices)")
        #expect(m.a.vault(["remote", "revoke", device], passcode: Sandbox.passcode).status == 4)
        m.sync(m.b)
        // A machine new to the vault accepts the revoked device's commits from before its revocation.
        let late = Sandbox()
        syncOK(late.vault(["clone", m.remote], passcode: Sandbox.passcode))
        #expect(SyncTests.export(late) == SyncTests.export(m.b))
        let before = SyncTests.export(m.b)
        let head = plainGit(["--git-dir=" + m.remote, "rev-parse", "refs/heads/vault"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // The revoked machine learns it and pushes nothing.
        m.add(m.c, "after-revoke", "x", "p4")
        let r = m.c.vault(["sync"], passcode: Sandbox.passcode)
        #expect(r.status == 1 && r.stderr.contains("revoked"), "\(r.status): \(r.stderr)")
        #expect(plainGit(["--git-dir=" + m.remote, "rev-parse", "refs/heads/vault"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == head)
        // Its repository moved onto the revocation behind its back: it signs a commit on top
        // and pushes it; b, which saw the revocation, refuses it.
        let cRepo = m.c.home + "/vaults/default/sync.git"
        #expect(plainGit(["--git-dir=" + cRepo, "update-ref", "refs/heads/vault", head]).status == 0)
        m.add(m.c, "after-revoke-2", "y", "p5")
        syncOK(m.c.vault(["sync"], passcode: Sandbox.passcode))
        #expect(plainGit(["--git-dir=" + m.remote, "log", "-1", "--format=%an", "refs/heads/vault"]).stdout.contains(device))
        SyncTests.expectRefused(m.b, "a commit of a revoked device", before: before)
    }

    @Test func aCloneOpensWithThePasscodeAndTheRecoveryKeyNotAWrongOne() {
        let m = Machines()
        let recovery = m.start([("one", "u", "p1")])
        let d = Sandbox()
        let wrong = d.vault(["clone", m.remote], passcode: "not the passcode")
        #expect(wrong.status == 10, "\(wrong.stderr)")
        #expect(!FileManager.default.fileExists(atPath: d.home + "/vaults/default/vault.db"), "a failed clone leaves no vault")
        let withKey = d.vault(["clone", m.remote, "--recovery-key-fd", "4"], fds: [4: recovery + "\n"])
        #expect(withKey.status == 0, "\(withKey.stderr)")
        #expect(SyncTests.export(d) == SyncTests.export(m.a))
        let e = Sandbox()
        let bad = e.vault(["clone", m.remote, "--recovery-key-fd", "4"], fds: [4: String(recovery.reversed()) + "\n"])
        #expect(bad.status == 10 || bad.status == 2, "\(bad.stderr)")
    }
}

/// `git` with a clean environment (no user configuration of the test machine).
func plainGit(_ args: [String]) -> RunResult {
    spawn("/usr/bin/git", args, env: ["PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C"])
}

func syncOK(_ r: RunResult, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(r.status == 0, "exit \(r.status): \(r.stderr)", sourceLocation: sourceLocation)
}

