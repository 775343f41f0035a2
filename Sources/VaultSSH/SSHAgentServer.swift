import VaultKit
internal import VaultSystem
internal import VaultWire
internal import FoundationEssentials

/// The SSH agent's server: VaultWire's shared accept loop (`SocketServer`) over connections of
/// SSH agent messages (`SSHAgentConnection`). Each connection of the same uid (`SO_PEERCRED`)
/// runs on a thread of its own, so a confirmation or a slow peer never holds another; messages
/// are bounded at `AgentLimit.message` and must arrive whole within `messageDeadline` of their
/// first byte; connections are budgeted per peer process and in all, a peer over budget or of
/// another uid getting one `SSH_AGENT_FAILURE`. Between connections it expires keys and, when
/// started with a command, ends when that command's process is gone; it also ends when its
/// socket file is removed or replaced (nobody can reach it any more).
final class SSHAgentServer: @unchecked Sendable {
    private let server: SocketServer<SSHAgentConnection>
    private var listener: SocketServer<SSHAgentConnection>.Listener?
    private let handler: AgentHandler
    private let uid: UInt32
    private let parentPID: Int32?
    private let messageDeadline: Double
    private let log: (@Sendable (String) -> Void)?
    private let state = ThreadLock()
    private var connections = 0
    private var perProcess: [Int32: Int] = [:]

    /// A server on an already listening socket (bound to its path before the agent detached).
    /// `parentPID`: end when this process's parent is no longer that pid (the command of
    /// `ssh-agent COMMAND` ended). `log` gets debug lines (-d).
    init(listening listener: consuming UnixSocket, handler: AgentHandler, uid: UInt32 = ProcessIdentity.uid,
         parentPID: Int32? = nil, messageDeadline: Double = AgentLimit.messageSeconds, log: (@Sendable (String) -> Void)? = nil) {
        server = SocketServer(socketPath: listener.path, frameLimit: AgentLimit.message, chunkBytes: 64 << 10,
                              replyDeadline: AgentLimit.replySeconds, threadName: "vault-ssh-agent connection")
        self.handler = handler
        self.uid = uid
        self.parentPID = parentPID
        self.messageDeadline = messageDeadline
        self.log = log
        self.listener = server.adopt(listener)
    }

    /// Asks `run` to return within a second, and every connection to end after its current message.
    func stop() { server.stop() }

    /// Serves until stopped, the parent is gone, or the socket file is lost; the socket is closed
    /// (and removed while its path still names it) on return.
    func run() {
        guard let listener = listener.take() else { return }
        var lastReap = MonotonicClock.seconds()
        let ending = server.serve(listener, checkEvery: 0.5, between: {
            handler.store.reap()
            if let keys = handler.vaultKeys, MonotonicClock.seconds() - lastReap > 5 {
                keys.reap()
                lastReap = MonotonicClock.seconds()
            }
            if let parentPID, ProcessIdentity.parentPID != parentPID { return false }
            return true
        }, admit: admit, connection: { [self] connection, peer in serve(connection, peer: peer) })
        if ending == .socketLost { log?("the socket was removed or replaced: ending") }
    }

    private func admit(_ peer: PeerCredentials) -> Admission {
        guard peer.uid == uid else {
            log?("refused a connection of uid \(peer.uid)")
            return .refuse(.failure("only uid \(uid) may use this agent"))
        }
        let admitted: Bool = state.withLock {
            let held = perProcess[peer.pid] ?? 0
            guard held < AgentLimit.connectionsPerProcess, connections < AgentLimit.connections else { return false }
            connections += 1
            perProcess[peer.pid] = held + 1
            return true
        }
        guard admitted else {
            log?("refused a connection of pid \(peer.pid): too many connections")
            return .refuse(.failure("too many connections"))
        }
        return .admit(release: { [self] in
            state.withLock {
                connections -= 1
                let left = (perProcess[peer.pid] ?? 1) - 1
                perProcess[peer.pid] = left > 0 ? left : nil
            }
        })
    }

    /// One connection: messages in, replies out, until the peer closes, the agent stops, or a
    /// message is over the limit or late (closed unanswered, as OpenSSH's agent closes it).
    private func serve(_ connection: SSHAgentConnection, peer: PeerCredentials) {
        var state = AgentConnectionState(program: RequestingProgram.of(pid: peer.pid), client: connection.socket.rawValue)
        while true {
            switch connection.nextMessage(deadline: messageDeadline, while: { !server.isStopped }) {
            case .message(var message):
                log?("message type \(message[0]) of \(message.count) bytes")
                var reply = handler.respond(message, state: &state)
                wipe(&message)
                let sent = connection.send(reply, within: AgentLimit.replySeconds)
                wipe(&reply)
                guard sent else { return }
            case .refused(let length):
                log?("closed a connection: a message of \(length) bytes")
                return
            case .late:
                log?("closed a connection: a message must arrive whole within \(messageDeadline) s")
                return
            case .ended:
                return
            }
        }
    }
}
