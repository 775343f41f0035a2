internal import CSodium
internal import VaultSystem

/// Secret bytes in guarded memory (`sodium_malloc`: guard pages, canary, `mlock`ed), wiped and
/// freed when the value ends. Non-copyable so a key has exactly one owner; it has no description
/// and no collection conformance, so it cannot be printed or iterated by accident.
public struct SecretBytes: ~Copyable, @unchecked Sendable {
    private let base: UnsafeMutableRawPointer
    /// The number of secret bytes.
    public let count: Int

    /// Allocates `count` zeroed bytes of guarded memory.
    /// - Throws: `CryptoError.outOfMemory` when libsodium cannot allocate.
    public init(zeroed count: Int) throws {
        _ = Sodium.ready
        guard let p = sodium_malloc(max(count, 1)) else { throw CryptoError.outOfMemory }
        sodium_memzero(p, max(count, 1))
        base = p
        self.count = count
    }

    /// Allocates `count` zeroed bytes of guarded memory (guard pages, canary, wiped and freed as
    /// above) that is not kept locked in RAM: for a large block, such as an agent session's index
    /// of overview records, that would not fit under `RLIMIT_MEMLOCK` (`mlock` refuses the whole
    /// range then) or would use up the allowance the keys' small blocks need. The pages stay out
    /// of core dumps (libsodium's `MADV_DONTDUMP`).
    /// - Throws: `CryptoError.outOfMemory` when libsodium cannot allocate.
    public init(unlockedZeroed count: Int) throws {
        try self.init(zeroed: count)
        // The bytes start in the first page libsodium locked, after the canary: unlocking from
        // their page on unlocks every page it locked.
        ProcessMemory.unlockPages(of: UnsafeMutableRawBufferPointer(start: base, count: max(count, 1)))
    }

    /// Allocates `count` random bytes (libsodium's CSPRNG).
    public static func random(count: Int) throws -> SecretBytes {
        let s = try SecretBytes(zeroed: count)
        randombytes_buf(s.base, count)
        return s
    }

    /// Copies `bytes` into guarded memory. The caller's array is not wiped (Swift arrays can be
    /// copied by the runtime); prefer building secrets in place with `init(zeroed:)`.
    public init(copying bytes: [UInt8]) throws {
        try self.init(zeroed: bytes.count)
        bytes.withUnsafeBytes { src in
            if let s = src.baseAddress { base.copyMemory(from: s, byteCount: bytes.count) }
        }
    }

    /// Copies raw bytes into guarded memory.
    public init(copying bytes: UnsafeRawBufferPointer) throws {
        try self.init(zeroed: bytes.count)
        if let s = bytes.baseAddress { base.copyMemory(from: s, byteCount: bytes.count) }
    }

    deinit {
        sodium_memzero(base, max(count, 1))
        sodium_free(base)
    }

    /// Lends the bytes read-only for the duration of `body`.
    public func withUnsafeBytes<R: ~Copyable>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Lends the bytes writable for the duration of `body` (to fill a key in place).
    public func withUnsafeMutableBytes<R: ~Copyable>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeMutableRawBufferPointer(start: base, count: count))
    }

    /// Wipes the first `n` bytes (`sodium_memzero`, which no optimisation removes): a buffer
    /// reused for one record after another is cleared of each as soon as it was read.
    package func wipe(prefix n: Int) {
        sodium_memzero(base, min(max(n, 0), count))
    }

    /// Wipes `bytes` (part of a guarded buffer lent by `withUnsafeMutableBytes`) as
    /// `wipe(prefix:)` does.
    package static func wipe(_ bytes: UnsafeMutableRawBufferPointer) {
        if let b = bytes.baseAddress { sodium_memzero(b, bytes.count) }
    }

    /// A copy in fresh guarded memory.
    public func duplicate() throws -> SecretBytes {
        try SecretBytes(copying: UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Constant-time equality (`sodium_memcmp`); lengths are not secret.
    public func isEqual(to other: borrowing SecretBytes) -> Bool {
        guard count == other.count else { return false }
        return other.withUnsafeBytes { o in sodium_memcmp(base, o.baseAddress!, count) == 0 }
    }

    /// The bytes as an ordinary array: only for values that leave guarded memory on purpose
    /// (a decrypted record about to be decoded, a recovery key about to be shown).
    public func exposedBytes() -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: base, count: count))
    }
}

/// Constant-time comparison of two public-length byte arrays (MACs, checksums).
public func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in sodium_memcmp(pa.baseAddress!, pb.baseAddress!, a.count) == 0 } }
}

/// Constant-time comparison of two public-length byte strings read in place.
package func constantTimeEqual(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
    guard a.count == b.count else { return false }
    if a.isEmpty { return true }
    return sodium_memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
}

/// Cryptographically random public bytes (nonces, salts, identifiers), from `RandomPool`.
public func randomBytes(_ count: Int) -> [UInt8] {
    _ = Sodium.ready
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { RandomPool.shared.fill($0) }
    return out
}

/// Random bytes for a secret that must live in an ordinary array (a binding secret written to
/// the authority's file): straight from libsodium, never through `RandomPool`, whose buffer
/// would hold them before they are asked for.
public func randomKeyBytes(_ count: Int) -> [UInt8] {
    _ = Sodium.ready
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
    return out
}

/// A uniformly random integer in `0..<upperBound` (`randombytes_uniform`, no modulo bias).
public func randomUniform(_ upperBound: UInt32) -> UInt32 {
    _ = Sodium.ready
    return randombytes_uniform(upperBound)
}
