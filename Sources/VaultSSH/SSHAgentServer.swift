import VaultKit
internal import VaultSystem
internal import Foundation

/// The accept loop of the SSH agent (one file, so a shared server of VaultWire can replace it):
/// each connection of the same uid (`SO_PEERCRED`) on a thread of its own, so a confirmation or
/// a slow peer never holds another; messages bounded at `AgentLimit.message`; connections
/// budgeted per peer process and in all. Between connections it expires keys and, when started
/// with a command, ends when that command's process is gone.
final class SSHAgentServer: @unchecked Sendable {
    private let listener: UnixSocket
    private let handler: AgentHandler
    private let uid: UInt32
    private let parentPID: Int32?
    private let log: (@Sendable (String) -> Void)?
    private let state = NSLock()
    private var connections = 0
    private var perProcess: [Int32: Int] = [:]
    private var stopped = false

    /// A server on an already listening socket. `parentPID`: end when this process's parent is
    /// no longer that pid (the command of `ssh-agent COMMAND` ended). `log` gets debug lines (-d).
    init(listening listener: consuming UnixSocket, handler: AgentHandler, uid: UInt32 = ProcessIdentity.uid,
                parentPID: Int32? = nil, log: (@Sendable (String) -> Void)? = nil) {
        self.listener = listener
        self.handler = handler
        self.uid = uid
        self.parentPID = parentPID
        self.log = log
    }

    /// Asks `run` to return within a second.
    func stop() { state.withLock { stopped = true } }

    /// Serves until stopped or the parent is gone.
    func run() {
        var lastReap = MonotonicClock.seconds()
        while !state.withLock({ stopped }) {
            handler.store.reap()
            if let keys = handler.vaultKeys, MonotonicClock.seconds() - lastReap > 5 {
                keys.reap()
                lastReap = MonotonicClock.seconds()
            }
            if let parentPID, ProcessIdentity.parentPID != parentPID { return }
            guard (try? Poll.isReadable(listener.rawValue, timeoutMilliseconds: 500)) == true,
                  let accepted = try? listener.accept() else { continue }
            admit(accepted)
        }
    }

    private func admit(_ socket: consuming UnixSocket) {
        guard let peer = try? socket.peerCredentials(), peer.uid == uid else {
            log?("refused a connection of another uid")
            return
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
            return
        }
        let box = SocketBox(socket)
        let program = RequestingProgram.of(pid: peer.pid)
        let thread = Thread { [self] in
            serve(box, program: program)
            state.withLock {
                connections -= 1
                let left = (perProcess[peer.pid] ?? 1) - 1
                perProcess[peer.pid] = left > 0 ? left : nil
            }
        }
        thread.name = "vault-ssh-agent connection"
        thread.start()
    }

    /// One connection: length-prefixed messages in, replies out, until the peer closes or
    /// sends a message longer than the limit.
    private func serve(_ box: SocketBox, program: RequestingProgram?) {
        defer { box.close() }
        var connection = AgentConnectionState(program: program, client: box.socket.rawValue)
        while true {
            guard var header = try? box.socket.receiveExactly(4), header.count == 4 else { return }
            let length = header.reduce(0) { $0 << 8 | Int($1) }
            wipe(&header)
            guard length > 0, length <= AgentLimit.message else {
                log?("closed a connection: a message of \(length) bytes")
                return
            }
            guard var message = try? box.socket.receiveExactly(length), message.count == length else { return }
            log?("message type \(message[0]) of \(length) bytes")
            var reply = handler.respond(message, state: &connection)
            wipe(&message)
            var w = SSHWriter()
            w.string(reply)
            wipe(&reply)
            let sent = (try? box.socket.sendAll(w.bytes)) != nil
            wipe(&w.bytes)
            guard sent else { return }
        }
    }
}

/// A connection's socket owned by a class, so it moves to its thread.
private final class SocketBox: @unchecked Sendable {
    var socket: UnixSocket
    init(_ socket: consuming UnixSocket) { self.socket = socket }
    func close() { try? socket.close() }
}
