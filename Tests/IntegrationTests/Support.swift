import Foundation
import Testing

/// What a run of the built binary printed and how it ended.
struct RunResult {
    var stdout: String
    var stderr: String
    var status: Int32
    /// With `Sandbox.vault(_:reader:)`: the exit status of each `virtual-reader` run, in order
    /// (137 when it was killed because the vault never took it).
    var reader: [Int32] = []
}

/// The package root, from this file's path.
let packageRoot: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

/// The built `vault` binary (`swift build` puts it next to the tests), or `VAULT_BINARY`.
let vaultBinary: String = {
    if let b = ProcessInfo.processInfo.environment["VAULT_BINARY"] { return b }
    let here = Bundle.main.bundleURL.deletingLastPathComponent().appendingPathComponent("vault").path
    if FileManager.default.isExecutableFile(atPath: here) { return here }
    return packageRoot + "/.build/debug/vault"
}()

/// Runs a program with `stdin` and extra descriptors (fd -> content), reading stdout and stderr
/// while it runs, and waits for it.
///
/// `timeLimit` kills it (SIGKILL, status 137) when it runs longer; `onStderr` sees all of stderr so
/// far each time more arrives.
func spawn(_ path: String, _ args: [String], env: [String: String], stdin: String = "",
           fds: [Int32: String] = [:], argv0: String? = nil, stdoutFD: Int32? = nil,
           timeLimit: Double? = nil, onStderr: ((String) -> Void)? = nil) -> RunResult {
    ignoreBrokenPipes()
    // O_CLOEXEC: tests run in parallel, and a pipe end leaked into another test's child (or an
    // agent it starts) would keep this test from ever seeing end of file.
    func makePipe() -> (Int32, Int32) {
        var p: [Int32] = [0, 0]
        precondition(pipe(&p) == 0)
        _ = fcntl(p[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(p[1], F_SETFD, FD_CLOEXEC)
        return (p[0], p[1])
    }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    var toClose: [Int32] = []
    var writes: [(Int32, String)] = []
    let (inR, inW) = makePipe()
    posix_spawn_file_actions_adddup2(&actions, inR, 0)
    writes.append((inW, stdin)); toClose.append(inR)
    let (outR, outW) = makePipe()
    // `stdoutFD`: the child writes there (a full disk, a closed pipe) instead of to us.
    posix_spawn_file_actions_adddup2(&actions, stdoutFD ?? outW, 1); toClose.append(outW)
    let (errR, errW) = makePipe()
    posix_spawn_file_actions_adddup2(&actions, errW, 2); toClose.append(errW)
    for (fd, content) in fds {
        let (r, w) = makePipe()
        posix_spawn_file_actions_adddup2(&actions, r, fd)
        writes.append((w, content)); toClose.append(r)
    }
    // POSIX_SPAWN_SETSID: no controlling terminal, so no prompt can appear.
    var attr = childAttributes(newSession: true)
    defer { posix_spawnattr_destroy(&attr) }
    let argv = ([argv0 ?? path] + args).map { strdup($0) } + [nil]
    let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
    argv.forEach { free($0) }
    envp.forEach { free($0) }
    toClose.forEach { close($0) }
    precondition(rc == 0, "spawn \(path) failed: \(rc)")
    // The extra descriptors (a passcode: a few bytes, never more than a pipe holds) first: the
    // child may read one before it reads standard input, which can be larger than a pipe holds.
    for (fd, content) in writes.dropFirst() + writes.prefix(1) {
        _ = content.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
    var out = [UInt8](), err = [UInt8]()
    var open: Set<Int32> = [outR, errR]
    if stdoutFD != nil { open.remove(outR); close(outR) }
    let deadline = timeLimit.map { Date(timeIntervalSinceNow: $0) }
    var killed = false
    while !open.isEmpty {
        var pfds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        _ = poll(&pfds, nfds_t(pfds.count), deadline == nil ? 1000 : 100)
        for p in pfds where p.revents != 0 {
            var buf = [UInt8](repeating: 0, count: 65536)
            let n = read(p.fd, &buf, buf.count)
            if n <= 0 { open.remove(p.fd); close(p.fd) } else if p.fd == outR { out += buf[0..<n] } else {
                err += buf[0..<n]
                onStderr?(String(decoding: err, as: UTF8.self))
            }
        }
        if let deadline, !killed, Date() > deadline {
            kill(pid, SIGKILL)
            killed = true
        }
    }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let code: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return RunResult(stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self), status: code)
}

/// A temporary VAULT_HOME and a `vault` runner bound to it.
final class Sandbox {
    let home: String
    var env: [String: String]
    static let passcode = "correct horse battery"
    /// The socket of the virtual reader chosen with `useVirtualReader(_:)`.
    private(set) var readerSocket = ""

    init() {
        home = NSTemporaryDirectory() + "vault-it-" + UUID().uuidString.prefix(8)
        try? FileManager.default.createDirectory(atPath: home + "/run", withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        chmod(home, 0o700)
        env = ["VAULT_HOME": home + "/vaults", "HOME": home, "XDG_STATE_HOME": home + "/state",
               "XDG_RUNTIME_DIR": home + "/run", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
    }
    deinit {
        // An agent started by `vault unlock` in this sandbox goes with it.
        _ = spawn("/usr/bin/pkill", ["-f", "agent --socket \(home)/"], env: ["PATH": "/usr/bin:/bin"])
        try? FileManager.default.removeItem(atPath: home)
        if !readerSocket.isEmpty && !readerSocket.hasPrefix(home + "/") { unlink(readerSocket) }
    }

    /// Makes libfprint in the `vault` runs see exactly one virtual reader of `driver`
    /// (`virtual_device`, `virtual_device_storage` or `virtual_image`), listening on a socket of its own.
    func useVirtualReader(_ driver: String) {
        let variables = ["virtual_device": "FP_VIRTUAL_DEVICE", "virtual_device_storage": "FP_VIRTUAL_DEVICE_STORAGE",
                         "virtual_image": "FP_VIRTUAL_IMAGE"]
        guard let variable = variables[driver] else { preconditionFailure("no virtual driver \(driver)") }
        var socket = home + "/r.sock"
        // sockaddr_un holds 108 bytes: with a long TMPDIR the socket goes to /tmp.
        if socket.utf8.count > 100 { socket = "/tmp/vault-it-" + UUID().uuidString.prefix(8) + ".sock" }
        readerSocket = socket
        for v in variables.values { env[v] = nil }
        env[variable] = socket
        env["FP_DRIVERS_WHITELIST"] = driver
    }

    /// Runs `vault args` while a `ReaderFeed` plays `steps` on the virtual reader from another thread,
    /// then gives the feed `grace` seconds to finish (a step the vault never takes is killed then).
    /// The vault itself is killed after `timeLimit` seconds, so a hang fails instead of blocking.
    func vault(_ args: [String], passcode: String? = nil, stdin: String = "", fds: [Int32: String] = [:],
               reader steps: [ReaderStep], grace: Double = 5, timeLimit: Double = 60) -> RunResult {
        precondition(!readerSocket.isEmpty, "call useVirtualReader first")
        var all = args, fds = fds
        if let passcode {
            all += ["--passcode-fd", "3"]
            fds[3] = passcode + "\n"
        }
        let feed = ReaderFeed(socket: readerSocket, env: env, steps: steps, log: home + "/virtual-reader.log")
        var r = spawn(vaultBinary, all, env: env, stdin: stdin, fds: fds, timeLimit: timeLimit,
                      onStderr: { feed.stderrChanged($0) })
        r.reader = feed.finish(grace: grace)
        return r
    }

    /// Runs `vault args`; `passcode` goes in on fd 3 with `--passcode-fd 3`.
    @discardableResult
    func vault(_ args: [String], passcode: String? = nil, stdin: String = "", fds: [Int32: String] = [:]) -> RunResult {
        var all = args, fds = fds
        if let passcode {
            all += ["--passcode-fd", "3"]
            fds[3] = passcode + "\n"
        }
        return spawn(vaultBinary, all, env: env, stdin: stdin, fds: fds)
    }

    /// `vault init` with a cheap KDF; returns the recovery key.
    @discardableResult
    func initVault(_ name: String = "default", extra: [String] = []) -> String {
        let r = vault(["init", "--vault", name, "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint"] + extra,
                      passcode: Sandbox.passcode)
        #expect(r.status == 0, "init failed: \(r.stderr)")
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

extension Sandbox {
    /// A sandbox with libfprint's virtual_device reader whose default vault (cheap KDF) has
    /// 'alice' enrolled and bound by `vault init`.
    static func withEnrolledFinger(sourceLocation: SourceLocation = #_sourceLocation) -> Sandbox {
        let box = Sandbox()
        box.useVirtualReader("virtual_device")
        let r = box.vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: Sandbox.passcode,
                          reader: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(r.status == 0, "init: \(r.stderr)", sourceLocation: sourceLocation)
        return box
    }
}

/// Parses a JSON object printed by the binary.
func json(_ text: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
}

/// Starts a program without waiting: stdout and stderr go to /dev/null, `fds` are fed from pipes.
/// Returns its pid; reap it with `waitpid`.
func start(_ path: String, _ args: [String], env: [String: String], fds: [Int32: String] = [:]) -> pid_t {
    start(path, args, env: env, fds: fds, output: nil)
}

/// A program that ends before reading what a test feeds it (a usage error, a vault that exists)
/// closes its end of the pipe: the test's write must fail with EPIPE, not kill the whole test
/// process with SIGPIPE. Children get SIGPIPE back (`childAttributes`).
func ignoreBrokenPipes() {
    signal(SIGPIPE, SIG_IGN)
}

/// Spawn attributes that start a child as a shell would: no blocked signals, SIGINT, SIGTERM,
/// SIGHUP and SIGPIPE at their defaults. The test threads (libdispatch workers) block signals, and
/// a child would inherit that mask: Ctrl-C or SIGTERM would never arrive. Destroy after use.
func childAttributes(newSession: Bool) -> posix_spawnattr_t {
    var attr = posix_spawnattr_t()
    posix_spawnattr_init(&attr)
    var noSignals = sigset_t(), defaults = sigset_t()
    sigemptyset(&noSignals)
    sigemptyset(&defaults)
    for s in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { sigaddset(&defaults, s) }
    posix_spawnattr_setsigmask(&attr, &noSignals)
    posix_spawnattr_setsigdefault(&attr, &defaults)
    // SETSIGMASK | SETSIGDEF, and SETSID for a session without a controlling terminal.
    posix_spawnattr_setflags(&attr, Int16((newSession ? 0x80 : 0) | 0x08 | 0x04))
    return attr
}

/// Waits for `pid` and returns its exit code (128 + signal when killed).
func reap(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}

/// The built `virtual-reader` tool, next to `vault`.
let readerBinary: String = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent()
    .appendingPathComponent("virtual-reader").path

/// One thing a `ReaderFeed` does.
enum ReaderStep: Sendable {
    /// `virtual-reader device --wait 30 SOCKET COMMAND` (virtual_device, virtual_device_storage):
    /// waits for the reader to be open, sends the command, and waits until the driver took it.
    case device(String)
    /// `virtual-reader image --wait 30 SOCKET ITEM...` (virtual_image): PGM paths and options.
    case image([String])
    /// Waits (at most 30 s) until the vault has printed `text` on stderr, e.g. the scan prompt.
    case awaitStderr(String)
    /// Waits (at most 30 s) until `text` appears `count` times on stderr: the n-th scan prompt.
    case awaitStderrCount(String, Int)
}

/// Plays `ReaderStep`s on a background thread, one after the other, while a `vault` run goes on.
final class ReaderFeed: @unchecked Sendable {
    private let socket: String
    private let env: [String: String]
    private let steps: [ReaderStep]
    private let log: String
    private let cond = NSCondition()
    private var stderrSoFar = ""
    private var child: pid_t = 0
    private var cancelled = false
    private var done = false
    private var statuses: [Int32] = []

    init(socket: String, env: [String: String], steps: [ReaderStep], log: String) {
        self.socket = socket
        self.env = env
        self.steps = steps
        self.log = log
        Thread.detachNewThread { self.run() }
    }

    /// What the vault printed on stderr so far (for `.awaitStderr`).
    func stderrChanged(_ text: String) {
        cond.lock()
        stderrSoFar = text
        cond.broadcast()
        cond.unlock()
    }

    /// Waits up to `grace` seconds for the steps to end, then kills the running one and skips the
    /// rest. Returns the exit status of each `virtual-reader` run (137: killed).
    func finish(grace: Double) -> [Int32] {
        cond.lock()
        defer { cond.unlock() }
        let limit = Date(timeIntervalSinceNow: grace)
        while !done && cond.wait(until: limit) {}
        if !done {
            cancelled = true
            if child > 0 { kill(child, SIGKILL) }
            cond.broadcast()
            while !done { cond.wait() }
        }
        return statuses
    }

    /// Before a scan, waits until vault asked for it: the first scan until vault's stderr says
    /// "touch" (its prompt: at most 5 s), a later one until vault printed something since the
    /// previous (its progress or its next prompt: at most 2 s); then a moment more. A scan that
    /// reaches the virtual device before the operation that takes it has started (while the key
    /// authority opens the reader for a listing first, or reopens it between tries) is dropped
    /// with that open, and the command ends in a scan timeout instead of the result the test
    /// expects. Other commands (`INSERT`, `REMOVE`, ...) go at once: a test may need them queued
    /// before vault reads the chip.
    private func settleBeforeScan(_ seenAtLastScan: Int?) {
        cond.lock()
        let limit = Date(timeIntervalSinceNow: seenAtLastScan == nil ? 5 : 2)
        func asked() -> Bool { seenAtLastScan.map { stderrSoFar.count > $0 } ?? stderrSoFar.contains("touch") }
        while !cancelled && !asked() && cond.wait(until: limit) {}
        cond.unlock()
        usleep(150_000)
    }

    private func run() {
        var seenAtLastScan: Int?
        loop: for step in steps {
            let isScan: Bool
            switch step {
            case .device(let command): isScan = command.hasPrefix("SCAN")
            case .image: isScan = true
            default: isScan = false
            }
            if isScan { settleBeforeScan(seenAtLastScan) }
            defer {
                cond.lock()
                seenAtLastScan = isScan ? stderrSoFar.count : nil
                cond.unlock()
            }
            switch step {
            case .awaitStderr(let text):
                cond.lock()
                let limit = Date(timeIntervalSinceNow: 30)
                while !cancelled && !stderrSoFar.contains(text) && cond.wait(until: limit) {}
                let seen = stderrSoFar.contains(text)
                cond.unlock()
                if !seen { break loop }
            case .awaitStderrCount(let text, let count):
                cond.lock()
                let limit = Date(timeIntervalSinceNow: 30)
                func seen() -> Bool { stderrSoFar.components(separatedBy: text).count - 1 >= count }
                while !cancelled && !seen() && cond.wait(until: limit) {}
                let ok = seen()
                cond.unlock()
                if !ok { break loop }
            case .device(let command):
                if !tool(["device", "--wait", "30", socket, command]) { break loop }
            case .image(let items):
                if !tool(["image", "--wait", "30", socket] + items) { break loop }
            }
        }
        cond.lock()
        done = true
        cond.broadcast()
        cond.unlock()
    }

    /// Runs `virtual-reader args` (output appended to the log); false when cancelled.
    private func tool(_ args: [String]) -> Bool {
        cond.lock()
        guard !cancelled else { cond.unlock(); return false }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ([readerBinary] + args).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, readerBinary, &actions, nil, argv, envp)
        argv.forEach { free($0) }
        envp.forEach { free($0) }
        guard rc == 0 else {
            statuses.append(-1)
            cond.unlock()
            return false
        }
        child = pid
        cond.unlock()
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        cond.lock()
        child = 0
        statuses.append((status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f))
        cond.unlock()
        return true
    }
}

// MARK: runs started together (ConcurrencyTests)

/// One `vault` command of a batch run with `concurrently`: its arguments, standard input, extra
/// descriptors (fd -> content), and the passcode, fed on fd 3 with `--passcode-fd 3` when set.
struct VaultRun: Sendable {
    var args: [String]
    var stdin = ""
    var fds: [Int32: String] = [:]
    var passcode: String?

    init(_ args: [String], stdin: String = "", fds: [Int32: String] = [:], passcode: String? = nil) {
        self.args = args
        self.stdin = stdin
        self.fds = fds
        self.passcode = passcode
    }
}

/// Runs every command of `runs` at the same moment (one thread each, released together once all
/// are ready) and waits for all of them; the results come in the order of `runs`. A run still
/// going after `timeLimit` seconds is killed (status 137), so a hang fails instead of blocking.
func concurrently(_ runs: [VaultRun], env: [String: String], timeLimit: Double = 60) -> [RunResult] {
    final class Batch: @unchecked Sendable {
        let cond = NSCondition()
        var ready = 0
        var go = false
        var results: [RunResult?]
        init(_ n: Int) { results = Array(repeating: nil, count: n) }
    }
    let batch = Batch(runs.count)
    let done = DispatchGroup()
    for (i, run) in runs.enumerated() {
        done.enter()
        Thread.detachNewThread {
            var args = run.args, fds = run.fds
            if let passcode = run.passcode {
                args += ["--passcode-fd", "3"]
                fds[3] = passcode + "\n"
            }
            batch.cond.lock()
            batch.ready += 1
            batch.cond.broadcast()
            while !batch.go { batch.cond.wait() }
            batch.cond.unlock()
            let r = spawn(vaultBinary, args, env: env, stdin: run.stdin, fds: fds, timeLimit: timeLimit)
            batch.cond.lock()
            batch.results[i] = r
            batch.cond.unlock()
            done.leave()
        }
    }
    batch.cond.lock()
    while batch.ready < runs.count { batch.cond.wait() }
    batch.go = true
    batch.cond.broadcast()
    batch.cond.unlock()
    done.wait()
    return batch.results.map { $0! }
}

/// Starts a program without waiting; its stdout and stderr go to the files `output + ".out"`
/// and `output + ".err"` (created 0600; nil: /dev/null), so what a process killed mid-way printed can be read
/// after `reap`. Returns its pid.
func start(_ path: String, _ args: [String], env: [String: String], fds: [Int32: String] = [:],
           output: String?) -> pid_t {
    ignoreBrokenPipes()
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    if let output {
        posix_spawn_file_actions_addopen(&actions, 1, output + ".out", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, output + ".err", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    }
    var writes: [(Int32, String)] = [], closeAfter: [Int32] = []
    for (fd, content) in fds {
        var p: [Int32] = [0, 0]
        precondition(pipe(&p) == 0)
        _ = fcntl(p[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(p[1], F_SETFD, FD_CLOEXEC)
        posix_spawn_file_actions_adddup2(&actions, p[0], fd)
        writes.append((p[1], content)); closeAfter.append(p[0])
    }
    var attr = childAttributes(newSession: false)
    defer { posix_spawnattr_destroy(&attr) }
    let argv = ([path] + args).map { strdup($0) } + [nil]
    let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
    argv.forEach { free($0) }
    envp.forEach { free($0) }
    closeAfter.forEach { close($0) }
    precondition(rc == 0, "spawn \(path) failed: \(rc)")
    // The extra descriptors (a passcode: a few bytes, never more than a pipe holds) first: the
    // child may read one before it reads standard input, which can be larger than a pipe holds.
    for (fd, content) in writes.dropFirst() + writes.prefix(1) {
        _ = content.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
    return pid
}
