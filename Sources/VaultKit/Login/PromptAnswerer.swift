/// A compiled prompt pattern (Swift's `Regex`, matched case-insensitively on Unicode scalars).
package typealias PromptPattern = Regex<AnyRegexOutput>

/// The decisions of `vault login NAME -- COMMAND`, without any terminal: fed the program's output
/// chunk by chunk (and whether its terminal echoes input), it says what to type now.
///
/// The rules: the username is typed at most once, at its prompt; the password at most once,
/// after its prompt and only once the program has turned echo off, so it never comes back on the
/// screen; a program that leaves echo on past ``echoGrace`` seconds does not get it (``Answer/gaveUp``).
/// Prompts are matched against the output since the last answer, so one split across reads
/// still matches and an answered one never matches again.
package struct PromptAnswerer {
    /// What to do now.
    package enum Answer: Equatable, Sendable {
        /// Type nothing.
        case nothing
        /// Type the username and a newline.
        case username
        /// Type the password and a newline.
        case password
        /// The password prompt came but echo stayed on: the password will not be typed (say so).
        case gaveUp
    }

    /// Matches a username prompt at the end of the output: `login:`, `Username:` (case-insensitive).
    package static let defaultUserPattern = #"(login|username)[^\n:]*:\s*$"#
    /// Matches a password prompt at the end of the output: `Password:`, `Enter passphrase for key:`.
    package static let defaultPasswordPattern = #"(password|passphrase)[^\n]*:\s*$"#
    /// How long to wait, after a password prompt, for the program to turn echo off.
    package static let defaultEchoGrace: Double = 3
    /// Output kept for matching, in bytes.
    package static let window = 4096
    /// How long after the program's first output prompts are answered at all: the login is the
    /// program's authentication step, not anything it prints later.
    package static let defaultAuthenticationWindow: Double = 60

    /// The username prompt.
    package let userPrompt: PromptPattern
    /// The password prompt.
    package let passwordPrompt: PromptPattern
    /// Whether there is a username to type (without one, its prompt is passed over).
    package let hasUsername: Bool
    /// Seconds to wait for echo off after the password prompt.
    package let echoGrace: Double

    private var recent: [UInt8] = []
    private var userAnswered = false
    private var passwordSettled = false
    private var passwordPromptSeen: Double?
    private var started: Double?
    private var ended = false
    /// Seconds after the first output during which prompts are answered.
    package let authenticationWindow: Double

    /// An answerer for these prompts.
    package init(userPrompt: PromptPattern, passwordPrompt: PromptPattern, hasUsername: Bool,
                echoGrace: Double = PromptAnswerer.defaultEchoGrace,
                authenticationWindow: Double = PromptAnswerer.defaultAuthenticationWindow) {
        self.userPrompt = userPrompt
        self.passwordPrompt = passwordPrompt
        self.hasUsername = hasUsername
        self.echoGrace = echoGrace
        self.authenticationWindow = authenticationWindow
    }

    /// Whether anything was typed (or the password question settled by the program's echo).
    package private(set) var typedAnything = false

    /// The program's terminal went raw (not canonical) with no password prompt pending: its
    /// authentication step is over (an interactive session started), and nothing is typed from
    /// now on, whatever it prints.
    package mutating func terminalWentRaw() {
        guard passwordPromptSeen == nil else { return }
        endAuthentication()
    }

    /// Whether the authentication step is over (nothing more will be typed).
    package var isAuthenticationOver: Bool { ended }

    private mutating func endAuthentication() {
        ended = true
        userAnswered = true
        passwordSettled = true
        passwordPromptSeen = nil
        recent.removeAll()
    }

    /// Compiles a prompt pattern, matched case-insensitively.
    /// - Throws: `VaultError.usage` naming `option` when `pattern` is not a regular expression.
    /// The syntax is Swift's `Regex` (PCRE/ICU-like); it matches Unicode scalars, not grapheme
    /// clusters, so `[^\n]` does not swallow a `\r\n` pair.
    package static func compile(_ pattern: String, option: String) throws -> PromptPattern {
        do { return try Regex(pattern).ignoresCase().matchingSemantics(.unicodeScalar) } catch {
            throw VaultError.usage("\(option): '\(pattern)' is not a regular expression")
        }
    }

    /// Whether the password question is settled (typed, or given up): until then input from a
    /// pipe is held back, so the program cannot take it for the password.
    package var isPasswordSettled: Bool { passwordSettled }

    /// Whether a password prompt waits for echo to go off (time matters: check often).
    package var isWaitingForEchoOff: Bool { passwordPromptSeen != nil && !passwordSettled }

    /// The program wrote `chunk`; `echoOn` is its terminal's echo setting now, `now` a time in
    /// seconds (any monotonic origin).
    package mutating func programWrote(_ chunk: some Sequence<UInt8>, echoOn: Bool, now: Double) -> Answer {
        if started == nil { started = now }
        if !ended, let started, now - started > authenticationWindow, passwordPromptSeen == nil { endAuthentication() }
        if ended { return .nothing }
        recent.append(contentsOf: chunk)
        if recent.count > PromptAnswerer.window { recent.removeFirst(recent.count - PromptAnswerer.window) }
        let text = String(decoding: recent, as: UTF8.self)
        if !userAnswered, Self.matches(userPrompt, text) {
            userAnswered = true
            if hasUsername {
                recent.removeAll()
                typedAnything = true
                return .username
            }
        }
        if !passwordSettled, passwordPromptSeen == nil, Self.matches(passwordPrompt, text) {
            passwordPromptSeen = now
            return tick(echoOn: echoOn, now: now)
        }
        return .nothing
    }

    private static func matches(_ pattern: PromptPattern, _ text: String) -> Bool {
        (try? pattern.firstMatch(in: text)) != nil
    }

    /// Time passed (or echo changed) without new output: the password once echo is off after its
    /// prompt, or ``Answer/gaveUp`` after ``echoGrace`` seconds with echo still on.
    package mutating func tick(echoOn: Bool, now: Double) -> Answer {
        guard let since = passwordPromptSeen, !passwordSettled else { return .nothing }
        if !echoOn {
            passwordSettled = true
            passwordPromptSeen = nil
            recent.removeAll()
            typedAnything = true
            return .password
        }
        if now - since > echoGrace {
            passwordSettled = true
            passwordPromptSeen = nil
            return .gaveUp
        }
        return .nothing
    }
}
