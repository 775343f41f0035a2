import Foundation
import Testing

// Real OpenSSH logins and git signatures with vault keys through `vault ssh-agent`: `ssh` to a
// local `sshd -i` run as its ProxyCommand (as OpenSSH's regress tests do it: no port is opened),
// whose authorized_keys holds only `vault ssh-key pub`'s line; `git commit -S` with
// gpg.format=ssh and a `key::` signing key, checked by `git verify-commit`.

private let pc = Sandbox.passcode

/// A sandbox on a virtual reader whose vault enrolled `alice`, with a user-scoped unlock session.
private func loginVault() -> Sandbox {
    let box = Sandbox()
    box.useVirtualReader("virtual_device")
    let r = box.vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, reader: Array(repeating: .device("SCAN alice"), count: 5))
    #expect(r.status == 0, "init: \(r.stderr)")
    let u = box.vault(["unlock", "--scope", "user", "--timeout", "10m"], passcode: pc)
    #expect(u.status == 0, "unlock: \(u.stderr)")
    return box
}

/// `vault ssh-agent -d -a SOCKET` in the foreground, its debug log in a file.
private final class LoginAgent: Sendable {
    let socket: String
    let log: String
    let pid: pid_t
    init(_ box: Sandbox) {
        socket = box.home + "/login-agent.sock"
        log = box.home + "/login-agent"
        pid = start(vaultBinary, ["ssh-agent", "-d", "-a", socket], env: box.env, output: log)
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: socket) { usleep(25_000) }
    }
    var text: String { (try? String(contentsOfFile: log + ".err", encoding: .utf8)) ?? "" }
    /// How many times it asked for a finger.
    var prompts: Int { text.components(separatedBy: "touch the fingerprint reader").count - 1 }
    func stop() {
        kill(pid, SIGTERM)
        _ = reap(pid)
    }
    /// Waits (at most 30 s) until the log holds `text` `count` times.
    func await(_ text: String, count: Int = 1) -> Bool {
        for _ in 0..<600 {
            if self.text.components(separatedBy: text).count - 1 >= count { return true }
            usleep(50_000)
        }
        return false
    }
}

/// An sshd of its own, for the user this test runs as: a fresh ed25519 host key, authorized_keys
/// with one line, and the client's config whose ProxyCommand runs `sshd -i -e` (its log on ssh's
/// standard error). StrictModes is off (the folders are the test's), the host key is known under
/// an alias, and the client offers only the identity it is given, from the agent.
private struct LocalSSHD {
    let folder: String
    var clientConfig: String { folder + "/ssh_config" }

    init(_ box: Sandbox, authorizing line: String) throws {
        folder = box.home + "/sshd-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        if getuid() == 0 && !FileManager.default.fileExists(atPath: "/run/sshd") {
            // sshd's privilege-separation folder, as root needs it (Vault/ssh-regress.sh makes it too).
            try? FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        }
        let g = spawn("/usr/bin/ssh-keygen", ["-q", "-N", "", "-t", "ed25519", "-f", folder + "/host_ed25519"], env: box.env)
        guard g.status == 0 else { throw PackagingError("host key: \(g.stderr)") }
        try Data(line.utf8).write(to: URL(fileURLWithPath: folder + "/authorized_keys"))
        let hostKey = try String(contentsOfFile: folder + "/host_ed25519.pub", encoding: .utf8)
        try Data(("localhost-with-alias " + hostKey).utf8).write(to: URL(fileURLWithPath: folder + "/known_hosts"))
        let server = """
            StrictModes no
            AuthorizedKeysFile \(folder)/authorized_keys
            HostKey \(folder)/host_ed25519
            PidFile none
            UsePAM no
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PermitRootLogin prohibit-password
            LoginGraceTime 6
            LogLevel VERBOSE

            """
        try Data(server.utf8).write(to: URL(fileURLWithPath: folder + "/sshd_config"))
        let user = getpwuid(getuid()).map { String(cString: $0.pointee.pw_name) } ?? "root"
        let client = """
            Host *
                Hostname 127.0.0.1
                HostKeyAlias localhost-with-alias
                User \(user)
                UserKnownHostsFile \(folder)/known_hosts
                GlobalKnownHostsFile \(folder)/known_hosts
                StrictHostKeyChecking yes
                BatchMode yes
                PubkeyAuthentication yes
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                IdentitiesOnly yes
                ProxyCommand /usr/sbin/sshd -i -e -f \(folder)/sshd_config

            """
        try Data(client.utf8).write(to: URL(fileURLWithPath: clientConfig))
    }

    /// `ssh -F config -i PUB host COMMAND` through the agent at `agent`.
    func ssh(_ box: Sandbox, agent: String, identity: String, _ command: String) -> RunResult {
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent
        return spawn("/usr/bin/ssh", ["-F", clientConfig, "-i", identity, "host", command], env: env, timeLimit: 60)
    }
}

/// Set once the watched run ended.
private final class LoginFlag: @unchecked Sendable { var done = false }

/// Runs `body` while alice's finger answers the agent's next prompt (the n+1-th "touch the
/// fingerprint reader" in its log); returns what `body` returned and the scans' statuses.
private func withFinger<T>(_ box: Sandbox, _ agent: LoginAgent, _ body: () -> T) -> (T, [Int32]) {
    let asked = agent.prompts
    let feed = ReaderFeed(socket: box.readerSocket, env: box.env,
                          steps: [.awaitStderrCount("touch the fingerprint reader", asked + 1), .device("SCAN alice")],
                          log: box.home + "/virtual-reader.log")
    let flag = LoginFlag()
    let watcher = Thread {
        while !flag.done {
            feed.stderrChanged(agent.text)
            usleep(50_000)
        }
    }
    watcher.start()
    let result = body()
    let took = feed.finish(grace: 3)
    flag.done = true
    return (result, took)
}

/// The SHA256 fingerprint of a public key line, as ssh-keygen -l prints it.
private func fingerprint(_ box: Sandbox, _ pubFile: String) -> String {
    spawn("/usr/bin/ssh-keygen", ["-l", "-f", pubFile], env: box.env).stdout.split(separator: " ").dropFirst().first.map(String.init) ?? "?"
}

@Suite struct SSHLoginTests {
    static let unavailable: String? = {
        for tool in ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"] where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is missing (Debian: openssh-server, openssh-client)"
        }
        return nil
    }()

    /// A `none` key logs in after one finger, then with none while the vault has its unlock
    /// session; a `--confirm sign` key gets no
    /// signature without a finger (sshd ends the login at its grace time, the agent cancels the
    /// match) and logs in with the enrolled finger. sshd accepted exactly the vault key.
    @Test(.enabled(if: SSHLoginTests.unavailable == nil, "\(SSHLoginTests.unavailable ?? "")"))
    func sshLogsInToSSHDWithAVaultKeyAndASignKeyOnlyWithTheFinger() throws {
        let box = loginVault()
        let ci = box.vault(["ssh-key", "generate", "ci", "--confirm", "none", "--comment", "ci@vault"])
        #expect(ci.status == 0, "\(ci.stderr)")
        let gh = box.vault(["ssh-key", "generate", "gh", "--confirm", "sign"])
        #expect(gh.status == 0, "\(gh.stderr)")
        let ciPub = box.home + "/ci.pub", ghPub = box.home + "/gh.pub"
        try Data(box.vault(["ssh-key", "pub", "ci"]).stdout.utf8).write(to: URL(fileURLWithPath: ciPub))
        try Data(box.vault(["ssh-key", "pub", "gh"]).stdout.utf8).write(to: URL(fileURLWithPath: ghPub))
        let agent = LoginAgent(box)
        defer { agent.stop() }

        // 1. The `none` key: its first release takes a finger, later logins none.
        var sshd = try LocalSSHD(box, authorizing: box.vault(["ssh-key", "pub", "ci"]).stdout)
        #expect(try String(contentsOfFile: sshd.folder + "/authorized_keys", encoding: .utf8) == ci.stdout)
        var (r, took) = withFinger(box, agent) { sshd.ssh(box, agent: agent.socket, identity: ciPub, "echo logged in as $(id -un)") }
        #expect(r.status == 0 && r.stdout.hasPrefix("logged in as "), "\(r.status) \(r.stdout)\n\(r.stderr.suffix(3000))\n\(agent.text)")
        #expect(took == [0], "\(took)")
        #expect(r.stderr.contains("Accepted publickey for ") && r.stderr.contains("ED25519 " + fingerprint(box, ciPub)), "\(r.stderr.suffix(3000))")
        let asked = agent.prompts
        r = sshd.ssh(box, agent: agent.socket, identity: ciPub, "echo again")
        #expect(r.status == 0 && r.stdout == "again\n" && agent.prompts == asked, "a released none key asks no finger: \(r.stderr.suffix(2000))\n\(agent.text)")

        // 2. The `sign` key, no finger: no signature, so no login.
        sshd = try LocalSSHD(box, authorizing: box.vault(["ssh-key", "pub", "gh"]).stdout)
        r = sshd.ssh(box, agent: agent.socket, identity: ghPub, "echo logged in")
        #expect(r.status == 255 && !r.stdout.contains("logged in"), "\(r.status) \(r.stdout)\n\(r.stderr.suffix(3000))")
        #expect(!r.stderr.contains("Accepted publickey"), "\(r.stderr.suffix(3000))")
        #expect(agent.text.contains("sign with SSH key 'gh'"), "the agent asked for the finger: \(agent.text)")
        #expect(agent.await("the release of 'gh' failed"), "the match ends with the client: \(agent.text)")

        // 3. The `sign` key with the enrolled finger: logged in.
        (r, took) = withFinger(box, agent) { sshd.ssh(box, agent: agent.socket, identity: ghPub, "echo logged in") }
        #expect(r.status == 0 && r.stdout == "logged in\n", "\(r.status) \(r.stdout)\n\(r.stderr.suffix(3000))\n\(agent.text)")
        #expect(took == [0], "\(took)")
        #expect(r.stderr.contains("Accepted publickey for ") && r.stderr.contains("ED25519 " + fingerprint(box, ghPub)), "\(r.stderr.suffix(3000))")
    }

    /// `git commit -S` with gpg.format=ssh and user.signingkey `key::LINE` signs through the agent
    /// with a vault key (a `none` key: one finger for its first release); `git verify-commit` with an allowed-signers file accepts it, and refuses it
    /// when the file names another key.
    @Test func gitSignsACommitWithAVaultKeyThroughTheAgent() throws {
        let box = loginVault()
        let g = box.vault(["ssh-key", "generate", "git", "--confirm", "none", "--comment", "me@example.com"])
        #expect(g.status == 0, "\(g.stderr)")
        let line = g.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let agent = LoginAgent(box)
        defer { agent.stop() }
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        let repo = box.home + "/repo"
        func git(_ args: [String]) -> RunResult {
            spawn("/usr/bin/git", ["-C", repo, "-c", "user.name=Me", "-c", "user.email=me@example.com", "-c", "gpg.format=ssh",
                                   "-c", "user.signingkey=key::" + line] + args, env: env, timeLimit: 60)
        }
        #expect(spawn("/usr/bin/git", ["init", "-q", repo], env: env).status == 0)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: repo + "/a"))
        #expect(git(["add", "a"]).status == 0)
        let (c, took) = withFinger(box, agent) { git(["commit", "-q", "-S", "-m", "signed by vault"]) }
        #expect(c.status == 0 && took == [0], "\(c.stderr)\n\(agent.text)")
        #expect(agent.text.contains("namespace 'git'"), "the prompt names git's namespace: \(agent.text)")
        #expect(git(["cat-file", "commit", "HEAD"]).stdout.contains("-----BEGIN SSH SIGNATURE-----"))
        let allowed = box.home + "/allowed_signers"
        try Data("me@example.com \(line)\n".utf8).write(to: URL(fileURLWithPath: allowed))
        let v = git(["-c", "gpg.ssh.allowedSignersFile=" + allowed, "verify-commit", "HEAD"])
        #expect(v.status == 0 && v.stderr.contains("Good \"git\" signature for me@example.com with ED25519 key"), "\(v.status) \(v.stderr)")
        // Another key in the file: not accepted.
        let other = box.home + "/other"
        #expect(spawn("/usr/bin/ssh-keygen", ["-q", "-N", "", "-t", "ed25519", "-f", other], env: env).status == 0)
        try Data(("me@example.com " + (try String(contentsOfFile: other + ".pub", encoding: .utf8))).utf8).write(to: URL(fileURLWithPath: allowed))
        let refused = git(["-c", "gpg.ssh.allowedSignersFile=" + allowed, "verify-commit", "HEAD"])
        #expect(refused.status != 0, "\(refused.stderr)")
    }
}
