internal import VaultSystem

/// A connected Unix stream socket (VaultSystem's `UnixSocket`), closed in `deinit` or by
/// ``close()``. Every failure becomes a ``VirtualReaderError``.
final class PosixSocket {
    private var socket: UnixSocket
    let path: String

    private init(socket: consuming UnixSocket, path: String) {
        self.socket = socket
        self.path = path
    }

    /// The descriptor, or -1 once closed.
    var descriptor: Int32 { socket.rawValue }

    func close() {
        try? socket.close()
    }

    /// Connects to `path`, retrying every 20 ms while nothing listens there (`ENOENT`, `ECONNREFUSED`)
    /// until `deadline`.
    static func connect(path: String, deadline: Deadline) throws(VirtualReaderError) -> PosixSocket {
        guard path.utf8.count <= maximumSocketPathLength, !path.isEmpty else {
            throw .socket("socket path too long (\(path.utf8.count) bytes, at most \(maximumSocketPathLength)): \(path)")
        }
        do {
            return PosixSocket(socket: try UnixSocket.connect(path: path, retryingFor: deadline.remainingSeconds), path: path)
        } catch where error.isNotFound || error.isConnectionRefused {
            throw .notListening(path: path)
        } catch {
            throw .socket(describe(error))
        }
    }

    /// Writes all of `bytes`, looping over partial writes; never raises `SIGPIPE`.
    func write(_ bytes: [UInt8]) throws(VirtualReaderError) {
        do {
            try socket.sendAll(bytes)
        } catch where error.isBrokenPipe || error.isConnectionReset {
            throw .connectionClosed(path: path)
        } catch {
            throw .socket(describe(error))
        }
    }

    /// Reads until the peer closes the connection, or throws `noAcknowledgement` at `deadline`.
    func readToEnd(deadline: Deadline) throws(VirtualReaderError) -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            guard try waitReadable(until: deadline) else { throw .noAcknowledgement(path: path) }
            let count: Int
            do {
                count = try buffer.withUnsafeMutableBytes { b in try socket.receive(into: b) }
            } catch let error as SystemError where error.isConnectionReset {
                throw .connectionClosed(path: path)
            } catch let error as SystemError {
                throw .socket(describe(error))
            } catch {
                throw .socket("recv \(path): \(error)")
            }
            if count == 0 { return received }
            received += buffer[0..<count]
        }
    }

    /// Whether the peer closed the connection (or it failed) by `deadline`; the driver never writes
    /// on an image connection, so readability means end of file.
    func isClosedByPeer(waitingUntil deadline: Deadline) throws(VirtualReaderError) -> Bool {
        try waitReadable(until: deadline)
    }

    private func waitReadable(until deadline: Deadline) throws(VirtualReaderError) -> Bool {
        do {
            return try Poll.isReadable(socket.rawValue, timeoutMilliseconds: deadline.remainingMilliseconds)
        } catch {
            throw .socket(describe(error.about(path)))
        }
    }

    /// `call path: reason`, lower case, as the driver's other messages.
    private static func describe(_ error: SystemError) -> String {
        "\(error.call)\(error.path.map { " " + $0 } ?? ""): \(error.reason.lowercased())"
    }

    private func describe(_ error: SystemError) -> String { Self.describe(error) }
}

/// A point in monotonic time, for bounded waits.
struct Deadline {
    private let nanoseconds: UInt64

    init(secondsFromNow seconds: Double) {
        let clamped = max(0, min(seconds, 1e9))
        nanoseconds = MonotonicClock.nanoseconds() + UInt64(clamped * 1e9)
    }

    var hasPassed: Bool { MonotonicClock.nanoseconds() >= nanoseconds }

    var remainingMilliseconds: Int32 {
        let now = MonotonicClock.nanoseconds()
        guard nanoseconds > now else { return 0 }
        return Int32(min((nanoseconds - now + 999_999) / 1_000_000, UInt64(Int32.max)))
    }

    /// Seconds left (0 once passed).
    var remainingSeconds: Double {
        let now = MonotonicClock.nanoseconds()
        return nanoseconds > now ? Double(nanoseconds - now) / 1e9 : 0
    }

    /// Sleeps `seconds`, but not past the deadline.
    func sleep(seconds: Double) {
        MonotonicClock.sleep(seconds: min(seconds, remainingSeconds))
    }
}
