import Foundation
import Testing

/// The built `vault` run as a person runs it: in a session of its own whose controlling terminal
/// (and standard input and error) is a pseudo-terminal the test reads like a screen and types
/// into. Standard output is a pipe by default (what a script or `> file` gets), or the terminal.
///
/// `screen` is every byte the program wrote to the terminal, including what the terminal echoed
/// of what was typed: a secret that shows there was on the person's screen.
final class TerminalRun: @unchecked Sendable {
    let pid: pid_t
    let master: Int32
    private let lock = NSCondition()
    private var shown: [UInt8] = []
    private var out: [UInt8] = []
    private var ended = false
    private var outEnded = false
    private var code: Int32?

    /// Starts `vault args` (or `program`) on a fresh terminal of 40 rows by `columns` (80); `stdoutOnTerminal` sends its
    /// standard output there too; `fds` are extra descriptors fed from pipes (fd -> content).
    /// `NO_COLOR` is set unless `color`.
    init(_ args: [String], env: [String: String], program: String = vaultBinary, stdoutOnTerminal: Bool = false,
         fds: [Int32: String] = [:], color: Bool = false, columns: UInt16 = 80) {
        ignoreBrokenPipes()
        var env = env
        if !color { env["NO_COLOR"] = "1" }
        env["TERM"] = env["TERM"] ?? "xterm"
        var m: Int32 = -1, s: Int32 = -1
        var size = winsize(ws_row: 40, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0)
        precondition(openpty(&m, &s, nil, nil, &size) == 0, "openpty failed")
        _ = fcntl(m, F_SETFD, FD_CLOEXEC)
        _ = fcntl(s, F_SETFD, FD_CLOEXEC)
        var name = [CChar](repeating: 0, count: 256)
        precondition(ttyname_r(s, &name, name.count) == 0)
        let slavePath = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        master = m
        var p: [Int32] = [0, 0]
        precondition(pipe(&p) == 0)
        _ = fcntl(p[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(p[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // A session leader that opens a terminal first makes it its controlling terminal.
        posix_spawn_file_actions_addopen(&actions, 0, slavePath, O_RDWR, 0)
        posix_spawn_file_actions_adddup2(&actions, stdoutOnTerminal ? 0 : p[1], 1)
        posix_spawn_file_actions_adddup2(&actions, 0, 2)
        var closeAfter: [Int32] = [p[1], s]
        for (fd, content) in fds {
            var q: [Int32] = [0, 0]
            precondition(pipe(&q) == 0)
            _ = fcntl(q[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(q[1], F_SETFD, FD_CLOEXEC)
            posix_spawn_file_actions_adddup2(&actions, q[0], fd)
            // Written before the program starts (a pipe holds it): a program that ends without
            // reading cannot turn this write into a SIGPIPE for the test process.
            _ = content.withCString { write(q[1], $0, strlen($0)) }
            close(q[1])
            closeAfter.append(q[0])
        }
        var attr = childAttributes(newSession: true)
        defer { posix_spawnattr_destroy(&attr) }
        let argv = ([program] + args).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        var child: pid_t = 0
        let rc = posix_spawn(&child, program, &actions, &attr, argv, envp)
        argv.forEach { free($0) }
        envp.forEach { free($0) }
        closeAfter.forEach { close($0) }
        precondition(rc == 0, "spawn failed: \(rc)")
        pid = child
        let outRead = p[0], masterFD = m, childPID = child
        Thread.detachNewThread { [self] in pump(masterFD, into: \.shown, end: \.ended) }
        Thread.detachNewThread { [self] in pump(outRead, into: \.out, end: \.outEnded); close(outRead) }
        Thread.detachNewThread { [self] in
            var status: Int32 = 0
            while waitpid(childPID, &status, 0) < 0 && errno == EINTR {}
            lock.lock()
            code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
            lock.broadcast()
            lock.unlock()
        }
    }

    deinit {
        lock.lock()
        let running = code == nil
        lock.unlock()
        if running { kill(pid, SIGKILL) }
    }

    private func pump(_ fd: Int32, into buffer: ReferenceWritableKeyPath<TerminalRun, [UInt8]>,
                      end: ReferenceWritableKeyPath<TerminalRun, Bool>) {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            lock.lock()
            if n <= 0 { self[keyPath: end] = true } else { self[keyPath: buffer] += chunk[0..<n] }
            lock.broadcast()
            lock.unlock()
            if n <= 0 { return }
        }
    }

    /// Everything the terminal showed so far.
    var screen: String {
        lock.lock(); defer { lock.unlock() }
        return String(decoding: shown, as: UTF8.self)
    }

    /// Standard output so far (when it is a pipe).
    var stdout: String {
        lock.lock(); defer { lock.unlock() }
        return String(decoding: out, as: UTF8.self)
    }

    /// How much of the screen earlier `waitFor` calls consumed.
    private var cursor = 0

    /// Waits (at most `timeout` s) until the screen shows `text` after what earlier calls
    /// matched (each call consumes the screen up to its match, as `expect` does); records an
    /// issue and returns false when it never does.
    @discardableResult
    func waitFor(_ text: String, timeout: Double = 30, sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let limit = Date(timeIntervalSinceNow: timeout)
        let needle = Array(text.utf8)
        func find() -> Bool {
            guard shown.count >= cursor + needle.count, !needle.isEmpty else { return needle.isEmpty }
            var i = cursor
            while i + needle.count <= shown.count {
                if shown[i] == needle[0] && Array(shown[i..<(i + needle.count)]) == needle {
                    cursor = i + needle.count
                    return true
                }
                i += 1
            }
            return false
        }
        lock.lock()
        defer { lock.unlock() }
        while !find() {
            if ended || code != nil || !lock.wait(until: limit) {
                if find() { return true }
                Issue.record("the terminal never showed '\(text)'; it shows:\n\(String(decoding: shown, as: UTF8.self))",
                             sourceLocation: sourceLocation)
                return false
            }
        }
        return true
    }

    /// Types `text` as keys (no newline added).
    func type(_ text: String) {
        _ = text.withCString { write(master, $0, strlen($0)) }
    }

    /// Types Ctrl-C (the terminal sends SIGINT to the program).
    func interrupt() { type("\u{03}") }

    /// Whether the terminal echoes what is typed right now.
    var echoIsOn: Bool {
        var t = termios()
        guard tcgetattr(master, &t) == 0 else { return false }
        return t.c_lflag & tcflag_t(ECHO) != 0
    }

    /// Waits (at most `timeout` s) until a secret is being read: echo off with the newline still
    /// echoed, as vault's passcode and password prompts set it (the fingerprint prompt echoes
    /// nothing at all). Keys typed before that would be dropped by the prompt's flush.
    @discardableResult
    func waitForSecretPrompt(timeout: Double = 10) -> Bool {
        let limit = Date(timeIntervalSinceNow: timeout)
        while true {
            var t = termios()
            if tcgetattr(master, &t) == 0, t.c_lflag & tcflag_t(ECHO) == 0, t.c_lflag & tcflag_t(ECHONL) != 0 { return true }
            if Date() > limit { return false }
            usleep(20_000)
        }
    }

    /// Waits (at most `timeout` s) until the echo setting is `on`.
    @discardableResult
    func waitForEcho(_ on: Bool, timeout: Double = 10) -> Bool {
        let limit = Date(timeIntervalSinceNow: timeout)
        while echoIsOn != on { if Date() > limit { return false }; usleep(20_000) }
        return true
    }

    /// Waits for the program to end (killed after `timeout` s: 137) and for its output.
    func finish(timeout: Double = 60) -> Int32 {
        let limit = Date(timeIntervalSinceNow: timeout)
        lock.lock()
        while code == nil {
            if !lock.wait(until: limit) {
                kill(pid, SIGKILL)
                while code == nil { lock.wait() }
            }
        }
        // Output written just before the end is still in the pipes.
        let drain = Date(timeIntervalSinceNow: 5)
        while !outEnded && lock.wait(until: drain) {}
        let c = code!
        lock.unlock()
        usleep(100_000)
        close(master)
        return c
    }
}

/// Sends `command` to the sandbox's virtual reader (waiting until the vault opened it).
@discardableResult
func readerDo(_ box: Sandbox, _ command: String) -> Int32 {
    spawn(readerBinary, ["device", "--wait", "30", box.readerSocket, command], env: box.env, timeLimit: 40).status
}
