import Foundation
import Testing

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
        var r = box.vault(["unlock", "--timeout", "60"], passcode: pc)
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
        var r = box.vault(["unlock", "--timeout", "1s"], passcode: pc)
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
        var r = box.vault(["unlock", "--timeout", "30", "--max-lifetime", "2"], passcode: pc)
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
        #expect(box.vault(["unlock"], passcode: pc).status == 0)
        defer { stopAgent() }
        #expect(box.vault(["unlock", "--vault", "work"], passcode: pc).status == 0)
        #expect(box.vault(["get", "jira", "--vault", "work", "--field", "password", "--no-input"]).stdout == "j\n")
        #expect(box.vault(["lock", "--vault", "work"]).status == 0)
        #expect(box.vault(["get", "jira", "--vault", "work", "--field", "password", "--no-input"]).status == 19)
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
    }

    @Test func rotationInvalidatesTheSession() {
        #expect(box.vault(["unlock"], passcode: pc).status == 0)
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
        #expect(box.vault(["unlock"], passcode: pc).status == 0)
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
        #expect(box.vault(["unlock"], passcode: pc).status == 0)
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
        var r = box.vault(["unlock", "--timeout", "1e19", "--max-lifetime", "inf", "--json"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer { stopAgent() }
        #expect(json(r.stdout)["idle_timeout"] as? Int == 7 * 86400)
        let session = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        #expect(session?["open"] as? Bool == true)
        #expect((session?["idle_left"] as? Int ?? 0) <= 7 * 86400 && (session?["hard_left"] as? Int ?? 0) <= 7 * 86400)
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).stdout == "db-secret-9\n")
        for bad in ["nan", "-1e300", "-inf", "0", "soon"] {
            r = box.vault(["unlock", "--timeout", bad], passcode: pc)
            #expect(r.status == 2, "--timeout \(bad): \(r.stderr)")
        }
        // The agent is still there, with its session.
        #expect(box.vault(["get", "db", "--field", "password", "--no-input"]).status == 0)
    }

    @Test func theLeanAgentBinaryServesTheSession() throws {
        #expect(box.vault(["unlock"], passcode: pc).status == 0)
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
        #expect(box.vault(["unlock"], passcode: pc).status == 0)
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
}
