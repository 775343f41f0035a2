internal import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// The `vault-agent` program: `vault-agent [--socket PATH] [--exit-idle SECONDS]`.
public enum AgentMain {
    static let usage = "usage: vault-agent [--socket PATH] [--exit-idle SECONDS]"

    /// Parses the arguments (the program name first), hardens the process and serves; returns
    /// the exit code. Errors go to standard error as `vault-agent: error: ...`.
    public static func run(_ arguments: [String]) -> Int32 {
        do {
            let (socketPath, exitIdle) = try parse(Array(arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
            try serve(socketPath: socketPath, exitIdle: exitIdle)
            return 0
        } catch let e as VaultError {
            var text = "vault-agent: error: \(e.message)\n"
            if e.kind == .usage { text += usage + "\n" }
            if let h = e.hint { text += "vault-agent: hint: \(h)\n" }
            var bytes = Array(text.utf8)
            try? writeAll(fd: 2, bytes: bytes, label: "standard error")
            wipe(&bytes)
            return e.exitCode
        } catch {
            return 1
        }
    }

    /// Hardens this process and serves on `socketPath` (`vault-agent`, `vault agent`) until the
    /// server ends. Returning is a clean end: stopped, idle, or another agent already serves.
    /// - Throws: why it could not serve; `.failure` when its socket was removed or replaced (its
    ///   sessions ended, their keys wiped), so a service manager restarts it.
    public static func serve(socketPath: String, exitIdle: Double) throws {
        try AgentServer.hardenProcess()
        if try AgentServer(socketPath: socketPath, exitIdle: exitIdle).run() == .socketLost {
            throw VaultError.failure("the socket \(socketPath) was removed or replaced: every session was ended",
                                     hint: "unlock again: 'vault unlock' starts a new agent")
        }
    }

    /// The socket path and the exit-idle seconds (0: never; else clamped to 1 s ... 7 days).
    /// - Throws: `.usage` for an unknown option, a missing value, or a duration that is not a
    ///   non-negative number.
    static func parse(_ args: [String], environment: [String: String]) throws -> (String, Double) {
        var socketPath = AgentPaths.socketPath(environment)
        var exitIdle: Double = 0
        var i = 0
        while i < args.count {
            let option = args[i]
            guard ["--socket", "--exit-idle"].contains(option) else { throw VaultError.usage("unknown option '\(option)'") }
            guard i + 1 < args.count else { throw VaultError.usage("\(option) needs a value") }
            let value = args[i + 1]
            if option == "--socket" {
                guard value.hasPrefix("/") else { throw VaultError.usage("--socket expects an absolute path, not '\(value)'") }
                socketPath = value
            } else {
                guard let d = Double(value), d >= 0 else {
                    throw VaultError.usage("--exit-idle expects seconds (0: never), not '\(value)'")
                }
                exitIdle = d == 0 ? 0 : AgentLimits.clamp(d, fallback: 600)
            }
            i += 2
        }
        return (socketPath, exitIdle)
    }
}
