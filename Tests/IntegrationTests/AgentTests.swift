import Foundation
import Testing
import VaultSystem

/// The live agents serving `socketPath`: the processes whose command line is an agent's
/// (`vault-agent` or `vault agent`) with `--socket socketPath` (a zombie's is empty).
func agents(serving socketPath: String) -> [pid_t] {
    let pids = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { pid_t($0) }
    return pids.filter { pid in
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline")) else { return false }
        let argv = data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        guard let i = argv.firstIndex(of: "--socket"), i + 1 < argv.count, argv[i + 1] == socketPath else { return false }
        return argv.first?.hasSuffix("vault-agent") == true || argv.dropFirst().first == "agent"
    }.sorted()
}

/// Whether `pid` has ended (gone, or a zombie its new parent has not reaped yet).
func hasEnded(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return true }
    return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
}

/// Waits at most `seconds` for `condition`, checking every 5 ms; whether it held.
func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let end = Date(timeIntervalSinceNow: seconds)
    while !condition() {
        if Date() >= end { return false }
        usleep(5_000)
    }
    return true
}

/// The unlock session through the real agent process.
@Suite struct AgentTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    init() {
        box.initVault()
        box.vault(["add", "db", "--username", "admin", "--password-stdin"], passcode: pc, stdin: "db-secret-9\n")
        box.vault(["add", "web", "--password-stdin"], passcode: pc, stdin: "web-secret-3\n")
    }

    var socketPath: String { box.env["XDG_RUNTIME_DIR"]! + "/vault/agent.sock" }

    func agentPID() -> pid_t? {
        let s = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        return (s?["agent_pid"] as? Int).map { pid_t($0) }
    }

    func stopAgent() {
        if let pid = agentPID() { kill(pid, SIGTERM) }
        box.vault(["lock", "--all"])
    }

    @Test func oneUnlockServesManyFetchesUntilLock() throws {
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        defer { stopAgent() }
        for _ in 0..<40 {
            r = box.vault(["get", "db", "--field", "password", "--no-input"])
            #expect(r.status == 0 && r.stdout == "db-secret-9\n", "\(r.stderr)")
        }
        r = box.vault(["ls", "--no-input"])
        #expect(r.stdout == "db\nweb\n")
        r = box.vault(["get", "db", "--json", "--no-input"])
        #expect(json(r.stdout)["password"] == nil)
        let status = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        #expect(status?["open"] as? Bool == true)
        #expect((status?["idle_left"] as? Int ?? 0) > 50)
        // Writes go through the session too, and every release is in the audit log.
        r = box.vault(["add", "new", "--password-stdin", "--no-input"], stdin: "n\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["log", "--json", "--no-input"])
        let records = json(r.stdout)["records"] as? [[String: Any]] ?? []
        #expect(records.filter { $0["item"] as? String == "db" && $0["command"] as? String == "get" }.count == 40)
        #expect(records.allSatisfy { $0["uid"] as? Int == Int(getuid()) })
        // Beside the label the client sent, the executable the agent read from /proc/PID/exe: vault
        // itself. vault makes itself not dumpable, and the kernel shows that link to root only.
        let gets = records.filter { $0["command"] as? String == "get" }
        let real = URL(fileURLWithPath: vaultBinary).resolvingSymlinksInPath().path
        if getuid() == 0 {
            #expect(gets.allSatisfy { $0["executable"] as? String == real }, "\(gets.first ?? [:]) vs \(real)")
        } else {
            #expect(gets.allSatisfy { $0["executable"] is NSNull })
        }
        r = box.vault(["log", "--no-input", "--limit", "1"])
        #expect(r.stdout.hasSuffix("  \(getuid() == 0 ? real : "-")\n"), "\(r.stdout)")

        r = box.vault(["lock"])
        #expect(r.status == 0)
        r = box.vault(["get", "db", "--field", "password", "--no-input"])
        #expect(r.status == 19)
        #expect(r.stdout.isEmpty)
    }

    @Test func idleTimeoutEndsTheSession() {
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "1s"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer { stopAgent() }
        r = box.vault(["get", "web", "--field", "password", "--no-input"])
        #expect(r.stdout == "web-secret-3\n")
        usleep(1_700_000)
        r = box.vault(["get", "web", "--field", "password", "--no-input"])
        #expect(r.status == 19)
        #expect(r.stderr.contains("idle"))
        #expect(r.stdout.isEmpty)
    }

    @Test func hardLimitEndsTheSessionEvenWhenBusy() {
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "30", "--max-lifetime", "2"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer { stopAgent() }
        let start = Date()
        var last: Int32 = 0
        while Date().timeIntervalSince(start) < 3.2 {
            r = box.vault(["get", "web", "--field", "password", "--no-input"])
            last = r.status
            if last != 0 { break }
            usleep(300_000)
        }
        #expect(last == 19)
        #expect(Date().timeIntervalSince(start) >= 1.9)
        #expect(r.stderr.contains("limit"))
    }

    @Test func twoVaultsHaveIndependentSessions() {
        box.initVault("work")
        box.vault(["add", "jira", "--vault", "work", "--password-stdin"], passcode: pc, stdin: "j\n")
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        #expect(box.vault(["unlock", "--scope", "user", "--vault", "work"], passcode: pc).status == 0)
        #expect(box.vault(["get", "jira", "--vault", "work", "--field", "password", "--no-input"]).stdout == "j\n")
        #expect(box.vault(["lock", "--vault", "work"]).status == 0)
        #expect(box.vault(["get", "jira", "--vault", "work", "--field", "password", "--no-input"]).status == 19)
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
    }

    @Test func rotationInvalidatesTheSession() {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).status == 0)
        let r = box.vault(["rotate"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        let after = box.vault(["get", "db", "--field", "password", "--no-input"])
        #expect(after.status == 19)
        #expect(after.stderr.contains("rotation"))
    }

    /// Connects to the agent's socket from this process.
    func rawConnect() -> Int32? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(socketPath.utf8)
        withUnsafeMutableBytes(of: &addr.sun_path) { p in for (i, b) in bytes.enumerated() { p[i] = b } }
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        return rc == 0 ? fd : nil
    }

    func readAll(_ fd: Int32) -> [UInt8] {
        var out: [UInt8] = [], buf = [UInt8](repeating: 0, count: 4096)
        var tv = timeval(tv_sec: 3, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return out
    }

    /// The JSON of every version 5 frame in `bytes` (length, version 5, JSON length, JSON, tail).
    func replyJSON(_ bytes: [UInt8]) -> [String] {
        var out: [String] = [], i = 0
        func u32(_ at: Int) -> Int { Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3]) }
        while i + 9 <= bytes.count {
            let length = u32(i), jsonLength = u32(i + 5)
            guard bytes[i + 4] == 5, jsonLength <= length - 5, i + 4 + length <= bytes.count else { break }
            out.append(String(decoding: bytes[(i + 9)..<(i + 9 + jsonLength)], as: UTF8.self))
            i += 4 + length
        }
        return out
    }

    @Test func malformedAndOversizedFramesAreRefusedAndTheAgentGoesOn() throws {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        let json = Array(#"{"status":{}}"#.utf8)
        for garbage: [UInt8] in [[0xff, 0xff, 0xff, 0xff, 1, 2, 3], [0, 0, 0, 8, 0, 0, 0, 4] + Array("nope".utf8), [0, 0, 0, 1, 9],
                                 [0, 0, 0, 9, 5, 0, 0, 0, 4] + Array("nope".utf8),
                                 // The version before (4), whose releases carried a bare "freshMatch": true.
                                 [0, 0, 0, UInt8(5 + json.count), 4, 0, 0, 0, UInt8(json.count)] + json,
                                 [0, 0, 0, UInt8(5 + json.count), 5, 0, 0, 0, UInt8(json.count)] + Array(#"{"status":[]}"#.utf8)] {
            let fd = try #require(rawConnect())
            _ = garbage.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count, 0) }
            let reply = readAll(fd)   // one refusal, then the connection is closed
            close(fd)
            let frames = replyJSON(reply)
            #expect(frames.count == 1, "\(reply)")
            #expect(frames.first?.contains(#""failed""#) == true && frames.first?.contains("usage") == true, "\(frames)")
        }
        // A well-formed frame on the same kind of connection is answered.
        let ok = try #require(rawConnect())
        let frame: [UInt8] = [0, 0, 0, UInt8(5 + json.count), 5, 0, 0, 0, UInt8(json.count)] + json
        _ = frame.withUnsafeBytes { send(ok, $0.baseAddress!, $0.count, 0) }
        shutdown(ok, Int32(SHUT_WR))
        #expect(replyJSON(readAll(ok)).first?.contains(#""status""#) == true)
        close(ok)

        // A peer that announces a huge frame and keeps writing is cut off at once, not drained.
        let flood = try #require(rawConnect())
        var tv = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(flood, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let start = Date()
        var chunk = [UInt8](repeating: 0x41, count: 65536)
        chunk.replaceSubrange(0..<4, with: [0x7f, 0xff, 0xff, 0xff])
        var sent = 0
        while Date().timeIntervalSince(start) < 5 {
            let n = chunk.withUnsafeBytes { send(flood, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            sent += n
        }
        close(flood)
        #expect(Date().timeIntervalSince(start) < 1.5, "the agent kept reading \(sent) bytes")

        // A client that connects and says nothing does not block the others.
        let idle = try #require(rawConnect())
        defer { close(idle) }
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
    }

    @Test func noSecretInTheAgentsCommandLineOrEnvironment() throws {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        let pid = try #require(agentPID())
        let cmdline = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data()
        let environ = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/environ"))) ?? Data()
        #expect(String(decoding: cmdline, as: UTF8.self).contains("agent"))
        for needle in [pc, "db-secret-9", "web-secret-3"] {
            #expect(cmdline.range(of: Data(needle.utf8)) == nil)
            #expect(environ.range(of: Data(needle.utf8)) == nil)
        }
        #expect(environ.isEmpty, "the agent is started with an empty environment")
        // Not dumpable: /proc/PID/status shows it to root as well through the owner of the files.
        var st = stat()
        #expect(stat("/proc/\(pid)/environ", &st) == 0)
        #expect(st.st_uid == 0, "a non-dumpable process's /proc files belong to root")
    }

    @Test func extremeDurationsAreClampedNeverATrap() throws {
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "1e19", "--max-lifetime", "inf", "--json"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer { stopAgent() }
        #expect(json(r.stdout)["idle_timeout"] as? Int == 7 * 86400)
        let session = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        #expect(session?["open"] as? Bool == true)
        #expect((session?["idle_left"] as? Int ?? 0) <= 7 * 86400 && (session?["hard_left"] as? Int ?? 0) <= 7 * 86400)
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
        for bad in ["nan", "-1e300", "-inf", "0", "soon"] {
            r = box.vault(["unlock", "--scope", "user", "--timeout", bad], passcode: pc)
            #expect(r.status == 2, "--timeout \(bad): \(r.stderr)")
        }
        // The agent is still there, with its session.
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).status == 0)
    }

    @Test func theLeanAgentBinaryServesTheSession() throws {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        let pid = try #require(agentPID())
        let cmdline = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data()
        let argv = cmdline.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        let lean = URL(fileURLWithPath: vaultBinary).resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("vault-agent").path
        #expect(FileManager.default.isExecutableFile(atPath: lean), "vault-agent is built next to vault")
        #expect(argv.first.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath().path } == lean, "\(argv)")
        #expect(Array(argv.dropFirst()) == ["--socket", socketPath, "--exit-idle", "600"])
        // Its own process: no libfprint or GLib mapped.
        let maps = (try? String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)) ?? ""
        if !maps.isEmpty {
            #expect(!maps.contains("libfprint") && !maps.contains("libglib"))
        }
    }

    @Test func aPeerOfAnotherUidIsRefused() throws {
        guard getuid() == 0 else {
            print("aPeerOfAnotherUidIsRefused: skipped: needs root to run a client as another uid")
            return
        }
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        // Make the socket reachable for the test only: the agent must still refuse the peer.
        let folder = box.env["XDG_RUNTIME_DIR"]! + "/vault"
        for dir in [box.home, box.env["XDG_RUNTIME_DIR"]!, folder] { chmod(dir, 0o711) }
        chmod(socketPath, 0o666)
        defer { chmod(folder, 0o700); chmod(socketPath, 0o600) }
        let script = """
        import socket,struct,json,sys
        s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
        h=json.dumps({"release":{"vault":sys.argv[2],"name":"db","fields":["password"],"command":"get"}}).encode()
        data=b""
        try:
            s.sendall(struct.pack(">IBI",5+len(h),2,len(h))+h)
        except (ConnectionResetError, BrokenPipeError):
            pass
        try:
            while True:
                d=s.recv(4096)
                if not d: break
                data+=d
        except (ConnectionResetError, BrokenPipeError):
            pass
        sys.stdout.write(data[9:].decode(errors="replace"))
        """
        let db = box.home + "/vaults/default/vault.db"
        let r = spawn("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, socketPath, db],
                      env: ["PATH": "/usr/bin:/bin"])
        #expect(r.status == 0, "stderr: \(r.stderr)")
        #expect(r.stdout.contains("refused"), "stdout: \(r.stdout) stderr: \(r.stderr)")
        #expect(!r.stdout.contains("db-secret-9"))
    }

    // MARK: one agent per socket (issue 29)

    /// The agent's socket removed while it holds a session: it exits (measured: within half a
    /// second; the deadline here is 10 s for a loaded machine), and the next `vault unlock`
    /// starts exactly one new agent.
    @Test func anAgentWhoseSocketIsRemovedExitsAndUnlockStartsOneNew() throws {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        let first = try #require(agentPID())
        #expect(agents(serving: socketPath) == [first])
        let removed = Date()
        #expect(unlink(socketPath) == 0)
        #expect(waitFor(10) { hasEnded(first) }, "the agent whose socket was removed is still running")
        print("anAgentWhoseSocketIsRemovedExitsAndUnlockStartsOneNew: the agent ended \(Int(Date().timeIntervalSince(removed) * 1000)) ms after its socket was removed")
        // Its session went with it: without one, a fetch needs the passcode.
        var r = box.vault(["get", "db", "--field", "password", "--no-input"])
        #expect(r.status != 0 && r.stdout.isEmpty, "\(r.status) \(r.stdout)")
        r = box.vault(["unlock", "--scope", "user"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        let second = try #require(agentPID())
        #expect(second != first)
        #expect(agents(serving: socketPath) == [second])
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
    }

    /// The agent's socket replaced by another's: it exits, leaving the replacement where it is;
    /// once that one is closed (a stale socket file), `vault unlock` starts exactly one new agent.
    @Test func anAgentWhoseSocketIsReplacedExitsAndUnlockStartsOneNew() throws {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        let first = try #require(agentPID())
        let other = box.env["XDG_RUNTIME_DIR"]! + "/vault/other.sock"
        var replacement = try UnixSocket.listen(path: other)
        let replaced = Date()
        #expect(rename(other, socketPath) == 0)
        let inode = try FileStatus.of(socketPath).inode
        #expect(waitFor(10) { hasEnded(first) }, "the agent whose socket was replaced is still running")
        print("anAgentWhoseSocketIsReplacedExitsAndUnlockStartsOneNew: the agent ended \(Int(Date().timeIntervalSince(replaced) * 1000)) ms after its socket was replaced")
        #expect((try? FileStatus.of(socketPath).inode) == inode, "the ending agent removed another's socket")
        try replacement.close()
        let r = box.vault(["unlock", "--scope", "user"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        let second = try #require(agentPID())
        #expect(second != first)
        #expect(agents(serving: socketPath) == [second])
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
    }

    /// `vault-agent` itself: a second one on a socket the first serves exits 0 at once, leaving it;
    /// the first, its socket removed, says why on standard error and exits 1 (a service manager
    /// restarts it).
    @Test func theAgentProgramExitsWithAnErrorWhenItsSocketIsLost() throws {
        let lean = URL(fileURLWithPath: vaultBinary).resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("vault-agent").path
        let first = start(lean, ["--socket", socketPath], env: [:], output: box.home + "/first")
        var ended: Int32? = nil
        defer { if ended == nil { kill(first, SIGKILL); _ = reap(first) } }
        #expect(waitFor(10) { (try? UnixSocket.connect(path: socketPath)) != nil })
        let inode = try FileStatus.of(socketPath).inode
        let second = spawn(lean, ["--socket", socketPath], env: [:], timeLimit: 30)
        #expect(second.status == 0 && second.stderr.isEmpty, "\(second.status): \(second.stderr)")
        #expect((try? FileStatus.of(socketPath).inode) == inode)
        #expect(unlink(socketPath) == 0)
        var status: Int32 = 0
        #expect(waitFor(10) { waitpid(first, &status, WNOHANG) == first })
        ended = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        #expect(ended == 1)
        let stderr = (try? String(contentsOfFile: box.home + "/first.err", encoding: .utf8)) ?? ""
        #expect(stderr == "vault-agent: error: the socket \(socketPath) was removed or replaced: every session was ended\n"
                + "vault-agent: hint: unlock again: 'vault unlock' starts a new agent\n", "\(stderr)")
    }

    // MARK: the connection budget (issue 28)

    /// Sends a `status` frame on `fd` and reads the first reply frame's JSON ("" when none came
    /// within 10 s or the agent closed without one).
    func statusReply(_ fd: Int32) -> String {
        let json = Array(#"{"status":{}}"#.utf8)
        let frame: [UInt8] = [0, 0, 0, UInt8(5 + json.count), 5, 0, 0, 0, UInt8(json.count)] + json
        _ = frame.withUnsafeBytes { send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var bytes: [UInt8] = [], buf = [UInt8](repeating: 0, count: 4096)
        while replyJSON(bytes).isEmpty {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            bytes += buf[0..<n]
        }
        return replyJSON(bytes).first ?? ""
    }

    /// One process (this test's) holds 128 connections: 16 are served, the rest refused, and
    /// another process's `vault status` still sees the session. Then nine children of one process
    /// that forked take up to 16 each: the reserve still leaves room for `vault status`.
    @Test func aProcessHolding128AgentConnectionsDoesNotStopAnotherProcesssStatus() throws {
        #expect(box.vault(["unlock", "--scope", "user"], passcode: pc).status == 0)
        defer { stopAgent() }
        var fds: [Int32] = []
        defer { fds.forEach { close($0) } }
        var served = 0, refused = 0
        for _ in 0..<128 {
            let fd = try #require(rawConnect())
            fds.append(fd)
            let reply = statusReply(fd)
            if reply.contains(#""status""#) { served += 1 } else if reply.contains("one process holds at most 16") { refused += 1 }
        }
        #expect(served == 16 && refused == 112, "\(served) served, \(refused) refused")
        var status = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        #expect(status?["open"] as? Bool == true, "\(status ?? [:])")

        // Nine children each try 16 connections (a status request on each) and hold them until
        // the stop file appears; the parent writes what each got to the ready file.
        let script = """
        import os, socket, struct, sys, time
        path, children, per, ready, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
        h = b'{"status":{}}'
        frame = struct.pack(">IBI", 5 + len(h), 5, len(h)) + h
        def hold():
            held, served = [], 0
            for _ in range(per):
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(10)
                data = b""
                try:
                    s.connect(path)
                    s.sendall(frame)
                    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
                        d = s.recv(65536)
                        if not d: break
                        data += d
                except OSError:
                    pass
                if b'"status"' in data: served += 1
                held.append(s)
            return held, served
        r, w = os.pipe()
        for i in range(children):
            if os.fork() == 0:
                os.close(r)
                held, served = hold()
                os.write(w, b"%d\\n" % served)
                end = time.time() + 60
                while not os.path.exists(stop) and time.time() < end: time.sleep(0.02)
                os._exit(0)
        os.close(w)
        f = os.fdopen(r)
        counts = [int(f.readline()) for _ in range(children)]
        with open(ready + ".tmp", "w") as out: out.write(" ".join(map(str, counts)))
        os.rename(ready + ".tmp", ready)
        for _ in range(children): os.wait()
        """
        let ready = box.home + "/forked-ready", stop = box.home + "/forked-stop"
        let pid = start("/usr/bin/python3", ["-c", script, socketPath, "9", "16", ready, stop], env: ["PATH": "/usr/bin:/bin"],
                        output: box.home + "/forked")
        defer {
            _ = FileManager.default.createFile(atPath: stop, contents: Data())
            _ = reap(pid)
        }
        #expect(waitFor(60) { FileManager.default.fileExists(atPath: ready) },
                "the children did not report: \((try? String(contentsOfFile: box.home + "/forked.err", encoding: .utf8)) ?? "")")
        let counts = ((try? String(contentsOfFile: ready, encoding: .utf8)) ?? "").split(separator: " ").compactMap { Int($0) }
        #expect(counts.count == 9 && counts.allSatisfy { (1...16).contains($0) }, "\(counts)")
        // At most the 112 outside the reserve, and one reserved each for the children that came late.
        let taken: Int = counts.reduce(0, +) + 16
        #expect(taken <= 112 + 9, "\(counts)")
        status = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        #expect(status?["open"] as? Bool == true, "\(status ?? [:])")
        print("aProcessHolding128AgentConnectionsDoesNotStopAnotherProcesssStatus: this process 16 of 128 (\(refused) refused); nine forked children \(counts)")
    }
}
