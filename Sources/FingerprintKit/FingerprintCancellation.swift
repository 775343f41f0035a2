internal import Synchronization

/// A handle that cancels one fingerprint operation, usable from any thread (a signal-handling thread,
/// a timer, another task). It wraps a `GCancellable` handed to libfprint.
///
/// Use a fresh handle per operation: once cancelled it stays cancelled, and an operation started
/// with it ends at once with the recorded reason.
public final class FingerprintCancellation: Sendable {
    /// Who cancelled, which decides the error the operation ends with.
    public enum Reason: Sendable, Equatable {
        /// The person at the reader (Ctrl-C): ``FingerprintError/cancelled``.
        case user
        /// The program (e.g. `vault lock` during a scan): ``FingerprintError/cancelledByProgram``.
        case program
        /// The operation's timeout: ``FingerprintError/timedOut``.
        case timeout
    }

    let cancellable = GLibCancellable()
    private let recorded = Mutex<Reason?>(nil)

    /// Creates a handle that has not been cancelled.
    public init() {}

    /// Cancels the operation using this handle, now or when it starts. The first reason given wins.
    public func cancel(_ reason: Reason) {
        recorded.withLock { recorded in
            if recorded == nil { recorded = reason }
        }
        cancellable.cancel()
    }

    /// The reason of the first ``cancel(_:)``, or nil while not cancelled.
    public var reason: Reason? { recorded.withLock { $0 } }

    /// The error an operation cancelled through this handle ends with.
    var error: FingerprintError {
        switch reason {
        case .program: .cancelledByProgram
        case .timeout: .timedOut
        case .user, nil: .cancelled
        }
    }
}
