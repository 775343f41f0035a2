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
