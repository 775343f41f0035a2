import Glibc

// The thread primitives vault's processes use, over pthreads (not Foundation's NSLock,
// NSCondition and Thread, so that no module linked into `vault` needs Foundation).

/// A mutual-exclusion lock (a `pthread_mutex_t` of its own, never moved).
public final class ThreadLock: @unchecked Sendable {
    fileprivate let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    /// An unlocked lock.
    public init() { pthread_mutex_init(mutex, nil) }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Waits for the lock and takes it.
    public func lock() { pthread_mutex_lock(mutex) }

    /// Releases the lock (held by this thread).
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Runs `body` holding the lock.
    public func withLock<R>(_ body: () throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A lock with a condition to wait on (`NSCondition`'s use: lock, test, wait, broadcast).
/// Timed waits measure on the monotonic clock, so a change of the wall clock neither shortens
/// nor stretches them.
public final class ThreadCondition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    /// An unlocked lock with no waiter.
    public init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Takes the lock.
    public func lock() { pthread_mutex_lock(mutex) }

    /// Releases the lock.
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Wakes every waiter (call holding the lock).
    public func broadcast() { pthread_cond_broadcast(condition) }

    /// Wakes one waiter (call holding the lock).
    public func signal() { pthread_cond_signal(condition) }

    /// Releases the lock and waits (holding it again on return) until woken.
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// Releases the lock and waits at most `seconds` (holding it again on return); false when
    /// the time ran out. A wake-up may be spurious: callers test their condition again.
    @discardableResult
    public func wait(seconds: Double) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let whole = seconds.isFinite ? max(0, seconds) : 1e9
        var deadline = now
        deadline.tv_sec += Int(whole)
        deadline.tv_nsec += Int((whole - whole.rounded(.towardZero)) * 1e9)
        if deadline.tv_nsec >= 1_000_000_000 {
            deadline.tv_sec += 1
            deadline.tv_nsec -= 1_000_000_000
        }
        return pthread_cond_timedwait(condition, mutex, &deadline) != ETIMEDOUT
    }
}

/// Threads started detached (`Thread.detachNewThread`).
public enum Threads {
    private final class Start {
        let name: String?
        let body: () -> Void
        init(_ name: String?, _ body: @escaping () -> Void) {
            self.name = name
            self.body = body
        }
    }

    private typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
    /// glibc's `pthread_setname_np` (a GNU extension the Glibc module does not declare).
    private static let setName: SetName? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setname_np")
        .map { unsafeBitCast($0, to: SetName.self) }

    /// Runs `body` on a new detached thread (the default stack, as Foundation's `Thread`), named
    /// `name` (its first 15 bytes, the kernel's bound) when given.
    /// - Throws: ``SystemError`` for `pthread_create` (`EAGAIN` at the process' thread limit).
    public static func detach(name: String? = nil, _ body: @escaping @Sendable () -> Void) throws(SystemError) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let start = Unmanaged.passRetained(Start(name, body)).toOpaque()
        var thread = pthread_t()
        let code = pthread_create(&thread, &attributes, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            if let name = start.name, let setName = Threads.setName {
                _ = setName(pthread_self(), String(decoding: name.utf8.prefix(15), as: UTF8.self))
            }
            start.body()
            return nil
        }, start)
        if code != 0 {
            Unmanaged<Start>.fromOpaque(start).release()
            throw SystemError(call: "pthread_create", path: "", code: code)
        }
    }
}

/// A one-time event one thread fires and another waits for (a `DispatchSemaphore` used once).
public final class ThreadSignal: @unchecked Sendable {
    private let condition = ThreadCondition()
    private var fired = false

    /// An event not fired yet.
    public init() {}

    /// Fires the event, waking every waiter (later waits return at once).
    public func fire() {
        condition.lock()
        fired = true
        condition.broadcast()
        condition.unlock()
    }

    /// Waits at most `seconds` for the event; whether it has fired.
    public func wait(seconds: Double) -> Bool {
        let deadline = MonotonicClock.seconds() + seconds
        condition.lock()
        defer { condition.unlock() }
        while !fired {
            let left = deadline - MonotonicClock.seconds()
            if left <= 0 { return false }
            condition.wait(seconds: left)
        }
        return true
    }
}
