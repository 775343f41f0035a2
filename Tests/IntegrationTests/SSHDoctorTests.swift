import Foundation
import Testing

/// `vault doctor` on SSH_AUTH_SOCK: vault's agent (detached with `-s`, or in the foreground as
/// its user unit runs it), OpenSSH's own ssh-agent, a stale socket, a missing one, none set; the
/// hint names the unit and the SSH_AUTH_SOCK line whenever it is not vault's.
@Suite struct SSHDoctorTests {
    /// `vault doctor --json`'s `ssh_agent` object with `SSH_AUTH_SOCK` as given (nil: unset).
    private func report(_ box: Sandbox, socket: String?) -> [String: Any] {
        var env = box.env
        env["SSH_AUTH_SOCK"] = socket
        let r = spawn(vaultBinary, ["doctor", "--json"], env: env, timeLimit: 60)
        return json(r.stdout)["ssh_agent"] as? [String: Any] ?? ["missing": r.stdout + r.stderr]
    }

    /// The text form's ssh agent line and its hint.
    private func lines(_ box: Sandbox, socket: String?) -> [String] {
        var env = box.env
        env["SSH_AUTH_SOCK"] = socket
        let out = spawn(vaultBinary, ["doctor"], env: env, timeLimit: 60).stdout.split(separator: "\n").map(String.init)
        guard let i = out.firstIndex(where: { $0.hasPrefix("ssh agent (SSH_AUTH_SOCK") }) else { return out }
        return Array(out[i...].prefix(2))
    }

    private let switchHint = "systemctl --user enable --now vault-ssh-agent.service, then export SSH_AUTH_SOCK=\"$XDG_RUNTIME_DIR/vault/ssh-agent.sock\""

    @Test func vaultsAgentIsNamedDetachedOrInTheForegroundWithItsKeyCount() throws {
        let box = Sandbox()
        var env = box.env
        env["TMPDIR"] = box.home
        // Detached (`-s`): the process that bound the socket has exited; the agent answers as itself.
        let started = spawn(vaultBinary, ["ssh-agent", "-s"], env: env, timeLimit: 20)
        #expect(started.status == 0, "\(started.stderr)")
        let sock = try #require(started.stdout.split(separator: ";").first?.split(separator: "=").last.map(String.init))
        let pid = try #require(started.stdout.components(separatedBy: "SSH_AGENT_PID=").dropFirst().first?.split(separator: ";").first.flatMap { Int32($0) })
        defer { kill(pid, SIGTERM) }
        var r = report(box, socket: sock)
        #expect(r["state"] as? String == "vault" && r["pid"] as? Int == Int(pid), "\(r)")
        #expect((r["program"] as? String)?.hasSuffix("/vault-ssh-agent") == true && r["keys"] as? Int == 0, "\(r)")
        #expect(r["hint"] is NSNull && r["socket"] as? String == sock && r["unit_socket"] as? String == box.home + "/run/vault/ssh-agent.sock", "\(r)")
        // One key added: counted.
        env["SSH_AUTH_SOCK"] = sock
        let key = box.home + "/id"
        #expect(spawn("/usr/bin/ssh-keygen", ["-q", "-N", "", "-t", "ed25519", "-f", key], env: env).status == 0)
        #expect(spawn("/usr/bin/ssh-add", [key], env: env).status == 0)
        r = report(box, socket: sock)
        #expect(r["state"] as? String == "vault" && r["keys"] as? Int == 1, "\(r)")
        let text = lines(box, socket: sock)
        #expect(text.first == "ssh agent (SSH_AUTH_SOCK=\(sock)): vault's agent (pid \(pid), 1 key)", "\(text)")
        #expect(text.last?.hasPrefix("  hint:") == false, "no hint for vault's own agent: \(text)")

        // In the foreground (`-D`, as the unit starts it), on the unit's socket.
        try FileManager.default.createDirectory(atPath: box.home + "/run/vault", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let unitSock = box.home + "/run/vault/ssh-agent.sock"
        let foreground = start(vaultBinary, ["ssh-agent", "-D", "-a", unitSock], env: box.env, output: box.home + "/fg")
        defer { kill(foreground, SIGTERM); _ = reap(foreground) }
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: unitSock) { usleep(25_000) }
        r = report(box, socket: unitSock)
        #expect(r["state"] as? String == "vault" && r["pid"] as? Int == Int(foreground) && r["keys"] as? Int == 0, "\(r)")
        // SSH_AUTH_SOCK unset: the hint names the unit's socket, which vault serves.
        r = report(box, socket: nil)
        #expect(r["state"] as? String == "unset" && r["socket"] is NSNull, "\(r)")
        #expect(r["hint"] as? String == "vault's agent listens on \(unitSock): export SSH_AUTH_SOCK=\"$XDG_RUNTIME_DIR/vault/ssh-agent.sock\" (in ~/.profile)", "\(r)")
    }

    @Test func openSSHsAgentIsAnotherAgentAndTheHintSaysHowToSwitch() throws {
        let box = Sandbox()
        let sock = box.home + "/openssh.sock"
        // OpenSSH's agent in the foreground (-D): its pid is the one that listens.
        let agent = start("/usr/bin/ssh-agent", ["-D", "-a", sock], env: box.env, output: box.home + "/openssh")
        defer { kill(agent, SIGTERM); _ = reap(agent) }
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: sock) { usleep(25_000) }
        let r = report(box, socket: sock)
        #expect(r["state"] as? String == "other" && r["program"] as? String == "/usr/bin/ssh-agent" && r["pid"] as? Int == Int(agent), "\(r)")
        #expect(r["keys"] as? Int == 0, "\(r)")
        #expect(r["hint"] as? String == "for vault's agent: " + switchHint + " (in ~/.profile)", "\(r)")
        let text = lines(box, socket: sock)
        #expect(text.first == "ssh agent (SSH_AUTH_SOCK=\(sock)): another agent: /usr/bin/ssh-agent (pid \(agent), 0 keys)", "\(text)")
        #expect(text.last == "  hint: for vault's agent: " + switchHint + " (in ~/.profile)", "\(text)")
        // Detached (-s): the pid that bound the socket is gone; still another agent.
        var env = box.env
        env["TMPDIR"] = box.home
        let detached = spawn("/usr/bin/ssh-agent", ["-s"], env: env)
        let dsock = try #require(detached.stdout.split(separator: ";").first?.split(separator: "=").last.map(String.init))
        let dpid = try #require(detached.stdout.components(separatedBy: "SSH_AGENT_PID=").dropFirst().first?.split(separator: ";").first.flatMap { Int32($0) })
        defer { kill(dpid, SIGTERM) }
        let d = report(box, socket: dsock)
        #expect(d["state"] as? String == "other" && d["keys"] as? Int == 0, "\(d)")
    }

    @Test func unsetMissingStaleAndNonSocketsAreSaidSo() throws {
        let box = Sandbox()
        var r = report(box, socket: nil)
        #expect(r["state"] as? String == "unset" && (r["detail"] as? String) == "SSH_AUTH_SOCK is not set", "\(r)")
        #expect(r["hint"] as? String == "for vault's agent: " + switchHint + " (in ~/.profile)", "\(r)")
        #expect(lines(box, socket: nil).first == "ssh agent (SSH_AUTH_SOCK): not set: ssh uses no agent")
        r = report(box, socket: box.home + "/none.sock")
        #expect(r["state"] as? String == "dead" && r["detail"] as? String == "no such socket", "\(r)")
        // A socket file nobody listens on (its agent was killed).
        let stale = box.home + "/stale.sock"
        let agent = start("/usr/bin/ssh-agent", ["-D", "-a", stale], env: box.env, output: box.home + "/stale")
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: stale) { usleep(25_000) }
        kill(agent, SIGKILL)
        _ = reap(agent)
        #expect(FileManager.default.fileExists(atPath: stale))
        r = report(box, socket: stale)
        #expect(r["state"] as? String == "dead" && r["detail"] as? String == "nobody listens on it (a stale socket)", "\(r)")
        #expect(lines(box, socket: stale).first == "ssh agent (SSH_AUTH_SOCK=\(stale)): nothing answers: nobody listens on it (a stale socket)")
        r = report(box, socket: box.home + "/stale.out")
        #expect(r["state"] as? String == "dead" && r["detail"] as? String == "not a socket", "\(r)")
    }

    /// A server that answers with a reply of 4 GiB's length: doctor does not read it, and calls it
    /// another agent without a key count.
    @Test func aHostileServerIsBoundedAndNotMistakenForAnAgent() throws {
        let box = Sandbox()
        let sock = box.home + "/liar.sock"
        let script = """
            import socket, sys, time
            s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
            while True:
                c, _ = s.accept()
                c.recv(5)
                c.sendall(b"\\xff\\xff\\xff\\xff\\x0c")
                time.sleep(30)
            """
        let server = start("/usr/bin/python3", ["-c", script, sock], env: box.env, output: box.home + "/liar")
        defer { kill(server, SIGKILL); _ = reap(server) }
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: sock) { usleep(25_000) }
        let r = report(box, socket: sock)
        #expect(r["state"] as? String == "other" && r["keys"] is NSNull && (r["program"] as? String)?.hasPrefix("/usr/bin/python3") == true, "\(r)")
        #expect((r["detail"] as? String)?.hasSuffix("no answer to a list of keys)") == true, "\(r)")
    }

    /// A listener whose executable path holds an escape sequence and a newline (anybody can
    /// name a program so): the text line shows them as `\xNN`, never raw.
    @Test func aListenersControlCharactersAreEscaped() throws {
        let box = Sandbox()
        let exe = box.home + "/ag\u{1b}]0;owned\u{07}\nvault-ssh-agent"
        // Copied by `cp`, not in this process: a copy open for writing here would be inherited
        // by a child another test forks meanwhile, and exec fails with ETXTBSY.
        #expect(spawn("/bin/cp", ["/usr/bin/python3.11", exe], env: box.env).status == 0)
        let sock = box.home + "/odd.sock"
        let server = """
            import socket
            s = socket.socket(socket.AF_UNIX)
            s.bind(\"\(sock)\")
            s.listen(4)
            while True:
                c, _ = s.accept()
                c.recv(5)
                c.sendall(bytes([0, 0, 0, 5, 12, 0, 0, 0, 0]))
                c.close()
            """
        let agent = start(exe, ["-c", server], env: box.env, output: box.home + "/odd")
        defer { kill(agent, SIGTERM); _ = reap(agent) }
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: sock) { usleep(25_000) }
        var env = box.env
        env["SSH_AUTH_SOCK"] = sock
        let out = spawn(vaultBinary, ["doctor"], env: env, timeLimit: 60).stdout
        let line = out.split(separator: "\n").first { $0.hasPrefix("ssh agent (SSH_AUTH_SOCK") }.map(String.init) ?? out
        #expect(line == "ssh agent (SSH_AUTH_SOCK=\(sock)): another agent: \(box.home)/ag\\x1b]0;owned\\x07\\x0avault-ssh-agent (pid \(agent), 0 keys)",
                "\(line)")
        #expect(!out.contains("\u{1b}") && !out.contains("\u{07}"), "\(out)")
    }
}
