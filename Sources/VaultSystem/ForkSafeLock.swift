import Glibc

/// A mutex that `fork` leaves in a known state: it is held across the fork (no other thread can
/// be inside it at that moment), released in the parent, and in the child released after
/// `resetInChild` ran, so the child starts from a state it does not share with the parent (what
/// a pool of random bytes needs). Locks are registered once for the process' life.
public final class ForkSafeLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let resetInChild: @Sendable () -> Void

    /// A lock whose `resetInChild` runs in a forked child, the lock held.
    public init(resetInChild: @escaping @Sendable () -> Void) {
        self.resetInChild = resetInChild
        pthread_mutex_init(mutex, nil)
        ForkSafeLock.register(self)
    }

    /// Runs `body` holding the lock.
    public func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    // MARK: the process' locks and its one set of fork handlers

    nonisolated(unsafe) private static let registry: UnsafeMutablePointer<pthread_mutex_t> = {
        let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(m, nil)
        pthread_atfork({ ForkSafeLock.prepare() }, { ForkSafeLock.parent() }, { ForkSafeLock.child() })
        return m
    }()
    nonisolated(unsafe) private static var locks: [ForkSafeLock] = []

    private static func register(_ lock: ForkSafeLock) {
        pthread_mutex_lock(registry)
        locks.append(lock)
        pthread_mutex_unlock(registry)
    }

    private static func prepare() {
        pthread_mutex_lock(registry)
        for l in locks { pthread_mutex_lock(l.mutex) }
    }

    private static func parent() {
        for l in locks.reversed() { pthread_mutex_unlock(l.mutex) }
        pthread_mutex_unlock(registry)
    }

    private static func child() {
        for l in locks.reversed() {
            l.resetInChild()
            pthread_mutex_unlock(l.mutex)
        }
        pthread_mutex_unlock(registry)
    }
}
