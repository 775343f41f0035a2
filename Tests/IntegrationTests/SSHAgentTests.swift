import Foundation
import Testing

/// `vault ssh-agent` as programs that start ssh-agent see it, with OpenSSH's own clients, and
/// OpenSSH's own agent regress tests (Debian's openssh-tests) run against it.
@Suite struct SSHAgentTests {
    let box = Sandbox()

    var regressInstalled: Bool { FileManager.default.fileExists(atPath: "/usr/lib/openssh/regress/test-exec.sh") }

    /// `-s` prints ssh-agent's three lines, the socket is in a private folder of its own under
    /// $TMPDIR, ssh-add and ssh-keygen use it, and `-k` ends it and removes the folder.
    @Test func startsLikeSSHAgentAndServesOpenSSHsClients() throws {
        let tmp = box.home + "/tmp"
        try FileManager.default.createDirectory(atPath: tmp, withIntermediateDirectories: true)
        var env = box.env
        env["TMPDIR"] = tmp
        let started = spawn(vaultBinary, ["ssh-agent", "-s"], env: env, timeLimit: 20)
        #expect(started.status == 0, "\(started.stderr)")
        let lines = started.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 3 && lines[2].hasPrefix("echo Agent pid "), "\(started.stdout)")
        let sock = try #require(lines.first.flatMap { $0.split(separator: ";").first?.split(separator: "=").last.map(String.init) })
        let pid = try #require(lines.dropFirst().first.flatMap { $0.split(separator: ";").first?.split(separator: "=").last.map(String.init) })
        let folder = (sock as NSString).deletingLastPathComponent
        #expect(folder.hasPrefix(tmp + "/ssh-") && sock.hasPrefix(folder + "/agent."), "\(sock)")
        let attrs = try FileManager.default.attributesOfItem(atPath: folder)
        #expect((attrs[.posixPermissions] as? Int) == 0o700)
        env["SSH_AUTH_SOCK"] = sock
        env["SSH_AGENT_PID"] = pid
        #expect(spawn("/usr/bin/ssh-add", ["-l"], env: env).status == 1, "starts empty")
        let key = box.home + "/id_ed25519"
        #expect(spawn("/usr/bin/ssh-keygen", ["-q", "-N", "", "-t", "ed25519", "-f", key, "-C", "it"], env: env).status == 0)
        #expect(spawn("/usr/bin/ssh-add", [key], env: env).status == 0)
        let listed = spawn("/usr/bin/ssh-add", ["-L"], env: env)
        #expect(listed.stdout == (try String(contentsOfFile: key + ".pub", encoding: .utf8)))
        try FileManager.default.removeItem(atPath: key)
        let message = box.home + "/msg"
        try Data("signed by the agent\n".utf8).write(to: URL(fileURLWithPath: message))
        #expect(spawn("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", key + ".pub", message], env: env).status == 0)
        let allowed = box.home + "/allowed"
        try Data(("me " + (try String(contentsOfFile: key + ".pub", encoding: .utf8))).utf8).write(to: URL(fileURLWithPath: allowed))
        let verified = spawn("/usr/bin/ssh-keygen", ["-Y", "verify", "-f", allowed, "-I", "me", "-n", "git", "-s", message + ".sig"], env: env,
                             stdin: "signed by the agent\n")
        #expect(verified.status == 0 && verified.stdout.contains("Good \"git\" signature"), "\(verified.stdout) \(verified.stderr)")
        let killed = spawn(vaultBinary, ["ssh-agent", "-k"], env: env)
        #expect(killed.status == 0 && killed.stdout.contains("unset SSH_AUTH_SOCK;"), "\(killed.stderr)")
        var gone = false
        for _ in 0..<100 where !gone {
            gone = !FileManager.default.fileExists(atPath: folder)
            if !gone { usleep(50_000) }
        }
        #expect(gone, "the agent removed its folder at SIGTERM")
    }

    /// OpenSSH's agent.sh, agent-timeout.sh, agent-subprocess.sh and agent-restrict.sh, run by
    /// Vault/ssh-regress.sh through `vault ssh-agent`: each prints its `ok` line.
    @Test func openSSHsAgentRegressTestsPass() throws {
        guard regressInstalled else {
            print("SSHAgentTests: skipped: OpenSSH's regress tests are not installed (Debian package openssh-tests)")
            return
        }
        var env = box.env
        env["TMPDIR"] = box.home
        let r = spawn("/bin/sh", [packageRoot + "/Vault/ssh-regress.sh", vaultBinary], env: env, timeLimit: 900)
        for line in ["ok simple agent test", "ok agent timeout test", "ok agent subprocess", "ok agent restrictions"] {
            #expect(r.stdout.contains(line), "\(line) missing:\n\(r.stdout.suffix(3000))\n\(r.stderr.suffix(2000))")
        }
        #expect(r.status == 0)
    }
}
