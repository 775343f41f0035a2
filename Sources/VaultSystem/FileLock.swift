import Glibc

/// An advisory lock on a file (`flock(2)`), for read-modify-write of state files shared by
/// several processes of one user, and for "one process at a time" roles (the agent of a socket).
/// The lock file is created 0600, never followed through a symlink. The lock belongs to this
/// open file: it ends with ``unlock()``, with the end of this value, or with the process.
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

    /// Takes the exclusive lock when no one else holds it, without waiting; it is then held
    /// until ``unlock()`` or the end of this value.
    /// - Returns: false when another open file of the lock holds it.
    /// - Throws: `FileLockError` for any other `flock` failure.
    public func tryExclusive() throws -> Bool {
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EWOULDBLOCK { return false }
            if errno != EINTR { throw FileLockError(call: "flock", path: path, code: errno) }
        }
        return true
    }

    /// Waits at most `seconds` for the exclusive lock, trying every 10 ms and giving up early
    /// when `giveUp` says so (checked between tries).
    /// - Returns: true when the lock was taken (held until ``unlock()`` or the end of this value).
    /// - Throws: `FileLockError` for a `flock` failure other than "held by another".
    public func exclusive(waitingAtMost seconds: Double, giveUp: () -> Bool = { false }) throws -> Bool {
        let end = MonotonicClock.seconds() + seconds
        while true {
            if try tryExclusive() { return true }
            if giveUp() || MonotonicClock.seconds() >= end { return false }
            MonotonicClock.sleep(seconds: 0.01)
        }
    }

    /// Releases a lock taken with ``tryExclusive()`` or ``exclusive(waitingAtMost:giveUp:)``.
    public func unlock() {
        _ = flock(fd, LOCK_UN)
    }

    /// Replaces the lock file's content with `text` (its holder's pid, for messages that name it).
    /// - Throws: `FileLockError` for `ftruncate` or `pwrite`.
    public func record(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard ftruncate(fd, 0) == 0 else { throw FileLockError(call: "ftruncate", path: path, code: errno) }
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        guard written == bytes.count else { throw FileLockError(call: "pwrite", path: path, code: written < 0 ? errno : EIO) }
    }

    /// What the holder recorded (``record(_:)``), at most 64 bytes; nil when it cannot be read.
    public func recorded() -> String? {
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
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
