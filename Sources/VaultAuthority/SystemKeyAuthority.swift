public import VaultKit
internal import VaultSystem
internal import FoundationEssentials
internal import Synchronization

/// Who must answer on the socket: the client refuses any other process.
public enum DaemonIdentity: Sendable, Equatable {
    /// The socket and its peer must belong to this account (`vault-auth`).
    case user(String)
    /// The socket and its peer must belong to this uid (tests).
    case uid(UInt32)

    /// The `vault-auth` system user.
    public static let standard = DaemonIdentity.user("vault-auth")
}

/// What `SystemKeyAuthority.describe` learnt about the daemon.
public struct DaemonInfo: Equatable, Sendable {
    /// Its pid and uid (from `SO_PEERCRED`).
    public var pid: Int32
    /// Its uid.
    public var uid: UInt32
    /// Its protocol version.
    public var version: Int
    /// Whether it runs with `--test-mode` (boot id and clock settable, virtual readers).
    public var testMode: Bool
}

/// What a scanning request is for (so a keyboard watch can offer the passcode only where it
/// makes sense, as the embedded path does).
public enum ScanPurpose: Sendable, Equatable {
    /// `unlock` or `verify`: Enter may choose the passcode.
    case match
    /// `enroll`: only Ctrl-C stops it.
    case enrolment
}

/// Cancels a scan the daemon runs for this client, from any thread: the CLI's keyboard watch
/// maps Enter to `.fallback` (the scan ends with `.passcodeNeeded("you chose the passcode")`,
/// which the policy turns into the passcode prompt) and Ctrl-C to `.user` (`.userCancel`), as on
/// the embedded path. A cancel counts only while a scanning request (`unlock`, `verify`,
/// `enroll`) is in flight; `watch`, when given, is also asked every 50 ms meanwhile, on the
/// thread waiting for the daemon, so a caller needs no thread of its own.
public final class ScanControl: Sendable {
    private let state = Mutex<(active: Bool, pending: ScanCancelReason?)>((false, nil))
    private let watch: (@Sendable (ScanPurpose) -> ScanCancelReason?)?

    /// A control; `watch` returns a reason once the person asked to stop (nil: go on), told
    /// what the running request is for.
    package init(watch: (@Sendable (ScanPurpose) -> ScanCancelReason?)? = nil) {
        self.watch = watch
    }

    /// Cancels the running scan (the first reason wins); does nothing when none runs.
    package func cancel(_ reason: ScanCancelReason) {
        state.withLock { s in
            if s.active && s.pending == nil { s.pending = reason }
        }
    }

    func begin() { state.withLock { $0 = (true, nil) } }
    func end() { state.withLock { $0 = (false, nil) } }

    /// The reason to send, once.
    func poll(_ purpose: ScanPurpose) -> ScanCancelReason? {
        if let watch, let reason = watch(purpose) { cancel(reason) }
        return state.withLock { $0.pending }
    }
}

/// `KeyAuthority` over `vault-authd`'s socket: the daemon holds the device secret, the prints,
/// the bindings and the counters of this uid and runs the match; this object only asks. A
/// connection is made after checking that the socket and its peer belong to the daemon's user
/// (`SO_PEERCRED`) and that no one else can replace the socket; the daemon serves requests one
/// after another on it, so the next request of this object reuses it while it is fresh (see
/// `reuseSeconds`; a passcode `get` asks four times). Events
/// (`noMatch`, `retry`, `lockedOut`) go to a request's `events`, notices (touch the reader,
/// enrolment progress) to `notices`; `control` cancels a running scan.
public final class SystemKeyAuthority: KeyAuthority {
    /// Where the daemon listens by default.
    public static let defaultSocketPath = AuthorityDaemon.defaultSocket
    /// The socket.
    public let socketPath: String
    /// Who must answer.
    public let daemon: DaemonIdentity
    /// Seconds each scan waits for a finger (`--scan-timeout`), clamped by the daemon to 1...30;
    /// a request that waits for the reader (another request has it) waits as long at most.
    public var scanTimeout: Double
    /// Cancels a running scan.
    public let control: ScanControl
    /// Shown the daemon's notices while a request runs (on the calling thread).
    package var notices: (ScanNotice) -> Void
    /// Seconds to wait for the answer to a request that does not scan (one that lists a
    /// match-on-chip reader's prints may wait for the reader, 30 s at most).
    static let replySeconds: Double = AuthorityLimits.scanSeconds.upperBound + 10
    /// Seconds to wait for the daemon's answer after a cancel was sent.
    static let cancelSeconds: Double = 5
    /// How long after its last answer a connection is used for the next request: well under
    /// the 60 s the daemon keeps an idle connection, so it is never one the daemon is closing.
    static let reuseSeconds: Double = 20
    /// The connection of the last request that ended with its answer and nothing after it,
    /// with its peer and when that was; a request takes it (a concurrent one connects anew) and
    /// gives it back when it ends the same way.
    private let kept = Mutex<(connection: AuthorityConnection, peer: PeerCredentials, at: Double)?>(nil)

    /// An authority over the daemon at `socketPath`, which must run as `daemon`.
    package init(socketPath: String = SystemKeyAuthority.defaultSocketPath, daemon: DaemonIdentity = .standard,
                scanTimeout: Double = AuthorityLimits.defaultScanSeconds, control: ScanControl = ScanControl(),
                notices: @escaping (ScanNotice) -> Void = { _ in }) {
        self.socketPath = socketPath
        self.daemon = daemon
        self.scanTimeout = scanTimeout
        self.control = control
        self.notices = notices
    }

    /// System.
    package var kind: AuthorityKind { .system }

    // MARK: finding the daemon

    /// Whether a `vault-authd` answers on `socketPath` as `daemon` (within 2 s).
    public static func probe(socketPath: String = defaultSocketPath, daemon: DaemonIdentity = .standard) -> Bool {
        (try? describe(socketPath: socketPath, daemon: daemon, within: 2)) != nil
    }

    /// The daemon answering on `socketPath` as `daemon`: pid, uid, version, mode.
    /// - Throws: `.biometryNotAvailable` (15) when none answers there or it is not the daemon's user.
    public static func describe(socketPath: String = defaultSocketPath, daemon: DaemonIdentity = .standard,
                                within seconds: Double = 5) throws -> DaemonInfo {
        let authority = SystemKeyAuthority(socketPath: socketPath, daemon: daemon)
        var peer: PeerCredentials?
        let reply = try authority.exchange(.ping, timeout: seconds, peer: &peer)
        guard case .pong(let version, let testMode) = reply.reply, let peer else { throw Self.unexpected }
        return DaemonInfo(pid: peer.pid, uid: peer.uid, version: version, testMode: testMode)
    }

    /// Connects to the socket after checking it belongs to the daemon's user, in a folder no one
    /// else can write, and that the peer runs as that user.
    private func connect() throws(VaultError) -> (AuthorityConnection, PeerCredentials) {
        let path = socketPath
        func unavailable(_ why: String) -> VaultError {
            .biometryNotAvailable("the system key authority (vault-authd) \(why)")
        }
        guard let status = try? FileStatus.of(path) else { throw unavailable("does not answer on \(path)") }
        guard status.kind == .socket else { throw unavailable("is not there: \(path) is not a socket") }
        let expected: UInt32
        switch daemon {
        case .uid(let uid):
            expected = uid
        case .user(let name):
            let owner = (try? FileManager.default.attributesOfItem(atPath: path))?[.ownerAccountName] as? String
            guard owner == name else { throw unavailable("is not there: \(path) belongs to uid \(status.owner), not to \(name)") }
            expected = status.owner
        }
        guard status.owner == expected else { throw unavailable("is not there: \(path) belongs to uid \(status.owner), not \(expected)") }
        let folder = PathText.folder(of: path)
        guard let f = try? FileStatus.of(folder), f.kind == .directory, f.owner == expected || f.owner == 0, f.permissions & 0o022 == 0 else {
            throw unavailable("is not trusted: \(folder) can be changed by another user")
        }
        let box: AuthorityConnection
        do { box = AuthorityConnection(try UnixSocket.connect(path: path), limit: AuthorityLimits.replyFrame, chunkBytes: 16 << 10) } catch { throw unavailable("does not answer on \(path) (\(error.reason))") }
        guard let peer = try? box.socket.peerCredentials() else { throw unavailable("does not answer on \(path)") }
        guard peer.uid == expected else { throw unavailable("is not there: the process on \(path) runs as uid \(peer.uid), not \(expected)") }
        try? box.socket.setSendTimeout(seconds: AuthorityLimits.requestSeconds)
        return (box, peer)
    }

    static let unexpected = VaultError.failure("vault-authd sent an unexpected reply", hint: "install matching versions of vault and vault-authd")
    static let gone = VaultError.biometryNotAvailable("the system key authority (vault-authd) stopped answering")

    // MARK: one request

    /// Sends `request` (on the kept connection, else a new one) and returns the final answer; streamed events go to
    /// `events`, notices to `notices`. A scanning request watches `control` and sends a cancel.
    /// The socket is read all the time (every 50 ms at most), `keepAlive`s included, which are
    /// dropped: the daemon cancels a request whose client leaves its messages unread for 5 s.
    /// The wait for the answer starts again at every event or notice (a scan starts, the request
    /// waits for the reader), not at a keep-alive.
    private func exchange(_ request: AuthorityRequest, key: [UInt8] = [], events: (AuthorityEvent) -> Void = { _ in },
                          timeout: Double? = nil) throws -> AuthorityResponse {
        var peer: PeerCredentials?
        return try exchange(request, key: key, events: events, timeout: timeout, peer: &peer)
    }

    private func exchange(_ request: AuthorityRequest, key: [UInt8] = [], events: (AuthorityEvent) -> Void = { _ in },
                          timeout: Double? = nil, peer: inout PeerCredentials?) throws -> AuthorityResponse {
        let frame = try AuthorityCodec.frame(request, tail: key)
        var bytes = frame.encoded()
        defer { wipe(&bytes) }
        let reused = takeKept()
        let connection: AuthorityConnection
        if let reused, (try? reused.connection.socket.sendAll(bytes)) != nil {
            (connection, peer) = (reused.connection, reused.peer)
        } else {
            reused?.connection.close()
            let made = try connect()
            (connection, peer) = (made.0, made.1)
            do { try connection.socket.sendAll(bytes) } catch { connection.close(); throw Self.gone }
        }
        var reusable = false
        defer { if reusable, let peer { keep(connection, peer) } else { connection.close() } }

        let scanning = request.mayScan
        if scanning { control.begin() }
        defer { if scanning { control.end() } }
        let patience = timeout ?? (scanning ? AuthorityLimits.scanTimeout(scanTimeout) + 10 : Self.replySeconds)
        var deadline = MonotonicClock.seconds() + patience
        var cancelSent: ScanCancelReason?
        while true {
            do {
                while let next = try connection.decoder.next() {
                    let reply = try AuthorityCodec.reply(next)
                    switch reply {
                    case .keepAlive: continue
                    case .event(let e): events(e)
                    case .notice(let n): notices(n)
                    default:
                        // Kept for the next request only after an answer that is not a
                        // refusal or a cancelled scan's (the daemon closes after those) and
                        // with nothing unread behind it.
                        reusable = if case .failed = reply { false } else { cancelSent == nil && !connection.decoder.hasPartialFrame }
                        return AuthorityResponse(reply, tail: next.tail)
                    }
                    if cancelSent == nil { deadline = MonotonicClock.seconds() + patience }
                }
            } catch let e as AuthorityFrameError {
                throw VaultError.failure("vault-authd's reply was refused: \(e.vaultError.message)")
            }
            if scanning, cancelSent == nil, let reason = control.poll(request.isEnrolment ? .enrolment : .match) {
                cancelSent = reason
                if let cancel = try? AuthorityCodec.frame(.cancel(reason: reason)) { try? connection.socket.sendAll(cancel.encoded()) }
                deadline = MonotonicClock.seconds() + Self.cancelSeconds
            }
            let left = deadline - MonotonicClock.seconds()
            guard left > 0 else {
                // The daemon did not end the scan in time: this side stops waiting all the same.
                if let cancelSent { throw cancelSent.interruption.vaultError }
                throw VaultError.biometryNotAvailable("the system key authority (vault-authd) did not answer within \(Int(patience)) s")
            }
            guard let readable = connection.isReadable(within: Int32(max(1, min(left * 1000, 50)))) else { throw Self.gone }
            guard readable else { continue }
            guard connection.receive() else { throw Self.gone }
        }
    }

    /// The kept connection, taken (a concurrent request connects anew), when it is fresh and
    /// quiet; nil otherwise. One the daemon has closed since (it stopped, or restarted) reads as
    /// at its end and is closed here; one that refuses the send (EPIPE) delivered nothing, and
    /// the caller connects anew.
    private func takeKept() -> (connection: AuthorityConnection, peer: PeerCredentials)? {
        kept.withLock { k in
            defer { k = nil }
            guard let c = k, MonotonicClock.seconds() - c.at < Self.reuseSeconds, c.connection.isReadable(within: 0) == false else {
                k?.connection.close()
                return nil
            }
            return (c.connection, c.peer)
        }
    }

    /// Keeps `connection` (whose peer was checked) for the next request, closing one kept before.
    private func keep(_ connection: AuthorityConnection, _ peer: PeerCredentials) {
        let now = MonotonicClock.seconds()
        kept.withLock { k in
            k?.connection.close()
            k = (connection, peer, now)
        }
    }

    /// The answer as the value expected, or the error it carries.
    private func answer<T>(_ response: AuthorityResponse, _ pick: (AuthorityReply) -> T?) throws -> T {
        switch response.reply {
        case .failed(let e): throw e
        case .retryLimitExceeded: throw RetryLimitExceeded()
        default:
            guard let value = pick(response.reply) else { throw Self.unexpected }
            return value
        }
    }

    // MARK: KeyAuthority

    /// The enrolled fingers of this uid.
    package func fingers() throws -> [EnrolledFinger] {
        try answer(try exchange(.fingers)) { if case .fingers(let f) = $0 { f } else { nil } }
    }

    /// The reader the daemon would use (`prefer` when present).
    package func reader(prefer: SensorIdentity?) throws -> SensorIdentity {
        try answer(try exchange(.reader(prefer: prefer))) { if case .reader(let s) = $0 { s } else { nil } }
    }

    /// A fresh single-use challenge of the daemon (for this uid).
    public func challenge() throws -> [UInt8] {
        try answer(try exchange(.challenge)) { if case .challenge(let c) = $0, c.count == 32 { c } else { nil } }
    }

    /// A new binding; the proof key goes as the frame's tail and the slot key comes back as one.
    package func bind(_ request: BindRequest, proofKey: borrowing SecretBytes) throws -> BindingGrant {
        var key = proofKey.exposedBytes()
        defer { wipe(&key) }
        let response = try exchange(.bind(request: request), key: key)
        let (binding, changes, owner) = try answer(response) { if case .bound(let b, let c, let o) = $0 { (b, c, o) } else { nil } }
        return BindingGrant(kek: try SecretBytes(copying: response.tail), binding: binding, changes: changes, owner: owner)
    }

    /// The daemon's live match for `slot`'s binding, then its key and the next one.
    package func unlock(_ slot: SlotReference, rules: PasscodeRules, prompt: String, events: (AuthorityEvent) -> Void) throws -> UnlockGrant {
        let response = try exchange(.unlock(slot: slot, rules: rules, prompt: prompt, scanTimeout: scanTimeout), events: events)
        let next = try answer(response) { if case .key(let n) = $0 { .some(n) } else { nil } }
        let n = AuthorityLimits.keyBytes
        let kek = try SecretBytes(copying: Array(response.tail[0..<n]))
        guard let next else { return UnlockGrant(kek: kek, next: nil) }
        return UnlockGrant(kek: kek, next: NextSlotKey(kek: try SecretBytes(copying: Array(response.tail[n..<2 * n])), binding: next))
    }

    /// The daemon's live match for `slot`'s binding (or a recent one), no key: its token over
    /// `nonce`, MAC'd under the proof keys only the daemon holds.
    package func verify(_ slot: SlotReference, nonce: [UInt8], reuse: Int, prompt: String, events: (AuthorityEvent) -> Void) throws -> FreshMatchToken {
        try answer(try exchange(.verify(slot: slot, nonce: nonce, reuse: reuse, prompt: prompt, scanTimeout: scanTimeout), events: events)) {
            if case .verified(let token) = $0 { token } else { nil }
        }
    }

    /// Records a passcode unlock with a proof of the vault's key.
    @discardableResult
    package func recordPasscodeUnlock(_ proof: AuthorityProof) throws -> PasscodeRecord {
        try answer(try exchange(.recordPasscodeUnlock(proof: proof))) { if case .recorded(let r) = $0 { r } else { nil } }
    }

    /// Hands the daemon the vault's next proof key (the frame's tail) under a proof it checks.
    @discardableResult
    package func rekey(_ proof: AuthorityProof, proofKey: borrowing SecretBytes) throws -> PasscodeRecord {
        var key = proofKey.exposedBytes()
        defer { wipe(&key) }
        return try answer(try exchange(.rekey(proof: proof), key: key)) { if case .recorded(let r) = $0 { r } else { nil } }
    }

    /// The daemon's live match of a confirmed print, then `proofKey` registered for `vaultID`.
    @discardableResult
    package func reregister(vaultID: [UInt8], proofKey: borrowing SecretBytes, label: String?, prompt: String,
                           events: (AuthorityEvent) -> Void) throws -> PasscodeRecord {
        var key = proofKey.exposedBytes()
        defer { wipe(&key) }
        let response = try exchange(.reregister(vaultID: vaultID, label: label, prompt: prompt, scanTimeout: scanTimeout), key: key, events: events)
        return try answer(response) { if case .recorded(let r) = $0 { r } else { nil } }
    }

    /// The wait before a passcode attempt.
    public func beginPasscodeAttempt(vaultID: [UInt8]) throws -> Int {
        try answer(try exchange(.beginPasscodeAttempt(vaultID: vaultID))) { if case .passcodeWait(let s) = $0 { s } else { nil } }
    }

    /// Counts a wrong passcode.
    public func recordPasscodeFailure(vaultID: [UInt8]) throws {
        try answer(try exchange(.recordPasscodeFailure(vaultID: vaultID))) { if case .done = $0 { () } else { nil } }
    }

    /// Enrols a finger on the daemon's reader (progress in `notices`).
    package func enroll(finger: String?, sensor: SensorIdentity?, proof: AuthorityProof?, label: String?) throws -> EnrolledFinger {
        try answer(try exchange(.enroll(finger: finger, sensor: sensor, proof: proof, label: label, scanTimeout: scanTimeout))) {
            if case .enrolled(let f) = $0 { f } else { nil }
        }
    }

    /// Removes a finger's prints.
    package func unenroll(finger: String, proof: AuthorityProof?, label: String?) throws -> [EnrolledFinger] {
        try answer(try exchange(.unenroll(finger: finger, proof: proof, label: label))) { if case .unenrolled(let f) = $0 { f } else { nil } }
    }

    /// Forgets every print and binding of this uid.
    package func resetPrints(proof: AuthorityProof?) throws {
        try answer(try exchange(.resetPrints(proof: proof))) { if case .done = $0 { () } else { nil } }
    }

    /// The daemon's view of this uid for `vault status`.
    package func status(slot: SlotReference?, sensor: SensorIdentity?, rules: PasscodeRules) throws -> AuthorityStatus {
        try answer(try exchange(.status(slot: slot, sensor: sensor, rules: rules))) { if case .status(let s) = $0 { s } else { nil } }
    }

    /// Test mode only: the boot id and the time the daemon uses for this uid (nil: the real ones).
    /// - Throws: `.usage` from a daemon not started with `--test-mode`.
    public func setTestSettings(bootID: String?, now: Int64?) throws {
        try answer(try exchange(.testSettings(bootID: bootID, now: now))) { if case .done = $0 { () } else { nil } }
    }
}
