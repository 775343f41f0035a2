package import VaultKit

/// One request to `vault-authd`, mirroring `KeyAuthority`. Encoded as JSON with one key, the
/// request's kind, whose value holds its fields (`{"unlock":{"slot":{...},"rules":{...},...}}`).
/// The caller is never named here: the daemon takes the uid from `SO_PEERCRED`. Keys travel only
/// in the frame's binary tail: the proof key of a `bind`.
package enum AuthorityRequest: Codable, Equatable, Sendable {
    /// Does a daemon answer, in which protocol version and mode (`pong`).
    case ping
    /// The caller's enrolled fingers (`fingers`).
    case fingers
    /// Opens the reader `prefer` names, else the first usable one (`reader`).
    case reader(prefer: SensorIdentity?)
    /// A fresh single-use challenge for a proof (`challenge`).
    case challenge
    /// A new binding (`request.slot`), proven by `request.proof` once the vault is known; the
    /// tail is the vault's 32-byte proof key (`bound`, tail: the KEK).
    case bind(request: BindRequest)
    /// A live match for `slot`'s binding, then its key and the next one (`key`, tail: the KEK,
    /// then the next KEK when `key` names one). Streams events.
    case unlock(slot: SlotReference, rules: PasscodeRules, prompt: String, scanTimeout: Double)
    /// A live match for `slot`'s binding (or one at most `reuse` seconds old), no key: the token
    /// over the vault's 32-byte `nonce` (`verified`).
    case verify(slot: SlotReference, nonce: [UInt8], reuse: Int, prompt: String, scanTimeout: Double)
    /// Records a passcode unlock with a proof (`recorded`).
    case recordPasscodeUnlock(proof: AuthorityProof)
    /// Takes the vault's next proof key (the tail, 32 bytes) for a proof under a key held for it
    /// (`recorded`).
    case rekey(proof: AuthorityProof)
    /// After a live match of a confirmed print, registers the tail (32 bytes) as the key of the
    /// known vault `vaultID` (`recorded`). Streams events.
    case reregister(vaultID: [UInt8], label: String?, prompt: String, scanTimeout: Double)
    /// Counts a passcode attempt before it is tried (`passcodeWait`).
    case beginPasscodeAttempt(vaultID: [UInt8])
    /// Counts a wrong passcode (`done`).
    case recordPasscodeFailure(vaultID: [UInt8])
    /// Enrols a finger on the daemon's reader (`enrolled`), with an owner vault's proof once
    /// there is one; `label` names that vault in the history. Streams enrolment progress.
    case enroll(finger: String?, sensor: SensorIdentity?, proof: AuthorityProof?, label: String?, scanTimeout: Double)
    /// Removes a finger's prints (`unenrolled`), with an owner vault's proof once there is one.
    case unenroll(finger: String, proof: AuthorityProof?, label: String?)
    /// Forgets every print and binding of the caller (`done`).
    case resetPrints(proof: AuthorityProof?)
    /// The caller's view for `vault status` (`status`).
    case status(slot: SlotReference?, sensor: SensorIdentity?, rules: PasscodeRules)
    /// Test mode only: the boot id and the time the daemon uses for the caller's uid from now on
    /// (nil: the real ones). Refused by a daemon not started with `--test-mode` (`done`).
    case testSettings(bootID: String?, now: Int64?)
    /// Cancels the scan or enrolment running on this connection; sent while a request runs,
    /// ignored otherwise. Never answered by itself: the running request ends with its error.
    case cancel(reason: ScanCancelReason)

    /// Whether the request may run a scan or an enrolment (the client watches for cancels and
    /// waits longer for its reply).
    public var mayScan: Bool {
        switch self {
        case .unlock, .verify, .enroll, .reregister: true
        default: false
        }
    }

    /// Whether the request is an enrolment.
    var isEnrolment: Bool {
        if case .enroll = self { return true }
        return false
    }

    /// Whether the frame carries the 32-byte proof key as its tail.
    var carriesKey: Bool {
        switch self {
        case .bind, .rekey, .reregister: true
        default: false
        }
    }
}

/// Who cancels a running scan; the scan ends with the error this means, exactly as on the
/// embedded path.
package enum ScanCancelReason: String, Codable, Sendable, CaseIterable {
    /// The person pressed Ctrl-C: `.userCancel` (11).
    case user
    /// The person chose the passcode (Enter): `.passcodeNeeded("you chose the passcode")` (12),
    /// which the policy turns into the passcode prompt.
    case fallback
    /// The program gave up (`vault lock`, the client went away): `.appCancel` (18).
    case program

    /// The interruption the scan ends with.
    package var interruption: ScanInterruption {
        switch self {
        case .user: .userCancelled
        case .fallback: .fallbackRequested
        case .program: .programCancelled
        }
    }
}

/// What the daemon tells the person at the reader while a request runs (streamed, not an answer).
package enum ScanNotice: Codable, Equatable, Sendable {
    /// A scan starts now: touch the reader. `prompt` is the request's prompt.
    case touchReader(prompt: String)
    /// An enrolment starts on `reader`: `stages` touches.
    case enrolling(finger: String, reader: String, stages: Int)
    /// An enrolment stage was taken (`advice` nil) or must be repeated (`advice` says how).
    case enrollProgress(completed: Int, total: Int, advice: String?)
    /// Another request has the reader: this one waits its turn (first come, first served), at
    /// most its scan timeout.
    case waitingForReader
}

/// One message from the daemon: zero or more streamed `event`/`notice` messages, then one final
/// answer. Keys travel only in the frame's binary tail (`bound`, `key`).
package enum AuthorityReply: Codable, Equatable, Sendable {
    /// Streamed: a scan did not match, needs retrying, or locked fingerprint out.
    case event(event: AuthorityEvent)
    /// Streamed: touch the reader, enrolment progress.
    case notice(notice: ScanNotice)
    /// Streamed every second while a request runs: the client reads it (and drops it), so the
    /// daemon sees that it still reads; one that leaves it unread loses its request.
    case keepAlive
    /// `ping`: the protocol version and whether the daemon runs in test mode.
    case pong(version: Int, testMode: Bool)
    /// `fingers`.
    case fingers(fingers: [EnrolledFinger])
    /// `reader`.
    case reader(sensor: SensorIdentity)
    /// `challenge`: 32 random bytes.
    case challenge(challenge: [UInt8])
    /// `bind`: the slot's public parameters, what changed in the prints since the vault was
    /// last bound, whether it is an owner vault; the tail is its 32-byte key.
    case bound(binding: FingerprintBinding, changes: [PrintChange], owner: Bool)
    /// `unlock`: the tail is the slot's 32-byte key, then (when `next` is given) the 32-byte key
    /// the slot is re-sealed with under the parameters `next`.
    case key(next: FingerprintBinding?)
    /// `verify`: the token of the match (its `reusedAge` nil after a scan), MAC'd under the
    /// proof keys registered for the vault.
    case verified(token: FreshMatchToken)
    /// `recordPasscodeUnlock`: what was recorded.
    case recorded(record: PasscodeRecord)
    /// `beginPasscodeAttempt`: seconds to wait before the attempt.
    case passcodeWait(seconds: Int)
    /// `enroll`.
    case enrolled(finger: EnrolledFinger)
    /// `unenroll`: what went.
    case unenrolled(fingers: [EnrolledFinger])
    /// `resetPrints`, `testSettings`.
    case done
    /// `status` (its kind is `system`).
    case status(status: AuthorityStatus)
    /// `unlock`, `verify`: three scans did not match (`RetryLimitExceeded`).
    case retryLimitExceeded
    /// The request failed or was refused.
    case failed(error: VaultError)

    /// Whether this ends the request (anything but a streamed event or notice).
    public var isFinal: Bool {
        switch self {
        case .event, .notice, .keepAlive: false
        default: true
        }
    }

    /// How many bytes of keys the frame's tail carries: one 32-byte key for `bound` and `key`,
    /// two for a `key` with a next key.
    var tailBytes: Int {
        switch self {
        case .bound: AuthorityLimits.keyBytes
        case .key(let next): next == nil ? AuthorityLimits.keyBytes : 2 * AuthorityLimits.keyBytes
        default: 0
        }
    }
}

/// Every bound the daemon and the client enforce.
public enum AuthorityLimits {
    /// The largest request frame (64 KiB): requests are small.
    public static let requestFrame = 64 << 10
    /// The largest reply frame (1 MiB): a status with every enrolled finger fits many times over.
    public static let replyFrame = 1 << 20
    /// Bytes of a key in a tail (proof key, slot key).
    public static let keyBytes = 32
    /// The longest vault id accepted.
    public static let vaultID = 64
    /// The longest prompt, finger name, driver, device id or boot id, in UTF-8 bytes.
    public static let text = 512
    /// A scan timeout is clamped to this range (seconds); NaN and non-positive ones become 30. It
    /// also bounds a request's wait for the reader: no caller holds it, or waits for it, longer.
    public static let scanSeconds: ClosedRange<Double> = 1...30
    /// The times a test-mode request may set (seconds since 1970, up to the year 5138): far
    /// enough from the integer limits that no rule's arithmetic can overflow.
    public static let testClock: ClosedRange<Int64> = 0...100_000_000_000
    /// The default scan timeout.
    public static let defaultScanSeconds: Double = 30
    /// The time a peer has to send the rest of a request once its first byte arrived.
    public static let requestSeconds: Double = 10
    /// The time a peer has to take a reply.
    public static let replySeconds: Double = 10
    /// A connection with no request for this long is closed.
    public static let connectionIdleSeconds: Double = 60
    /// At most this many connections at once.
    public static let connections = 128
    /// At most this many connections of one uid with an account (in the user database) at once.
    public static let connectionsPerUID = 32
    /// At most this many connections at once of all the uids without an account together
    /// (subordinate uids: one person has 65,536 of them).
    public static let connectionsWithoutAccount = 4
    /// While a request runs, a `keepAlive` goes out when the client has read everything and
    /// nothing was sent for this long.
    public static let keepAliveSeconds: Double = 1
    /// A client that leaves a message unread this long while its request runs (stopped, or
    /// not reading) loses the request: the scan is cancelled and the reader freed.
    public static let unreadSeconds: Double = 5
    /// The state folder of a uid without an account is removed once nothing in it changed for
    /// this long (at the daemon's start and every `staleStateSweepSeconds`).
    public static let staleStateSeconds: Double = 600
    /// How often the daemon looks for such folders.
    public static let staleStateSweepSeconds: Double = 3600

    /// `seconds` as a scan timeout: clamped into `scanSeconds`; NaN, zero and negatives give the default.
    public static func scanTimeout(_ seconds: Double) -> Double {
        guard !seconds.isNaN, seconds > 0 else { return defaultScanSeconds }
        return min(max(seconds, scanSeconds.lowerBound), scanSeconds.upperBound)
    }
}

extension AuthorityRequest {
    /// Checks every field against `AuthorityLimits`.
    /// - Throws: `.usage` naming the field out of bounds.
    public func validate() throws(VaultError) {
        switch self {
        case .ping, .fingers, .challenge:
            break
        case .reader(let prefer):
            try Self.check(prefer)
        case .bind(let request):
            try Self.check(request.slot)
            try Self.check(request.sensor)
            try Self.check(request.rules)
            if let proof = request.proof { try Self.check(proof) }
            guard request.confirm.count <= 10 else { throw .usage("malformed request: at most 10 fingers are confirmed at once") }
            for f in request.confirm { try Self.check(f, "finger") }
            if let label = request.label { try Self.check(label, "vault name") }
        case .unlock(let slot, let rules, let prompt, _):
            try Self.check(slot)
            try Self.check(rules)
            try Self.check(prompt, "prompt", allowEmpty: true)
        case .verify(let slot, let nonce, let reuse, let prompt, _):
            try Self.check(slot)
            guard nonce.count == 32 else { throw .usage("malformed request: a fresh match is verified over a 32-byte nonce") }
            guard reuse >= 0 else { throw .usage("malformed request: a negative reuse window") }
            try Self.check(prompt, "prompt", allowEmpty: true)
        case .recordPasscodeUnlock(let proof), .rekey(let proof):
            try Self.check(proof)
        case .reregister(let vaultID, let label, let prompt, _):
            try Self.check(vaultID: vaultID)
            if let label { try Self.check(label, "vault name") }
            try Self.check(prompt, "prompt", allowEmpty: true)
        case .unenroll(let finger, let proof, let label):
            if let proof { try Self.check(proof) }
            try Self.check(finger, "finger")
            if let label { try Self.check(label, "vault name") }
        case .beginPasscodeAttempt(let vaultID), .recordPasscodeFailure(let vaultID):
            try Self.check(vaultID: vaultID)
        case .enroll(let finger, let sensor, let proof, let label, _):
            if let finger { try Self.check(finger, "finger") }
            try Self.check(sensor)
            if let proof { try Self.check(proof) }
            if let label { try Self.check(label, "vault name") }
        case .resetPrints(let proof):
            if let proof { try Self.check(proof) }
        case .status(let slot, let sensor, let rules):
            if let slot { try Self.check(slot) }
            try Self.check(sensor)
            try Self.check(rules)
        case .testSettings(let bootID, let now):
            if let bootID { try Self.check(bootID, "boot id") }
            if let now, !AuthorityLimits.testClock.contains(now) {
                throw .usage("malformed request: a test clock must be within \(AuthorityLimits.testClock) seconds since 1970")
            }
        case .cancel:
            break
        }
    }

    static func check(_ text: String, _ what: String, allowEmpty: Bool = false) throws(VaultError) {
        let n = text.utf8.count
        guard n <= AuthorityLimits.text, allowEmpty || n > 0 else {
            throw .usage("malformed request: the \(what) must be \(allowEmpty ? 0 : 1) to \(AuthorityLimits.text) bytes")
        }
    }

    static func check(vaultID: [UInt8]) throws(VaultError) {
        guard (1...AuthorityLimits.vaultID).contains(vaultID.count) else {
            throw .usage("malformed request: a vault id must be 1 to \(AuthorityLimits.vaultID) bytes")
        }
    }

    static func check(_ slot: SlotReference) throws(VaultError) {
        try check(vaultID: slot.vaultID)
        guard slot.slotID >= 0 else { throw .usage("malformed request: a negative slot id") }
        if let key = slot.keyID { try check(key, "key id") }
    }

    static func check(_ sensor: SensorIdentity?) throws(VaultError) {
        guard let sensor else { return }
        try check(sensor.driver, "driver")
        try check(sensor.deviceID, "device id", allowEmpty: true)
    }

    static func check(_ rules: PasscodeRules) throws(VaultError) {
        guard (0...1_000_000).contains(rules.intervalHours) else {
            throw .usage("malformed request: the passcode interval must be 0 to 1000000 hours")
        }
    }

    static func check(_ proof: AuthorityProof) throws(VaultError) {
        try check(vaultID: proof.vaultID)
        guard proof.challenge.count == 32, proof.mac.count == 32 else {
            throw .usage("malformed request: a proof has a 32-byte challenge and a 32-byte MAC")
        }
    }
}
