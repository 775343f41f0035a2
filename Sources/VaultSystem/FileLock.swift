import Glibc

/// An advisory lock on a file (`flock(2)`), for read-modify-write of state files shared by
/// several processes of one user. The lock file is created 0600, never followed through a symlink.
public struct FileLock: ~Copyable {
    private let fd: Int32
    /// The lock file.
    public let path: String

    /// Opens (creating) the lock file.
    /// - Throws: `FileLockError` naming the path.
    public init(path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw FileLockError(call: "open", path: path, code: errno) }
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }

    /// Runs `body` holding the exclusive lock (waits for other holders).
    public func withExclusive<R: ~Copyable>(_ body: () throws -> R) throws -> R {
        while flock(fd, LOCK_EX) != 0 {
            if errno != EINTR { throw FileLockError(call: "flock", path: path, code: errno) }
        }
        defer { _ = flock(fd, LOCK_UN) }
        return try body()
    }
}

/// A lock file could not be opened or locked.
public struct FileLockError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The failed call.
    public let call: String
    /// The lock file.
    public let path: String
    /// errno.
    public let code: Int32
    /// `flock /x/lock: Permission denied`.
    public var description: String { "\(call) \(path): \(String(cString: strerror(code)))" }
}
