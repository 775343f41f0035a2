internal import VaultKit
internal import VaultSystem
internal import VaultWire
internal import FoundationEssentials

/// Where the agent's socket lives: `$XDG_RUNTIME_DIR/vault/agent.sock`, else
/// `/tmp/vault-UID/agent.sock`, else (that name taken by another user) the state folder's `run/`.
public enum AgentPaths {
    /// The private folder holding the socket. Without `XDG_RUNTIME_DIR`, `/tmp/vault-UID` unless
    /// someone else already owns that name (anyone can create it first): then a folder under the
    /// user's own state folder, which no one else can squat.
    public static func folder(_ environment: [String: String], temporaryRoot: String = "/tmp") -> String {
        if let r = environment["XDG_RUNTIME_DIR"], r.hasPrefix("/") { return r + "/vault" }
        let shared = temporaryRoot + "/vault-\(ProcessIdentity.uid)"
        if let st = try? FileStatus.of(shared), st.owner != ProcessIdentity.uid || st.kind != .directory {
            return EmbeddedKeyAuthority.defaultFolder(environment: environment) + "/run"
        }
        return shared
    }

    /// The socket.
    public static func socketPath(_ environment: [String: String]) -> String {
        folder(environment) + "/agent.sock"
    }

    /// The agent's lock beside its socket (`agent.sock.lock`): held by the agent of `socketPath`
    /// for its life; only its holder binds or removes the socket. It records the holder's pid.
    public static func lockPath(of socketPath: String) -> String {
        socketPath + ".lock"
    }

    /// The lock a `vault` holds while it starts an agent on `socketPath` (`agent.sock.start.lock`),
    /// so two `vault unlock`s at once start one.
    public static func startLockPath(of socketPath: String) -> String {
        socketPath + ".start.lock"
    }

    /// The folder of a socket path.
    static func folder(of socketPath: String) -> String {
        PathText.folder(of: socketPath)
    }

    /// Opens (creating) a lock file of the agent's folder.
    /// - Throws: `.io` naming it.
    static func openLock(_ path: String) throws -> FileLock {
        do { return try FileLock(path: path) } catch { throw VaultError.io(path: path, "\(error)") }
    }

    /// Checks that `folder` is a private folder of this user.
    /// - Throws: `.insecurePermissions` or `.io` naming the folder.
    static func checkPrivate(_ folder: String) throws {
        do {
            try PrivateFiles.check(folder, isDirectory: true)
        } catch let e where e.isInsecure {
            throw VaultError.insecurePermissions(path: folder, isDirectory: true)
        } catch {
            throw VaultError.io(path: folder, error.message)
        }
    }
}

/// The per-user agent: holds unlocked vaults in guarded memory and answers requests over a Unix
/// socket, to its own uid only (`SO_PEERCRED`). Each connection has its own thread, a 10 s
/// deadline to send a whole request once it began, 10 s (and a second per MiB) to take a reply, and is closed
/// after a refused frame; the handler's lock is held only while a request is answered, so one
/// slow or silent peer holds up nobody else. It never sends a vault key out.
///
/// One agent per socket: the agent holds `SOCKET.lock` (``AgentPaths/lockPath(of:)``) for its
/// life, and only the holder binds or removes the socket. An agent whose socket file is removed or
/// replaced (another inode at its path) ends its sessions, wiping their keys, and exits: its
/// sessions would be out of reach of `vault lock --all`.
///
/// Connections are admitted per peer process (the pid `SO_PEERCRED` gives): at most
/// `AgentLimits.connectionsPerProcess` each and `AgentLimits.connections` in all, the last
/// `AgentLimits.connectionReserve` of them only for a process that holds none yet.
public final class AgentServer: @unchecked Sendable {
    /// How a run of the server ended.
    public enum Ending: Equatable, Sendable {
        /// ``stop()`` was called.
        case stopped
        /// `exitIdle` seconds passed without a session.
        case idle
        /// Another agent answers on the socket: this one bound nothing and served nobody.
        case anotherAgentServes
        /// The socket file was removed or replaced: every session was ended, its key wiped.
        case socketLost
    }

    /// The socket path.
    public let socketPath: String
    /// Seconds without any session after which the agent exits (0: never).
    public let exitIdle: Double
    /// The sessions and requests.
    public let handler: AgentRequestHandler
    /// Seconds a peer has to send the rest of a request once its first byte arrived.
    public let requestDeadline: Double
    /// Seconds a peer has to take a reply (and a second more per MiB).
    public let replyDeadline: Double
    /// Seconds a starting server waits for the holder of the socket's lock to end.
    public let startWait: Double
    private let server: FrameServer<AgentWire>
    private let state = ThreadLock()
    private var connections = 0
    private var connectionsOfProcess: [Int32: Int] = [:]

    /// A server on `socketPath`; `exitIdle` is clamped to 0 (never) or 1 s ... 7 days.
    /// The deadlines are `AgentLimits.requestSeconds`, `.replySeconds` and `.startSeconds` but for tests.
    public init(socketPath: String, exitIdle: Double = 0, handler: AgentRequestHandler? = nil,
                requestDeadline: Double = AgentLimits.requestSeconds, replyDeadline: Double = AgentLimits.replySeconds,
                startWait: Double = AgentLimits.startSeconds) {
        self.socketPath = socketPath
        self.exitIdle = exitIdle > 0 ? AgentLimits.clamp(exitIdle, fallback: 0) : 0
        self.handler = handler ?? AgentRequestHandler(uid: ProcessIdentity.uid, pid: ProcessIdentity.pid)
        self.requestDeadline = AgentLimits.clamp(requestDeadline, to: 0.05...AgentLimits.requestSeconds, fallback: AgentLimits.requestSeconds)
        self.replyDeadline = AgentLimits.clamp(replyDeadline, to: 0.05...AgentLimits.replySeconds, fallback: AgentLimits.replySeconds)
        self.startWait = AgentLimits.clamp(startWait, to: 0.05...AgentLimits.startSeconds, fallback: AgentLimits.startSeconds)
        server = FrameServer(socketPath: socketPath, frameLimit: AgentLimits.requestFrame, replyDeadline: self.replyDeadline,
                             threadName: "vault-agent connection")
    }

    /// Makes this process fit to hold keys: not dumpable and no core file, the descriptors the
    /// starting process left open closed (holding its pipes would keep them from ending), and
    /// `SIGPIPE` ignored. For the agent's own process only, never a test's.
    /// - Throws: `.failure` when core dumps cannot be turned off.
    public static func hardenProcess() throws {
        ProcessHardening.closeInheritedDescriptors()
        do { try ProcessHardening.disableCoreDumps() } catch {
            throw VaultError.failure("the agent cannot turn off core dumps: \(error.reason)")
        }
        ignoreBrokenPipe()
    }

    /// Asks `run` to return (within half a second) and every connection to close.
    public func stop() {
        server.stop()
    }

    private var isStopped: Bool { server.isStopped }

    /// How many connections are being served.
    public var connectionCount: Int { state.withLock { connections } }

    /// How many connections of the peer process `pid` are being served.
    public func connectionCount(of pid: Int32) -> Int { state.withLock { connectionsOfProcess[pid] ?? 0 } }

    /// Takes the socket's lock, binds the socket and serves until stopped, until `exitIdle`
    /// seconds pass without a session, or until the socket file is removed or replaced (checked
    /// every `AgentLimits.socketCheckSeconds` and at each connection; the sessions are then
    /// ended). Returns at once when another agent answers on the socket; while the lock's holder
    /// does not answer (its socket is gone: it is ending), waits for it at most `startWait`.
    /// - Throws: `.insecurePermissions` or `.io` for the folder, the lock or the socket;
    ///   `.failure` when the lock's holder neither answers nor ends in time.
    @discardableResult
    public func run() throws -> Ending {
        let folder = AgentPaths.folder(of: socketPath)
        do { try PrivateFiles.makeFolder(folder) } catch { throw VaultError.io(path: folder, error.reason) }
        try AgentPaths.checkPrivate(folder)
        let lockPath = AgentPaths.lockPath(of: socketPath)
        let lock = try AgentPaths.openLock(lockPath)
        defer { lock.unlock() }
        var answered = false
        let taken: Bool
        do {
            taken = try lock.exclusive(waitingAtMost: startWait) {
                answered = FrameServer<AgentWire>.someoneAnswers(socketPath)
                return answered || isStopped
            }
        } catch {
            throw VaultError.io(path: lockPath, "\(error)")
        }
        guard taken else {
            if answered { return .anotherAgentServes }
            if isStopped { return .stopped }
            let holder = lock.recorded().flatMap { Int32($0.trimmed()) }
            throw VaultError.failure("another agent\(holder.map { " (pid \($0))" } ?? "") holds \(lockPath) and does not answer on \(socketPath)",
                                     hint: holder.map { "stop it with 'kill \($0)', then unlock again" })
        }
        try? lock.record("\(handler.pid)\n")
        // Under the lock no other agent binds or removes the socket: a socket that answers is a
        // server that takes no lock (an agent of an older vault), one that refuses is stale.
        if FrameServer<AgentWire>.someoneAnswers(socketPath) { return .anotherAgentServes }
        let listener: FrameServer<AgentWire>.Listener
        do {
            listener = try server.bind()
        } catch .anotherServerAnswers {
            return .anotherAgentServes
        } catch .failed(let error) {
            throw VaultError.io(path: socketPath, error.reason)
        }
        var idle = false
        let ending = server.serve(listener, checkEvery: AgentLimits.socketCheckSeconds, between: {
            handler.sweepSessions()
            idle = exitIdle > 0 && handler.secondsWithoutSession() > exitIdle
            return !idle
        }, admit: admit, connection: { [self] connection, peer in serve(connection, peer: peer) })
        switch ending {
        case .stopped: return .stopped
        case .ended: return .idle
        case .socketLost:
            stop()
            handler.endAllSessions()
            return .socketLost
        }
    }

    /// Admits a peer, or refuses it: a peer of another uid, a process at its own budget, or the
    /// agent at its total (the reserve kept for newcomers).
    private func admit(_ peer: PeerCredentials) -> Admission {
        guard peer.uid == handler.uid else {
            return .refuse(.failure("refused: the agent serves only uid \(handler.uid)"))
        }
        return state.withLock {
            let held = connectionsOfProcess[peer.pid] ?? 0
            if held >= AgentLimits.connectionsPerProcess {
                return .refuse(.failure("refused: one process holds at most \(AgentLimits.connectionsPerProcess) connections to the agent",
                                        hint: "close the connections process \(peer.pid) holds"))
            }
            if connections >= AgentLimits.connections {
                return .refuse(.failure("refused: the agent serves at most \(AgentLimits.connections) connections at once"))
            }
            if held > 0, connections >= AgentLimits.connections - AgentLimits.connectionReserve {
                return .refuse(.failure("refused: the agent's last \(AgentLimits.connectionReserve) connections are kept for processes that hold none"))
            }
            connections += 1
            connectionsOfProcess[peer.pid] = held + 1
            return .admit(release: { [self] in
                state.withLock {
                    connections -= 1
                    let left = (connectionsOfProcess[peer.pid] ?? 1) - 1
                    connectionsOfProcess[peer.pid] = left > 0 ? left : nil
                }
            })
        }
    }

    /// Sends one refusal and closes: the peer's unread input is dropped, never drained.
    private func refuse(_ connection: AgentConnection, _ error: VaultError) {
        connection.refuse(error, within: replyDeadline)
    }

    /// One connection, on its own thread, until the peer closes, idles out, misses a deadline or
    /// sends a frame that is refused.
    private func serve(_ connection: AgentConnection, peer: PeerCredentials) {
        // The executable is read once, now: the peer is connected, so its pid is still its own.
        let requester = Requester.peer(uid: peer.uid, pid: peer.pid)
        var staging = ImportStaging()
        // A connection that moved a large reply (a listing's pages, an export) leaves free heap
        // behind: handed back to the kernel when it ends, not after every request.
        var large = false
        defer {
            handler.discard(&staging)
            if large { ProcessMemory.returnFreePages() }
        }
        while true {
            guard let frame = connection.nextRequest(requestDeadline: requestDeadline, idleSeconds: AgentLimits.connectionIdleSeconds,
                                                     replySeconds: replyDeadline, while: { !isStopped }) else { return }
            let request: AgentRequest
            do {
                request = try AgentCodec.request(frame)
            } catch {
                return refuse(connection, error)
            }
            // The master key of an unlock: its ordinary-memory copy is wiped once answered.
            var (reply, tail) = frame.withTailCopy { handler.respond(request, key: $0, from: requester, staging: &staging) }
            // The tail may hold released secrets: this copy is wiped too, not only the frame's.
            let sent = connection.send(AgentCodec.frame(reply, tail: tail), within: replyDeadline)
            if tail.count >= 1 << 16 { large = true }
            wipe(&tail)
            guard sent else { return }
        }
    }
}
