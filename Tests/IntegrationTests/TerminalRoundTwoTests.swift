import Foundation
import Testing

// The person at the terminal, round two (issue 25): the built `vault` on a pseudo-terminal, often
// under a real interactive bash (job control: Ctrl-Z and `fg` are the shell's), its screen read back.

private let pc = Sandbox.passcode
private let cheapKDF = ["--kdf-memory", "8", "--kdf-ops", "1"]
private let secret = "gh-Secret-0451"

/// An interactive bash (no rc files, prompt `$ `) on a fresh terminal, with the built `vault` first on PATH.
private func shell(_ box: Sandbox, extraEnv: [String: String] = [:]) -> TerminalRun {
    var env = box.env
    env["PS1"] = "$ "
    env["PATH"] = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().path + ":/usr/bin:/bin"
    for (k, v) in extraEnv { env[k] = v }
    let t = TerminalRun(["--norc", "--noprofile", "-i"], env: env, program: "/bin/bash", stdoutOnTerminal: true)
    t.waitFor("$ ")
    return t
}

/// A sandbox with a virtual reader whose vault has 'alice' enrolled and bound, and 'gh'.
private func fingerVault(sourceLocation: SourceLocation = #_sourceLocation) -> Sandbox {
    let box = Sandbox()
    box.useVirtualReader("virtual_device")
    let r = box.vault(["init"] + cheapKDF, passcode: pc, reader: Array(repeating: .device("SCAN alice"), count: 5))
    #expect(r.status == 0, "init: \(r.stderr)", sourceLocation: sourceLocation)
    let a = box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: secret + "\n")
    #expect(a.status == 0, "add: \(a.stderr)", sourceLocation: sourceLocation)
    return box
}

@Suite struct TerminalRoundTwoTests {
    // MARK: 1. Ctrl-Z at a secret prompt, then fg

    @Test func ctrlZAtThePasscodePromptThenFgKeepsEchoOffAndAsksAgain() {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: secret + "\n")
        let t = shell(box)
        t.type("vault ls\n")
        t.waitFor("passcode for vault 'default': ")
        #expect(t.waitForSecretPrompt())
        t.type("\u{1a}")
        t.waitFor("Stopped")
        t.waitFor("$ ")
        t.type("fg\n")
        #expect(t.waitFor("passcode for vault 'default': "), "the prompt was not shown again after fg")
        #expect(t.waitForSecretPrompt(), "echo is on after fg")
        t.type(pc + "\n")
        t.waitFor("gh")
        t.waitFor("$ ")
        t.type("exit\n")
        _ = t.finish()
        #expect(!t.screen.contains(pc), "the passcode was on the screen:\n\(t.screen)")
    }

    @Test func ctrlZAtTheFingerprintPromptThenFgKeepsThePasscodeOffTheScreen() {
        let box = fingerVault()
        let t = shell(box)
        t.type("vault get gh --field password > \(box.home)/out\n")
        t.waitFor("touch the fingerprint reader")
        #expect(t.waitForEcho(false))
        t.type("\u{1a}")
        t.waitFor("Stopped")
        t.waitFor("$ ")
        t.type("fg\n")
        #expect(t.waitFor("touch the fingerprint reader"), "the prompt was not shown again after fg")
        #expect(t.waitForEcho(false), "echo is on after fg")
        t.type(pc + "\n")
        t.waitFor("$ ")
        t.type("echo END-$?\n")
        t.waitFor("END-0")
        t.type("exit\n")
        _ = t.finish()
        #expect(!t.screen.contains(pc), "the passcode was on the screen:\n\(t.screen)")
        #expect((try? String(contentsOfFile: box.home + "/out", encoding: .utf8)) == secret + "\n")
    }
}

extension TerminalRoundTwoTests {
    // MARK: 2. every secret typed on a terminal: a prompt, no echo, a repeat

    @Test func hiddenFieldsTOTPAndNotesTypedOnATerminalAreAskedTwiceWithoutEcho() {
        let box = Sandbox()
        box.initVault()
        var t = TerminalRun(["add", "bank-card", "--type", "card", "--field", "pin:hidden", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
        for prompt in ["pin (hidden) for 'bank-card': ", "repeat the value of the field 'pin': "] {
            t.waitFor(prompt)
            #expect(t.waitForSecretPrompt(), "echo is on at '\(prompt)'")
            t.type("4321-pin\n")
        }
        #expect(t.finish() == 0, "\(t.screen)")
        #expect(!t.screen.contains("4321-pin"), "\(t.screen)")
        // A card has no password: none is asked for, and no warning says it lacks one.
        #expect(!t.screen.contains("password"), "\(t.screen)")
        #expect(box.vault(["get", "bank-card", "--field", "pin"], passcode: pc).stdout == "4321-pin\n")

        t = TerminalRun(["add", "site", "--totp-stdin", "--notes-stdin", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
        for (prompt, answer) in [("TOTP secret or otpauth:// URI for 'site': ", "JBSWY3DPEHPK3PXP"), ("repeat the TOTP secret: ", "JBSWY3DPEHPK3PXP"),
                                 ("notes for 'site'", "recovery codes 1111 2222"), ("repeat the notes: ", "recovery codes 1111 2222")] {
            t.waitFor(prompt)
            #expect(t.waitForSecretPrompt(), "echo is on at '\(prompt)'")
            t.type(answer + "\n")
        }
        #expect(t.finish() == 0, "\(t.screen)")
        #expect(!t.screen.contains("JBSWY3DP") && !t.screen.contains("1111"), "\(t.screen)")
        #expect(box.vault(["get", "site", "--field", "notes"], passcode: pc).stdout == "recovery codes 1111 2222\n")
    }

    @Test func notesStdinTakesTheRestOfStandardInputAndExcludesNotes() {
        let box = Sandbox()
        box.initVault()
        var r = box.vault(["add", "memo", "--type", "note", "--notes-stdin"], passcode: pc, stdin: "line one\nline two\n")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!r.stderr.contains("no password"), "a note has no password: \(r.stderr)")
        r = box.vault(["get", "memo", "--field", "notes"], passcode: pc)
        #expect(r.stdout == "line one\nline two\n", "\(r.stdout)")
        r = box.vault(["edit", "memo", "--notes-stdin"], passcode: pc, stdin: "replaced\n")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(box.vault(["get", "memo", "--field", "notes"], passcode: pc).stdout == "replaced\n")
        r = box.vault(["add", "x", "--notes", "a", "--notes-stdin"], passcode: pc, stdin: "b\n")
        #expect(r.status == 2 && r.stderr.contains("exclude each other"), "\(r.stderr)")
    }

    // MARK: 3. a bulk export asks for a finger or the passcode, even in a session

    @Test func anExportInsideASessionNeedsThePasscodeAndRefusesATerminal() {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: secret + "\n")
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        // A process of the user with the session at hand: no passcode, no export.
        var r = box.vault(["export", "--no-input"])
        #expect(r.status == 12, "exported without a touch or the passcode: \(r.status) \(r.stderr)")
        #expect(!r.stdout.contains(secret))
        r = box.vault(["export", "--encrypt", "--passphrase-fd", "4", "--kdf-memory", "8", "--kdf-ops", "1", "--no-input"], fds: [4: "a passphrase\n"])
        #expect(r.status == 12, "\(r.status) \(r.stderr)")
        r = box.vault(["export"], passcode: pc)
        #expect(r.status == 0 && r.stdout.contains(secret), "\(r.stderr)")
        #expect(r.stderr.contains("vault: exported 1 item (plain vault JSON: every secret readable)"), "\(r.stderr)")
        // A plain export to the terminal is refused unless --force.
        var t = TerminalRun(["export", "--passcode-fd", "3"], env: box.env, stdoutOnTerminal: true, fds: [3: pc + "\n"])
        #expect(t.finish() == 2)
        #expect(!t.screen.contains(secret) && t.screen.contains("--force"), "\(t.screen)")
        t = TerminalRun(["export", "--force", "--passcode-fd", "3"], env: box.env, stdoutOnTerminal: true, fds: [3: pc + "\n"])
        #expect(t.finish() == 0)
        #expect(t.screen.contains(secret))
    }

    // MARK: 4. an unlock session serves the terminal that opened it

    @Test func anUnlockSessionServesItsTerminalOnlyUnlessScopeUser() throws {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: secret + "\n")
        let file = box.home + "/pc"
        try (pc + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let t = shell(box)
        t.type("vault unlock --passcode-fd 3 3<\(file)\n")
        t.waitFor("commands in this terminal can fetch logins until 2m idle (at most 12h)")
        t.waitFor("$ ")
        t.type("vault get gh --field password --no-input; echo GOT-$?\n")
        t.waitFor(secret)
        t.waitFor("GOT-0")
        // Another terminal session (here: none at all) of the same user does not get it.
        var r = box.vault(["get", "gh", "--field", "password", "--no-input"])
        #expect(r.status == 12, "another terminal used the session: \(r.status) \(r.stdout)")
        r = box.vault(["status", "--json"])
        #expect((json(r.stdout)["session"] as? [String: Any])?["other_terminal"] as? Bool == true, "\(r.stdout)")
        t.type("vault status\n")
        t.waitFor("unlocked for this terminal")
        // A second unlock says so, with the time left.
        t.type("vault unlock\n")
        t.waitFor("vault 'default' is already unlocked (")
        t.waitFor(" s idle left)")
        // The person's own lock: no "ended by 'vault lock'" right after it.
        t.type("vault lock; vault ls --no-input; echo LS-$?\n")
        t.waitFor("LS-12")
        t.type("exit\n")
        _ = t.finish()
        #expect(!t.screen.contains("ended by 'vault lock'"), "\(t.screen)")
        #expect(!t.screen.contains(pc))
        // --scope user: every process of the user, as before.
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        r = box.vault(["get", "gh", "--field", "password", "--no-input"])
        #expect(r.status == 0 && r.stdout == secret + "\n", "\(r.stderr)")
    }

    // MARK: 12. a closed pipe is quiet

    @Test func aClosedPipeEndsTheExportQuietlyWithItsExitCode() {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: secret + "\n")
        var p: [Int32] = [0, 0]
        #expect(pipe(&p) == 0)
        close(p[0])
        let r = spawn(vaultBinary, ["export", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"], stdoutFD: p[1])
        close(p[1])
        #expect(r.status == 6)
        #expect(!r.stderr.contains("error"), "\(r.stderr)")
    }
}

extension TerminalRoundTwoTests {
    // MARK: 5. counts a person can trust

    @Test func restoringASixItemEncryptedExportSaysSix() {
        let box = Sandbox()
        box.initVault()
        for i in 1...6 { box.vault(["add", "item\(i)", "--password-stdin"], passcode: pc, stdin: "pw-\(i)\n") }
        let sealed = box.vault(["export", "--encrypt", "--passphrase-fd", "4", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc,
                               fds: [4: "export passphrase\n"])
        #expect(sealed.status == 0, "\(sealed.stderr)")
        let file = box.home + "/backup.vault-export", plain = box.home + "/plain.json"
        _ = FileManager.default.createFile(atPath: file, contents: Data(sealed.stdout.utf8))
        _ = FileManager.default.createFile(atPath: plain, contents: Data(box.vault(["export"], passcode: pc).stdout.utf8))
        box.initVault("restored")
        var r = box.vault(["import", "--vault", "restored", file, "--passphrase-fd", "4"], passcode: pc, fds: [4: "export passphrase\n"])
        #expect(r.status == 0 && r.stderr.contains("imported 6 items"), "\(r.stderr)")
        r = box.vault(["import", "--vault", "restored", plain, "--dry-run"], passcode: pc)
        #expect(r.stderr.contains("would import 6 items"), "\(r.stderr)")
        r = box.vault(["import", "--vault", "restored", plain, "--force", "--json"], passcode: pc)
        #expect(r.stderr.contains("imported 6 items") && json(r.stdout)["imported"] as? Int == 6, "\(r.stdout) \(r.stderr)")
    }

    // MARK: 6. `--` ends the options of every item verb

    @Test func aNameThatStartsWithADashIsReadRenamedAndRemovedAfterDoubleDash() throws {
        let box = Sandbox()
        box.initVault()
        let file = box.home + "/lead.json"
        try #"[{"name": "-leading", "password": "dash-pw"}]"#.write(toFile: file, atomically: true, encoding: .utf8)
        #expect(box.vault(["import", file], passcode: pc).status == 0)
        var r = box.vault(["get", "-leading", "--field", "password"], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("'vault get -- -leading'"), "\(r.stderr)")
        r = box.vault(["get", "--field", "password", "--passcode-fd", "3", "--", "-leading"], fds: [3: pc + "\n"])
        #expect(r.status == 0 && r.stdout == "dash-pw\n", "\(r.stderr)")
        r = box.vault(["mv", "--passcode-fd", "3", "--", "-leading", "-renamed"], fds: [3: pc + "\n"])
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["rm", "-f", "--passcode-fd", "3", "--", "-renamed"], fds: [3: pc + "\n"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(box.vault(["ls"], passcode: pc).stdout.isEmpty)
    }

    // MARK: 7 and 13. names: did you mean, a unique substring, empty listings, otp without TOTP

    @Test func missingNamesGetASuggestionAndGetTakesAUniqueSubstring() {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "github-personal", "--password-stdin"], passcode: pc, stdin: "gh-pw\n")
        box.vault(["add", "gitlab-work", "--password-stdin"], passcode: pc, stdin: "gl-pw\n")
        var r = box.vault(["get", "github-persnal", "--field", "password"], passcode: pc)
        #expect(r.status == 3 && r.stderr.contains("did you mean 'github-personal'?"), "\(r.stderr)")
        r = box.vault(["rm", "--force", "gitlab-wrok"], passcode: pc)
        #expect(r.status == 3 && r.stderr.contains("did you mean 'gitlab-work'?"), "\(r.stderr)")
        // As `bw get`, for a person at a terminal: the one name that contains what was typed.
        let hub = TerminalRun(["get", "hub", "--field", "password", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
        #expect(hub.finish() == 0)
        #expect(hub.stdout == "gh-pw\n", "\(hub.screen)")
        #expect(hub.screen.contains("using 'github-personal'"), "\(hub.screen)")
        let two = TerminalRun(["get", "git", "--field", "password", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
        #expect(two.finish() == 3)
        #expect(two.stdout.isEmpty, "two match: none is taken: \(two.stdout)")
        // A script gets the exact name or nothing: never another item's secret.
        r = box.vault(["get", "hub", "--field", "password"], passcode: pc)
        #expect(r.status == 3 && r.stdout.isEmpty, "\(r.stdout)")
        r = box.vault(["otp", "github-personal"], passcode: pc)
        #expect(r.status == 1 && r.stderr.contains("vault: hint: add one with"), "\(r.stderr)")
        // An empty search says so on a terminal (stdout stays empty for scripts).
        let t = TerminalRun(["search", "nothing-like-this", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
        #expect(t.finish() == 0)
        #expect(t.screen.contains("no item matches 'nothing-like-this'"), "\(t.screen)")
        #expect(t.stdout.isEmpty)
    }

    @Test func generateStoresInOneStepAndRmTakesDashF() {
        let box = Sandbox()
        box.initVault()
        var r = box.vault(["generate", "wifi", "--length", "20", "--no-symbols"], passcode: pc)
        #expect(r.status == 0 && r.stdout.isEmpty, "the password was printed: \(r.stdout) \(r.stderr)")
        let first = box.vault(["get", "wifi", "--field", "password"], passcode: pc).stdout
        #expect(first.count == 21, "\(first)")
        r = box.vault(["generate", "wifi"], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("--force"), "\(r.stderr)")
        r = box.vault(["generate", "wifi", "--force"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(box.vault(["get", "wifi", "--field", "password"], passcode: pc).stdout != first)
        r = box.vault(["rm", "-f", "wifi"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        // --clip without a graphical session is refused before anything is generated.
        r = box.vault(["generate", "--clip"])
        #expect(r.status == 1 && r.stdout.isEmpty, "\(r.stdout) \(r.stderr)")
    }
}

extension TerminalRoundTwoTests {
    // MARK: 8. a passcode that can be typed again

    @Test func aPasscodeThatIsNotUTF8IsRefusedAndNFCAndNFDAreOnePasscode() {
        let box = Sandbox()
        var r: RunResult
        // Raw bytes 0xff 0xfe are not UTF-8: given through a file, as a terminal in Latin-1 sends them.
        let raw = box.home + "/latin1"
        _ = FileManager.default.createFile(atPath: raw, contents: Data([0x70, 0xe4, 0x73, 0x73, 0x77, 0xf6, 0x72, 0x74, 0x0a]))
        r = spawn("/bin/sh", ["-c", "exec \"$0\" init --vault latin --no-fingerprint --kdf-memory 8 --kdf-ops 1 --passcode-fd 3 3<\"$1\"", vaultBinary, raw], env: box.env)
        #expect(r.status == 2, "\(r.stderr)")
        #expect(r.stderr.contains("not valid UTF-8") && r.stderr.contains("UTF-8 locale"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: box.home + "/vaults/latin"))
        // Made with the decomposed é, opened with the composed one.
        r = box.vault(["init", "--vault", "n", "--no-fingerprint"] + cheapKDF, passcode: "cafe\u{301} au lait")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["ls", "--vault", "n"], passcode: "caf\u{e9} au lait")
        #expect(r.status == 0, "NFC and NFD are two passcodes: \(r.stderr)")
    }
}
