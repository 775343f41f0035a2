internal import Glibc

/// Who is on the other end of a Unix socket (`SO_PEERCRED`), as the kernel saw it at `connect`.
public struct PeerCredentials: Equatable, Sendable {
    /// The peer's process id.
    public let pid: Int32
    /// The peer's effective user id.
    public let uid: UInt32
    /// The peer's effective group id.
    public let gid: UInt32
}

/// Which direction ``UnixSocket/shutdown(_:)`` ends.
public enum ShutdownDirection: Sendable {
    /// No more receiving.
    case reading
    /// No more sending: the peer reads end of file.
    case writing
    /// Both.
    case both
}

/// A Unix stream socket (listening or connected), closed in `deinit`. Sends never raise `SIGPIPE`
/// (`MSG_NOSIGNAL`): a closed peer is an `EPIPE` error.
public struct UnixSocket: ~Copyable {
    /// The descriptor.
    public var descriptor: FileDescriptor
    /// The socket path (listening) or the path connected to.
    public let path: String

    /// Wraps a connected socket descriptor (one inherited or made by `socketpair`).
    public init(owning fd: Int32, path: String) {
        descriptor = FileDescriptor(owning: fd, label: path)
        self.path = path
    }

    /// The raw descriptor (borrowed), for ``Poll``.
    public var rawValue: Int32 { descriptor.rawValue }

    /// Binds and listens on `path`: an existing socket file whose connect is refused (nobody
    /// listens: a stale one) is removed first; one a live server answers on is left alone
    /// (`EADDRINUSE`), and so is one whose connect fails otherwise (that error is thrown). The
    /// socket file is made 0600.
    ///
    /// A server starting beside another that has bound but not yet listened sees its socket
    /// refuse too: servers that may start together decide who binds with a lock first (the agent
    /// holds `agent.sock.lock`).
    /// - Throws: ``SystemError`` for `socket`, `bind`, `chmod`, `listen` (`ENAMETOOLONG` for a
    ///   path longer than `sun_path`, `EADDRINUSE` for a live server or a non-socket file), or
    ///   the probe's `connect` (`EACCES`).
    public static func listen(path: String, backlog: Int32 = 64) throws(SystemError) -> UnixSocket {
        var address = try socketAddress(path)
        if let status = try? FileStatus.of(path) {
            guard status.kind == .socket else { throw SystemError(call: "bind", path: path, code: EADDRINUSE) }
            do throws(SystemError) {
                _ = try connect(path: path)
                throw SystemError(call: "bind", path: path, code: EADDRINUSE)
            } catch where error.isConnectionRefused {
                _ = unlink(path)
            } catch where error.isNotFound {
                // Removed since the lstat: nothing to remove.
            }
        }
        let socket = try newSocket(path)
        let fd = socket.rawValue
        try syscall("bind", path: path) {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
        do {
            try syscall("chmod", path: path) { chmod(path, 0o600) }
            try syscall("listen", path: path) { Glibc.listen(fd, backlog) }
        } catch {
            _ = unlink(path)
            throw error
        }
        return socket
    }

    /// Connects to the socket at `path`.
    /// - Throws: ``SystemError`` for `connect`: `ENOENT` (no socket file), `ECONNREFUSED`
    ///   (nobody listens), `EACCES`, `ENAMETOOLONG`.
    public static func connect(path: String) throws(SystemError) -> UnixSocket {
        var address = try socketAddress(path)
        while true {
            let socket = try newSocket(path)
            let fd = socket.rawValue
            do {
                // After EINTR a connect goes on in the background; a fresh socket is simpler.
                try syscall("connect", path: path, retryOnInterrupt: false) {
                    withUnsafePointer(to: &address) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                    }
                }
                return socket
            } catch where error.isInterrupted {
                continue
            }
        }
    }

    /// Connects, retrying every 20 ms while nothing listens yet (`ENOENT`, `ECONNREFUSED`),
    /// for at most `timeout` seconds.
    /// - Throws: the last ``SystemError`` once the time is up, or any other at once.
    public static func connect(path: String, retryingFor timeout: Double) throws(SystemError) -> UnixSocket {
        let end = MonotonicClock.seconds() + timeout
        while true {
            do {
                return try connect(path: path)
            } catch where (error.isNotFound || error.isConnectionRefused) && MonotonicClock.seconds() < end {
                MonotonicClock.sleep(seconds: min(0.02, max(0, end - MonotonicClock.seconds())))
            }
        }
    }

    /// A connected pair (`socketpair`), for tests and for talking to a child.
    /// - Throws: ``SystemError`` for `socketpair`.
    public static func pair() throws(SystemError) -> UnixSocketPair {
        var fds: [Int32] = [-1, -1]
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        try syscall("socketpair") { socketpair(AF_UNIX, type, 0, &fds) }
        return UnixSocketPair(first: UnixSocket(owning: fds[0], path: "socketpair"),
                              second: UnixSocket(owning: fds[1], path: "socketpair"))
    }

    /// Calls `listen` again on a socket that already listens, in the process that serves it: Linux
    /// records at `listen` the credentials a connecting peer reads (`SO_PEERCRED`), so a server
    /// that inherited the socket from the process that bound it (and then exited) becomes the pid
    /// its clients see.
    /// - Throws: ``SystemError`` for `listen`.
    public func listenAgain(backlog: Int32 = 64) throws(SystemError) {
        let fd = rawValue
        try syscall("listen", path: path) { Glibc.listen(fd, backlog) }
    }

    /// The next connection on a listening socket (close-on-exec).
    /// - Throws: ``SystemError`` for `accept` (`EAGAIN` when non-blocking and none waits).
    public func accept() throws(SystemError) -> UnixSocket {
        let fd = rawValue
        let client = try syscall("accept", path: path) { accept4(fd, nil, nil, Int32(SOCK_CLOEXEC.rawValue)) }
        return UnixSocket(owning: client, path: path)
    }

    /// The peer's pid, uid and gid.
    /// - Throws: ``SystemError`` for `getsockopt`.
    public func peerCredentials() throws(SystemError) -> PeerCredentials {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (Glibc hides it behind _GNU_SOURCE).
        var cred: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        let fd = rawValue
        try syscall("getsockopt", path: path) { getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) }
        guard length == 12 else { throw SystemError(call: "getsockopt", path: path, code: EPROTO) }
        return PeerCredentials(pid: cred.0, uid: cred.1, gid: cred.2)
    }

    /// How long a blocking receive waits before failing with `EAGAIN` (``SystemError/isTimedOut``);
    /// 0: no limit.
    /// - Throws: ``SystemError`` for `setsockopt`.
    public func setReceiveTimeout(seconds: Double) throws(SystemError) {
        try setTimeout(SO_RCVTIMEO, seconds)
    }

    /// How long a blocking send waits for room before failing (``SystemError/isTimedOut``); 0: no limit.
    /// - Throws: ``SystemError`` for `setsockopt`.
    public func setSendTimeout(seconds: Double) throws(SystemError) {
        try setTimeout(SO_SNDTIMEO, seconds)
    }

    private func setTimeout(_ option: Int32, _ seconds: Double) throws(SystemError) {
        let clamped = max(0, seconds)
        var tv = timeval(tv_sec: Int(clamped), tv_usec: Int((clamped - Double(Int(clamped))) * 1e6))
        let fd = rawValue
        try syscall("setsockopt", path: path) { setsockopt(fd, SOL_SOCKET, option, &tv, socklen_t(MemoryLayout<timeval>.size)) }
    }

    /// Bytes sent on this socket that the peer has not read yet (`SIOCOUTQ`; for a Unix socket
    /// the kernel's accounting of the queued messages, so 0 exactly when the peer read all).
    /// A peer that stopped (`SIGSTOP`) leaves this above 0 however much room its buffer has.
    /// - Throws: ``SystemError`` for `ioctl`.
    public func unreadOutput() throws(SystemError) -> Int {
        var count: Int32 = 0
        let fd = rawValue
        try syscall("ioctl", path: path) { ioctl(fd, UInt(TIOCOUTQ), &count) }
        return Int(count)
    }

    /// Turns `O_NONBLOCK` on or off.
    /// - Throws: ``SystemError`` for `fcntl`.
    public func setNonBlocking(_ on: Bool) throws(SystemError) {
        try descriptor.setNonBlocking(on)
    }

    /// Sends every byte (looping over partial sends and `EINTR`; waiting with `poll` when a
    /// non-blocking socket is full).
    /// - Throws: ``SystemError`` for `send`: `EPIPE`/`ECONNRESET` for a closed peer, `EAGAIN` after
    ///   a send timeout.
    public func sendAll(_ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        guard let base = bytes.baseAddress else { return }
        let fd = rawValue
        var offset = 0
        while offset < bytes.count {
            do {
                offset += try syscall("send", path: path) { send(fd, base + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            } catch where error.isWouldBlock && isNonBlocking {
                _ = try Poll.wait([PollRequest(fd: fd, events: .writable)], timeoutMilliseconds: -1)
            }
        }
    }

    /// Sends every byte of `bytes`.
    /// - Throws: ``SystemError`` for `send`.
    public func sendAll(_ bytes: [UInt8]) throws(SystemError) {
        try narrowing { try bytes.withUnsafeBytes { b in try sendAll(b) } }
    }

    /// One `recv`: fills the front of `buffer`; 0 when the peer closed the connection.
    /// - Throws: ``SystemError`` for `recv` (`EAGAIN` after a receive timeout or when non-blocking).
    public func receive(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
        let fd = rawValue
        return try syscall("recv", path: path) { recv(fd, base, buffer.count, 0) }
    }

    /// Exactly `count` bytes, fewer only when the peer closes first (none at all at a clean end).
    /// - Throws: ``SystemError`` for `recv`.
    public func receiveExactly(_ count: Int) throws(SystemError) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = try narrowing {
                try out.withUnsafeMutableBytes { b in try receive(into: UnsafeMutableRawBufferPointer(rebasing: b[filled...])) }
            }
            if n == 0 { break }
            filled += n
        }
        if filled < count { out.removeSubrange(filled...) }
        return out
    }

    /// Everything until the peer closes the connection.
    /// - Throws: ``SystemError`` for `recv`; `EFBIG` (``Errno/tooLarge``) past `limit` bytes.
    public func receiveAll(limit: Int) throws(SystemError) -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = try narrowing { try chunk.withUnsafeMutableBytes { b in try receive(into: b) } }
            if n == 0 { return out }
            guard out.count + n <= limit else { throw SystemError(call: "recv", path: path, code: EFBIG) }
            out += chunk[0..<n]
        }
    }

    /// Ends one or both directions; the peer reads end of file after `.writing`.
    /// - Throws: ``SystemError`` for `shutdown` (`ENOTCONN` when the peer is gone).
    public func shutdown(_ direction: ShutdownDirection) throws(SystemError) {
        let how: Int32 = switch direction {
        case .reading: Int32(SHUT_RD)
        case .writing: Int32(SHUT_WR)
        case .both: Int32(SHUT_RDWR)
        }
        let fd = rawValue
        try syscall("shutdown", path: path) { Glibc.shutdown(fd, how) }
    }

    /// Closes now, reporting the error `close` returns.
    /// - Throws: ``SystemError`` for `close`.
    public mutating func close() throws(SystemError) {
        try descriptor.close()
    }

    /// Gives up ownership of the descriptor.
    public mutating func take() -> Int32 {
        descriptor.take()
    }

    private var isNonBlocking: Bool {
        let fd = rawValue
        return ((try? syscall("fcntl", path: path) { fcntl(fd, F_GETFL) }) ?? 0) & O_NONBLOCK != 0
    }

    private static func newSocket(_ path: String) throws(SystemError) -> UnixSocket {
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        let fd = try syscall("socket", path: path) { socket(AF_UNIX, type, 0) }
        return UnixSocket(owning: fd, path: path)
    }
}

/// Two connected sockets from ``UnixSocket/pair()``.
public struct UnixSocketPair: ~Copyable {
    /// One end.
    public var first: UnixSocket
    /// The other end.
    public var second: UnixSocket
}

/// The one `sockaddr_un` builder: `path` in `sun_path`, NUL-terminated.
/// - Throws: `ENAMETOOLONG` when the path does not fit (107 bytes on Linux), `EINVAL` when empty.
func socketAddress(_ path: String) throws(SystemError) -> sockaddr_un {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    let encoded = Array(path.utf8)
    guard !encoded.isEmpty else { throw SystemError(call: "bind", path: path, code: EINVAL) }
    guard encoded.count < capacity else { throw SystemError(call: "bind", path: path, code: ENAMETOOLONG) }
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: encoded) }
    return address
}

/// The longest socket path ``UnixSocket`` accepts, in bytes.
public let maximumSocketPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1
