package import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// One request's link to its client while the daemon answers it: streamed messages go out
/// (`notify`), a cancel comes in (`cancel`, from the connection's thread), and what the request
/// holds (the reader, the scan lease) is given back when it ends (`onEnd`).
public final class ScanSession: @unchecked Sendable {
    /// The caller's uid (from `SO_PEERCRED`).
    public let uid: UInt32
    /// Whether the user database has an account of that uid. A uid without one (a subordinate
    /// uid, a deleted user) never gets state of its own: it is answered as an empty state, and
    /// what would make state (`bind`, `enroll`) is refused.
    public let hasAccount: Bool
    private let lock = ThreadLock()
    private var reason: ScanCancelReason?
    private var hook: (@Sendable (ScanCancelReason) -> Void)?
    private var releases: [() -> Void] = []
    private var timeout = AuthorityLimits.defaultScanSeconds
    private let sink: @Sendable (AuthorityReply) -> Void

    /// A session of `uid` whose streamed messages go to `send` (called from any thread).
    /// `hasAccount` is what the user database said of `uid` when the connection came (looked up
    /// now when not given; a database that cannot be read counts as no account).
    package init(uid: UInt32, hasAccount: Bool? = nil, send: @escaping @Sendable (AuthorityReply) -> Void = { _ in }) {
        self.uid = uid
        self.hasAccount = hasAccount ?? Self.hasAccount(uid)
        sink = send
    }

    /// Whether the user database has an account of `uid` (`getpwuid_r`); false when it has
    /// none or cannot be read.
    public static func hasAccount(_ uid: UInt32) -> Bool {
        if case .account = ProcessIdentity.lookUpUser(uid) { return true }
        return false
    }

    /// Seconds a scan waits for a finger (the request's `scanTimeout`, clamped).
    public var scanTimeout: Double {
        get { lock.withLock { timeout } }
        set { lock.withLock { timeout = AuthorityLimits.scanTimeout(newValue) } }
    }

    /// Cancels the running scan (and any later one of this request); the first reason wins.
    /// Callable from any thread.
    package func cancel(_ reason: ScanCancelReason) {
        let call: (@Sendable (ScanCancelReason) -> Void)? = lock.withLock {
            guard self.reason == nil else { return nil }
            self.reason = reason
            return hook
        }
        call?(reason)
    }

    /// Why the request was cancelled, nil while it was not.
    package var cancelReason: ScanCancelReason? { lock.withLock { reason } }

    /// Sends a streamed event or notice to the client.
    package func notify(_ reply: AuthorityReply) {
        sink(reply)
    }

    /// Runs `body` (a blocking scan) with `onCancel` registered: a cancel arriving meanwhile, or
    /// one that came before, calls it once, from the cancelling thread.
    package func whileCancellable<T>(onCancel: @escaping @Sendable (ScanCancelReason) -> Void, _ body: () throws -> T) rethrows -> T {
        let early: ScanCancelReason? = lock.withLock {
            hook = onCancel
            return reason
        }
        defer { lock.withLock { hook = nil } }
        if let early { onCancel(early) }
        return try body()
    }

    /// Registers what to give back when the request ends (run last registered first).
    public func onEnd(_ release: @escaping () -> Void) {
        lock.withLock { releases.append(release) }
    }

    /// Ends the request: gives back everything it holds. The handler calls it once per request.
    func end() {
        let all: [() -> Void] = lock.withLock {
            defer { releases.removeAll() }
            return releases
        }
        for release in all.reversed() { release() }
    }
}

/// A reader opened for one request (the daemon's adapter of a FingerprintKit sensor, or a test's
/// scripted reader). Cancellation reaches it through its session's `whileCancellable`.
package protocol SessionReader: FingerprintReader {
    /// Whether listing the chip's prints needs the reader itself (match-on-chip readers): then
    /// it waits for the scan lease like a scan.
    var storesPrints: Bool { get }
}

/// Where the daemon's readers come from: FingerprintKit's (`LibfprintReaders`), or a test's.
package protocol ReaderSource: Sendable {
    /// Opens the reader `prefer` names (else the first usable one) for the request of `session`;
    /// what it holds is given back through `session.onEnd`.
    /// - Throws: `VaultError.biometryNotAvailable` (15), `.systemCancel` (13, busy).
    func open(prefer: SensorIdentity?, session: ScanSession) throws -> any SessionReader
    /// Which backend serves the readers and why (`vault doctor`, `vault status`).
    var backendDescription: String { get }
    /// The fingers the backend itself keeps for `uid` (fprintd's), nil when it keeps none.
    func backendFingers(uid: UInt32) -> [String]?
}

extension ReaderSource {
    /// A reader source that does not say.
    public var backendDescription: String { "libfprint" }
    /// A reader source whose prints are all vault's.
    public func backendFingers(uid: UInt32) -> [String]? { nil }
}

/// One scan at a time in the daemon (libfprint runs one operation at a time anyway): a request
/// takes the lease at its first scan, enrolment or chip listing and keeps it until it ends, so
/// its three tries are not interleaved with another request's. Other requests wait in a queue,
/// first come first served (a client asking again and again cannot pass one that waits), each
/// told once that it waits (`ScanNotice.waitingForReader`) and each at most its own scan timeout
/// (at most 30 s), then "busy" (13). A waiter that is cancelled (its client went away or stopped
/// reading) leaves the queue.
final class ScanLease: @unchecked Sendable {
    private let condition = ThreadCondition()
    private var holder: ObjectIdentifier?
    private var queue: [ObjectIdentifier] = []

    /// Takes the lease for `session` (at once when it already holds it, or when it is free and
    /// nobody waits).
    /// - Throws: `ScanInterruption.busy` after the session's scan timeout, the session's cancel
    ///   reason when it is cancelled while waiting.
    func acquire(for session: ScanSession) throws(ScanInterruption) {
        let me = ObjectIdentifier(session)
        condition.lock()
        defer { condition.unlock() }
        if holder == me { return }
        if holder != nil || !queue.isEmpty {
            let wait = session.scanTimeout
            let deadline = MonotonicClock.seconds() + wait
            queue.append(me)
            defer {
                queue.removeAll { $0 == me }
                condition.broadcast()
            }
            session.notify(.notice(notice: .waitingForReader))
            while holder != nil || queue.first != me {
                if let reason = session.cancelReason { throw reason.interruption }
                let left = deadline - MonotonicClock.seconds()
                guard left > 0 else {
                    throw .busy("the fingerprint reader stayed in use by another request for \(Int(wait.rounded())) s; try again when it is done")
                }
                // Short slices: a cancel does not signal this condition.
                _ = condition.wait(seconds: min(left, 0.05))
            }
        }
        holder = me
        session.onEnd { [self] in release(me) }
    }

    private func release(_ owner: ObjectIdentifier) {
        condition.lock()
        if holder == owner { holder = nil }
        condition.broadcast()
        condition.unlock()
    }

    /// Whether a request holds the lease (tests).
    var isHeld: Bool {
        condition.lock()
        defer { condition.unlock() }
        return holder != nil
    }

    /// How many requests wait for it (tests).
    var waiting: Int {
        condition.lock()
        defer { condition.unlock() }
        return queue.count
    }
}

/// The reader as the hosted authority sees it: before each scan, enrolment or chip listing it
/// checks that the request was not cancelled, takes the scan lease, and tells the client to
/// touch the reader.
final class LeasedReader: FingerprintReader {
    let inner: any SessionReader
    let session: ScanSession
    let lease: ScanLease

    init(_ inner: any SessionReader, session: ScanSession, lease: ScanLease) {
        self.inner = inner
        self.session = session
        self.lease = lease
    }

    var identity: SensorIdentity { inner.identity }

    func chipPrints() throws -> [String] {
        if inner.storesPrints { try hold() }
        return try inner.chipPrints()
    }

    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        try hold()
        session.notify(.notice(notice: .touchReader(prompt: prompt)))
        return try inner.scan(against: prints, prompt: prompt)
    }

    func enroll(finger: String) throws -> [UInt8] {
        try hold()
        return try inner.enroll(finger: finger)
    }

    func deletePrint(_ data: [UInt8]) throws {
        try hold()
        try inner.deletePrint(data)
    }

    private func hold() throws(ScanInterruption) {
        if let reason = session.cancelReason { throw reason.interruption }
        try lease.acquire(for: session)
    }
}
