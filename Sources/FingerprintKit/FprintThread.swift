internal import CFprint
internal import Dispatch
internal import Glibc
internal import Synchronization

/// The one thread of the process that calls libfprint.
///
/// libfprint's `*_sync` calls iterate GLib's global default main context; two threads doing that
/// deadlock, so every libfprint call is a job run here. Between jobs the thread keeps iterating the
/// default context, so open devices stay responsive while no scan runs: the virtual drivers accept
/// socket commands (`LIST`, `INSERT`, `SET_KEEP_ALIVE`) and hot-plug events arrive. A thread-default
/// context is never pushed, and nothing else in the process may iterate the default context.
final class FprintThread: Sendable {
    private let queue: JobQueue
    private let threadID: pthread_t

    init() {
        let queue = JobQueue()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        // bozorth3 matching runs on this thread; give it the stack a main thread would have.
        pthread_attr_setstacksize(&attributes, 8 << 20)
        var thread = pthread_t()
        let argument = Unmanaged.passRetained(queue).toOpaque()
        let created = pthread_create(&thread, &attributes, { argument in
            Unmanaged<JobQueue>.fromOpaque(argument!).takeRetainedValue().runForever()
        }, argument)
        pthread_attr_destroy(&attributes)
        precondition(created == 0, "cannot start the libfprint thread (error \(created))")
        self.queue = queue
        self.threadID = thread
    }

    /// Whether the caller is on the libfprint thread.
    var isCurrent: Bool { pthread_equal(pthread_self(), threadID) != 0 }

    /// Runs `body` on the libfprint thread and waits for it; runs it in place when already there.
    func run<T>(_ body: () throws(FingerprintError) -> T) throws(FingerprintError) -> T {
        if isCurrent { return try body() }
        let result = withoutActuallyEscaping(body) { escapable -> Result<T, FingerprintError> in
            let job = Job(escapable)
            queue.submit(job.execute)
            job.done.wait()
            return job.result!
        }
        return try result.get()
    }

    /// Runs `body` on the libfprint thread later, without waiting (for releasing GObjects in `deinit`).
    func async(_ body: @escaping @Sendable () -> Void) {
        if isCurrent {
            body()
        } else {
            queue.submit(body)
        }
    }
}

/// One synchronous job: the body, its result, and a semaphore the caller waits on.
/// `@unchecked` because the body is non-escaping in disguise: the caller blocks until it has run,
/// and the job drops the body before signalling, so nothing keeps it past the caller's frame.
private final class Job<T>: @unchecked Sendable {
    private var body: (() throws(FingerprintError) -> T)?
    var result: Result<T, FingerprintError>?
    let done = DispatchSemaphore(value: 0)

    init(_ body: @escaping () throws(FingerprintError) -> T) { self.body = body }

    @Sendable func execute() {
        result = takeAndRun()
        done.signal()
    }

    /// A function of its own so that the body's last reference ends before the caller is woken.
    private func takeAndRun() -> Result<T, FingerprintError>? {
        guard let body else { return nil }
        self.body = nil
        do throws(FingerprintError) {
            return .success(try body())
        } catch {
            return .failure(error)
        }
    }
}

/// The jobs waiting for the libfprint thread, and that thread's loop.
private final class JobQueue: Sendable {
    private let jobs = Mutex<[@Sendable () -> Void]>([])

    func submit(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
        // The wake-up is an eventfd that stays readable until the loop polls it, so a job submitted
        // just before the loop blocks is not missed.
        g_main_context_wakeup(nil)
    }

    func runForever() -> Never {
        while true {
            let pending = jobs.withLock { jobs in
                defer { jobs.removeAll() }
                return jobs
            }
            if pending.isEmpty {
                g_main_context_iteration(nil, 1)
            } else {
                for job in pending { job() }
            }
        }
    }
}
