internal import Glibc

/// What `poll(2)` watches for, and what it reports.
public struct PollEvents: OptionSet, Sendable {
    /// The `poll(2)` bits.
    public let rawValue: Int16
    /// Events from `poll(2)` bits.
    public init(rawValue: Int16) { self.rawValue = rawValue }
    /// `POLLIN`: data to read (or end of file).
    public static let readable = PollEvents(rawValue: Int16(POLLIN))
    /// `POLLOUT`: room to write.
    public static let writable = PollEvents(rawValue: Int16(POLLOUT))
    /// `POLLERR` (reported only).
    public static let error = PollEvents(rawValue: Int16(POLLERR))
    /// `POLLHUP`: the other end hung up (reported only).
    public static let hangUp = PollEvents(rawValue: Int16(POLLHUP))
    /// `POLLNVAL`: the descriptor is not open (reported only).
    public static let invalid = PollEvents(rawValue: Int16(POLLNVAL))
}

/// One descriptor for ``Poll/wait(_:timeoutMilliseconds:retryOnInterrupt:)``.
public struct PollRequest: Sendable {
    /// The descriptor to watch.
    public var fd: Int32
    /// What to watch it for.
    public var events: PollEvents
    /// A descriptor and the events to watch for.
    public init(fd: Int32, events: PollEvents) {
        self.fd = fd
        self.events = events
    }
}

/// `poll(2)` over several descriptors.
public enum Poll {
    /// Waits until one of the descriptors is ready or `timeoutMilliseconds` pass (`-1`: no limit).
    /// - Returns: what happened on each descriptor, in the order given (all empty on a timeout).
    /// - Throws: ``SystemError`` for `poll`; with `retryOnInterrupt` false, a signal throws
    ///   `EINTR` (``SystemError/isInterrupted``) so the caller can act on it.
    public static func wait(_ requests: [PollRequest], timeoutMilliseconds: Int32,
                            retryOnInterrupt: Bool = true) throws(SystemError) -> [PollEvents] {
        var fds = requests.map { pollfd(fd: $0.fd, events: $0.events.rawValue, revents: 0) }
        let count = nfds_t(fds.count)
        try syscall("poll", retryOnInterrupt: retryOnInterrupt) { Glibc.poll(&fds, count, timeoutMilliseconds) }
        return fds.map { PollEvents(rawValue: $0.revents) }
    }

    /// Whether `fd` becomes readable within `timeoutMilliseconds`.
    /// - Throws: ``SystemError`` for `poll`.
    public static func isReadable(_ fd: Int32, timeoutMilliseconds: Int32) throws(SystemError) -> Bool {
        try !wait([PollRequest(fd: fd, events: .readable)], timeoutMilliseconds: timeoutMilliseconds)[0].isEmpty
    }
}

/// Monotonic time, for bounded waits that a clock change cannot stretch.
public enum MonotonicClock {
    /// Nanoseconds since an arbitrary start (`CLOCK_MONOTONIC`).
    public static func nanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Seconds since an arbitrary start.
    public static func seconds() -> Double { Double(nanoseconds()) / 1e9 }

    /// Sleeps `seconds` (resuming after signals until the time has passed).
    public static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        let clamped = min(seconds, 1e9)
        var request = timespec(tv_sec: Int(clamped), tv_nsec: Int((clamped - Double(Int(clamped))) * 1e9))
        var remainder = timespec()
        while nanosleep(&request, &remainder) != 0 && errno == EINTR { request = remainder }
    }
}
