import Foundation
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
            guard let topic = inv.arguments.first else { ctx.stdout.write(Help.overview(listed)); return }
            if topic == "exit-codes" { ctx.stdout.write(Help.exitCodeText); return }
            guard let c = table.first(where: { $0.name == topic }) else {
                let near = Parser.suggestion(topic, among: table.map(\.name) + ["exit-codes"])
                throw VaultError.usage("no help for '\(topic)'", hint: near.map { "did you mean 'vault help \($0)'?" })
            }
            ctx.stdout.write(Help.command(c))
        })

    /// Every command, in the order help lists them.
    static var table: [CommandSpec] {
        [VaultCommands.initCommand, VaultCommands.status,
         ItemCommands.add, ItemCommands.edit, ItemCommands.rm, ItemCommands.mv, ItemCommands.ls,
         ItemCommands.search, ItemCommands.get, ItemCommands.log, VaultCommands.generate,
         VaultCommands.passcode, VaultCommands.recover, RotateCommand.rotate, RepairCommand.repair,
         ImportExport.importCommand, ImportExport.exportCommand, SettingsCommand.settings]
            + RunLoginCommands.all + ReferenceCommands.all
            + FingerprintCommands.all
            + [SessionCommands.lock, SessionCommands.agent]
            + [helpCommand, VaultCommands.version, Clipboard.clearCommand]
            + CredentialHelpers.commands
    }

    /// The commands the help overview lists (the credential helpers' verbs are for programs).
    static var listed: [CommandSpec] { table.filter { !CredentialHelpers.unlistedNames.contains($0.name) } }

    /// Runs one command line (without the program name) and returns the exit code. Nothing here
    /// exits the process: `main` does, with this code.
    public static func run(_ arguments: [String], context ctx: CommandContext) -> Int32 {
        do {
            guard let inv = try Parser.parse(arguments, table: table) else {
                if arguments.isEmpty {
                    ctx.stderr.write(Help.overview(listed))
                    return 2
                }
                ctx.stdout.write(Help.overview(listed))
                return 0
            }
            if inv.flags.contains("--help") {
                ctx.stdout.write(Help.command(inv.command))
                return 0
            }
            try inv.command.run(inv, ctx)
            // Every write to stdout is checked: what a script reads must not be silently missing.
            if let f = ctx.stdout.failure {
                let e = VaultError.io(path: "standard output", f.reason)
                report(e, ctx)
                return e.exitCode
            }
            return 0
        } catch {
            let e = vaultError(error)
            report(e, ctx, vault: vaultName(arguments, ctx))
            return e.exitCode
        }
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

    static func report(_ e: VaultError, _ ctx: CommandContext, vault: String? = nil) {
        guard e.isPrinted else { return }
        ctx.stderr.write("vault: error: \(e.message)\n")
        if let h = e.hint(vault: vault) { ctx.stderr.write("vault: hint: \(h)\n") }
    }

    /// Installs the SIGINT handler (a prompt or scan in progress ends as "cancelled by the user",
    /// exit 11, after restoring the terminal) and runs the process's command line; called as
    /// `git-credential-vault` or `docker-credential-vault` (argv[0]) it runs that credential helper.
    public static func main() -> Int32 {
        // Ctrl-C sets a flag (and unblocks SIGINT, which a parent may have blocked).
        Interrupts.install()
        // A closed pipe is an error a command reports (exit 6), not a silent death; children
        // get SIGPIPE back (ChildProcess resets it).
        ignoreBrokenPipe()
        // This process will hold keys and secrets: no core dump, no ptrace by the user's other
        // processes. Best effort: a failure here must not keep the user from their vault.
        try? ProcessHardening.disableCoreDumps()
        ProcessIdentity.restrictFileCreation()
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let helper = CredentialHelpers.Program(argv0: CommandLine.arguments.first ?? "") {
            return CredentialHelpers.main(helper, arguments, context: .process())
        }
        return run(arguments, context: .process())
    }
}
