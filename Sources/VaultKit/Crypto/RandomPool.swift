internal import CSodium
import VaultSystem

/// Public random bytes (nonces, salts, identifiers) drawn from libsodium's generator 4 KiB at a
/// time instead of one `getrandom(2)` per request: an import seals two records and makes one id
/// per item, and a system call for each was 5% of a 100,000-item import. Bytes are handed out
/// once and wiped from the pool as they go. A forked child starts with an empty pool
/// (`ForkSafeLock`), so parent and child never share bytes (vault itself only spawns).
final class RandomPool: @unchecked Sendable {
    static let shared = RandomPool()

    private static let size = 4096
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: RandomPool.size, alignment: 16)
    private var offset = RandomPool.size
    private let lock = ForkSafeLock(resetInChild: { RandomPool.shared.resetInChild() })

    private init() {}

    /// `count` random bytes into `out`.
    func fill(_ out: UnsafeMutableRawBufferPointer) {
        guard let base = out.baseAddress, out.count > 0 else { return }
        guard out.count <= Self.size / 4 else { randombytes_buf(base, out.count); return }
        lock.withLock {
            if offset + out.count > Self.size {
                randombytes_buf(buffer.baseAddress!, Self.size)
                offset = 0
            }
            let from = buffer.baseAddress! + offset
            base.copyMemory(from: from, byteCount: out.count)
            sodium_memzero(from, out.count)
            offset += out.count
        }
    }

    /// In a forked child, the lock held: nothing of the parent's bytes stays.
    private func resetInChild() {
        sodium_memzero(buffer.baseAddress!, Self.size)
        offset = Self.size
    }
}
