import Foundation
import Testing

/// `vault run` and `vault login` through the built binary.
@Suite struct RunLoginTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    /// A fresh vault with `db` (username, URL, a password with a quote and a space) and `plain`.
    func vaultWithLogins() {
        box.initVault()
        var r = box.vault(["add", "db", "--username", "o'admin", "--url", "https://db.example.com:5432/prod", "--password-stdin"],
                          passcode: pc, stdin: "s3cr'et pw$(x)\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "plain", "--username", "alice", "--password-stdin"], passcode: pc, stdin: "plain-pw-9\n")
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// `vault args` with the passcode on fd 3; `--passcode-fd 3` goes before `--`, so the
    /// command after it stays as written.
    @discardableResult
    func vault(_ args: [String], passcode: String? = nil, stdin: String = "") -> RunResult {
        guard let passcode else { return box.vault(args, stdin: stdin) }
        var all = args
        all.insert(contentsOf: ["--passcode-fd", "3"], at: args.firstIndex(of: "--") ?? args.count)
        return box.vault(all, stdin: stdin, fds: [3: passcode + "\n"])
    }

    /// Writes an executable script into the sandbox and returns its path.
    func script(_ name: String, _ text: String) -> String {
        let path = box.home + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o700])
        return path
    }

    /// The audit records of the vault, as (command, item, field).
    func audit() -> [(String, String, String)] {
        let r = box.vault(["log", "--json"], passcode: pc)
        return (json(r.stdout)["records"] as? [[String: Any]] ?? []).map {
            ($0["command"] as? String ?? "", $0["item"] as? String ?? "", $0["field"] as? String ?? "")
        }
    }

    /// A vault run that a test talks to while it goes on: its output is collected on a thread.
    final class LiveRun: @unchecked Sendable {
        let pid: pid_t
        private let lock = NSCondition()
        private var collected: [UInt8] = []
        private var ended = false

        init(_ path: String, _ args: [String], env: [String: String], fds: [Int32: String]) throws {
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            var out: [Int32] = [0, 0]
            precondition(pipe(&out) == 0)
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_adddup2(&actions, out[1], 1)
            posix_spawn_file_actions_adddup2(&actions, out[1], 2)
            var feeds: [(Int32, String)] = [], closeAfter = [out[1]]
            for (fd, content) in fds {
                var p: [Int32] = [0, 0]
                precondition(pipe(&p) == 0)
                posix_spawn_file_actions_adddup2(&actions, p[0], fd)
                feeds.append((p[1], content)); closeAfter.append(p[0])
            }
            var attr = posix_spawnattr_t()
            posix_spawnattr_init(&attr)
            defer { posix_spawnattr_destroy(&attr) }
            posix_spawnattr_setflags(&attr, Int16(0x80)) // POSIX_SPAWN_SETSID: no terminal
            let argv = ([path] + args).map { strdup($0) } + [nil]
            let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
            var child: pid_t = 0
            let rc = posix_spawn(&child, path, &actions, &attr, argv, envp)
            argv.forEach { free($0) }
            envp.forEach { free($0) }
            closeAfter.forEach { close($0) }
            guard rc == 0 else { throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO) }
            pid = child
            for (fd, content) in feeds {
                _ = content.withCString { write(fd, $0, strlen($0)) }
                close(fd)
            }
            let reader = out[0]
            Thread.detachNewThread { [self] in
                var buf = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = read(reader, &buf, buf.count)
                    if n < 0 && errno == EINTR { continue }
                    lock.lock()
                    if n > 0 { collected += buf[0..<n] } else { ended = true }
                    lock.broadcast()
                    lock.unlock()
                    if n <= 0 { break }
                }
                close(reader)
            }
        }

        /// Stdout and stderr so far.
        var output: String {
            lock.lock()
            defer { lock.unlock() }
            return String(decoding: collected, as: UTF8.self)
        }

        /// Waits (at most 30 s) for `text` in the output.
        func waitForOutput(_ text: String) -> Bool {
            lock.lock()
            defer { lock.unlock() }
            let limit = Date(timeIntervalSinceNow: 30)
            while !String(decoding: collected, as: UTF8.self).contains(text) {
                if ended || !lock.wait(until: limit) { return false }
            }
            return true
        }

        /// Waits for the output to end and the process to exit; its status.
        func finish() -> Int32 {
            lock.lock()
            let limit = Date(timeIntervalSinceNow: 30)
            while !ended && lock.wait(until: limit) {}
            lock.unlock()
            return reap(pid)
        }
    }

    @Test func runSetsVariablesInTheChildOnly() {
        vaultWithLogins()
        vault(["add", "api.example.com", "--username", "svc", "--password-stdin"], passcode: pc, stdin: "tok-1\n")
        // --no-masking: the child's output shows the values it got (masking has tests of its own).
        var r = vault(["run", "--no-masking", "--env", "PW=db", "--env", "U=db.username", "--env", "H=db.url", "--env", "T=api.example.com",
                           "--env", "TU=api.example.com.user", "--", "sh", "-c", #"printf '%s|%s|%s|%s|%s' "$PW" "$U" "$H" "$T" "$TU""#],
                      passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "s3cr'et pw$(x)|o'admin|https://db.example.com:5432/prod|tok-1|svc")
        #expect(!r.stderr.contains("s3cr'et"))

        // The child's argv never holds the secret; the passcode descriptor is closed in the child;
        // the rest of the environment passes through.
        r = vault(["run", "--env", "PW=db", "--", "sh", "-c",
                       #"cat /proc/$$/cmdline; echo; [ -e /proc/$$/fd/3 ] && echo fd3-open || echo fd3-closed; echo "$VAULT_HOME""#],
                      passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("sh\0-c\0") == true)
        #expect(!r.stdout.contains("s3cr'et"))
        #expect(lines.dropFirst().first == "fd3-closed")
        #expect(lines.last == box.env["VAULT_HOME"])

        let records = audit().filter { $0.0 == "run" }
        #expect(records.contains { $0 == ("run", "db", "password") })
        #expect(records.contains { $0 == ("run", "db", "username") })
        #expect(records.contains { $0 == ("run", "api.example.com", "username") })
    }

    @Test func runPassesOnTheExitCodeAndSignals() throws {
        vaultWithLogins()
        var r = vault(["run", "--env", "X=plain", "--", "sh", "-c", "exit 42"], passcode: pc)
        #expect(r.status == 42)
        #expect(r.stdout.isEmpty && r.stderr.isEmpty)
        r = vault(["run", "--env", "X=plain", "--", "sh", "-c", "kill -KILL $$"], passcode: pc)
        #expect(r.status == 137)

        // SIGTERM to vault reaches the child, whose own status then ends vault.
        let run = try LiveRun(vaultBinary, ["run", "--env", "X=plain", "--passcode-fd", "3", "--", "sh", "-c",
                                            #"trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done"#],
                              env: box.env, fds: [3: pc + "\n"])
        #expect(run.waitForOutput("ready\n"))
        kill(run.pid, SIGTERM)
        let status = run.finish()
        #expect(status == 5)
        #expect(run.output.contains("got-term"))
    }

    @Test func runRefusesBadArgumentsMissingItemsAndUnknownCommands() {
        vaultWithLogins()
        for bad in ["X", "1X=db", "X=", "X-Y=db", "=db"] {
            let r = vault(["run", "--env", bad, "--", "true"], passcode: pc)
            #expect(r.status == 2, "--env \(bad): \(r.stderr)")
            #expect(r.stdout.isEmpty)
        }
        var r = vault(["run", "--env", "X=db", "--env", "X=plain", "--", "true"], passcode: pc)
        #expect(r.status == 2)
        r = vault(["run", "--env", "X=db", "true"], passcode: pc)
        #expect(r.status == 2)
        r = vault(["run", "--env", "X=db"], passcode: pc)
        #expect(r.status == 2)
        r = vault(["run", "--env", "X=db.pasword", "--", "true"], passcode: pc)
        #expect(r.status == 2)
        #expect(r.stderr.contains("no field 'pasword'"))

        r = vault(["run", "--env", "X=nope", "--", "sh", "-c", "echo ran"], passcode: pc)
        #expect(r.status == 3)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("vault: error: no item named 'nope'"))
        r = vault(["run", "--env", "X=plain.notes", "--", "sh", "-c", "echo ran"], passcode: pc)
        #expect(r.status == 1)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("has no notes"))

        // The command is looked up before anything is unlocked: no passcode needed to learn it is missing.
        r = vault(["run", "--env", "X=db", "--no-input", "--", "no-such-command-here"])
        #expect(r.status == 127)
        #expect(r.stderr.contains("vault: error: command not found: no-such-command-here"))
        #expect(r.stdout.isEmpty)
        r = vault(["run", "--env", "X=db", "--", "/etc/passwd"], passcode: pc)
        #expect(r.status == 126)
        #expect(audit().allSatisfy { $0.0 != "run" }, "nothing was released")
    }

    @Test func loginPrintsEnvJsonAndNetrc() {
        vaultWithLogins()
        var r = vault(["login", "db"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "export VAULT_USERNAME='o'\\''admin'\nexport VAULT_PASSWORD='s3cr'\\''et pw$(x)'\n")
        let shell = spawn("/bin/sh", ["-c", #"eval "$(cat)"; printf '%s\n%s' "$VAULT_USERNAME" "$VAULT_PASSWORD""#],
                          env: box.env, stdin: r.stdout)
        #expect(shell.stdout == "o'admin\ns3cr'et pw$(x)")

        r = vault(["login", "db", "--format", "json"], passcode: pc)
        let o = json(r.stdout)
        #expect(o["username"] as? String == "o'admin")
        #expect(o["password"] as? String == "s3cr'et pw$(x)")
        #expect(o["url"] as? String == "https://db.example.com:5432/prod")
        r = vault(["login", "plain", "--format", "json"], passcode: pc)
        #expect(json(r.stdout)["url"] is NSNull)

        vault(["add", "web", "--username", "me", "--url", "https://git.example.org/x", "--password-stdin"], passcode: pc, stdin: "w3b\n")
        r = vault(["login", "web", "--format", "netrc"], passcode: pc)
        #expect(r.stdout == "machine git.example.org login me password w3b\n")
        r = vault(["login", "db", "--format", "netrc"], passcode: pc)
        #expect(r.stdout == "machine db.example.com login o'admin password \"s3cr'et pw$(x)\"\n")
        r = vault(["login", "plain", "--format", "netrc"], passcode: pc)
        #expect(r.status == 1)
        #expect(r.stdout.isEmpty)

        #expect(vault(["login", "db", "--format", "yaml"], passcode: pc).status == 2)
        #expect(vault(["login", "db", "--format", "env", "--", "true"], passcode: pc).status == 2)
        #expect(vault(["login", "db", "--reuse", "301"], passcode: pc).status == 2)
        #expect(vault(["login", "nope"], passcode: pc).status == 3)
        #expect(audit().filter { $0 == ("login", "db", "password") }.count == 3)
    }

    /// A program that asks like `login(1)`: "login: ", then "Password: " with echo turned off
    /// after the prompt (so vault must wait for it), and exits 7 for the right password.
    func promptingProgram(password: String) -> String {
        script("prompting.sh", """
        #!/bin/sh
        printf 'login: '
        read -r user
        printf 'Password: '
        stty -echo
        read -r pass
        stty echo
        printf '\\n'
        if [ "$pass" = '\(password)' ]; then printf 'welcome %s\\n' "$user"; exit 7; fi
        printf 'denied\\n'
        exit 1
        """)
    }

    @Test func loginTypesTheLoginAtTheProgramsPrompts() {
        vaultWithLogins()
        let program = promptingProgram(password: "plain-pw-9")
        var r = vault(["login", "plain", "--", program], passcode: pc)
        #expect(r.status == 7, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("welcome alice"))
        #expect(r.stdout.contains("login: alice"))
        #expect(!r.stdout.contains("plain-pw-9"), "the password was echoed")
        #expect(!r.stderr.contains("plain-pw-9"))
        #expect(audit().contains { $0 == ("login", "plain", "password") })

        // The wrong login for that program: its own status comes back.
        r = vault(["login", "db", "--", program], passcode: pc)
        #expect(r.status == 1)
        #expect(r.stdout.contains("denied"))

        // Prompts of other wording, by flag.
        let german = script("german.sh", """
        #!/bin/sh
        printf 'Benutzer> '
        read -r user
        stty -echo
        printf 'Kennwort> '
        read -r pass
        stty echo
        [ "$user:$pass" = 'alice:plain-pw-9' ] && { echo willkommen; exit 0; }
        exit 9
        """)
        r = vault(["login", "plain", "--user-prompt", "benutzer> $", "--password-prompt", "kennwort> $", "--", german],
                      passcode: pc)
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("willkommen"))
        #expect(vault(["login", "plain", "--password-prompt", "(", "--", german], passcode: pc).status == 2)
        // The same patterns kept in the item: no flags needed at login.
        r = vault(["edit", "plain", "--user-prompt", "benutzer> $", "--password-prompt", "kennwort> $"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        r = vault(["login", "plain", "--", german], passcode: pc)
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("willkommen"))
        #expect(vault(["edit", "plain", "--password-prompt", "("], passcode: pc).status == 2)
        #expect(vault(["edit", "plain", "--clear", "user-prompt", "--clear", "password-prompt"], passcode: pc).status == 0)

        // The child runs on a terminal of its own (its controlling terminal) in its own session.
        r = vault(["login", "plain", "--", "sh", "-c", "exec 4</dev/tty && echo has-tty; [ -t 0 ] && echo stdin-tty; exit 3"],
                      passcode: pc)
        #expect(r.status == 3)
        #expect(r.stdout.contains("has-tty") && r.stdout.contains("stdin-tty"))

        // A program that leaves echo on at its password prompt does not get the password.
        r = vault(["login", "plain", "--", "sh", "-c", "printf 'Password: '; read -r p; echo \"got [$p]\""], passcode: pc)
        #expect(r.status == 0)
        #expect(r.stdout.contains("got []"))
        #expect(!r.stdout.contains("plain-pw-9"))
        #expect(r.stderr.contains("echo on"))

        // The command is looked up first.
        r = vault(["login", "plain", "--no-input", "--", "no-such-command-here"])
        #expect(r.status == 127)
    }

    @Test func loginWithoutFingerprintLoginDemandsThePasscodeEvenInASession() {
        vaultWithLogins()
        var r = vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer {
            if let pid = (json(vault(["status", "--json"]).stdout)["session"] as? [String: Any])?["agent_pid"] as? Int {
                kill(pid_t(pid), SIGTERM)
            }
        }
        // The session serves run without a passcode...
        r = vault(["run", "--no-masking", "--env", "X=plain", "--no-input", "--", "sh", "-c", #"printf %s "$X""#])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "plain-pw-9")
        // ...but login of an item with fingerprint login off asks for the passcode, and cannot here.
        r = vault(["login", "plain", "--no-input"])
        #expect(r.status == 12)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("fingerprint login off"))
        r = vault(["login", "plain", "--no-input"], passcode: "wrong passcode")
        #expect(r.status == 10)
        #expect(r.stdout.isEmpty)
        r = vault(["login", "plain", "--no-input"], passcode: pc)
        #expect(r.status == 0)
        #expect(r.stdout == "export VAULT_USERNAME='alice'\nexport VAULT_PASSWORD='plain-pw-9'\n")
    }
}

/// The built `virtual-reader` tool, next to `vault`.
let runLoginReaderTool = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent()
    .appendingPathComponent("virtual-reader").path

/// Fingerprint login on libfprint's virtual_device reader (Vault/demo.sh drives it the same way).
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: runLoginReaderTool), "virtual-reader is built"))
struct RunLoginFingerprintTests {
    let box = Sandbox()
    let pc = Sandbox.passcode
    let socket: String

    init() {
        socket = box.home + "/reader.sock"
        box.env["FP_VIRTUAL_DEVICE"] = socket
        box.env["FP_DRIVERS_WHITELIST"] = "virtual_device"
    }

    /// Runs vault while `scans` fingers touch the reader, one after the other.
    func vault(_ args: [String], passcode: String? = nil, scans: [String] = []) -> RunResult {
        let feed = Touches(tool: runLoginReaderTool, socket: socket, env: box.env, fingers: scans)
        let r = box.vault(args, passcode: passcode)
        let taken = feed.finish()
        #expect(taken == scans.count, "the reader took \(taken) of \(scans.count) touches for \(args)")
        return r
    }

    @Test func fingerprintLoginNeedsAFreshScan() {
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--finger", "right-index"], passcode: pc,
                      scans: Array(repeating: "alice", count: 5))
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "fp", "--username", "bob", "--url", "https://h.example", "--password-stdin"], passcode: pc, stdin: "fp-pw\n")
        #expect(r.status == 0)

        // Turning the switch on needs a scan, even with the passcode given.
        r = vault(["edit", "fp", "--fingerprint-login", "on", "--scan-timeout", "1"], passcode: pc)
        #expect(r.status == 18)
        #expect(box.vault(["get", "fp"], passcode: pc).stdout.contains("fingerprint login: off"))
        #expect(box.vault(["edit", "fp", "--fingerprint-login", "yes"], passcode: pc).status == 2)
        r = vault(["edit", "fp", "--fingerprint-login", "on"], passcode: pc, scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(box.vault(["get", "fp"], passcode: pc).stdout.contains("fingerprint login: on"))

        // Login: the passcode opened the vault, but only a fresh scan releases the login.
        r = vault(["login", "fp", "--scan-timeout", "1"], passcode: pc)
        #expect(r.status == 18)
        #expect(r.stdout.isEmpty)
        r = vault(["login", "fp", "--format", "json"], passcode: pc, scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(json(r.stdout)["password"] as? String == "fp-pw")
        // Another finger does not do.
        r = vault(["login", "fp"], passcode: pc, scans: ["mallory", "mallory", "mallory"])
        #expect(r.status == 10)
        #expect(r.stdout.isEmpty)
        // The last match may be reused only when asked for, within the window.
        r = vault(["login", "fp", "--format", "json", "--scan-timeout", "1", "--reuse", "120"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("--reuse 120"))
        r = vault(["login", "fp", "--scan-timeout", "1"], passcode: pc)
        #expect(r.status == 18)
        // The match the window counts is the authority's own record, not a file a script could write.
        let record = try? FileManager.default.contentsOfDirectory(atPath: box.env["XDG_RUNTIME_DIR"]! + "/vault")
            .first { $0.hasPrefix("fingerprint-login-") }
        #expect(record == nil)

        // Inside an unlock session the scan is still demanded.
        r = box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer {
            if let pid = (json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any])?["agent_pid"] as? Int {
                kill(pid_t(pid), SIGTERM)
            }
        }
        r = vault(["login", "fp", "--no-input", "--scan-timeout", "1"])
        #expect(r.status == 18)
        r = vault(["login", "fp", "--no-input"], scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("VAULT_PASSWORD='fp-pw'"))

        // Turning it off needs a scan too.
        r = vault(["edit", "fp", "--fingerprint-login", "off", "--no-input"], scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        r = vault(["login", "fp", "--no-input"])
        #expect(r.status == 12)
    }

    @Test func fingerprintLoginIsEnforcedOnEveryPathThatReleasesTheSecret() {
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--finger", "right-index"], passcode: pc,
                      scans: Array(repeating: "alice", count: 5))
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "fp", "--username", "bob", "--url", "https://h.example", "--password-stdin"], passcode: pc, stdin: "fp-pw\n")
        #expect(r.status == 0)
        r = vault(["edit", "fp", "--fingerprint-login", "on"], passcode: pc, scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer {
            if let pid = (json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any])?["agent_pid"] as? Int {
                kill(pid_t(pid), SIGTERM)
            }
        }
        let noFinger = ["--no-input", "--scan-timeout", "1"]
        // In the session, without a touch, nothing releases the password.
        for args in [["get", "fp", "--field", "password"], ["get", "fp", "--reveal"], ["export"],
                     ["run", "--env", "X=fp", "--", "sh", "-c", "printf %s \"$X\""]] {
            r = vault(args + noFinger)
            #expect(r.status == 18, "\(args): \(r.stderr)")
            #expect(!r.stdout.contains("fp-pw"), "\(args)")
        }
        r = vault(["git-credential", "get"] + noFinger)
        #expect(!r.stdout.contains("fp-pw"))
        // Replacing it (which clears the switch) needs a touch too.
        r = box.vault(["add", "fp", "--force", "--password-stdin"] + noFinger, stdin: "other\n")
        #expect(r.status == 18, "\(r.stderr)")
        // With the finger, each of them works.
        r = vault(["get", "fp", "--field", "password", "--no-input"], scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "fp-pw\n")
        r = vault(["run", "--no-masking", "--env", "X=fp", "--no-input", "--", "sh", "-c", "printf %s \"$X\""], scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "fp-pw")
        r = vault(["export", "--no-input"], scans: ["alice"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("fp-pw") && r.stdout.contains("\"fingerprint_login\":true"))
        // Outside the session too: the passcode opens the vault, the touch releases the item.
        r = vault(["get", "fp", "--field", "password", "--passcode-fd", "3", "--scan-timeout", "1"], passcode: pc)
        #expect(r.status == 18, "\(r.stderr)")
    }

    /// Fingers touching the virtual reader from a background thread (`virtual-reader device --wait
    /// 30 SOCKET SCAN id`, each waiting until the driver took it).
    final class Touches: @unchecked Sendable {
        private let lock = NSCondition()
        private var current: pid_t = 0
        private var taken = 0
        private var done = false
        private var stop = false

        init(tool: String, socket: String, env: [String: String], fingers: [String]) {
            if fingers.isEmpty { done = true; return }
            Thread.detachNewThread { [self] in
                for finger in fingers {
                    lock.lock()
                    if stop { lock.unlock(); break }
                    current = start(tool, ["device", "--wait", "30", socket, "SCAN", finger], env: env)
                    let pid = current
                    lock.unlock()
                    let status = reap(pid)
                    lock.lock()
                    current = 0
                    if status == 0 { taken += 1 }
                    lock.unlock()
                    if status != 0 { break }
                }
                lock.lock()
                done = true
                lock.broadcast()
                lock.unlock()
            }
        }

        /// Gives the touches 5 more seconds, then stops them; returns how many the reader took.
        func finish() -> Int {
            lock.lock()
            defer { lock.unlock() }
            let limit = Date(timeIntervalSinceNow: 5)
            while !done && lock.wait(until: limit) {}
            if !done {
                stop = true
                if current > 0 { kill(current, SIGKILL) }
                while !done { lock.wait() }
            }
            return taken
        }
    }
}
