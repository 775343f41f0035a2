import FoundationEssentials
import Synchronization
import VaultSystem

/// The in-process authority: `$XDG_STATE_HOME/vault` (0700) holding `device-secret`,
/// `prints.sealed` (enrolled prints, enrolment epoch and bindings, sealed under a key derived
/// from the device secret) and `auth.sealed` (lockout counter, last passcode unlock, recent
/// matches). Files are 0600 and replaced atomically. It runs the match itself, like the system
/// authority, but its state is in the user's own files: it protects against a person at the
/// reader, not against code running as the user.
package final class EmbeddedKeyAuthority: KeyAuthority {
    /// The state folder.
    package let folder: String
    /// The current boot id (injected by tests to simulate a reboot).
    package let bootID: String
    private let clock: @Sendable () -> Int64
    private let secret: SecretBytes
    /// What protects the device secret at rest.
    package let secretProtection: SecretProtection
    private let openReaderFunction: ReaderOpener
    /// Space given back to a state write that finds the file system full.
    private let reserve: StateReserve?
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

    /// What its bindings record: `.embedded` in the vault process, `.system` inside vault-authd
    /// (the binding then names the authority a client must ask, not the code that answers).
    package let kind: AuthorityKind

    /// `$XDG_STATE_HOME/vault`, else `~/.local/state/vault`.
    package static func defaultFolder(environment: [String: String]) -> String {
        if let s = environment["XDG_STATE_HOME"], s.hasPrefix("/") { return s + "/vault" }
        return (environment["HOME"] ?? ProcessIdentity.homeDirectory(of: ProcessIdentity.uid) ?? "/") + "/.local/state/vault"
    }

    /// The kernel's boot id.
    package static func currentBootID() -> String {
        (try? ProcessIdentity.bootID()) ?? "unknown"
    }

    /// Opens (creating on first use) the authority's state in `folder`; `openReader` opens the
    /// reader when a scan or an enrolment is due. `challenges` holds the challenges issued: the
    /// process-wide book by default; a daemon hosting one authority per user gives each its own.
    /// `sealing`: where the device secret rests (a file by default; `vault-authd` seals it with
    /// the TPM when there is one). `reserve`: space kept back for the state's writes when the
    /// file system is full (`vault-authd`'s; none for the embedded authority). `kind`: the
    /// authority this one answers as (vault-authd hosts it as `.system`).
    /// - Throws: `.tpmUnavailable`, `.tpmForeign`, `.tpmPolicyFailed` for a TPM-sealed secret
    ///   that cannot be unsealed; `.io`, `.corrupt`.
    package init(folder: String, bootID: String = EmbeddedKeyAuthority.currentBootID(),
                clock: @escaping @Sendable () -> Int64 = { unixNow() },
                challenges: ChallengeBook = .processWide,
                sealing: DeviceSecretSealing = .filePermissions,
                reserve: StateReserve? = nil, kind: AuthorityKind = .embedded,
                openReader: @escaping ReaderOpener = { _ in throw VaultError.biometryNotAvailable("no fingerprint reader found") }) throws {
        self.kind = kind
        self.folder = folder
        self.reserve = reserve
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
        /// The owner vault whose proof enrolled it; nil when none did (no owner vault existed).
        var byVault: [UInt8]?
        /// That vault's name as its client gave it (shown, not trusted).
        var label: String?
        /// False for a print no owner stands behind yet; nil in states from before (confirmed).
        var confirmed: Bool?

        var isConfirmed: Bool { confirmed ?? true }
    }

    /// One key of a binding: each fingerprint unlock hands out the key the slot is sealed with
    /// and a new one the caller re-seals it with; naming a key drops the keys made before it.
    struct BindingKey: Codable {
        /// Public: stored in the slot's parameters (hex there). Empty for a binding's first key
        /// in states from before keys rolled.
        var id: [UInt8]
        /// Random per key: the slot key derives from it.
        var secret: [UInt8]
        /// Order of creation within the binding.
        var seq: Int64
    }

    /// One binding of a vault's fingerprint slot.
    struct Binding: Codable {
        var vaultID: [UInt8]
        var slotID: Int64
        /// The first key's secret (states from before keys rolled; `keys` supersedes it).
        var secret: [UInt8]
        /// Checked this vault's proofs before vaults were registered (`vaults` supersedes it).
        var proofKey: [UInt8]?
        var sensor: SensorIdentity
        var domainState: [UInt8]
        var rules: PasscodeRules
        var created: Int64
        /// The last change of the prints recorded when it was made (`StoredChange.seq`).
        var historySeq: Int64?
        /// The live keys, oldest first (nil: one key, `secret`, with an empty id).
        var keys: [BindingKey]?

        var liveKeys: [BindingKey] { keys ?? [BindingKey(id: [], secret: secret, seq: 0)] }
    }

    /// A vault the authority knows: the key its proofs are checked under, registered at its
    /// first binding, and whether it is one of the vaults that manage the fingerprints.
    struct RegisteredVault: Codable {
        var vaultID: [UInt8]
        var proofKey: [UInt8]
        /// A key registered by a binding after a rotation: it replaces `proofKey` at the first
        /// proof made under it (a rotation that did not commit keeps proving with the old one).
        var pendingProofKey: [UInt8]?
        /// An owner vault: its proofs change the uid-wide state (prints, lockout, clocks).
        var owner: Bool
        var registered: Int64
        /// The vault's name as its client gave it (shown, not trusted).
        var label: String?
    }

    /// `prints.sealed`: prints, the enrolment epoch (new on every change), the bindings, the
    /// registered vaults, the history of changes, and the reader's own list as last confirmed.
    struct PrintsState: Codable {
        var epoch: [UInt8]
        var prints: [StoredPrint]
        var bindings: [Binding]?
        var vaults: [RegisteredVault]?
        var history: [StoredChange]?
        /// The reader's own list (fprintd's fingers and files) as an owner's binding last saw
        /// it; nil until one did (then the list is taken as it is).
        var confirmedChip: [String]?
    }

    /// One recorded change of the prints.
    struct StoredChange: Codable {
        /// Order of recording (nil in states from before it was kept).
        var seq: Int64?
        var kind: PrintChange.Kind
        var finger: String
        var time: Int64
        var byVault: [UInt8]?
        var label: String?
    }

    /// One recent match, for the reuse window of fingerprint login.
    struct MatchRecord: Codable, Equatable {
        var vaultID: [UInt8]
        var slotID: Int64
        var time: Int64
        var bootID: String
    }

    /// When a vault's passcode last opened it.
    struct PasscodeClock: Codable, Equatable {
        var bootID: String
        var time: Int64
    }

    /// `auth.sealed`: the lockout counter and the passcode-unlock record.
    struct AuthRecord: Codable, Equatable {
        var failedMatches = 0
        /// The last passcode unlock of an owner vault (every vault's clocks).
        var lastPasscodeBootID: String?
        var lastPasscodeTime: Int64?
        var matches: [MatchRecord]?
        /// Passcode attempts not followed by a recorded unlock, per vault (hex id), and the last one's time.
        var passcodeFailures: [String: Int]?
        var lastPasscodeAttempt: [String: Int64]?
        /// The last passcode unlock of each vault (hex id): its own clocks.
        var vaultPasscode: [String: PasscodeClock]?
    }

    /// Bindings kept per vault (the newest; a rotation that did not commit leaves the old one usable).
    static let bindingsPerVault = 3
    /// Vaults registered per user at most; a new one evicts the longest-registered vault that is
    /// not an owner (never an owner vault).
    static let vaultLimit = 32
    /// Live keys kept per binding (concurrent unlocks each hand out one).
    static let keysPerBinding = 8
    /// Changes of the prints remembered.
    static let historyLimit = 64

    private func sealedRead<T: Decodable>(_ path: String, label: String, as: T.Type) throws -> T? {
        guard let bytes = try PrivateFiles.read(path, limit: 16 << 20) else { return nil }
        guard bytes.count > AEAD.nonceLength else { throw VaultError.authorityDamaged("\(path) is truncated") }
        let key = try KeyedHash.deriveKey(from: secret, context: "vault/v1/authority/" + label)
        do {
            let plain = try AEAD.open(Array(bytes[AEAD.nonceLength...]), key: key, nonce: Array(bytes[..<AEAD.nonceLength]),
                                      associatedData: Array(("vault-authority-v1/" + label).utf8))
            return try plain.withUnsafeBytes { try WireJSON.decode(T.self, from: $0) }
        } catch is CryptoError {
            throw VaultError.authorityDamaged("\(path) failed authentication (edited, or sealed under another device secret)")
        } catch is DecodingError {
            throw VaultError.authorityDamaged("\(path) is unreadable")
        }
    }

    private func sealedWrite<T: Encodable>(_ value: T, _ path: String, label: String) throws {
        let key = try KeyedHash.deriveKey(from: secret, context: "vault/v1/authority/" + label)
        let plain = try WireJSON.encode(value)
        let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: Array(("vault-authority-v1/" + label).utf8)) }
        if let reserve { try reserve.write(s.nonce + s.ciphertext, to: path) } else { try AtomicFile.write(s.nonce + s.ciphertext, to: path) }
    }

    private func printsState() throws -> PrintsState {
        var state = try sealedRead(printsPath, label: "prints", as: PrintsState.self) ?? PrintsState(epoch: [], prints: [], bindings: [])
        if state.vaults == nil {
            // A state from before vaults were registered: each bound vault's newest proof key
            // becomes its registered key, and each is an owner (as it could act before).
            var vaults: [RegisteredVault] = []
            for b in (state.bindings ?? []).reversed() where !vaults.contains(where: { $0.vaultID == b.vaultID }) {
                if let key = b.proofKey {
                    vaults.insert(RegisteredVault(vaultID: b.vaultID, proofKey: key, owner: true, registered: b.created), at: 0)
                }
            }
            state.vaults = vaults
        }
        return state
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
    /// processes never lose a failed match. A change that leaves the record as it was (a
    /// passcode unlock of a vault with no failures to clear) writes nothing: the file holds it.
    private func updateRecord<R>(_ change: (inout AuthRecord) throws -> R) throws -> R {
        try withStateLock {
            let before = try record()
            var r = before
            let result = try change(&r)
            if r != before { try write(r) }
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
    package func challenge() throws -> [UInt8] {
        challenges.issue(now: clock())
    }

    private func consume(_ challenge: [UInt8]) -> Bool {
        challenges.consume(challenge, now: clock())
    }

    /// The index of the registered vault `proof` is valid for (`purpose`, `subject`) under its
    /// registered or pending key; a pending key proven replaces the old one in `state` (the
    /// caller writes it). The challenge is used up either way.
    /// - Returns: nil when the proof's vault is not registered here.
    /// - Throws: `.authenticationFailed` for an invalid proof or a used or unknown challenge.
    private func provenVault(_ proof: AuthorityProof, _ purpose: ProofPurpose, subject: [UInt8] = [],
                             in state: inout PrintsState) throws -> Int? {
        guard let i = (state.vaults ?? []).firstIndex(where: { $0.vaultID == proof.vaultID }) else { return nil }
        let invalid = VaultError.proofRefused
        guard consume(proof.challenge) else { throw invalid }
        let v = state.vaults![i]
        if try AuthorityProofMAC.check(proof, purpose: purpose, subject: subject, key: try SecretBytes(copying: v.proofKey)) { return i }
        if let pending = v.pendingProofKey,
           try AuthorityProofMAC.check(proof, purpose: purpose, subject: subject, key: try SecretBytes(copying: pending)) {
            state.vaults![i].proofKey = pending
            state.vaults![i].pendingProofKey = nil
            return i
        }
        throw invalid
    }

    /// Carries a pending key that `proven` (checked against an earlier read) proved into `state`,
    /// a fresh read under the lock, leaving every other registration as it is there.
    /// - Returns: whether `state` changed.
    @discardableResult
    private func adoptProvenKey(of proven: RegisteredVault, in state: inout PrintsState) -> Bool {
        guard let i = state.vaults?.firstIndex(where: { $0.vaultID == proven.vaultID }), state.vaults![i].pendingProofKey == proven.proofKey else {
            return false
        }
        state.vaults![i].proofKey = proven.proofKey
        state.vaults![i].pendingProofKey = nil
        return true
    }

    private func hasOwner(_ state: PrintsState) -> Bool { (state.vaults ?? []).contains { $0.owner } }

    /// Checks that `proof` is an owner vault's, once the user has one (uid-wide changes: the
    /// prints, the lockout, every vault's clocks). - Returns: the owner vault, nil when there is
    /// no owner vault yet (nothing to prove).
    private func requireOwner(_ proof: AuthorityProof?, _ purpose: ProofPurpose, subject: [UInt8], in state: inout PrintsState,
                              what: String) throws -> RegisteredVault? {
        guard hasOwner(state) else { return nil }
        let refused = VaultError.authenticationFailed("\(what) needs the passcode of a vault that manages your fingerprints")
        guard let proof, let i = try provenVault(proof, purpose, subject: subject, in: &state) else { throw refused }
        guard state.vaults![i].owner else {
            throw VaultError.authenticationFailed("\(what) needs the passcode of a vault that manages your fingerprints; "
                                                  + "this vault does not (it was bound after another one)")
        }
        return state.vaults![i]
    }

    private func record(_ change: PrintChange.Kind, finger: String, by vault: RegisteredVault?, label: String?, in state: inout PrintsState) {
        var h = state.history ?? []
        h.append(StoredChange(seq: (h.last?.seq ?? 0) + 1, kind: change, finger: finger, time: clock(), byVault: vault?.vaultID,
                              label: vault == nil ? nil : (label ?? vault?.label)))
        state.history = Array(h.suffix(EmbeddedKeyAuthority.historyLimit))
    }

    // MARK: prints and domain state

    /// The reader this authority would use, opened and kept open.
    package func reader(prefer: SensorIdentity?) throws -> SensorIdentity { try reader(prefer).identity }

    /// The enrolled fingers.
    package func fingers() throws -> [EnrolledFinger] {
        try printsState().prints.map(EmbeddedKeyAuthority.shown)
    }

    static func shown(_ p: StoredPrint) -> EnrolledFinger {
        EnrolledFinger(finger: p.finger, sensor: p.sensor, enrolled: p.enrolled, confirmed: p.isConfirmed, enrolledBy: p.label)
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

    /// The slot key of one key of a binding: keyed BLAKE2b of the device secret over the vault,
    /// the slot, the key's own secret, the reader and the domain state.
    private func slotKey(_ b: Binding, key: BindingKey, state: DomainState) throws -> SecretBytes {
        var w = ByteWriter(label: "vault-fingerprint-slot-v2")
        w.append(b.vaultID)
        w.append(b.slotID)
        w.append(key.secret)
        w.append(b.sensor.canonical)
        w.append(state.bytes)
        return try SecretBytes(copying: try KeyedHash.hash(w.bytes, key: secret, outputLength: 32))
    }

    private func preferredSensor(_ state: PrintsState) -> SensorIdentity? { state.prints.first?.sensor }

    // MARK: binding

    /// The fingers no owner stands behind on `reader`: prints enrolled with no proof and not
    /// confirmed, and entries of the reader's own list that an owner's binding never saw.
    private func unconfirmed(_ state: PrintsState, reader: SensorIdentity, chip: [String]) -> [PrintChange] {
        var out: [PrintChange] = []
        for p in state.prints where p.sensor == reader && !p.isConfirmed {
            out.append(PrintChange(kind: .enrolled, finger: p.finger, time: p.enrolled, by: nil))
        }
        if let seen = state.confirmedChip {
            let known = Set(seen)
            // Print files first: they say when they changed.
            for line in chip.sorted(by: >) where !known.contains(line) {
                out.append(PrintChange(kind: .outside, finger: EmbeddedKeyAuthority.chipFinger(line), time: EmbeddedKeyAuthority.chipTime(line) ?? clock(), by: nil))
            }
        }
        var seenFingers = Set<String>()
        return out.filter { seenFingers.insert($0.kind.rawValue + " " + $0.finger).inserted }
    }

    /// The finger a line of the reader's own list is about (fprintd: `fprintd-finger right-index`,
    /// `fprintd-print DRIVER/DEVICE/7 ...` with fprintd's finger numbers).
    static func chipFinger(_ line: String) -> String {
        let words = line.split(separator: " ").map(String.init)
        if words.first == "fprintd-finger", words.count > 1 {
            // fprintd's names (`right-index-finger`, `left-thumb`) as vault's.
            return words[1].hasSuffix("-finger") ? String(words[1].dropLast(7)) : words[1]
        }
        if words.first == "fprintd-print", words.count > 1, let n = Int(words[1].split(separator: "/").last ?? ""),
           (1...10).contains(n) {
            return ["left-thumb", "left-index", "left-middle", "left-ring", "left-little",
                    "right-thumb", "right-index", "right-middle", "right-ring", "right-little"][n - 1]
        }
        return words.count > 1 ? words[1] : line
    }

    /// When a line of the reader's own list last changed, when it says (`mtime=` nanoseconds).
    static func chipTime(_ line: String) -> Int64? {
        guard let field = line.split(separator: " ").first(where: { $0.hasPrefix("mtime=") }), let ns = Int64(field.dropFirst(6)) else { return nil }
        return ns / 1_000_000_000
    }

    /// A new binding of `request.slot` to the reader's current prints (see `KeyAuthority.bind`).
    package func bind(_ request: BindRequest, proofKey: borrowing SecretBytes) throws -> BindingGrant {
        let slot = request.slot
        let proofBytes = proofKey.exposedBytes()
        let subject = try BindRequest.subject(slot: slot, proofKey: proofKey, confirm: request.confirm)
        return try withStateLock {
            var state = try printsState()
            let reader = try reader(request.sensor ?? preferredSensor(state))
            guard state.prints.contains(where: { $0.sensor == reader.identity }) else { throw VaultError.biometryNotEnrolled }
            let chip = try reader.chipPrints()
            var vaults = state.vaults ?? []
            let index: Int
            /// The last change the vault's newest binding saw (nil: never bound: nothing to report).
            let previous: Int64?
            if vaults.contains(where: { $0.vaultID == slot.vaultID }) {
                // A vault known here: only its key's holder binds it (no one else replaces or
                // evicts its bindings).
                guard let proof = request.proof, proof.vaultID == slot.vaultID,
                      let i = try provenVault(proof, .bind, subject: subject, in: &state) else {
                    throw VaultError.authenticationFailed("binding vault \(request.label.map { "'\($0)' " } ?? "")needs a proof of its key (its passcode)")
                }
                vaults = state.vaults ?? []
                if vaults[i].proofKey != proofBytes { vaults[i].pendingProofKey = proofBytes }
                if let label = request.label { vaults[i].label = label }
                index = i
                previous = (state.bindings ?? []).filter { $0.vaultID == slot.vaultID }.max { $0.created < $1.created }.map { $0.historySeq ?? 0 }
            } else {
                // A vault never bound here: its key is registered now. The first vault of a user
                // manages the fingerprints; later ones are registered beside it, owners only
                // when an owner vault admits them.
                let owner = !hasOwner(state)
                if vaults.count >= EmbeddedKeyAuthority.vaultLimit {
                    guard let evict = vaults.firstIndex(where: { !$0.owner }) else {
                        throw VaultError.failure("the key authority already knows \(EmbeddedKeyAuthority.vaultLimit) vaults of yours that manage your fingerprints")
                    }
                    let gone = vaults.remove(at: evict).vaultID
                    state.bindings = (state.bindings ?? []).filter { $0.vaultID != gone }
                }
                vaults.append(RegisteredVault(vaultID: slot.vaultID, proofKey: proofBytes, owner: owner, registered: clock(), label: request.label))
                index = vaults.count - 1
                previous = nil
            }
            let owner = vaults[index].owner
            // Fingers no owner stands behind are shown, and bound to only when confirmed
            // explicitly by an owner vault (whose passcode was given for this binding).
            let doubtful = unconfirmed(state, reader: reader.identity, chip: chip)
            let left = doubtful.filter { !request.confirm.contains($0.finger) }
            if !left.isEmpty {
                throw VaultError.unconfirmedPrints(left.map(\.sentence), fingers: left.map(\.finger), owner: owner)
            }
            if !doubtful.isEmpty && !owner {
                throw VaultError.unconfirmedPrints(doubtful.map(\.sentence), fingers: doubtful.map(\.finger), owner: false)
            }
            for i in state.prints.indices where state.prints[i].sensor == reader.identity && !state.prints[i].isConfirmed {
                state.prints[i].confirmed = true
            }
            if owner { state.confirmedChip = chip }
            state.vaults = vaults
            var changes = (state.history ?? []).filter { c in previous.map { (c.seq ?? 0) > $0 } ?? false }.map {
                PrintChange(kind: $0.kind, finger: $0.finger, time: $0.time, by: $0.byVault == nil ? nil : ($0.label ?? "unnamed"))
            }
            changes += doubtful
            let current = try domainState(state, chipPrints: chip)
            let key = BindingKey(id: randomBytes(16), secret: randomKeyBytes(32), seq: 0)
            let b = Binding(vaultID: slot.vaultID, slotID: slot.slotID, secret: key.secret, proofKey: nil,
                            sensor: reader.identity, domainState: current.bytes, rules: request.rules, created: clock(),
                            historySeq: state.history?.last?.seq ?? 0, keys: [key])
            var bindings = (state.bindings ?? []).filter { !($0.vaultID == slot.vaultID && $0.slotID == slot.slotID) }
            bindings.append(b)
            let same = bindings.filter { $0.vaultID == slot.vaultID }
            if same.count > EmbeddedKeyAuthority.bindingsPerVault {
                let drop = Set(same.prefix(same.count - EmbeddedKeyAuthority.bindingsPerVault).map(\.slotID))
                bindings.removeAll { $0.vaultID == slot.vaultID && drop.contains($0.slotID) }
            }
            state.bindings = bindings
            try write(state)
            return BindingGrant(kek: try slotKey(b, key: key, state: current),
                                binding: FingerprintBinding(sensor: reader.identity, domainState: current, authority: kind, keyID: hexString(key.id)),
                                changes: changes, owner: owner)
        }
    }

    private func binding(_ slot: SlotReference, in state: PrintsState) throws -> Binding {
        guard let b = (state.bindings ?? []).first(where: { $0.vaultID == slot.vaultID && $0.slotID == slot.slotID }) else {
            throw state.prints.isEmpty ? VaultError.biometryNotEnrolled : VaultError.domainStateChanged
        }
        return b
    }

    /// The key of `b` the slot names (`slot.keyID`, hex; nil: the first key).
    /// - Throws: `.domainStateChanged` when that key is gone (a later unlock re-sealed the slot:
    ///   this is an older copy of the vault).
    private func liveKey(_ b: Binding, _ slot: SlotReference) throws -> BindingKey {
        let id = slot.keyID.flatMap(bytesFromHex) ?? []
        guard let k = b.liveKeys.first(where: { $0.id == id }) else { throw VaultError.domainStateChanged }
        return k
    }

    // MARK: matching

    /// A live match for `slot`'s binding, then the key the slot is sealed with and a new one to
    /// re-seal it with. Naming a key drops the keys made before it, so a key captured in one
    /// unlock opens nothing once a later unlock re-sealed the slot.
    package func unlock(_ slot: SlotReference, rules: PasscodeRules, prompt: String, events: (AuthorityEvent) -> Void) throws -> UnlockGrant {
        let state = try printsState()
        let b = try binding(slot, in: state)
        let key = try liveKey(b, slot)
        let r = try record()
        if r.failedMatches >= lockoutThreshold { throw VaultError.biometryLockout }
        if let why = passcodeRule(rules.stricter(b.rules), record: r, vaultID: slot.vaultID) { throw why }
        let current = try liveMatch(b, state: state, prompt: prompt, events: events)
        let kek = try slotKey(b, key: key, state: current)
        // The next key: written before it is handed out. When it cannot be written the slot
        // simply stays as it is (the match stands: the key above opens it).
        let next: BindingKey? = try? withStateLock {
            var now = try printsState()
            guard let i = (now.bindings ?? []).firstIndex(where: { $0.vaultID == slot.vaultID && $0.slotID == slot.slotID }) else { return nil }
            var keys = now.bindings![i].liveKeys
            guard let named = keys.firstIndex(where: { $0.id == key.id }) else { return nil }
            keys.removeFirst(named)
            let fresh = BindingKey(id: randomBytes(16), secret: randomKeyBytes(32), seq: (keys.map(\.seq).max() ?? 0) + 1)
            keys.append(fresh)
            if keys.count > EmbeddedKeyAuthority.keysPerBinding { keys.removeFirst(keys.count - EmbeddedKeyAuthority.keysPerBinding) }
            // The named key stays first: it opens the slot until the caller re-sealed it.
            if keys.first?.id != key.id { keys.insert(key, at: 0) }
            now.bindings![i].keys = keys
            try write(now)
            return fresh
        }
        guard let next else { return UnlockGrant(kek: kek, next: nil) }
        return UnlockGrant(kek: kek, next: NextSlotKey(kek: try slotKey(b, key: next, state: current),
                                                       binding: FingerprintBinding(sensor: b.sensor, domainState: current, authority: kind,
                                                                                   keyID: hexString(next.id))))
    }

    /// A live match for `slot`'s binding (or one at most `reuse` seconds old), no key: the
    /// token over the vault's `nonce`.
    package func verify(_ slot: SlotReference, nonce: [UInt8], reuse: Int, prompt: String, events: (AuthorityEvent) -> Void) throws -> FreshMatchToken {
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

    /// The token of a match for `vaultID`: one MAC under its registered proof key and one under
    /// its pending key (a rotation that did not prove itself yet).
    private func freshMatchToken(_ vaultID: [UInt8], nonce: [UInt8], reusedAge: Int64?, in state: PrintsState) throws -> FreshMatchToken {
        let keys = (state.vaults ?? []).filter { $0.vaultID == vaultID }.flatMap { [$0.proofKey] + ($0.pendingProofKey.map { [$0] } ?? []) }
        return try FreshMatchMAC.token(vaultID: vaultID, nonce: nonce, reusedAge: reusedAge, keys: keys)
    }

    /// Why the passcode is needed before any scan (reboot, interval), or nil: an owner vault's
    /// passcode unlock restarts every vault's clocks, any vault's its own.
    private func passcodeRule(_ rules: PasscodeRules, record r: AuthRecord, vaultID: [UInt8]) -> VaultError? {
        let own = r.vaultPasscode?[hexString(vaultID)]
        if rules.afterReboot, r.lastPasscodeBootID != bootID, own?.bootID != bootID {
            return .passcodeNeeded("first unlock since the machine started")
        }
        let last = max(r.lastPasscodeTime ?? 0, own?.time ?? 0)
        if rules.intervalHours > 0, clock() - last > Int64(rules.intervalHours) * 3600 {
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
        try match(on: reader, against: mine, prompt: prompt, events: events) { r, now, boot in
            var m = (r.matches ?? []).filter { !($0.vaultID == b.vaultID && $0.slotID == b.slotID) }
            m.append(MatchRecord(vaultID: b.vaultID, slotID: b.slotID, time: now, bootID: boot))
            r.matches = Array(m.suffix(16))
        }
        return current
    }

    /// Up to three scans on `reader` against `prints`; a match resets the count and `recordMatch`
    /// notes it in the same write.
    private func match(on reader: any FingerprintReader, against prints: [StoredPrint], prompt: String, events: (AuthorityEvent) -> Void,
                       recordMatch: (inout AuthRecord, Int64, String) -> Void) throws {
        for attempt in 1...triesPerEvaluation {
            let left = triesPerEvaluation - attempt
            let count = try updateRecord { r -> Int in r.failedMatches += 1; return r.failedMatches }
            if count > lockoutThreshold { throw VaultError.biometryLockout }
            let matched: Bool
            do {
                matched = try reader.scan(against: prints.map(\.data), prompt: prompt) != nil
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
                    recordMatch(&r, now, boot)
                }
                return
            }
            if count >= lockoutThreshold {
                events(.lockedOut)
                throw VaultError.biometryLockout
            }
            events(.noMatch(triesLeft: left))
        }
        throw RetryLimitExceeded()
    }

    // MARK: keeping in step with the vault's key

    /// Takes `proofKey` as the proven vault's next key (see `KeyAuthority.rekey`).
    @discardableResult
    package func rekey(_ proof: AuthorityProof, proofKey: borrowing SecretBytes) throws -> PasscodeRecord {
        let bytes = proofKey.exposedBytes()
        let subject = try AuthorityProofMAC.keySubject(proofKey)
        return try withStateLock {
            var state = try printsState()
            guard let i = try provenVault(proof, .rekey, subject: subject, in: &state) else { return .notBound }
            state.vaults![i].pendingProofKey = state.vaults![i].proofKey == bytes ? nil : bytes
            try write(state)
            return state.vaults![i].owner ? .owner : .vault
        }
    }

    /// Registers `proofKey` for the known vault `vaultID` after a live match of a confirmed print
    /// (see `KeyAuthority.reregister`).
    @discardableResult
    package func reregister(vaultID: [UInt8], proofKey: borrowing SecretBytes, label: String?, prompt: String,
                           events: (AuthorityEvent) -> Void) throws -> PasscodeRecord {
        let bytes = proofKey.exposedBytes()
        let state = try printsState()
        guard (state.vaults ?? []).contains(where: { $0.vaultID == vaultID }) else { return .notBound }
        if try record().failedMatches >= lockoutThreshold { throw VaultError.biometryLockout }
        let reader = try reader(preferredSensor(state))
        // Only prints an owner stands behind: one enrolled while no one vouched proves nothing.
        let confirmed = state.prints.filter { $0.sensor == reader.identity && $0.isConfirmed }
        guard !confirmed.isEmpty else { throw state.prints.isEmpty ? VaultError.biometryNotEnrolled : VaultError.domainStateChanged }
        try match(on: reader, against: confirmed, prompt: prompt, events: events) { _, _, _ in }
        return try withStateLock {
            var now = try printsState()
            guard let i = now.vaults?.firstIndex(where: { $0.vaultID == vaultID }) else { return .notBound }
            now.vaults![i].proofKey = bytes
            now.vaults![i].pendingProofKey = nil
            if let label { now.vaults![i].label = label }
            try write(now)
            return now.vaults![i].owner ? .owner : .vault
        }
    }

    // MARK: passcode unlocks

    /// Restarts the vault's passcode clock and, for an owner vault, resets the lockout and
    /// restarts every vault's clocks, for a valid proof.
    @discardableResult
    package func recordPasscodeUnlock(_ proof: AuthorityProof) throws -> PasscodeRecord {
        var state = try printsState()
        let pendingBefore = (state.vaults ?? []).first { $0.vaultID == proof.vaultID }?.pendingProofKey
        guard let i = try provenVault(proof, .passcodeUnlock, in: &state) else {
            // A vault never bound here has no proof key: its own failure count is cleared on the
            // word of the caller (its passcode is checked by its own slot; nothing else changes).
            try? updateRecord { r in r.passcodeFailures?[hexString(proof.vaultID)] = nil }
            return .notBound
        }
        let vault = state.vaults![i]
        if pendingBefore != nil && vault.pendingProofKey == nil {
            // The rotated key proved itself: it is the vault's key from now on.
            try? withStateLock {
                var now = try printsState()
                if adoptProvenKey(of: vault, in: &now) { try write(now) }
            }
        }
        let now = clock(), boot = bootID, id = hexString(proof.vaultID)
        try updateRecord { r in
            var clocks = r.vaultPasscode ?? [:]
            clocks[id] = PasscodeClock(bootID: boot, time: now)
            // Bounded by the registered vaults.
            let known = Set((state.vaults ?? []).map { hexString($0.vaultID) })
            r.vaultPasscode = clocks.filter { known.contains($0.key) }
            r.passcodeFailures?[id] = nil
            if vault.owner {
                r.failedMatches = 0
                r.lastPasscodeBootID = boot
                r.lastPasscodeTime = now
            }
        }
        return vault.owner ? .owner : .vault
    }

    /// How long to wait after the wrong passcodes counted for this vault.
    package func beginPasscodeAttempt(vaultID: [UInt8]) throws -> Int {
        let key = hexString(vaultID), now = clock()
        let r = try record()
        let failures = r.passcodeFailures?[key] ?? 0
        let last = r.lastPasscodeAttempt?[key] ?? 0
        return Int(max(0, Int64(passcodeDelay(afterFailures: failures)) - max(0, now - last)))
    }

    /// Counts a wrong passcode.
    package func recordPasscodeFailure(vaultID: [UInt8]) throws {
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
    package static let fingerOrder = ["right-index", "left-index", "right-thumb", "left-thumb", "right-middle", "left-middle", "right-ring"]

    /// Enrols a finger on the reader: with an owner vault's proof once there is one; the first
    /// finger (no owner vault yet) is enrolled unconfirmed.
    package func enroll(finger requested: String?, sensor: SensorIdentity?, proof: AuthorityProof?, label: String?) throws -> EnrolledFinger {
        var before = try printsState()
        let by = try requireOwner(proof, .enroll, subject: AuthorityProofMAC.fingerSubject(requested), in: &before, what: "enrolling a finger")
        let reader = try reader(sensor ?? preferredSensor(before))
        let existing = before.prints.filter { $0.sensor == reader.identity }.map(\.finger)
        let finger = requested ?? EmbeddedKeyAuthority.fingerOrder.first { !existing.contains($0) } ?? "right-ring"
        if existing.contains(finger) {
            throw VaultError.fingerEnrolled(finger)
        }
        let data = try reader.enroll(finger: finger)
        let name = by == nil ? nil : (label ?? by?.label)
        let enrolled = EnrolledFinger(finger: finger, sensor: reader.identity, enrolled: clock(), confirmed: by != nil, enrolledBy: name)
        try withStateLock {
            var state = try printsState()
            // The owner proof was checked in `before`; a pending key it proved replaces the old
            // one here too (other registrations made meanwhile are kept).
            if let by { adoptProvenKey(of: by, in: &state) }
            state.prints.append(StoredPrint(finger: finger, sensor: reader.identity, data: data, enrolled: enrolled.enrolled,
                                            byVault: by?.vaultID, label: name, confirmed: by != nil))
            state.epoch = randomBytes(16)
            record(.enrolled, finger: finger, by: by, label: label, in: &state)
            if by != nil, let chip = try? reader.chipPrints() { state.confirmedChip = chip }
            try write(state)
        }
        return enrolled
    }

    /// Removes a finger's prints (from the chip too, when the reader is present): with an owner
    /// vault's proof once there is one.
    package func unenroll(finger: String, proof: AuthorityProof?, label: String?) throws -> [EnrolledFinger] {
        let gone: [StoredPrint] = try withStateLock {
            var state = try printsState()
            let by = try requireOwner(proof, .unenroll, subject: AuthorityProofMAC.fingerSubject(finger), in: &state, what: "removing a finger")
            let gone = state.prints.filter { $0.finger == finger }
            guard !gone.isEmpty else {
                if by != nil { try write(state) }
                return []
            }
            state.prints.removeAll { $0.finger == finger }
            state.epoch = randomBytes(16)
            record(.removed, finger: finger, by: by, label: label, in: &state)
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
    package static func setAsideSealedSecret(in folder: String) throws {
        try DeviceSecretFile.setAside(folder)
    }

    /// Replaces the prints with none under a new epoch: every binding goes, the registered
    /// vaults stay. A readable state needs an owner vault's proof (once there is one); a damaged
    /// one can be reset by the owner of any vault (its passcode was given in this process), and
    /// nothing of it survives.
    package func resetPrints(proof: AuthorityProof?) throws {
        try withStateLock {
            guard var state = try? printsState() else {
                try write(PrintsState(epoch: randomBytes(16), prints: [], bindings: [], vaults: []))
                return
            }
            let by = try requireOwner(proof, .resetPrints, subject: [], in: &state, what: "resetting the fingerprints")
            state.prints = []
            state.bindings = []
            state.epoch = randomBytes(16)
            state.confirmedChip = nil
            record(.reset, finger: "", by: by, label: nil, in: &state)
            try write(state)
        }
    }

    // MARK: status

    /// The view for `vault status`.
    package func status(slot: SlotReference?, sensor: SensorIdentity?, rules: PasscodeRules) throws -> AuthorityStatus {
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
        s.fingers = state.prints.map(EmbeddedKeyAuthority.shown)
        s.owner = slot.flatMap { ref in (state.vaults ?? []).first { $0.vaultID == ref.vaultID } }?.owner
        let b = slot.flatMap { ref in (state.bindings ?? []).first { $0.vaultID == ref.vaultID && $0.slotID == ref.slotID } }
        let effective = b.map { rules.stricter($0.rules) } ?? rules
        let own = slot.flatMap { r.vaultPasscode?[hexString($0.vaultID)] }
        s.passcodeAfterRebootDue = effective.afterReboot && r.lastPasscodeBootID != bootID && own?.bootID != bootID
        if effective.intervalHours > 0 { s.passcodeDue = max(r.lastPasscodeTime ?? 0, own?.time ?? 0) + Int64(effective.intervalHours) * 3600 }
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
package final class ChallengeBook: Sendable {
    /// The book of this process (the embedded authority: every instance in one command shares it).
    package static let processWide = ChallengeBook()
    /// Seconds a challenge stays valid.
    package static let lifetime: Int64 = 300
    /// Challenges outstanding at most.
    package let capacity: Int
    private let issued = Mutex<[[UInt8]: Int64]>([:])

    /// An empty book holding at most `capacity` challenges.
    package init(capacity: Int = 256) {
        self.capacity = max(1, capacity)
    }

    /// A fresh 32-byte challenge, recorded at `now`.
    package func issue(now: Int64) -> [UInt8] {
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
    package func consume(_ challenge: [UInt8], now: Int64) -> Bool {
        issued.withLock { issued in
            guard let t = issued.removeValue(forKey: challenge) else { return false }
            return now - t < ChallengeBook.lifetime
        }
    }
}
