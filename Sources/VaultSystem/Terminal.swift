internal import Glibc

/// A terminal's size in character cells.
public struct WindowSize: Equatable, Sendable {
    /// Rows.
    public var rows: UInt16
    /// Columns.
    public var columns: UInt16

    /// A size of `rows` by `columns`.
    public init(rows: UInt16, columns: UInt16) {
        self.rows = rows
        self.columns = columns
    }

    /// The usual default, 24 by 80.
    public static let standard = WindowSize(rows: 24, columns: 80)

    /// The size of the terminal on `fd` (`TIOCGWINSZ`).
    /// - Throws: ``SystemError`` for `ioctl` (`ENOTTY` when it is no terminal).
    public static func get(_ fd: Int32) throws(SystemError) -> WindowSize {
        var size = winsize()
        try syscall("ioctl", path: descriptorLabel(fd)) { ioctl(fd, UInt(TIOCGWINSZ), &size) }
        return WindowSize(rows: size.ws_row, columns: size.ws_col)
    }

    /// Sets the size of the terminal on `fd` (`TIOCSWINSZ`; its foreground group gets SIGWINCH).
    /// - Throws: ``SystemError`` for `ioctl`.
    public func set(_ fd: Int32) throws(SystemError) {
        var size = winsize(ws_row: rows, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0)
        try syscall("ioctl", path: descriptorLabel(fd)) { ioctl(fd, UInt(TIOCSWINSZ), &size) }
    }
}

/// A terminal's settings (`struct termios`), read with ``get(_:)`` and applied with ``set(_:when:)``.
public struct TerminalAttributes: Sendable {
    var raw: termios

    init(raw: termios) { self.raw = raw }

    /// When a change takes effect.
    public enum Timing: Sendable {
        /// At once (`TCSANOW`).
        case now
        /// After pending output is written (`TCSADRAIN`).
        case drain
        /// After pending output is written, discarding unread input (`TCSAFLUSH`).
        case flush

        var value: Int32 {
            switch self {
            case .now: TCSANOW
            case .drain: TCSADRAIN
            case .flush: TCSAFLUSH
            }
        }
    }

    /// The settings of the terminal on `fd`.
    /// - Throws: ``SystemError`` for `tcgetattr` (`ENOTTY` when it is no terminal).
    public static func get(_ fd: Int32) throws(SystemError) -> TerminalAttributes {
        var t = termios()
        try syscall("tcgetattr", path: descriptorLabel(fd)) { tcgetattr(fd, &t) }
        return TerminalAttributes(raw: t)
    }

    /// Applies these settings to the terminal on `fd`.
    /// - Throws: ``SystemError`` for `tcsetattr`.
    public func set(_ fd: Int32, when timing: Timing = .drain) throws(SystemError) {
        var t = raw
        let action = timing.value
        try syscall("tcsetattr", path: descriptorLabel(fd)) { tcsetattr(fd, action, &t) }
    }

    /// Whether typed characters are echoed (`ECHO`).
    public var echo: Bool {
        get { raw.c_lflag & tcflag_t(ECHO) != 0 }
        set { if newValue { raw.c_lflag |= tcflag_t(ECHO) } else { raw.c_lflag &= ~tcflag_t(ECHO) } }
    }

    /// Whether the newline is echoed even with ``echo`` off (`ECHONL`).
    public var echoNewline: Bool {
        get { raw.c_lflag & tcflag_t(ECHONL) != 0 }
        set { if newValue { raw.c_lflag |= tcflag_t(ECHONL) } else { raw.c_lflag &= ~tcflag_t(ECHONL) } }
    }

    /// Whether input is read by lines (`ICANON`).
    public var canonical: Bool { raw.c_lflag & tcflag_t(ICANON) != 0 }

    /// The end-of-file character (`VEOF`, usually Ctrl-D): typed at a line's start, a reader sees end of file.
    public var endOfFile: UInt8 {
        withUnsafeBytes(of: raw.c_cc) { $0[Int(VEOF)] }
    }

    /// These settings in raw mode (`cfmakeraw`): no echo, no line editing, no signal keys.
    public func makingRaw() -> TerminalAttributes {
        var t = raw
        cfmakeraw(&t)
        return TerminalAttributes(raw: t)
    }
}

/// Echo and raw-mode helpers for a terminal descriptor we do not own.
public enum TerminalMode {
    /// Whether the terminal on `fd` echoes input; false when it is no terminal.
    public static func echoIsOn(_ fd: Int32) -> Bool {
        (try? TerminalAttributes.get(fd).echo) ?? false
    }

    /// Runs `body` with echo off (the newline still echoed) on the terminal `fd`, and puts the
    /// settings back afterwards, also when `body` throws (Ctrl-C at a passcode prompt).
    /// - Throws: ``SystemError`` for `tcgetattr`/`tcsetattr`, or what `body` throws.
    public static func withEchoOff<T: ~Copyable>(_ fd: Int32, _ body: () throws -> T) throws -> T {
        let saved = try TerminalAttributes.get(fd)
        var quiet = saved
        quiet.echo = false
        quiet.echoNewline = true
        try quiet.set(fd, when: .flush)
        let hold = TerminalSuspension.Hold(fd, saved: saved, quiet: quiet)
        defer {
            hold.end()
            try? saved.set(fd, when: .flush)
        }
        return try body()
    }

    /// Runs `body` with echo off and the newline not echoed either (a fingerprint prompt, where
    /// nothing typed may show), putting the settings back afterwards with unread keys dropped.
    /// Ctrl-Z and `fg` meanwhile leave echo off (``TerminalSuspension``). Not a terminal: `body`
    /// runs as it is.
    /// - Throws: what `body` throws.
    public static func withSilence<T: ~Copyable>(_ fd: Int32, _ body: () throws -> T) rethrows -> T {
        guard fd >= 0, let saved = try? TerminalAttributes.get(fd) else { return try body() }
        var quiet = saved
        quiet.echo = false
        quiet.echoNewline = false
        try? quiet.set(fd, when: .now)
        let hold = TerminalSuspension.Hold(fd, saved: saved, quiet: quiet)
        defer {
            hold.end()
            try? saved.set(fd, when: .flush)
        }
        return try body()
    }

    /// Runs `body` with the terminal `fd` in raw mode, and puts the settings back afterwards.
    /// - Throws: ``SystemError`` for `tcgetattr`/`tcsetattr`, or what `body` throws.
    public static func withRawMode<T: ~Copyable>(_ fd: Int32, _ body: () throws -> T) throws -> T {
        let saved = try TerminalAttributes.get(fd)
        try saved.makingRaw().set(fd, when: .drain)
        defer { try? saved.set(fd, when: .drain) }
        return try body()
    }
}

/// A pseudo-terminal pair (`openpty`): the master end we read and write, the slave end a child
/// program gets as its terminal. Both close-on-exec; the child reopens the slave by path.
public struct PseudoTerminal: ~Copyable {
    /// The master end.
    public var master: FileDescriptor
    /// The slave end (close ours once the child has it, so the master reads `EIO` at its end).
    public var slave: FileDescriptor
    /// The slave's path (`/dev/pts/N`).
    public let slavePath: String

    /// Opens a pair, with `attributes` and `size` when given (else the kernel's defaults:
    /// canonical, echo, CR-LF on output).
    /// - Throws: ``SystemError`` for `openpty` (path `/dev/ptmx`), `ttyname_r`.
    public static func open(attributes: TerminalAttributes? = nil, size: WindowSize? = nil) throws(SystemError) -> PseudoTerminal {
        var master: Int32 = -1, slave: Int32 = -1
        var t = attributes?.raw ?? termios()
        var ws = winsize(ws_row: size?.rows ?? 0, ws_col: size?.columns ?? 0, ws_xpixel: 0, ws_ypixel: 0)
        let hasAttributes = attributes != nil, hasSize = size != nil
        try syscall("openpty", path: "/dev/ptmx") {
            switch (hasAttributes, hasSize) {
            case (true, true): openpty(&master, &slave, nil, &t, &ws)
            case (true, false): openpty(&master, &slave, nil, &t, nil)
            case (false, true): openpty(&master, &slave, nil, nil, &ws)
            case (false, false): openpty(&master, &slave, nil, nil, nil)
            }
        }
        var masterFD = FileDescriptor(owning: master, label: "/dev/ptmx")
        var slaveFD = FileDescriptor(owning: slave, label: "/dev/pts")
        let m = master, s = slave
        try syscall("fcntl", path: "/dev/ptmx") { fcntl(m, F_SETFD, FD_CLOEXEC) }
        try syscall("fcntl", path: "/dev/pts") { fcntl(s, F_SETFD, FD_CLOEXEC) }
        var name = [CChar](repeating: 0, count: 256)
        let count = name.count
        try syscallReturningCode("ttyname_r", path: "/dev/pts") { ttyname_r(s, &name, count) }
        let path = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return PseudoTerminal(master: FileDescriptor(owning: masterFD.take(), label: "/dev/ptmx"),
                              slave: FileDescriptor(owning: slaveFD.take(), label: path), slavePath: path)
    }

    /// The file actions that make the slave a child's standard input, output and error (and, in
    /// a new session, its controlling terminal).
    public var childFileActions: [FileAction] {
        [.open(0, slavePath, .readWrite), .dup2(from: 0, to: 1), .dup2(from: 0, to: 2)]
    }
}

// MARK: - Ctrl-Z while a secret is read

nonisolated(unsafe) private var quietFD: Int32 = -1
nonisolated(unsafe) private var quietOriginal = termios()
nonisolated(unsafe) private var quietCurrent = termios()
nonisolated(unsafe) private var quietDepth: sig_atomic_t = 0
nonisolated(unsafe) private var continuedCount: sig_atomic_t = 0

/// Ctrl-Z (`SIGTSTP`) and `fg` (`SIGCONT`) while vault holds the terminal quiet (a passcode or
/// secret prompt, the fingerprint prompt), as readpassphrase(3), sudo and ssh handle them: on
/// Ctrl-Z the terminal's settings go back to what they were (the shell gets a sane terminal)
/// and the process stops; when it is continued in the foreground, echo goes off again before
/// anything else is read and ``continuations`` counts one, so the reader prints its prompt again.
/// Without this, whatever the shell left (echo on) stays, and the passcode typed next shows.
public enum TerminalSuspension {
    /// Installs the handlers (once per process), unless `SIGTSTP` is ignored (a shell without
    /// job control): then Ctrl-Z does nothing and nothing needs handling.
    public static func install() {
        guard !Signal(rawValue: SIGTSTP).isIgnored else { return }
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in
            let depth = quietDepth, fd = quietFD
            if depth > 0 && fd >= 0 { tcsetattr(fd, TCSANOW, &quietOriginal) }
            // Stop for real: the default action, delivered at once (unblocked inside this
            // handler); execution goes on here when the process is continued.
            var dfl = sigaction()
            dfl.__sigaction_handler.sa_handler = SIG_DFL
            sigemptyset(&dfl.sa_mask)
            var mine = sigaction()
            sigaction(SIGTSTP, &dfl, &mine)
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, SIGTSTP)
            raise(SIGTSTP)
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            sigaction(SIGTSTP, &mine, nil)
            // An orphaned process group is not stopped: the terminal goes quiet again at once.
            if quietDepth > 0 && quietFD >= 0 && tcgetpgrp(quietFD) == getpgrp() {
                tcsetattr(quietFD, TCSANOW, &quietCurrent)
            }
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(SIGTSTP, &action, nil)
        var resume = sigaction()
        resume.__sigaction_handler.sa_handler = { _ in
            let fd = quietFD
            // Not held quiet (a prompt just written, echo not yet off): only counted.
            guard quietDepth > 0, fd >= 0 else { continuedCount &+= 1; return }
            // Only in the foreground: a `bg` job changing the terminal would be stopped again
            // (SIGTTOU); its `fg` later sends SIGCONT once more.
            guard tcgetpgrp(fd) == getpgrp() else { return }
            tcsetattr(fd, TCSANOW, &quietCurrent)
            continuedCount &+= 1
        }
        sigemptyset(&resume.sa_mask)
        resume.sa_flags = SA_RESTART
        sigaction(SIGCONT, &resume, nil)
        Signal.unblock([Signal(rawValue: SIGTSTP), Signal(rawValue: SIGCONT)])
    }

    /// How many times the process was continued in the foreground while the terminal was held
    /// quiet: a prompt reader that sees it change prints its prompt again.
    public static var continuations: Int { Int(continuedCount) }

    /// The terminal `fd` held quiet (`quiet`, changed from `saved`) until ``end()``; holds nest.
    public struct Hold: Sendable {
        private let previous: termios
        private let previousFD: Int32

        /// Holds `fd` in `quiet`; the outermost hold's `saved` is what Ctrl-Z puts back.
        public init(_ fd: Int32, saved: TerminalAttributes, quiet: TerminalAttributes) {
            previous = quietCurrent
            previousFD = quietFD
            if quietDepth == 0 { quietOriginal = saved.raw }
            quietCurrent = quiet.raw
            quietFD = fd
            quietDepth += 1
        }

        /// Ends the hold: the enclosing one (if any) is in force again.
        public func end() {
            quietDepth -= 1
            quietCurrent = previous
            quietFD = previousFD
        }
    }
}
