import Foundation
import VaultSystem
import Testing
import VaultKit

/// swtpm for one test, started as root with its sockets open to every user (the daemon runs as
/// vault-auth, the CLI as an ordinary user), stopped through its control channel.
final class IntegrationTPM {
    let folder: String
    let pid: pid_t
    var tcti: String { "swtpm:path=\(folder)/tpm.sock" }

    init() {
        folder = "/tmp/vault-it-swtpm-" + UUID().uuidString.prefix(8)
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        pid = start("/usr/bin/swtpm", ["socket", "--tpm2", "--tpmstate", "dir=" + folder,
                                       "--server", "type=unixio,path=\(folder)/tpm.sock,mode=0666",
                                       "--ctrl", "type=unixio,path=\(folder)/tpm.sock.ctrl,mode=0666",
                                       "--flags", "not-need-init,startup-clear"], env: [:])
        let end = Date().addingTimeInterval(30)
        while (!accepts(folder + "/tpm.sock.ctrl") || !accepts(folder + "/tpm.sock")) && Date() < end { usleep(2000) }
    }

    /// A tpm2-tools program against this TPM.
    @discardableResult
    func tool(_ name: String, _ args: [String]) -> RunResult {
        spawn("/usr/bin/" + name, args, env: ["TPM2TOOLS_TCTI": tcti, "TSS2_LOG": "all+NONE"])
    }

    deinit {
        tool("tpm2_shutdown", [])
        _ = spawn("/usr/bin/swtpm_ioctl", ["-s", "--unix", folder + "/tpm.sock.ctrl"], env: [:], timeLimit: 5)
        kill(pid, SIGKILL)
        _ = reap(pid)
        try? FileManager.default.removeItem(atPath: folder)
    }
}


/// vault-authd with its device secrets sealed by a real (software) TPM, and `vault` as an
/// ordinary user through it. Needs root (useradd, setpriv) and swtpm.
@Suite(.serialized, .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/swtpm"),
                             "needs root (useradd, setpriv) and swtpm (apt-get install swtpm swtpm-tools tpm2-tools)"))
struct TPMAuthorityTests {
    /// A person of its own: SystemAuthorityTests runs at the same time and resets vault-it's home.
    static let daemonUser = "vault-auth", person = "vault-tpm-it"
    let base = "/tmp/vault-authd-tpm-" + UUID().uuidString.prefix(8)
    var run: String { base + "/run" }
    var socket: String { run + "/socket" }
    var reader: String { run + "/reader.sock" }
    /// The person's home, this test's own (two runs never share a vault).
    var home: String { base + "/home" }
    let pc = "tpm authority pass"

    init() {
        // As the package declares it (the Debian package test expects its comment).
        _ = try? ensureDaemonUser()
        _ = SystemAuthorityTests.sh("id -u \(Self.person) >/dev/null 2>&1 || useradd -m -s /bin/sh \(Self.person)")
        let prep = SystemAuthorityTests.sh("""
            install -d -m 0755 \(base) && install -d -o \(Self.daemonUser) -g \(Self.daemonUser) -m 0755 \(run) && \
            install -d -o \(Self.person) -g \(Self.person) -m 0700 \(home)
            """)
        #expect(prep.status == 0, "\(prep.stderr)")
    }

    /// Starts vault-authd as vault-auth over `state` (made 0700 when missing) with `arguments`.
    func daemon(state: String, _ arguments: [String]) -> pid_t {
        _ = SystemAuthorityTests.sh("[ -d \(state) ] || install -d -o \(Self.daemonUser) -g \(Self.daemonUser) -m 0700 \(state); rm -f \(socket)")
        let authd = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("vault-authd").path
        let pid = start("/usr/bin/setpriv", ["--reuid=\(Self.daemonUser)", "--regid=\(Self.daemonUser)", "--init-groups", "--inh-caps=-all",
                                             "env", "-i", "PATH=/usr/bin:/bin", "FP_VIRTUAL_DEVICE=\(reader)", "FP_DRIVERS_WHITELIST=virtual_device",
                                             authd, "--socket", socket, "--state", state, "--test-mode"] + arguments,
                        env: [:], output: base + "/daemon-\(UUID().uuidString.prefix(4))")
        // Up when its socket accepts a connection (the machine may be busy: up to 20 s).
        for _ in 0..<1000 {
            let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { p in _ = self.socket.withCString { strncpy(p.baseAddress!.assumingMemoryBound(to: CChar.self), $0, p.count - 1) } }
            let ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } } == 0
            close(fd)
            if ok { break }
            usleep(20_000)
        }
        return pid
    }

    func stop(_ pid: pid_t) {
        kill(pid, SIGTERM)
        _ = reap(pid)
    }

    /// `vault ARGS` as the ordinary user through the system authority; `fds` feed descriptors 3, 4...
    func vault(_ args: [String], fds: [Int32: String] = [:], steps: [ReaderStep] = []) -> RunResult {
        var redirections = ""
        for (fd, content) in fds {
            let file = base + "/fd-" + UUID().uuidString.prefix(8)
            _ = FileManager.default.createFile(atPath: file, contents: Data((content + "\n").utf8), attributes: [.posixPermissions: 0o644])
            redirections += " \(fd)<" + file
        }
        let quoted = ([vaultBinary] + args).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let env = "env -i HOME=\(home) PATH=/usr/bin:/bin VAULT_AUTHORITY=system VAULT_AUTHD_SOCKET=\(socket) LANG=C.UTF-8"
        let line = "exec setpriv --reuid=\(Self.person) --regid=\(Self.person) --init-groups \(env) \(quoted)\(redirections)"
        let feed = ReaderFeed(socket: reader, env: ["PATH": "/usr/bin:/bin"], steps: steps, log: base + "/reader.log")
        var r = spawn("/bin/sh", ["-c", line], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeLimit: 60, onStderr: { feed.stderrChanged($0) })
        r.reader = feed.finish(grace: steps.isEmpty ? 0 : 5)
        return r
    }

    var uidFolder: String {
        "/uid-" + SystemAuthorityTests.sh("id -u \(Self.person)").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Initialises a vault with one enrolled finger and one item; returns the recovery key.
    func initVault() -> String {
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--passcode-fd", "3"], fds: [3: pc], steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        let recovery = (r.stdout + r.stderr).range(of: #"([A-Z2-7]{4}-){13}[A-Z2-7]{4}"#, options: .regularExpression).map { String((r.stdout + r.stderr)[$0]) }
        r = vault(["add", "gh", "--username", "me", "--passcode-fd", "3"], fds: [3: pc])
        #expect(r.status == 0, "add: \(r.stderr)")
        return recovery ?? ""
    }

    @Test func sealedOnFirstUseUnsealedAfterARestartAndUselessOnAnotherTPM() throws {
        defer { _ = SystemAuthorityTests.sh("rm -rf \(base)") }
        let tpm = IntegrationTPM()
        let state = base + "/state"
        var authd = daemon(state: state, ["--tpm", tpm.tcti])
        let recovery = initVault()
        #expect(!recovery.isEmpty)
        var r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && r.stdout.contains("gh"), "\(r.stderr)")
        r = vault(["doctor"])
        #expect(r.stdout.contains("authority secrets: sealed by the TPM"), "\(r.stdout)")

        // Only the sealed blob is stored; the secret (root unseals it, as the daemon does) is in
        // no file of the daemon's state, nor in any file the user can read.
        let mine = state + uidFolder
        #expect(!FileManager.default.fileExists(atPath: mine + "/device-secret"))
        let blob = try #require(FileManager.default.contents(atPath: mine + "/device-secret.tpm"))
        let record = try TPMSealedRecord(encoded: Array(blob), what: "blob")
        let secret = try TPMDevice(tcti: tpm.tcti).unseal(record.object, authValue: try SecretBytes(zeroed: 0))
        #expect(secret.count == 32)
        let known = Data(secret.exposedBytes())
        var scanned = 0
        for top in [state, home, "/tmp/" + (base as NSString).lastPathComponent] {
            for case let name as String in FileManager.default.enumerator(atPath: top) ?? FileManager.default.enumerator(atPath: "/nonexistent")! {
                guard let data = FileManager.default.contents(atPath: top + "/" + name) else { continue }
                scanned += 1
                #expect(data.range(of: known) == nil, "the device secret in clear in \(top)/\(name)")
            }
        }
        #expect(scanned >= 4, "prints.sealed, auth.sealed, device-secret.tpm, lock")

        // Restart: the same TPM unseals it; the finger opens.
        stop(authd)
        authd = daemon(state: state, ["--tpm", tpm.tcti])
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && r.stdout.contains("gh"), "after a restart: \(r.stderr)")
        stop(authd)

        // The state folder copied to another machine (a fresh swtpm): refused, by name.
        let copy = base + "/copied-state"
        #expect(SystemAuthorityTests.sh("cp -a \(state) \(copy)").status == 0)
        let other = IntegrationTPM()
        authd = daemon(state: copy, ["--tpm", other.tcti])
        defer { stop(authd) }
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 5 && r.stderr.contains("sealed by another machine's TPM"), "\(r.status) \(r.stderr)")
        // The passcode and the recovery key still open the vault.
        r = vault(["ls", "--passcode-fd", "3"], fds: [3: pc])
        #expect(r.status == 0 && r.stdout.contains("gh"), "passcode: \(r.status) \(r.stderr)")
        r = vault(["recover", "--recovery-key-fd", "3", "--new-passcode-fd", "4"], fds: [3: recovery, 4: pc])
        #expect(r.status == 0, "recovery key: \(r.status) \(r.stderr)")
        // Enrolling again (with the passcode) seals a new secret on this TPM; the finger opens.
        r = vault(["enroll", "--passcode-fd", "3"], fds: [3: pc], steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "enroll: \(r.status) \(r.stderr)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && r.stdout.contains("gh"), "after enrolling again: \(r.stderr)")
        #expect(FileManager.default.fileExists(atPath: copy + uidFolder + "/device-secret.tpm.old"))
    }

    @Test func pcr7BindingFailsAfterAnExtendAndThePasscodeThenEnrolmentRecover() throws {
        defer { _ = SystemAuthorityTests.sh("rm -rf \(base)") }
        let tpm = IntegrationTPM()
        let authd = daemon(state: base + "/state", ["--tpm", tpm.tcti, "--tpm-pcr7"])
        defer { stop(authd) }
        _ = initVault()
        var r = vault(["doctor", "--json"])
        #expect(r.stdout.contains("\"secrets\":\"tpm-pcr7\""), "\(r.stdout)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0, "\(r.stderr)")

        // A firmware update: PCR 7 changes. The finger path is refused, naming PCR 7.
        #expect(tpm.tool("tpm2_pcrextend", ["7:sha256=" + String(repeating: "ab", count: 32)]).status == 0)
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 15 && r.stderr.contains("PCR 7"), "\(r.status) \(r.stderr)")
        // The documented recovery: the passcode, then enrolling again.
        r = vault(["ls", "--passcode-fd", "3"], fds: [3: pc])
        #expect(r.status == 0 && r.stdout.contains("gh"), "\(r.stderr)")
        r = vault(["enroll", "--passcode-fd", "3"], fds: [3: pc], steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "enroll: \(r.status) \(r.stderr)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN alice")])
        #expect(r.status == 0 && r.stdout.contains("gh"), "re-bound: \(r.stderr)")
    }
}

/// `vault settings --passcode-on-tpm` through the binary, on swtpm (`VAULT_TPM_TCTI`).
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/swtpm"), "swtpm is not installed (apt-get install swtpm swtpm-tools tpm2-tools)"))
struct PasscodeOnTPMFlowTests {
    @Test func wrongPasscodesCountDownToTheTPMLockoutAndTheRecoveryKeyStillOpens() throws {
        let box = Sandbox()
        let tpm = IntegrationTPM()
        #expect(tpm.tool("tpm2_dictionarylockout", ["-s", "-n", "3", "-t", "600", "-l", "600"]).status == 0)
        box.env["VAULT_TPM_TCTI"] = tpm.tcti
        let recovery = box.initVault()
        var r = box.vault(["add", "db", "--password-stdin"], passcode: Sandbox.passcode, stdin: "s3cret\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["settings", "--passcode-on-tpm", "on"], passcode: Sandbox.passcode)
        #expect(r.status == 0 && r.stderr.contains("now needs this machine's TPM"), "\(r.stderr)")
        r = box.vault(["settings", "--json"])
        #expect(json(r.stdout)["passcode_on_tpm"] as? Bool == true, "\(r.stdout)")
        // The embedded authority's secrets are in the user's files: doctor says so, and names the TPM.
        r = box.vault(["doctor"])
        #expect(r.stdout.contains("authority secrets: protected by file permissions only"), "\(r.stdout)")
        #expect(r.stdout.contains("TPM (for --passcode-on-tpm): \(tpm.tcti): answers; dictionary-attack counter 0 of 3"), "\(r.stdout)")
        r = box.vault(["get", "db", "--field", "password"], passcode: Sandbox.passcode)
        #expect(r.status == 0 && r.stdout == "s3cret\n", "\(r.stderr)")

        r = box.vault(["ls"], passcode: "wrong one")
        #expect(r.status == 10 && r.stderr.contains("wrong passcode, 2 tries before the TPM locks"), "\(r.status) \(r.stderr)")
        r = box.vault(["ls"], passcode: "wrong two")
        #expect(r.status == 10 && r.stderr.contains("wrong passcode, 1 try before the TPM locks"), "\(r.status) \(r.stderr)")
        r = box.vault(["ls"], passcode: "wrong three")
        #expect(r.status == 17 && r.stderr.contains("lifts in about 600 s"), "\(r.status) \(r.stderr)")
        r = box.vault(["ls"], passcode: Sandbox.passcode)
        #expect(r.status == 17 && r.stderr.contains("vault: hint:") && r.stderr.contains("recover"), "the right one during the lockout: \(r.status) \(r.stderr)")

        // Without the TPM the passcode cannot open it (exit 15, naming the TPM); the recovery key can.
        box.env["VAULT_TPM_TCTI"] = "none"
        r = box.vault(["ls"], passcode: Sandbox.passcode)
        #expect(r.status == 15 && r.stderr.contains("TPM"), "\(r.status) \(r.stderr)")
        r = box.vault(["recover", "--recovery-key-fd", "4", "--new-passcode-fd", "5"], fds: [4: recovery + "\n", 5: "new passcode\n"])
        #expect(r.status == 0 && r.stderr.contains("not on a TPM"), "\(r.status) \(r.stderr)")
        r = box.vault(["get", "db", "--field", "password"], passcode: "new passcode")
        #expect(r.status == 0 && r.stdout == "s3cret\n", "\(r.stderr)")
    }
}

/// Whether swtpm's socket at `path` accepts a connection now: the file exists from its `bind`, but
/// connections are accepted only from its `listen` on, which a loaded machine may reach later (a
/// client connecting in between fails with "tcti:IO failure").
private func accepts(_ path: String) -> Bool { (try? UnixSocket.connect(path: path)) != nil }
