import Foundation
import Testing

// The person at the terminal, round two, the rest (issue 25, items 9-15): the built `vault` on a
// pseudo-terminal, its screen read back; each test fails on the code before its change.

private let pc = Sandbox.passcode
private let cheapKDF = ["--kdf-memory", "8", "--kdf-ops", "1"]

/// A sandbox with a virtual reader whose vault has 'alice' enrolled (as right-index) and bound, and 'gh'.
private func fingerVault(sourceLocation: SourceLocation = #_sourceLocation) -> Sandbox {
    let box = Sandbox.withEnrolledFinger(sourceLocation: sourceLocation)
    let a = box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: "gh-pw\n")
    #expect(a.status == 0, "add: \(a.stderr)", sourceLocation: sourceLocation)
    return box
}

@Suite struct TerminalRoundTwoRestTests {
    // MARK: 9. asking only for what can help

    @Test func enrollingAnEnrolledFingerAndRemovingAMissingOneAskNoPasscode() {
        let box = fingerVault()
        // On a terminal, with no passcode given: refused before the passcode is asked for.
        var t = TerminalRun(["enroll", "--finger", "right-index"], env: box.env)
        #expect(t.finish(timeout: 30) == 4, "\(t.screen)")
        #expect(t.screen.contains("right-index is already enrolled") && !t.screen.contains("passcode for vault"), "\(t.screen)")
        #expect(t.screen.contains("vault: hint: remove it first with 'vault unenroll right-index'"), "\(t.screen)")
        t = TerminalRun(["unenroll", "left-thumb"], env: box.env)
        #expect(t.finish(timeout: 30) == 3, "\(t.screen)")
        #expect(t.screen.contains("left-thumb is not enrolled") && !t.screen.contains("passcode for vault"), "\(t.screen)")
        // The same answers to a script that gives the passcode.
        #expect(box.vault(["unenroll", "left-thumb"], passcode: pc).status == 3)
        #expect(box.vault(["enroll", "--finger", "right-index"], passcode: pc).status == 4)
    }

    @Test func loginOfAnItemWithFingerprintLoginOffAsksNoTouch() {
        let box = fingerVault()
        // No item has fingerprint login on: the passcode is asked for at once, no touch first.
        var t = TerminalRun(["login", "gh", "--format", "json"], env: box.env)
        #expect(t.waitFor("fingerprint login is off; passcode for vault 'default': "), "\(t.screen)")
        #expect(t.waitForSecretPrompt())
        t.type(pc + "\n")
        #expect(t.finish(timeout: 30) == 0, "\(t.screen)")
        #expect(!t.screen.contains("touch"), "\(t.screen)")
        #expect(json(t.stdout)["password"] as? String == "gh-pw")

        // A hint changed in the file (the flag in the clear beside each row) only changes what is
        // asked first: the item's sealed flag still demands its fresh match.
        var r = box.vault(["add", "fp", "--password-stdin"], passcode: pc, stdin: "fp-pw\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["edit", "fp", "--fingerprint-login", "on"], passcode: pc, reader: [.device("SCAN alice")])
        #expect(r.status == 0, "\(r.stderr)")
        let db = box.home + "/vaults/default/vault.db"
        let sql = spawn("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            print(c.execute("SELECT count(*) FROM items WHERE login_hint=1").fetchone()[0])
            c.execute("UPDATE items SET login_hint=0"); c.commit()
            """, db], env: box.env)
        #expect(sql.status == 0 && sql.stdout == "1\n", "\(sql.stdout) \(sql.stderr)")
        t = TerminalRun(["login", "fp", "--scan-timeout", "1"], env: box.env)
        #expect(t.waitFor("passcode for vault 'default': "), "\(t.screen)")
        #expect(t.waitForSecretPrompt())
        t.type(pc + "\n")
        #expect(t.waitFor("touch the fingerprint reader to log in to 'fp'"), "\(t.screen)")
        #expect(t.finish(timeout: 30) == 18, "\(t.screen)")
        #expect(t.stdout.isEmpty)
    }

    @Test func aVaultWithoutFingersIsToldToEnrollNotToBind() {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: "gh-pw\n")
        // A rotation with no finger enrolled: the way to a fingerprint slot is 'vault enroll'.
        let r = box.vault(["rotate"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("no finger enrolled: enrol one with 'vault enroll'") && !r.stderr.contains("--bind"), "\(r.stderr)")
    }

    // MARK: 10. the recovery key: written down, then off the screen; three tries to type it

    @Test func theRecoveryKeyWaitsForEnterThenLeavesTheScreen() {
        let box = Sandbox()
        let t = TerminalRun(["init", "--no-fingerprint", "--passcode-fd", "3"] + cheapKDF, env: box.env, stdoutOnTerminal: true, fds: [3: pc + "\n"])
        #expect(t.waitFor("press Enter once it is written down"))
        t.type("\n")
        #expect(t.finish() == 0, "\(t.screen)")
        // The key's line and the prompt's (80 columns: one row each) are erased, then said so.
        let screen = t.screen
        guard let erase = screen.range(of: "\u{1b}[2A\r\u{1b}[J") else {
            Issue.record("the key was not erased:\n\(screen)")
            return
        }
        let before = screen[..<erase.lowerBound]
        let key = String(before).components(separatedBy: "\r\n").dropLast(2).last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        #expect(key.count >= 56, "\(screen)")
        #expect(screen[erase.upperBound...].contains("the recovery key was cleared from the screen"), "\(screen)")
        #expect(!screen[erase.upperBound...].contains(key))
        // The key shown opens the vault.
        let r = box.vault(["recover", "--recovery-key-fd", "3", "--new-passcode-fd", "4"], fds: [3: key + "\n", 4: pc + "-new\n"])
        #expect(r.status == 0, "\(r.stderr)")
        // To a file or a pipe nothing is asked.
        #expect(box.vault(["init", "--vault", "piped", "--no-fingerprint"] + cheapKDF, passcode: pc).status == 0)
    }

    @Test func recoverGivesThreeTriesOnATerminal() {
        let box = Sandbox()
        let key = box.initVault()
        let t = TerminalRun(["recover", "--new-passcode-fd", "3"], env: box.env, fds: [3: pc + "-new\n"])
        for wrong in ["AAAA-BBBB-CCCC", key.replacingOccurrences(of: key.prefix(4), with: "ZZZZ")] {
            t.waitFor("recovery key: ")
            #expect(t.waitForSecretPrompt())
            t.type(wrong + "\n")
        }
        t.waitFor("1 try left")
        t.waitFor("recovery key: ")
        #expect(t.waitForSecretPrompt())
        t.type(key + "\n")
        #expect(t.finish() == 0, "\(t.screen)")
        #expect(t.screen.contains("2 tries left") && t.screen.contains("new passcode set"), "\(t.screen)")
        #expect(box.vault(["ls"], passcode: pc + "-new").status == 0)
    }

    // MARK: 11. progress bars and help that fit the terminal; TERM=dumb gets no escapes

    @Test func progressBarsFitFortyColumnsAndADumbTerminalGetsNoEscapes() {
        let box = Sandbox()
        box.initVault()
        for i in 1...3 { box.vault(["add", "item\(i)", "--password-stdin"], passcode: pc, stdin: "pw-\(i)\n") }
        var t = TerminalRun(["rotate", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"], columns: 40)
        #expect(t.finish() == 0, "\(t.screen)")
        let draws = t.screen.components(separatedBy: "\r\u{1b}[K").dropFirst()
        #expect(!draws.isEmpty, "\(t.screen)")
        for d in draws {
            let line = d.components(separatedBy: "\r\n")[0]
            #expect(line.count <= 39 && line.contains("re-sealed"), "a redraw wider than 40 columns wraps: '\(line)'")
        }
        var env = box.env
        env["TERM"] = "dumb"
        t = TerminalRun(["rotate", "--passcode-fd", "3"], env: env, fds: [3: pc + "\n"])
        #expect(t.finish() == 0, "\(t.screen)")
        #expect(!t.screen.contains("\u{1b}") && t.screen.contains("] 3/3 items re-sealed\r\n"), "\(t.screen.debugDescription)")
    }

    @Test func helpWrapsToTheTerminalsWidth() {
        let box = Sandbox()
        for args in [["help"], ["help", "rotate"], ["enroll", "--help"], ["help", "export"]] {
            let t = TerminalRun(args, env: box.env, stdoutOnTerminal: true, columns: 40)
            #expect(t.finish() == 0)
            // Examples are commands to copy: never broken.
            let text = t.screen.components(separatedBy: "examples:")[0]
            // A line of exactly 40 does not wrap (the cursor waits in the last column).
            for line in text.components(separatedBy: "\r\n") {
                #expect(line.count <= 40, "\(args): a line wider than 40 columns: '\(line)'")
            }
        }
        // Not a terminal: the 80-column text.
        let r = spawn(vaultBinary, ["help", "rotate"], env: box.env)
        #expect(r.stdout.split(separator: "\n").contains { $0.count > 40 && $0.count < 80 })
    }

    // MARK: 12. doctor's exit code says whether a finger can unlock

    @Test func doctorExitsNonZeroWhenNoFingerCanUnlock() {
        let box = Sandbox()
        box.env["VAULT_AUTHD_SOCKET"] = box.home + "/no-authd"
        box.initVault()
        var r = box.vault(["doctor"])
        #expect(r.status == 15, "\(r.status) \(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("finger unlock: NOT possible (no usable fingerprint reader: no fingerprint reader found)"), "\(r.stdout)")
        let fingers = fingerVault()
        fingers.env["VAULT_AUTHD_SOCKET"] = fingers.home + "/no-authd"
        r = fingers.vault(["doctor"])
        #expect(r.status == 0 && r.stdout.contains("finger unlock: works"), "\(r.status) \(r.stdout) \(r.stderr)")
        r = fingers.vault(["doctor", "--json"])
        #expect(r.status == 0 && json(r.stdout)["finger_unlock"] as? Bool == true, "\(r.stdout)")
        // A reader, but no finger enrolled: 16.
        let empty = Sandbox()
        empty.env["VAULT_AUTHD_SOCKET"] = empty.home + "/no-authd"
        empty.useVirtualReader("virtual_device")
        empty.initVault()
        r = empty.vault(["doctor", "--json"])
        #expect(r.status == 16 && json(r.stdout)["finger_unlock"] as? Bool == false, "\(r.status) \(r.stdout) \(r.stderr)")
    }

    // MARK: 13. a generic CSV import with a column map

    @Test func aCSVFileImportsThroughAColumnMap() throws {
        let box = Sandbox()
        box.initVault()
        let file = box.home + "/logins.csv"
        try "github,me@example.org,gh-pw,https://github.com,\"two\nlines\"\nmail,,mail-pw,,\n".write(toFile: file, atomically: true, encoding: .utf8)
        var r = box.vault(["import", "--from", "csv", "--columns", "name,username,password,url,notes", file], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("imported 2 items from a CSV file"), "\(r.stderr)")
        #expect(box.vault(["get", "github", "--field", "notes"], passcode: pc).stdout == "two\nlines\n")
        #expect(box.vault(["get", "github", "--field", "username"], passcode: pc).stdout == "me@example.org\n")
        #expect(box.vault(["get", "mail", "--field", "password"], passcode: pc).stdout == "mail-pw\n")
        // A header row equal to the map is skipped; skipped columns and custom fields.
        let other = box.home + "/other.csv"
        try "Title,Secret,Ignored,PIN\nbank,bank-pw,x,1234\n".write(toFile: other, atomically: true, encoding: .utf8)
        r = box.vault(["import", "--from", "csv", "--columns", "name,password,-,field:pin", other, "--dry-run"], passcode: pc)
        #expect(r.status == 0 && r.stdout == "login\tTitle\nlogin\tbank\n", "a header unlike the map is data: \(r.stdout) \(r.stderr)")
        try "name,password,-,field:pin\nbank,bank-pw,x,1234\n".write(toFile: other, atomically: true, encoding: .utf8)
        r = box.vault(["import", "--from", "csv", other], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("imported 1 item"), "the header is the map: \(r.stderr)")
        #expect(box.vault(["get", "bank", "--field", "pin"], passcode: pc).stdout == "1234\n")
        // A mistyped column is refused with a suggestion, before the vault is opened.
        r = box.vault(["import", "--from", "csv", "--columns", "name,pasword", file])
        #expect(r.status == 2 && r.stderr.contains("unknown column 'pasword'") && r.stderr.contains("did you mean 'password'?"), "\(r.stderr)")
        r = box.vault(["import", "--columns", "name,password", file])
        #expect(r.status == 2 && r.stderr.contains("--columns goes with --from csv"), "\(r.stderr)")
        r = box.vault(["import", "--from", "csv", "--columns", "name,password", file])
        #expect(r.status == 2 && r.stderr.contains("line 1: 5 fields, the column map has 2"), "\(r.stderr)")
    }

    // MARK: 2. notes edited with $EDITOR: the file in a private tmpfs folder, wiped after

    @Test func notesEditRunsTheEditorOnAPrivateTmpfsFileAndRemovesIt() throws {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "memo", "--type", "note", "--notes-stdin"], passcode: pc, stdin: "old secret notes\n")
        let log = box.home + "/editor.log", editor = box.home + "/editor.sh"
        try """
        #!/bin/sh
        { echo "$1"; stat -c %a "$(dirname "$1")"; stat -c %a "$1"; stat -f -c %T "$1"; cat "$1"; } > "\(log)"
        touch "$1.swp"
        printf 'new notes\\nline two\\n' > "$1"
        """.write(toFile: editor, atomically: true, encoding: .utf8)
        chmod(editor, 0o700)
        var env = box.env
        env["EDITOR"] = editor
        var t = TerminalRun(["edit", "memo", "--notes-edit", "--passcode-fd", "3"], env: env, fds: [3: pc + "\n"])
        #expect(t.finish() == 0, "\(t.screen)")
        let seen = (try? String(contentsOfFile: log, encoding: .utf8))?.components(separatedBy: "\n") ?? []
        #expect(seen.count >= 5, "\(seen)")
        guard seen.count >= 5 else { return }
        #expect(seen[1] == "700" && seen[2] == "600" && seen[3] == "tmpfs", "\(seen)")
        #expect(seen[4] == "old secret notes", "\(seen)")
        let folder = URL(fileURLWithPath: seen[0]).deletingLastPathComponent().path
        #expect(!FileManager.default.fileExists(atPath: seen[0]) && !FileManager.default.fileExists(atPath: folder), "left behind: \(folder)")
        #expect(box.vault(["get", "memo", "--field", "notes"], passcode: pc).stdout.hasPrefix("new notes\nline two"))
        // An editor that fails changes nothing; no terminal: refused before anything is opened.
        env["EDITOR"] = "false"
        t = TerminalRun(["edit", "memo", "--notes-edit", "--passcode-fd", "3"], env: env, fds: [3: pc + "\n"])
        #expect(t.finish() == 1 && t.screen.contains("were not changed"), "\(t.screen)")
        #expect(box.vault(["get", "memo", "--field", "notes"], passcode: pc).stdout.hasPrefix("new notes\nline two"))
        let r = box.vault(["edit", "memo", "--notes-edit"], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("--notes-edit needs a terminal"), "\(r.stderr)")
    }

    // MARK: 14 and 15. the demo, and trying it by hand

    /// The folder of the built binaries (the scripts take it as VAULT_BIN_DIR and build nothing).
    private var binDir: String { URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().path }

    @Test func theDemoShowsWhatAPersonMeetsAndNoRedErrors() {
        let box = Sandbox()
        var env = ["PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "HOME": box.home, "LANG": "C.UTF-8", "TERM": "xterm",
                   "VAULT_AUTHORITY": "embedded", "VAULT_BIN_DIR": binDir, "TMPDIR": box.home]
        env["NO_COLOR"] = nil
        let t = TerminalRun([packageRoot + "/Vault/demo.sh"], env: env, program: "/bin/bash", stdoutOnTerminal: true, color: true)
        #expect(t.finish(timeout: 300) == 0, "\(t.screen)")
        let screen = t.screen
        // The passcode typed at a real prompt (the demo's pseudo-terminal) after Enter at the touch prompt.
        #expect(screen.contains("(or press Enter for the passcode)") && screen.contains("passcode for vault 'personal': "), "\(screen)")
        #expect(!screen.contains("correct horse battery"), "the typed passcode was on the screen")
        #expect(screen.contains("password: ******** (--reveal or --field password shows it)"), "\(screen)")
        // Expected failures in words, not red errors; status in words, not Python dicts.
        #expect(screen.contains("expected: exit 17 (locked out)") && screen.contains("expected: exit 10 (3 fingers did not match)"), "\(screen)")
        #expect(!screen.contains("\u{1b}[1;31m") && !screen.contains("vault: error:"), "\(screen)")
        #expect(screen.contains("failed matches: 5 of 5") && !screen.contains("{'"), "\(screen)")
    }

    @Test func trySHOpensAShellWithVaultATouchCommandAndAThrowAwayHome() {
        let box = Sandbox()
        let env = ["PATH": "/usr/bin:/bin", "HOME": box.home, "LANG": "C.UTF-8", "TERM": "xterm", "VAULT_BIN_DIR": binDir, "TMPDIR": box.home]
        let t = TerminalRun([packageRoot + "/Vault/try.sh"], env: env, program: "/bin/bash", stdoutOnTerminal: true)
        #expect(t.waitFor("touch-finger alice 5 &"))
        t.waitFor("(vault try) ")
        t.type("command -v vault; echo \"home=$VAULT_HOME=\"\n")
        #expect(t.waitFor(binDir + "/vault"))
        t.waitFor("home=")
        t.waitFor("(vault try) ")
        t.type("touch-finger alice 5 & vault init --kdf-memory 8 --kdf-ops 1\n")
        for _ in 0..<2 {
            #expect(t.waitForSecretPrompt(timeout: 30))
            t.type(pc + "\n")
            _ = t.waitForEcho(true)
        }
        #expect(t.waitFor("press Enter once it is written down"))
        t.type("\n")
        #expect(t.waitFor("enrolled right-index", timeout: 60))
        t.waitFor("(vault try) ")
        t.type("touch-finger alice & printf 'pw-1\\n' | vault add gh --password-stdin; echo ADD-$?\n")
        #expect(t.waitFor("ADD-0", timeout: 60))
        t.waitFor("(vault try) ")
        t.type("exit\n")
        #expect(t.finish() == 0)
        let screen = t.screen
        // The line the shell printed (not the command's echo): home=/tmp/.../vaults=
        let home = "/" + (screen.components(separatedBy: "home=/").dropFirst().first?.components(separatedBy: "=").first ?? "")
        #expect(home.hasSuffix("/vaults") && !FileManager.default.fileExists(atPath: home), "the throw-away folder stays: \(home)")
        #expect(!screen.contains(pc))
    }
}
