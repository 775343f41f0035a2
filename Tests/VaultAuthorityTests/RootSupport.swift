import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// Whether this test process may create users and start processes as them.
let runningAsRoot = ProcessIdentity.effectiveUID == 0

/// The system users of the root tests: the daemon's `vault-auth` and three ordinary users, made
/// once (an existing one is reused).
enum TestUsers {
    static let daemon = "vault-auth"
    static let alice = "authd-alice"
    static let bob = "authd-bob"
    static let carol = "authd-carol"

    private static let made = Mutex(false)

    /// Creates the users that do not exist yet.
    static func ensure() throws {
        try made.withLock { done in
            guard !done else { return }
            if uid(daemon) == nil {
                _ = try runProgram("/usr/sbin/useradd", ["--system", "--no-create-home", "--home-dir", "/nonexistent",
                                                         "--shell", "/usr/sbin/nologin", daemon])
            }
            for name in [alice, bob, carol] where uid(name) == nil {
                _ = try runProgram("/usr/sbin/useradd", ["-m", "-s", "/bin/bash", name])
            }
            // Another test run may have made one at the same time: what counts is that they exist.
            for name in [daemon, alice, bob, carol] where uid(name) == nil {
                throw VaultError.failure("useradd \(name) failed")
            }
            done = true
        }
    }

    /// The uid of `name`, nil when there is no such user.
    static func uid(_ name: String) -> UInt32? {
        guard let r = try? runProgram("/usr/bin/id", ["-u", name]), r.code == 0 else { return nil }
        return UInt32(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The home folder of `name` (from /etc/passwd).
    static func home(_ name: String) -> String? {
        guard let r = try? runProgram("/usr/bin/getent", ["passwd", name]), r.code == 0 else { return nil }
        let fields = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ":", omittingEmptySubsequences: false)
        return fields.count > 5 ? String(fields[5]) : nil
    }
}

/// vault-authd started as `vault-auth` with `setpriv`, in test mode, on libfprint's
/// virtual_device (the daemon hosts the reader's socket; this root process feeds it), in folders
/// made as systemd would: RUN 0755 and STATE 0700, both the daemon's. STATE is in the test's own
/// folder unless `state` names another (on a small file system of the test's); only the former
/// is removed with the value.
final class SystemDaemon: @unchecked Sendable {
    let base: String
    let run: String
    let state: String
    let readerSocket: String
    let daemon: RunningDaemon
    var socketPath: String { run + "/socket" }

    /// `environment` and `arguments` are added to the daemon's; `capabilities` (e.g.
    /// `+dac_read_search`) become its ambient capabilities, as the unit's `AmbientCapabilities=`.
    /// `prepareState` is given the state folder before the daemon starts (to leave state in it).
    init(testMode: Bool = true, environment: [String] = [], arguments: [String] = [], capabilities: String? = nil,
         state: String? = nil, prepareState: (String) throws -> Void = { _ in }) throws {
        try TestUsers.ensure()
        base = "/tmp/authd-root-" + hexString(randomBytes(5))
        run = base + "/run"
        let stateFolder = state ?? base + "/state"
        self.state = stateFolder
        readerSocket = base + "/reader/vd.sock"
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        for (folder, mode) in [(run, "0755"), (stateFolder, "0700"), (base + "/reader", "0700")] {
            let r = try runProgram("/usr/bin/install", ["-d", "-o", TestUsers.daemon, "-g", TestUsers.daemon, "-m", mode, folder])
            guard r.code == 0 else { throw VaultError.failure("install -d \(folder): \(r.stderr)") }
        }
        try prepareState(stateFolder)
        let caps = capabilities.map { ["--inh-caps=-all,\($0)", "--ambient-caps=\($0)"] } ?? ["--inh-caps=-all"]
        let command = ["/usr/bin/setpriv", "--reuid=\(TestUsers.daemon)", "--regid=\(TestUsers.daemon)", "--init-groups"] + caps
            + ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "RUNTIME_DIRECTORY=\(run)", "STATE_DIRECTORY=\(stateFolder)",
               "FP_VIRTUAL_DEVICE=\(readerSocket)", "FP_DRIVERS_WHITELIST=virtual_device"] + environment
            + [daemonBinary] + (testMode ? ["--test-mode"] : []) + arguments
        daemon = try RunningDaemon(command: command, environment: [:], socketPath: run + "/socket", stateFolder: stateFolder, log: base + "/daemon.log")
    }

    deinit {
        daemon.stop()
        try? FileManager.default.removeItem(atPath: base)
    }

    /// Sends one command to the virtual reader (`SCAN id`, `RETRY n`...), waiting until the
    /// driver took it (the daemon has the device open only while a request needs it).
    func reader(_ command: String) throws {
        let r = try runProgram(readerBinary, ["device", "--wait", "15", readerSocket, command], timeLimit: 20)
        guard r.code == 0 else { throw VaultError.failure("virtual-reader \(command): \(r.stderr)") }
    }
}

/// The test bundle started again as an ordinary user, running `ClientChildProcess`: it drives
/// `SystemKeyAuthority` against the daemon, so the daemon sees that user's uid.
final class ClientProcess: @unchecked Sendable {
    let user: String
    let child: ChildProcess
    private let commands: Int32
    private let lines: LineReader
    private let log: String
    private var ended = false

    /// The client as `user`, an account (with its groups and home).
    convenience init(user: String, daemon: SystemDaemon) throws {
        try self.init(user: user, identity: ["--reuid=\(user)", "--regid=\(user)", "--init-groups"],
                      home: TestUsers.home(user) ?? "/nonexistent", daemon: daemon)
    }

    /// The client as `uid`, which has no account (a subordinate uid: setpriv needs none as root).
    convenience init(uidWithoutAccount uid: UInt32, daemon: SystemDaemon) throws {
        try self.init(user: "\(uid)", identity: ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups"], home: "/nonexistent", daemon: daemon)
    }

    private init(user: String, identity: [String], home: String, daemon: SystemDaemon) throws {
        self.user = user
        log = daemon.base + "/client-\(user)-\(hexString(randomBytes(3))).log"
        let bundle = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var toChild = try UnixPipe()
        var fromChild = try UnixPipe()
        child = try ChildProcess.spawn(
            path: "/usr/bin/setpriv",
            arguments: ["/usr/bin/setpriv"] + identity + ["--inh-caps=-all",
                        "/usr/bin/env", "-i", "-C", "/tmp", "PATH=/usr/bin:/bin", "HOME=\(home)",
                        "\(ClientChildProcess.variable)=1", "VAULT_AUTHD_SOCKET=\(daemon.socketPath)",
                        bundle, "--testing-library", "swift-testing", "--filter", "ClientChildProcess"],
            environment: [:],
            fileActions: [.open(0, "/dev/null", .readOnly), .open(1, log, .writeOnly, [.create, .append]), .dup2(from: 1, to: 2),
                          .dup2(from: toChild.readEnd.rawValue, to: 3), .dup2(from: fromChild.writeEnd.rawValue, to: 4)])
        try toChild.readEnd.close()
        try fromChild.writeEnd.close()
        commands = toChild.writeEnd.take()
        lines = LineReader(fd: fromChild.readEnd.take())
    }

    deinit {
        if !ended {
            send(.exit)
            let end = MonotonicClock.seconds() + 5
            while (try? child.waitNonBlocking()) == nil && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.01) }
            try? child.send(.kill)
            _ = try? child.wait()
        }
        close(commands)
        close(lines.fd)
    }

    private func send(_ command: ClientCommand) {
        guard let data = try? JSONEncoder().encode(command) else { return }
        try? writeAll(fd: commands, bytes: Array(data) + [10])
    }

    /// Runs `command`; `onNotice` sees each notice as it comes (to feed the reader), `events`
    /// collects the streamed events.
    func run(_ command: ClientCommand, timeout: Double = 60, events: ((AuthorityEvent) -> Void)? = nil,
             onNotice: (ScanNotice) throws -> Void = { _ in }) throws -> ClientResult {
        send(command)
        return try finish(timeout: timeout, events: events, onNotice: onNotice)
    }

    /// The result of the command sent last (by `start`), with its notices and events until then.
    func finish(timeout: Double = 60, events: ((AuthorityEvent) -> Void)? = nil,
                onNotice: (ScanNotice) throws -> Void = { _ in }) throws -> ClientResult {
        while true {
            guard let line = lines.next(timeout: timeout) else {
                throw VaultError.failure("the client process of \(user) did not answer: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            }
            switch try JSONDecoder().decode(ClientLine.self, from: Data(line.utf8)) {
            case .notice(let n): try onNotice(n)
            case .event(let e): events?(e)
            case .result(let r): return r
            }
        }
    }

    /// Sends `command` without waiting for its result; returns the first notice.
    func start(_ command: ClientCommand, timeout: Double = 20) throws -> ScanNotice? {
        send(command)
        guard let line = lines.next(timeout: timeout), case .notice(let n) = try JSONDecoder().decode(ClientLine.self, from: Data(line.utf8)) else {
            return nil
        }
        return n
    }

    /// SIGSTOP: every thread of it stops, its socket stays open and unread.
    func stop() throws { try child.send(Signal(rawValue: SIGSTOP)) }

    /// SIGCONT.
    func resume() throws { try child.send(Signal(rawValue: SIGCONT)) }

    /// SIGKILL, and reaps it.
    func kill() {
        try? child.send(.kill)
        _ = try? child.wait()
        ended = true
    }
}

extension ClientProcess {
    /// Enrols a finger whose scans carry `print`, feeding the reader's five stages.
    func enroll(_ print: String, on daemon: SystemDaemon, finger: String? = nil, vault: FakeVault? = nil,
                notices: (ScanNotice) -> Void = { _ in }) throws -> ClientResult {
        try run(.enroll(finger: finger, vaultID: vault?.id, proofKey: vault?.proofKey), onNotice: { notice in
            notices(notice)
            if case .enrolling(_, _, let stages) = notice {
                for _ in 0..<stages { try daemon.reader("SCAN \(print)") }
            }
        })
    }

    /// Unlocks, answering the daemon's scans with `prints` in order (the last repeats); the
    /// next key granted is taken as the slot's (`commit` false: a client that crashed before
    /// re-sealing its slot).
    func unlock(_ vault: FakeVault, on daemon: SystemDaemon, scans prints: [String], rules: PasscodeRules = relaxedRules, scanTimeout: Double = 20,
                commit: Bool = true, events: ((AuthorityEvent) -> Void)? = nil, notices: (ScanNotice) -> Void = { _ in }) throws -> ClientResult {
        var left = prints
        let r = try run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: rules, scanTimeout: scanTimeout, cancel: nil),
                        events: events, onNotice: { notice in
            notices(notice)
            if case .touchReader = notice {
                let next = left.count > 1 ? left.removeFirst() : (left.first ?? "nobody")
                try daemon.reader("SCAN \(next)")
            }
        })
        if commit, let id = r.nextKeyID { vault.key.current = id }
        return r
    }

    /// Binds `vault` with a proof of its key (`proverKey`: another key, a forgery).
    func bind(_ vault: FakeVault, rules: PasscodeRules = relaxedRules, proverKey: [UInt8]? = nil, confirm: [String] = []) throws -> ClientResult {
        let r = try run(.bind(vaultID: vault.id, slot: vault.slot, proofKey: vault.proofKey, rules: rules, proverKey: proverKey, confirm: confirm))
        if r.ok, let id = r.keyID { vault.key.current = id }
        return r
    }

    func status(_ vault: FakeVault? = nil) throws -> ClientResult {
        try run(.status(vaultID: vault?.id, slot: vault?.slot))
    }
}

let relaxedRules = PasscodeRules(afterReboot: false, intervalHours: 0)
