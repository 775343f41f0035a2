import Foundation
import VaultKit

enum SessionCommands {
    /// A duration option in seconds: plain seconds or with a unit (`90`, `90s`, `5m`, `12h`).
    static func duration(_ inv: Invocation, _ option: String, default value: Double) throws -> Double {
        guard let raw = inv.value(option) else { return value }
        guard let d = Duration.seconds(raw), d > 0 else {
            throw VaultError.usage("\(option) expects a duration like 90, 90s, 5m or 12h, not '\(raw)'")
        }
        return d
    }

    /// "2m", "12h", "45s".
    static func describe(_ seconds: Double) -> String {
        let s = Int(seconds)
        if s % 3600 == 0 { return "\(s / 3600)h" }
        if s % 60 == 0 { return "\(s / 60)m" }
        return "\(s)s"
    }

    static let lock = CommandSpec(
        name: "lock", summary: "end the unlock session of the vault (or --all): the agent wipes the key at once",
        usage: "vault lock [--all]",
        options: [.flag("--all", "end every session")],
        examples: "vault lock\nvault lock --all",
        run: { inv, ctx in
            guard let client = AgentClient.connect(ctx.environment) else {
                ctx.say("vault: no unlock session is open")
                return
            }
            var h: [String: Any] = ["op": "lock"]
            if !inv.has("--all") { h["vault"] = try location(inv, ctx).databasePath }
            let r = try client.request(h)
            let n = r["locked"] as? Int ?? 0
            ctx.say(n == 0 ? "vault: no unlock session was open" : "vault: locked \(n) session\(n == 1 ? "" : "s")")
        })

    static let agent = CommandSpec(
        name: "agent", summary: "run the unlock-session agent in the foreground (for a systemd user unit)",
        usage: "vault agent [--socket PATH] [--exit-idle D]",
        options: [
            .value("--socket", "PATH", "the socket (default $XDG_RUNTIME_DIR/vault/agent.sock)"),
            .value("--exit-idle", "D", "exit after D without any session (default: never)"),
        ],
        examples: "systemctl --user enable --now vault-agent.service",
        run: { inv, ctx in
            let path = inv.value("--socket") ?? AgentWire.socketPath(ctx.environment)
            let exitIdle = inv.value("--exit-idle") == nil ? 0 : try duration(inv, "--exit-idle", default: 0)
            try Agent(socketPath: path, exitIdle: exitIdle).run()
        })

    /// Session fields of `vault status`.
    static func statusFields(_ loc: VaultLocation, _ ctx: CommandContext) -> [String: Any] {
        guard let client = AgentClient.connect(ctx.environment),
              let r = try? client.request(["op": "status"]),
              let sessions = r["sessions"] as? [[String: Any]],
              let mine = sessions.first(where: { $0["vault"] as? String == loc.databasePath }) else {
            return ["session": ["open": false]]
        }
        return ["session": ["open": true, "idle_left": mine["idle_left"] ?? 0, "hard_left": mine["hard_left"] ?? 0,
                            "agent_pid": r["pid"] ?? 0]]
    }
}
