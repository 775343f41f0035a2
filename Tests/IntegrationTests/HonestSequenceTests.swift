import Foundation
import Testing
import VaultSystem

/// One vault-authd for a test, run as vault-auth: a socket and a `--state` folder of its own, and
/// either libfprint's virtual reader (its socket beside the daemon's) or no reader at all. Stopped
/// and started again on the same state, it is the machine's daemon after the reader was unplugged
/// or plugged back in.
final class AuthorityDaemon {
    let run: String
    let state: String
    var socket: String { run + "/socket" }
    var reader: String { run + "/reader.sock" }
    private var pid: pid_t = 0
    private var launches = 0

    /// Makes the two folders (owned by vault-auth); nothing runs yet.
    init(run: String, state: String) {
        self.run = run
        self.state = state
        let prep = HonestSequenceTests.sh("""
            install -d -o \(HonestSequenceTests.daemonUser) -g \(HonestSequenceTests.daemonUser) -m 0755 \(run) && \
            install -d -o \(HonestSequenceTests.daemonUser) -g \(HonestSequenceTests.daemonUser) -m 0700 \(state)
            """)
        #expect(prep.status == 0, "\(prep.stderr)")
    }

    deinit { stop() }

    /// Starts the daemon in test mode (the only mode that honours the virtual readers) and waits
    /// until its socket takes connections; `reader: false` whitelists no driver at all. Its output
    /// goes to `daemon-N.err` in `run`.
    func launch(reader: Bool) {
        precondition(pid == 0, "the daemon is running")
        launches += 1
        let readers = reader ? ["FP_VIRTUAL_DEVICE=\(self.reader)", "FP_DRIVERS_WHITELIST=virtual_device"] : ["FP_DRIVERS_WHITELIST=none"]
        let authd = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("vault-authd").path
        pid = start("/usr/bin/setpriv", ["--reuid=\(HonestSequenceTests.daemonUser)", "--regid=\(HonestSequenceTests.daemonUser)",
                                         "--init-groups", "--inh-caps=-all", "env", "-i", "PATH=/usr/bin:/bin"] + readers
                                        + [authd, "--socket", socket, "--state", state, "--test-mode"],
                    env: [:], output: run + "/daemon-\(launches)")
        // Generous: a machine with a busy loop on every core starts it slowly.
        let end = Date(timeIntervalSinceNow: 30)
        while !accepts(socket) && Date() < end { usleep(20_000) }
        #expect(accepts(socket), "vault-authd did not answer on \(socket): \(log)")
    }

    /// Stops the daemon (SIGTERM) and waits for it; nothing when it is not running.
    func stop() {
        guard pid > 0 else { return }
        kill(pid, SIGTERM)
        _ = reap(pid)
        pid = 0
    }

    /// What the daemon printed in its latest run.
    var log: String { (try? String(contentsOfFile: run + "/daemon-\(launches).err", encoding: .utf8)) ?? "" }
}

/// A generator that a seed replays: a failing kill sequence runs again with `HONEST_SEED`.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The passcode and the recovery key keep the system key authority in step with the vault,
/// whatever the daemon missed: a rotation or a passcode change while the reader was gone, a
/// command killed at any moment, the daemon's state or the vault restored from an older backup,
/// a vault copied to a machine whose daemon never saw it. Each test is a sequence of ordinary
/// `vault` commands run as an ordinary user, who finds the daemon by default (only
/// `VAULT_AUTHD_SOCKET` is set), and ends with the vault in step: a passcode unlock the daemon
/// records, a fingerprint bound and opening the vault. Needs root (useradd, setpriv).
@Suite(.serialized, .enabled(if: getuid() == 0, "needs root: creates the vault-honest user and starts vault-authd as vault-auth"))
final class HonestSequenceTests {
    /// A person of its own: SystemAuthorityTests and TPMAuthorityTests run at the same time.
    static let daemonUser = "vault-auth", person = "vault-honest"
    static let unrecorded = "did not record this unlock"
    let base = "/tmp/vault-honest-" + UUID().uuidString.prefix(8)
    /// The person's home for this test (HOME), so no test sees another's vault.
    var home: String { base + "/home" }
    var vaultFolder: String { home + "/.local/share/vault" }
    let authd: AuthorityDaemon
    let pc = "honest sequence pass"
    private(set) var recoveryKey = ""

    static func sh(_ command: String) -> RunResult { spawn("/bin/sh", ["-c", command], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]) }

    /// Creates `name` unless it exists. Suites running at the same time create their users at
    /// the same moment, and useradd gives up when another holds the lock on /etc/passwd.
    static func ensureUser(_ name: String, _ options: String) {
        for _ in 0..<20 where sh("id -u \(name) >/dev/null 2>&1").status != 0 {
            _ = sh("useradd \(options) \(name)")
            usleep(100_000)
        }
    }

    init() {
        _ = try? ensureDaemonUser()  // as the package declares it
        Self.ensureUser(Self.person, "-m -s /bin/sh")
        let prep = Self.sh("install -d -m 0755 \(base) && install -d -o \(Self.person) -g \(Self.person) -m 0700 \(base)/home")
        #expect(prep.status == 0, "\(prep.stderr)")
        authd = AuthorityDaemon(run: base + "/run", state: base + "/state")
        authd.launch(reader: true)
    }

    deinit {
        authd.stop()
        _ = Self.sh("rm -rf \(base)")
    }

    // MARK: running vault

    /// The shell line that runs `vault args` as the person, with `home` and the daemon on `socket`.
    func commandLine(_ args: [String], home: String, socket: String) -> String {
        let quoted = ([vaultBinary] + args).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let env = "env -i HOME=\(home) PATH=/usr/bin:/bin VAULT_AUTHD_SOCKET=\(socket) LANG=C.UTF-8 NO_COLOR=1"
        return "exec setpriv --reuid=\(Self.person) --regid=\(Self.person) --init-groups \(env) \(quoted)"
    }

    /// `vault ARGS` as the person while `daemon`'s reader plays `steps`; `passcode` goes in on fd
    /// 3 with `--passcode-fd 3`, `fds` (fd -> content) as they are.
    func vault(_ args: [String], passcode: String? = nil, fds: [Int32: String] = [:], steps: [ReaderStep] = [],
               home: String? = nil, daemon: AuthorityDaemon? = nil) -> RunResult {
        let daemon = daemon ?? authd
        var all = args, fds = fds
        if let passcode {
            all += ["--passcode-fd", "3"]
            fds[3] = passcode + "\n"
        }
        let feed = ReaderFeed(socket: daemon.reader, env: ["PATH": "/usr/bin:/bin"], steps: steps, log: base + "/reader.log")
        var r = spawn("/bin/sh", ["-c", commandLine(all, home: home ?? self.home, socket: daemon.socket)],
                      env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], fds: fds, timeLimit: 60, onStderr: { feed.stderrChanged($0) })
        r.reader = feed.finish(grace: steps.isEmpty ? 0 : 5)
        return r
    }

    // MARK: steps every test takes

    /// `vault init` (a finger enrolled with five touches, the vault bound) and one item; the
    /// fingerprint slot is the daemon's, and the person's files hold no authority state.
    func initVault() {
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, steps: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)")
        recoveryKey = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(recoveryKey.count > 40, "no recovery key on stdout: \(r.stdout)")
        r = vault(["status", "--json"])
        let slot = json(r.stdout)["fingerprint_slot"] as? [String: Any]
        #expect(slot?["authority"] as? String == "system", "\(r.stdout)")
        let local = Self.sh("find \(home)/.local/state/vault -type f 2>/dev/null")
        #expect(local.stdout.isEmpty, "the default picked the embedded authority: \(local.stdout)")
        r = vault(["add", "gh", "--username", "me"], passcode: pc)
        #expect(r.status == 0, "add: \(r.stderr)")
    }

    /// A passcode `get` opens the vault and the daemon records it (no warning).
    func expectPasscodeOpens(_ passcode: String, home: String? = nil, daemon: AuthorityDaemon? = nil,
                             _ context: String = "", sourceLocation: SourceLocation = #_sourceLocation) {
        let r = vault(["get", "gh"], passcode: passcode, home: home, daemon: daemon)
        #expect(r.status == 0 && r.stdout.contains("username: me"), "\(context) passcode get: \(r.status) \(r.stderr)", sourceLocation: sourceLocation)
        #expect(!r.stderr.contains(Self.unrecorded), "\(context) \(r.stderr)", sourceLocation: sourceLocation)
    }

    /// The recovery key opens the vault (`vault recover`, which sets `newPasscode`), recorded.
    func expectRecoveryKeyOpens(settingPasscode newPasscode: String, home: String? = nil, daemon: AuthorityDaemon? = nil,
                                _ context: String = "", sourceLocation: SourceLocation = #_sourceLocation) {
        let r = vault(["recover", "--recovery-key-fd", "3", "--new-passcode-fd", "4"], fds: [3: recoveryKey + "\n", 4: newPasscode + "\n"],
                      home: home, daemon: daemon)
        #expect(r.status == 0 && r.stderr.contains("new passcode set"), "\(context) recover: \(r.status) \(r.stderr)", sourceLocation: sourceLocation)
        #expect(!r.stderr.contains(Self.unrecorded), "\(context) \(r.stderr)", sourceLocation: sourceLocation)
    }

    /// A finger opens the vault: one touch, no passcode.
    func expectFingerOpens(home: String? = nil, daemon: AuthorityDaemon? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        let r = vault(["get", "gh", "--no-input"], steps: [.device("SCAN alice")], home: home, daemon: daemon)
        #expect(r.status == 0 && r.stdout.contains("username: me"), "finger get: \(r.status) \(r.stderr)", sourceLocation: sourceLocation)
        #expect(r.stderr.contains("touch the fingerprint reader"), "\(r.stderr)", sourceLocation: sourceLocation)
    }

    /// The vault and the daemon agree: the passcode unlock is recorded (no warning, and it resets
    /// the daemon's count of wrong fingers), `enroll --bind` binds, a finger opens the vault.
    func expectInStep(passcode: String, home: String? = nil, daemon: AuthorityDaemon? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        expectPasscodeOpens(passcode, home: home, daemon: daemon, "in step:", sourceLocation: sourceLocation)
        var r = vault(["enroll", "--bind"], passcode: passcode, home: home, daemon: daemon)
        #expect(r.status == 0 && r.stderr.contains("is bound to the enrolled fingerprints"), "enroll --bind: \(r.status) \(r.stderr)",
                sourceLocation: sourceLocation)
        #expect(!r.stderr.contains(Self.unrecorded), "\(r.stderr)", sourceLocation: sourceLocation)
        // Recorded, not only unwarned: three wrong fingers count at the daemon, and the passcode
        // unlock resets the count.
        r = vault(["get", "gh", "--no-input", "--policy", "biometrics"], steps: Array(repeating: .device("SCAN mallory"), count: 3),
                  home: home, daemon: daemon)
        #expect(r.status == 10, "three wrong fingers: \(r.status) \(r.stderr)", sourceLocation: sourceLocation)
        #expect(failedMatches(home: home, daemon: daemon) == 3, sourceLocation: sourceLocation)
        expectPasscodeOpens(passcode, home: home, daemon: daemon, "in step, after wrong fingers:", sourceLocation: sourceLocation)
        #expect(failedMatches(home: home, daemon: daemon) == 0, "the passcode unlock was not recorded", sourceLocation: sourceLocation)
        expectFingerOpens(home: home, daemon: daemon, sourceLocation: sourceLocation)
    }

    /// The failed matches the daemon counts now (`vault status --json`).
    func failedMatches(home: String? = nil, daemon: AuthorityDaemon? = nil) -> Int? {
        let r = vault(["status", "--json"], home: home, daemon: daemon)
        return (json(r.stdout)["lockout"] as? [String: Any])?["failures"] as? Int
    }

    /// Restarts the daemon on its state without any reader, and checks that vault finds none.
    func unplugReader() {
        authd.stop()
        authd.launch(reader: false)
        let r = vault(["get", "gh", "--no-input"])
        #expect(r.status == 15 && r.stderr.contains("no usable fingerprint reader"), "reader gone: \(r.status) \(r.stderr)")
    }

    /// Restarts the daemon on its state with the virtual reader.
    func plugReaderBackIn() {
        authd.stop()
        authd.launch(reader: true)
    }

    // MARK: the sequences

    @Test func aRotationWithTheReaderGoneKeepsThePasscodeRecordedAndTheFingerBindsAfter() {
        initVault()
        unplugReader()
        var r = vault(["rotate"], passcode: pc)
        #expect(r.status == 0, "rotate: \(r.stderr)")
        #expect(r.stderr.contains("(generation 2); no fingerprint slot"), "\(r.stderr)")
        #expect(!r.stderr.contains("warning"), "\(r.stderr)")
        expectPasscodeOpens(pc)
        expectRecoveryKeyOpens(settingPasscode: pc)
        r = vault(["status", "--json"])
        #expect(json(r.stdout)["key_generation"] as? Int == 2, "\(r.stdout)")
        plugReaderBackIn()
        expectInStep(passcode: pc)
    }

    @Test func aPasscodeChangeWithTheReaderGoneKeepsTheVaultInStep() {
        initVault()
        unplugReader()
        let next = "honest sequence second"
        var r = vault(["passcode", "--passcode-fd", "3", "--new-passcode-fd", "4"], fds: [3: pc + "\n", 4: next + "\n"])
        #expect(r.status == 0 && r.stderr.contains("passcode changed"), "passcode: \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("vault: warning: the fingerprint slot keeps its old key until 'vault enroll --bind' (no usable fingerprint reader"),
                "\(r.stderr)")
        #expect(!r.stderr.contains(Self.unrecorded), "\(r.stderr)")
        r = vault(["get", "gh"], passcode: pc)
        #expect(r.status == 10, "the old passcode still opens: \(r.status) \(r.stderr)")
        expectPasscodeOpens(next)
        let third = "honest sequence third"
        expectRecoveryKeyOpens(settingPasscode: third)
        plugReaderBackIn()
        // Without the reader the passcode changes left the fingerprint slot as it was: it opens.
        expectFingerOpens()
        expectInStep(passcode: third)
    }

    /// SIGKILL at a random moment of `vault rotate`, then of `vault passcode`: the vault opens
    /// after each, with its passcode (the old or the new one: exactly one) and its recovery key,
    /// and the daemon records those unlocks; afterwards a rotation binds the finger again.
    @Test func killedRotationsAndPasscodeChangesLeaveThePasscodeAndTheRecoveryKeyOpening() {
        let seed = ProcessInfo.processInfo.environment["HONEST_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 0...UInt64.max)
        var rng = SeededGenerator(seed: seed)
        let context = "seed \(seed) (HONEST_SEED=\(seed) replays it):"
        initVault()
        var passcode = pc

        // `vault ARGS` killed `delay` seconds after vault itself started (the delay runs from
        // the exec, not from the shell and setpriv before it); its exit status (137: killed) and
        // how long vault ran.
        let vaultExecutable = URL(fileURLWithPath: vaultBinary).resolvingSymlinksInPath().path
        func killed(_ args: [String], fds: [Int32: String], after delay: Double?) -> (status: Int32, ran: Double) {
            let pid = start("/bin/sh", ["-c", commandLine(args, home: home, socket: authd.socket)], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"],
                            fds: fds, output: nil)
            // Until the shell's exec chain reaches vault; a process that ended has no link.
            let limit = Date(timeIntervalSinceNow: 30)
            while Date() < limit, let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"), exe != vaultExecutable {
                usleep(200)
            }
            let t0 = Date()
            if let delay {
                usleep(useconds_t(delay * 1_000_000))
                kill(pid, SIGKILL)
            }
            let status = reap(pid)
            return (status, Date().timeIntervalSince(t0))
        }

        // One whole run of each gives the time scale; a kill that comes too late (the run
        // completed) shrinks the window, so most runs die mid-way whatever the machine's load.
        let rotateArgs = ["rotate", "--passcode-fd", "3"]
        let fullRotation = killed(rotateArgs, fds: [3: passcode + "\n"], after: nil)
        #expect(fullRotation.status == 0, "\(context) a whole rotation")
        var window = fullRotation.ran
        var kills = 0
        for round in 0..<20 {
            let run = killed(rotateArgs, fds: [3: passcode + "\n"], after: Double.random(in: 0...window, using: &rng))
            if run.status == 128 + SIGKILL {
                kills += 1
            } else {
                #expect(run.status == 0, "\(context) rotation \(round) ended with \(run.status)")
                window *= 0.7
            }
            expectPasscodeOpens(passcode, "\(context) after rotation \(round):")
            passcode = "honest rotate \(round)"
            expectRecoveryKeyOpens(settingPasscode: passcode, "\(context) after rotation \(round):")
        }
        #expect(kills >= 10, "\(context) only \(kills) of 20 rotations were killed")

        let passcodeArgs = ["passcode", "--passcode-fd", "3", "--new-passcode-fd", "4"]
        let fullChange = killed(passcodeArgs, fds: [3: passcode + "\n", 4: "honest change\n"], after: nil)
        #expect(fullChange.status == 0, "\(context) a whole passcode change")
        passcode = "honest change"
        window = fullChange.ran
        kills = 0
        for round in 0..<20 {
            let next = "honest change \(round)"
            let run = killed(passcodeArgs, fds: [3: passcode + "\n", 4: next + "\n"], after: Double.random(in: 0...window, using: &rng))
            if run.status == 128 + SIGKILL {
                kills += 1
            } else {
                #expect(run.status == 0, "\(context) passcode change \(round) ended with \(run.status)")
                window *= 0.7
            }
            // Exactly one of the two opens; a run that completed took the new one.
            let old = vault(["get", "gh"], passcode: passcode), new = vault(["get", "gh"], passcode: next)
            #expect((old.status == 0) != (new.status == 0), "\(context) change \(round): old \(old.status) \(old.stderr) new \(new.status) \(new.stderr)")
            #expect([old, new].allSatisfy { $0.status == 0 || $0.status == 10 }, "\(context) change \(round): \(old.stderr) \(new.stderr)")
            #expect(run.status != 0 || new.status == 0, "\(context) change \(round) completed but the new passcode does not open")
            for r in [old, new] where r.status == 0 {
                #expect(!r.stderr.contains(Self.unrecorded), "\(context) change \(round): \(r.stderr)")
            }
            passcode = new.status == 0 ? next : passcode
            passcode = "honest recovered \(round)"
            expectRecoveryKeyOpens(settingPasscode: passcode, "\(context) after change \(round):")
        }
        #expect(kills >= 10, "\(context) only \(kills) of 20 passcode changes were killed")

        let r = vault(["rotate"], passcode: passcode)
        #expect(r.status == 0 && r.stderr.contains("fingerprint slot bound to the current prints"), "\(context) rotate: \(r.status) \(r.stderr)")
        expectInStep(passcode: passcode)
    }

    @Test func aDaemonStateRestoredFromAnOlderBackupIsCaughtUpAtThePasscodeUnlock() {
        initVault()
        let backup = base + "/state-backup"
        #expect(Self.sh("cp -a \(authd.state) \(backup)").status == 0)
        for generation in 2...3 {
            let r = vault(["rotate"], passcode: pc)
            #expect(r.status == 0 && r.stderr.contains("(generation \(generation)); fingerprint slot bound"), "rotate: \(r.stderr)")
        }
        authd.stop()
        let restore = Self.sh("rm -rf \(authd.state) && cp -a \(backup) \(authd.state)")
        #expect(restore.status == 0, "\(restore.stderr)")
        authd.launch(reader: true)
        expectPasscodeOpens(pc, "the restored daemon:")
        expectInStep(passcode: pc)
    }

    @Test func aVaultCopiedToAMachineWhoseDaemonNeverSawItBindsThere() {
        initVault()
        let elsewhere = AuthorityDaemon(run: base + "/run-elsewhere", state: base + "/state-elsewhere")
        elsewhere.launch(reader: true)
        defer { elsewhere.stop() }
        let other = base + "/home-elsewhere"
        let copy = Self.sh("""
            install -d -o \(Self.person) -g \(Self.person) -m 0700 \(other) \(other)/.local \(other)/.local/share && \
            cp -a \(vaultFolder) \(other)/.local/share/vault
            """)
        #expect(copy.status == 0, "\(copy.stderr)")
        // Nothing to record there, and nothing to warn about: the vault is not bound to that daemon.
        expectPasscodeOpens(pc, home: other, daemon: elsewhere, "there:")
        let next = "honest sequence elsewhere"
        expectRecoveryKeyOpens(settingPasscode: next, home: other, daemon: elsewhere, "there:")
        let r = vault(["enroll", "--finger", "right-index"], passcode: next, steps: Array(repeating: .device("SCAN alice"), count: 5),
                  home: other, daemon: elsewhere)
        #expect(r.status == 0 && r.stderr.contains("enrolled right-index"), "enroll there: \(r.status) \(r.stderr)")
        expectInStep(passcode: next, home: other, daemon: elsewhere)
        // The first machine's vault and daemon are as they were.
        expectInStep(passcode: pc)
    }

    /// A rotation while vault-authd does not answer (stopped, restarting): the passcode opens,
    /// and once the daemon is back the passcode unlock catches it up.
    @Test func aRotationWhileTheDaemonIsDownIsCaughtUpWhenItIsBack() {
        initVault()
        authd.stop()
        var r = vault(["get", "gh"], passcode: pc)
        #expect(r.status == 0 && r.stdout.contains("username: me"), "passcode get, no daemon: \(r.status) \(r.stderr)")
        #expect(r.stderr.contains(Self.unrecorded), "a daemon that does not answer records nothing, and says so: \(r.stderr)")
        r = vault(["rotate"], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("(generation 2); no fingerprint slot"), "rotate, no daemon: \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("vault: note: the key authority was not told the new key"), "\(r.stderr)")
        let local = Self.sh("find \(home)/.local/state/vault -type f 2>/dev/null")
        #expect(local.stdout.isEmpty, "the rotation used the embedded authority: \(local.stdout)")
        authd.launch(reader: true)
        expectPasscodeOpens(pc, "the daemon back:")
        expectRecoveryKeyOpens(settingPasscode: pc, "the daemon back:")
        expectInStep(passcode: pc)
    }

    @Test func aVaultRestoredFromAnOlderBackupIsReregisteredWithOneTouch() {
        initVault()
        let backup = base + "/vault-backup"
        #expect(Self.sh("cp -a \(vaultFolder) \(backup)").status == 0)
        var r = vault(["rotate"], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("(generation 2); fingerprint slot bound"), "rotate: \(r.stderr)")
        let restore = Self.sh("rm -rf \(vaultFolder) && cp -a \(backup) \(vaultFolder)")
        #expect(restore.status == 0, "\(restore.stderr)")
        r = vault(["get", "gh"], passcode: pc)
        #expect(r.status == 0 && r.stdout.contains("username: me"), "the passcode opens the older vault: \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("vault: warning: the key authority did not record this unlock ("), "\(r.stderr)")
        #expect(r.stderr.contains("vault: hint: ") && r.stderr.contains("'vault enroll --bind --reregister'"), "\(r.stderr)")
        r = vault(["enroll", "--bind", "--reregister"], passcode: pc, steps: [.device("SCAN alice")])
        #expect(r.status == 0, "reregister: \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("touch the fingerprint reader to register the current key"), "\(r.stderr)")
        #expect(r.reader == [0], "one touch: \(r.reader)")
        expectInStep(passcode: pc)
    }
}

private func accepts(_ path: String) -> Bool { (try? UnixSocket.connect(path: path)) != nil }
