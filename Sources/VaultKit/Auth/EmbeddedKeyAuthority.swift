import Foundation
import Synchronization
import VaultSystem

/// The in-process authority: `$XDG_STATE_HOME/vault` (0700) holding `device-secret`,
/// `prints.sealed` (enrolled prints, enrolment epoch and bindings, sealed under a key derived
/// from the device secret) and `auth.sealed` (lockout counter, last passcode unlock, recent
/// matches). Files are 0600 and replaced atomically. It runs the match itself, like the system
/// authority, but its state is in the user's own files: it protects against a person at the
/// reader, not against code running as the user.
public final class EmbeddedKeyAuthority: KeyAuthority {
    /// The state folder.
    public let folder: String
    /// The current boot id (injected by tests to simulate a reboot).
    public let bootID: String
    private let clock: @Sendable () -> Int64
    private let secret: SecretBytes
    /// What protects the device secret at rest.
    public let secretProtection: SecretProtection
    private let openReaderFunction: ReaderOpener
    /// The challenges this authority accepts proofs over.
    private let challenges: ChallengeBook
    /// The reader opened by this instance, kept open for its other requests (as a daemon owns
    /// its reader): enrolling and binding right after see the same device.
    private var opened: (any FingerprintReader)?

    private func reader(_ prefer: SensorIdentity?) throws -> any FingerprintReader {
        if let opened, prefer == nil || prefer == opened.identity { return opened }
        let r = try openReaderFunction(prefer)
        opened = r
        return r
    }

    /// Embedded.
    public var kind: AuthorityKind { .embedded }

    /// `$XDG_STATE_HOME/vault`, else `~/.local/state/vault`.
    public static func defaultFolder(environment: [String: String]) -> String {
        if let s = environment["XDG_STATE_HOME"], s.hasPrefix("/") { return s + "/vault" }
        return (environment["HOME"] ?? NSHomeDirectory()) + "/.local/state/vault"
    }

    /// The kernel's boot id.
    public static func currentBootID() -> String {
        (try? ProcessIdentity.bootID()) ?? "unknown"
    }

    /// Opens (creating on first use) the authority's state in `folder`; `openReader` opens the
    /// reader when a scan or an enrolment is due. `challenges` holds the challenges issued: the
    /// process-wide book by default; a daemon hosting one authority per user gives each its own.
    /// `sealing`: where the device secret rests (a file by default; `vault-authd` seals it with
    /// the TPM when there is one).
    /// - Throws: `.tpmUnavailable`, `.tpmForeign`, `.tpmPolicyFailed` for a TPM-sealed secret
    ///   that cannot be unsealed; `.io`, `.corrupt`.
    public init(folder: String, bootID: String = EmbeddedKeyAuthority.currentBootID(),
                clock: @escaping @Sendable () -> Int64 = { unixNow() },
                challenges: ChallengeBook = .processWide,
                sealing: DeviceSecretSealing = .filePermissions,
                openReader: @escaping ReaderOpener = { _ in throw VaultError.biometryNotAvailable("no fingerprint reader found") }) throws {
        self.folder = folder
        self.bootID = bootID
        self.clock = clock
        self.challenges = challenges
        self.openReaderFunction = openReader
        try PrivateFiles.makeFolder(folder)
        try PrivateFiles.checkPrivate(folder, isDirectory: true)
        VaultSystem.AtomicFile.removeStaleTemporaries(in: folder)
        secret = try DeviceSecretFile.load(folder, sealing: sealing)
        secretProtection = sealing.protection
    }

    // MARK: state

    private var printsPath: String { folder + "/prints.sealed" }
    private var authPath: String { folder + "/auth.sealed" }

    /// One enrolled print, biometric data included: it never leaves this file.
    struct StoredPrint: Codable {
        var finger: String
        var sensor: SensorIdentity
        var data: [UInt8]
        var enrolled: Int64
    }

    /// One binding of a vault's fingerprint slot.
    struct Binding: Codable {
        var vaultID: [UInt8]
        var slotID: Int64
        /// Random per binding: a new binding never re-issues an old key.
        var secret: [UInt8]
        /// Checks this vault's proofs.
        var proofKey: [UInt8]
        var sensor: SensorIdentity
        var domainState: [UInt8]
        var rules: PasscodeRules
        var created: Int64
    }

    /// `prints.sealed`: prints, the enrolment epoch (new on every change) and the bindings.
    struct PrintsState: Codable {
        var epoch: [UInt8]
        var prints: [StoredPrint]
        var bindings: [Binding]?
    }

    /// One recent match, for the reuse window of fingerprint login.
    struct MatchRecord: Codable {
        var vaultID: [UInt8]
        var slotID: Int64
        var time: Int64
        var bootID: String
    }

    /// `auth.sealed`: the lockout counter and the passcode-unlock record.
    struct AuthRecord: Codable {
        var failedMatches = 0
        var lastPasscodeBootID: String?
        var lastPasscodeTime: Int64?
        var matches: [MatchRecord]?
        /// Passcode attempts not followed by a recorded unlock, per vault (hex id), and the last one's time.
        var passcodeFailures: [String: Int]?
        var lastPasscodeAttempt: [String: Int64]?
    }

    /// Bindings kept per vault (the newest; a rotation that did not commit leaves the old one usable).
    static let bindingsPerVault = 3
    /// Bindings kept in all.
    static let bindingLimit = 64

    private func sealedRead<T: Decodable>(_ path: String, label: String, as: T.Type) throws -> T? {
        guard let bytes = try PrivateFiles.read(path, limit: 16 << 20) else { return nil }
        guard bytes.count > AEAD.nonceLength else { throw VaultError.authorityDamaged("\(path) is truncated") }
        let key = try KeyedHash.deriveKey(from: secret, context: "vault/v1/authority/" + label)
        do {
            let plain = try AEAD.open(Array(bytes[AEAD.nonceLength...]), key: key, nonce: Array(bytes[..<AEAD.nonceLength]),
                                      associatedData: Array(("vault-authority-v1/" + label).utf8))
            return try plain.withUnsafeBytes { try JSONDecoder().decode(T.self, from: Data($0)) }
        } catch is CryptoError {
            throw VaultError.authorityDamaged("\(path) failed authentication (edited, or sealed under another device secret)")
        } catch is DecodingError {
            throw VaultError.authorityDamaged("\(path) is unreadable")
        }
    }

    private func sealedWrite<T: Encodable>(_ value: T, _ path: String, label: String) throws {
        let key = try KeyedHash.deriveKey(from: secret, context: "vault/v1/authority/" + label)
        let plain = try JSONEncoder().encode(value)
        let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: Array(("vault-authority-v1/" + label).utf8)) }
        try AtomicFile.write(s.nonce + s.ciphertext, to: path)
    }

    private func printsState() throws -> PrintsState {
        try sealedRead(printsPath, label: "prints", as: PrintsState.self) ?? PrintsState(epoch: [], prints: [], bindings: [])
    }

    private func write(_ state: PrintsState) throws { try sealedWrite(state, printsPath, label: "prints") }

    /// The lockout record; an altered record counts as locked out (fail closed).
    private func record() throws -> AuthRecord {
        do {
            return try sealedRead(authPath, label: "auth", as: AuthRecord.self) ?? AuthRecord()
        } catch VaultError.authorityDamaged {
            var r = AuthRecord()
            r.failedMatches = lockoutThreshold
            return r
        }
    }

    private func write(_ record: AuthRecord) throws { try sealedWrite(record, authPath, label: "auth") }

    /// Read-modify-write of the lockout record under the state folder's lock, so concurrent
    /// processes never lose a failed match.
    private func updateRecord<R>(_ change: (inout AuthRecord) throws -> R) throws -> R {
        try withStateLock {
            var r = try record()
            let result = try change(&r)
            try write(r)
            return result
        }
    }

    private func withStateLock<R: ~Copyable>(_ body: () throws -> R) throws -> R {
        do {
            let lock = try FileLock(path: folder + "/lock")
            return try lock.withExclusive(body)
        } catch let e as FileLockError {
            throw VaultError.io(path: e.path, e.description)
        }
    }

    // MARK: challenges and proofs

    /// A fresh challenge.
    public func challenge() throws -> [UInt8] {
        challenges.issue(now: clock())
    }

    private func consume(_ challenge: [UInt8]) -> Bool {
        challenges.consume(challenge, now: clock())
    }

    /// Whether `proof` is valid for `purpose` under a binding of its vault in `state`.
    /// - Returns: nil when that vault has no binding here.
    private func check(_ proof: AuthorityProof, _ purpose: ProofPurpose, in state: PrintsState) throws -> Bool? {
        let mine = (state.bindings ?? []).filter { $0.vaultID == proof.vaultID }
        guard !mine.isEmpty else { return nil }
        guard consume(proof.challenge) else { return false }
        for b in mine {
            let key = try SecretBytes(copying: b.proofKey)
            if try AuthorityProofMAC.check(proof, purpose: purpose, key: key) { return true }
        }
        return false
    }

    private func requireProof(_ proof: AuthorityProof?, _ purpose: ProofPurpose, in state: PrintsState, what: String) throws {
        guard !(state.bindings ?? []).isEmpty else { return }
        guard let proof, try check(proof, purpose, in: state) == true else {
            throw VaultError.authenticationFailed("\(what) needs the passcode of a vault bound to these fingerprints")
        }
    }

    // MARK: prints and domain state

    /// The reader this authority would use, opened and kept open.
    public func reader(prefer: SensorIdentity?) throws -> SensorIdentity { try reader(prefer).identity }

    /// The enrolled fingers.
    public func fingers() throws -> [EnrolledFinger] {
        try printsState().prints.map { EnrolledFinger(finger: $0.finger, sensor: $0.sensor, enrolled: $0.enrolled) }
    }

    /// BLAKE2b-256 over the canonical sorted print list, the epoch and the chip's list.
    func domainState(_ state: PrintsState, chipPrints: [String]) throws -> DomainState {
        var lines: [String] = []
        for p in state.prints {
            let h = try KeyedHash.hash(p.data, key: [], outputLength: 32)
            lines.append("print \(p.sensor.canonical) \(p.finger) \(hexString(h))")
        }
        lines.sort()
        lines += chipPrints.sorted().map { "chip \($0)" }
        var w = ByteWriter(label: "vault-domain-state-v1")
        w.append(state.epoch)
        for l in lines { w.append(l) }
        return DomainState(bytes: try KeyedHash.hash(w.bytes, key: [], outputLength: 32))
    }

    /// The slot key of a binding: keyed BLAKE2b of the device secret over the vault, the slot,
    /// the binding's own secret, the reader and the domain state.
    private func slotKey(_ b: Binding, state: DomainState) throws -> SecretBytes {
        var w = ByteWriter(label: "vault-fingerprint-slot-v2")
        w.append(b.vaultID)
        w.append(b.slotID)
        w.append(b.secret)
        w.append(b.sensor.canonical)
        w.append(state.bytes)
        return try SecretBytes(copying: try KeyedHash.hash(w.bytes, key: secret, outputLength: 32))
    }

    private func preferredSensor(_ state: PrintsState) -> SensorIdentity? { state.prints.first?.sensor }

    // MARK: binding

    /// A new binding of `slot` to the reader's current prints.
    public func bind(_ slot: SlotReference, sensor: SensorIdentity?, proofKey: borrowing SecretBytes, rules: PasscodeRules) throws -> BindingGrant {
        let proofBytes = proofKey.exposedBytes()
        return try withStateLock {
            var state = try printsState()
            let reader = try reader(sensor ?? preferredSensor(state))
            guard state.prints.contains(where: { $0.sensor == reader.identity }) else { throw VaultError.biometryNotEnrolled }
            let current = try domainState(state, chipPrints: try reader.chipPrints())
            let b = Binding(vaultID: slot.vaultID, slotID: slot.slotID, secret: randomKeyBytes(32), proofKey: proofBytes,
                            sensor: reader.identity, domainState: current.bytes, rules: rules, created: clock())
            var bindings = (state.bindings ?? []).filter { !($0.vaultID == slot.vaultID && $0.slotID == slot.slotID) }
            bindings.append(b)
            let same = bindings.filter { $0.vaultID == slot.vaultID }
            if same.count > EmbeddedKeyAuthority.bindingsPerVault {
                let drop = Set(same.prefix(same.count - EmbeddedKeyAuthority.bindingsPerVault).map(\.slotID))
                bindings.removeAll { $0.vaultID == slot.vaultID && drop.contains($0.slotID) }
            }
            if bindings.count > EmbeddedKeyAuthority.bindingLimit { bindings.removeFirst(bindings.count - EmbeddedKeyAuthority.bindingLimit) }
            state.bindings = bindings
            try write(state)
            return BindingGrant(kek: try slotKey(b, state: current),
                                binding: FingerprintBinding(sensor: reader.identity, domainState: current, authority: kind))
        }
    }

    private func binding(_ slot: SlotReference, in state: PrintsState) throws -> Binding {
        guard let b = (state.bindings ?? []).first(where: { $0.vaultID == slot.vaultID && $0.slotID == slot.slotID }) else {
            throw state.prints.isEmpty ? VaultError.biometryNotEnrolled : VaultError.domainStateChanged
        }
        return b
    }

    // MARK: matching

    /// A live match for `slot`'s binding, then its key.
    public func unlock(_ slot: SlotReference, rules: PasscodeRules, prompt: String, events: (AuthorityEvent) -> Void) throws -> SecretBytes {
        let state = try printsState()
        let b = try binding(slot, in: state)
        let r = try record()
        if r.failedMatches >= lockoutThreshold { throw VaultError.biometryLockout }
        if let why = passcodeRule(rules.stricter(b.rules), record: r) { throw why }
        let current = try liveMatch(b, state: state, prompt: prompt, events: events)
        return try slotKey(b, state: current)
    }

    /// A live match for `slot`'s binding (or one at most `reuse` seconds old), no key: the
    /// token over the vault's `nonce`.
    public func verify(_ slot: SlotReference, nonce: [UInt8], reuse: Int, prompt: String, events: (AuthorityEvent) -> Void) throws -> FreshMatchToken {
        guard nonce.count == 32 else { throw VaultError.usage("a fresh match is verified over a 32-byte nonce") }
        let state = try printsState()
        let b = try binding(slot, in: state)
        let r = try record()
        if r.failedMatches >= lockoutThreshold { throw VaultError.biometryLockout }
        let now = clock()
        if reuse > 0, let last = (r.matches ?? []).last(where: { $0.vaultID == slot.vaultID && $0.slotID == slot.slotID }),
           last.bootID == bootID, last.time <= now, now - last.time <= Int64(min(reuse, 300)) {
            return try freshMatchToken(slot.vaultID, nonce: nonce, reusedAge: now - last.time, in: state)
        }
        _ = try liveMatch(b, state: state, prompt: prompt, events: events)
        return try freshMatchToken(slot.vaultID, nonce: nonce, reusedAge: nil, in: state)
    }

    /// The token of a match for `vaultID`: one MAC under each proof key registered for it.
    private func freshMatchToken(_ vaultID: [UInt8], nonce: [UInt8], reusedAge: Int64?, in state: PrintsState) throws -> FreshMatchToken {
        let keys = (state.bindings ?? []).filter { $0.vaultID == vaultID }.map(\.proofKey)
        return try FreshMatchMAC.token(vaultID: vaultID, nonce: nonce, reusedAge: reusedAge, keys: keys)
    }

    /// Why the passcode is needed before any scan (reboot, interval), or nil.
    private func passcodeRule(_ rules: PasscodeRules, record r: AuthRecord) -> VaultError? {
        if rules.afterReboot, r.lastPasscodeBootID != bootID {
            return .passcodeNeeded("first unlock since the machine started")
        }
        if rules.intervalHours > 0, clock() - (r.lastPasscodeTime ?? 0) > Int64(rules.intervalHours) * 3600 {
            return .passcodeNeeded("no passcode unlock in the last \(rules.intervalHours) h")
        }
        return nil
    }

    /// Opens the bound reader, checks the domain state, then allows up to three scans. Each scan
    /// is counted as a failure before it starts and the count taken back on a match or an
    /// interruption: a failure that cannot be recorded never gets a scan (fail closed).
    private func liveMatch(_ b: Binding, state: PrintsState, prompt: String, events: (AuthorityEvent) -> Void) throws -> DomainState {
        let reader = try reader(b.sensor)
        let mine = state.prints.filter { $0.sensor == reader.identity }
        guard !mine.isEmpty else { throw state.prints.isEmpty ? VaultError.biometryNotEnrolled : VaultError.domainStateChanged }
        let current = try domainState(state, chipPrints: try reader.chipPrints())
        guard reader.identity == b.sensor, current.bytes == b.domainState else { throw VaultError.domainStateChanged }
        for attempt in 1...triesPerEvaluation {
            let left = triesPerEvaluation - attempt
            let count = try updateRecord { r -> Int in r.failedMatches += 1; return r.failedMatches }
            if count > lockoutThreshold { throw VaultError.biometryLockout }
            let matched: Bool
            do {
                matched = try reader.scan(against: mine.map(\.data), prompt: prompt) != nil
            } catch let i as ScanInterruption {
                // Not a failed match: the count goes back (if that write fails, it stays: closed).
                try? updateRecord { $0.failedMatches = max(0, $0.failedMatches - 1) }
                if case .retry(let advice) = i {
                    events(.retry(advice: advice, triesLeft: left))
                    continue
                }
                throw i.vaultError
            }
            if matched {
                let now = clock(), boot = bootID
                try updateRecord { r in
                    r.failedMatches = 0
                    var m = (r.matches ?? []).filter { !($0.vaultID == b.vaultID && $0.slotID == b.slotID) }
                    m.append(MatchRecord(vaultID: b.vaultID, slotID: b.slotID, time: now, bootID: boot))
                    r.matches = Array(m.suffix(16))
                }
                return current
            }
            if count >= lockoutThreshold {
                events(.lockedOut)
                throw VaultError.biometryLockout
            }
            events(.noMatch(triesLeft: left))
        }
        throw RetryLimitExceeded()
    }

    // MARK: passcode unlocks

    /// Resets the lockout and restarts the passcode clock, for a valid proof.
    @discardableResult
    public func recordPasscodeUnlock(_ proof: AuthorityProof) throws -> Bool {
        guard let valid = try check(proof, .passcodeUnlock, in: try printsState()) else {
            // A vault never bound here has no proof key: its own failure count is cleared on the
            // word of the caller (this authority's state is the user's anyway; see threat-model.md).
            try? updateRecord { r in r.passcodeFailures?[hexString(proof.vaultID)] = nil }
            return false
        }
        guard valid else { throw VaultError.authenticationFailed("the proof of the vault key is not valid") }
        let now = clock(), boot = bootID
        try updateRecord { r in
            r.failedMatches = 0
            r.lastPasscodeBootID = boot
            r.lastPasscodeTime = now
            r.passcodeFailures?[hexString(proof.vaultID)] = nil
        }
        return true
    }

    /// How long to wait after the wrong passcodes counted for this vault.
    public func beginPasscodeAttempt(vaultID: [UInt8]) throws -> Int {
        let key = hexString(vaultID), now = clock()
        let r = try record()
        let failures = r.passcodeFailures?[key] ?? 0
        let last = r.lastPasscodeAttempt?[key] ?? 0
        return Int(max(0, Int64(passcodeDelay(afterFailures: failures)) - max(0, now - last)))
    }

    /// Counts a wrong passcode.
    public func recordPasscodeFailure(vaultID: [UInt8]) throws {
        let key = hexString(vaultID), now = clock()
        try updateRecord { r in
            var f = r.passcodeFailures ?? [:], t = r.lastPasscodeAttempt ?? [:]
            f[key, default: 0] += 1
            t[key] = now
            // Bounded: the vaults of one user, not every id a script can invent.
            if f.count > 64, let oldest = t.min(by: { $0.value < $1.value })?.key { f[oldest] = nil; t[oldest] = nil }
            r.passcodeFailures = f
            r.lastPasscodeAttempt = t
        }
    }

    // MARK: enrolment

    /// The fingers tried, in order, when none is named.
    public static let fingerOrder = ["right-index", "left-index", "right-thumb", "left-thumb", "right-middle", "left-middle", "right-ring"]

    /// Enrols a finger on the reader.
    public func enroll(finger requested: String?, sensor: SensorIdentity?, proof: AuthorityProof?) throws -> EnrolledFinger {
        let before = try printsState()
        try requireProof(proof, .enroll, in: before, what: "enrolling a finger")
        let reader = try reader(sensor ?? preferredSensor(before))
        let existing = before.prints.filter { $0.sensor == reader.identity }.map(\.finger)
        let finger = requested ?? EmbeddedKeyAuthority.fingerOrder.first { !existing.contains($0) } ?? "right-ring"
        if existing.contains(finger) {
            throw VaultError.failure("\(finger) is already enrolled on this reader", hint: "remove it first with 'vault unenroll \(finger)'")
        }
        let data = try reader.enroll(finger: finger)
        let enrolled = EnrolledFinger(finger: finger, sensor: reader.identity, enrolled: clock())
        try withStateLock {
            var state = try printsState()
            state.prints.append(StoredPrint(finger: finger, sensor: reader.identity, data: data, enrolled: enrolled.enrolled))
            state.epoch = randomBytes(16)
            try write(state)
        }
        return enrolled
    }

    /// Removes a finger's prints (from the chip too, when the reader is present).
    public func unenroll(finger: String, proof: AuthorityProof) throws -> [EnrolledFinger] {
        let gone: [StoredPrint] = try withStateLock {
            var state = try printsState()
            try requireProof(proof, .unenroll, in: state, what: "removing a finger")
            let gone = state.prints.filter { $0.finger == finger }
            guard !gone.isEmpty else { return [] }
            state.prints.removeAll { $0.finger == finger }
            state.epoch = randomBytes(16)
            try write(state)
            return gone
        }
        if let first = gone.first, let reader = try? reader(first.sensor) {
            for p in gone where p.sensor == reader.identity { try? reader.deletePrint(p.data) }
        }
        return gone.map { EnrolledFinger(finger: $0.finger, sensor: $0.sensor, enrolled: $0.enrolled) }
    }

    /// Sets aside a TPM-sealed device secret this TPM cannot open (PCR 7 changed, or the state
    /// came from another machine), so that the next authority over `folder` makes a new one. Every
    /// print and binding sealed under the old secret goes with it: what `vault enroll` does after
    /// the owner gave a passcode (`resetIfDamaged`).
    public static func setAsideSealedSecret(in folder: String) throws {
        try DeviceSecretFile.setAside(folder)
    }

    /// Replaces the prints file with an empty one under a new epoch: every binding goes. A
    /// readable state with bindings needs a proof; a damaged one can be reset by the owner of
    /// any vault (its passcode was given in this process).
    public func resetPrints(proof: AuthorityProof?) throws {
        try withStateLock {
            if let state = try? printsState() { try requireProof(proof, .resetPrints, in: state, what: "resetting the fingerprints") }
            try write(PrintsState(epoch: randomBytes(16), prints: [], bindings: []))
        }
    }

    // MARK: status

    /// The view for `vault status`.
    public func status(slot: SlotReference?, sensor: SensorIdentity?, rules: PasscodeRules) throws -> AuthorityStatus {
        let r = try record()
        var s = AuthorityStatus(kind: kind, fingers: [], printsError: nil, failedMatches: r.failedMatches, threshold: lockoutThreshold,
                                sensor: nil, domainState: nil, bindingCurrent: nil, passcodeDue: nil, passcodeAfterRebootDue: false,
                                secrets: secretProtection)
        let state: PrintsState
        do { state = try printsState() } catch let e as VaultError {
            s.printsError = e.message
            if slot != nil { s.bindingCurrent = false }
            return s
        }
        s.fingers = state.prints.map { EnrolledFinger(finger: $0.finger, sensor: $0.sensor, enrolled: $0.enrolled) }
        let b = slot.flatMap { ref in (state.bindings ?? []).first { $0.vaultID == ref.vaultID && $0.slotID == ref.slotID } }
        let effective = b.map { rules.stricter($0.rules) } ?? rules
        s.passcodeAfterRebootDue = effective.afterReboot && r.lastPasscodeBootID != bootID
        if effective.intervalHours > 0 { s.passcodeDue = (r.lastPasscodeTime ?? 0) + Int64(effective.intervalHours) * 3600 }
        if let reader = try? reader(b?.sensor ?? sensor ?? preferredSensor(state)) {
            s.sensor = reader.identity
            s.domainState = try? domainState(state, chipPrints: (try? reader.chipPrints()) ?? [])
        } else {
            s.domainState = try? domainState(state, chipPrints: [])
        }
        if slot != nil {
            s.bindingCurrent = b.map { b in s.domainState?.bytes == b.domainState && (s.sensor == nil || s.sensor == b.sensor) } ?? false
        }
        return s
    }
}

/// The single-use challenges an authority handed out, each accepted once within 5 minutes. At
/// most `capacity` are outstanding (the oldest goes first), so a caller asking in a loop cannot
/// grow it without bound.
public final class ChallengeBook: Sendable {
    /// The book of this process (the embedded authority: every instance in one command shares it).
    public static let processWide = ChallengeBook()
    /// Seconds a challenge stays valid.
    public static let lifetime: Int64 = 300
    /// Challenges outstanding at most.
    public let capacity: Int
    private let issued = Mutex<[[UInt8]: Int64]>([:])

    /// An empty book holding at most `capacity` challenges.
    public init(capacity: Int = 256) {
        self.capacity = max(1, capacity)
    }

    /// A fresh 32-byte challenge, recorded at `now`.
    public func issue(now: Int64) -> [UInt8] {
        let c = randomBytes(32)
        issued.withLock { issued in
            issued = issued.filter { now - $0.value < ChallengeBook.lifetime }
            while issued.count >= capacity, let oldest = issued.min(by: { $0.value < $1.value })?.key {
                issued[oldest] = nil
            }
            issued[c] = now
        }
        return c
    }

    /// Whether `challenge` was issued here less than 5 minutes before `now`; it is used up either way.
    public func consume(_ challenge: [UInt8], now: Int64) -> Bool {
        issued.withLock { issued in
            guard let t = issued.removeValue(forKey: challenge) else { return false }
            return now - t < ChallengeBook.lifetime
        }
    }
}
