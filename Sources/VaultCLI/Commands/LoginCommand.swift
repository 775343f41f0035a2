import Foundation
import VaultKit
import VaultSystem

/// `vault login NAME`: the login printed (env, json, netrc), or typed into a command's prompts on
/// a pseudo-terminal.
enum LoginCommand {
    static let login = CommandSpec(
        name: "login", summary: "print a login (env, json, netrc) or type it into a command's prompts",
        usage: "vault login NAME [--format env|json|netrc] [--reuse SECONDS] [-- COMMAND [ARG...]]",
        options: [
            .value("--format", "F", "without a command: env (default, shell 'export' lines), json or netrc"),
            .value("--reuse", "SECONDS", "fingerprint login: accept a match made at most this long ago (0-300, default 0)"),
            .value("--user-prompt", "REGEX", "with a command: the prompt that gets the username (default login:/username:)"),
            .value("--password-prompt", "REGEX", "with a command: the prompt that gets the password (default password:/passphrase:)"),
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
            let format = try LoginFormat.parse(inv.value("--format"))
            if inv.has("--format") && !inv.trailing.isEmpty {
                throw VaultError.usage("--format applies only without a command")
            }
            let reuse = try inv.int("--reuse") ?? 0
            guard (0...300).contains(reuse) else { throw VaultError.usage("--reuse must be between 0 and 300 seconds") }
            var prompts = try LoginPrompts(inv)
            let program = inv.trailing.isEmpty ? nil : try ChildProgram(inv, ctx)

            let prompted: PromptedLogin
            do {
                let vault = try openAccess(inv, ctx, purpose: "login '\(name)'")
                let overview = try vault.overview(named: name)
                prompts = try LoginPrompts(inv, item: overview.item)
                guard overview.hasPassword else { throw VaultError.failure("item '\(overview.item.name)' has no password") }
                let item = overview.item
                if item.fingerprintLogin {
                    try Auth.requireFreshMatch(vault, inv, ctx, reuse: reuse,
                                               prompt: "touch the fingerprint reader to log in to '\(item.name)'")
                } else {
                    try requirePasscode(vault, inv, ctx, item: item.name)
                }
                // The match (or the passcode) was just demanded above.
                let release = { () throws -> Item in
                    try vault.release(named: item.name, fields: ["password"], command: "login", freshMatch: item.fingerprintLogin)
                }
                guard program != nil else {
                    let released = try release()
                    let login = LoginSecrets(username: released.username, password: released.password ?? "", url: released.urls.first)
                    ctx.stdout.write(try format.render(login, item: name))
                    return
                }
                // Released (and logged) only when its prompt is answered: a program that never
                // asks gets nothing and the log says nothing was handed out.
                prompted = PromptedLogin(username: item.username, release: { try release().password ?? "" }, prompts: prompts, ctx: ctx)
            }
            guard let program else { return }
            let status = try prompted.run(program)
            if !prompted.typedAnything {
                ctx.say("vault: warning: no prompt of '\(program.name)' matched; nothing was typed (see --user-prompt and --password-prompt)")
            }
            if !status.isSuccess { throw VaultError.childExited(status: status.shellCode) }
        })

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

/// What `vault login` releases.
struct LoginSecrets {
    var username: String?
    var password: String
    var url: String?
}

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

    func render(_ login: LoginSecrets, item: String) throws -> String {
        switch self {
        case .env:
            var s = ""
            if let u = login.username { s += "export VAULT_USERNAME=\(shellQuoted(u))\n" }
            return s + "export VAULT_PASSWORD=\(shellQuoted(login.password))\n"
        case .json:
            let absent: Any = NSNull()
            return jsonText(["username": login.username.map { $0 as Any } ?? absent, "password": login.password,
                             "url": login.url.map { $0 as Any } ?? absent])
        case .netrc:
            guard let url = login.url, let host = netrcHost(url) else {
                throw VaultError.failure("item '\(item)' has no URL with a host name for the netrc 'machine'",
                                         hint: "add one: vault edit \(item) --url https://HOST")
            }
            var s = "machine \(netrcToken(host))"
            if let u = login.username { s += " login \(netrcToken(u))" }
            return s + " password \(netrcToken(login.password))\n"
        }
    }
}

/// A POSIX shell word that stands for exactly `s`: single quotes, `'\''` for each quote inside.
func shellQuoted(_ s: String) -> String {
    "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'"
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
    return "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
}

/// The prompts `login` answers: `--user-prompt` / `--password-prompt`, else the item's own, else
/// the defaults. All are matched case-insensitively against the program's output since the last
/// answer.
struct LoginPrompts {
    let user: NSRegularExpression
    let password: NSRegularExpression

    /// The patterns: a flag, else the item's own, else the defaults.
    /// - Throws: `.usage` for a pattern that is not a regular expression.
    init(_ inv: Invocation, item: Item? = nil) throws {
        user = try PromptAnswerer.compile(inv.value("--user-prompt") ?? item?.userPrompt ?? PromptAnswerer.defaultUserPattern,
                                          option: "--user-prompt")
        password = try PromptAnswerer.compile(
            inv.value("--password-prompt") ?? item?.passwordPrompt ?? PromptAnswerer.defaultPasswordPattern,
            option: "--password-prompt")
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
    /// Releases the password from the vault (audited then); dropped once used, with the vault.
    private var release: (() throws -> String)?

    /// A driver typing `username` and the password `release` hands out when its prompt comes.
    init(username: String?, release: @escaping () throws -> String, prompts: LoginPrompts, ctx: CommandContext) {
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
            if e.call == "posix_spawn" { throw program.startFailure(e) }
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
                var password = Array(try release().utf8)
                _ = try? password.withUnsafeBytes { try keyboard.typeLine($0) }
                wipe(&password)
            } catch {
                let e = VaultCLI.vaultError(error)
                ctx.say("\r\nvault: warning: the password could not be released (\(e.message)); type it yourself\r")
            }
        case .gaveUp:
            ctx.say("\r\nvault: warning: the program left echo on at its password prompt; the password was not typed (it would show)\r")
        }
    }
}
