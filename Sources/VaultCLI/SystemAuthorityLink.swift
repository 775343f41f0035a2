import FoundationEssentials
import VaultAuthority
import VaultKit
import VaultSystem

/// The CLI's link to the system key authority (`vault-authd`): the daemon scans, the CLI shows
/// its prompts and progress and watches the keyboard (Enter chooses the passcode, Ctrl-C
/// cancels), as it does for the embedded authority's reader.
enum SystemAuthorityLink {
    /// Whether a `vault-authd` answers at `socket` as the `vault-auth` user.
    static func answers(_ socket: String) -> Bool {
        FileSystem.exists(socket) && SystemKeyAuthority.probe(socketPath: socket)
    }

    /// A client of the daemon at `socket`.
    /// - Throws: `.biometryNotAvailable` naming the socket when it does not answer.
    static func connect(_ socket: String, _ inv: Invocation, _ ctx: CommandContext, timeout: Double, interactive: Bool) throws -> any KeyAuthority {
        guard answers(socket) else {
            throw VaultError.biometryNotAvailable("the system key authority (vault-authd) does not answer at \(socket)")
        }
        let tty = interactive ? ctx.terminal.inputFD : -1
        let interrupted = ctx.interrupted
        // As at the embedded reader: the line typed (echo is off, see Auth.quietTerminal) ends the
        // scan; Enter alone asks for the passcode, text and Enter is the passcode.
        let offers = ctx.scanOffersPasscode, typed = ctx.typedPasscode, say = Unchecked(value: ctx.stderr)
        let shown = ShownPrompt()
        let control = ScanControl(watch: { purpose in
            if interrupted() { return .user }
            // Ctrl-Z, then `fg`: the touch prompt again (echo is off again, TerminalSuspension).
            if let line = shown.againAfterContinue() { say.value.write(line) }
            if purpose == .match, tty >= 0, (try? Poll.isReadable(tty, timeoutMilliseconds: 0)) == true {
                guard let line = try? SecretLine.read(fd: tty) else { return nil }
                guard offers else {
                    say.value.write("vault: only a finger is accepted here: touch the reader (Ctrl-C cancels)\n")
                    return nil
                }
                if line.count > 0 { typed.keep(line) }
                return .fallback
            }
            return nil
        })
        let stderr = ctx.stderr, line = ProgressLine(ctx, everyStep: true)
        return SystemKeyAuthority(socketPath: socket, scanTimeout: timeout, control: control, notices: { notice in
            switch notice {
            case .touchReader(let prompt):
                let line = "vault: " + prompt + (interactive && offers ? " (or press Enter for the passcode)" : "") + "\n"
                shown.set(line)
                stderr.write(line)
            case .enrolling(let finger, let reader, let stages):
                stderr.write("vault: enrolling \(finger) on \(reader): touch the reader \(stages) times\n")
            case .enrollProgress(let done, let total, let advice):
                let note = "- " + (advice ?? (done < total ? "lift and touch again" : "done"))
                if interactive { line.draw(done, of: total, note) }
                else { stderr.write("vault: enrol " + Style.plain.progress(done, of: total, note) + "\n") }
            case .waitingForReader:
                stderr.write("vault: waiting for the fingerprint reader (in use by another request)\n")
            }
        })
    }
}

/// The last touch prompt of a scan the daemon runs, shown again when the process was stopped
/// (Ctrl-Z) and continued in the foreground meanwhile.
final class ShownPrompt: @unchecked Sendable {
    private let lock = ThreadLock()
    private var line: String?
    private var continued = TerminalSuspension.continuations

    /// `line` is on the screen now (a continuation from here on shows it again).
    func set(_ line: String) {
        lock.withLock {
            self.line = line
            continued = TerminalSuspension.continuations
        }
    }

    /// The line to show again, once per continuation.
    func againAfterContinue() -> String? {
        lock.withLock {
            let now = TerminalSuspension.continuations
            guard now != continued else { return nil }
            continued = now
            return line
        }
    }
}
