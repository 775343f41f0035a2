internal import VaultSystem
internal import FoundationEssentials

/// What serves an SSH agent socket, for `vault doctor`: nothing (`SSH_AUTH_SOCK` unset, no socket,
/// nobody listening), vault's agent, or another one (OpenSSH's ssh-agent, gnome-keyring, ...).
///
/// The server is the process `SO_PEERCRED` names: Linux records the listener's credentials at
/// `listen`, and vault's detached agent listens again once it runs (`UnixSocket.listenAgain`), so
/// its own pid is what a client sees; OpenSSH's ssh-agent listens before it forks, so its pid is
/// that of a process gone. That process is known by its executable (`/proc/PID/exe`, readable for
/// a dumpable process of the same uid, or to root) or else by its name (`/proc/PID/comm`, readable
/// for every process, a not-dumpable agent too). A process of the user can take any name: this is
/// a diagnosis, never a decision about a key. One `REQUEST_IDENTITIES` then says whether it speaks
/// the agent protocol and how many keys it offers; its reply is bounded (`AgentLimit.message`) and
/// must come within `timeout`.
public struct AgentProbe: Sendable, Equatable {
    /// What answers.
    public enum State: String, Sendable {
        /// vault's agent (`vault ssh-agent`, `vault-ssh-agent`).
        case vault
        /// Another program answers there.
        case other
        /// `SSH_AUTH_SOCK` is not set.
        case unset
        /// Nothing answers: no such socket, or nobody listens on it.
        case dead
    }

    /// The socket asked (nil when unset).
    public let socket: String?
    /// What answers there.
    public let state: State
    /// The pid `SO_PEERCRED` names, when the socket answered.
    public let pid: Int32?
    /// The server's executable, or its process name when the executable cannot be read; nil
    /// when that process has exited (a server that forked after it bound the socket).
    public let program: String?
    /// The identities it offers, when it answered `REQUEST_IDENTITIES`.
    public let keys: Int?
    /// One line saying what was found.
    public let detail: String

    /// The name of vault's agent program (also its `comm`: 15 characters fit).
    static let vaultAgentName = "vault-ssh-agent"

    /// Asks the socket at `socket` (normally `$SSH_AUTH_SOCK`): never throws, every failure is a
    /// state (`dead` for a missing or refusing socket). Waits at most `timeout` per read or write.
    public static func probe(socket: String?, timeout: Double = 2) -> AgentProbe {
        guard let socket, !socket.isEmpty else {
            return AgentProbe(socket: nil, state: .unset, pid: nil, program: nil, keys: nil, detail: "SSH_AUTH_SOCK is not set")
        }
        func dead(_ why: String) -> AgentProbe {
            AgentProbe(socket: socket, state: .dead, pid: nil, program: nil, keys: nil, detail: why)
        }
        do throws(SystemError) {
            let status = try FileStatus.of(socket, followingLinks: true)
            guard status.kind == .socket else { return dead("not a socket") }
        } catch {
            return dead(error.isNotFound ? "no such socket" : error.reason)
        }
        let connection: UnixSocket
        do throws(SystemError) {
            connection = try UnixSocket.connect(path: socket)
        } catch {
            return dead(error.isConnectionRefused ? "nobody listens on it (a stale socket)" : error.reason)
        }
        let peer = try? connection.peerCredentials()
        let pid = peer.map(\.pid).flatMap { $0 > 0 ? $0 : nil }
        let program = pid.flatMap(programName(of:))
        let keys = identities(connection, timeout: timeout)
        let isVault = program.map { PathText.lastComponent(of: $0).hasPrefix(vaultAgentName) } ?? false
        var parts: [String] = []
        if let pid { parts.append("pid \(pid)") }
        if let peer, peer.uid != ProcessIdentity.uid { parts.append("uid \(peer.uid)") }
        parts.append(keys.map { $0 == 1 ? "1 key" : "\($0) keys" } ?? "no answer to a list of keys")
        let about = parts.joinedText(separator: ", ")
        if isVault && peer?.uid == ProcessIdentity.uid {
            return AgentProbe(socket: socket, state: .vault, pid: pid, program: program, keys: keys, detail: "vault's agent (\(about))")
        }
        let who: String
        if let program {
            who = program
        } else if pid != nil {
            who = "an agent whose process that bound the socket has exited (OpenSSH's ssh-agent forks so)"
        } else {
            who = "an agent of unknown pid"
        }
        return AgentProbe(socket: socket, state: .other, pid: pid, program: program, keys: keys, detail: "\(who) (\(about))")
    }

    /// `/proc/PID/exe` (without " (deleted)"), else `/proc/PID/comm`; nil for a process gone.
    static func programName(of pid: Int32) -> String? {
        if let exe = try? ProcessIdentity.executable(of: pid) {
            return exe.hasSuffix(" (deleted)") ? String(exe.dropLast(10)) : exe
        }
        guard let bytes = try? FileDescriptor.open("/proc/\(pid)/comm", .readOnly).readAll(limit: 64) else { return nil }
        let name = String(decoding: bytes, as: UTF8.self).trimmed()
        return name.isEmpty ? nil : name
    }

    /// The number of identities the agent lists (`SSH_AGENTC_REQUEST_IDENTITIES`), or nil when it
    /// does not answer with `SSH_AGENT_IDENTITIES_ANSWER` within `timeout`.
    static func identities(_ connection: borrowing UnixSocket, timeout: Double) -> Int? {
        do throws(SystemError) {
            try connection.setReceiveTimeout(seconds: timeout)
            try connection.setSendTimeout(seconds: timeout)
            try connection.sendAll([0, 0, 0, 1, AgentMessage.requestIdentities])
            let header = try connection.receiveExactly(4)
            guard header.count == 4 else { return nil }
            let length = header.reduce(0) { $0 << 8 | Int($1) }
            guard length >= 5, length <= AgentLimit.message else { return nil }
            // The count and no more: the keys themselves are not read.
            let start = try connection.receiveExactly(5)
            guard start.count == 5, start[0] == AgentMessage.identitiesAnswer else { return nil }
            return start[1...].reduce(0) { $0 << 8 | Int($1) }
        } catch {
            return nil
        }
    }
}
