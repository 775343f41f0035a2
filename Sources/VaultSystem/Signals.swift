internal import Glibc

/// A signal number, named.
public struct Signal: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The signal number.
    public let rawValue: Int32
    /// The signal numbered `rawValue`.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// `SIGINT` (Ctrl-C).
    public static let interrupt = Signal(rawValue: SIGINT)
    /// `SIGTERM`.
    public static let terminate = Signal(rawValue: SIGTERM)
    /// `SIGHUP` (the terminal went away).
    public static let hangUp = Signal(rawValue: SIGHUP)
    /// `SIGKILL`.
    public static let kill = Signal(rawValue: SIGKILL)
    /// `SIGQUIT`.
    public static let quit = Signal(rawValue: SIGQUIT)
    /// `SIGPIPE` (a write to a pipe nobody reads).
    public static let brokenPipe = Signal(rawValue: SIGPIPE)
    /// `SIGWINCH` (the terminal's size changed).
    public static let windowChange = Signal(rawValue: SIGWINCH)
    /// `SIGCHLD`.
    public static let childStatus = Signal(rawValue: SIGCHLD)
    /// `SIGUSR1`.
    public static let user1 = Signal(rawValue: SIGUSR1)

    /// `SIGTERM`-style name without the prefix, e.g. `TERM`, or the number.
    public var description: String {
        switch rawValue {
        case SIGINT: "INT"
        case SIGTERM: "TERM"
        case SIGHUP: "HUP"
        case SIGKILL: "KILL"
        case SIGQUIT: "QUIT"
        case SIGPIPE: "PIPE"
        case SIGWINCH: "WINCH"
        case SIGCHLD: "CHLD"
        case SIGUSR1: "USR1"
        default: "\(rawValue)"
        }
    }

    /// Whether this process ignores the signal (`SIG_IGN`, e.g. `SIGHUP` under `nohup`).
    public var isIgnored: Bool {
        var current = sigaction()
        sigaction(rawValue, nil, &current)
        return current.__sigaction_handler.sa_handler.map { unsafeBitCast($0, to: Int.self) == 1 } ?? false
    }

    /// Sends the signal to process `pid`.
    /// - Throws: ``SystemError`` for `kill` (`ESRCH` when it is gone).
    public func send(to pid: Int32) throws(SystemError) {
        let number = rawValue
        try syscall("kill", path: "pid \(pid)") { Glibc.kill(pid, number) }
    }

    /// Unblocks `signals` in this thread's mask (a parent may have started us with them blocked).
    public static func unblock(_ signals: [Signal]) {
        var set = sigset_t()
        sigemptyset(&set)
        for s in signals { sigaddset(&set, s.rawValue) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }
}

/// A signal's disposition as it was, to put back later (``restore()``).
public final class SavedSignalAction {
    private let signal: Int32
    private var action: sigaction

    init(_ signal: Int32, _ action: sigaction) {
        self.signal = signal
        self.action = action
    }

    /// Puts the saved disposition back.
    public func restore() {
        sigaction(signal, &action, nil)
    }
}

/// Ignores `SIGPIPE` process-wide: a write to a closed pipe then fails with `EPIPE`
/// (``SystemError/isBrokenPipe``) instead of killing the process. Child programs started by
/// ``ChildProcess`` get the default disposition back.
/// - Returns: the previous disposition.
@discardableResult
public func ignoreBrokenPipe() -> SavedSignalAction {
    var ignore = sigaction()
    ignore.__sigaction_handler.sa_handler = SIG_IGN
    sigemptyset(&ignore.sa_mask)
    var old = sigaction()
    sigaction(SIGPIPE, &ignore, &old)
    return SavedSignalAction(SIGPIPE, old)
}

// MARK: - Ctrl-C

nonisolated(unsafe) private var interruptFlag: sig_atomic_t = 0
nonisolated(unsafe) private var interruptCallback: (@convention(c) () -> Void)?

/// The process's SIGINT handling: the handler sets a flag (``requested``) that prompts and scans
/// poll, and calls an optional async-signal-safe hook (to cancel a running scan).
public enum Interrupts {
    /// Installs the SIGINT handler (no `SA_RESTART`: a blocking read ends with `EINTR`, so the
    /// reader can look at the flag) and unblocks SIGINT, which a parent may have blocked.
    /// - Parameter onInterrupt: called from the handler: async-signal-safe work only.
    public static func install(onInterrupt: (@convention(c) () -> Void)? = nil) {
        interruptCallback = onInterrupt
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in
            interruptFlag = 1
            interruptCallback?()
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        sigaction(SIGINT, &action, nil)
        Signal.unblock([.interrupt])
    }

    /// Whether Ctrl-C (SIGINT) came since the handler was installed or the flag was cleared.
    public static var requested: Bool {
        get { interruptFlag != 0 }
        set { interruptFlag = newValue ? 1 : 0 }
    }

    /// The hook the handler calls after setting the flag (replaceable while running).
    public static var hook: (@convention(c) () -> Void)? {
        get { interruptCallback }
        set { interruptCallback = newValue }
    }
}

// MARK: - forwarding to a child

nonisolated(unsafe) private var signalChild: pid_t = 0
nonisolated(unsafe) private var signalSkipKernel: sig_atomic_t = 0
/// A signal that came before the child's pid was known.
nonisolated(unsafe) private var signalPending: sig_atomic_t = 0
nonisolated(unsafe) private var windowChanged: sig_atomic_t = 0

/// While a child runs: SIGINT, SIGTERM and SIGHUP sent to this process go on to the child (and
/// SIGWINCH is noted, for a pseudo-terminal). ``restore()`` puts the previous handlers and mask
/// back. One at a time per process.
public final class SignalForwarding {
    /// The signals `run` and `login` pass on to the child, unless ignored when we started.
    public static let candidates: [Signal] = [.interrupt, .terminate, .hangUp]

    /// The signals that are forwarded: the ``candidates`` this process did not ignore (a signal
    /// ignored when we started, as under `nohup`, stays ignored, for us and for the child).
    public private(set) var forwarded: [Signal] = []
    private var saved: [SavedSignalAction] = []
    private var savedMask = sigset_t()
    private var restored = false

    /// Starts forwarding.
    /// - Parameter skipKernelSent: ignore signals the kernel sent (`SI_KERNEL`, e.g. Ctrl-C on
    ///   the terminal), because the child, in our process group, got its own copy.
    public init(skipKernelSent: Bool) {
        signalChild = 0
        signalPending = 0
        windowChanged = 0
        signalSkipKernel = skipKernelSent ? 1 : 0
        var action = sigaction()
        action.__sigaction_handler.sa_sigaction = { sig, info, _ in
            // Only async-signal-safe work: kill(2) and flag stores.
            if signalSkipKernel != 0, let info, info.pointee.si_code == SI_KERNEL { return }
            let pid = signalChild
            if pid > 0 { kill(pid, sig) } else { signalPending = sig }
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_SIGINFO
        for s in SignalForwarding.candidates {
            var old = sigaction()
            sigaction(s.rawValue, nil, &old)
            if let h = old.__sigaction_handler.sa_handler, unsafeBitCast(h, to: Int.self) == 1 { continue }
            sigaction(s.rawValue, &action, nil)
            saved.append(SavedSignalAction(s.rawValue, old))
            forwarded.append(s)
        }
        var winch = sigaction()
        winch.__sigaction_handler.sa_handler = { _ in windowChanged = 1 }
        sigemptyset(&winch.sa_mask)
        winch.sa_flags = SA_RESTART
        var old = sigaction()
        sigaction(SIGWINCH, &winch, &old)
        saved.append(SavedSignalAction(SIGWINCH, old))
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for s in SignalForwarding.candidates + [.windowChange] { sigaddset(&unblock, s.rawValue) }
        pthread_sigmask(SIG_UNBLOCK, &unblock, &savedMask)
    }

    deinit { restore() }

    /// From now on signals go to `pid`; one that came early is delivered now.
    public func attach(_ pid: Int32) {
        signalChild = pid
        let early = signalPending
        if early != 0 {
            signalPending = 0
            kill(pid, early)
        }
    }

    /// Whether SIGWINCH came since the last call.
    public func takeWindowChange() -> Bool {
        guard windowChanged != 0 else { return false }
        windowChanged = 0
        return true
    }

    /// Puts the previous handlers and signal mask back (once; later calls do nothing).
    public func restore() {
        guard !restored else { return }
        restored = true
        signalChild = 0
        for s in saved { s.restore() }
        saved.removeAll()
        pthread_sigmask(SIG_SETMASK, &savedMask, nil)
    }
}
