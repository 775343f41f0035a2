internal import CSodium
import Glibc

/// Public random bytes (nonces, salts, identifiers) drawn from libsodium's generator 4 KiB at a
/// time instead of one `getrandom(2)` per request: an import seals two records and makes one id
/// per item, and a system call for each was 5% of a 100,000-item import. Bytes are handed out
/// once and wiped from the pool as they go. A forked child starts with an empty pool
/// (`pthread_atfork`), so parent and child never share bytes (vault itself only spawns).
final class RandomPool: @unchecked Sendable {
    static let shared = RandomPool()

    private static let size = 4096
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: RandomPool.size, alignment: 16)
    private var offset = RandomPool.size
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    private init() {
        pthread_mutex_init(lock, nil)
        pthread_atfork({ RandomPool.shared.lockForFork() }, { RandomPool.shared.unlockAfterFork() },
                       { RandomPool.shared.resetInChild() })
    }

    /// `count` random bytes into `out`.
    func fill(_ out: UnsafeMutableRawBufferPointer) {
        guard let base = out.baseAddress, out.count > 0 else { return }
        guard out.count <= Self.size / 4 else { randombytes_buf(base, out.count); return }
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        if offset + out.count > Self.size {
            randombytes_buf(buffer.baseAddress!, Self.size)
            offset = 0
        }
        let from = buffer.baseAddress! + offset
        base.copyMemory(from: from, byteCount: out.count)
        sodium_memzero(from, out.count)
        offset += out.count
    }

    private func lockForFork() { pthread_mutex_lock(lock) }
    private func unlockAfterFork() { pthread_mutex_unlock(lock) }

    private func resetInChild() {
        sodium_memzero(buffer.baseAddress!, Self.size)
        offset = Self.size
        pthread_mutex_unlock(lock)
    }
}
