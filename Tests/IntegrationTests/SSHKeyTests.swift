import Foundation
import Testing

// Vault-held SSH keys: `vault ssh-key` with OpenSSH's own ssh-keygen, and `vault ssh-agent`
// offering them, a finger on libfprint's virtual reader releasing them (the agent runs `vault
// get ... --field private-key --reveal` for each release; its debug log carries vault's prompt,
// which the reader feed waits for).

private let pc = Sandbox.passcode
private let cheapKDF = ["--kdf-memory", "8", "--kdf-ops", "1"]

/// A sandbox on a virtual reader whose vault enrolled `alice`, with a user-scoped unlock session.
private func fingerVault() -> Sandbox {
    let box = Sandbox()
    box.useVirtualReader("virtual_device")
    let r = box.vault(["init"] + cheapKDF, passcode: pc, reader: Array(repeating: .device("SCAN alice"), count: 5))
    #expect(r.status == 0, "init: \(r.stderr)")
    let u = box.vault(["unlock", "--scope", "user", "--timeout", "10m"], passcode: pc)
    #expect(u.status == 0, "unlock: \(u.stderr)")
    return box
}

/// `vault ssh-agent -d -a SOCKET` in the foreground, its debug log in a file.
private final class RunningAgent: Sendable {
    let socket: String
    let log: String
    let pid: pid_t
    init(_ box: Sandbox, extra: [String] = []) {
        socket = box.home + "/a.sock"
        log = box.home + "/agent"
        pid = start(vaultBinary, ["ssh-agent", "-d", "-a", socket] + extra, env: box.env, output: log)
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: socket) { usleep(25_000) }
    }
    var text: String { (try? String(contentsOfFile: log + ".err", encoding: .utf8)) ?? "" }
    func stop() {
        kill(pid, SIGTERM)
        _ = reap(pid)
    }
}

/// Runs `path args` with the agent's socket while `steps` play on the reader, each scan sent
/// after the agent's log shows the prompt.
private func withReader(_ box: Sandbox, _ agent: RunningAgent, _ steps: [ReaderStep], _ path: String, _ args: [String],
                        stdin: String = "") -> (RunResult, [Int32]) {
    let feed = ReaderFeed(socket: box.readerSocket, env: box.env, steps: steps, log: box.home + "/virtual-reader.log")
    final class Flag: @unchecked Sendable { var done = false }
    let flag = Flag()
    let watcher = Thread {
        while !flag.done {
            feed.stderrChanged(agent.text)
            usleep(50_000)
        }
    }
    watcher.start()
    var env = box.env
    env["SSH_AUTH_SOCK"] = agent.socket
    let r = spawn(path, args, env: env, stdin: stdin, timeLimit: 60)
    let statuses = feed.finish(grace: 3)
    flag.done = true
    return (r, statuses)
}

private func prompts(_ agent: RunningAgent) -> Int {
    agent.text.components(separatedBy: "touch the fingerprint reader").count - 1
}

@Suite struct SSHKeyTests {
    /// Keys of every type ssh-keygen makes, with and without a passphrase, in OpenSSH's format
    /// and PEM / PKCS#8, import as the public key ssh-keygen wrote; a wrong passphrase is refused.
    @Test func keysOfSSHKeygenImport() throws {
        let box = Sandbox()
        box.initVault()
        let passFile = box.home + "/pass"
        try Data("long-pass-1\n".utf8).write(to: URL(fileURLWithPath: passFile))
        var n = 0
        for (type, bits) in [("ed25519", [String]()), ("ecdsa", ["-b", "256"]), ("ecdsa", ["-b", "384"]), ("ecdsa", ["-b", "521"]),
                             ("rsa", ["-b", "2048"]), ("dsa", [])] {
            for format in ["RFC4716", "PEM", "PKCS8"] where !(type == "ed25519" && format == "PEM") {
                for passphrase in ["", "long-pass-1"] {
                    n += 1
                    let file = box.home + "/key\(n)"
                    let g = spawn("/usr/bin/ssh-keygen", ["-q", "-t", type] + bits + ["-N", passphrase, "-C", "c\(n)", "-m", format, "-f", file], env: box.env)
                    #expect(g.status == 0, "\(type) \(format): \(g.stderr)")
                    let r = box.vault(["ssh-key", "import", "k\(n)", file, "--passphrase-fd", "4"], passcode: pc, fds: [4: "long-pass-1\n"])
                    #expect(r.status == 0, "\(type) \(format) \(passphrase): \(r.stderr)")
                    func key(_ line: String) -> String { line.split(whereSeparator: { $0 == " " || $0 == "\n" }).prefix(2).joined(separator: " ") }
                    let pub = key(try String(contentsOfFile: file + ".pub", encoding: .utf8))
                    #expect(key(r.stdout) == pub, "\(type) \(format) \(passphrase)")
                    if !passphrase.isEmpty {
                        let wrong = box.vault(["ssh-key", "import", "w\(n)", file, "--passphrase-fd", "4"], passcode: pc, fds: [4: "wrong-pass\n"])
                        #expect(wrong.status == 1 && wrong.stderr.contains("passphrase does not open"), "\(type) \(format): \(wrong.stderr)")
                    }
                }
            }
        }
        let gcm = box.home + "/gcm"
        #expect(spawn("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "long-pass-1", "-Z", "aes256-gcm@openssh.com", "-f", gcm], env: box.env).status == 0)
        let r = box.vault(["ssh-key", "import", "gcm", gcm, "--passphrase-fd", "4"], passcode: pc, fds: [4: "long-pass-1\n"])
        #expect(r.status == 0, "\(r.stderr)")
        let ls = box.vault(["ssh-key", "ls", "--json"], passcode: pc)
        #expect((json(ls.stdout)["keys"] as? [[String: Any]])?.count == n + 1, "\(ls.stdout)")
    }

    /// generate, pub, ls, get's rules for the private key, rm and mv.
    @Test func generatedKeysListPrintAndMove() throws {
        let box = Sandbox()
        box.initVault()
        for (name, type) in [("a", "ed25519"), ("b", "ecdsa"), ("c", "rsa")] {
            let g = box.vault(["ssh-key", "generate", name, "--type", type, "--comment", "me@\(name)", "--confirm", "sign"], passcode: pc)
            #expect(g.status == 0, "\(g.stderr)")
            let pub = box.vault(["ssh-key", "pub", name], passcode: pc)
            #expect(pub.stdout == g.stdout && pub.stdout.hasSuffix(" me@\(name)\n"), "\(pub.stdout)")
            // OpenSSH reads the line as a public key.
            let file = box.home + "/\(name).pub"
            try Data(pub.stdout.utf8).write(to: URL(fileURLWithPath: file))
            #expect(spawn("/usr/bin/ssh-keygen", ["-l", "-f", file], env: box.env).status == 0)
            #expect(box.vault(["get", name, "--field", "public-key"], passcode: pc).stdout == pub.stdout)
        }
        #expect(box.vault(["ssh-key", "generate", "d", "--type", "dsa"], passcode: pc).status == 2)
        #expect(box.vault(["ssh-key", "generate", "d", "--type", "rsa", "--bits", "1024"], passcode: pc).status == 2)
        #expect(box.vault(["ssh-key", "generate", "a"], passcode: pc).status == 4)
        let plain = box.vault(["get", "a", "--field", "private-key"], passcode: pc)
        #expect(plain.status == 2 && plain.stdout.isEmpty, "\(plain.stderr)")
        // Fingerprint login is on: no finger enrolled, no release.
        let revealed = box.vault(["get", "a", "--field", "private-key", "--reveal", "--no-input"], passcode: pc)
        #expect(revealed.status != 0 && !revealed.stdout.contains("PRIVATE KEY"), "\(revealed.stdout)")
        let ls = json(box.vault(["ssh-key", "ls", "--json"], passcode: pc).stdout)["keys"] as? [[String: Any]] ?? []
        #expect(ls.map { $0["name"] as? String } == ["a", "b", "c"])
        #expect(ls.map { $0["confirm"] as? String } == ["sign", "sign", "sign"])
        #expect(box.vault(["mv", "a", "z"], passcode: pc).status == 0)
        #expect(box.vault(["rm", "b", "--force"], passcode: pc).status == 0)
        let after = json(box.vault(["ssh-key", "ls", "--json"], passcode: pc).stdout)["keys"] as? [[String: Any]] ?? []
        #expect(after.map { $0["name"] as? String } == ["c", "z"])
        #expect(box.vault(["ssh-key", "pub", "z"], passcode: pc).stdout.hasSuffix(" me@a\n"))
    }

    /// A `--confirm sign` key through `vault ssh-agent`: ssh-add -L lists `ssh-key pub`'s line;
    /// `ssh-keygen -Y sign -n git` gets no signature with a stranger's finger, a verifiable one
    /// with the enrolled finger, and is asked again for the next signature.
    @Test func signPolicyAsksAFingerForEverySignature() throws {
        let box = fingerVault()
        let g = box.vault(["ssh-key", "generate", "gh", "--confirm", "sign"])
        #expect(g.status == 0, "\(g.stderr)")
        let agent = RunningAgent(box)
        defer { agent.stop() }
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        let listed = spawn("/usr/bin/ssh-add", ["-L"], env: env)
        #expect(listed.stdout == box.vault(["ssh-key", "pub", "gh"]).stdout, "\(listed.stdout) \(agent.text)")
        let pub = box.home + "/gh.pub", message = box.home + "/msg"
        try Data(g.stdout.utf8).write(to: URL(fileURLWithPath: pub))
        try Data("a commit\n".utf8).write(to: URL(fileURLWithPath: message))
        let sign = ["-Y", "sign", "-n", "git", "-f", pub, message]

        let (stranger, _) = withReader(box, agent, Array(repeating: .device("SCAN mallory"), count: 3), "/usr/bin/ssh-keygen", sign)
        #expect(stranger.status != 0 && !FileManager.default.fileExists(atPath: message + ".sig"), "\(stranger.stderr)")
        #expect(agent.text.contains("sign with SSH key 'gh'") && agent.text.contains("ssh-keygen"), "\(agent.text)")
        #expect(agent.text.contains("namespace 'git'"))

        let asked = prompts(agent)
        let (alice, took) = withReader(box, agent, [.awaitStderrCount("touch the fingerprint reader", asked + 1), .device("SCAN alice")],
                                       "/usr/bin/ssh-keygen", sign)
        #expect(alice.status == 0, "\(alice.stderr)\n\(agent.text)")
        #expect(took == [0])
        let allowed = box.home + "/allowed"
        try Data(("me " + g.stdout).utf8).write(to: URL(fileURLWithPath: allowed))
        let verified = spawn("/usr/bin/ssh-keygen", ["-Y", "verify", "-f", allowed, "-I", "me", "-n", "git", "-s", message + ".sig"],
                             env: box.env, stdin: "a commit\n")
        #expect(verified.status == 0 && verified.stdout.contains("Good \"git\" signature"), "\(verified.stdout) \(verified.stderr)")
        // `sign`: the next signature asks again.
        try? FileManager.default.removeItem(atPath: message + ".sig")
        let before = prompts(agent)
        let (again, _) = withReader(box, agent, [.awaitStderrCount("touch the fingerprint reader", before + 1), .device("SCAN alice")],
                                    "/usr/bin/ssh-keygen", sign)
        #expect(again.status == 0 && prompts(agent) == before + 1, "\(again.stderr)")
    }

    /// `--confirm session`: one finger for two signatures of one program; `vault lock` ends it.
    @Test func sessionPolicyAsksOncePerProgramUntilLock() throws {
        let box = fingerVault()
        let g = box.vault(["ssh-key", "generate", "work"])
        #expect(g.status == 0, "\(g.stderr)")
        let agent = RunningAgent(box)
        defer { agent.stop() }
        let pub = box.home + "/w.pub", message = box.home + "/msg"
        try Data(g.stdout.utf8).write(to: URL(fileURLWithPath: pub))
        try Data("x\n".utf8).write(to: URL(fileURLWithPath: message))
        let sign = ["-Y", "sign", "-n", "git", "-f", pub, message]
        // Two signatures of ssh-keygen in one shell's session: one finger.
        let twice = "/usr/bin/ssh-keygen \(sign.joined(separator: " ")) && rm \(message).sig && /usr/bin/ssh-keygen \(sign.joined(separator: " "))"
        let (first, took) = withReader(box, agent, [.awaitStderrCount("touch the fingerprint reader", 1), .device("SCAN alice")],
                                       "/bin/sh", ["-c", twice])
        #expect(first.status == 0 && took == [0], "\(first.stderr)\n\(agent.text)")
        #expect(prompts(agent) == 1, "the same program in the same session is asked once: \(agent.text)")
        // Another program (ssh-add -T signs with the key): asked again.
        let (other, _) = withReader(box, agent, [.awaitStderrCount("touch the fingerprint reader", 2), .device("SCAN alice")],
                                    "/usr/bin/ssh-add", ["-T", pub])
        #expect(other.status == 0 && prompts(agent) == 2, "another program is asked: \(other.stderr)\n\(agent.text)")
        try? FileManager.default.removeItem(atPath: message + ".sig")
        #expect(box.vault(["lock"]).status == 0)
        #expect(box.vault(["unlock", "--scope", "user", "--timeout", "10m"], passcode: pc).status == 0)
        let (third, _) = withReader(box, agent, [.awaitStderrCount("touch the fingerprint reader", 3), .device("SCAN alice")],
                                    "/bin/sh", ["-c", twice])
        #expect(third.status == 0 && prompts(agent) == 3, "after vault lock it asks again: \(third.stderr)\n\(agent.text)")
    }
}
