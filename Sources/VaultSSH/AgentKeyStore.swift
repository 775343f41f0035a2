import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// A key held by the agent, with the constraints it was added with.
final class AgentIdentity: @unchecked Sendable {
    let key: SSHPrivateKey
    let comment: String
    /// When it expires (monotonic seconds), nil for never.
    let death: Double?
    /// Whether each use asks (`ssh-add -c`).
    let confirm: Bool
    let destinations: [DestinationConstraint]

    init(key: SSHPrivateKey, comment: String, death: Double?, confirm: Bool, destinations: [DestinationConstraint]) {
        (self.key, self.comment, self.death, self.confirm, self.destinations) = (key, comment, death, confirm, destinations)
    }
}

/// The identities of an agent and its lock, shared by every connection (one lock). Keys added
/// with `ssh-add` live here only: never written anywhere.
public final class AgentKeyStore: @unchecked Sendable {
    private let lock = ThreadLock()
    private var identities: [AgentIdentity] = []
    private var lockHash: (salt: [UInt8], hash: [UInt8])?
    private var failedUnlocks = 0
    /// The lifetime given with `-t` for keys added without one (seconds), nil for none.
    let defaultLifetime: UInt32?

    /// An empty store; keys added without a lifetime get `defaultLifetime` (`-t`).
    public init(defaultLifetime: UInt32? = nil) {
        self.defaultLifetime = defaultLifetime
    }

    /// Whether the agent is locked (`ssh-add -x`).
    package var isLocked: Bool { lock.withLock { lockHash != nil } }

    /// How many identities are held (expired ones removed first).
    public var count: Int { reap(); return lock.withLock { identities.count } }

    /// Removes expired identities; returns the seconds until the next expiry, nil for none.
    @discardableResult
    public func reap(now: Double? = nil) -> Double? {
        let now = now ?? MonotonicClock.seconds()
        return lock.withLock {
            identities.removeAll { $0.death.map { now >= $0 } ?? false }
            return identities.compactMap(\.death).min().map { $0 - now }
        }
    }

    /// Every identity, in the order added.
    func all() -> [AgentIdentity] {
        reap()
        return lock.withLock { identities }
    }

    /// The identity whose public key blob is `blob`.
    func find(_ blob: [UInt8]) -> AgentIdentity? {
        reap()
        return lock.withLock { identities.first { $0.key.publicKey.blob == blob } }
    }

    /// Adds, or replaces the identity of the same public key (OpenSSH's behaviour: a key added
    /// again takes its new comment and constraints). False when the store is full.
    func add(_ identity: AgentIdentity) -> Bool {
        lock.withLock {
            if let i = identities.firstIndex(where: { $0.key.publicKey.blob == identity.key.publicKey.blob }) {
                identities[i] = identity
                return true
            }
            guard identities.count < AgentLimit.identities else { return false }
            identities.append(identity)
            return true
        }
    }

    /// Removes the identity of `blob`; false when there is none.
    func remove(_ blob: [UInt8]) -> Bool {
        lock.withLock {
            guard let i = identities.firstIndex(where: { $0.key.publicKey.blob == blob }) else { return false }
            identities.remove(at: i)
            return true
        }
    }

    /// Removes every identity (their secrets are wiped as they go).
    public func removeAll() {
        lock.withLock { identities.removeAll() }
    }

    private static func hash(_ passphrase: [UInt8], salt: [UInt8]) -> [UInt8] {
        SHA2.sha512(salt + passphrase)
    }

    /// Locks with `passphrase` (not empty; false when already locked).
    func lock(passphrase: [UInt8]) -> Bool {
        guard !passphrase.isEmpty else { return false }
        return lock.withLock {
            guard lockHash == nil else { return false }
            let salt = randomBytes(32)
            lockHash = (salt, Self.hash(passphrase, salt: salt))
            return true
        }
    }

    /// Unlocks when `passphrase` is the lock's (constant-time compare). A wrong one waits
    /// 0.1 s more for each failure in a row, up to 10 s, as OpenSSH's agent does; the wait
    /// is outside the lock, so other connections go on.
    func unlock(passphrase: [UInt8]) -> Bool {
        let outcome: Int? = lock.withLock {
            guard let held = lockHash, !passphrase.isEmpty else { return nil }
            if constantTimeEqual(Self.hash(passphrase, salt: held.salt), held.hash) {
                lockHash = nil
                failedUnlocks = 0
                return 0
            }
            failedUnlocks = min(failedUnlocks + 1, 100)
            return failedUnlocks
        }
        guard let outcome else { return false }
        if outcome == 0 { return true }
        MonotonicClock.sleep(seconds: 0.1 * Double(outcome))
        return false
    }
}
