import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// Shows the person that a touch is awaited, where they look: on the requesting program's
/// terminal and, through `notifier` (the desktop's notifications: `vault-ssh-agent` passes
/// VaultDBus's, so GDBus is linked into that program alone), on the desktop. The text names the
/// key, the program chain and the destination; the parts a peer chose (program names, a user
/// name) are shown as plain text, control characters replaced, bounded.
public struct TouchPrompt: Sendable {
    /// Shows a desktop notification (summary, body) with the agent's environment (which bus);
    /// returns what takes it down once the match is over.
    public typealias Notifier = @Sendable (_ summary: String, _ body: String, _ environment: [String: String]) -> (@Sendable () -> Void)

    /// The longest prompt shown.
    static let limit = 512

    let notifier: Notifier?
    let environment: [String: String]

    /// Prompts through `notifier` (nil: the terminal alone) on the bus `environment` names.
    public init(notifier: Notifier?, environment: [String: String]) {
        self.notifier = notifier
        self.environment = environment
    }

    /// Shows `prompt` for `requester`: a line on its terminal, a notification on the desktop
    /// (sent on a thread of its own, so a slow bus never delays the scan). Returns what takes
    /// the notification down once the match is over. Never blocks on the terminal.
    func show(_ prompt: String, requester: RequestingProgram, log: (@Sendable (String) -> Void)?) -> @Sendable () -> Void {
        let text = Self.plain(prompt) + ": touch the fingerprint reader"
        if let tty = requester.promptTerminal, Self.write(text, toTerminal: tty) {
            log?("prompted on \(Self.path(ofTerminal: tty) ?? "a terminal")")
        }
        guard let notifier else { return {} }
        let shown = Shown()
        let environment = self.environment
        // Without a thread to show it (the thread limit), the terminal prompt is all there is.
        try? Threads.detach { shown.set(notifier("Touch the fingerprint reader", text, environment)) }
        return { shown.end() }
    }

    /// A notification being sent: taken down when the match ends, whichever comes first.
    private final class Shown: @unchecked Sendable {
        private let lock = ThreadLock()
        private var close: (@Sendable () -> Void)?
        private var ended = false
        func set(_ c: @escaping @Sendable () -> Void) {
            let now: Bool = lock.withLock {
                if ended { return true }
                close = c
                return false
            }
            if now { c() }
        }
        func end() {
            let c: (@Sendable () -> Void)? = lock.withLock {
                ended = true
                defer { close = nil }
                return close
            }
            c?()
        }
    }

    /// `text` with every control character (C0, DEL, C1) as `?`, at most `limit` characters
    /// (``limit`` unless told); a text cut short ends in `…`.
    static func plain(_ text: String, limit: Int = limit) -> String {
        var out = String.UnicodeScalarView()
        var count = 0
        for scalar in text.unicodeScalars {
            guard count < limit else {
                if !out.isEmpty { out.removeLast() }
                out.append("…")
                break
            }
            let v = scalar.value
            out.append(v < 0x20 || (0x7f...0x9f).contains(v) ? "?" : scalar)
            count += 1
        }
        return String(out)
    }

    /// The device path of `/proc/PID/stat`'s `tty_nr`: a pseudo-terminal (majors 136-143,
    /// `/dev/pts/N`) or a virtual console (major 4, minors 1-63, `/dev/ttyN`); nil for others.
    static func path(ofTerminal tty: Int32) -> String? {
        let n = UInt32(bitPattern: tty)
        let major = (n >> 8) & 0xfff, minor = (n & 0xff) | ((n >> 12) & 0xfff00)
        switch major {
        case 136...143: return "/dev/pts/\((major - 136) * 256 + minor)"
        case 4 where (1...63).contains(minor): return "/dev/tty\(minor)"
        default: return nil
        }
    }

    /// Writes `text` as one line on the terminal `tty`, opened write-only, never as a controlling
    /// terminal, without following a link and without blocking, only when it is a character
    /// device owned by the agent's own uid (the requester's: `SO_PEERCRED` admitted only it). A
    /// terminal in raw mode (an ssh session) gets `\r\n`. One `write(2)`, never a wait: a
    /// terminal that takes nothing now (stopped with Ctrl-S, a pty master nobody reads) loses
    /// the line, or its tail. False when not all of it was written.
    static func write(_ text: String, toTerminal tty: Int32) -> Bool {
        guard let path = path(ofTerminal: tty),
              var fd = try? FileDescriptor.open(path, .writeOnly, options: [.noControllingTerminal, .nonBlocking, .noFollow]) else { return false }
        defer { try? fd.close() }
        guard let status = try? fd.status(), status.kind == .characterDevice, status.owner == ProcessIdentity.uid,
              isTerminal(fd.rawValue) else { return false }
        let line = Array(("\r\nvault: " + text + "\r\n").utf8)
        return (try? fd.writeSome(line)) == line.count
    }
}
