import FoundationEssentials
import VaultKit
import VaultSystem

/// The `vault` command line: one table of commands, one exit path.
public enum VaultCLI {
    /// The program version.
    public static let version = "0.1.0"

    static let helpCommand = CommandSpec(
        name: "help", summary: "show help for a command, or 'exit-codes'", usage: "vault help [COMMAND | exit-codes]",
        arguments: 0...1,
        run: { inv, ctx in
            let style = Style.of(ctx.stdout, ctx)
            guard let topic = inv.arguments.first else { ctx.stdout.write(Help.overview(listed, style: style, columns: Help.columns(ctx.stdout, ctx))); return }
            if topic == "exit-codes" { ctx.stdout.write(Help.exitCodeText); return }
            guard let c = CommandIndex.resolve(topic, in: table) else {
                let near = Parser.suggestion(topic, among: table.map(\.name) + ["exit-codes"])
                throw VaultError.usage("no help for '\(topic)'", hint: near.map { "did you mean 'vault help \($0)'?" })
            }
            ctx.stdout.write(Help.command(c, style: style, columns: Help.columns(ctx.stdout, ctx)))
        })

    /// Every command, in the order help lists them.
    static var table: [CommandSpec] {
        [VaultCommands.initCommand, VaultCommands.status,
         ItemCommands.add, ItemCommands.edit, ItemCommands.rm, ItemCommands.mv, ItemCommands.ls,
         ItemCommands.search, ItemCommands.get, OTPCommand.otp, ItemCommands.log, VaultCommands.generate,
         VaultCommands.passcode, VaultCommands.recover, RotateCommand.rotate, RepairCommand.repair,
         ImportExport.importCommand, ImportExport.exportCommand, SettingsCommand.settings]
            + RunLoginCommands.all + ReferenceCommands.all
            + FingerprintCommands.all
            + [SessionCommands.lock, SessionCommands.agent, SecretServiceCommand.command, SSHKeyCommand.sshKey]
            + [helpCommand, VaultCommands.version, CompletionCommand.completion, CompletionCommand.manpage, Clipboard.clearCommand]
            + CredentialHelpers.commands
            + SyncCommands.all
    }

    /// The command called `name` in `table`, made alone: every spec is a `static let` made on
    /// first use, and making the whole table (options, help texts) was a sixth of what a `vault
    /// get` in a session spent in its own code (docs/performance.md). `CommandLookupTests`
    /// checks that each command of `table` is found here under its name.
    static func command(named name: String) -> CommandSpec? {
        switch name {
        case "init": VaultCommands.initCommand
        case "status": VaultCommands.status
        case "add": ItemCommands.add
        case "edit": ItemCommands.edit
        case "rm": ItemCommands.rm
        case "mv": ItemCommands.mv
        case "ls": ItemCommands.ls
        case "search": ItemCommands.search
        case "get": ItemCommands.get
        case "otp": OTPCommand.otp
        case "log": ItemCommands.log
        case "generate": VaultCommands.generate
        case "passcode": VaultCommands.passcode
        case "recover": VaultCommands.recover
        case "rotate": RotateCommand.rotate
        case "repair": RepairCommand.repair
        case "import": ImportExport.importCommand
        case "export": ImportExport.exportCommand
        case "settings": SettingsCommand.settings
        case "run": RunCommand.run
        case "login": LoginCommand.login
        case "read": ReferenceCommands.read
        case "inject": ReferenceCommands.inject
        case "enroll": FingerprintCommands.enroll
        case "unenroll": FingerprintCommands.unenroll
        case "fingers": FingerprintCommands.fingers
        case "doctor": FingerprintCommands.doctor
        case "unlock": FingerprintCommands.unlock
        case "lock": SessionCommands.lock
        case "agent": SessionCommands.agent
        case "secret-service": SecretServiceCommand.command
        case "ssh-key": SSHKeyCommand.sshKey
        case "help": helpCommand
        case "version": VaultCommands.version
        case "completion": CompletionCommand.completion
        case "manpage": CompletionCommand.manpage
        case "clipboard-clear": Clipboard.clearCommand
        case "git-credential": GitCredentialCommand.gitCredential
        case "docker-credential": DockerCredentialCommand.dockerCredential
        case "remote": SyncCommands.remote
        case "sync": SyncCommands.sync
        case "clone": SyncCommands.clone
        default: nil
        }
    }

    /// The commands the help overview lists (the credential helpers' verbs are for programs).
    static var listed: [CommandSpec] {
        table.filter { !CredentialHelpers.unlistedNames.contains($0.name) && $0.name != Clipboard.clearCommand.name }
    }

    /// Runs one command line (without the program name) and returns the exit code. Nothing here
    /// exits the process: `main` does, with this code.
    public static func run(_ arguments: [String], context ctx: CommandContext) -> Int32 {
        ctx.noColor = arguments.prefix { $0 != "--" }.contains("--no-color")
        var command: CommandSpec?
        do {
            let parsed = try Parser.parse(arguments, commands: CommandTable(named: command(named:), all: { table }))
            command = parsed?.command
            guard let inv = parsed else {
                if arguments.isEmpty {
                    ctx.stderr.write(Help.overview(listed, style: Style.of(ctx.stderr, ctx), columns: Help.columns(ctx.stderr, ctx)))
                    return 2
                }
                ctx.stdout.write(Help.overview(listed, style: Style.of(ctx.stdout, ctx), columns: Help.columns(ctx.stdout, ctx)))
                return 0
            }
            if inv.has(GlobalOptions.help) {
                ctx.stdout.write(Help.command(inv.command, style: Style.of(ctx.stdout, ctx), columns: Help.columns(ctx.stdout, ctx)))
                return 0
            }
            defer { ctx.writeVault = nil }
            do {
                try inv.command.run(inv, ctx)
            } catch {
                try checkDeclaredReads(inv)
                throw error
            }
            try checkDeclaredReads(inv)
            SyncCommands.afterWrite(inv, ctx)
            // Every write to stdout is checked: what a script reads must not be silently missing.
            if let f = ctx.stdout.failure {
                let e = VaultError.io(path: "standard output", f.reason)
                // `vault export | head`: the reader chose to stop; the exit code says the output
                // was cut short, without a line on the screen (as cat and grep do).
                if !f.isBrokenPipe { report(e, ctx) }
                return e.exitCode
            }
            return 0
        } catch {
            let e = vaultError(error)
            report(e, ctx, vault: vaultName(arguments, ctx), command: command)
            return e.exitCode
        }
    }

    /// In a debug build (every test), a command that read an option it does not declare fails
    /// naming it: such a read is always false, since the parser refuses the option (a typo, or
    /// the key of another command). Release builds skip the check.
    static func checkDeclaredReads(_ inv: Invocation) throws {
        #if DEBUG
        let undeclared = inv.undeclaredReads
        guard undeclared.isEmpty else {
            throw VaultError.failure("internal error: '\(inv.command.name)' reads an option it does not declare: \(undeclared.sorted().joined(separator: ", "))")
        }
        #endif
    }

    /// The vault a command line names (for hints), when it can be told.
    static func vaultName(_ arguments: [String], _ ctx: CommandContext) -> String? {
        if let i = arguments.firstIndex(of: "--vault"), i + 1 < arguments.count { return arguments[i + 1] }
        if let a = arguments.first(where: { $0.hasPrefix("--vault=") }) { return String(a.dropFirst("--vault=".count)) }
        return ctx.environment["VAULT_NAME"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Every error as the vault reports it (one table of messages, hints and exit codes).
    static func vaultError(_ error: any Error) -> VaultError {
        switch error {
        case let e as VaultError: e
        case let e as CryptoError: e.vaultError
        case let e as ScanInterruption: e.vaultError
        default: .failure("\(error)")
        }
    }

    static func report(_ e: VaultError, _ ctx: CommandContext, vault: String? = nil, command: CommandSpec? = nil) {
        guard e.isPrinted else { return }
        let style = Style.of(ctx.stderr, ctx)
        // Ctrl-C at a prompt (echo off) or during a progress bar left the line open.
        if ctx.stderr.isTerminal { ctx.terminal.endLine() }
        ctx.stderr.write(style.line("vault: error: \(e.message)") + "\n")
        guard var h = e.hint(vault: vault) else { return }
        switch e {
        case .usage, .failure: h = naming(vault, in: h)
        case .alreadyExists(let name) where command.map({ c in !c.options.contains { $0.name == "--force" } }) == true:
            // Only a command that can replace an item may suggest --force (not mv).
            h = naming(vault, in: "choose another name, or delete that one first with 'vault rm \(name)'")
        default: break
        }
        ctx.stderr.write(style.line("vault: hint: \(h)") + "\n")
    }

    /// `hint` with `--vault NAME` added to every quoted command (`'vault ls'`) that lacks it,
    /// when `vault` is not the default: a hint typed as shown acts on the vault that failed.
    static func naming(_ vault: String?, in hint: String) -> String {
        guard let vault, vault != "default" else { return hint }
        var out = "", rest = Substring(hint)
        while let open = rest.byteRange(of: "'vault ") {
            out += rest[..<open.lowerBound]
            let after = rest[open.lowerBound...].dropFirst()
            guard let close = after.firstIndex(of: "'") else { out += rest[open.lowerBound...]; rest = ""; break }
            let command = after[..<close]
            out += "'" + command + (command.contains("--vault") ? "" : " --vault \(vault)") + "'"
            rest = after[after.index(after: close)...]
        }
        return out + rest
    }

    /// Installs the SIGINT handler (a prompt or scan in progress ends as "cancelled by the user",
    /// exit 11, after restoring the terminal) and runs the process's command line; called as
    /// `git-credential-vault` or `docker-credential-vault` (argv[0]) it runs that credential helper.
    public static func main() -> Int32 {
        // Ctrl-C sets a flag (and unblocks SIGINT, which a parent may have blocked).
        Interrupts.install()
        // Ctrl-Z at a secret prompt gives the shell its terminal back; `fg` turns echo off again.
        TerminalSuspension.install()
        // A closed pipe is an error a command reports (exit 6), not a silent death; children
        // get SIGPIPE back (ChildProcess resets it).
        ignoreBrokenPipe()
        // This process will hold keys and secrets: no core dump, no ptrace by the user's other
        // processes. Best effort: a failure here must not keep the user from their vault.
        try? ProcessHardening.disableCoreDumps()
        ProcessIdentity.restrictFileCreation()
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "ssh-agent" { return SSHAgentCommand.exec(Array(arguments.dropFirst())) }
        if let helper = CredentialHelpers.Program(argv0: CommandLine.arguments.first ?? "") {
            return CredentialHelpers.main(helper, arguments, context: .process())
        }
        return run(arguments, context: .process())
    }
}
