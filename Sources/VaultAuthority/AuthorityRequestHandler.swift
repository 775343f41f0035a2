internal import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// A final answer and its binary tail (a slot key), wiped when it goes.
public final class AuthorityResponse {
    /// The reply.
    package let reply: AuthorityReply
    /// The 32-byte slot key of `bound` and `key`, empty otherwise.
    public var tail: [UInt8]

    /// A response of `reply` and `tail`.
    package init(_ reply: AuthorityReply, tail: [UInt8] = []) {
        self.reply = reply
        self.tail = tail
    }

    deinit { wipe(&tail) }

    /// The response as a frame.
    public func frame() -> AuthorityFrame {
        AuthorityCodec.frame(reply, tail: tail)
    }
}

/// What `vault-authd` does with a request, without the socket: one `EmbeddedKeyAuthority` per
/// calling uid, over `STATE/uid-N` (0700, the daemon's), with the daemon's boot id and clock (a
/// test-mode daemon lets a uid set its own), its own challenge book, and the daemon's readers
/// behind the scan lease. The uid is the peer's, never the request's. Every rule is VaultKit's;
/// this adds the per-uid isolation, the one-scan-at-a-time lease and the test-mode switch.
///
/// A uid's folder is made only by a request that makes state (`bind`, `enroll`), and only for a
/// uid with an account in the user database; every other request of a uid without a folder, and
/// every request of a uid without an account, is answered as an empty state answers it, with
/// nothing written. So neither asking nor a uid of a subordinate range costs disk.
public final class AuthorityRequestHandler: @unchecked Sendable {
    /// The daemon's state folder (each uid has `uid-N` in it).
    public let stateFolder: String
    /// Whether requests may set a boot id and a clock (`--test-mode`).
    public let testMode: Bool
    /// Where each uid's device secret rests: sealed by the TPM when the daemon has one.
    let sealing: DeviceSecretSealing
    /// The space kept back in the state folder (`STATE/reserve`) for writes that find the file
    /// system full; made whole again at the first request that finds room.
    let reserve: StateReserve?
    private let readers: any ReaderSource
    let lease = ScanLease()
    private let bootID: String
    private let lock = ThreadLock()
    private var settings: [UInt32: TestSettings] = [:]
    private var books: [UInt32: ChallengeBook] = [:]

    /// The test-mode settings of one uid.
    struct TestSettings {
        var bootID: String?
        var now: Int64?
    }

    /// A handler keeping its state in `stateFolder` (created 0700 when missing), scanning with
    /// `readers`, with the kernel's boot id.
    /// - Throws: `.io` when the folder cannot be made.
    package convenience init(stateFolder: String, testMode: Bool, readers: any ReaderSource) throws {
        try self.init(stateFolder: stateFolder, testMode: testMode, readers: readers, sealing: .filePermissions, reserve: nil)
    }

    /// The same, with the device secrets resting as `sealing` says (the daemon's `--tpm`) and
    /// `reserve` given back to state writes that find the file system full.
    init(stateFolder: String, testMode: Bool, readers: any ReaderSource, sealing: DeviceSecretSealing,
         reserve: StateReserve?) throws {
        self.stateFolder = stateFolder
        self.sealing = sealing
        self.reserve = reserve
        self.testMode = testMode
        self.readers = readers
        bootID = EmbeddedKeyAuthority.currentBootID()
        do { try PrivateFiles.makeFolder(stateFolder) } catch { throw VaultError.io(path: stateFolder, error.reason) }
    }

    /// The folder of `uid`'s state.
    public func folder(of uid: UInt32) -> String { stateFolder + "/uid-\(uid)" }

    /// Decodes a request frame and answers it (a refused frame gets a `failed` usage reply).
    public func handle(frame: AuthorityFrame, session: ScanSession) -> AuthorityResponse {
        let request: AuthorityRequest
        do { request = try AuthorityCodec.request(frame) } catch {
            session.end()
            return AuthorityResponse(.failed(error: error))
        }
        return frame.withTailCopy { handle(request, key: $0, session: session) }
    }

    /// Answers one request of `session.uid`; `key` is the proof key of a `bind`. Streamed events
    /// and notices go through the session; what the request held is given back before this returns.
    package func handle(_ request: AuthorityRequest, key: [UInt8], session: ScanSession) -> AuthorityResponse {
        defer { session.end() }
        do {
            try request.validate()
            switch request {
            case .ping:
                return AuthorityResponse(.pong(version: Int(AuthorityFrame.version), testMode: testMode))
            case .cancel:
                return AuthorityResponse(.failed(error: .usage("refused: cancel applies only to a running request")))
            case .testSettings(let boot, let now):
                guard testMode else {
                    return AuthorityResponse(.failed(error: .usage("refused: test settings need a vault-authd started with --test-mode")))
                }
                lock.withLock { settings[session.uid] = (boot == nil && now == nil) ? nil : TestSettings(bootID: boot, now: now) }
                return AuthorityResponse(.done)
            default:
                break
            }
            if !session.hasAccount || !FileSystem.exists(folder(of: session.uid)) {
                if !request.createsState { return try answerWithoutState(request, session: session) }
                guard session.hasAccount else {
                    throw VaultError.biometryNotAvailable("vault-authd keeps fingerprints only for accounts of the user database, "
                                                          + "and uid \(session.uid) has none (a subordinate uid?)")
                }
            }
            let authority: EmbeddedKeyAuthority
            do {
                authority = try self.authority(for: session)
            } catch let e as VaultError {
                // A sealed secret this TPM cannot open: a reset (the owner's passcode was given
                // in the client, see resetIfDamaged) sets it aside and starts afresh.
                let unopenable: Bool
                switch e {
                case .tpmPolicyFailed, .tpmForeign, .tpmUnavailable: unopenable = true
                default: unopenable = false
                }
                guard unopenable else { throw e }
                // The passcode never depends on the device secret: its requests are answered as
                // an unreachable authority answers them (nothing can be counted or recorded).
                switch request {
                case .challenge: return AuthorityResponse(.challenge(challenge: randomBytes(32)))
                case .beginPasscodeAttempt: return AuthorityResponse(.passcodeWait(seconds: 0))
                case .recordPasscodeFailure: return AuthorityResponse(.done)
                case .recordPasscodeUnlock: return AuthorityResponse(.recorded(record: .notBound))
                case .resetPrints: break
                default: throw e
                }
                if case .tpmUnavailable = e { throw e }
                try EmbeddedKeyAuthority.setAsideSealedSecret(in: folder(of: session.uid))
                AuthorityDaemon.log("uid \(session.uid): the TPM could not open the sealed device secret (\(e.message)); set aside, a new one is sealed")
                authority = try self.authority(for: session)
            }
            switch request {
            case .fingers:
                return AuthorityResponse(.fingers(fingers: try authority.fingers()))
            case .reader(let prefer):
                return AuthorityResponse(.reader(sensor: try authority.reader(prefer: prefer)))
            case .challenge:
                return AuthorityResponse(.challenge(challenge: try authority.challenge()))
            case .bind(let request):
                let grant = try authority.bind(request, proofKey: try proofKey(key))
                return AuthorityResponse(.bound(binding: grant.binding, changes: grant.changes, owner: grant.owner), tail: grant.kek.exposedBytes())
            case .unlock(let slot, let rules, let prompt, let timeout):
                session.scanTimeout = timeout
                let grant = try authority.unlock(slot, rules: rules, prompt: prompt, events: { session.notify(.event(event: $0)) })
                guard let next = grant.next else { return AuthorityResponse(.key(next: nil), tail: grant.kek.exposedBytes()) }
                return AuthorityResponse(.key(next: next.binding), tail: grant.kek.exposedBytes() + next.kek.exposedBytes())
            case .verify(let slot, let nonce, let reuse, let prompt, let timeout):
                session.scanTimeout = timeout
                let token = try authority.verify(slot, nonce: nonce, reuse: reuse, prompt: prompt, events: { session.notify(.event(event: $0)) })
                return AuthorityResponse(.verified(token: token))
            case .recordPasscodeUnlock(let proof):
                return AuthorityResponse(.recorded(record: try authority.recordPasscodeUnlock(proof)))
            case .rekey(let proof):
                return AuthorityResponse(.recorded(record: try authority.rekey(proof, proofKey: try proofKey(key))))
            case .reregister(let vaultID, let label, let prompt, let timeout):
                session.scanTimeout = timeout
                return AuthorityResponse(.recorded(record: try authority.reregister(vaultID: vaultID, proofKey: try proofKey(key), label: label,
                                                                                   prompt: prompt, events: { session.notify(.event(event: $0)) })))
            case .beginPasscodeAttempt(let vaultID):
                return AuthorityResponse(.passcodeWait(seconds: try authority.beginPasscodeAttempt(vaultID: vaultID)))
            case .recordPasscodeFailure(let vaultID):
                try authority.recordPasscodeFailure(vaultID: vaultID)
                return AuthorityResponse(.done)
            case .enroll(let finger, let sensor, let proof, let label, let timeout):
                session.scanTimeout = timeout
                return AuthorityResponse(.enrolled(finger: try authority.enroll(finger: finger, sensor: sensor, proof: proof, label: label)))
            case .unenroll(let finger, let proof, let label):
                return AuthorityResponse(.unenrolled(fingers: try authority.unenroll(finger: finger, proof: proof, label: label)))
            case .resetPrints(let proof):
                try authority.resetPrints(proof: proof)
                return AuthorityResponse(.done)
            case .status(let slot, let sensor, let rules):
                var status = try authority.status(slot: slot, sensor: sensor, rules: rules)
                status.secrets = sealing.protection
                status.readerBackend = readers.backendDescription
                status.backendFingers = readers.backendFingers(uid: session.uid)
                return AuthorityResponse(.status(status: status))
            case .ping, .cancel, .testSettings:
                preconditionFailure("answered above")
            }
        } catch is RetryLimitExceeded {
            return AuthorityResponse(.retryLimitExceeded)
        } catch let e as VaultError {
            return AuthorityResponse(.failed(error: e))
        } catch let i as ScanInterruption {
            return AuthorityResponse(.failed(error: i.vaultError))
        } catch {
            return AuthorityResponse(.failed(error: .failure("the key authority failed: \(error)")))
        }
    }

    /// `uid`'s authority for one request: a fresh instance (no state shared between requests but
    /// the files, under their lock, and the uid's challenge book). The reserve is made whole first
    /// when there is room; a new uid's folder and device secret may draw on it.
    private func authority(for session: ScanSession) throws -> EmbeddedKeyAuthority {
        let (knobs, book, clock) = context(of: session.uid)
        let make = { [self] in
            try EmbeddedKeyAuthority(folder: folder(of: session.uid), bootID: knobs?.bootID ?? bootID, clock: clock, challenges: book,
                                     sealing: sealing, reserve: reserve, kind: .system, openReader: { [self] prefer in try openReader(prefer, for: session) })
        }
        guard let reserve else { return try make() }
        reserve.replenish()
        return try reserve.retryingWhenFull("the state of uid \(session.uid)", make)
    }

    /// The test settings, challenge book and clock of `uid` (its book is made on first use: one
    /// per uid with an account, so their number is that of the accounts).
    private func context(of uid: UInt32) -> (TestSettings?, ChallengeBook, @Sendable () -> Int64) {
        let (knobs, book): (TestSettings?, ChallengeBook) = lock.withLock {
            let book = books[uid] ?? ChallengeBook(capacity: 64)
            books[uid] = book
            return (testMode ? settings[uid] : nil, book)
        }
        let clock: @Sendable () -> Int64
        if let now = knobs?.now { clock = { now } } else { clock = { unixNow() } }
        return (knobs, book, clock)
    }

    /// The reader `prefer` names for the request of `session`, behind the scan lease.
    private func openReader(_ prefer: SensorIdentity?, for session: ScanSession) throws -> any FingerprintReader {
        if let reason = session.cancelReason { throw reason.interruption }
        return LeasedReader(try readers.open(prefer: prefer, session: session), session: session, lease: lease)
    }

    /// The answer of an empty state (what `EmbeddedKeyAuthority` answers over a new folder),
    /// for a uid that has no folder or no account, with nothing made or written: no fingers, no
    /// binding (unlock and verify 16), nothing to record or count (a passcode failure of such a
    /// uid is not counted, there is no wait before a passcode), nothing to remove or reset.
    /// `status` has no domain state (there are no prints to describe).
    /// The proof key a request carries as its tail (the decoder checked its length).
    private func proofKey(_ tail: [UInt8]) throws -> SecretBytes {
        guard tail.count == AuthorityLimits.keyBytes else { throw VaultError.usage("malformed request: a \(AuthorityLimits.keyBytes)-byte proof key is missing") }
        return try SecretBytes(copying: tail)
    }

    private func answerWithoutState(_ request: AuthorityRequest, session: ScanSession) throws -> AuthorityResponse {
        switch request {
        case .fingers:
            return AuthorityResponse(.fingers(fingers: []))
        case .reader(let prefer):
            return AuthorityResponse(.reader(sensor: try openReader(prefer, for: session).identity))
        case .challenge:
            // A uid without an account can never bind, so no proof of it is ever checked: its
            // challenges are not kept (nor is a book made per such uid).
            guard session.hasAccount else { return AuthorityResponse(.challenge(challenge: randomBytes(32))) }
            let (_, book, clock) = context(of: session.uid)
            return AuthorityResponse(.challenge(challenge: book.issue(now: clock())))
        case .unlock, .verify:
            throw VaultError.biometryNotEnrolled
        case .recordPasscodeUnlock, .rekey, .reregister:
            return AuthorityResponse(.recorded(record: .notBound))
        case .beginPasscodeAttempt:
            return AuthorityResponse(.passcodeWait(seconds: 0))
        case .recordPasscodeFailure, .resetPrints:
            return AuthorityResponse(.done)
        case .unenroll:
            return AuthorityResponse(.unenrolled(fingers: []))
        case .status(let slot, let sensor, let rules):
            var status = AuthorityStatus.empty(kind: .system, slot: slot, rules: rules, sensor: try? openReader(sensor, for: session).identity,
                                               secrets: sealing.protection)
            status.readerBackend = readers.backendDescription
            status.backendFingers = readers.backendFingers(uid: session.uid)
            return AuthorityResponse(.status(status: status))
        case .bind, .enroll, .ping, .cancel, .testSettings:
            preconditionFailure("answered by the authority or before")
        }
    }
}

extension AuthorityRequest {
    /// Whether the request makes state when the caller has none (the `uid-N` folder and its
    /// device secret): only these are served to a uid without a folder, and never to one without
    /// an account. Every kind is named, so a new request must be placed here.
    var createsState: Bool {
        switch self {
        case .bind, .enroll:
            true
        case .ping, .fingers, .reader, .challenge, .unlock, .verify, .recordPasscodeUnlock, .rekey, .reregister, .beginPasscodeAttempt,
             .recordPasscodeFailure, .unenroll, .resetPrints, .status, .testSettings, .cancel:
            false
        }
    }
}
