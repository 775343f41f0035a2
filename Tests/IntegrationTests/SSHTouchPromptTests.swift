import Foundation
import Testing

// The touch prompt of a vault SSH key reaching the person (the requester's terminal, the
// desktop's notifications), requests batched into one match, other connections answered while a
// finger is awaited, and a client that goes away cancelling its scan: `vault ssh-agent` with
// OpenSSH's clients, libfprint's virtual reader, python-dbusmock's notification daemon.

private let pc = Sandbox.passcode

/// A sandbox on a virtual reader whose vault enrolled `alice`, with a user-scoped unlock
/// session and the key `gh` of `policy`; the key's public line in `home/gh.pub`.
private func keyVault(_ policy: String) throws -> Sandbox {
    let box = Sandbox()
    box.useVirtualReader("virtual_device")
    let r = box.vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, reader: Array(repeating: .device("SCAN alice"), count: 5))
    #expect(r.status == 0, "init: \(r.stderr)")
    #expect(box.vault(["unlock", "--scope", "user", "--timeout", "10m"], passcode: pc).status == 0)
    let g = box.vault(["ssh-key", "generate", "gh", "--confirm", policy])
    #expect(g.status == 0, "\(g.stderr)")
    try Data(g.stdout.utf8).write(to: URL(fileURLWithPath: box.home + "/gh.pub"))
    for m in ["m1", "m2", "m3"] { try Data("a commit \(m)\n".utf8).write(to: URL(fileURLWithPath: box.home + "/" + m)) }
    return box
}

/// `vault ssh-agent -d -a SOCKET` in the foreground, its debug log in a file.
private final class TouchAgent: @unchecked Sendable {
    let socket: String
    let log: String
    let pid: pid_t
    init(_ box: Sandbox, env: [String: String]? = nil) {
        socket = box.home + "/a.sock"
        log = box.home + "/agent"
        pid = start(vaultBinary, ["ssh-agent", "-d", "-a", socket], env: env ?? box.env, output: log)
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: socket) { usleep(25_000) }
    }
    var text: String { (try? String(contentsOfFile: log + ".err", encoding: .utf8)) ?? "" }
    func count(_ s: String) -> Int { text.components(separatedBy: s).count - 1 }
    /// Waits (at most 30 s) until the log holds `s` `n` times.
    @discardableResult
    func await(_ s: String, _ n: Int = 1) -> Bool {
        let limit = Date(timeIntervalSinceNow: 30)
        while count(s) < n, Date() < limit { usleep(20_000) }
        return count(s) >= n
    }
    func stop() {
        kill(pid, SIGTERM)
        _ = reap(pid)
    }
}

/// Plays `steps` on the box's reader, each scan after the agent's log asked, until `finish`.
private func feed(_ box: Sandbox, _ agent: TouchAgent, _ steps: [ReaderStep]) -> (ReaderFeed, () -> [Int32]) {
    let feed = ReaderFeed(socket: box.readerSocket, env: box.env, steps: steps, log: box.home + "/virtual-reader.log")
    final class Flag: @unchecked Sendable { var done = false }
    let flag = Flag()
    Thread.detachNewThread {
        while !flag.done {
            feed.stderrChanged(agent.text)
            usleep(50_000)
        }
    }
    return (feed, {
        let s = feed.finish(grace: 5)
        flag.done = true
        return s
    })
}

private let touchPrompt = "touch the fingerprint reader"

/// Runs a program on a pseudo-terminal of its own (its controlling terminal), printing what
/// the terminal showed; `OWNER` (a uid) makes the terminal another user's first.
private let ptyRunner = """
    import os, pty, sys
    pid, fd = pty.fork()
    if pid == 0:
        if os.environ.get("OWNER"):
            os.fchown(0, int(os.environ["OWNER"]), -1)
        os.execv(sys.argv[1], sys.argv[1:])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    sys.stdout.buffer.write(out)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """

/// Runs a program (its output to the file `argv[1]`) whose controlling terminal is a fresh
/// pseudo-terminal nobody reads, its output buffer filled first (written to until `EAGAIN`):
/// a terminal that takes nothing, like one stopped with Ctrl-S.
private let stalledRunner = """
    import fcntl, os, sys, termios, time
    master, slave = os.openpty()
    flags = fcntl.fcntl(slave, fcntl.F_GETFL)
    fcntl.fcntl(slave, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    # The kernel moves what was written on to the master's side in the background, which makes
    # room again: fill until a round after a pause takes nothing.
    filled, still = 0, 0
    while still < 3:
        before = filled
        for size in (512, 64, 8, 1):
            try:
                while True:
                    filled += os.write(slave, b"x" * size)
            except BlockingIOError:
                pass
        still = still + 1 if filled == before else 0
        time.sleep(0.05)
    fcntl.fcntl(slave, fcntl.F_SETFL, flags)
    print("filled", filled, flush=True)
    pid = os.fork()
    if pid == 0:
        os.close(master)
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(slave, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.execv(sys.argv[2], sys.argv[2:])
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """

@Suite struct SSHTouchPromptTests {
    /// A requester whose terminal takes nothing (full, never read) still gets its signature:
    /// the prompt line is dropped, never waited for, and the match goes on.
    @Test func aStalledTerminalNeverHoldsTheMatch() throws {
        let box = try keyVault("sign")
        let agent = TouchAgent(box)
        defer { agent.stop() }
        let runner = box.home + "/stalled.py"
        try Data(stalledRunner.utf8).write(to: URL(fileURLWithPath: runner))
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        let (_, done) = feed(box, agent, [.awaitStderrCount(touchPrompt, 1), .device("SCAN alice")])
        let r = spawn("/usr/bin/python3", [runner, box.home + "/signer.out", "/usr/bin/ssh-keygen", "-Y", "sign", "-n", "git",
                                           "-f", box.home + "/gh.pub", box.home + "/m1"], env: env, timeLimit: 60)
        #expect(done() == [0], "\(agent.text)")
        #expect(r.status == 0 && r.stdout.hasPrefix("filled "), "\(r.stdout) \(r.stderr)\n\(agent.text)")
        #expect(FileManager.default.fileExists(atPath: box.home + "/m1.sig"), "\(agent.text)")
        #expect(!agent.text.contains("prompted on"), "a full terminal took no line: \(agent.text)")
    }

    /// The detached agent's listening socket (descriptor 3, placed by `dup2`) is close-on-exec:
    /// the `vault get` a release runs does not hold it.
    @Test func theReleasesChildDoesNotInheritTheListeningSocket() throws {
        let box = try keyVault("sign")
        var env = box.env
        env["TMPDIR"] = box.home
        let started = spawn(vaultBinary, ["ssh-agent", "-s"], env: env, timeLimit: 20)
        #expect(started.status == 0, "\(started.stderr)")
        let sock = try #require(started.stdout.split(separator: ";").first?.split(separator: "=").last.map(String.init))
        let agentPID = try #require(started.stdout.components(separatedBy: "SSH_AGENT_PID=").dropFirst().first?.split(separator: ";").first.flatMap { Int32($0) })
        defer { kill(agentPID, SIGTERM) }
        let listener = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(agentPID)/fd/3")
        #expect(listener.hasPrefix("socket:["), "\(listener)")
        env["SSH_AUTH_SOCK"] = sock
        let signer = start("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", box.home + "/gh.pub", box.home + "/m1"], env: env,
                           output: box.home + "/signer")
        defer { kill(signer, SIGKILL); _ = reap(signer) }
        // The agent's child running `vault get` (it waits for a finger that never comes).
        var child: Int32?
        let limit = Date(timeIntervalSinceNow: 30)
        while child == nil, Date() < limit {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(agentPID)/task")) ?? []
            let kids = tasks.flatMap { t in
                ((try? String(contentsOfFile: "/proc/\(agentPID)/task/\(t)/children", encoding: .utf8)) ?? "").split(separator: " ").compactMap { Int32($0) }
            }
            child = kids.first { k in
                ((try? String(contentsOfFile: "/proc/\(k)/cmdline", encoding: .utf8)) ?? "").split(separator: "\u{0}").dropFirst().first == "get"
            }
            if child == nil { usleep(20_000) }
        }
        let get = try #require(child, "no vault get started")
        let held = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(get)/fd")) ?? []).compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(get)/fd/\($0)")
        }
        #expect(!held.isEmpty && !held.contains(listener), "vault get holds \(held), the listener is \(listener)")
    }

    /// `ssh-keygen -Y sign` on a terminal sees the prompt there: the key, the program chain and
    /// the SSHSIG namespace; a terminal of another uid is never written to.
    @Test func thePromptReachesTheRequestersTerminal() throws {
        let box = try keyVault("sign")
        let agent = TouchAgent(box)
        defer { agent.stop() }
        let runner = box.home + "/on-terminal.py"
        try Data(ptyRunner.utf8).write(to: URL(fileURLWithPath: runner))
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        let sign = [runner, "/usr/bin/ssh-keygen", "-Y", "sign", "-n", "git", "-f", box.home + "/gh.pub", box.home + "/m1"]
        let (_, done) = feed(box, agent, [.awaitStderrCount(touchPrompt, 1), .device("SCAN alice")])
        let r = spawn("/usr/bin/python3", sign, env: env, timeLimit: 60)
        #expect(done() == [0])
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)\n\(agent.text)")
        let shown = r.stdout.split(separator: "\n").first { $0.contains("vault: sign with SSH key 'gh'") }.map(String.init) ?? ""
        #expect(shown.contains("for ssh-keygen <- python3") && shown.contains("namespace 'git'") && shown.contains(touchPrompt),
                "the terminal showed: \(r.stdout)")
        #expect(agent.text.contains("prompted on /dev/pts/"), "\(agent.text)")
        #expect(FileManager.default.fileExists(atPath: box.home + "/m1.sig"))

        // Another user's terminal (as root, the pty handed to nobody): not written to.
        guard getuid() == 0 else {
            print("SSHTouchPromptTests: skipped the other user's terminal: needs root (chown of a pty)")
            return
        }
        env["OWNER"] = "65534"
        let (_, done2) = feed(box, agent, [.awaitStderrCount(touchPrompt, 2), .device("SCAN alice")])
        let other = spawn("/usr/bin/python3", sign.dropLast() + [box.home + "/m2"], env: env, timeLimit: 60)
        #expect(done2() == [0])
        #expect(other.status == 0, "\(other.stderr)\n\(agent.text)")
        #expect(!other.stdout.contains("vault: sign with SSH key"), "written to another user's terminal: \(other.stdout)")
        #expect(agent.count("prompted on /dev/pts/") == 1, "\(agent.text)")
    }

    /// With a notification server on the session bus (python-dbusmock's), the agent's prompt
    /// is a notification naming the key, the program and the namespace.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/dbusmock"),
                   "needs python3-dbusmock (Vault/setup.sh)"))
    func thePromptIsADesktopNotification() throws {
        let box = try keyVault("sign")
        let bus = try SessionBus(in: box.home)
        defer { bus.close() }
        var env = box.env
        env["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        let notifications = start("/usr/bin/python3", ["-m", "dbusmock", "--session", "--template", "notification_daemon"],
                                  env: env, output: box.home + "/notifications")
        defer {
            kill(notifications, SIGTERM)
            _ = reap(notifications)
        }
        var listening = false
        for _ in 0..<500 where !listening {
            listening = spawn("/usr/bin/gdbus", ["call", "--session", "-d", "org.freedesktop.DBus", "-o", "/org/freedesktop/DBus", "-m",
                                                 "org.freedesktop.DBus.NameHasOwner", "org.freedesktop.Notifications"], env: env).stdout.contains("true")
            if !listening { usleep(20_000) }
        }
        #expect(listening, "the notification server did not start")
        let agent = TouchAgent(box, env: env)
        defer { agent.stop() }
        env["SSH_AUTH_SOCK"] = agent.socket
        let (_, done) = feed(box, agent, [.awaitStderrCount(touchPrompt, 1), .device("SCAN alice")])
        let r = spawn("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", box.home + "/gh.pub", box.home + "/m1"], env: env, timeLimit: 60)
        #expect(done() == [0])
        #expect(r.status == 0, "\(r.stderr)\n\(agent.text)")
        var notified = ""
        let limit = Date(timeIntervalSinceNow: 10)
        while !notified.contains("Notify \"vault\""), Date() < limit {
            notified = (try? String(contentsOfFile: box.home + "/notifications.out", encoding: .utf8)) ?? ""
            usleep(20_000)
        }
        #expect(notified.contains("Notify \"vault\"") && notified.contains("Touch the fingerprint reader")
                && notified.contains("sign with SSH key 'gh'") && notified.contains("ssh-keygen &lt;- ")
                && notified.contains("namespace 'git'"), "no notification: \(notified)")
    }

    /// Two signatures a program asks for together with a `sign` key: one touch, both signed,
    /// both verify.
    @Test func requestsArrivingTogetherShareOneTouch() throws {
        let box = try keyVault("sign")
        let agent = TouchAgent(box)
        defer { agent.stop() }
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        let sign = "/usr/bin/ssh-keygen -Y sign -n git -f \(box.home)/gh.pub"
        let (_, done) = feed(box, agent, [.awaitStderr("(2 waiting)"), .device("SCAN alice")])
        let r = spawn("/bin/sh", ["-c", "\(sign) \(box.home)/m1 & \(sign) \(box.home)/m2 & wait %1 && wait %2"], env: env, timeLimit: 60)
        #expect(done() == [0])
        #expect(r.status == 0, "\(r.stderr)\n\(agent.text)")
        #expect(agent.count(touchPrompt) == 1, "one match for both: \(agent.text)")
        let allowed = box.home + "/allowed"
        try Data(("me " + (try String(contentsOfFile: box.home + "/gh.pub", encoding: .utf8))).utf8).write(to: URL(fileURLWithPath: allowed))
        for m in ["m1", "m2"] {
            let v = spawn("/usr/bin/ssh-keygen", ["-Y", "verify", "-f", allowed, "-I", "me", "-n", "git", "-s", box.home + "/\(m).sig"],
                          env: box.env, stdin: "a commit \(m)\n")
            #expect(v.status == 0, "\(m): \(v.stdout) \(v.stderr)")
        }
        // `sign`: the key was not kept; the next signature asks again.
        let (_, again) = feed(box, agent, [.awaitStderrCount(touchPrompt, 2), .device("SCAN alice")])
        let third = spawn("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", box.home + "/gh.pub", box.home + "/m3"], env: env, timeLimit: 60)
        #expect(again() == [0])
        #expect(third.status == 0 && agent.count(touchPrompt) == 2, "\(third.stderr)\n\(agent.text)")
    }

    /// `session`: two requests of one program arriving together share the one touch, and the
    /// key is then kept for that program (its next signature asks nothing).
    @Test func sessionRequestsArrivingTogetherShareOneTouch() throws {
        let box = try keyVault("session")
        let agent = TouchAgent(box)
        defer { agent.stop() }
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        let sign = "/usr/bin/ssh-keygen -Y sign -n git -f \(box.home)/gh.pub"
        let (_, done) = feed(box, agent, [.awaitStderr("(2 waiting)"), .device("SCAN alice")])
        let r = spawn("/bin/sh", ["-c", "\(sign) \(box.home)/m1 & \(sign) \(box.home)/m2 & wait %1 && wait %2 && \(sign) \(box.home)/m3"],
                      env: env, timeLimit: 60)
        #expect(done() == [0])
        #expect(r.status == 0, "\(r.stderr)\n\(agent.text)")
        #expect(agent.count(touchPrompt) == 1, "one match for all three: \(agent.text)")
        for m in ["m1", "m2", "m3"] { #expect(FileManager.default.fileExists(atPath: box.home + "/\(m).sig"), "\(m)") }
    }

    /// While a finger is awaited, the agent answers other connections: `ssh-add -L` lists the
    /// keys, and a key added with ssh-add signs.
    @Test func waitingForAFingerBlocksNoOtherConnection() throws {
        let box = try keyVault("sign")
        let agent = TouchAgent(box)
        defer { agent.stop() }
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        let pending = start("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", box.home + "/gh.pub", box.home + "/m1"], env: env,
                            output: box.home + "/pending")
        #expect(agent.await(touchPrompt), "no scan began: \(agent.text)")
        let listed = spawn("/usr/bin/ssh-add", ["-L"], env: env, timeLimit: 20)
        let line = try String(contentsOfFile: box.home + "/gh.pub", encoding: .utf8)
        #expect(listed.status == 0 && listed.stdout == line,
                "\(listed.stdout) \(listed.stderr)")
        let own = box.home + "/own"
        #expect(spawn("/usr/bin/ssh-keygen", ["-q", "-N", "", "-t", "ed25519", "-f", own], env: box.env).status == 0)
        #expect(spawn("/usr/bin/ssh-add", [own], env: env, timeLimit: 20).status == 0)
        let other = spawn("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", own + ".pub", box.home + "/m2"], env: env, timeLimit: 20)
        #expect(other.status == 0, "a key of ssh-add signed while the scan waited: \(other.stderr)")
        #expect(agent.count(touchPrompt) == 1 && kill(pending, 0) == 0, "the vault key's request still waits")
        let (_, done) = feed(box, agent, [.device("SCAN alice")])
        #expect(reap(pending) == 0, "\(agent.text)")
        #expect(done() == [0])
    }

    /// A client that goes away while its finger is awaited cancels the scan (the release's
    /// `vault get` ends, the reader is free for the next request); while another request of the
    /// batch still waits, the scan goes on and answers it.
    @Test func aClientThatGoesAwayCancelsItsScanUnlessOthersWait() throws {
        let box = try keyVault("sign")
        let agent = TouchAgent(box)
        defer { agent.stop() }
        var env = box.env
        env["SSH_AUTH_SOCK"] = agent.socket
        func signer(_ m: String) -> pid_t {
            start("/usr/bin/ssh-keygen", ["-Y", "sign", "-n", "git", "-f", box.home + "/gh.pub", box.home + "/" + m], env: env, output: box.home + "/" + m + ".run")
        }
        // Alone: killed while waiting, its scan is cancelled.
        let lone = signer("m1")
        #expect(agent.await(touchPrompt), "no scan began: \(agent.text)")
        kill(lone, SIGKILL)
        _ = reap(lone)
        #expect(agent.await("every client waiting went away: cancelling the match"), "\(agent.text)")
        #expect(agent.await("the release of 'gh' failed"), "the release ended: \(agent.text)")

        // Two of one program: the first goes away, the second still gets its signature.
        let first = signer("m2")
        #expect(agent.await(touchPrompt, 2), "\(agent.text)")
        let second = signer("m3")
        #expect(agent.await("(2 waiting)"), "\(agent.text)")
        kill(first, SIGKILL)
        _ = reap(first)
        #expect(agent.await("a client went away while its match was under way", 2), "\(agent.text)")
        let (_, done) = feed(box, agent, [.device("SCAN alice")])
        #expect(reap(second) == 0, "\(agent.text)")
        #expect(done() == [0])
        #expect(agent.count("cancelling the match") == 1 && FileManager.default.fileExists(atPath: box.home + "/m3.sig"), "\(agent.text)")
    }
}
