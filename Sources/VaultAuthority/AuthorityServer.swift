internal import VaultKit
internal import VaultSystem
internal import VaultWire
internal import FoundationEssentials

/// Moves a value to the one thread that uses it next.
struct Handoff<T>: @unchecked Sendable {
    let value: T
}

/// What a running request has streamed and, once done, its answer; the connection's thread
/// sends them, so only that thread ever writes to the socket. Each push wakes that thread through
/// a pipe it polls beside the socket (one byte at most is ever unread in it), so an answer goes out
/// the moment it is ready, not at the next tick.
final class Outbox: @unchecked Sendable {
    private let condition = ThreadCondition()
    private var items: [AuthorityReply] = []
    private var final: AuthorityResponse?
    private var signalled = false
    private var wake: UnixPipe

    /// An empty outbox with its wake pipe.
    /// - Throws: ``SystemError`` for `pipe2` (out of descriptors).
    init() throws(SystemError) {
        wake = try UnixPipe()
    }

    /// The descriptor the connection's thread polls: readable once something is queued.
    var wakeDescriptor: Int32 { wake.readEnd.rawValue }

    func push(_ reply: AuthorityReply) {
        condition.lock()
        items.append(reply)
        signal()
        condition.unlock()
    }

    func finish(_ response: AuthorityResponse) {
        condition.lock()
        final = response
        signal()
        condition.unlock()
    }

    /// Under the lock: wakes the waiting thread, once until it takes what is queued.
    private func signal() {
        condition.broadcast()
        guard !signalled else { return }
        signalled = true
        try? wake.writeEnd.writeAll([1])
    }

    /// What is queued (and the answer once the request ended), waiting at most `seconds` for something.
    func take(waiting seconds: Double) -> ([AuthorityReply], AuthorityResponse?) {
        condition.lock()
        defer { condition.unlock() }
        if items.isEmpty && final == nil && seconds > 0 { _ = condition.wait(seconds: seconds) }
        if signalled {
            var byte: [UInt8] = [0]
            let fd = wake.readEnd.rawValue
            _ = try? byte.withUnsafeMutableBytes { try readSome(fd: fd, into: $0) }
            signalled = false
        }
        let out = items
        items.removeAll()
        return (out, final)
    }
}

/// `vault-authd`'s server: any local user may connect (the socket is 0666); each connection is
/// served on its own thread as the uid `SO_PEERCRED` names. A request runs on a thread of its
/// own while the connection's thread streams its events to the client and watches for a
/// `cancel`, the client going away, or the client no longer reading (a message of the daemon
/// left unread for 5 s: a stopped process); each cancels the scan and frees the reader (or the
/// place in the reader's queue). So that a client that reads all there is can be told from one
/// that stopped, a `keepAlive` goes out every second while a request runs. Frames are refused
/// from their header; a peer has 10 s to send a whole request once it began and 10 s to take
/// each reply; an idle connection is closed after 60 s. At most 128 connections: 32 per uid
/// with an account, and 4 for all the uids without one together (one person's subordinate uids
/// are 65,536 uids: they cannot take the places of the users).
public final class AuthorityServer: @unchecked Sendable {
    /// The socket path.
    public let socketPath: String
    /// The per-uid authorities and the readers.
    public let handler: AuthorityRequestHandler
    /// Seconds a peer has to send the rest of a request once its first byte arrived.
    public let requestDeadline: Double
    /// Seconds a peer has to take a reply.
    public let replyDeadline: Double
    private let server: FrameServer<AuthorityWire>
    private let state = ThreadLock()
    private var connections = 0
    private var perUID: [UInt32: Int] = [:]
    private var withoutAccount = 0

    /// A server on `socketPath` answering with `handler`; the deadlines are
    /// `AuthorityLimits.requestSeconds` and `.replySeconds` but for tests.
    public init(socketPath: String, handler: AuthorityRequestHandler,
                requestDeadline: Double = AuthorityLimits.requestSeconds, replyDeadline: Double = AuthorityLimits.replySeconds) {
        self.socketPath = socketPath
        self.handler = handler
        self.requestDeadline = min(max(requestDeadline.isNaN ? AuthorityLimits.requestSeconds : requestDeadline, 0.05), AuthorityLimits.requestSeconds)
        self.replyDeadline = min(max(replyDeadline.isNaN ? AuthorityLimits.replySeconds : replyDeadline, 0.05), AuthorityLimits.replySeconds)
        server = FrameServer(socketPath: socketPath, frameLimit: AuthorityLimits.requestFrame, chunkBytes: 16 << 10,
                             replyDeadline: self.replyDeadline, threadName: "vault-authd connection")
    }

    /// Asks `run` to return (within half a second); connections end after their current request.
    public func stop() {
        server.stop()
    }

    private var isStopped: Bool { server.isStopped }

    /// How many connections are being served.
    public var connectionCount: Int { state.withLock { connections } }

    /// The socket's folder: made 0755 when missing; an existing one must be ours (or root's) and
    /// writable by nobody else, so no one can put another socket in its place.
    /// - Throws: `.insecurePermissions` or `.io` naming the folder.
    static func prepareFolder(_ folder: String) throws {
        if !FileSystem.exists(folder) {
            do {
                try PrivateFiles.makeFolder(folder)
                try FileSystem.setPermissions(folder, 0o755)
            } catch {
                throw VaultError.io(path: folder, error.reason)
            }
        }
        let status: FileStatus
        do { status = try FileStatus.of(folder) } catch { throw VaultError.io(path: folder, error.reason) }
        guard status.kind == .directory else { throw VaultError.io(path: folder, "not a folder") }
        guard status.owner == ProcessIdentity.effectiveUID || status.owner == 0, status.permissions & 0o022 == 0 else {
            throw VaultError.io(path: folder, "the socket's folder must belong to vault-authd's user and be writable by it alone")
        }
    }

    /// Binds the socket (0666 in a 0755 folder: any local user may connect) and serves until
    /// stopped or until the socket file is removed or replaced.
    /// - Throws: `.io` for the folder or the socket (another vault-authd answering there included).
    public func run() throws {
        let folder = PathText.folder(of: socketPath)
        try Self.prepareFolder(folder)
        let listener: FrameServer<AuthorityWire>.Listener
        do {
            listener = try server.bind(permissions: 0o666)
        } catch .anotherServerAnswers {
            throw VaultError.io(path: socketPath, "another vault-authd answers on this socket")
        } catch .failed(let error) {
            throw VaultError.io(path: socketPath, error.reason)
        }
        let ending = server.serve(listener, checkEvery: 0.5, admit: admit,
                                  connection: { [self] connection, peer in
                                      serve(connection, uid: peer.uid, hasAccount: ScanSession.hasAccount(peer.uid))
                                  })
        if ending == .socketLost { throw VaultError.io(path: socketPath, "the socket file was removed or replaced") }
    }

    /// Admits a peer within the limits: 128 connections in all, 32 per uid with an account, 4 for
    /// all the uids without one together.
    private func admit(_ peer: PeerCredentials) -> Admission {
        let account = ScanSession.hasAccount(peer.uid)
        let admitted = state.withLock {
            guard connections < AuthorityLimits.connections else { return false }
            if account {
                guard perUID[peer.uid, default: 0] < AuthorityLimits.connectionsPerUID else { return false }
                perUID[peer.uid, default: 0] += 1
            } else {
                guard withoutAccount < AuthorityLimits.connectionsWithoutAccount else { return false }
                withoutAccount += 1
            }
            connections += 1
            return true
        }
        guard admitted else {
            return .refuse(.systemCancel(account
                ? "vault-authd serves at most \(AuthorityLimits.connectionsPerUID) connections per user and \(AuthorityLimits.connections) in all at once"
                : "vault-authd serves at most \(AuthorityLimits.connectionsWithoutAccount) connections at once to all the uids "
                    + "without an account together, and uid \(peer.uid) has none"))
        }
        return .admit(release: { [self] in
            state.withLock {
                connections -= 1
                if account {
                    perUID[peer.uid, default: 1] -= 1
                    if perUID[peer.uid] == 0 { perUID[peer.uid] = nil }
                } else {
                    withoutAccount -= 1
                }
            }
        })
    }

    /// Sends one refusal and closes: the peer's unread input is dropped, never drained.
    private func refuse(_ connection: AuthorityConnection, _ error: VaultError) {
        connection.refuse(error, within: replyDeadline)
    }

    /// Sends a frame within `replyDeadline` (or `within` seconds); false when the peer is gone or
    /// too slow to take it.
    @discardableResult
    private func send(_ frame: AuthorityFrame, on connection: AuthorityConnection, within seconds: Double? = nil) -> Bool {
        connection.send(frame, within: seconds ?? replyDeadline)
    }

    /// One connection, on its own thread: requests one after the other until the peer closes,
    /// idles out, misses a deadline or sends a frame that is refused.
    private func serve(_ connection: AuthorityConnection, uid: UInt32, hasAccount: Bool) {
        while true {
            guard let frame = connection.nextRequest(requestDeadline: requestDeadline, idleSeconds: AuthorityLimits.connectionIdleSeconds,
                                                     replySeconds: replyDeadline, while: { !isStopped }) else { return }
            let request: AuthorityRequest
            do { request = try AuthorityCodec.request(frame) } catch { return refuse(connection, error) }
            // A cancel that crossed the end of its request: nothing runs any more.
            if case .cancel = request { continue }
            guard run(request, frame: frame, uid: uid, hasAccount: hasAccount, on: connection) else { return }
        }
    }

    /// Runs one request on a thread of its own; meanwhile this thread sends what it streams and
    /// watches the peer: a `cancel` frame cancels the scan, the peer going away cancels it too
    /// (and frees the reader), any other frame is refused once the request has ended. A peer that
    /// leaves a message unread for `AuthorityLimits.unreadSeconds` has stopped (`SIGSTOP`, a
    /// debugger) or does not read: its request is cancelled, and its answer says so if there is
    /// room for it (the peer reads it when it goes on); the connection then closes. The kernel's
    /// count of unread bytes (`SIOCOUTQ`) is what tells: a socket buffer takes hundreds of small
    /// frames, so a send would block only minutes later.
    /// - Returns: whether the connection may go on.
    private func run(_ request: AuthorityRequest, frame: AuthorityFrame, uid: UInt32, hasAccount: Bool,
                     on connection: AuthorityConnection) -> Bool {
        let outbox: Outbox
        do {
            outbox = try Outbox()
        } catch {
            refuse(connection, .systemCancel("vault-authd is out of descriptors: \(error.reason)"))
            return false
        }
        let session = ScanSession(uid: uid, hasAccount: hasAccount, send: { outbox.push($0) })
        let handler = self.handler
        // The frame (and the key in its tail) lives until the request ends, then is wiped.
        let handoff = Handoff(value: frame)
        do {
            try Threads.detach(name: "vault-authd request") {
                outbox.finish(handoff.value.withTailCopy { handler.handle(request, key: $0, session: session) })
            }
        } catch {
            refuse(connection, .systemCancel("vault-authd cannot start a thread: \(error.reason)"))
            return false
        }
        var gone = false
        var violation: VaultError?
        var stalled = false
        var lastSent = MonotonicClock.seconds()
        var lastDrained = lastSent
        while true {
            let (streamed, answer) = outbox.take(waiting: gone || violation != nil || stalled ? 1 : 0)
            for reply in streamed where !gone && !stalled {
                if !send(AuthorityCodec.frame(reply), on: connection) {
                    gone = true
                    session.cancel(.program)
                }
                lastSent = MonotonicClock.seconds()
            }
            if let answer {
                guard !gone else { return false }
                if let violation {
                    refuse(connection, violation)
                    return false
                }
                if stalled {
                    // Whatever the request came to (a key included), a peer that stopped reading
                    // is told only why it ended, if there is room; then the connection closes.
                    let why = VaultError.appCancel("vault did not read vault-authd's messages for \(Int(AuthorityLimits.unreadSeconds)) s "
                                                   + "(stopped or suspended?): the request was cancelled and the reader given to others")
                    send(AuthorityCodec.frame(.failed(error: why)), on: connection, within: 0.2)
                    return false
                }
                return send(answer.frame(), on: connection)
            }
            if gone || violation != nil || stalled { continue }
            let now = MonotonicClock.seconds()
            if let unread = try? connection.socket.unreadOutput(), unread > 0 {
                if now - lastDrained > AuthorityLimits.unreadSeconds {
                    stalled = true
                    session.cancel(.program)
                    continue
                }
            } else {
                lastDrained = now
                if now - lastSent >= AuthorityLimits.keepAliveSeconds {
                    if !send(AuthorityCodec.frame(.keepAlive), on: connection) {
                        gone = true
                        session.cancel(.program)
                        continue
                    }
                    lastSent = now
                }
            }
            // Until the peer writes or the request has something to send; the 250 ms bound is for
            // the keep-alive and the unread-output watch, not for the answer.
            let events: [PollEvents]
            do {
                events = try Poll.wait([PollRequest(fd: connection.socket.rawValue, events: .readable),
                                        PollRequest(fd: outbox.wakeDescriptor, events: .readable)], timeoutMilliseconds: 250)
            } catch {
                gone = true
                session.cancel(.program)
                continue
            }
            guard !events[0].isEmpty else { continue }
            guard connection.receive() else {
                gone = true
                session.cancel(.program)
                continue
            }
            do {
                while let next = try connection.decoder.next() {
                    if case .cancel(let reason) = try AuthorityCodec.request(next) {
                        session.cancel(reason)
                    } else {
                        throw VaultError.usage("refused: one request at a time; only cancel may be sent while one runs")
                    }
                }
            } catch let e as AuthorityFrameError {
                violation = e.vaultError
                session.cancel(.program)
            } catch {
                violation = (error as? VaultError) ?? .usage("malformed request")
                session.cancel(.program)
            }
        }
    }
}
