import FoundationEssentials
import VaultAgent
import VaultKit

enum SessionCommands {
    /// The longest duration any option takes (seven days): larger values are clamped to it, so
    /// `--timeout 1e19` or `inf` never reaches an integer conversion unbounded.
    static let longestDuration: Double = 7 * 86400

    /// A duration option in seconds: plain seconds or with a unit (`90`, `90s`, `5m`, `12h`),
    /// clamped to 1 s ... 7 days.
    /// - Throws: `.usage` for text that is not a positive duration (NaN, zero, negative).
    static func duration(_ inv: Invocation, _ option: OptionSpec, default value: Double) throws -> Double {
        guard let raw = inv[option] else { return value }
        guard let d = Duration.seconds(raw), d > 0 else {
            throw VaultError.usage("\(option.name) expects a duration like 90, 90s, 5m or 12h, not '\(raw)'")
        }
        return AgentLimits.clamp(d, to: 1...longestDuration, fallback: value)
    }

    /// "2m", "12h", "45s".
    static func describe(_ seconds: Double) -> String {
        let s = AgentLimits.wholeSeconds(seconds)
        if s % 3600 == 0 { return "\(s / 3600)h" }
        if s % 60 == 0 { return "\(s / 60)m" }
        return "\(s)s"
    }

    /// Starts the agent if needed and hands it `vault`'s key for a session (`vault unlock`).
    /// - Throws: the agent's refusal, or why it could not start.
    static func openSession(_ vault: UnlockedVault, idle: Double, hardLimit: Double, scope: SessionScope, _ ctx: CommandContext) throws {
        try AgentClient.ensureRunning(ctx.environment).openSession(for: vault, idleSeconds: idle, hardLimitSeconds: hardLimit, scope: scope)
    }

    /// The open session of `loc` that serves this process, if any (no agent is started).
    static func ownSession(_ loc: VaultLocation, _ ctx: CommandContext) -> SessionStatus? {
        guard let client = AgentClient.connect(ctx.environment),
              case .status(_, let sessions)? = try? client.send(.status) else { return nil }
        return sessions.first { $0.vault == loc.databasePath && $0.servesCaller }
    }

    /// The options of `lock`, declared once: the table lists them and the command reads them.
    enum LockOptions {
        static let all = OptionSpec.flag("--all", "end every session")
        static let json = OptionSpec.flag("--json", "print {\"locked\": N}: how many sessions ended")
    }

    static let lock = CommandSpec(
        name: "lock", summary: "end the unlock session of the vault (or --all): the agent wipes the key at once",
        usage: "vault lock [--all] [--json]",
        options: [LockOptions.all, LockOptions.json],
        examples: "vault lock\nvault lock --all",
        run: { inv, ctx in
            guard let client = AgentClient.connect(ctx.environment) else {
                if inv.has(LockOptions.json) { ctx.stdout.write(jsonText(["locked": 0])) }
                ctx.say("vault: no unlock session is open")
                return
            }
            let vault = inv.has(LockOptions.all) ? nil : try location(inv, ctx).databasePath
            switch try client.send(.lock(vault: vault)) {
            case .locked(let n):
                if inv.has(LockOptions.json) { ctx.stdout.write(jsonText(["locked": n])) }
                ctx.say(n == 0 ? "vault: no unlock session was open" : "vault: locked \(n) session\(n == 1 ? "" : "s")")
            case .failed(let e):
                throw e
            default:
                throw VaultError.failure("the agent sent an unexpected reply", hint: "stop the agent and unlock again")
            }
        })

    /// The options of `agent`, declared once: the table lists them and the command reads them.
    enum AgentOptions {
        static let socket = OptionSpec.value("--socket", "PATH", "the socket (default $XDG_RUNTIME_DIR/vault/agent.sock)")
        static let exitIdle = OptionSpec.value("--exit-idle", "D", "exit after D without any session (default: never)")
    }

    static let agent = CommandSpec(
        name: "agent", summary: "run the unlock-session agent in the foreground (for a systemd user unit)",
        usage: "vault agent [--socket PATH] [--exit-idle D]",
        options: [
            AgentOptions.socket,
            AgentOptions.exitIdle,
        ],
        examples: "systemctl --user enable --now vault-agent.service",
        run: { inv, ctx in
            let path = inv[AgentOptions.socket] ?? AgentPaths.socketPath(ctx.environment)
            let exitIdle = inv[AgentOptions.exitIdle] == nil ? 0 : try duration(inv, AgentOptions.exitIdle, default: 0)
            try AgentMain.serve(socketPath: path, exitIdle: exitIdle)
        })

    /// Session fields of `vault status`.
    static func statusFields(_ loc: VaultLocation, _ ctx: CommandContext) -> [String: Any] {
        guard let client = AgentClient.connect(ctx.environment),
              case .status(let pid, let sessions)? = try? client.send(.status),
              let mine = sessions.first(where: { $0.vault == loc.databasePath }) else {
            return ["session": ["open": false]]
        }
        guard mine.servesCaller else {
            // Open, but for another terminal: this one authenticates itself.
            return ["session": ["open": false, "other_terminal": true, "scope": mine.scope.rawValue]]
        }
        return ["session": ["open": true, "idle_left": mine.idleLeft, "hard_left": mine.hardLeft, "agent_pid": Int(pid), "scope": mine.scope.rawValue]]
    }
}
