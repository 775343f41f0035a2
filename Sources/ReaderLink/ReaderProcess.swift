internal import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// The fingerprint reader in a process of its own: `vault-reader`, started next to the running
/// program when a command first needs the reader (a scan, an enrolment, `doctor`, `status`), and
/// ended when this value goes. Only that child loads libfprint and GLib, so `vault get`, `ls` and
/// the credential helpers start without them.
///
/// The child runs in a session of its own (Ctrl-C at the terminal reaches vault, which sends a
/// `cancel`), with vault's environment (libfprint's `FP_*` variables reach it), talking over a
/// socketpair on its standard input and output; standard error is shared. When vault exits or
/// closes the link, the child sees end of input, cancels what runs and exits.
public final class ReaderProcess: @unchecked Sendable {
    private let child: ChildProcess
    private let wire: ReaderWire
    private let calling = ThreadLock()

    /// The program started: `vault-reader` in the folder of the running executable.
    public static func programPath() -> String {
        return ProcessIdentity.siblingProgram("vault-reader")
    }

    /// Starts `vault-reader` with `environment`.
    /// - Throws: `VaultError.biometryNotAvailable` (15) when it is missing or does not start.
    public init(environment: [String: String]) throws {
        let path = Self.programPath()
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw VaultError.biometryNotAvailable(
                "the fingerprint reader program \(path) is missing: install vault with Vault/install.sh, which puts vault-reader next to vault")
        }
        var pair = try UnixSocket.pair()
        let theirs = pair.second.rawValue
        do {
            child = try ChildProcess.spawn(path: path, arguments: [path], environment: environment,
                                           fileActions: [.dup2(from: theirs, to: 0), .dup2(from: theirs, to: 1)],
                                           newSession: true)
        } catch {
            throw VaultError.biometryNotAvailable("the fingerprint reader program \(path) did not start: \(error.reason)")
        }
        try? pair.second.close()
        wire = ReaderWire(UnixSocket(owning: pair.first.take(), path: "the reader process"))
    }

    deinit {
        // End of input tells the child to stop: it cancels a running scan and exits. A child
        // stuck in the reader's driver gets 2 s, then SIGKILL: vault never hangs on its reader.
        wire.close()
        let end = MonotonicClock.seconds() + 2
        while (try? child.waitNonBlocking()) == nil && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.005) }
        if MonotonicClock.seconds() >= end {
            try? child.send(.kill)
            _ = try? child.wait()
        }
    }

    /// Sends `request` and waits for its final reply; `progress` sees enrolment progress replies.
    /// - Throws: the ``ReaderFault`` of a `failed` reply; `VaultError.biometryNotAvailable` when
    ///   the child is gone or answers nonsense.
    public func call(_ request: ReaderRequest,
                     progress: (_ completed: Int, _ total: Int, _ advice: String?) -> Void = { _, _, _ in }) throws -> ReaderReply {
        try calling.withLock {
            do {
                try wire.send(request)
                while true {
                    guard let reply = try wire.receive(ReaderReply.self) else {
                        throw VaultError.biometryNotAvailable("the fingerprint reader program ended unexpectedly")
                    }
                    switch reply {
                    case .progress(let done, let total, let advice): progress(done, total, advice)
                    case .failed(let fault): throw fault
                    default: return reply
                    }
                }
            } catch let e as ReaderFault {
                throw e
            } catch let e as VaultError {
                throw e
            } catch {
                throw VaultError.biometryNotAvailable("the fingerprint reader program failed: \(error)")
            }
        }
    }

    /// Cancels the running `match` or `enroll` (from another thread than the one in ``call``).
    public func cancel(_ reason: ReaderCancelReason) {
        try? wire.send(ReaderRequest.cancel(reason: reason))
    }

    /// Whether the child is still running (tests).
    public var pid: Int32 { child.pid }
}
