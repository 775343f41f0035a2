import FoundationEssentials
import VaultKit
import VaultSystem

/// `vault login NAME`: the login printed (env, json, netrc), or typed into a command's prompts on
/// a pseudo-terminal.
enum LoginCommand {
    /// The options of `login`, declared once: the table lists them and the command reads them.
    enum LoginOptions {
        static let format = OptionSpec.value("--format", "F", "without a command: env (default, shell 'export' lines), json or netrc")
        static let reuse = OptionSpec.value("--reuse", "SECONDS", "fingerprint login: accept a match made at most this long ago (0-300, default 0)")
        static let userPrompt = OptionSpec.value("--user-prompt", "REGEX", "with a command: the prompt that gets the username (default login:/username:)")
        static let passwordPrompt = OptionSpec.value("--password-prompt", "REGEX", "with a command: the prompt that gets the password (default password:/passphrase:)")
    }

    static let login = CommandSpec(
        name: "login", summary: "print a login (env, json, netrc) or type it into a command's prompts",
        usage: "vault login NAME [--format env|json|netrc] [--reuse SECONDS] [-- COMMAND [ARG...]]",
        options: [
            LoginOptions.format,
            LoginOptions.reuse,
            LoginOptions.userPrompt,
            LoginOptions.passwordPrompt,
        ] + Auth.options,
        arguments: 1...1,
        takesCommand: true,
        examples: """
        eval "$(vault login github)"        # sets VAULT_USERNAME and VAULT_PASSWORD
        vault login github --format netrc > ~/.netrc.d/github
        vault login prod-db -- psql -h db -U admin
        vault login router --user-prompt 'User Name:' -- telnet 192.0.2.1
        """,
        run: { inv, ctx in
            let name = try Item.normalize(name: inv.arguments[0])
            let format = try LoginFormat.parse(inv[LoginOptions.format])
            if inv.has(LoginOptions.format) && !inv.trailing.isEmpty {
                throw VaultError.usage("--format applies only without a command")
            }
            let reuse = try inv.int(LoginOptions.reuse) ?? 0
            guard (0...300).contains(reuse) else { throw VaultError.usage("--reuse must be between 0 and 300 seconds") }
            var prompts = try LoginPrompts(inv)
            let program = inv.trailing.isEmpty ? nil : try ChildProgram(inv, ctx)

            let prompted: PromptedLogin
            do {
                let vault = try openForLogin(name, inv, ctx)
                let overview = try vault.overview(named: name)
                prompts = try LoginPrompts(inv, item: overview.item)
                guard overview.hasPassword else { throw VaultError.failure("item '\(overview.item.name)' has no password") }
                let item = overview.item
                let loginPrompt = { (name: String) in "touch the fingerprint reader to log in to '\(name)'" }
                var token: FreshMatchToken?
                if item.fingerprintLogin {
                    token = try Release.freshMatch(.release(item: item.name), vault, inv, ctx, reuse: reuse, prompt: loginPrompt(item.name))
                } else {
                    try requirePasscode(vault, inv, ctx, item: item.name)
                }
                // The match (or the passcode) was just demanded above; the vault checks the match's
                // token. The password goes from the record into guarded memory, and from there to
                // the output or the terminal. A token that aged out before a program's prompt came
                // is made again from this command's own match.
                let release = { () throws -> SecretBytes in
                    defer { token = nil }
                    return try Release.guarded(vault, inv, ctx, first: token, reuse: reuse, prompt: loginPrompt) {
                        try vault.releaseSecret(named: item.name, field: .password, command: "login", freshMatch: $0)
                    }
                }
                guard program != nil else {
                    let password = try release()
                    ctx.stdout.writeSecret(try format.render(username: item.username, password: password, url: item.urls.first, item: name))
                    return
                }
                // Released (and logged) only when its prompt is answered: a program that never
                // asks gets nothing and the log says nothing was handed out.
                prompted = PromptedLogin(username: item.username, release: { SecretBox(try release()) }, prompts: prompts, ctx: ctx)
            }
            guard let program else { return }
            let status = try prompted.run(program)
            if !prompted.typedAnything {
                ctx.say("vault: warning: no prompt of '\(program.name)' matched; nothing was typed (see --user-prompt and --password-prompt)")
            }
            if !status.isSuccess { throw VaultError.childExited(status: status.shellCode) }
        })

    /// The vault, opened for a login of `name`. Inside an unlock session, the session. Otherwise,
    /// when no item of the vault has fingerprint login on (the rows' login hints say so before
    /// the vault opens), with the passcode straight away: the item's login will need it, so a
    /// touch would only be asked for in vain. Else as every command opens it (a touch first).
    /// The hints choose only what is asked first: the item's sealed flag still decides below.
    static func openForLogin(_ name: String, _ inv: Invocation, _ ctx: CommandContext) throws -> any VaultAccess {
        let loc = try location(inv, ctx)
        if let session = try openSession(loc, inv, ctx) { return session }
        let store = try VaultStore.open(loc)
        if try store.mayHaveFingerprintLogin() { return try Auth.unlock(store, inv, ctx, purpose: "login '\(name)'") }
        return try Auth.unlockWithPasscode(store, inv, ctx, reason: "no item has fingerprint login on; no terminal and no --passcode-fd",
                                           why: "fingerprint login is off")
    }

    /// A login of an item without fingerprint login needs the passcode, even inside an unlock
    /// session. A passcode unlock by this same command counts: with `--passcode-fd` or
    /// `--passcode`, `openAccess` skips the session and unlocks with the passcode.
    static func requirePasscode(_ vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext, item: String) throws {
        if (vault as? UnlockedVault)?.authentication == .passcode { return }
        let store = try VaultStore.open(try location(inv, ctx))
        _ = try Auth.unlockWithPasscode(store, inv, ctx, reason: "'\(item)' has fingerprint login off; no terminal and no --passcode-fd",
                                   why: "'\(item)' has fingerprint login off")
    }
}

// MARK: - printed logins

/// `--format`.
enum LoginFormat: String {
    case env, json, netrc

    static func parse(_ text: String?) throws -> LoginFormat {
        guard let text else { return .env }
        guard let f = LoginFormat(rawValue: text) else {
            throw VaultError.usage("unknown format '\(text)'", hint: "formats: env, json, netrc")
        }
        return f
    }

    /// The login in this format, assembled in guarded memory: the password is copied (quoted
    /// for the shell or netrc, or JSON-escaped) byte by byte from `password`, never a String.
    func render(username: String?, password: borrowing SecretBytes, url: String?, item: String) throws -> SecretOutput {
        let out = try SecretOutput(capacity: password.count * 2 + 128)
        switch self {
        case .env:
            if let u = username { out.append("export VAULT_USERNAME=\(shellQuoted(u))\n") }
            out.append("export VAULT_PASSWORD=")
            password.withUnsafeBytes { appendShellQuoted($0, to: out) }
            out.append("\n")
        case .json:
            let absent: Any = JSONNull()
            password.withUnsafeBytes { p in
                JSONText.append(["username": username.map { $0 as Any } ?? absent, "password": JSONSecret(p),
                                 "url": url.map { $0 as Any } ?? absent], to: out)
            }
            out.append("\n")
        case .netrc:
            guard let url, let host = netrcHost(url) else {
                throw VaultError.failure("item '\(item)' has no URL with a host name for the netrc 'machine'",
                                         hint: "add one: vault edit \(item) --url https://HOST")
            }
            out.append("machine \(netrcToken(host))")
            if let u = username { out.append(" login \(netrcToken(u))") }
            out.append(" password ")
            password.withUnsafeBytes { appendNetrcToken($0, to: out) }
            out.append("\n")
        }
        return out
    }
}

/// `shellQuoted` of UTF-8 bytes, into guarded memory.
func appendShellQuoted(_ bytes: UnsafeRawBufferPointer, to out: SecretOutput) {
    out.append(UInt8(ascii: "'"))
    for b in bytes {
        if b == UInt8(ascii: "'") { out.append("'\\''") } else { out.append(b) }
    }
    out.append(UInt8(ascii: "'"))
}

/// `netrcToken` of UTF-8 bytes, into guarded memory: quoted when empty or when a character is
/// white space (Unicode's, read scalar by scalar), a quote or a backslash.
func appendNetrcToken(_ bytes: UnsafeRawBufferPointer, to out: SecretOutput) {
    var it = bytes.makeIterator()
    var parser = Unicode.UTF8.ForwardParser()
    var quote = bytes.isEmpty
    scan: while !quote {
        switch parser.parseScalar(from: &it) {
        case .valid(let encoded):
            let scalar = Unicode.UTF8.decode(encoded)
            if scalar.properties.isWhitespace || scalar == "\"" || scalar == "\\" { quote = true }
        case .emptyInput: break scan
        case .error: continue
        }
    }
    guard quote else { out.append(bytes); return }
    out.append(UInt8(ascii: "\""))
    for b in bytes {
        if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
        out.append(b)
    }
    out.append(UInt8(ascii: "\""))
}

/// A POSIX shell word that stands for exactly `s`: single quotes, `'\''` for each quote inside.
func shellQuoted(_ s: String) -> String {
    "'" + s.replacingEvery("'", with: "'\\''") + "'"
}

/// The host of a URL; a bare `host[:port][/path]` counts too.
func netrcHost(_ url: String) -> String? {
    if let h = URLComponents(string: url)?.host, !h.isEmpty { return h }
    if let h = URLComponents(string: "//" + url)?.host, !h.isEmpty { return h }
    return nil
}

/// A netrc token: as is, or in double quotes with `\"` and `\\` when it has a space, a quote or
/// a backslash (curl and Python's netrc read that form).
func netrcToken(_ s: String) -> String {
    guard s.contains(where: { $0.isWhitespace || $0 == "\"" || $0 == "\\" }) || s.isEmpty else { return s }
    return "\"" + s.replacingEvery("\\", with: "\\\\").replacingEvery("\"", with: "\\\"") + "\""
}

/// The prompts `login` answers: `--user-prompt` / `--password-prompt`, else the item's own, else
/// the defaults. All are matched case-insensitively against the program's output since the last
/// answer.
struct LoginPrompts {
    let user: PromptPattern
    let password: PromptPattern

    /// The patterns: a flag, else the item's own, else the defaults.
    /// - Throws: `.usage` for a pattern that is not a regular expression.
    init(_ inv: Invocation, item: Item? = nil) throws {
        user = try PromptAnswerer.compile(inv[LoginCommand.LoginOptions.userPrompt] ?? item?.userPrompt ?? PromptAnswerer.defaultUserPattern,
                                          option: LoginCommand.LoginOptions.userPrompt.name)
        password = try PromptAnswerer.compile(
            inv[LoginCommand.LoginOptions.passwordPrompt] ?? item?.passwordPrompt ?? PromptAnswerer.defaultPasswordPattern,
            option: LoginCommand.LoginOptions.passwordPrompt.name)
    }
}

// MARK: - typed logins

/// `vault login NAME -- COMMAND`: the command runs on a pseudo-terminal in its own session
/// (VaultSystem's `TerminalRelay`), and VaultKit's `PromptAnswerer` decides, on every chunk of
/// its output, whether to type the username or the password.
final class PromptedLogin: TerminalRelayDriver {
    let ctx: CommandContext
    private var answerer: PromptAnswerer
    private var username: [UInt8]?
    /// Releases the password from the vault into guarded memory (audited then); dropped once
    /// used, with the vault.
    private var release: (() throws -> SecretBox)?

    /// A driver typing `username` and the password `release` hands out when its prompt comes.
    init(username: String?, release: @escaping () throws -> SecretBox, prompts: LoginPrompts, ctx: CommandContext) {
        self.ctx = ctx
        self.username = username.map { Array($0.utf8) }
        self.release = release
        answerer = PromptAnswerer(userPrompt: prompts.user, passwordPrompt: prompts.password,
                                  hasUsername: username != nil)
    }

    /// Runs the command to its end.
    /// - Throws: `.io` when no pseudo-terminal opens, `.failure` when the command cannot start,
    ///   `.io(path: "standard output")` when its output could not be written (a closed pipe aside).
    func run(_ program: ChildProgram) throws -> ExitStatus {
        let output = (ctx.stdout as? FileSink)?.fd ?? 1
        let result: TerminalRelayResult
        do {
            result = try TerminalRelay.run(program.request(environment: ctx.environment), input: ctx.stdinFD,
                                           output: output, driver: self)
        } catch let e as SystemError {
            if e.call == .posixSpawn { throw program.startFailure(e) }
            throw VaultError.io(path: e.path ?? "/dev/ptmx", "cannot open a pseudo-terminal: \(e.reason)")
        }
        if result.status.isSuccess, let failure = result.outputFailure, !failure.isBrokenPipe {
            throw VaultError.io(path: "standard output", failure.reason)
        }
        return result.status
    }

    func programWrote(_ output: ArraySlice<UInt8>, echoOn: Bool, keyboard: TerminalKeyboard) throws {
        if !keyboard.isCanonical { answerer.terminalWentRaw() }
        act(answerer.programWrote(output, echoOn: echoOn, now: MonotonicClock.seconds()), keyboard)
    }

    /// Whether a prompt was answered (for the warning when none matched).
    var typedAnything: Bool { answerer.typedAnything }

    func tick(echoOn: Bool, keyboard: TerminalKeyboard) throws {
        act(answerer.tick(echoOn: echoOn, now: MonotonicClock.seconds()), keyboard)
    }

    var holdsPipedInput: Bool { !answerer.isPasswordSettled }

    var checkIntervalMilliseconds: Int32 { answerer.isWaitingForEchoOff ? 50 : 250 }

    private func act(_ answer: PromptAnswerer.Answer, _ keyboard: TerminalKeyboard) {
        // A failed write means the program's terminal is closed: the relay sees its end next.
        switch answer {
        case .nothing:
            break
        case .username:
            if let username { _ = try? username.withUnsafeBytes { try keyboard.typeLine($0) } }
        case .password:
            guard let release else { break }
            self.release = nil
            do {
                // Typed from guarded memory: the password is never a String or an ordinary array.
                let password = try release()
                _ = try? password.bytes.withUnsafeBytes { b -> Void in try keyboard.typeLine(b) }
            } catch {
                let e = VaultCLI.vaultError(error)
                ctx.say("\r\nvault: warning: the password could not be released (\(e.message)); type it yourself\r")
            }
        case .gaveUp:
            ctx.say("\r\nvault: warning: the program left echo on at its password prompt; the password was not typed (it would show)\r")
        }
    }
}
