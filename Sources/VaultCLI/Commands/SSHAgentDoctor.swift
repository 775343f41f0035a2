import VaultSSH
internal import VaultKit
internal import FoundationEssentials

/// `vault doctor`'s SSH agent part: what `SSH_AUTH_SOCK` reaches (VaultSSH's `AgentProbe`), and how
/// to switch to vault's agent when it is not that one: the user unit `vault-ssh-agent.service`,
/// which listens on `$XDG_RUNTIME_DIR/vault/ssh-agent.sock`.
extension SSHAgentCommand {
    /// What doctor prints of the SSH agent: the probe, its line, a hint, the JSON object.
    struct DoctorReport {
        let probe: AgentProbe
        let line: String
        let hint: String?
        let json: [String: Any]
    }

    /// The unit's socket for `environment`, or its spelling when XDG_RUNTIME_DIR is not set.
    static func unitSocket(_ environment: [String: String]) -> String {
        (environment["XDG_RUNTIME_DIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "$XDG_RUNTIME_DIR") + "/vault/ssh-agent.sock"
    }

    static func doctorReport(_ environment: [String: String]) -> DoctorReport {
        let probe = AgentProbe.probe(socket: environment["SSH_AUTH_SOCK"])
        let unit = unitSocket(environment)
        let setLine = "export SSH_AUTH_SOCK=\"$XDG_RUNTIME_DIR/vault/ssh-agent.sock\" (in ~/.profile)"
        let enable = "systemctl --user enable --now vault-ssh-agent.service"
        // When SSH_AUTH_SOCK is not vault's: whether the unit's socket is served by vault already.
        let unitServes = probe.state != .vault && !unit.hasPrefix("$") && AgentProbe.probe(socket: unit).state == .vault
        let line: String
        switch probe.state {
        case .vault: line = probe.detail
        case .other: line = "another agent: \(probe.detail)"
        case .unset: line = "not set: ssh uses no agent"
        case .dead: line = "nothing answers: \(probe.detail)"
        }
        let hint: String?
        if probe.state == .vault {
            hint = nil
        } else if unitServes {
            hint = "vault's agent listens on \(unit): " + setLine
        } else {
            hint = "for vault's agent: " + enable + ", then " + setLine
        }
        var json: [String: Any] = ["state": probe.state.rawValue, "detail": probe.detail, "unit_socket": unit,
                                   "socket": probe.socket.map { $0 as Any } ?? JSONNull()]
        json["pid"] = probe.pid.map { Int($0) as Any } ?? JSONNull()
        json["program"] = probe.program.map { $0 as Any } ?? JSONNull()
        json["keys"] = probe.keys.map { $0 as Any } ?? JSONNull()
        json["hint"] = hint.map { $0 as Any } ?? JSONNull()
        return DoctorReport(probe: probe, line: line, hint: hint, json: json)
    }
}
