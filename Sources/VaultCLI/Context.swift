import Foundation
public import VaultKit

/// Where a command writes text. Files in production, buffers in tests.
public protocol TextSink: AnyObject {
    /// Writes `text` as is.
    func write(_ text: String)
}

/// A sink on a file descriptor; writes loop until every byte is out.
public final class FileSink: TextSink {
    let fd: Int32
    /// A sink writing to `fd`.
    public init(fd: Int32) { self.fd = fd }
    /// Writes all of `text`.
    public func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 { if errno == EINTR { continue }; return }
            offset += n
        }
        bytes.removeAll()
    }
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

    /// A context over the given streams.
    public init(stdout: any TextSink, stderr: any TextSink, environment: [String: String],
                terminal: any Terminal, stdinFD: Int32 = 0) {
        self.stdout = stdout
        self.stderr = stderr
        self.environment = environment
        self.terminal = terminal
        self.stdinFD = stdinFD
    }

    /// The real process: fd 1, fd 2, the process environment, /dev/tty.
    public static func process() -> CommandContext {
        CommandContext(stdout: FileSink(fd: 1), stderr: FileSink(fd: 2),
                       environment: ProcessInfo.processInfo.environment, terminal: ControllingTerminal())
    }

    /// Prints `vault: note` lines for people; silent for nothing.
    func say(_ text: String) { stderr.write(text + "\n") }
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
}

/// The controlling terminal (`/dev/tty`), opened lazily.
public final class ControllingTerminal: Terminal {
    private lazy var fd: Int32 = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)

    /// A handle on /dev/tty.
    public init() {}
    deinit { if fd >= 0 { close(fd) } }

    /// The terminal's descriptor, or -1.
    public var inputFD: Int32 { isAvailable ? fd : -1 }

    /// Whether /dev/tty opened.
    public var isAvailable: Bool { fd >= 0 && isatty(fd) == 1 }

    /// Writes to the terminal.
    public func write(_ text: String) {
        guard fd >= 0 else { return }
        FileSink(fd: fd).write(text)
    }

    /// Reads a line with echo off; Ctrl-C while echo is off restores the terminal first.
    public func readSecret(prompt: String) throws -> SecretBytes? {
        guard isAvailable else { return nil }
        write(prompt)
        var old = termios()
        tcgetattr(fd, &old)
        var quiet = old
        quiet.c_lflag &= ~tcflag_t(ECHO)
        quiet.c_lflag |= tcflag_t(ECHONL)
        tcsetattr(fd, TCSAFLUSH, &quiet)
        defer { tcsetattr(fd, TCSAFLUSH, &old) }
        return try SecretLine.read(fd: fd)
    }

    /// Reads a line with echo on.
    public func readLine(prompt: String) -> String? {
        guard isAvailable else { return nil }
        write(prompt)
        guard let s = try? SecretLine.read(fd: fd) else { return nil }
        return String(decoding: s.exposedBytes(), as: UTF8.self)
    }
}

/// Reads one line from a descriptor straight into guarded memory, byte by byte so nothing past
/// the newline is consumed (the rest of the descriptor stays for the next reader).
enum SecretLine {
    static let limit = 4096

    /// The line without its newline; nil at end of input with nothing read.
    static func read(fd: Int32) throws -> SecretBytes? {
        let buffer = try SecretBytes(zeroed: limit)
        var count = 0
        var sawAny = false
        while true {
            var byte: UInt8 = 0
            let n = Glibc.read(fd, &byte, 1)
            if n < 0 {
                // Ctrl-C at a prompt: the handler set the flag and read(2) was interrupted.
                if errno == EINTR { if interruptRequested != 0 { throw VaultError.userCancel }; continue }
                throw VaultError.io(path: "fd \(fd)", String(cString: strerror(errno)))
            }
            if n == 0 { break }
            sawAny = true
            if byte == 10 { break }
            guard count < limit else { throw VaultError.usage("input line longer than \(limit) bytes") }
            buffer.withUnsafeMutableBytes { $0[count] = byte }
            count += 1
            byte = 0
        }
        if !sawAny { return nil }
        if count > 0, buffer.withUnsafeBytes({ $0[count - 1] }) == 13 { count -= 1 }
        return try buffer.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }
}
