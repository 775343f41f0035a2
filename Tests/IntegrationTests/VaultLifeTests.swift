import Foundation
import Testing
@testable import VaultKit

@Suite struct VaultLifeTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    @Test func wholeLifeOfAVault() throws {
        let recovery = box.initVault()
        #expect(recovery.range(of: #"^([A-Z2-7]{4}-){13}[A-Z2-7]{4}$"#, options: .regularExpression) != nil)

        // add: the password from stdin, never from argv; stdout stays empty (messages go to stderr).
        var r = box.vault(["add", "github", "--username", "me", "--url", "https://github.com", "--tag", "dev",
                           "--password-stdin"], passcode: pc, stdin: "gh-secret-1\n")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        r = box.vault(["add", "github", "--password-stdin"], passcode: pc, stdin: "x\n")
        #expect(r.status == 4)
        r = box.vault(["add", "mail", "--generate", "--length", "30"], passcode: pc)
        #expect(r.status == 0)

        // get
        r = box.vault(["get", "github", "--field", "password"], passcode: pc)
        #expect(r.status == 0)
        #expect(r.stdout == "gh-secret-1\n")
        r = box.vault(["get", "mail", "--field", "password"], passcode: pc)
        #expect(r.stdout.trimmingCharacters(in: .newlines).count == 30)
        r = box.vault(["get", "github", "--json"], passcode: pc)
        var o = json(r.stdout)
        #expect(o["username"] as? String == "me")
        #expect(o["password"] == nil, "password shown without --reveal")
        r = box.vault(["get", "github", "--json", "--reveal"], passcode: pc)
        #expect(json(r.stdout)["password"] as? String == "gh-secret-1")
        r = box.vault(["get", "github"], passcode: pc)
        #expect(!r.stdout.contains("gh-secret-1"))
        #expect(r.stdout.contains("username: me"))

        // edit, mv, search
        r = box.vault(["edit", "github", "--username", "me2", "--password-stdin"], passcode: pc, stdin: "gh-secret-2\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "github", "--field", "username"], passcode: pc)
        #expect(r.stdout == "me2\n")
        r = box.vault(["mv", "github", "github-personal"], passcode: pc)
        #expect(r.status == 0)
        r = box.vault(["get", "github-work", "--field", "password"], passcode: pc)
        #expect(r.status == 3)
        // The old name is now a unique part of the new one: a script still gets exit 3 (only a
        // person at a terminal is offered the one name containing it).
        r = box.vault(["get", "github", "--field", "password"], passcode: pc)
        #expect(r.status == 3, "\(r.stderr)")
        r = box.vault(["search", "GITHUB", "--json"], passcode: pc)
        o = json(r.stdout)
        let names = (o["items"] as? [[String: Any]])?.compactMap { $0["name"] as? String }
        #expect(names == ["github-personal"])
        r = box.vault(["ls"], passcode: pc)
        #expect(r.stdout == "github-personal\nmail\n")

        // rm: refused without a terminal unless --force
        r = box.vault(["rm", "mail"], passcode: pc)
        #expect(r.status == 2)
        r = box.vault(["rm", "mail", "--force"], passcode: pc)
        #expect(r.status == 0)
        r = box.vault(["rm", "mail", "--force"], passcode: pc)
        #expect(r.status == 3)

        // passcode change: the old passcode stops working, items stay.
        r = box.vault(["passcode", "--new-passcode-fd", "4"], passcode: pc, fds: [4: "second passcode\n"])
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "github-personal", "--field", "password"], passcode: pc)
        #expect(r.status == 10)
        #expect(r.stdout.isEmpty)
        r = box.vault(["get", "github-personal", "--field", "password"], passcode: "second passcode")
        #expect(r.stdout == "gh-secret-2\n")

        // recovery: the recovery key sets a new passcode.
        r = box.vault(["recover", "--recovery-key-fd", "3", "--new-passcode-fd", "4"],
                      fds: [3: recovery + "\n", 4: "third passcode\n"])
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "github-personal", "--field", "password"], passcode: "third passcode")
        #expect(r.stdout == "gh-secret-2\n")
        r = box.vault(["recover", "--recovery-key-fd", "3", "--new-passcode-fd", "4"],
                      fds: [3: "AAAA-BBBB\n", 4: "fourth passcode\n"])
        #expect(r.status == 10)

        // File modes.
        var st = stat()
        #expect(stat(box.home + "/vaults/default", &st) == 0 && st.st_mode & 0o777 == 0o700)
        #expect(stat(box.home + "/vaults/default/vault.db", &st) == 0 && st.st_mode & 0o777 == 0o600)
    }

    @Test func exitCodesForMissingVaultWrongPasscodeAndNoInput() {
        var r = box.vault(["ls"], passcode: pc)
        #expect(r.status == 3)
        #expect(r.stderr.contains("vault init"))
        box.initVault()
        r = box.vault(["ls"], passcode: "nope nope")
        #expect(r.status == 10)
        #expect(r.stdout.isEmpty)
        // No passcode can be read and the vault opens with the passcode only: it is locked (12),
        // and the hint names 'vault unlock' (not how to enrol a finger).
        r = box.vault(["ls", "--no-input"])
        #expect(r.status == 12)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("is locked") && r.stderr.contains("'vault unlock'") && !r.stderr.contains("enrol"), "\(r.stderr)")
        r = box.vault(["ls", "--no-input", "--passcode"])
        #expect(r.status == 12)
        r = box.vault(["--vault", "../x", "ls"])
        #expect(r.status == 2)
        r = box.vault(["lss"])
        #expect(r.status == 2)
        #expect(r.stderr.contains("did you mean 'vault ls'"))
        r = box.vault(["get", "x", "--feild", "password"])
        #expect(r.status == 2)
        #expect(r.stderr.contains("--field"))
        r = box.vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc)
        #expect(r.status == 1)
    }

    @Test func globalOptionsBeforeOrAfterTheCommand() {
        box.initVault("work")
        var r = box.vault(["--vault", "work", "add", "a", "--password-stdin"], passcode: pc, stdin: "1\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "a", "--field", "password", "--vault", "work"], passcode: pc)
        #expect(r.stdout == "1\n")
        var env = box.env
        env["VAULT_NAME"] = "work"
        r = spawn(vaultBinary, ["get", "a", "--field", "password", "--passcode-fd", "3"], env: env, fds: [3: pc + "\n"])
        #expect(r.stdout == "1\n")
    }

    @Test func damagedRowIsNamedAndTheRestStillReads() throws {
        box.initVault()
        box.vault(["add", "good", "--password-stdin"], passcode: pc, stdin: "g\n")
        box.vault(["add", "bad", "--password-stdin"], passcode: pc, stdin: "b\n")
        // Flip one byte of one row with the sqlite3 command-line-free route: SQLite's own C API via python.
        let db = box.home + "/vaults/default/vault.db"
        let script = """
        import sqlite3,sys
        c=sqlite3.connect(sys.argv[1]); rows=c.execute('select id, overview from items').fetchall()
        for rid, sealed in rows:
            b=bytearray(sealed); b[3]^=1; c.execute('update items set overview=? where id=?',(bytes(b),rid)); break
        c.commit()
        """
        let p = spawn("/usr/bin/env", ["python3", "-c", script, db], env: box.env)
        #expect(p.status == 0, "\(p.stderr)")
        let g = box.vault(["get", "good", "--field", "password"], passcode: pc)
        let b = box.vault(["get", "bad", "--field", "password"], passcode: pc)
        let damaged = g.status == 5 ? g : b
        let fine = g.status == 5 ? b : g
        #expect(damaged.status == 5)
        #expect(damaged.stderr.contains("item '"))
        #expect(fine.status == 0)
        let l = box.vault(["ls"], passcode: pc)
        #expect(l.status == 5)
        #expect(l.stdout.split(separator: "\n").count == 1)
        #expect(l.stderr.contains("damaged"))
    }

    @Test func truncatedDatabaseAndLoosePermissions() throws {
        box.initVault()
        let db = box.home + "/vaults/default/vault.db"
        chmod(box.home + "/vaults/default", 0o755)
        var r = box.vault(["ls"], passcode: pc)
        #expect(r.status == 6)
        #expect(r.stderr.contains("chmod 700"))
        chmod(box.home + "/vaults/default", 0o700)
        try "garbage, not a database".write(toFile: db, atomically: false, encoding: .utf8)
        try? FileManager.default.removeItem(atPath: db + "-wal")
        try? FileManager.default.removeItem(atPath: db + "-shm")
        r = box.vault(["ls"], passcode: pc)
        #expect(r.status == 5)
    }

    @Test func helpAndVersion() {
        var r = box.vault(["help"])
        #expect(r.status == 0 && r.stdout.contains("usage: vault"))
        r = box.vault(["help", "get"])
        #expect(r.stdout.contains("--field"))
        r = box.vault(["get", "--help"])
        #expect(r.status == 0 && r.stdout.contains("examples:"))
        r = box.vault(["help", "exit-codes"])
        #expect(r.stdout.contains("20   the enrolled prints changed"))
        r = box.vault([])
        #expect(r.status == 2)
        r = box.vault(["version"])
        #expect(r.stdout.hasPrefix("vault "))
        r = box.vault(["generate", "--words", "6"])
        #expect(r.stdout.split(separator: "-").count == 6)
    }

    @Test func aDamagedSettingsRowIsExitFiveNamingTheVaultUntilSetAgain() throws {
        box.initVault("work")
        var r = box.vault(["add", "x", "--vault", "work", "--password-stdin"], passcode: pc, stdin: "pw\n")
        #expect(r.status == 0, "\(r.stderr)")
        let store = try VaultStore.open(try VaultLocation(name: "work", environment: box.env))
        try store.db.query("UPDATE meta SET value=? WHERE key='settings'", [.blob(Array(#"{"policy":"biometr"#.utf8))])
        r = box.vault(["get", "x", "--vault", "work", "--field", "password", "--no-input"])
        #expect(r.status == 5, "\(r.stderr)")
        #expect(r.stderr.contains("settings of vault 'work'"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        r = box.vault(["settings", "--vault", "work"])
        #expect(r.status == 5)
        // Setting them again (with the passcode) is the way out.
        r = box.vault(["settings", "--vault", "work", "--policy", "biometrics"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "x", "--vault", "work", "--field", "password"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "pw\n")
    }


    @Test func aDamagedRowIsListedAndRemovedByRepairSoRotationWorksAgain() throws {
        box.initVault()
        for name in ["a", "b", "c"] {
            let r = box.vault(["add", name, "--password-stdin"], passcode: pc, stdin: "pw-\(name)\n")
            #expect(r.status == 0, "\(r.stderr)")
        }
        let store = try VaultStore.open(try VaultLocation(name: "default", environment: box.env))
        let row = try #require(try store.db.query("SELECT id, secrets FROM items LIMIT 1").first)
        var sealed = try #require(row[1].bytes)
        sealed[sealed.count / 2] ^= 1
        try store.db.query("UPDATE items SET secrets=? WHERE id=?", [.blob(sealed), row[0]])
        var r = box.vault(["rotate"], passcode: pc)
        #expect(r.status == 5, "\(r.stderr)")
        #expect(r.stderr.contains("vault repair"), "the error leads to repair: \(r.stderr)")
        r = box.vault(["repair", "--json"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect((json(r.stdout)["damaged"] as? [String])?.count == 1)
        r = box.vault(["repair", "--remove"], passcode: pc)
        #expect(r.status == 2, "no terminal: --force is needed")
        r = box.vault(["repair", "--remove", "--force", "--json"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(json(r.stdout)["removed"] as? Int == 1)
        r = box.vault(["rotate"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["ls"], passcode: pc)
        #expect(r.status == 0)
        #expect(r.stdout.split(separator: "\n").count == 2, "the two readable items are kept: \(r.stdout)")
    }

    @Test func namesWithInvisibleCharactersAndWeakPasscodesAreRefused() {
        box.initVault()
        for name in ["git\u{200B}hub", "pay\u{202E}lap", String(repeating: "\u{1F600}", count: 300)] {
            let r = box.vault(["add", name, "--password-stdin"], passcode: pc, stdin: "pw\n")
            #expect(r.status == 2, "\(name.prefix(10)): \(r.stderr)")
        }
        for weak in ["    ", "\t\t\t\t", "\u{E9}\u{E9}", "abc"] {
            let r = box.vault(["passcode", "--new-passcode-fd", "4"], passcode: pc, fds: [4: weak + "\n"])
            #expect(r.status == 2, "\(weak.debugDescription): \(r.stderr)")
        }
        let r = box.vault(["passcode", "--new-passcode-fd", "4"], passcode: pc, fds: [4: "\u{E9}\u{E9}\u{E9}\u{E9}\n"])
        #expect(r.status == 0, "four characters, eight bytes: \(r.stderr)")
    }


    @Test func exportThenImportKeepsEveryFieldAndImportIsStrict() throws {
        box.initVault()
        box.initVault("copy")
        var r = box.vault(["add", "db", "--username", "admin", "--url", "https://db", "--tag", "prod", "--notes", "n",
                           "--password-stdin"], passcode: pc, stdin: "db-pw\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["edit", "db", "--user-prompt", "User:", "--password-prompt", "Secret:"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["export"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        let exported = r.stdout
        r = box.vault(["import", "--vault", "copy"], passcode: pc, stdin: exported)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["export", "--vault", "copy"], passcode: pc)
        let again = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]])
        let first = try #require(try JSONSerialization.jsonObject(with: Data(exported.utf8)) as? [[String: Any]])
        #expect(NSArray(array: again).isEqual(to: first), "export | import | export is the same")
        #expect(first.first?["user_prompt"] as? String == "User:")
        #expect(first.first?["password_prompt"] as? String == "Secret:")
        #expect(first.first?["fingerprint_login"] as? Bool == false)

        // Strict: an unknown key or a wrong type names the item and the key; nothing is imported.
        r = box.vault(["import", "--vault", "copy"], passcode: pc, stdin: #"[{"name":"a","password":"x"},{"name":"b","pasword":"y"}]"#)
        #expect(r.status == 2)
        #expect(r.stderr.contains("item 2 ('b')") && r.stderr.contains("'pasword'"), "\(r.stderr)")
        r = box.vault(["import", "--vault", "copy"], passcode: pc, stdin: #"[{"name":"c","password":123}]"#)
        #expect(r.status == 2)
        #expect(r.stderr.contains("'password'"), "\(r.stderr)")
        r = box.vault(["get", "a", "--vault", "copy"], passcode: pc)
        #expect(r.status == 3, "nothing of a refused import was written")
    }


    @Test func passwordsAreStoredByteForByteOrRefused() {
        box.initVault()
        let pcFile = box.home + "/pc"
        _ = FileManager.default.createFile(atPath: pcFile, contents: Data((pc + "\n").utf8))
        func add(_ name: String, printf bytes: String) -> RunResult {
            spawn("/bin/sh", ["-c", "printf '\(bytes)' | \"$0\" add \(name) --password-stdin --passcode-fd 3 3<\(pcFile)", vaultBinary], env: box.env)
        }
        var r = add("latin1", printf: "\\351t\\351\\n")
        #expect(r.status == 2, "\(r.stderr)")
        #expect(r.stderr.contains("not valid UTF-8"))
        r = add("crlf", printf: "pw\\r\\n")
        #expect(r.status == 2, "\(r.stderr)")
        #expect(r.stderr.contains("carriage return"))
        r = add("utf8", printf: "\\303\\251t\\303\\251 \\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "utf8", "--field", "password"], passcode: pc)
        #expect(r.stdout == "\u{E9}t\u{E9} \n", "kept as given, trailing space included")
        r = box.vault(["add", "bad\u{FFFD}name", "--password-stdin"], passcode: pc, stdin: "x\n")
        #expect(r.status == 2)
    }


    @Test func aVaultProcessHoldingASecretLeavesNoCoreDump() throws {
        box.initVault()
        let r = box.vault(["add", "db", "--password-stdin"], passcode: pc, stdin: "db-pw\n")
        #expect(r.status == 0)
        // `run` waits for its child with the password in memory: no core file, not dumpable.
        let pid = start(vaultBinary, ["run", "--env", "X=db", "--passcode-fd", "3", "--", "sleep", "3"], env: box.env,
                        fds: [3: pc + "\n"])
        defer { _ = reap(pid) }
        var limits = ""
        for _ in 0..<100 {
            usleep(30_000)
            limits = (try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)) ?? ""
            if FileManager.default.fileExists(atPath: "/proc/\(pid)/task"),
               (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"))?.isEmpty == false,
               let children = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8), !children.isEmpty { break }
        }
        let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }
        #expect(core.map { $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2) == ["0", "0"] } == true,
                "\(core ?? "no limits")")
        // PR_SET_DUMPABLE 0 makes the kernel hand /proc/PID/environ and mem to root (telling only
        // when the test itself is not root; VaultSystemTests check the flag in-process).
        if getuid() != 0 {
            var st = stat()
            #expect(stat("/proc/\(pid)/environ", &st) == 0 && st.st_uid == 0)
        }
    }

}

@Suite struct SettingsAndImportTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    @Test func settingsNeedThePasscodeAndArePersisted() {
        box.initVault()
        var r = box.vault(["settings", "--json"])
        #expect(json(r.stdout)["policy"] as? String == "biometrics-or-passcode")
        #expect(json(r.stdout)["passcode_interval_hours"] as? Int == 48)
        r = box.vault(["settings", "--policy", "biometrics", "--no-input"])
        #expect(r.status == 12)
        r = box.vault(["settings", "--policy", "biometrics", "--passcode-interval", "24", "--passcode-after-reboot", "off"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["status", "--json"])
        #expect(json(r.stdout)["policy"] as? String == "biometrics")
        #expect(json(r.stdout)["passcode_interval_hours"] as? Int == 24)
        r = box.vault(["settings", "--policy", "face-id"], passcode: pc)
        #expect(r.status == 2)
        // The TPM move asks for the passcode and writes on its own: with another setting it is
        // refused, and nothing changes (it used to save the settings without the other change).
        r = box.vault(["settings", "--passcode-on-tpm", "off", "--passcode-interval", "12"], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("--passcode-on-tpm goes alone"), "\(r.stderr)")
        #expect(json(box.vault(["settings", "--json"]).stdout)["passcode_interval_hours"] as? Int == 24)
        // The passcode given explicitly still opens the vault under the biometrics policy.
        r = box.vault(["ls"], passcode: pc)
        #expect(r.status == 0)
    }

    @Test func importIsAllOrNothingAndExportRoundTrips() {
        box.initVault()
        var r = box.vault(["import"], passcode: pc, stdin: #"[{"name":"a","password":"1","username":"u"},{"name":"b","password":"2","urls":["https://b.example"]}]"#)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["import"], passcode: pc, stdin: #"[{"name":"c","password":"3"},{"name":"a","password":"x"}]"#)
        #expect(r.status == 4)
        r = box.vault(["ls"], passcode: pc)
        #expect(r.stdout == "a\nb\n", "a failed import wrote nothing")
        r = box.vault(["import"], passcode: pc, stdin: "not json")
        #expect(r.status == 2)
        r = box.vault(["export"], passcode: pc)
        let items = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [[String: Any]] ?? []
        #expect(items.count == 2)
        #expect(items.first { $0["name"] as? String == "b" }?["password"] as? String == "2")
    }
}

/// What a script reads from stdout is never silently missing.
@Suite struct StandardOutputTests {
    let box = Sandbox()

    @Test func aFullDiskOnStandardOutputIsExitSix() throws {
        box.initVault()
        var r = box.vault(["add", "gh", "--password-stdin"], passcode: Sandbox.passcode, stdin: "pw\n")
        #expect(r.status == 0)
        let full = open("/dev/full", O_WRONLY)
        #expect(full >= 0)
        defer { close(full) }
        r = spawn(vaultBinary, ["get", "gh", "--field", "password", "--passcode-fd", "3"], env: box.env,
                  fds: [3: Sandbox.passcode + "\n"], stdoutFD: full)
        #expect(r.status == 6, "\(r.stderr)")
        #expect(r.stderr.contains("standard output"), "\(r.stderr)")
        r = spawn(vaultBinary, ["ls", "--passcode-fd", "3"], env: box.env, fds: [3: Sandbox.passcode + "\n"], stdoutFD: full)
        #expect(r.status == 6, "\(r.stderr)")
    }
}
