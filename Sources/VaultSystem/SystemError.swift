internal import Glibc

/// A failed system call: which call, on which path (or descriptor label), and the `errno` it set.
///
/// Every raw call in VaultSystem goes through ``syscall(_:path:retryOnInterrupt:_:)-(_,_,_,()->Int32)``
/// (or ``syscallReturningCode(_:path:_:)`` for calls that return the error number), so a failure
/// always reads like `open /x/y: Permission denied`.
/// The name of a system call, as errors report it (`open`, `rename`, `posix_spawn`): typed, so a
/// caller tests which call failed against a constant, never by spelling its name.
public struct SystemCall: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }

    /// Starting a program (`ChildProcess`, `TerminalRelay`).
    public static let posixSpawn: SystemCall = "posix_spawn"
}

public struct SystemError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The system call that failed (`open`, `rename`, `posix_spawn`, ...).
    public let call: SystemCall
    /// The path, socket path or descriptor label the call was about, when there is one.
    public let path: String?
    /// The `errno` value.
    public let code: Int32

    /// An error for `call` on `path` with `code` (an `errno` value).
    public init(call: SystemCall, path: String? = nil, code: Int32) {
        self.call = call
        self.path = path
        self.code = code
    }

    /// The error the last failed call left in `errno`.
    public static func current(_ call: SystemCall, path: String? = nil) -> SystemError {
        SystemError(call: call, path: path, code: errno)
    }

    /// The system's text for ``code`` (`strerror`), e.g. `No space left on device`.
    public var reason: String { SystemError.reason(code) }

    /// The system's text for an `errno` value.
    public static func reason(_ code: Int32) -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        // The XSI strerror_r (thread-safe, unlike strerror for unknown codes).
        guard strerror_r(code, &buffer, buffer.count) == 0 else { return "error \(code)" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `call path: reason`, or `call: reason` without a path.
    public var description: String {
        if let path { return "\(call) \(path): \(reason)" }
        return "\(call): \(reason)"
    }

    /// The same error about another path (a caller that knows the better name).
    public func about(_ path: String) -> SystemError {
        SystemError(call: call, path: path, code: code)
    }

    /// `ENOENT`: no such file or folder.
    public var isNotFound: Bool { code == ENOENT }
    /// `EEXIST`: the name is taken.
    public var isExists: Bool { code == EEXIST }
    /// `ENOSPC` or `EDQUOT`: the disk or the quota is full.
    public var isFull: Bool { code == ENOSPC || code == EDQUOT }
    /// `EPIPE`: the reading end of a pipe or socket is closed.
    public var isBrokenPipe: Bool { code == EPIPE }
    /// `ECONNRESET`: the peer closed the connection abruptly.
    public var isConnectionReset: Bool { code == ECONNRESET }
    /// `ECONNREFUSED`: nothing listens on the socket.
    public var isConnectionRefused: Bool { code == ECONNREFUSED }
    /// `EINTR`: a signal interrupted the call.
    public var isInterrupted: Bool { code == EINTR }
    /// `EAGAIN`/`EWOULDBLOCK`: a non-blocking call would block, or a socket timeout expired.
    public var isWouldBlock: Bool { code == EAGAIN || code == EWOULDBLOCK }
    /// A socket timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`) expired: `EAGAIN`, `EWOULDBLOCK` or `ETIMEDOUT`.
    public var isTimedOut: Bool { isWouldBlock || code == ETIMEDOUT }
    /// `EACCES` or `EPERM`: not allowed.
    public var isPermissionDenied: Bool { code == EACCES || code == EPERM }
    /// `ELOOP`: a symbolic link where `O_NOFOLLOW` allows none.
    public var isSymbolicLink: Bool { code == ELOOP }
    /// `ENOTDIR`: a path component is not a folder.
    public var isNotDirectory: Bool { code == ENOTDIR }
    /// `EBADF`: the descriptor is not open.
    public var isBadDescriptor: Bool { code == EBADF }
    /// `EROFS`: a read-only file system.
    public var isReadOnlyFileSystem: Bool { code == EROFS }
}

/// `errno` values callers outside VaultSystem compare against, without importing Glibc.
public enum Errno {
    /// No such file or folder.
    public static let notFound = ENOENT
    /// The name is taken.
    public static let exists = EEXIST
    /// No space left on the device.
    public static let noSpace = ENOSPC
    /// The user's disk quota is used up.
    public static let quotaExceeded = EDQUOT
    /// Broken pipe.
    public static let brokenPipe = EPIPE
    /// Permission denied.
    public static let accessDenied = EACCES
    /// Operation not permitted.
    public static let notPermitted = EPERM
    /// Input/output error.
    public static let io = EIO
    /// Invalid argument.
    public static let invalidArgument = EINVAL
    /// A file or message too large for the limit given (VaultSystem's readers use it for "over the limit").
    public static let tooLarge = EFBIG
    /// A name too long (a socket path over `sun_path`).
    public static let nameTooLong = ENAMETOOLONG
    /// The operation timed out.
    public static let timedOut = ETIMEDOUT
    /// A protocol error (a peer that sent something malformed).
    public static let protocolError = EPROTO
}

/// Runs a system call that returns `-1` and sets `errno` on failure, and throws that failure.
///
/// - Parameters:
///   - call: the call's name, for the error.
///   - path: what it was about, for the error.
///   - retryOnInterrupt: runs the call again after `EINTR` (the default); when false, `EINTR`
///     is thrown (``SystemError/isInterrupted``) so the caller can look at a signal's flag.
/// - Returns: the call's non-negative result.
/// - Throws: ``SystemError`` with the call, the path and `errno`.
@discardableResult
public func syscall(_ call: SystemCall, path: String? = nil, retryOnInterrupt: Bool = true,
                    _ body: () -> Int32) throws(SystemError) -> Int32 {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR && retryOnInterrupt { continue }
        throw SystemError(call: call, path: path, code: code)
    }
}

/// The `ssize_t` form of ``syscall(_:path:retryOnInterrupt:_:)-(_,_,_,()->Int32)`` (read, write, send, recv).
@discardableResult
public func syscall(_ call: SystemCall, path: String? = nil, retryOnInterrupt: Bool = true,
                    _ body: () -> Int) throws(SystemError) -> Int {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR && retryOnInterrupt { continue }
        throw SystemError(call: call, path: path, code: code)
    }
}

/// Runs a call that returns 0 or an error number itself (`posix_spawn`, `ttyname_r`, `pthread_*`).
/// - Throws: ``SystemError`` with the returned number as its code.
public func syscallReturningCode(_ call: SystemCall, path: String? = nil, _ body: () -> Int32) throws(SystemError) {
    let code = body()
    if code != 0 { throw SystemError(call: call, path: path, code: code) }
}
