import Foundation
import Testing
@testable import VaultKit

/// Issue 9's races, through the binary: writers overlapping rotations and a passcode change,
/// concurrent edits of one item (in-process and through an unlock session), SIGKILL during
/// `vault init`, and reads through a session while the keys are rotated; and issue 29's two
/// `vault unlock`s at once. Each race runs
/// `ConcurrencyTests.rounds` rounds (20; `VAULT_RACE_ROUNDS` for a soak, see bench/races.sh) and
/// prints its figures: how many commands ran and how each ended.
@Suite struct ConcurrencyTests {
    static let rounds = Int(ProcessInfo.processInfo.environment["VAULT_RACE_ROUNDS"] ?? "") ?? 20

    // MARK: 1. writers overlapping rotations and a passcode change

    /// Items in the vault before a round starts: enough that a rotation takes a while.
    static let prefill = 400

    /// Per round, a fresh vault of `prefill` items; then all at once: 8 adds of new items, 4 edits,
    /// 4 removals and 4 reads of existing ones, 2 listings, a `vault log`, 2 rotations and a
    /// passcode change. Afterwards every command that exited 0 is visible and every one that
    /// failed changed nothing and said why; a read that succeeded printed the right value; every
    /// row opens, rows and slots are of one key generation (the number of rotations that
    /// succeeded plus one), the passcode of the last successful change (else the first) opens
    /// the vault and the other does not, and one more rotation works.
    @Test func writersOverlappingRotationsLoseNothing() throws {
        var tally = Tally()
        let clock = Date()
        for round in 0..<Self.rounds {
            let box = Sandbox()
            box.initVault()
            let p0 = Sandbox.passcode
            var r = box.vault(["import"], passcode: p0, stdin: itemsJSON((0..<Self.prefill).map(Self.prefilled)))
            try #require(r.status == 0, "import: \(r.stderr)")
            // Something in the audit log for `vault log` to read.
            r = box.vault(["get", "pre-399", "--field", "password"], passcode: p0)
            try #require(r.status == 0, "get: \(r.stderr)")

            var jobs: [Job] = []
            for i in 0..<8 {
                jobs.append(Job("add", i, VaultRun(["add", "new-\(i)", "--username", "nu-\(i)", "--password-stdin"],
                                                   stdin: "np-\(round)-\(i)\n", passcode: p0)))
            }
            for i in 0..<4 {
                jobs.append(Job("edit", i, VaultRun(["edit", "pre-\(i)", "--notes", "edited-\(round)-\(i)"], passcode: p0)))
                jobs.append(Job("rm", 100 + i, VaultRun(["rm", "pre-\(100 + i)", "--force"], passcode: p0)))
                jobs.append(Job("get", 200 + i, VaultRun(["get", "pre-\(200 + i)", "--field", "password"], passcode: p0)))
            }
            for i in 0..<2 { jobs.append(Job("ls", i, VaultRun(["ls", "--json"], passcode: p0))) }
            jobs.append(Job("log", 0, VaultRun(["log", "--json"], passcode: p0)))
            for i in 0..<2 { jobs.append(Job("rotate", i, VaultRun(["rotate"], passcode: p0))) }
            // The passcode change keeps the passcode's text and changes its cost (9 MiB instead of
            // 8): a change a rotation lost shows in the slot's parameters, and no command of the
            // round gives a wrong passcode (which would make the next tries wait, by design).
            jobs.append(Job("passcode", 0, VaultRun(["passcode", "--new-passcode-fd", "4", "--kdf-memory", "9", "--kdf-ops", "1"],
                                                     fds: [4: p0 + "\n"], passcode: p0)))
            jobs.shuffle()
            let results = concurrently(jobs.map(\.run), env: box.env)

            let changed = zip(jobs, results).contains { $0.kind == "passcode" && $1.status == 0 }
            let current = p0
            var rotations = 0
            var expected: [String: Item] = [:]
            for i in 0..<Self.prefill { expected["pre-\(i)"] = Self.prefilled(i) }
            for (job, result) in zip(jobs, results) {
                tally.add(job.kind, result.status)
                let ok = result.status == 0
                if !ok {
                    #expect(Self.failedCleanly(result, passcodeChanged: changed),
                            "round \(round): vault \(job.run.args.joined(separator: " ")) exited \(result.status): \(result.stderr)")
                }
                switch job.kind {
                case "add" where ok:
                    expected["new-\(job.index)"] = Item(name: "new-\(job.index)", username: "nu-\(job.index)",
                                                        password: "np-\(round)-\(job.index)")
                case "edit" where ok: expected["pre-\(job.index)"]?.notes = "edited-\(round)-\(job.index)"
                case "rm" where ok: expected["pre-\(job.index)"] = nil
                case "get" where ok:
                    #expect(result.stdout == "p-\(job.index)\n", "round \(round): get pre-\(job.index) printed \(result.stdout.debugDescription)")
                case "ls" where ok:
                    // Items no command of the round touches are listed, and no row is damaged.
                    let listing = json(result.stdout)
                    let names = Set((listing["items"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String })
                    let untouched = Set((300..<Self.prefill).map { "pre-\($0)" })
                    #expect(listing["damaged"] as? [String] == [] && untouched.isSubset(of: names),
                            "round \(round): ls listed \(names.count) items, damaged: \(listing["damaged"] ?? "-")")
                case "log" where ok:
                    let log = json(result.stdout)
                    #expect(log["damaged"] as? Int == 0 && !(log["records"] as? [Any] ?? []).isEmpty,
                            "round \(round): log: \(result.stdout)")
                case "rotate" where ok: rotations += 1
                default: break
                }
            }

            // The passcode of the last successful change opens the vault, and every command that
            // reported success is visible: nothing more, nothing less.
            r = box.vault(["export"], passcode: current)
            try #require(r.status == 0, "round \(round): the current passcode does not open the vault: \(r.stderr)")
            Self.expectItems(r.stdout, equal: expected, "round \(round)")
            let cost = try Self.passcodeCost(box)
            if changed {
                #expect(cost == 9 << 20, "round \(round): the passcode change was lost (the slot asks for \(cost) bytes)")
            } else {
                #expect(cost == 8 << 20, "round \(round): the slot changed cost (\(cost) bytes) without a successful change")
            }
            r = box.vault(["repair", "--json"], passcode: current)
            #expect(r.status == 0 && json(r.stdout)["damaged"] as? [String] == [], "round \(round): repair: \(r.stdout) \(r.stderr)")
            let state = try Self.keyState(box)
            #expect(state.generation == Int64(1 + rotations), "round \(round): generation \(state.generation) after \(rotations) rotations")
            #expect(state.itemGenerations == [state.generation], "round \(round): item rows of generations \(state.itemGenerations)")
            #expect(state.slots == [["passcode", "\(state.generation)"], ["recovery", "\(state.generation)"]],
                    "round \(round): slots \(state.slots)")

            // And the keys can still be rotated, with everything readable afterwards.
            r = box.vault(["rotate"], passcode: current)
            #expect(r.status == 0, "round \(round): rotate after the race: \(r.stderr)")
            r = box.vault(["export"], passcode: current)
            Self.expectItems(r.stdout, equal: expected, "round \(round), after one more rotation")
        }
        print("ConcurrencyTests.writersOverlappingRotations: \(Self.rounds) rounds in \(elapsed(clock)); \(tally)")
    }

    /// The item `pre-i` as imported.
    static func prefilled(_ i: Int) -> Item { Item(name: "pre-\(i)", username: "u-\(i)", password: "p-\(i)") }

    /// Whether a failed command failed in a way under which nothing was written and the user is
    /// told what happened: exit 19, a rotation committed after this command unlocked (run it
    /// again); exit 6, the database stayed locked for the whole busy timeout (the transaction never
    /// began); exit 10, the passcode given was replaced by a concurrent `vault passcode` that
    /// succeeded. Anything else (3 "no item", 5 "damaged", a crash) is a wrong answer.
    static func failedCleanly(_ r: RunResult, passcodeChanged: Bool) -> Bool {
        switch r.status {
        case 19: r.stderr.contains("rotated while this command ran")
        case 6: r.stderr.contains("the database is locked")
        case 10: passcodeChanged && r.stderr.contains("wrong passcode")
        default: false
        }
    }

    /// Checks that `exported` (the output of `vault export`) holds exactly `expected`: the same
    /// names with the same username, password and notes.
    static func expectItems(_ exported: String, equal expected: [String: Item], _ context: String) {
        let list = (try? JSONSerialization.jsonObject(with: Data(exported.utf8))) as? [[String: Any]] ?? []
        var got: [String: [String: Any]] = [:]
        for o in list { if let n = o["name"] as? String { got[n] = o } }
        let missing = Set(expected.keys).subtracting(got.keys), extra = Set(got.keys).subtracting(expected.keys)
        #expect(missing.isEmpty, "\(context): items missing: \(missing.sorted())")
        #expect(extra.isEmpty, "\(context): items that should not be there: \(extra.sorted())")
        for (name, want) in expected {
            guard let o = got[name] else { continue }
            let fields = [o["username"] as? String, o["password"] as? String, o["notes"] as? String]
            #expect(fields == [want.username, want.password, want.notes], "\(context): \(name) holds \(fields), not \([want.username, want.password, want.notes])")
        }
    }

    /// What the database says about the keys: the current generation, the generations of the item
    /// rows, and every slot (kind, generation), read directly with SQLite.
    /// The Argon2id memory the passcode slot asks for.
    static func passcodeCost(_ box: Sandbox) throws -> Int {
        let store = try VaultStore.open(try VaultLocation(name: "default", environment: box.env))
        return try #require(try store.slot(.passcode)).passcodeParameters().memoryBytes
    }

    static func keyState(_ box: Sandbox, vault: String = "default") throws -> (generation: Int64, itemGenerations: [Int64], slots: [[String]]) {
        let store = try VaultStore.open(try VaultLocation(name: vault, environment: box.env))
        let rows = try store.db.query("SELECT DISTINCT generation FROM items ORDER BY generation").map { $0[0].int ?? -1 }
        let slots = try store.db.query("SELECT kind, generation FROM slots ORDER BY kind").map { [$0[0].string ?? "", "\($0[1].int ?? -1)"] }
        return (try store.keyGeneration(), rows, slots)
    }

    // MARK: 2. concurrent edits of one item

    /// Per round, three edits of different fields of one item at once (username, notes, URL),
    /// then a rename racing an edit. Every edit that exited 0 is in the item; a rename that
    /// exited 0 carries the fields edited before it, and an edit that lost the race to it says
    /// "no item named" (exit 3) and changed nothing.
    @Test func concurrentEditsOfOneItemKeepEveryChange() throws {
        let box = Sandbox()
        box.initVault()
        let pc = Sandbox.passcode
        var tally = Tally()
        let clock = Date()
        for round in 0..<Self.rounds {
            try Self.editRace(box, round: round, through: { _ in pc }, tally: &tally)
        }
        print("ConcurrencyTests.concurrentEdits (in-process): \(Self.rounds) rounds in \(elapsed(clock)); \(tally)")
    }

    /// The same races through an unlock session (the agent applies the field changes) mixed with
    /// in-process commands on the same item: even rounds send two of the three edits through
    /// the session, odd rounds one; the rename goes through the session on even rounds, the edit
    /// racing it on odd ones.
    @Test func concurrentEditsThroughAnUnlockSessionKeepEveryChange() throws {
        let box = Sandbox()
        box.initVault()
        let pc = Sandbox.passcode
        let r = box.vault(["unlock", "--scope", "user", "--timeout", "30m"], passcode: pc)
        try #require(r.status == 0, "unlock: \(r.stderr)")
        var tally = Tally()
        let clock = Date()
        for round in 0..<Self.rounds {
            // Which runs authenticate in-process (a passcode) and which use the session (nil).
            let inProcess: Set<Int> = round % 2 == 0 ? [2, 4] : [0, 1, 3]
            try Self.editRace(box, round: round, through: { inProcess.contains($0) ? pc : nil }, tally: &tally)
        }
        print("ConcurrencyTests.concurrentEdits (session and in-process): \(Self.rounds) rounds in \(elapsed(clock)); \(tally)")
    }

    /// One round of the edit races on item `item-ROUND`. `through(k)` is the passcode run k
    /// (0-2: the three edits, 3: the rename, 4: the edit racing it) gives, or nil for the session.
    static func editRace(_ box: Sandbox, round: Int, through: (Int) -> String?, tally: inout Tally) throws {
        let name = "item-\(round)", moved = "moved-\(round)"
        var r = box.vault(["add", name, "--username", "u0", "--password-stdin"], passcode: through(0), stdin: "p0\n")
        try #require(r.status == 0, "round \(round): add: \(r.stderr)")

        let edits = [["--username", "user-\(round)"], ["--notes", "notes-\(round)"], ["--url", "https://\(round).example"]]
        let results = concurrently(edits.enumerated().map { k, e in VaultRun(["edit", name] + e, passcode: through(k)) }, env: box.env)
        var want = Item(name: name, username: "u0", password: "p0")
        for (k, result) in results.enumerated() {
            tally.add("edit", result.status)
            if result.status == 0 {
                switch k {
                case 0: want.username = "user-\(round)"
                case 1: want.notes = "notes-\(round)"
                default: want.urls = ["https://\(round).example"]
                }
            } else {
                #expect(result.status == 6 && result.stderr.contains("the database is locked"),
                        "round \(round): edit \(edits[k]) exited \(result.status): \(result.stderr)")
            }
        }
        try expectItem(box, name, equals: want, "round \(round), after three edits")

        // A rename racing an edit of another field.
        let race = concurrently([VaultRun(["mv", name, moved], passcode: through(3)),
                                 VaultRun(["edit", name, "--username", "renamed-\(round)"], passcode: through(4))], env: box.env)
        let (mv, edit) = (race[0], race[1])
        tally.add("mv", mv.status)
        tally.add("edit racing mv", edit.status)
        #expect(mv.status == 0 || (mv.status == 6 && mv.stderr.contains("the database is locked")),
                "round \(round): mv exited \(mv.status): \(mv.stderr)")
        switch edit.status {
        case 0: want.username = "renamed-\(round)"
        case 3: #expect(mv.status == 0 && edit.stderr.contains("no item named '\(name)'"), "round \(round): edit: \(edit.stderr)")
        default: #expect(edit.status == 6 && edit.stderr.contains("the database is locked"), "round \(round): edit exited \(edit.status): \(edit.stderr)")
        }
        if mv.status == 0 {
            want.name = moved
            r = box.vault(["get", name], passcode: through(0))
            #expect(r.status == 3, "round \(round): '\(name)' is still there after mv (exit \(r.status))")
        }
        try expectItem(box, want.name, equals: want, "round \(round), after mv racing edit")
    }

    /// Checks, with the passcode, that item `name` has `want`'s username, password, notes and URLs.
    static func expectItem(_ box: Sandbox, _ name: String, equals want: Item, _ context: String) throws {
        let r = box.vault(["get", name, "--json", "--reveal"], passcode: Sandbox.passcode)
        try #require(r.status == 0, "\(context): get \(name): \(r.stderr)")
        let o = json(r.stdout)
        let got: [String?] = [o["username"] as? String, o["password"] as? String, o["notes"] as? String,
                              (o["urls"] as? [String])?.joined(separator: " ")]
        let expected: [String?] = [want.username, want.password, want.notes, want.urls.joined(separator: " ")]
        #expect(got == expected, "\(context): \(name) holds \(got), not \(expected)")
    }

    // MARK: 2b. `vault unlock`s at once (issue 29)

    /// Two `vault unlock`s at once, of two vaults, with no agent running: one agent starts and
    /// holds both sessions. Each round ends the agent with SIGTERM, which leaves its socket file
    /// behind: the next round starts over a stale socket.
    @Test func twoUnlocksAtOnceStartOneAgent() throws {
        let box = Sandbox()
        box.initVault()
        box.initVault("work")
        let socketPath = box.env["XDG_RUNTIME_DIR"]! + "/vault/agent.sock"
        let pc = Sandbox.passcode
        let clock = Date()
        for round in 0..<Self.rounds {
            let results = concurrently([VaultRun(["unlock", "--scope", "user"], passcode: pc), VaultRun(["unlock", "--scope", "user", "--vault", "work"], passcode: pc)], env: box.env)
            #expect(results.allSatisfy { $0.status == 0 }, "round \(round): \(results.map(\.stderr))")
            let running = agents(serving: socketPath)
            #expect(running.count == 1, "round \(round): agents \(running)")
            let pids = ["default", "work"].map { name in
                (json(box.vault(["status", "--json", "--vault", name]).stdout)["session"] as? [String: Any])?["agent_pid"] as? Int
            }
            let agent: Int? = running.count == 1 ? Int(running[0]) : nil
            #expect(agent != nil && pids == [agent, agent], "round \(round): sessions in \(pids), agents \(running)")
            for pid in running { kill(pid, SIGTERM) }
            #expect(waitFor(10) { running.allSatisfy(hasEnded) }, "round \(round): the agent did not end")
        }
        print("ConcurrencyTests.twoUnlocksAtOnceStartOneAgent: \(Self.rounds) rounds in \(elapsed(clock)), one agent each")
    }

    // MARK: 3. SIGKILL during vault init

    /// `vault init` killed at random moments. After each kill either there is no vault, and
    /// `vault status` says so (exit 3) and a new `init` succeeds, or there is a complete vault
    /// that opens with the passcode, holds the passcode and recovery slots, and refuses a second
    /// `init` as existing; a run that completed printed a recovery key that opens it. Never
    /// "holds no vault" or "already exists" for a half-made one.
    ///
    /// Kill moments are drawn from a window [low, high] that adapts: a kill that found nothing
    /// on disk raises `low`, a run that completed lowers `high`, so the kills gather in the
    /// stretch where files exist but the command has not finished, whatever the machine's load.
    @Test func sigkillDuringInitLeavesNoVaultOrAWholeOne() throws {
        let box = Sandbox()
        let pc = Sandbox.passcode
        func initArgs(_ name: String) -> [String] {
            ["init", "--vault", name, "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint", "--passcode-fd", "3"]
        }
        let clock = Date()
        let t0 = Date()
        #expect(reap(start(vaultBinary, initArgs("time-scale"), env: box.env, fds: [3: pc + "\n"])) == 0)
        let scale = Date().timeIntervalSince(t0)
        var low = 0.0, high = scale * 1.2
        var outcomes: [String: Int] = [:]
        var leftovers = 0, secondNames = 0
        // Runs until `rounds` of them were killed; one that completes is checked too, and
        // narrows the window.
        var run = 0, killed = 0
        while killed < Self.rounds && run < Self.rounds * 4 {
            defer { run += 1 }
            let name = "k\(run)"
            let loc = try VaultLocation(name: name, environment: box.env)
            let output = box.home + "/init-\(run)"
            let pid = start(vaultBinary, initArgs(name), env: box.env, fds: [3: pc + "\n"], output: output)
            let delay = Double.random(in: low...high)
            usleep(useconds_t(delay * 1_000_000))
            kill(pid, SIGKILL)
            let status = reap(pid)
            let printed = (try? String(contentsOfFile: output + ".out", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            let files = (try? FileManager.default.contentsOfDirectory(atPath: loc.folder)) ?? []
            let temporary = files.filter { $0.hasPrefix(".vault.db.new-") }
            leftovers += temporary.isEmpty ? 0 : 1
            // A kill between the link and the unlink leaves a second name of the live database.
            var live = stat(), other = stat()
            if lstat(loc.databasePath, &live) == 0 {
                secondNames += temporary.filter { lstat(loc.folder + "/" + $0, &other) == 0 && other.st_ino == live.st_ino }.count
            }
            let outcome: String
            if status != 128 + SIGKILL {
                #expect(status == 0, "run \(run): init ended with \(status)")
                #expect(!printed.isEmpty, "run \(run): init completed without printing a recovery key")
                outcome = "completed"
                high = max(delay, low + (high - low) * 0.5)
            } else {
                killed += 1
                if loc.exists {
                    outcome = printed.isEmpty ? "killed, vault in place, no key printed" : "killed, vault in place, key printed"
                } else if files.isEmpty {
                    outcome = "killed, nothing on disk (at most an empty folder)"
                    low += (delay - low) * 0.5
                } else {
                    outcome = "killed, temporary files only"
                }
            }
            outcomes[outcome, default: 0] += 1
            // Never narrower than a fifth of a run: the machine's load moves the stretch around.
            if high - low < scale * 0.2 {
                let middle = (low + high) / 2
                (low, high) = (max(0, middle - scale * 0.1), middle + scale * 0.1)
            }

            var r = box.vault(["status", "--vault", name, "--json"])
            if loc.exists {
                #expect(r.status == 0, "run \(run) (\(outcome)): status: \(r.stderr)")
                #expect(json(r.stdout)["slots"] as? [String] == ["passcode", "recovery"], "run \(run): slots: \(r.stdout)")
                r = box.vault(["ls", "--vault", name], passcode: pc)
                #expect(r.status == 0, "run \(run) (\(outcome)): the passcode does not open the vault: \(r.stderr)")
                if !printed.isEmpty {
                    let store = try VaultStore.open(loc)
                    #expect(throws: Never.self, "run \(run): the printed recovery key does not open the vault") {
                        _ = try store.unlock(recoveryKey: printed)
                    }
                }
                r = box.vault(["init", "--vault", name, "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint"], passcode: pc)
                #expect(r.status == 1 && r.stderr.contains("already exists"), "run \(run): a second init: \(r.status) \(r.stderr)")
            } else {
                #expect(r.status == 3 && r.stderr.contains("no vault named"), "run \(run) (\(outcome)): status: \(r.status) \(r.stderr)")
                r = box.vault(["init", "--vault", name, "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint"], passcode: pc)
                #expect(r.status == 0 && !r.stdout.isEmpty, "run \(run) (\(outcome)): init after the kill: \(r.status) \(r.stderr)")
                r = box.vault(["ls", "--vault", name], passcode: pc)
                #expect(r.status == 0, "run \(run): the new vault does not open: \(r.stderr)")
            }
        }
        #expect(killed == Self.rounds, "only \(killed) of \(run) runs were killed: \(outcomes)")
        print("ConcurrencyTests.sigkillDuringInit: \(run) runs (\(killed) killed) in \(elapsed(clock)) (an init takes \(String(format: "%.0f ms", scale * 1000))); \(outcomes.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")); temporary files left after \(leftovers) runs (\(secondNames) of them a second name of a vault.db); final window \(String(format: "%.1f-%.1f ms", low * 1000, high * 1000))")
    }

    // MARK: 4. reads through a session while the keys are rotated

    /// Per round: a session, four loops of `vault get` through it, and a `vault rotate` started
    /// once the loops run. Every get prints the right password, or fails with exit 19 (the
    /// rotation ended the session, or committed while the get ran), or, once another command was
    /// told of the end, finds no session and no passcode for this passcode-only vault (exit 12,
    /// "is locked"). Never a wrong value, "no item" or "damaged".
    @Test func getsThroughASessionDuringRotation() throws {
        let box = Sandbox()
        box.initVault()
        let pc = Sandbox.passcode
        let count = 1000
        var r = box.vault(["import"], passcode: pc, stdin: itemsJSON((0..<count).map(Self.prefilled)))
        try #require(r.status == 0, "import: \(r.stderr)")
        var tally = Tally()
        var reasons: [String: Int] = [:]
        let clock = Date()
        final class Loops: @unchecked Sendable {
            let lock = NSLock()
            var stop = false
            var results: [(item: Int, result: RunResult, ended: Date)] = []
        }
        for round in 0..<Self.rounds {
            r = box.vault(["unlock", "--scope", "user", "--timeout", "10m"], passcode: pc)
            try #require(r.status == 0, "round \(round): unlock: \(r.stderr)")
            let loops = Loops(), env = box.env, done = DispatchGroup()
            for t in 0..<4 {
                done.enter()
                Thread.detachNewThread {
                    var n = t
                    while true {
                        let i = (n * 97 + round) % count
                        let r = spawn(vaultBinary, ["get", "pre-\(i)", "--field", "password", "--no-input"], env: env, timeLimit: 60)
                        loops.lock.lock()
                        loops.results.append((i, r, Date()))
                        let stop = loops.stop || r.status != 0
                        loops.lock.unlock()
                        if stop { break }
                        n += 4
                    }
                    done.leave()
                }
            }
            usleep(useconds_t(Double.random(in: 0.05...0.15) * 1_000_000))
            let rotationStart = Date()
            let rotation = box.vault(["rotate"], passcode: pc)
            #expect(rotation.status == 0, "round \(round): rotate: \(rotation.stderr)")
            tally.add("rotate", rotation.status)
            loops.lock.lock()
            loops.stop = true
            loops.lock.unlock()
            done.wait()
            for (i, result, ended) in loops.results {
                tally.add("get", result.status)
                if result.status != 0 {
                    #expect(ended > rotationStart, "round \(round): get pre-\(i) failed before the rotation started: \(result.stderr)")
                }
                switch result.status {
                case 0: #expect(result.stdout == "p-\(i)\n", "round \(round): get pre-\(i) printed \(result.stdout.debugDescription)")
                case 19:
                    // "invalidated by a key rotation" (the first request after it), "rotated while
                    // this command ran" (it committed mid-command), or "was closed" (the session
                    // was there when this get asked, gone at its next request).
                    #expect(result.stderr.contains("the unlock session") || result.stderr.contains("rotated while this command ran"),
                            "round \(round): get: \(result.stderr)")
                case 12: #expect(result.stderr.contains("is locked"), "round \(round): get: \(result.stderr)")
                default: Issue.record("round \(round): get pre-\(i) exited \(result.status): \(result.stderr)")
                }
                if result.status == 19 {
                    let why = result.stderr.contains("invalidated by a key rotation") ? "session invalidated" :
                        result.stderr.contains("rotated while") ? "rotated mid-command" : "session closed"
                    reasons[why, default: 0] += 1
                }
            }
            // After the rotation the session is over for everyone.
            r = box.vault(["get", "pre-0", "--field", "password", "--no-input"])
            #expect(r.status == 12 || r.status == 19, "round \(round): a get after the rotation: \(r.status) \(r.stdout)")
        }
        print("ConcurrencyTests.getsThroughASessionDuringRotation: \(Self.rounds) rounds in \(elapsed(clock)); \(tally); exit 19 as \(reasons.sorted { $0.key < $1.key }.map { "\($0.key) x\($0.value)" }.joined(separator: ", "))")
    }
}

/// One command of a race: what it is (for the figures), which item it is about, how to run it.
struct Job {
    var kind: String
    var index: Int
    var run: VaultRun
    init(_ kind: String, _ index: Int, _ run: VaultRun) {
        self.kind = kind
        self.index = index
        self.run = run
    }
}

/// How the commands of a race ended: exit codes counted per kind of command.
struct Tally: CustomStringConvertible {
    var counts: [String: [Int32: Int]] = [:]

    mutating func add(_ kind: String, _ status: Int32) { counts[kind, default: [:]][status, default: 0] += 1 }

    var description: String {
        let total = counts.values.reduce(0) { $0 + $1.values.reduce(0, +) }
        return "\(total) commands: " + counts.keys.sorted().map { kind in
            "\(kind) " + counts[kind]!.keys.sorted().map { "exit \($0) x\(counts[kind]![$0]!)" }.joined(separator: ", ")
        }.joined(separator: "; ")
    }
}

/// `vault import` input for `items` (name, username, password, notes).
func itemsJSON(_ items: [Item]) -> String {
    let list: [[String: Any]] = items.map { i in
        var o: [String: Any] = ["name": i.name]
        if let u = i.username { o["username"] = u }
        if let p = i.password { o["password"] = p }
        if let n = i.notes { o["notes"] = n }
        return o
    }
    return String(decoding: try! JSONSerialization.data(withJSONObject: list), as: UTF8.self)
}

/// Seconds since `start`, for the figures.
func elapsed(_ start: Date) -> String { String(format: "%.1f s", Date().timeIntervalSince(start)) }
