import Foundation
import VaultKit

/// `vault run` (secrets in a child's environment) and `vault login` (a login printed, or typed
/// into a program's prompts on a pseudo-terminal).
enum RunLoginCommands {
    static let all: [CommandSpec] = [run, login]

    static let run = CommandSpec(
        name: "run", summary: "run a command with secrets in its environment (never in its arguments)",
        usage: "vault run --env VAR=NAME[.FIELD]... -- COMMAND [ARG...]",
        options: [
            .value("--env", "VAR=NAME[.FIELD]",
                   "set VAR in the command's environment to a field of item NAME (default: password; repeatable)",
                   repeatable: true),
        ] + Auth.options,
        takesCommand: true,
        examples: """
        vault run --env PGPASSWORD=prod-db -- psql -h db -U admin
        vault run --env GH_TOKEN=github --env GH_USER=github.username -- ./deploy.sh
        """,
        run: { inv, ctx in
            let bindings = try inv.all("--env").map(EnvBinding.parse)
            guard !bindings.isEmpty else { throw VaultError.usage("'run' needs at least one --env VAR=NAME[.FIELD]", hint: "usage: \(inv.command.usage)") }
            var seen = Set<String>()
            for b in bindings where !seen.insert(b.variable).inserted {
                throw VaultError.usage("--env sets \(b.variable) twice")
            }
            let program = try ChildProgram(inv, ctx)
            var values: [String: String] = [:]
            do {
                let vault = try openAccess(inv, ctx, purpose: "run \(program.name)")
                // Every reference is resolved before anything is released: a wrong one releases nothing.
                let resolved = try bindings.map { b in (b, try b.resolve(in: vault)) }
                for (b, (name, field)) in resolved {
                    let item = try vault.release(named: name, fields: [field], command: "run")
                    guard let value = try item.field(field) else {
                        throw VaultError.failure("item '\(item.name)' has no \(field) (for \(b.variable))")
                    }
                    values[b.variable] = value
                }
            }
            var env = ctx.environment
            env.merge(values) { $1 }
            values.removeAll()
            let status = try program.runInheriting(environment: env)
            if status != 0 { throw ReportedFailure(exitCode: status) }
        })

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

            let login: LoginSecrets
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
                let released = try vault.release(named: item.name, fields: ["password"], command: "login")
                login = LoginSecrets(username: released.username, password: released.password ?? "", url: released.urls.first)
            }
            guard let program else {
                ctx.stdout.write(try format.render(login, item: name))
                return
            }
            let status = try PromptedTerminal(program: program, login: login, prompts: prompts, ctx: ctx).run()
            if status != 0 { throw ReportedFailure(exitCode: status) }
        })

    /// A login of an item without fingerprint login needs the passcode, even inside an unlock
    /// session. A passcode unlock by this same command counts: with `--passcode-fd` or
    /// `--passcode`, `openAccess` skips the session and unlocks with the passcode.
    static func requirePasscode(_ vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext, item: String) throws {
        if (vault as? UnlockedVault)?.authentication == .passcode { return }
        let store = try VaultStore.open(try location(inv, ctx))
        _ = try Auth.unlockWithPasscode(store, inv, ctx, reason: "'\(item)' has fingerprint login off; no terminal and no --passcode-fd")
    }
}


// MARK: - run

/// One `--env VAR=NAME[.FIELD]`.
struct EnvBinding {
    let variable: String
    /// The text after `=`.
    let reference: String

    /// Checks the syntax (a usage error, exit 2, otherwise).
    static func parse(_ text: String) throws -> EnvBinding {
        guard let eq = text.firstIndex(of: "=") else {
            throw VaultError.usage("--env expects VAR=NAME[.FIELD], not '\(text)'")
        }
        let variable = String(text[..<eq]), reference = String(text[text.index(after: eq)...])
        let first = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"), rest = first.union("0123456789")
        guard let head = variable.first, first.contains(head), variable.allSatisfy({ rest.contains($0) }) else {
            throw VaultError.usage("--env: '\(variable)' is not a variable name (letters, digits and _, not starting with a digit)")
        }
        guard !reference.isEmpty else { throw VaultError.usage("--env \(variable)= names no item") }
        _ = try Item.normalize(name: reference)
        return EnvBinding(variable: variable, reference: reference)
    }

    /// Fields `NAME.FIELD` may name (`Item.field(_:)`'s, with its `user` alias).
    static let fields = Item.fieldNames + ["user"]

    /// The item and field meant. `a.b.username` is field `username` of item `a.b` when that item
    /// exists; a name whose last part is no field (`github.com`) is an item name, field password.
    func resolve(in vault: any VaultAccess) throws -> (String, String) {
        var candidates: [(String, String)] = []
        var unknownField: (item: String, field: String)?
        if let dot = reference.lastIndex(of: "."), dot != reference.startIndex {
            let prefix = String(reference[..<dot]), suffix = String(reference[reference.index(after: dot)...])
            if EnvBinding.fields.contains(suffix) {
                candidates.append((try Item.normalize(name: prefix), suffix == "user" ? "username" : suffix))
            } else if !suffix.isEmpty {
                unknownField = (prefix, suffix)
            }
        }
        candidates.append((try Item.normalize(name: reference), "password"))
        for (name, field) in candidates where try vault.contains(name) {
            return (try vault.overview(named: name).item.name, field)
        }
        if let u = unknownField, let name = try? Item.normalize(name: u.item), try vault.contains(name) {
            throw VaultError.usage("--env \(variable): item '\(name)' has no field '\(u.field)'",
                                   hint: "fields: \(Item.fieldNames.joined(separator: ", "))")
        }
        throw VaultError.itemNotFound(candidates[0].0)
    }
}

/// The command after `--`, found on `PATH` before anything is unlocked.
struct ChildProgram {
    /// As typed (argv[0]).
    let name: String
    let path: String
    let arguments: [String]
    /// `--passcode-fd`: closed in the child, so it cannot read what follows the passcode.
    let closeInChild: Int32?

    init(_ inv: Invocation, _ ctx: CommandContext) throws {
        guard let first = inv.trailing.first, !first.isEmpty else {
            throw VaultError.usage("'\(inv.command.name)' needs a command after --", hint: "usage: \(inv.command.usage)")
        }
        name = first
        arguments = inv.trailing
        closeInChild = inv.value("--passcode-fd").flatMap { Int32($0) }.flatMap { $0 > 2 && fcntl($0, F_GETFD) != -1 ? $0 : nil }
        switch ChildProgram.lookUp(first, path: ctx.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin") {
        case .found(let p): path = p
        case .notFound:
            VaultCLI.report(.failure("command not found: \(first)",
                                     hint: first.contains("/") ? nil : "it is not in PATH; give its full path"), ctx)
            throw ReportedFailure(exitCode: 127)
        case .notExecutable(let p):
            VaultCLI.report(.failure("cannot run \(p): not an executable file"), ctx)
            throw ReportedFailure(exitCode: 126)
        }
    }

    enum LookUp: Equatable { case found(String), notFound, notExecutable(String) }

    /// `execvp`'s search: a name with a slash is a path; otherwise each `PATH` entry in order
    /// (an empty entry is the current folder).
    static func lookUp(_ name: String, path: String) -> LookUp {
        func kind(_ p: String) -> LookUp {
            var st = stat()
            guard stat(p, &st) == 0 else { return .notFound }
            guard st.st_mode & S_IFMT == S_IFREG, access(p, X_OK) == 0 else { return .notExecutable(p) }
            return .found(p)
        }
        if name.contains("/") { return kind(name) }
        var denied: LookUp = .notFound
        for dir in path.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = (dir.isEmpty ? "." : String(dir)) + "/" + name
            switch kind(candidate) {
            case .found(let p): return .found(p)
            case .notExecutable(let p): if denied == .notFound { denied = .notExecutable(p) }
            case .notFound: break
            }
        }
        return denied
    }

    /// Starts the program. `terminal`: the pseudo-terminal it gets as standard input, output,
    /// error and controlling terminal (in a new session); else it inherits ours.
    func spawn(environment: [String: String], terminal: String? = nil) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        // Caught signals are reset by exec; ignored ones (nohup) stay ignored, as with env(1).
        var flags: Int32 = 0x08 // POSIX_SPAWN_SETSIGMASK
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attr, &none)
        if let closeInChild { posix_spawn_file_actions_addclose(&actions, closeInChild) }
        if let terminal {
            // POSIX_SPAWN_SETSID runs before the file actions: a session leader without a
            // controlling terminal that opens a terminal (no O_NOCTTY) acquires it (TIOCSCTTY).
            flags |= 0x80
            posix_spawn_file_actions_addopen(&actions, 0, terminal, O_RDWR, 0)
            posix_spawn_file_actions_adddup2(&actions, 0, 1)
            posix_spawn_file_actions_adddup2(&actions, 0, 2)
        }
        posix_spawnattr_setflags(&attr, Int16(flags))
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            // The environment holds the secrets: wiped before the memory goes back.
            for p in envp { if let p { memset(p, 0, strlen(p)); free(p) } }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
        guard rc == 0 else {
            throw VaultError.failure("cannot run \(path): \(String(cString: strerror(rc)))")
        }
        return pid
    }

    /// Runs the program on our standard input, output and error, forwards SIGINT, SIGTERM and
    /// SIGHUP to it, and returns its exit status (128 + signal when a signal ended it).
    func runInheriting(environment: [String: String]) throws -> Int32 {
        // The child is in our process group: Ctrl-C on the terminal reaches it directly, and
        // the kernel's copy to us is not sent on a second time.
        let forwarding = SignalForwarding(skipKernelSent: true)
        defer { forwarding.restore() }
        let pid = try spawn(environment: environment)
        forwarding.attach(pid)
        return waitForExit(pid)
    }
}

/// An exit status as the shell reports it: the code, or 128 + the signal that ended the process.
func waitForExit(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 {
        if errno != EINTR { return 1 }
    }
    return exitStatus(status)
}

/// The exit code of a raw `waitpid` status (128 + signal for a killed process).
func exitStatus(_ status: Int32) -> Int32 {
    (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
}

// MARK: - signals

/// The signals `run` and `login` pass on to the child.
let forwardedSignals: [Int32] = [SIGINT, SIGTERM, SIGHUP]

nonisolated(unsafe) private var signalChild: pid_t = 0
nonisolated(unsafe) private var signalSkipKernel: sig_atomic_t = 0
/// A signal that came before the child's pid was known.
nonisolated(unsafe) private var signalPending: sig_atomic_t = 0
nonisolated(unsafe) private var windowChanged: sig_atomic_t = 0

/// While a child runs: SIGINT, SIGTERM and SIGHUP sent to this process go on to the child (and
/// SIGWINCH is noted for the pseudo-terminal). `restore()` puts the previous handlers back.
final class SignalForwarding {
    private var saved: [(Int32, sigaction)] = []
    private var savedMask = sigset_t()

    init(skipKernelSent: Bool) {
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
        for s in forwardedSignals {
            var old = sigaction()
            sigaction(s, nil, &old)
            // A signal ignored when we started (nohup) stays ignored, for us and for the child.
            if let h = old.__sigaction_handler.sa_handler, unsafeBitCast(h, to: Int.self) == 1 { continue }
            sigaction(s, &action, nil)
            saved.append((s, old))
        }
        var winch = sigaction()
        winch.__sigaction_handler.sa_handler = { _ in windowChanged = 1 }
        sigemptyset(&winch.sa_mask)
        winch.sa_flags = SA_RESTART
        var old = sigaction()
        sigaction(SIGWINCH, &winch, &old)
        saved.append((SIGWINCH, old))
        // A parent may have started us with these blocked; they must reach the handler.
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for s in forwardedSignals + [SIGWINCH] { sigaddset(&unblock, s) }
        pthread_sigmask(SIG_UNBLOCK, &unblock, &savedMask)
    }

    /// From now on signals go to `pid`; one that came early is delivered now.
    func attach(_ pid: pid_t) {
        signalChild = pid
        let early = signalPending
        if early != 0 { signalPending = 0; kill(pid, early) }
    }

    /// Whether SIGWINCH came since the last call.
    func takeWindowChange() -> Bool {
        guard windowChanged != 0 else { return false }
        windowChanged = 0
        return true
    }

    func restore() {
        signalChild = 0
        for (s, old) in saved { var o = old; sigaction(s, &o, nil) }
        saved.removeAll()
        pthread_sigmask(SIG_SETMASK, &savedMask, nil)
    }
}

// MARK: - login

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

/// The prompts `login` answers: `--user-prompt` / `--password-prompt`, else the defaults. All are
/// matched case-insensitively against the program's output since the last answer.
struct LoginPrompts {
    static let defaultUser = #"(login|username)[^\n:]*:\s*$"#
    static let defaultPassword = #"(password|passphrase)[^\n]*:\s*$"#
    let user: NSRegularExpression
    let password: NSRegularExpression

    /// The patterns: a flag, else the item's own, else the defaults.
    init(_ inv: Invocation, item: Item? = nil) throws {
        func compile(_ option: String, _ stored: String?, _ fallback: String) throws -> NSRegularExpression {
            let pattern = inv.value(option) ?? stored ?? fallback
            do { return try NSRegularExpression(pattern: pattern, options: [.caseInsensitive]) } catch {
                throw VaultError.usage("\(option): '\(pattern)' is not a regular expression")
            }
        }
        user = try compile("--user-prompt", item?.userPrompt, LoginPrompts.defaultUser)
        password = try compile("--password-prompt", item?.passwordPrompt, LoginPrompts.defaultPassword)
    }
}

/// `vault login NAME -- COMMAND`: the command runs on a pseudo-terminal in its own session; the
/// user's terminal (raw while it runs) and the pseudo-terminal are relayed both ways; the
/// username and password are each typed at most once, at their prompts. The password only once
/// the program has turned echo off, so it never comes back on the screen.
final class PromptedTerminal {
    /// How long to wait, after a password prompt, for the program to turn echo off.
    static let echoGrace: Double = 3
    /// Output kept for prompt matching.
    static let window = 4096

    let program: ChildProgram
    let prompts: LoginPrompts
    let ctx: CommandContext
    private var username: [UInt8]?
    private var password: [UInt8]?
    private var userTyped = false
    private var passwordTyped = false
    private var passwordPromptSeen: Date?
    private var recent: [UInt8] = []

    init(program: ChildProgram, login: LoginSecrets, prompts: LoginPrompts, ctx: CommandContext) {
        self.program = program
        self.prompts = prompts
        self.ctx = ctx
        username = login.username.map { Array($0.utf8) }
        password = Array(login.password.utf8)
    }

    deinit {
        if var p = password { wipe(&p) }
    }

    private func wipe(_ bytes: inout [UInt8]) {
        for i in bytes.indices { bytes[i] = 0 }
    }

    /// Runs the command to its end; returns its exit status.
    func run() throws -> Int32 {
        let input = ctx.stdinFD
        let output = (ctx.stdout as? FileSink)?.fd ?? 1
        let userTerminal = isatty(input) == 1
        var size = winsize(ws_row: 24, ws_col: 80, ws_xpixel: 0, ws_ypixel: 0)
        var saved = termios()
        if userTerminal {
            var reported = size
            if ioctl(input, UInt(TIOCGWINSZ), &reported) == 0, reported.ws_row > 0, reported.ws_col > 0 { size = reported }
            tcgetattr(input, &saved)
        }
        var master: Int32 = -1, slave: Int32 = -1
        // The pseudo-terminal starts with the user's settings when there is a terminal, else
        // the kernel's defaults (canonical, echo, CR-LF on output).
        let opened = userTerminal ? openpty(&master, &slave, nil, &saved, &size) : openpty(&master, &slave, nil, nil, &size)
        guard opened == 0 else {
            throw VaultError.io(path: "/dev/ptmx", "cannot open a pseudo-terminal: \(String(cString: strerror(errno)))")
        }
        _ = fcntl(master, F_SETFD, FD_CLOEXEC)
        _ = fcntl(slave, F_SETFD, FD_CLOEXEC)
        defer { close(master) }
        var nameBuffer = [CChar](repeating: 0, count: 256)
        guard ttyname_r(slave, &nameBuffer, nameBuffer.count) == 0 else {
            close(slave)
            throw VaultError.io(path: "/dev/pts", "cannot name the pseudo-terminal")
        }
        let slavePath = String(decoding: nameBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)

        // The child is in a session of its own: terminal signals do not reach it from our
        // terminal, so every one that reaches us is forwarded.
        let forwarding = SignalForwarding(skipKernelSent: false)
        defer { forwarding.restore() }
        let pid: pid_t
        do {
            pid = try program.spawn(environment: ctx.environment, terminal: slavePath)
        } catch {
            close(slave)
            throw error
        }
        forwarding.attach(pid)
        // Our copy of the slave goes, so the master reads EIO once the child's side is closed.
        close(slave)
        // A closed stdout must not kill us with the terminal left raw (set after the spawn: an
        // ignored signal would be inherited).
        let pipeHandler = signal(SIGPIPE, SIG_IGN)
        defer { signal(SIGPIPE, pipeHandler) }
        _ = fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK)

        if userTerminal {
            var raw = saved
            cfmakeraw(&raw)
            tcsetattr(input, TCSADRAIN, &raw)
        }
        defer { if userTerminal { tcsetattr(input, TCSADRAIN, &saved) } }

        var inputOpen = true
        var eofSent = userTerminal
        var masterOpen = true
        var toChild: [UInt8] = []
        var status: Int32?
        var buffer = [UInt8](repeating: 0, count: 16384)
        while masterOpen {
            if forwarding.takeWindowChange(), userTerminal, ioctl(input, UInt(TIOCGWINSZ), &size) == 0 {
                _ = ioctl(master, UInt(TIOCSWINSZ), &size)
            }
            if status == nil {
                var raw: Int32 = 0
                if waitpid(pid, &raw, WNOHANG) == pid { status = exitStatus(raw) }
            }
            try answerPendingPassword(master)
            // Input from a pipe or a file goes in only once the password has (so the program
            // cannot take it for the password), and its end after it, as the terminal's EOF.
            let inputHeld = !userTerminal && !passwordTyped
            if !inputOpen, !eofSent, !inputHeld, toChild.isEmpty {
                var t = termios()
                if tcgetattr(master, &t) == 0 {
                    var eof = withUnsafeBytes(of: t.c_cc) { $0[Int(VEOF)] }
                    _ = write(master, &eof, 1)
                }
                eofSent = true
            }
            let sending = !toChild.isEmpty && !inputHeld
            var fds = [pollfd(fd: master, events: Int16(POLLIN) | (sending ? Int16(POLLOUT) : 0), revents: 0)]
            if inputOpen && toChild.count < 65536 { fds.append(pollfd(fd: input, events: Int16(POLLIN), revents: 0)) }
            // Once the child has ended, only what is already buffered is read.
            let timeout: Int32 = status != nil ? 0 : (passwordPromptSeen != nil ? 50 : 250)
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 { if errno == EINTR { continue }; break }
            if ready == 0 {
                if status != nil { break }
                continue
            }
            if fds[0].revents & Int16(POLLOUT) != 0, sending {
                let w = toChild.withUnsafeBytes { write(master, $0.baseAddress!, $0.count) }
                if w > 0 { toChild.removeFirst(w) }
            }
            if fds[0].revents & ~Int16(POLLOUT) != 0 {
                let n = read(master, &buffer, buffer.count)
                if n > 0 {
                    writeAll(output, buffer, count: n)
                    recent.append(contentsOf: buffer[0..<n])
                    if recent.count > PromptedTerminal.window { recent.removeFirst(recent.count - PromptedTerminal.window) }
                    try answerPrompts(master)
                } else if n == 0 || (errno != EAGAIN && errno != EINTR) {
                    // EIO: every descriptor of the child's side is closed.
                    masterOpen = false
                }
            }
            if fds.count > 1, fds[1].revents != 0 {
                let n = read(input, &buffer, buffer.count)
                if n > 0 {
                    toChild.append(contentsOf: buffer[0..<n])
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    inputOpen = false
                }
            }
        }
        for i in buffer.indices { buffer[i] = 0 }
        return status ?? waitForExit(pid)
    }

    /// Types the username or password when the output since the last answer ends in its prompt.
    private func answerPrompts(_ master: Int32) throws {
        let text = String(decoding: recent, as: UTF8.self)
        let range = NSRange(text.startIndex..., in: text)
        if !userTyped, prompts.user.firstMatch(in: text, range: range) != nil {
            userTyped = true
            if let u = username {
                type(u, master)
                recent.removeAll()
                return
            }
        }
        if !passwordTyped, passwordPromptSeen == nil, prompts.password.firstMatch(in: text, range: range) != nil {
            passwordPromptSeen = Date()
            try answerPendingPassword(master)
        }
    }

    /// After a password prompt: types the password once the program has turned echo off, or gives
    /// up (and says so) after `echoGrace` seconds.
    private func answerPendingPassword(_ master: Int32) throws {
        guard let since = passwordPromptSeen, !passwordTyped else { return }
        var t = termios()
        let echoOff = tcgetattr(master, &t) == 0 && t.c_lflag & tcflag_t(ECHO) == 0
        if echoOff, password != nil {
            type(password!, master)
            wipe(&password!)
            password = nil
            passwordTyped = true
            passwordPromptSeen = nil
            recent.removeAll()
        } else if Date().timeIntervalSince(since) > PromptedTerminal.echoGrace {
            passwordTyped = true
            passwordPromptSeen = nil
            ctx.say("\r\nvault: warning: the program left echo on at its password prompt; the password was not typed (it would show)\r")
        }
    }

    /// Types `bytes` and a newline (the newline apart, so no second copy of a secret is made).
    private func type(_ bytes: [UInt8], _ master: Int32) {
        writeAll(master, bytes, count: bytes.count)
        writeAll(master, [10], count: 1)
    }

    /// Writes every byte, waiting while a non-blocking descriptor is full.
    private func writeAll(_ fd: Int32, _ bytes: [UInt8], count: Int) {
        var offset = 0
        while offset < count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, count - offset) }
            if n > 0 { offset += n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && errno == EAGAIN {
                var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if poll(&p, 1, 1000) >= 0 { continue }
            }
            return
        }
    }
}
