internal import Glibc

/// A connected Unix stream socket, closed in `deinit`. Every system call it makes goes through
/// ``check(_:_:)``, which turns `-1` and `errno` into a ``VirtualReaderError``.
final class PosixSocket {
    private(set) var descriptor: Int32
    let path: String

    private init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit { close() }

    func close() {
        if descriptor >= 0 { _ = Glibc.close(descriptor) }
        descriptor = -1
    }

    /// Connects to `path`, retrying every 20 ms while nothing listens there (`ENOENT`, `ECONNREFUSED`)
    /// until `deadline`.
    static func connect(path: String, deadline: Deadline) throws(VirtualReaderError) -> PosixSocket {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        let encoded = Array(path.utf8)
        guard !encoded.isEmpty, encoded.count < capacity else {
            throw .socket("socket path too long (\(encoded.count) bytes, at most \(capacity - 1)): \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: encoded) }

        while true {
            let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            let descriptor = try check("socket", socket(AF_UNIX, type, 0))
            let connection = PosixSocket(descriptor: descriptor, path: path)
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if result == 0 { return connection }
            let code = errno
            guard code == ENOENT || code == ECONNREFUSED || code == EINTR else {
                throw .socket("connect \(path): \(describe(code))")
            }
            guard !deadline.hasPassed else { throw .notListening(path: path) }
            deadline.sleep(seconds: 0.02)
        }
    }

    /// Writes all of `bytes`, looping over partial writes; never raises `SIGPIPE`.
    func write(_ bytes: [UInt8]) throws(VirtualReaderError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes {
                send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EPIPE || code == ECONNRESET { throw .connectionClosed(path: path) }
                throw .socket("send \(path): \(describe(code))")
            }
            offset += written
        }
    }

    /// Reads until the peer closes the connection, or throws `noAcknowledgement` at `deadline`.
    func readToEnd(deadline: Deadline) throws(VirtualReaderError) -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            guard try waitReadable(until: deadline) else { throw .noAcknowledgement(path: path) }
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count == 0 { return received }
            if count < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == ECONNRESET { throw .connectionClosed(path: path) }
                throw .socket("recv \(path): \(describe(code))")
            }
            received += buffer[0..<count]
        }
    }

    /// Whether the peer closed the connection (or it failed) by `deadline`; the driver never writes
    /// on an image connection, so readability means end of file.
    func isClosedByPeer(waitingUntil deadline: Deadline) throws(VirtualReaderError) -> Bool {
        try waitReadable(until: deadline)
    }

    private func waitReadable(until deadline: Deadline) throws(VirtualReaderError) -> Bool {
        while true {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let result = poll(&entry, 1, deadline.remainingMilliseconds)
            if result > 0 { return true }
            if result == 0 { return false }
            if errno != EINTR { throw .socket("poll \(path): \(describe(errno))") }
        }
    }

    private static func check(_ call: String, _ result: Int32) throws(VirtualReaderError) -> Int32 {
        guard result >= 0 else { throw .socket("\(call): \(describe(errno))") }
        return result
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code)).lowercased()
    }

    private func describe(_ code: Int32) -> String { Self.describe(code) }
}

/// A point in monotonic time, for bounded waits.
struct Deadline {
    private let nanoseconds: UInt64

    init(secondsFromNow seconds: Double) {
        let clamped = max(0, min(seconds, 1e9))
        nanoseconds = Deadline.now() + UInt64(clamped * 1e9)
    }

    var hasPassed: Bool { Deadline.now() >= nanoseconds }

    var remainingMilliseconds: Int32 {
        let now = Deadline.now()
        guard nanoseconds > now else { return 0 }
        return Int32(min((nanoseconds - now + 999_999) / 1_000_000, UInt64(Int32.max)))
    }

    /// Sleeps `seconds`, but not past the deadline.
    func sleep(seconds: Double) {
        let remaining = Double(remainingMilliseconds) / 1000
        let interval = min(seconds, remaining)
        guard interval > 0 else { return }
        var request = timespec(tv_sec: Int(interval), tv_nsec: Int((interval - Double(Int(interval))) * 1e9))
        var remainder = timespec()
        while nanosleep(&request, &remainder) != 0 && errno == EINTR { request = remainder }
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
