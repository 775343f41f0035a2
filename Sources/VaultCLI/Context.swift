import FoundationEssentials
public import VaultKit
public import VaultSystem

/// Why a sink stopped writing: a write failed (a full disk, a closed pipe), or the guarded memory
/// a secret's output was assembled in could not grow.
public enum SinkFailure: Error, Sendable {
    /// `write(2)` failed.
    case write(SystemError)
    /// Guarded memory ran out before the output was whole: nothing of it was written.
    case outOfMemory

    /// The reason, one lowercase line.
    public var reason: String {
        switch self {
        case .write(let e): e.reason
        case .outOfMemory: "out of guarded memory for the output"
        }
    }

    /// Whether the reader closed its end (`EPIPE`): `vault export | head` is not an error of ours.
    public var isBrokenPipe: Bool {
        if case .write(let e) = self { return e.isBrokenPipe }
        return false
    }
}

/// Where a command writes text. Files in production, buffers in tests.
public protocol TextSink: AnyObject {
    /// Writes `text` as is.
    func write(_ text: String)
    /// The first write that failed (a full disk, a closed pipe), or nil.
    var failure: SinkFailure? { get }
    /// Whether a person's terminal shows what is written (control characters are then escaped).
    var isTerminal: Bool { get }
    /// Writes a secret as is, from guarded memory (a terminal gets it with control characters
    /// escaped, as `write` of `terminalSafe` text).
    func writeSecret(_ secret: borrowing SecretBytes)
    /// Writes output assembled in guarded memory as it is (a protocol answer, JSON, a page with
    /// secrets: whoever assembled it escaped it for a terminal when it had to).
    func writeSecret(_ output: SecretOutput)
}

extension TextSink {
    /// Sinks that are not descriptors (buffers in tests) get the secret as text.
    public func writeSecret(_ secret: borrowing SecretBytes) {
        write(terminalSafe(secret.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }, onTerminal: isTerminal))
    }

    /// Sinks that are not descriptors (buffers in tests) get the output as text.
    public func writeSecret(_ output: SecretOutput) {
        guard let text = try? output.withUnsafeBytes({ String(decoding: $0, as: UTF8.self) }) else { return }
        write(text)
    }

    /// Sinks that cannot fail.
    public var failure: SinkFailure? { nil }
    /// Sinks that are not terminals.
    public var isTerminal: Bool { false }
}

/// Text from an item (an imported one, too) made safe for a terminal: control characters (C0
/// but newline and tab, DEL, C1) become visible `\xNN` escapes, so a value cannot move the cursor,
/// set the title or write the clipboard (OSC 52). Unchanged when `onTerminal` is false. `oneLine`
/// escapes newline and tab too: for a peer's text inside one line of a report (doctor's).
func terminalSafe(_ text: String, onTerminal: Bool, oneLine: Bool = false) -> String {
    guard onTerminal else { return text }
    var out = ""
    for scalar in text.unicodeScalars {
        let v = scalar.value
        if (v < 0x20 && (oneLine || (v != 0x0A && v != 0x09))) || v == 0x7F || (0x80...0x9F).contains(v) {
            out += "\\x" + String(v, radix: 16).leftPadded(to: 2)
        } else {
            out.unicodeScalars.append(scalar)
        }
    }
    return out
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

/// A sink on a file descriptor; writes loop until every byte is out. A write that fails (a full
/// disk, a closed pipe) is not dropped: the first failure is kept in ``failure`` for `main` to
/// report (exit 6, naming "standard output"), and nothing more is written after it.
public final class FileSink: TextSink {
    let fd: Int32
    let label: String?
    /// The first write that failed, or nil while every byte went out.
    public private(set) var failure: SinkFailure?

    /// A sink writing to `fd`; errors name it `label` (default: "standard output" for 1,
    /// "standard error" for 2, else "fd N").
    public init(fd: Int32, label: String? = nil) {
        self.fd = fd
        self.label = label
    }

    /// Whether the descriptor is a terminal.
    public var isTerminal: Bool { VaultSystem.isTerminal(fd) }

    /// Writes a secret straight from its guarded memory with write(2): it never becomes a
    /// String or an ordinary buffer on its way out (a terminal gets the escaped text instead).
    public func writeSecret(_ secret: borrowing SecretBytes) {
        guard failure == nil else { return }
        if isTerminal {
            // Escaped byte by byte into guarded memory: no String on a terminal either.
            guard let escaped = try? SecretOutput(capacity: secret.count * 2) else { return }
            secret.withUnsafeBytes { escaped.appendTerminalSafe($0) }
            writeSecret(escaped)
            return
        }
        secret.withUnsafeBytes { write(bytes: $0) }
    }

    /// Writes output assembled in guarded memory straight from there with write(2).
    public func writeSecret(_ output: SecretOutput) {
        guard failure == nil else { return }
        do {
            try output.withUnsafeBytes { write(bytes: $0) }
        } catch {
            failure = .outOfMemory
        }
    }

    /// Writes all of `text`, unless an earlier write failed.
    public func write(_ text: String) {
        guard failure == nil else { return }
        var bytes = Array(text.utf8)
        defer { wipe(&bytes) }
        do {
            try writeAll(fd: fd, bytes: bytes, label: label)
        } catch {
            failure = .write(error)
        }
    }
}

extension FileSink {
    /// Writes bytes as they are (a child's output, a rendered template: not necessarily UTF-8),
    /// unless an earlier write failed.
    func write(bytes: UnsafeRawBufferPointer) {
        guard failure == nil, !bytes.isEmpty else { return }
        do {
            try writeAll(fd: fd, bytes: bytes, label: label)
        } catch {
            failure = .write(error)
        }
    }
}

/// Writes bytes to `sink`: as they are to a descriptor, decoded as UTF-8 to any other sink.
func writeBytes(_ bytes: UnsafeRawBufferPointer, to sink: any TextSink) {
    if let f = sink as? FileSink { f.write(bytes: bytes) } else { sink.write(String(decoding: bytes, as: UTF8.self)) }
}

/// A sink that keeps what it is given (tests).
public final class BufferSink: TextSink {
    /// Everything written so far.
    public private(set) var text = ""
    /// An empty buffer.
    public init() {}
    /// Appends `text`.
    public func write(_ text: String) { self.text += text }
}

/// Everything a command may touch of the outside world, injected so commands run in-process in tests.
public final class CommandContext {
    /// Output a script reads: only results, never prompts.
    public let stdout: any TextSink
    /// Messages, errors and, when there is no terminal, progress.
    public let stderr: any TextSink
    /// The environment (`VAULT_HOME`, `VAULT_NAME`, `XDG_*`).
    public let environment: [String: String]
    /// The keyboard, when there is one.
    public let terminal: any Terminal
    /// Standard input, read for `--password-stdin` and the credential helpers.
    public let stdinFD: Int32
    /// The time, in whole seconds since 1970 (the key authority's clock, the audit log's).
    public let clock: @Sendable () -> Int64
    /// Whether Ctrl-C was pressed (a prompt or scan in progress then ends as "cancelled").
    public let interrupted: @Sendable () -> Bool
    /// When this command last had a fingerprint match verified, per vault (database path): a
    /// later fresh match of the same command asks the authority to reuse it (`vault run` with
    /// several fingerprint-login items touches once). The authority answers from its own record.
    var freshMatchTimes: [String: Int64] = [:]
    /// The vault a write command opened in this process (no session), kept until the write is
    /// committed so that, with `--auto`, its change is committed to the sync repository at once
    /// (`SyncCommands.afterWrite`, which lets it go).
    var writeVault: UnlockedVault?

    /// A context over the given streams.
    public init(stdout: any TextSink, stderr: any TextSink, environment: [String: String],
                terminal: any Terminal, stdinFD: Int32 = 0, clock: @escaping @Sendable () -> Int64 = { unixNow() },
                interrupted: @escaping @Sendable () -> Bool = { Interrupts.requested }) {
        self.stdout = stdout
        self.stderr = stderr
        self.environment = environment
        self.terminal = terminal
        self.stdinFD = stdinFD
        self.clock = clock
        self.interrupted = interrupted
    }

    /// The real process: fd 1, fd 2, the process environment, /dev/tty.
    public static func process() -> CommandContext {
        CommandContext(stdout: FileSink(fd: 1), stderr: FileSink(fd: 2),
                       environment: processEnvironment(), terminal: ControllingTerminal())
    }

    /// `--no-color` was given.
    public var noColor = false
    /// A passcode typed at the fingerprint prompt (with echo off), kept until the passcode is asked for.
    let typedPasscode = TypedPasscode()
    /// Whether a scan now may end in the passcode (Enter, or a passcode typed at its prompt): not
    /// for the fresh touch fingerprint login demands, nor during an enrolment.
    var scanOffersPasscode = true

    /// Prints a line for people on stderr: `vault: ...` (the prefix is added when missing), with
    /// its label coloured on a terminal.
    func say(_ text: String) {
        let lead = text.prefix { $0 == "\r" || $0 == "\n" }
        var body = String(text.dropFirst(lead.count))
        if !body.hasPrefix("vault: ") { body = "vault: " + body }
        if stderr.isTerminal { terminal.endLine() }
        stderr.write(String(lead) + Style.of(stderr, self).line(body) + "\n")
    }
}

/// The passcode a person typed at the fingerprint prompt instead of touching the reader (kept by
/// the keyboard watch, which may run on another thread than the one asking for it).
final class TypedPasscode: @unchecked Sendable {
    private var value: SecretBytes?
    private let lock = ThreadLock()

    /// Keeps `secret` for the next passcode request.
    func keep(_ secret: consuming SecretBytes) {
        lock.lock()
        value = .some(secret)
        lock.unlock()
    }

    /// The kept passcode, once.
    func take() -> SecretBytes? {
        lock.lock()
        defer { lock.unlock() }
        return value.take()
    }
}

/// The user's terminal: prompts go to it, never to stdout.
public protocol Terminal: AnyObject {
    /// Whether a person can be asked (a controlling terminal is open).
    var isAvailable: Bool { get }
    /// Asks for a secret with echo off; nil at end of input.
    func readSecret(prompt: String) throws -> SecretBytes?
    /// Asks for a line with echo on; nil at end of input.
    func readLine(prompt: String) -> String?
    /// Writes to the terminal (progress bars, narration).
    func write(_ text: String)
    /// The descriptor to watch for a key press during a scan, or -1.
    var inputFD: Int32 { get }
    /// Ends a line left open by a prompt or a progress bar, so the next line starts in column 0.
    func endLine()
}

extension Terminal {
    /// Terminals that track no lines.
    public func endLine() {}
}

/// The controlling terminal (`/dev/tty`), opened lazily.
public final class ControllingTerminal: Terminal {
    private var opened: Int32?
    /// Whether the last text written left a line open (no newline at its end).
    private var lineOpen = false

    /// A handle on /dev/tty.
    public init() {}
    deinit {
        if let opened, opened >= 0 { _ = FileDescriptor(owning: opened) }
    }

    private var fd: Int32 {
        if let opened { return opened }
        var tty = try? FileDescriptor.open("/dev/tty", .readWrite, options: [.noControllingTerminal])
        let raw = tty?.take() ?? -1
        opened = raw
        return raw
    }

    /// The terminal's descriptor, or -1.
    public var inputFD: Int32 { isAvailable ? fd : -1 }

    /// Whether /dev/tty opened.
    public var isAvailable: Bool { fd >= 0 && isTerminal(fd) }

    /// Writes to the terminal (best effort: a terminal that went away has no reader to tell).
    public func write(_ text: String) {
        guard fd >= 0 else { return }
        try? writeAll(fd: fd, bytes: Array(text.utf8), label: "/dev/tty")
        if let last = text.last { lineOpen = last != "\n" }
    }

    /// Writes a newline when a prompt or progress bar left the line open.
    public func endLine() {
        if lineOpen { write("\n") }
    }

    /// Reads a line with echo off; Ctrl-C while echo is off restores the terminal first.
    public func readSecret(prompt: String) throws -> SecretBytes? {
        guard isAvailable else { return nil }
        // Ctrl-Z, then `fg`, once the prompt is out: echo is off again (TerminalSuspension) and
        // the prompt shows again.
        let shown = TerminalSuspension.continuations
        write(prompt)
        let fd = self.fd
        let again = { [self] in write(prompt) }
        guard let line = try TerminalMode.withEchoOff(fd, { try SecretLine.read(fd: fd, onContinue: again, since: shown) }) else { return nil }
        // The terminal echoed the newline (ECHONL): the prompt's line is closed.
        lineOpen = false
        return line
    }

    /// Reads a line with echo on.
    public func readLine(prompt: String) -> String? {
        guard isAvailable else { return nil }
        write(prompt)
        guard let s = try? SecretLine.read(fd: fd) else { return nil }
        lineOpen = false
        return String(decoding: s.exposedBytes(), as: UTF8.self)
    }
}

/// Reads one line from a descriptor straight into guarded memory, byte by byte so nothing past
/// the newline is consumed (the rest of the descriptor stays for the next reader).
enum SecretLine {
    static let limit = 4096

    /// The line without its newline; nil at end of input with nothing read.
    /// - Throws: `.userCancel` after Ctrl-C (the SIGINT handler set VaultSystem's interrupt flag
    ///   and the read was interrupted), `.io` for a failed read, `.usage` for an overlong line.
    /// - Parameter stripCarriageReturn: drop one `\r` before the newline (a CRLF line), as for
    ///   passcodes; false keeps every byte.
    /// - Parameter onContinue: called when the process was stopped (Ctrl-Z) and continued in the
    ///   foreground while waiting (a prompt prints itself again).
    ///   `since`: the continuation count when the prompt was written (default: now).
    static func read(fd: Int32, stripCarriageReturn: Bool = true, onContinue: (() -> Void)? = nil, since: Int? = nil) throws -> SecretBytes? {
        let buffer = try SecretBytes(zeroed: limit)
        var count = 0
        var sawAny = false
        var byte: [UInt8] = [0]
        defer { byte[0] = 0 }
        // On a terminal, Ctrl-C pressed just before the read began must still end it: the
        // read waits in short polls that look at the flag the SIGINT handler set.
        let watchInterrupts = isTerminal(fd)
        var continued = since ?? TerminalSuspension.continuations
        while true {
            if watchInterrupts {
                if Interrupts.requested { throw VaultError.userCancel }
                if TerminalSuspension.continuations != continued {
                    continued = TerminalSuspension.continuations
                    if count == 0 { onContinue?() }
                }
                if (try? Poll.isReadable(fd, timeoutMilliseconds: 100)) != true { continue }
            }
            let n: Int
            do {
                n = try byte.withUnsafeMutableBytes { try readSome(fd: fd, into: $0, retryOnInterrupt: false) }
            } catch let e as SystemError where e.isInterrupted {
                if Interrupts.requested { throw VaultError.userCancel }
                continue
            } catch let e as SystemError {
                throw VaultError.io(path: "fd \(fd)", e.reason)
            }
            if n == 0 { break }
            sawAny = true
            if byte[0] == 10 { break }
            guard count < limit else { throw VaultError.usage("input line longer than \(limit) bytes") }
            let b = byte[0]
            buffer.withUnsafeMutableBytes { $0[count] = b }
            count += 1
            byte[0] = 0
        }
        if !sawAny { return nil }
        if stripCarriageReturn, count > 0, buffer.withUnsafeBytes({ $0[count - 1] }) == 13 { count -= 1 }
        return try buffer.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }
}
