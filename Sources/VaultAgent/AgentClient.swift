public import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// A connection to this user's agent. Refuses an agent whose socket folder is not private or
/// that runs as another uid. Every reply is awaited with a deadline; a connection idle for a
/// minute is replaced before the next request (the agent closes idle ones after ten).
public final class AgentClient {
    /// The socket path.
    public let socketPath: String
    private var connection: AgentConnection
    private var lastUse: Double
    /// The agent's pid (from `SO_PEERCRED`).
    public private(set) var agentPID: Int32
    /// Set when the agent answered in another protocol version (an agent of an older vault
    /// still running): it cannot serve this program's requests.
    public private(set) var speaksAnotherVersion = false
    /// Set while a request is in flight and left set when it failed half-way.
    private var isBroken = false
    /// Seconds to wait for the reply to an ordinary request, and to a bulk one (listing, export,
    /// import, audit log).
    static let replySeconds: (ordinary: Double, bulk: Double) = (30, 300)
    /// A connection idle longer than this is replaced before it is used again.
    static let reconnectAfterSeconds: Double = 60

    private init(socketPath: String, connection: AgentConnection, agentPID: Int32) {
        self.socketPath = socketPath
        self.connection = connection
        self.agentPID = agentPID
        lastUse = MonotonicClock.seconds()
    }

    /// The agent answering on `socketPath`, or nil when none does (or its folder is not private,
    /// or its peer is another uid).
    public static func connect(socketPath: String) -> AgentClient? {
        guard let (box, pid) = open(socketPath) else { return nil }
        return AgentClient(socketPath: socketPath, connection: box, agentPID: pid)
    }

    /// The running agent of this user, or nil.
    public static func connect(_ environment: [String: String]) -> AgentClient? {
        connect(socketPath: AgentPaths.socketPath(environment))
    }

    private static func open(_ socketPath: String) -> (AgentConnection, Int32)? {
        guard (try? AgentPaths.checkPrivate(AgentPaths.folder(of: socketPath))) != nil,
              let socket = try? UnixSocket.connect(path: socketPath) else { return nil }
        let box = AgentConnection(socket, limit: AgentLimits.replyFrame)
        guard let peer = try? box.socket.peerCredentials(), peer.uid == ProcessIdentity.uid else { return nil }
        try? box.socket.setSendTimeout(seconds: AgentLimits.requestSeconds)
        return (box, peer.pid)
    }

    /// Sends one request and waits for its reply, at most `timeout` seconds (by default 30 s, or
    /// 300 s for a listing, an export, an import or the audit log). `key` is the master key of an `unlock`.
    /// - Throws: `.usage` for a request out of bounds (checked here, before sending);
    ///   `.sessionInvalid` when the agent stops answering or misses the deadline.
    public func send(_ request: AgentRequest, key: [UInt8] = [], timeout: Double? = nil) throws -> AgentReply {
        try exchange(request, key: key, timeout: timeout).reply
    }

    /// Sends one request and returns its reply with the reply frame's binary tail (a listing page's records).
    public func exchange(_ request: AgentRequest, key: [UInt8] = [], timeout: Double? = nil) throws -> (reply: AgentReply, tail: [UInt8]) {
        try request.validate()
        var bytes = try AgentCodec.frame(request, tail: key).encoded()
        defer { wipe(&bytes) }
        if isBroken || MonotonicClock.seconds() - lastUse > Self.reconnectAfterSeconds {
            guard let (fresh, pid) = Self.open(socketPath) else { throw Self.gone }
            connection = fresh
            agentPID = pid
            isBroken = false
        }
        // Until the whole reply is in, the connection may hold half a frame: never reused then.
        isBroken = true
        do {
            try connection.socket.sendAll(bytes)
        } catch {
            throw Self.gone
        }
        let seconds = timeout ?? (request.isBulk ? Self.replySeconds.bulk : Self.replySeconds.ordinary)
        let frame = try receiveReply(within: AgentLimits.clamp(seconds, to: 0.01...3600, fallback: Self.replySeconds.ordinary))
        isBroken = false
        lastUse = MonotonicClock.seconds()
        return (try AgentCodec.reply(frame), frame.tail)
    }

    static let gone = VaultError.sessionInvalid("ended: the agent stopped answering")

    private func receiveReply(within seconds: Double) throws -> AgentFrame {
        let deadline = MonotonicClock.seconds() + seconds
        while true {
            let frame: AgentFrame?
            do {
                frame = try connection.decoder.next()
            } catch .unsupportedVersion(let v) {
                speaksAnotherVersion = true
                throw VaultError.failure("the running agent (pid \(agentPID)) speaks agent protocol version \(v), not \(AgentFrame.version)",
                                         hint: "it was started by another version of vault: stop it with 'kill \(agentPID)', then unlock again")
            } catch {
                throw VaultError.failure("the agent's reply was refused: \(error.vaultError.message)")
            }
            if let frame { return frame }
            let left = deadline - MonotonicClock.seconds()
            guard left > 0, connection.isReadable(within: Int32(max(1, min(left * 1000, 60_000)))) == true else {
                if left > 0 { continue }
                throw VaultError.sessionInvalid("ended: the agent did not answer within \(AgentLimits.wholeSeconds(seconds.rounded(.up))) s")
            }
            guard connection.receive() else { throw Self.gone }
        }
    }

    /// Hands `vault`'s master key to the agent, opening (or replacing) its session. The key
    /// travels as the frame's binary tail and every copy outside guarded memory is wiped.
    /// - Throws: the agent's refusal (a key that does not open the vault, a rotated generation).
    /// `scope`: whom the session serves (the agent reads the opener's terminal session itself).
    public func openSession(for vault: UnlockedVault, idleSeconds: Double, hardLimitSeconds: Double, scope: SessionScope = .terminal) throws {
        let location = vault.store.location
        let request = AgentRequest.unlock(root: location.root, name: location.name, generation: vault.generation,
                                          idleSeconds: AgentLimits.clamp(idleSeconds, fallback: 120),
                                          hardLimitSeconds: AgentLimits.clamp(hardLimitSeconds, fallback: 12 * 3600), scope: scope)
        // The key goes only to an agent known to speak this protocol version.
        guard case .status = try send(.status) else { throw Self.unexpected }
        let reply = try vault.withMasterKey { key in
            var tail = key.exposedBytes()
            defer { wipe(&tail) }
            return try send(request, key: tail)
        }
        switch reply {
        case .sessionOpen: return
        case .failed(let e): throw e
        default: throw Self.unexpected
        }
    }

    static let unexpected = VaultError.failure("the agent sent an unexpected reply",
                                               hint: "stop the agent with 'vault lock --all' and unlock again")

    /// Connects to the agent, starting one first when none answers: the lean `vault-agent` next to
    /// the running program, else `vault agent`, detached, in a session of its own, with an empty
    /// environment, exiting after ten minutes without a session. One `vault` starts an agent at a
    /// time (it holds `agent.sock.start.lock` until the agent answers): another waits for that
    /// agent instead of starting its own. The agent's own lock (`agent.sock.lock`) keeps it to one
    /// agent per socket even so.
    /// - Throws: `.insecurePermissions` for a socket folder others can use, `.io` for the start
    ///   lock, `.failure` when it does not start.
    public static func ensureRunning(_ environment: [String: String]) throws -> AgentClient {
        if let c = connect(environment) { return c }
        let socketPath = AgentPaths.socketPath(environment)
        let folder = AgentPaths.folder(environment)
        do { try PrivateFiles.makeFolder(folder) } catch { throw VaultError.io(path: folder, error.reason) }
        try AgentPaths.checkPrivate(folder)
        let startLockPath = AgentPaths.startLockPath(of: socketPath)
        let starting = try AgentPaths.openLock(startLockPath)
        defer { starting.unlock() }
        var found: AgentClient?
        // Another `vault` starting one holds the lock until its agent answers: that agent is ours
        // too. One that holds it too long (stopped) is passed by: the agent's own lock still
        // keeps one agent per socket.
        _ = try? starting.exclusive(waitingAtMost: AgentLimits.startSeconds) {
            found = connect(socketPath: socketPath)
            return found != nil
        }
        if let found { return found }
        if let c = connect(socketPath: socketPath) { return c }
        let (path, arguments) = agentCommand(socketPath: socketPath)
        do {
            _ = try ChildProcess.spawn(path: path, arguments: arguments, environment: [:],
                                       fileActions: [.open(0, "/dev/null", .readOnly), .open(1, "/dev/null", .writeOnly),
                                                     .open(2, "/dev/null", .writeOnly)],
                                       newSession: true)
        } catch {
            throw VaultError.failure("could not start the agent (\(path)): \(error.reason)")
        }
        // The agent is not our child to wait for: init adopts it once we exit. It may itself wait
        // for an agent whose socket is gone to end (within a second; at most startSeconds).
        let end = MonotonicClock.seconds() + AgentLimits.startSeconds + 2
        while MonotonicClock.seconds() < end {
            if let c = connect(socketPath: socketPath) { return c }
            MonotonicClock.sleep(seconds: 0.01)
        }
        throw VaultError.failure("the agent did not start", hint: "run 'vault agent' in the foreground to see why")
    }

    /// The program and arguments that start an agent on `socketPath`.
    static func agentCommand(socketPath: String) -> (String, [String]) {
        let exe = ProcessIdentity.runningExecutable
        let lean = PathText.folder(of: exe) + "/vault-agent"
        let tail = ["--socket", socketPath, "--exit-idle", "600"]
        if FileManager.default.isExecutableFile(atPath: lean) { return (lean, [lean] + tail) }
        return (exe, [exe, "agent"] + tail)
    }
}
