import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// What the root tests ask a client process running as an ordinary user to do with
/// `SystemKeyAuthority` (one JSON object per line on its descriptor 3).
enum ClientCommand: Codable, Sendable {
    case probe
    case fingers
    /// Enrols; with `vaultID` and `proofKey`, with a proof of that vault.
    case enroll(finger: String?, vaultID: [UInt8]?, proofKey: [UInt8]?)
    /// Removes a finger; with `vaultID` and `proofKey`, with a proof of that vault.
    case unenroll(finger: String, vaultID: [UInt8]?, proofKey: [UInt8]?)
    /// Forgets every print; with `vaultID` and `proofKey`, with a proof of that vault.
    case reset(vaultID: [UInt8]?, proofKey: [UInt8]?)
    /// Binds `slot` registering `proofKey`, proven under `proverKey` (nil: `proofKey`; the
    /// registered key of the vault, or any other key for a forgery).
    case bind(vaultID: [UInt8], slot: Int64, proofKey: [UInt8], rules: PasscodeRules, proverKey: [UInt8]?, confirm: [String])
    /// Unlocks the slot sealed with `keyID`; `cancel` is sent (from another thread, as the
    /// keyboard watch does) once the daemon says to touch the reader.
    case unlock(vaultID: [UInt8], slot: Int64, keyID: String?, rules: PasscodeRules, scanTimeout: Double, cancel: ScanCancelReason?)
    /// One raw frame (JSON and tail) on a fresh connection: the first reply's JSON comes back as `message`.
    case raw(json: String, tail: [UInt8])
    case recordPasscode(vaultID: [UInt8], proofKey: [UInt8], forged: Bool)
    /// Hands the daemon `newKey` as the vault's next key, under a proof with `proofKey`.
    case rekey(vaultID: [UInt8], proofKey: [UInt8], newKey: [UInt8])
    /// The wait before a passcode attempt (into `wait`).
    case beginPasscodeAttempt(vaultID: [UInt8])
    /// Counts a wrong passcode.
    case recordPasscodeFailure(vaultID: [UInt8])
    case status(vaultID: [UInt8]?, slot: Int64?)
    case testSettings(bootID: String?, now: Int64?)
    /// Tries to read a file (the daemon's state).
    case readFile(path: String)
    /// `rounds` of fingers, challenge, passcode record and status.
    case burst(vaultID: [UInt8], slot: Int64, proofKey: [UInt8], rounds: Int)
    case challenge
    /// Opens `count` connections, each with a ping: those answered stay open (idle) until
    /// `releaseConnections`; those refused are closed.
    case holdConnections(count: Int)
    case releaseConnections
    case exit
}

/// The outcome of one command.
struct ClientResult: Codable, Sendable {
    var uid: UInt32 = ProcessIdentity.uid
    var ok = false
    var exitCode: Int32?
    var message: String?
    var retryLimit = false
    var key: [UInt8]?
    var keyID: String?
    var nextKey: [UInt8]?
    var nextKeyID: String?
    var owner: Bool?
    var changes: [String]?
    var fingers: Int?
    var fingerNames: [String]?
    var failedMatches: Int?
    var bindingCurrent: Bool?
    var recorded: String?
    var kind: String?
    var wait: Int?
    /// `holdConnections`: how many the daemon took and refused, and the first refusal.
    var held: Int?
    var refused: Int?
}

/// One line from the client process: a streamed notice or event, or the command's result.
enum ClientLine: Codable, Sendable {
    case notice(ScanNotice)
    case event(AuthorityEvent)
    case result(ClientResult)
}

/// Writes whole lines to a descriptor from any thread.
final class LineWriter: @unchecked Sendable {
    let fd: Int32
    private let lock = NSLock()
    init(fd: Int32) { self.fd = fd }
    func write(_ line: ClientLine) {
        guard let data = try? JSONEncoder().encode(line) else { return }
        lock.withLock { try? writeAll(fd: fd, bytes: Array(data) + [10]) }
    }
}

/// Reads lines from a descriptor.
final class LineReader {
    let fd: Int32
    private var buffer: [UInt8] = []
    init(fd: Int32) { self.fd = fd }

    /// The next line, or nil at the end (or after `timeout` seconds: nil too).
    func next(timeout: Double = 3600) -> String? {
        let end = MonotonicClock.seconds() + timeout
        while true {
            if let nl = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<nl], as: UTF8.self)
                buffer.removeSubrange(...nl)
                return line
            }
            let left = end - MonotonicClock.seconds()
            guard left > 0, (try? Poll.isReadable(fd, timeoutMilliseconds: Int32(min(left, 60) * 1000))) == true else {
                if left > 0 { continue }
                return nil
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            guard let n = try? chunk.withUnsafeMutableBytes({ try readSome(fd: fd, into: $0) }), n > 0 else { return nil }
            buffer += chunk[0..<n]
        }
    }
}

/// The client process of the root tests. Skipped in an ordinary run; `RootDaemonTests` starts
/// the test bundle again as an ordinary user (`setpriv`) with only this test selected, so the
/// peer uid vault-authd sees is that user's. It serves commands from descriptor 3 and answers
/// on descriptor 4.
@Suite struct ClientChildProcess {
    static let variable = "VAULT_AUTHD_CLIENT_CHILD"
    /// The connections `holdConnections` keeps open.
    private static let held = Mutex<[Int32]>([])

    @Test(.enabled(if: ProcessInfo.processInfo.environment[ClientChildProcess.variable] != nil,
                   "runs only as the client process that RootDaemonTests starts as an ordinary user"))
    func serveCommands() throws {
        let environment = ProcessInfo.processInfo.environment
        let socket = try #require(environment["VAULT_AUTHD_SOCKET"])
        let commands = LineReader(fd: 3)
        let out = LineWriter(fd: 4)
        while let line = commands.next() {
            let command = try JSONDecoder().decode(ClientCommand.self, from: Data(line.utf8))
            if case .exit = command { return }
            out.write(.result(Self.execute(command, socket: socket, out: out)))
        }
    }

    static func execute(_ command: ClientCommand, socket: String, out: LineWriter) -> ClientResult {
        let control = ScanControl()
        let cancelOnPrompt = Mutex<ScanCancelReason?>(nil)
        let authority = SystemKeyAuthority(socketPath: socket, daemon: .standard, scanTimeout: 20, control: control, notices: { n in
            out.write(.notice(n))
            if case .touchReader = n, let reason = cancelOnPrompt.withLock({ $0 }) {
                DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { control.cancel(reason) }
            }
        })
        var r = ClientResult()
        func proof(_ purpose: ProofPurpose, _ vaultID: [UInt8], _ proofKey: [UInt8], forged: Bool = false, subject: [UInt8] = []) throws -> AuthorityProof {
            let challenge = try authority.challenge()
            let key = try SecretBytes(copying: forged ? randomBytes(32) : proofKey)
            return AuthorityProof(vaultID: vaultID, challenge: challenge,
                                  mac: try AuthorityProofMAC.mac(key: key, purpose: purpose, vaultID: vaultID, challenge: challenge, subject: subject))
        }
        do {
            switch command {
            case .probe:
                r.ok = SystemKeyAuthority.probe(socketPath: socket)
            case .fingers:
                r.fingers = try authority.fingers().count
            case .enroll(let finger, let vaultID, let proofKey):
                let subject = AuthorityProofMAC.fingerSubject(finger)
                let p = try vaultID.flatMap { id in try proofKey.map { try proof(.enroll, id, $0, subject: subject) } }
                _ = try authority.enroll(finger: finger, sensor: nil, proof: p, label: "test")
            case .unenroll(let finger, let vaultID, let proofKey):
                let subject = AuthorityProofMAC.fingerSubject(finger)
                let p = try vaultID.flatMap { id in try proofKey.map { try proof(.unenroll, id, $0, subject: subject) } }
                r.fingers = try authority.unenroll(finger: finger, proof: p, label: "test").count
            case .reset(let vaultID, let proofKey):
                try authority.resetPrints(proof: try vaultID.flatMap { id in try proofKey.map { try proof(.resetPrints, id, $0) } })
            case .bind(let vaultID, let slot, let proofKey, let rules, let proverKey, let confirm):
                let ref = SlotReference(vaultID: vaultID, slotID: slot)
                let key = try SecretBytes(copying: proofKey)
                let subject = try BindRequest.subject(slot: ref, proofKey: key, confirm: confirm)
                let request = BindRequest(slot: ref, sensor: nil, rules: rules, proof: try proof(.bind, vaultID, proverKey ?? proofKey, subject: subject),
                                          confirm: confirm, label: "test")
                let grant = try authority.bind(request, proofKey: key)
                r.key = grant.kek.exposedBytes()
                r.keyID = grant.binding.keyID
                r.owner = grant.owner
                r.changes = grant.changes.map(\.sentence)
            case .unlock(let vaultID, let slot, let keyID, let rules, let timeout, let cancel):
                cancelOnPrompt.withLock { $0 = cancel }
                authority.scanTimeout = timeout
                let grant = try authority.unlock(SlotReference(vaultID: vaultID, slotID: slot, keyID: keyID), rules: rules, prompt: "touch the reader",
                                                 events: { out.write(.event($0)) })
                r.key = grant.kek.exposedBytes()
                r.nextKey = grant.next?.kek.exposedBytes()
                r.nextKeyID = grant.next?.binding.keyID
            case .raw(let json, let tail):
                let connection = try UnixSocket.connect(path: socket)
                try connection.sendAll(try AuthorityFrame(json: Array(json.utf8), tail: tail).encoded())
                let replies = try rawReplies(connection, within: 10)
                if case .failed(let e)? = replies.last?.0 {
                    r.exitCode = e.exitCode
                    r.message = e.message
                } else {
                    r.message = replies.last.map { "\($0.0)" }
                    r.key = replies.last.map { $0.1 }
                }
            case .recordPasscode(let vaultID, let proofKey, let forged):
                r.recorded = try authority.recordPasscodeUnlock(try proof(.passcodeUnlock, vaultID, proofKey, forged: forged)).rawValue
            case .rekey(let vaultID, let proofKey, let newKey):
                let next = try SecretBytes(copying: newKey)
                r.recorded = try authority.rekey(try proof(.rekey, vaultID, proofKey, subject: try AuthorityProofMAC.keySubject(next)),
                                                 proofKey: next).rawValue
            case .beginPasscodeAttempt(let vaultID):
                r.wait = try authority.beginPasscodeAttempt(vaultID: vaultID)
            case .recordPasscodeFailure(let vaultID):
                try authority.recordPasscodeFailure(vaultID: vaultID)
            case .status(let vaultID, let slot):
                let ref = vaultID.flatMap { id in slot.map { SlotReference(vaultID: id, slotID: $0) } }
                let s = try authority.status(slot: ref, sensor: nil, rules: PasscodeRules(afterReboot: false, intervalHours: 0))
                r.failedMatches = s.failedMatches
                r.fingers = s.fingers.count
                r.fingerNames = s.fingers.map(\.finger)
                r.owner = s.owner
                r.bindingCurrent = s.bindingCurrent
                r.kind = s.kind.rawValue
            case .testSettings(let bootID, let now):
                try authority.setTestSettings(bootID: bootID, now: now)
            case .readFile(let path):
                _ = try VaultSystem.PrivateFiles.read(path, limit: 1 << 20)
            case .burst(let vaultID, let slot, let proofKey, let rounds):
                for _ in 0..<rounds {
                    _ = try authority.fingers()
                    r.recorded = try authority.recordPasscodeUnlock(try proof(.passcodeUnlock, vaultID, proofKey)).rawValue
                    r.bindingCurrent = try authority.status(slot: SlotReference(vaultID: vaultID, slotID: slot), sensor: nil,
                                                            rules: PasscodeRules()).bindingCurrent
                }
            case .challenge:
                r.ok = try authority.challenge().count == 32
            case .holdConnections(let count):
                var held = 0, refused = 0
                for _ in 0..<count {
                    var connection = try UnixSocket.connect(path: socket)
                    // A refused connection is closed at once, maybe before the ping goes: the
                    // refusal is read all the same.
                    try? connection.sendAll(try AuthorityCodec.frame(.ping).encoded())
                    let replies = (try? rawReplies(connection, within: 10)) ?? []
                    if case .pong = replies.last?.0 {
                        held += 1
                        let fd = connection.take()
                        Self.held.withLock { $0.append(fd) }
                    } else {
                        refused += 1
                        if case .failed(let e) = replies.last?.0, r.message == nil { r.message = e.message }
                    }
                }
                r.held = held
                r.refused = refused
            case .releaseConnections:
                for fd in Self.held.withLock({ all in defer { all.removeAll() }; return all }) { close(fd) }
            case .exit:
                break
            }
            r.ok = r.ok || { if case .probe = command { false } else { true } }()
        } catch is RetryLimitExceeded {
            r.retryLimit = true
            r.exitCode = 10
        } catch let e as VaultError {
            r.exitCode = e.exitCode
            r.message = e.message
        } catch let e as PrivateFileError {
            r.message = e.description
        } catch {
            r.message = "\(error)"
        }
        return r
    }
}
