import Foundation
import Testing

/// What a run of the built binary printed and how it ended.
struct RunResult {
    var stdout: String
    var stderr: String
    var status: Int32
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
func spawn(_ path: String, _ args: [String], env: [String: String], stdin: String = "",
           fds: [Int32: String] = [:], argv0: String? = nil) -> RunResult {
    func makePipe() -> (Int32, Int32) {
        var p: [Int32] = [0, 0]
        precondition(pipe(&p) == 0)
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
    posix_spawn_file_actions_adddup2(&actions, outW, 1); toClose.append(outW)
    let (errR, errW) = makePipe()
    posix_spawn_file_actions_adddup2(&actions, errW, 2); toClose.append(errW)
    for (fd, content) in fds {
        let (r, w) = makePipe()
        posix_spawn_file_actions_adddup2(&actions, r, fd)
        writes.append((w, content)); toClose.append(r)
    }
    var attr = posix_spawnattr_t()
    posix_spawnattr_init(&attr)
    defer { posix_spawnattr_destroy(&attr) }
    posix_spawnattr_setflags(&attr, Int16(0x80)) // POSIX_SPAWN_SETSID: no controlling terminal, so no prompt can appear
    let argv = ([argv0 ?? path] + args).map { strdup($0) } + [nil]
    let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
    argv.forEach { free($0) }
    envp.forEach { free($0) }
    toClose.forEach { close($0) }
    precondition(rc == 0, "spawn \(path) failed: \(rc)")
    for (fd, content) in writes {
        _ = content.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
    var out = [UInt8](), err = [UInt8]()
    var open: Set<Int32> = [outR, errR]
    while !open.isEmpty {
        var pfds = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        _ = poll(&pfds, nfds_t(pfds.count), 1000)
        for p in pfds where p.revents != 0 {
            var buf = [UInt8](repeating: 0, count: 65536)
            let n = read(p.fd, &buf, buf.count)
            if n <= 0 { open.remove(p.fd); close(p.fd) } else if p.fd == outR { out += buf[0..<n] } else { err += buf[0..<n] }
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

    init() {
        home = NSTemporaryDirectory() + "vault-it-" + UUID().uuidString.prefix(8)
        try? FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        env = ["VAULT_HOME": home + "/vaults", "HOME": home, "XDG_STATE_HOME": home + "/state",
               "XDG_RUNTIME_DIR": home + "/run", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
    }
    deinit { try? FileManager.default.removeItem(atPath: home) }

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

/// Parses a JSON object printed by the binary.
func json(_ text: String) -> [String: Any] {
    (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
}

/// Starts a program without waiting: stdout and stderr go to /dev/null, `fds` are fed from pipes.
/// Returns its pid; reap it with `waitpid`.
func start(_ path: String, _ args: [String], env: [String: String], fds: [Int32: String] = [:]) -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    var writes: [(Int32, String)] = [], closeAfter: [Int32] = []
    for (fd, content) in fds {
        var p: [Int32] = [0, 0]
        precondition(pipe(&p) == 0)
        posix_spawn_file_actions_adddup2(&actions, p[0], fd)
        writes.append((p[1], content)); closeAfter.append(p[0])
    }
    let argv = ([path] + args).map { strdup($0) } + [nil]
    let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    var pid: pid_t = 0
    let rc = posix_spawn(&pid, path, &actions, nil, argv, envp)
    argv.forEach { free($0) }
    envp.forEach { free($0) }
    closeAfter.forEach { close($0) }
    precondition(rc == 0, "spawn \(path) failed: \(rc)")
    for (fd, content) in writes {
        _ = content.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
    return pid
}

/// Waits for `pid` and returns its exit code (128 + signal when killed).
func reap(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}
