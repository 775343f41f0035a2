import Foundation
import Testing

/// A vault SSH key through the system key authority: vault-authd as vault-auth on libfprint's
/// virtual reader (SystemAuthorityTests' harness), `vault ssh-agent` and OpenSSH's ssh-keygen as
/// an ordinary user. Needs root (useradd, setpriv).
@Suite(.enabled(if: getuid() == 0, "needs root: creates the vault-auth and vault-it users and starts vault-authd as vault-auth"))
struct SSHAgentAuthdTests {
    /// `--confirm sign`: no signature with a stranger's finger, a verifiable one with the
    /// enrolled finger, both matched by the daemon.
    @Test func aSignKeySignsWithTheEnrolledFingerThroughTheDaemon() throws {
        let sys = try SystemAuthorityTests()
        let person = SystemAuthorityTests.person
        var agentPID: pid_t?
        defer {
            if let pid = agentPID {
                kill(pid, SIGTERM)
                _ = reap(pid)
            }
            sys.stop()
        }
        let pc = "ssh through the daemon"
        var r = sys.vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        #expect(sys.bindingAuthority() == "system")
        r = sys.vault(["unlock", "--scope", "user", "--timeout", "10m"], passcode: pc)
        #expect(r.status == 0, "unlock: \(r.stderr)")
        let g = sys.vault(["ssh-key", "generate", "gh", "--confirm", "sign"])
        #expect(g.status == 0, "\(g.stderr)")
        let pub = sys.home + "/gh.pub", message = sys.home + "/msg", socket = sys.runtime + "/ssh.sock", log = sys.home + "/agent.log"
        try Data(g.stdout.utf8).write(to: URL(fileURLWithPath: pub))
        try Data("a commit\n".utf8).write(to: URL(fileURLWithPath: message))
        #expect(SystemAuthorityTests.sh("chown \(person):\(person) \(pub) \(message) && touch \(log)").status == 0)

        // The agent as the user, its debug log (vault get's scan prompt) in a file.
        let agent = start("/bin/sh", ["-c", sys.commandLine(["ssh-agent", "-d", "-a", socket]) + " 2>" + log],
                          env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"])
        agentPID = agent
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: socket) { usleep(25_000) }
        @Sendable func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        func asUser(_ program: String, _ args: [String], steps: [ReaderStep]) -> RunResult {
            let quoted = ([program] + args).map { "'" + $0 + "'" }.joined(separator: " ")
            let line = "exec setpriv --reuid=\(person) --regid=\(person) --init-groups env -i HOME=\(sys.home) PATH=/usr/bin:/bin SSH_AUTH_SOCK=\(socket) \(quoted)"
            let feed = ReaderFeed(socket: sys.reader, env: ["PATH": "/usr/bin:/bin"], steps: steps, log: "/tmp/vault-it-reader.log")
            final class Flag: @unchecked Sendable { var done = false }
            let flag = Flag()
            Thread.detachNewThread {
                while !flag.done {
                    feed.stderrChanged(logText())
                    usleep(50_000)
                }
            }
            var r = spawn("/bin/sh", ["-c", line], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeLimit: 90)
            r.reader = feed.finish(grace: 5)
            flag.done = true
            return r
        }
        let listed = asUser("/usr/bin/ssh-add", ["-L"], steps: [])
        #expect(listed.stdout == g.stdout, "\(listed.stdout) \(listed.stderr)\n\(logText())")
        let sign = ["-Y", "sign", "-n", "git", "-f", pub, message]
        let stranger = asUser("/usr/bin/ssh-keygen", sign, steps: Array(repeating: .device("SCAN mallory"), count: 3))
        #expect(stranger.status != 0 && !FileManager.default.fileExists(atPath: message + ".sig"), "\(stranger.stderr)\n\(logText())")
        let asked = logText().components(separatedBy: "touch the fingerprint reader").count - 1
        #expect(asked >= 1, "the daemon's scan was asked for: \(logText())")
        let alice = asUser("/usr/bin/ssh-keygen", sign, steps: [.awaitStderrCount("touch the fingerprint reader", asked + 1), .device("SCAN alice")])
        #expect(alice.status == 0 && alice.reader == [0], "\(alice.stderr)\n\(logText())")
        let allowed = sys.home + "/allowed"
        try Data(("me " + g.stdout).utf8).write(to: URL(fileURLWithPath: allowed))
        let verified = spawn("/usr/bin/ssh-keygen", ["-Y", "verify", "-f", allowed, "-I", "me", "-n", "git", "-s", message + ".sig"],
                             env: ["PATH": "/usr/bin:/bin"], stdin: "a commit\n")
        #expect(verified.status == 0 && verified.stdout.contains("Good \"git\" signature"), "\(verified.stdout) \(verified.stderr)")
        #expect(sys.authorityFiles().isEmpty, "the embedded authority's files appeared: \(sys.authorityFiles())")
    }
}
