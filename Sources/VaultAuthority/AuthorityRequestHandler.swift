internal import VaultKit
internal import VaultSystem
internal import Foundation

/// A final answer and its binary tail (a slot key), wiped when it goes.
public final class AuthorityResponse {
    /// The reply.
    public let reply: AuthorityReply
    /// The 32-byte slot key of `bound` and `key`, empty otherwise.
    public var tail: [UInt8]

    /// A response of `reply` and `tail`.
    public init(_ reply: AuthorityReply, tail: [UInt8] = []) {
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
public final class AuthorityRequestHandler: @unchecked Sendable {
    /// The daemon's state folder (each uid has `uid-N` in it).
    public let stateFolder: String
    /// Whether requests may set a boot id and a clock (`--test-mode`).
    public let testMode: Bool
    /// Seconds a request waits for the reader while another scans.
    public let busyWait: Double
    /// Where each uid's device secret rests: sealed by the TPM when the daemon has one.
    let sealing: DeviceSecretSealing
    private let readers: any ReaderSource
    let lease = ScanLease()
    private let bootID: String
    private let lock = NSLock()
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
    public convenience init(stateFolder: String, testMode: Bool, readers: any ReaderSource,
                            busyWait: Double = AuthorityLimits.busyWaitSeconds) throws {
        try self.init(stateFolder: stateFolder, testMode: testMode, readers: readers, busyWait: busyWait, sealing: .filePermissions)
    }

    /// The same, with the device secrets resting as `sealing` says (the daemon's `--tpm`).
    init(stateFolder: String, testMode: Bool, readers: any ReaderSource, busyWait: Double, sealing: DeviceSecretSealing) throws {
        self.stateFolder = stateFolder
        self.sealing = sealing
        self.testMode = testMode
        self.readers = readers
        self.busyWait = max(0, busyWait)
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
        return handle(request, key: frame.tail, session: session)
    }

    /// Answers one request of `session.uid`; `key` is the proof key of a `bind`. Streamed events
    /// and notices go through the session; what the request held is given back before this returns.
    public func handle(_ request: AuthorityRequest, key: [UInt8], session: ScanSession) -> AuthorityResponse {
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
                case .recordPasscodeUnlock: return AuthorityResponse(.recorded(bound: false))
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
            case .bind(let slot, let sensor, let rules):
                guard key.count == AuthorityLimits.keyBytes else { throw VaultError.usage("malformed request: bind carries a 32-byte proof key") }
                let proofKey = try SecretBytes(copying: key)
                let grant = try authority.bind(slot, sensor: sensor, proofKey: proofKey, rules: rules)
                return AuthorityResponse(.bound(binding: grant.binding), tail: grant.kek.exposedBytes())
            case .unlock(let slot, let rules, let prompt, let timeout):
                session.scanTimeout = timeout
                let kek = try authority.unlock(slot, rules: rules, prompt: prompt, events: { session.notify(.event(event: $0)) })
                return AuthorityResponse(.key, tail: kek.exposedBytes())
            case .verify(let slot, let nonce, let reuse, let prompt, let timeout):
                session.scanTimeout = timeout
                let token = try authority.verify(slot, nonce: nonce, reuse: reuse, prompt: prompt, events: { session.notify(.event(event: $0)) })
                return AuthorityResponse(.verified(token: token))
            case .recordPasscodeUnlock(let proof):
                return AuthorityResponse(.recorded(bound: try authority.recordPasscodeUnlock(proof)))
            case .beginPasscodeAttempt(let vaultID):
                return AuthorityResponse(.passcodeWait(seconds: try authority.beginPasscodeAttempt(vaultID: vaultID)))
            case .recordPasscodeFailure(let vaultID):
                try authority.recordPasscodeFailure(vaultID: vaultID)
                return AuthorityResponse(.done)
            case .enroll(let finger, let sensor, let proof, let timeout):
                session.scanTimeout = timeout
                return AuthorityResponse(.enrolled(finger: try authority.enroll(finger: finger, sensor: sensor, proof: proof)))
            case .unenroll(let finger, let proof):
                return AuthorityResponse(.unenrolled(fingers: try authority.unenroll(finger: finger, proof: proof)))
            case .resetPrints(let proof):
                try authority.resetPrints(proof: proof)
                return AuthorityResponse(.done)
            case .status(let slot, let sensor, let rules):
                var status = try authority.status(slot: slot, sensor: sensor, rules: rules)
                status.kind = .system
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
    /// the files, under their lock, and the uid's challenge book).
    private func authority(for session: ScanSession) throws -> EmbeddedKeyAuthority {
        let uid = session.uid
        let (knobs, book): (TestSettings?, ChallengeBook) = lock.withLock {
            let book = books[uid] ?? ChallengeBook(capacity: 64)
            books[uid] = book
            return (testMode ? settings[uid] : nil, book)
        }
        let clock: @Sendable () -> Int64
        if let now = knobs?.now { clock = { now } } else { clock = { unixNow() } }
        let readers = self.readers, lease = self.lease, wait = busyWait
        return try EmbeddedKeyAuthority(folder: folder(of: uid), bootID: knobs?.bootID ?? bootID, clock: clock, challenges: book,
                                        sealing: sealing,
                                        openReader: { prefer in
                                            if let reason = session.cancelReason { throw reason.interruption }
                                            let reader = try readers.open(prefer: prefer, session: session)
                                            return LeasedReader(reader, session: session, lease: lease, busyWait: wait)
                                        })
    }
}
