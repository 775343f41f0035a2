public import VaultKit
public import VaultSystem
internal import FoundationEssentials

/// What a server's admission rule says of a peer that connected.
public enum Admission: Sendable {
    /// Serve it; `release` runs once its connection has ended (to give back its place).
    case admit(release: @Sendable () -> Void)
    /// Send it one refusal and close.
    case refuse(VaultError)
}

/// How a server's accept loop ended.
public enum ServerEnding: Equatable, Sendable {
    /// ``FrameServer/stop()`` was called.
    case stopped
    /// The socket file was removed or replaced by another: nobody can reach this server any more.
    case socketLost
    /// The server's own check between connections asked it to end (the agent's idle exit).
    case ended
}

/// Why a server could not bind its socket.
public enum BindFailure: Error, Sendable {
    /// A live server answers on the path: this one must not take it.
    case anotherServerAnswers
    /// The bind failed otherwise.
    case failed(SystemError)
}

/// A connection a ``SocketServer`` makes of each socket it accepts: it owns the socket and moves
/// to the thread that serves it. `limit` bounds what the peer may send at once (a frame, a
/// message), `chunkBytes` how much is read at a time.
public protocol ServedConnection: AnyObject, Sendable {
    /// A connection over `socket`.
    init(_ socket: consuming UnixSocket, limit: Int, chunkBytes: Int)
    /// Closes the socket (again is harmless).
    func close()
    /// Sends the peer one refusal of its protocol (within `seconds`) and closes.
    func refuse(_ error: VaultError, within seconds: Double)
}

/// The accept loop of vault's framed servers (the agent, vault-authd): connections of vault's frames.
public typealias FrameServer<Format: WireFormat> = SocketServer<FramedConnection<Format>>

/// The one accept loop of every server (vault's framed ones, the SSH agent, the servers to come):
/// binds its socket (a stale one, whose connect is refused, is replaced; a live one is left to its
/// server) or adopts one already bound, accepts while the path still names the socket it bound
/// (device and inode, checked every `checkSeconds` and at each connection), reads each peer's
/// credentials (`SO_PEERCRED`), asks the server's admission rule, and serves each admitted
/// connection (a `Connection` made of the socket) on a thread of its own, so a slow or silent peer
/// never stalls another. A refused peer gets one refusal of its protocol.
public final class SocketServer<Connection: ServedConnection>: @unchecked Sendable {
    /// The socket path.
    public let socketPath: String
    /// The largest frame (or message) a peer may send.
    public let frameLimit: Int
    /// Bytes read from a peer at a time.
    public let chunkBytes: Int
    /// Seconds a refused peer has to take its refusal.
    public let replyDeadline: Double
    /// The name of each connection's thread.
    public let threadName: String
    private let state = ThreadLock()
    private var stopped = false
    private var identity: SocketIdentity?

    /// A server of frames (messages) of at most `frameLimit` bytes on `socketPath` (not bound
    /// yet: see ``bind(permissions:)`` and ``adopt(_:)``).
    public init(socketPath: String, frameLimit: Int, chunkBytes: Int = 64 << 10, replyDeadline: Double, threadName: String) {
        self.socketPath = socketPath
        self.frameLimit = frameLimit
        self.chunkBytes = chunkBytes
        self.replyDeadline = replyDeadline
        self.threadName = threadName
    }

    /// Asks ``serve(_:checkEvery:between:admit:connection:)`` to return within `checkSeconds`.
    public func stop() {
        state.withLock { stopped = true }
    }

    /// Whether ``stop()`` was called: connections end after their current request.
    public var isStopped: Bool { state.withLock { stopped } }

    /// Binds and listens on the socket path, made `permissions` (0600 unless the server serves
    /// other users). A socket file nobody answers on is removed first.
    /// - Throws: ``BindFailure/anotherServerAnswers`` when a live server holds the path, else
    ///   ``BindFailure/failed(_:)``.
    public func bind(permissions: UInt32 = 0o600) throws(BindFailure) -> Listener {
        let path = socketPath
        func listen() throws(BindFailure) -> UnixSocket {
            let socket: UnixSocket
            do {
                socket = try UnixSocket.listen(path: path)
            } catch {
                if Self.someoneAnswers(path) { throw .anotherServerAnswers }
                throw .failed(error)
            }
            do {
                if permissions != 0o600 { try FileSystem.setPermissions(path, permissions) }
            } catch {
                try? FileSystem.remove(path)
                throw .failed(error)
            }
            return socket
        }
        let bound = try listen()
        // Gone already (removed between the bind and now) leaves no identity: ``serve`` ends at once.
        let status = try? FileStatus.of(socketPath)
        state.withLock { identity = status.flatMap { $0.kind == .socket ? SocketIdentity($0) : nil } }
        return Listener(socket: bound)
    }

    /// Takes `socket`, already bound to the socket path and listening (by a process that bound it
    /// before detaching, say), as if ``bind(permissions:)`` had bound it: its file's device and
    /// inode are watched from now.
    public func adopt(_ socket: consuming UnixSocket) -> Listener {
        let status = try? FileStatus.of(socketPath)
        state.withLock { identity = status.flatMap { $0.kind == .socket ? SocketIdentity($0) : nil } }
        return Listener(socket: socket)
    }

    /// The bound, listening socket ``serve(_:checkEvery:between:admit:connection:)`` takes.
    public struct Listener: ~Copyable {
        var socket: UnixSocket
    }

    /// Whether a server accepts a connection on `path` now.
    public static func someoneAnswers(_ path: String) -> Bool {
        (try? UnixSocket.connect(path: path)) != nil
    }

    /// Accepts and serves until stopped, until the socket path no longer names the bound socket,
    /// or until `between` (run every `checkSeconds` and before each connection) returns false.
    /// Each admitted peer's connection runs `connection` on a thread of its own, then closes and
    /// releases its place. On return the socket is closed and, if the path still names it, removed.
    public func serve(_ listener: consuming Listener, checkEvery checkSeconds: Double, between: () -> Bool = { true },
                      admit: (PeerCredentials) -> Admission,
                      connection serveOne: @escaping @Sendable (Connection, PeerCredentials) -> Void) -> ServerEnding {
        let fd = listener.socket.rawValue
        defer {
            if isOwn() { try? FileSystem.remove(socketPath) }
            try? listener.socket.close()
        }
        let waitMilliseconds = Int32(max(10, min(60_000, checkSeconds * 1000)))
        while !isStopped {
            guard isOwn() else { return .socketLost }
            guard between() else { return .ended }
            guard (try? Poll.isReadable(fd, timeoutMilliseconds: waitMilliseconds)) == true else { continue }
            let accepted: UnixSocket
            do {
                accepted = try listener.socket.accept()
            } catch {
                // Out of descriptors, say: the waiting peer stays queued; try again shortly, without spinning.
                MonotonicClock.sleep(seconds: 0.05)
                continue
            }
            guard let peer = try? accepted.peerCredentials() else { continue } // closed as it goes
            let connection = Connection(accepted, limit: frameLimit, chunkBytes: chunkBytes)
            switch admit(peer) {
            case .refuse(let error):
                connection.refuse(error, within: replyDeadline)
            case .admit(let release):
                do {
                    try Threads.detach(name: threadName) {
                        serveOne(connection, peer)
                        connection.close()
                        release()
                    }
                } catch {
                    // No thread to serve it (the process' thread limit): the peer sees it closed.
                    connection.close()
                    release()
                }
            }
        }
        return .stopped
    }

    /// Whether the socket path still names the socket this server bound (`lstat`: a socket of
    /// another inode, anything else there, or nothing at all is not). The bound socket keeps its
    /// file's inode in use while it is open, so no later file at the path can have its number.
    public func isOwn() -> Bool {
        guard let mine = state.withLock({ identity }),
              let now = try? FileStatus.of(socketPath), now.kind == .socket else { return false }
        return SocketIdentity(now) == mine
    }
}

/// Which file a socket path named when a server bound it.
private struct SocketIdentity: Equatable {
    let device: UInt64
    let inode: UInt64
    init(_ status: FileStatus) { (device, inode) = (status.device, status.inode) }
}
