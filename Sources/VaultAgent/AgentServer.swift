internal import VaultKit
internal import VaultSystem
internal import Foundation

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

    /// The folder of a socket path.
    static func folder(of socketPath: String) -> String {
        (socketPath as NSString).deletingLastPathComponent
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

/// A socket owned by a class, so a connection can move to its own thread.
final class SocketBox: @unchecked Sendable {
    var socket: UnixSocket
    init(_ socket: consuming UnixSocket) { self.socket = socket }
}

/// The per-user agent: holds unlocked vaults in guarded memory and answers requests over a Unix
/// socket, to its own uid only (`SO_PEERCRED`). Each connection has its own thread, a 10 s
/// deadline to send a whole request once it began, 10 s (and a second per MiB) to take a reply, and is closed
/// after a refused frame; the handler's lock is held only while a request is answered, so one
/// slow or silent peer holds up nobody else. It never sends a vault key out.
public final class AgentServer: @unchecked Sendable {
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
    private let state = NSLock()
    private var stopped = false
    private var connections = 0

    /// A server on `socketPath`; `exitIdle` is clamped to 0 (never) or 1 s ... 7 days.
    /// The deadlines are `AgentLimits.requestSeconds` and `.replySeconds` but for tests.
    public init(socketPath: String, exitIdle: Double = 0, handler: AgentRequestHandler? = nil,
                requestDeadline: Double = AgentLimits.requestSeconds, replyDeadline: Double = AgentLimits.replySeconds) {
        self.socketPath = socketPath
        self.exitIdle = exitIdle > 0 ? AgentLimits.clamp(exitIdle, fallback: 0) : 0
        self.handler = handler ?? AgentRequestHandler(uid: ProcessIdentity.uid, pid: ProcessIdentity.pid)
        self.requestDeadline = AgentLimits.clamp(requestDeadline, to: 0.05...AgentLimits.requestSeconds, fallback: AgentLimits.requestSeconds)
        self.replyDeadline = AgentLimits.clamp(replyDeadline, to: 0.05...AgentLimits.replySeconds, fallback: AgentLimits.replySeconds)
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
        state.withLock { stopped = true }
    }

    private var isStopped: Bool { state.withLock { stopped } }

    /// How many connections are being served.
    public var connectionCount: Int { state.withLock { connections } }

    /// Binds the socket and serves until stopped, until `exitIdle` seconds pass without a
    /// session, or until the socket file is removed (its sessions would be out of reach of
    /// `vault lock --all`). Returns at once when another agent already answers on the socket.
    /// - Throws: `.insecurePermissions` or `.io` for the folder or the socket.
    public func run() throws {
        let folder = AgentPaths.folder(of: socketPath)
        do { try PrivateFiles.makeFolder(folder) } catch { throw VaultError.io(path: folder, error.reason) }
        try AgentPaths.checkPrivate(folder)
        let listener: SocketBox
        do {
            listener = SocketBox(try UnixSocket.listen(path: socketPath))
        } catch {
            if (try? UnixSocket.connect(path: socketPath)) != nil { return }
            throw VaultError.io(path: socketPath, error.reason)
        }
        defer {
            if (try? FileStatus.of(socketPath))?.kind == .socket { try? FileManager.default.removeItem(atPath: socketPath) }
        }
        while !isStopped {
            handler.sweepSessions()
            if exitIdle > 0, handler.secondsWithoutSession() > exitIdle { return }
            guard (try? FileStatus.of(socketPath))?.kind == .socket else {
                _ = handler.handle(.lock(vault: nil), from: Requester(uid: handler.uid, pid: handler.pid))
                return
            }
            guard (try? Poll.isReadable(listener.socket.rawValue, timeoutMilliseconds: 500)) == true,
                  let accepted = try? listener.socket.accept() else { continue }
            let connection = SocketBox(accepted)
            let admitted = state.withLock {
                guard connections < AgentLimits.connections else { return false }
                connections += 1
                return true
            }
            guard admitted else {
                refuse(connection, .failure("refused: the agent serves at most \(AgentLimits.connections) connections at once"))
                continue
            }
            let thread = Thread { [self] in
                serve(connection)
                state.withLock { connections -= 1 }
            }
            thread.name = "vault-agent connection"
            thread.start()
        }
    }

    /// Sends one refusal and closes: the peer's unread input is dropped, never drained.
    private func refuse(_ connection: SocketBox, _ error: VaultError) {
        send(.failed(error: error), on: connection)
        try? connection.socket.close()
    }

    /// Sends a reply within `replyDeadline` plus a second per MiB; false when the peer
    /// is gone or too slow to take it (the connection is then closed).
    @discardableResult
    private func send(_ reply: AgentReply, tail: [UInt8] = [], on connection: SocketBox) -> Bool {
        var bytes = AgentCodec.frame(reply, tail: tail).encoded()
        defer { wipe(&bytes) }
        let deadline = MonotonicClock.seconds() + replyDeadline + Double(bytes.count >> 20)
        return bytes.withUnsafeBytes { all in
            var offset = 0
            while offset < all.count {
                let left = deadline - MonotonicClock.seconds()
                guard left > 0, (try? connection.socket.setSendTimeout(seconds: min(left, replyDeadline))) != nil else { return false }
                let end = min(all.count, offset + (256 << 10))
                do {
                    try connection.socket.sendAll(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                } catch {
                    return false
                }
                offset = end
            }
            return true
        }
    }

    /// One connection, on its own thread, until the peer closes, idles out, misses a deadline or
    /// sends a frame that is refused.
    private func serve(_ connection: SocketBox) {
        defer { try? connection.socket.close() }
        guard let peer = try? connection.socket.peerCredentials() else { return }
        guard peer.uid == handler.uid else {
            return refuse(connection, .failure("refused: the agent serves only uid \(handler.uid)"))
        }
        // The executable is read once, now: the peer is connected, so its pid is still its own.
        let requester = Requester.peer(uid: peer.uid, pid: peer.pid)
        let decoder = FrameDecoder(limit: AgentLimits.requestFrame)
        var staging = ImportStaging()
        defer { handler.discard(&staging) }
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        defer { wipe(&chunk) }
        var idleSince = MonotonicClock.seconds()
        var frameStarted = idleSince
        while !isStopped {
            let now = MonotonicClock.seconds()
            let deadline = decoder.hasPartialFrame ? frameStarted + requestDeadline : idleSince + AgentLimits.connectionIdleSeconds
            guard now < deadline else {
                if decoder.hasPartialFrame {
                    refuse(connection, .usage("refused: a request must arrive whole within \(requestDeadline) s"))
                }
                return
            }
            let wait = Int32(max(1, min(500, (deadline - now) * 1000)))
            guard let readable = try? Poll.isReadable(connection.socket.rawValue, timeoutMilliseconds: wait) else { return }
            guard readable else { continue }
            let count: Int
            do {
                count = try chunk.withUnsafeMutableBytes { (b) throws(SystemError) -> Int in try connection.socket.receive(into: b) }
            } catch {
                return
            }
            guard count > 0 else { return }
            if !decoder.hasPartialFrame { frameStarted = MonotonicClock.seconds() }
            chunk.withUnsafeMutableBytes { b in
                decoder.append(UnsafeRawBufferPointer(rebasing: b[0..<count]))
                b.initializeMemory(as: UInt8.self, repeating: 0)
            }
            while true {
                let frame: AgentFrame
                do {
                    guard let next = try decoder.next() else { break }
                    frame = next
                } catch {
                    return refuse(connection, error.vaultError)
                }
                let request: AgentRequest
                do {
                    request = try AgentCodec.request(frame)
                } catch {
                    return refuse(connection, error)
                }
                var (reply, tail) = handler.respond(request, key: frame.tail, from: requester, staging: &staging)
                // The tail may hold released secrets: this copy is wiped too, not only the frame's.
                let sent = send(reply, tail: tail, on: connection)
                wipe(&tail)
                guard sent else { return }
                idleSince = MonotonicClock.seconds()
                frameStarted = idleSince
            }
        }
    }
}
