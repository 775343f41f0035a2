import FoundationEssentials
import Synchronization

/// What a fresh fingerprint match is for. A vault's nonce is issued for one purpose, and a token
/// over it serves that purpose only: a match for one item releases no other, and a match for a
/// release does not turn a switch off.
public enum FreshMatchPurpose: Hashable, Sendable {
    /// Releasing secrets of the item (its normalised name).
    case release(item: String)
    /// Turning the item's fingerprint login off.
    case fingerprintLoginSwitch(item: String)
    /// Releasing every item at once (export) while one has fingerprint login on.
    case releaseAll

    /// The kinds, as the agent's wire names them.
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case release
        case fingerprintLoginSwitch = "fingerprint-login-switch"
        case releaseAll = "release-all"
    }

    /// This purpose's kind.
    public var kind: Kind {
        switch self {
        case .release: .release
        case .fingerprintLoginSwitch: .fingerprintLoginSwitch
        case .releaseAll: .releaseAll
        }
    }

    /// The item it is about (nil for `releaseAll`).
    public var item: String? {
        switch self {
        case .release(let n), .fingerprintLoginSwitch(let n): n
        case .releaseAll: nil
        }
    }

    /// The purpose of `kind` for `item` (normalised here).
    /// - Throws: `.usage` when an item is missing, or given for `releaseAll`; a bad name's error.
    public init(kind: Kind, item: String?) throws {
        switch (kind, item) {
        case (.release, let n?): self = .release(item: try Item.normalize(name: n))
        case (.fingerprintLoginSwitch, let n?): self = .fingerprintLoginSwitch(item: try Item.normalize(name: n))
        case (.releaseAll, nil): self = .releaseAll
        case (.releaseAll, _?): throw VaultError.usage("a fresh match for the whole vault names no item")
        case (_, nil): throw VaultError.usage("a fresh match for '\(kind.rawValue)' names its item")
        }
    }

    /// The same purpose with its item name normalised (names arrive as typed).
    func normalized() throws -> FreshMatchPurpose { try FreshMatchPurpose(kind: kind, item: item) }
}

/// The nonces a vault issued for fresh matches: 32 random bytes each, bound to one purpose,
/// accepted once within `lifetime` seconds. At most `capacity` are outstanding (the oldest goes
/// first), so a caller asking in a loop cannot grow it.
public final class FreshMatchBook: Sendable {
    /// Seconds a nonce stays valid.
    public static let lifetime: Double = 60
    /// Nonces outstanding at most.
    public let capacity: Int
    private struct Entry {
        var purpose: FreshMatchPurpose
        var issued: Double
        /// Issue order: the oldest goes first when the book is full.
        var sequence: UInt64
    }
    private struct Book {
        var entries: [[UInt8]: Entry] = [:]
        var issuedCount: UInt64 = 0
    }
    private let book = Mutex(Book())
    private let clockBox: Mutex<@Sendable () -> Double>

    /// An empty book holding at most `capacity` nonces, timed by `clock` (seconds, never jumping).
    public init(capacity: Int = 64, clock: @escaping @Sendable () -> Double = FreshMatchBook.continuousSeconds) {
        self.capacity = max(1, capacity)
        clockBox = Mutex(clock)
    }

    /// Seconds on a clock that keeps running while the machine sleeps.
    public static let continuousSeconds: @Sendable () -> Double = {
        let origin = ContinuousClock.now
        return {
            let c = origin.duration(to: .now).components
            return Double(c.seconds) + Double(c.attoseconds) * 1e-18
        }
    }()

    /// The clock nonces are timed by (the agent gives its own, so tests can move it).
    public var clock: @Sendable () -> Double {
        get { clockBox.withLock { $0 } }
        set { clockBox.withLock { $0 = newValue } }
    }

    /// A fresh nonce for `purpose`.
    public func issue(for purpose: FreshMatchPurpose) -> [UInt8] {
        let nonce = randomBytes(32)
        let now = clock()
        book.withLock { book in
            book.entries = book.entries.filter { now - $0.value.issued < FreshMatchBook.lifetime }
            while book.entries.count >= capacity, let oldest = book.entries.min(by: { $0.value.sequence < $1.value.sequence })?.key {
                book.entries[oldest] = nil
            }
            book.issuedCount += 1
            book.entries[nonce] = Entry(purpose: purpose, issued: now, sequence: book.issuedCount)
        }
        return nonce
    }

    /// Whether `nonce` was issued here for `purpose` less than `lifetime` seconds ago; it is used
    /// up whatever the answer, so a nonce is presented once.
    public func consume(_ nonce: [UInt8], for purpose: FreshMatchPurpose) -> Bool {
        let now = clock()
        return book.withLock { book in
            guard let e = book.entries.removeValue(forKey: nonce) else { return false }
            return e.purpose == purpose && now - e.issued < FreshMatchBook.lifetime && now >= e.issued
        }
    }

    /// How many nonces are outstanding (tests).
    public var outstanding: Int { book.withLock { $0.entries.count } }
}

extension UnlockedVault {
    /// A single-use nonce for a fresh match for `purpose` (valid `FreshMatchBook.lifetime`
    /// seconds): the caller has the key authority verify a match over it and hands the token
    /// back with the request it is for.
    /// - Throws: `.usage` for a purpose without its item; a bad item name's error.
    public func freshMatchNonce(for purpose: FreshMatchPurpose) throws -> [UInt8] {
        freshMatches.issue(for: try purpose.normalized())
    }

    /// The one check of fingerprint login: `token` is a key authority's match over a nonce this
    /// vault issued for `purpose`, not used before, and one of its MACs is this vault's own under
    /// its proof key. The nonce is used up by the check, whatever its outcome.
    /// - Throws: `.freshMatchNeeded(item: item)` otherwise.
    func requireFreshMatch(_ token: FreshMatchToken?, for purpose: FreshMatchPurpose, item: String) throws {
        guard let token, try acceptsFreshMatch(token, for: purpose) else { throw VaultError.freshMatchNeeded(item: item) }
    }

    private func acceptsFreshMatch(_ token: FreshMatchToken, for purpose: FreshMatchPurpose) throws -> Bool {
        guard freshMatches.consume(token.nonce, for: purpose) else { return false }
        guard token.vaultID == store.vaultID else { return false }
        if let age = token.reusedAge, !(0...FreshMatchToken.maximumReuse).contains(age) { return false }
        return try FreshMatchMAC.check(token, key: try proofKey())
    }
}
