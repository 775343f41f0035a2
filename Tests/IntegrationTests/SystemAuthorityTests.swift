import Foundation
import Testing

/// `vault` itself through the system key authority: vault-authd runs as its own system user on
/// libfprint's virtual reader (test mode, the only mode that honours the virtual readers), and
/// every vault command runs as an ordinary user. Needs root (useradd, setpriv).
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates the vault-auth and vault-it users and starts vault-authd as vault-auth"))
struct SystemAuthorityTests {
    static let daemonUser = "vault-auth", person = "vault-it"
    let run: String
    let state: String
    let socket: String
    let reader: String
    let daemon: pid_t
    /// The person's home and runtime folder, this test's own (not /home/vault-it): two runs of
    /// the suite, or of two checkouts, never share a vault, an agent or a state folder.
    let home: String
    let runtime: String

    static func sh(_ command: String) -> RunResult { spawn("/bin/sh", ["-c", command], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]) }

    init() throws {
        // As the package declares it (the Debian package test expects its comment).
        _ = try? ensureDaemonUser()
        _ = Self.sh("id -u \(Self.person) >/dev/null 2>&1 || useradd -m -s /bin/sh \(Self.person)")
        let base = "/tmp/vault-authd-it-" + UUID().uuidString.prefix(8)
        run = base + "/run"
        state = base + "/state"
        socket = run + "/socket"
        reader = run + "/reader.sock"
        home = base + "/home"
        runtime = base + "/xdg"
        let prep = Self.sh("""
            install -d -m 0755 \(base) && install -d -o \(Self.daemonUser) -g \(Self.daemonUser) -m 0755 \(run) && \
            install -d -o \(Self.daemonUser) -g \(Self.daemonUser) -m 0700 \(state) && \
            install -d -o \(Self.person) -g \(Self.person) -m 0700 \(home) \(runtime)
            """)
        #expect(prep.status == 0, "\(prep.stderr)")
        let authd = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("vault-authd").path
        daemon = start("/usr/bin/setpriv", ["--reuid=\(Self.daemonUser)", "--regid=\(Self.daemonUser)", "--init-groups", "--inh-caps=-all",
                                            "env", "-i", "PATH=/usr/bin:/bin", "FP_VIRTUAL_DEVICE=\(reader)", "FP_DRIVERS_WHITELIST=virtual_device",
                                            authd, "--socket", socket, "--state", state, "--test-mode"], env: [:])
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: socket) { usleep(20_000) }
    }

    func stop() {
        // This test's agent (and the note a 'vault lock' leaves in it) ends with the test.
        _ = Self.sh("pkill -KILL -f -- '--socket \(runtime)/' || true")
        kill(daemon, SIGTERM)
        _ = reap(daemon)
        _ = Self.sh("rm -rf \(URL(fileURLWithPath: run).deletingLastPathComponent().path)")
    }

    /// `vault ARGS` as the ordinary user, with no VAULT_AUTHORITY (the daemon answering is the
    /// default), while the reader at `readerSocket` (the daemon's by default) plays `steps`.
    /// `env`: more of the user's environment.
    func vault(_ args: [String], passcode: String? = nil, steps: [ReaderStep] = [], env extra: [String] = [],
               readerSocket: String? = nil) -> RunResult {
        var all = args
        var shellFD = ""
        if let passcode {
            let file = "/tmp/vault-it-pc-" + UUID().uuidString.prefix(8)
            _ = FileManager.default.createFile(atPath: file, contents: Data((passcode + "\n").utf8), attributes: [.posixPermissions: 0o644])
            all += ["--passcode-fd", "3"]
            shellFD = " 3<" + file
        }
        let line = commandLine(all, env: extra) + shellFD
        let feed = ReaderFeed(socket: readerSocket ?? reader, env: ["PATH": "/usr/bin:/bin"], steps: steps, log: "/tmp/vault-it-reader.log")
        var r = spawn("/bin/sh", ["-c", line], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeLimit: 60, onStderr: { feed.stderrChanged($0) })
        r.reader = feed.finish(grace: steps.isEmpty ? 0 : 5)
        return r
    }

    /// The shell line that runs `vault args` as the ordinary user, the daemon at `socket` (no
    /// VAULT_AUTHORITY: the default path).
    func commandLine(_ args: [String], env extra: [String] = []) -> String {
        let quoted = ([vaultBinary] + args).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let env = "env -i HOME=\(home) XDG_RUNTIME_DIR=\(runtime) PATH=/usr/bin:/bin VAULT_AUTHD_SOCKET=\(socket) LANG=C.UTF-8 NO_COLOR=1" + extra.map { " " + $0 }.joined()
        return "exec setpriv --reuid=\(Self.person) --regid=\(Self.person) --init-groups \(env) \(quoted)"
    }

    /// The files of the embedded authority in the user's state folder (none may appear on the default path).
    func authorityFiles() -> [String] {
        let folder = home + "/.local/state/vault"
        return ["device-secret", "auth.sealed", "prints.sealed", "lock"].filter { FileManager.default.fileExists(atPath: folder + "/" + $0) }
    }

    func bindingAuthority() -> String? {
        ((json(vault(["status", "--json"]).stdout)["fingerprint_slot"]) as? [String: Any])?["authority"] as? String
    }

    /// The README's path: vault-authd runs, no VAULT_AUTHORITY anywhere. Every command goes to
    /// the daemon, the binding says so, and nothing of an authority lands in the user's files.
    @Test func withTheDaemonRunningAndNoVaultAuthorityEveryCommandGoesThroughIt() throws {
        defer { stop() }
        let pc = "default path pass"
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        #expect(!r.stderr.contains("no vault of yours signed"), "init reported the finger it just enrolled: \(r.stderr)")
        #expect(bindingAuthority() == "system")
        r = vault(["add", "gh", "--username", "me"], passcode: pc)
        #expect(r.status == 0, "add: \(r.stderr)")
        r = vault(["get", "gh", "--field", "username", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && r.stdout == "me\n", "a finger get: \(r.status) \(r.stderr)")
        r = vault(["get", "gh", "--field", "username", "--passcode"], passcode: pc)
        #expect(r.status == 0 && !r.stderr.contains("did not record"), "a passcode get: \(r.stderr)")
        r = vault(["enroll", "--bind"], passcode: pc)
        #expect(r.status == 0, "enroll --bind: \(r.stderr)")
        r = vault(["rotate"], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("fingerprint slot bound"), "rotate: \(r.stderr)")
        #expect(bindingAuthority() == "system")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && r.stdout == "gh\n", "a finger after the rotation: \(r.stderr)")
        r = vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "unlock: \(r.stderr)")
        let status = json(vault(["status", "--json"]).stdout)
        #expect((status["session"] as? [String: Any])?["open"] as? Bool == true, "\(status)")
        #expect((status["authority"] as? [String: Any])?["kind"] as? String == "system", "\(status)")
        _ = vault(["lock", "--all"])
        r = vault(["doctor"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("vault-authd (\(socket)): answers as \(Self.daemonUser) (uid "), "\(r.stdout)")
        #expect(r.stdout.contains("key authority: system (only a live match"), "\(r.stdout)")
        #expect(r.stdout.contains("vault 'default': bound through the system authority (vault-authd)\n"), "\(r.stdout)")
        #expect(authorityFiles().isEmpty, "the embedded authority's files appeared: \(authorityFiles())")
    }

    /// A vault bound under the embedded authority before vault-authd was installed: it keeps
    /// opening with its finger (its binding says embedded), status names the one command that
    /// moves it, and that command moves it.
    @Test func aVaultBoundBeforeTheDaemonKeepsWorkingAndStatusNamesTheCommandThatMovesIt() throws {
        defer { stop() }
        let pc = "embedded first pass"
        // The user's own virtual reader, for the embedded authority in the user's processes.
        let own = "/tmp/vault-it-own-" + UUID().uuidString.prefix(8)
        defer { _ = Self.sh("rm -rf \(own)") }
        #expect(Self.sh("install -d -o \(Self.person) -g \(Self.person) -m 0700 \(own)").status == 0)
        let embedded = ["VAULT_AUTHORITY=embedded", "FP_VIRTUAL_DEVICE=\(own)/reader.sock", "FP_DRIVERS_WHITELIST=virtual_device"]
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, steps: Array(repeating: .device("SCAN alice"), count: 5),
                      env: embedded, readerSocket: own + "/reader.sock")
        #expect(r.status == 0, "init: \(r.stderr)")
        #expect(bindingAuthority() == "embedded")
        // Without VAULT_AUTHORITY, the binding decides: its finger on its reader still opens it.
        let ownReader = Array(embedded.dropFirst())
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")], env: ownReader, readerSocket: own + "/reader.sock")
        #expect(r.status == 0, "the embedded binding stopped working: \(r.stderr)")
        r = vault(["ls", "--passcode"], passcode: pc)
        #expect(r.status == 0 && !r.stderr.contains("did not record"), "\(r.stderr)")
        r = vault(["status"])
        #expect(r.stdout.contains("note: this vault is bound to the embedded authority while vault-authd runs: 'vault enroll' enrols a finger there and moves it"),
                "\(r.stdout)")
        r = vault(["doctor"])
        #expect(r.stdout.contains("vault 'default': bound through the embedded authority (your own files); 'vault enroll' enrols a finger there and moves it to vault-authd"), "\(r.stdout)")
        // The command it names, on the daemon's reader.
        r = vault(["enroll"], passcode: pc, steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "enroll: \(r.stderr)")
        #expect(bindingAuthority() == "system")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0, "a finger through the daemon after the move: \(r.stderr)")
        #expect(!vault(["status"]).stdout.contains("note: this vault is bound to the embedded authority"))
    }

    /// `vault doctor` with no socket, with a socket that is not the daemon's user, and with the
    /// daemon: three different, truthful answers.
    @Test func doctorSaysWhetherTheDaemonAnswersAndAsWhom() throws {
        defer { stop() }
        let missing = "/tmp/vault-it-none-" + UUID().uuidString.prefix(8) + "/socket"
        var r = vault(["doctor"], env: ["VAULT_AUTHD_SOCKET=\(missing)"])
        #expect(r.stdout.contains("vault-authd (\(missing)): not answering: the system key authority (vault-authd) does not answer on \(missing)\n"), "\(r.stdout)")
        #expect(r.stdout.contains("key authority: embedded"), "\(r.stdout)")
        r = vault(["doctor"], env: ["VAULT_AUTHD_SOCKET=\(missing)", "VAULT_AUTHORITY=system"])
        #expect(r.stdout.contains("key authority: system, as VAULT_AUTHORITY or --authority asks, NOT answering"), "\(r.stdout)")
        // A socket anyone can connect to, owned by root: not the daemon's user.
        let impostor = "/tmp/vault-it-imp-" + UUID().uuidString.prefix(8)
        defer { _ = Self.sh("rm -rf \(impostor)") }
        #expect(Self.sh("install -d -m 0755 \(impostor)").status == 0)
        let listener = start("/usr/bin/python3", ["-c", """
            import os, socket, sys, time
            s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(8)
            time.sleep(60)
            """, impostor + "/socket"], env: ["PATH": "/usr/bin:/bin"])
        defer { kill(listener, SIGKILL); _ = reap(listener) }
        for _ in 0..<250 where !FileManager.default.fileExists(atPath: impostor + "/socket") { usleep(20_000) }
        r = vault(["doctor", "--json"], env: ["VAULT_AUTHD_SOCKET=\(impostor)/socket"])
        let daemon = json(r.stdout)["daemon"] as? [String: Any] ?? [:]
        #expect(daemon["answers"] as? Bool == false, "\(r.stdout)")
        #expect((daemon["error"] as? String)?.contains("belongs to uid 0, not to \(Self.daemonUser)") == true, "\(r.stdout)")
        r = vault(["doctor", "--json"])
        let real = json(r.stdout)["daemon"] as? [String: Any] ?? [:]
        #expect(real["answers"] as? Bool == true && real["user"] as? String == Self.daemonUser && real["test_mode"] as? Bool == true, "\(r.stdout)")
        #expect((json(r.stdout)["authority"] as? [String: Any])?["kind"] as? String == "system", "\(r.stdout)")
    }

    @Test func aPasscodeTypedAtTheDaemonsFingerprintPromptIsNotShownAndUnlocks() throws {
        defer { stop() }
        let pc = "system authority pass"
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc,
                      steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        r = vault(["add", "gh", "--username", "me"], passcode: pc)
        #expect(r.status == 0, "add: \(r.stderr)")
        let t = TerminalRun(["-c", commandLine(["ls"])], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], program: "/bin/sh")
        t.waitFor("touch the fingerprint reader")
        #expect(t.waitForEcho(false), "echo is on while the daemon waits for a finger")
        t.type(pc + "\n")
        #expect(t.finish() == 0, "\(t.screen)")
        #expect(t.stdout == "gh\n")
        #expect(!t.screen.contains(pc), "the passcode was on the screen: \(t.screen)")
    }

    @Test func aSecondVaultWaitsForTheReaderAnotherHoldsAndSaysSo() throws {
        defer { stop() }
        let pc = "system authority pass"
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc,
                      steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        // One vault waits for a finger that does not come; another, meanwhile, waits its turn.
        let output = "/tmp/vault-it-first-" + UUID().uuidString.prefix(8)
        defer { _ = Self.sh("rm -f \(output).out \(output).err") }
        let first = start("/bin/sh", ["-c", commandLine(["ls", "--no-input", "--policy", "biometrics", "--scan-timeout", "20"])],
                          env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], output: output)
        let end = Date(timeIntervalSinceNow: 20)
        while Date() < end, !((try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "").contains("touch the fingerprint reader") {
            usleep(20_000)
        }
        r = vault(["ls", "--no-input", "--policy", "biometrics", "--scan-timeout", "2"])
        #expect(r.stderr.contains("vault: waiting for the fingerprint reader (in use by another request)\n"), "\(r.stderr)")
        #expect(r.status == 13, "\(r.stderr)")
        kill(first, SIGTERM)
        _ = reap(first)
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && !r.stderr.contains("waiting for the fingerprint reader"), "\(r.stderr)")
    }

    @Test func anOrdinaryUsersFingerUnlocksThroughTheDaemon() throws {
        defer { stop() }
        let pc = "system authority pass"
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc,
                      steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        #expect(r.stderr.contains("enrolled right-index"), "\(r.stderr)")
        r = vault(["add", "gh", "--username", "me"], passcode: pc)
        #expect(r.status == 0, "add: \(r.stderr)")
        r = vault(["status", "--json"])
        #expect(r.stdout.contains("\"kind\":\"system\""), "\(r.stdout)")
        // The person's finger opens it; nothing of the daemon's state is in the user's files.
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("gh"))
        let leaked = Self.sh("grep -rl . \(home)/.local/state/vault 2>/dev/null | head -1")
        #expect(leaked.stdout.isEmpty, "the embedded authority's files were used: \(leaked.stdout)")
        // The daemon's device secret for this user (root reads it) is in no file the user can
        // read: home, /tmp, /run, /var/tmp, /dev/shm.
        let uid = Self.sh("id -u \(Self.person)").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let secretPath = state + "/uid-\(uid)/device-secret"
        #expect(FileManager.default.fileExists(atPath: secretPath), "per-uid state at \(secretPath)")
        let scan = spawn("/usr/bin/python3", ["-c", """
            import os, sys, pwd
            secret = open(sys.argv[1], 'rb').read()
            assert len(secret) == 32
            u = pwd.getpwnam(sys.argv[2])
            found = []
            for top in [sys.argv[3], '/tmp', '/run', '/var/tmp', '/dev/shm']:
                for root, dirs, files in os.walk(top):
                    if root.startswith(sys.argv[4]): continue
                    for f in files:
                        p = os.path.join(root, f)
                        try:
                            st = os.lstat(p)
                            if not os.path.isfile(p) or st.st_size > 50_000_000: continue
                            readable = (st.st_uid == u.pw_uid and st.st_mode & 0o400) or (st.st_mode & 0o004) or (st.st_gid == u.pw_gid and st.st_mode & 0o040)
                            if readable and secret in open(p, 'rb').read(): found.append(p)
                        except OSError: pass
            print('\\n'.join(found))
            """, secretPath, Self.person, home, state], env: ["PATH": "/usr/bin:/bin"])
        #expect(scan.status == 0, "\(scan.stderr)")
        #expect(scan.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "device secret readable by the user in: \(scan.stdout)")
        // A copy of everything the user owns, opened elsewhere without the daemon (the embedded
        // authority over the copied state): the fingerprint slot gives nothing; the passcode does.
        let copy = "/tmp/vault-it-copy-" + UUID().uuidString.prefix(8)
        defer { _ = Self.sh("rm -rf \(copy)") }
        #expect(Self.sh("cp -a \(home) \(copy) && chown -R root:root \(copy) && chmod 700 \(copy)").status == 0)
        let copyEnv = ["HOME": copy, "PATH": "/usr/bin:/bin", "VAULT_AUTHORITY": "embedded", "VAULT_HOME": copy + "/.local/share/vault",
                       "XDG_STATE_HOME": copy + "/.local/state", "XDG_RUNTIME_DIR": copy]
        var stolen = spawn(vaultBinary, ["ls", "--no-input"], env: copyEnv)
        #expect(stolen.status != 0 && stolen.stdout.isEmpty, "the copy opened without the passcode: \(stolen.stdout)")
        stolen = spawn(vaultBinary, ["ls", "--passcode-fd", "3"], env: copyEnv, fds: [3: pc + "\n"])
        #expect(stolen.status == 0 && stolen.stdout.contains("gh"), "the passcode opens the copy: \(stolen.status) \(stolen.stderr)")
        // Another finger: three tries, then 10; two more: 17, and the right finger is refused.
        r = vault(["ls", "--no-input", "--policy", "biometrics"], steps: Array(repeating: .device("SCAN mallory"), count: 3))
        #expect(r.status == 10, "\(r.stderr)")
        r = vault(["ls", "--no-input", "--policy", "biometrics"], steps: Array(repeating: .device("SCAN mallory"), count: 2))
        #expect(r.status == 17, "\(r.stderr)")
        // The passcode lifts it.
        r = vault(["ls"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// The issue's attack under the system authority: an ordinary user's unlock session (its agent
    /// runs as that user), an item with fingerprint login on, and a raw client of the same user.
    /// Only a token vault-authd made after a touch releases the item; the audit record names the
    /// raw client's executable (python, dumpable) and none for vault's own commands (not dumpable,
    /// and the agent is not root).
    @Test func inASessionOnlyTheDaemonsTokenReleasesAFingerprintLoginItemAndTheLogNamesTheClient() throws {
        defer { stop() }
        let pc = "system authority pass"
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc,
                      steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        for name in ["gh", "plain"] {
            r = vault(["add", name, "--generate"], passcode: pc)
            #expect(r.status == 0, "add: \(r.stderr)")
        }
        r = vault(["edit", "gh", "--fingerprint-login", "on"], passcode: pc, steps: [.device("SCAN alice")])
        #expect(r.status == 0, "edit: \(r.stderr)")
        r = vault(["unlock", "--scope", "user", "--timeout", "120"], passcode: pc)
        #expect(r.status == 0, "unlock: \(r.stderr)")
        let agent = (json(vault(["status", "--json"]).stdout)["session"] as? [String: Any])?["agent_pid"] as? Int
        defer {
            _ = vault(["lock", "--all"])
            if let agent { kill(pid_t(agent), SIGTERM) }
        }

        let script = "/tmp/vault-it-raw-" + UUID().uuidString.prefix(8) + ".py"
        defer { try? FileManager.default.removeItem(atPath: script) }
        _ = FileManager.default.createFile(atPath: script, contents: Data("""
            import json, socket, struct, sys, os
            path, db = sys.argv[1], sys.argv[2]
            def ask(message):
                s = socket.socket(socket.AF_UNIX); s.connect(path)
                body = json.dumps(message).encode()
                s.sendall(struct.pack('>IBI', 5 + len(body), 5, len(body)) + body)
                head = b''
                while len(head) < 4: head += s.recv(4 - len(head))
                n = struct.unpack('>I', head)[0]; rest = b''
                while len(rest) < n: rest += s.recv(n - len(rest))
                j = struct.unpack('>I', rest[1:5])[0]
                return json.loads(rest[5:5 + j]), len(rest) - 5 - j
            out = {}
            out['flag'] = ask({'releaseSecret': {'vault': db, 'name': 'gh', 'field': 'password', 'command': 'get', 'freshMatch': True}})
            nonce = ask({'freshMatchNonce': {'vault': db, 'name': 'gh', 'purpose': 'release'}})[0]['freshMatchNonce']['nonce']
            forged = {'vaultID': [0] * 16, 'nonce': nonce, 'macs': [[0] * 32]}
            out['forged'] = ask({'releaseSecret': {'vault': db, 'name': 'gh', 'field': 'password', 'command': 'get', 'freshMatch': forged}})
            off = {'clear': [], 'setFields': [], 'removeFields': [], 'fingerprintLogin': False}
            out['off'] = ask({'update': {'vault': db, 'name': 'gh', 'change': off}})
            out['plain'] = ask({'releaseSecret': {'vault': db, 'name': 'plain', 'field': 'password', 'command': 'label-of-my-choice'}})
            print(json.dumps(out))
            """.utf8), attributes: [.posixPermissions: 0o644])
        let db = home + "/.local/share/vault/default/vault.db"
        let raw = Self.sh("setpriv --reuid=\(Self.person) --regid=\(Self.person) --init-groups env -i HOME=\(home) PATH=/usr/bin:/bin /usr/bin/python3 \(script) \(runtime)/vault/agent.sock \(db)")
        #expect(raw.status == 0, "\(raw.stderr)")
        let answers = json(raw.stdout)
        func reply(_ key: String) -> String {
            guard let pair = answers[key] as? [Any], let body = pair.first, let data = try? JSONSerialization.data(withJSONObject: body) else { return "" }
            return String(decoding: data, as: UTF8.self)
        }
        func tail(_ key: String) -> Int { (answers[key] as? [Any])?.last as? Int ?? -1 }
        #expect(reply("flag").contains("failed") && reply("flag").contains("usage") && tail("flag") == 0, "\(reply("flag"))")
        #expect(reply("forged").contains("freshMatchNeeded") && tail("forged") == 0, "\(reply("forged"))")
        #expect(reply("off").contains("freshMatchNeeded"), "\(reply("off"))")
        #expect(reply("plain").contains("releasedSecret") && tail("plain") > 0, "\(reply("plain"))")
        r = vault(["get", "gh", "--no-input"])
        #expect(r.stdout.contains("fingerprint login: on"), "the raw update left the switch on: \(r.stdout)")

        // vault itself, with a touch on the daemon's reader: the token is the daemon's.
        r = vault(["get", "gh", "--field", "password", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && !r.stdout.isEmpty, "\(r.stderr)")
        r = vault(["get", "gh", "--field", "password", "--no-input", "--scan-timeout", "1"])
        #expect(r.status == 18, "a second release needs a second touch: \(r.stderr)")

        let records = json(vault(["log", "--json", "--no-input"]).stdout)["records"] as? [[String: Any]] ?? []
        let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path
        let mine = records.filter { $0["command"] as? String == "label-of-my-choice" }
        #expect(mine.count == 1 && mine.first?["executable"] as? String == python, "\(mine)")
        let vaults = records.filter { $0["item"] as? String == "gh" }
        #expect(vaults.count == 1 && vaults.first?["executable"] is NSNull, "a non-root agent cannot read vault's own link: \(vaults)")
    }
}
