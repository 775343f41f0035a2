import Foundation
import VaultKit

/// The desktop clipboard through `wl-copy`/`wl-paste` (Wayland) or `xclip` (X11), and a detached
/// clearer that empties it after a delay if it still holds what vault put there.
enum Clipboard {
    struct Tool {
        let copy: [String]
        let paste: [String]
    }

    /// The tool for this session, or nil.
    static func tool(_ env: [String: String]) -> Tool? {
        let path = env["PATH"] ?? "/usr/bin:/bin"
        func find(_ name: String) -> String? {
            path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
        }
        if env["WAYLAND_DISPLAY"]?.isEmpty == false, let copy = find("wl-copy"), let paste = find("wl-paste") {
            return Tool(copy: [copy], paste: [paste, "--no-newline"])
        }
        if env["DISPLAY"]?.isEmpty == false, let xclip = find("xclip") {
            return Tool(copy: [xclip, "-selection", "clipboard", "-in"], paste: [xclip, "-selection", "clipboard", "-out"])
        }
        return nil
    }

    /// The environment the tools need, and nothing else.
    static func toolEnvironment(_ env: [String: String]) -> [String: String] {
        env.filter { ["DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "PATH", "HOME"].contains($0.key) }
    }

    /// Runs `argv` with `input` on stdin (stdout captured, stderr discarded); returns (status, stdout).
    /// The value goes through a pipe, never argv.
    @discardableResult
    static func run(_ argv: [String], input: [UInt8], env: [String: String], setsid: Bool = false,
                    extraFD: (fd: Int32, bytes: [UInt8])? = nil, capture: Bool = false) throws -> (Int32, [UInt8]) {
        var inPipe: [Int32] = [0, 0], outPipe: [Int32] = [0, 0], extra: [Int32] = [0, 0]
        guard pipe(&inPipe) == 0, pipe(&outPipe) == 0, pipe(&extra) == 0 else { throw VaultError.io(path: "pipe", String(cString: strerror(errno))) }
        for fd in inPipe + outPipe + extra { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
        if capture { posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1) } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        // The tools fork a server that lives on: it must not hold our caller's output pipes.
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        if let x = extraFD { posix_spawn_file_actions_adddup2(&actions, extra[0], x.fd) }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        if setsid { posix_spawnattr_setflags(&attr, Int16(0x80)) }
        let cargv = argv.map { strdup($0) } + [nil]
        let cenv = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { cargv.forEach { free($0) }; cenv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, &attr, cargv, cenv)
        close(inPipe[0]); close(outPipe[1]); close(extra[0])
        guard rc == 0 else {
            close(inPipe[1]); close(outPipe[0]); close(extra[1])
            throw VaultError.failure("cannot run \(argv[0]): \(String(cString: strerror(rc)))")
        }
        if let x = extraFD { _ = x.bytes.withUnsafeBytes { write(extra[1], $0.baseAddress, $0.count) } }
        close(extra[1])
        _ = input.withUnsafeBytes { write(inPipe[1], $0.baseAddress, $0.count) }
        close(inPipe[1])
        if setsid { close(outPipe[0]); return (0, []) }   // detached: not ours to wait for
        var out: [UInt8] = [], buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(outPipe[0], &buf, buf.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            out += buf[0..<n]
        }
        close(outPipe[0])
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return ((status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f), out)
    }

    /// Copies `value` and starts the clearer.
    static func copy(_ value: String, clearAfter seconds: Double, _ ctx: CommandContext) throws {
        guard let tool = tool(ctx.environment) else {
            throw VaultError.failure("no clipboard: neither a Wayland session with wl-copy nor an X11 session with xclip",
                                     hint: "install wl-clipboard or xclip, or print the value with --field")
        }
        let env = toolEnvironment(ctx.environment)
        let (status, _) = try run(tool.copy, input: Array(value.utf8), env: env)
        guard status == 0 else { throw VaultError.failure("\(tool.copy[0]) failed (exit \(status))") }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        try run([exe, "clipboard-clear", "--after", String(seconds)], input: [], env: env, setsid: true,
                extraFD: (3, Array(value.utf8)))
    }

    /// The hidden command the clearer runs: waits, then empties the clipboard if it still holds the
    /// value read from descriptor 3.
    static let clearCommand = CommandSpec(
        name: "clipboard-clear", summary: "(internal) empty the clipboard after a delay if it still holds a copied secret",
        usage: "vault clipboard-clear --after SECONDS 3<value",
        options: [.value("--after", "SECONDS", "the delay")],
        examples: "vault get github --clip     # starts 'vault clipboard-clear --after 45' with the value on fd 3",
        run: { inv, ctx in
            guard let value = try SecretLine.read(fd: 3) else { return }
            let seconds = Double(inv.value("--after") ?? "45") ?? 45
            usleep(useconds_t(max(0, min(seconds, 3600)) * 1_000_000))
            guard let tool = tool(ctx.environment) else { return }
            let (status, current) = try run(tool.paste, input: [], env: toolEnvironment(ctx.environment), capture: true)
            var now = current
            defer { AgentWire.wipe(&now) }
            let held = try SecretBytes(copying: now)
            if status == 0, held.isEqual(to: value) {
                try run(tool.copy, input: [], env: toolEnvironment(ctx.environment))
            }
        })
}
