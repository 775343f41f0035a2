import Foundation
import VaultKit
import VaultSystem

/// `vault run` (secrets in a child's environment) and `vault login` (a login printed, or typed
/// into a program's prompts on a pseudo-terminal): the table entries VaultCLI lists.
enum RunLoginCommands {
    static let all: [CommandSpec] = [RunCommand.run, LoginCommand.login]
}

/// `vault run --env VAR=NAME[.FIELD]... -- COMMAND`: the command inherits our terminal and
/// standard streams, with the named fields in its environment.
enum RunCommand {
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
                    let item = try Release.item(name, fields: [field], command: "run", from: vault, inv, ctx)
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
            if !status.isSuccess { throw VaultError.childExited(status: status.shellCode) }
        })
}

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

    /// - Throws: `.usage` without a command, `.commandNotFound` (127), `.commandNotExecutable` (126).
    init(_ inv: Invocation, _ ctx: CommandContext) throws {
        guard let first = inv.trailing.first, !first.isEmpty else {
            throw VaultError.usage("'\(inv.command.name)' needs a command after --", hint: "usage: \(inv.command.usage)")
        }
        name = first
        arguments = inv.trailing
        closeInChild = inv.value("--passcode-fd").flatMap { Int32($0) }.flatMap { $0 > 2 && isOpen($0) ? $0 : nil }
        switch ProgramLookup.find(first, searchPath: ctx.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin") {
        case .found(let p): path = p
        case .notFound: throw VaultError.commandNotFound(first)
        case .notExecutable(let p): throw VaultError.commandNotExecutable(p)
        }
    }

    /// What starts the program with `environment` (the passcode descriptor closed in it).
    func request(environment: [String: String]) -> SpawnRequest {
        SpawnRequest(path: path, arguments: arguments, environment: environment,
                     fileActions: closeInChild.map { [.close($0)] } ?? [])
    }

    /// A failure to start the program, as the user sees it.
    func startFailure(_ error: SystemError) -> VaultError {
        .failure("cannot run \(path): \(error.reason)")
    }

    /// Runs the program on our standard input, output and error, forwards SIGINT, SIGTERM and
    /// SIGHUP to it, and returns how it ended.
    func runInheriting(environment: [String: String]) throws -> ExitStatus {
        // The child is in our process group: Ctrl-C on the terminal reaches it directly, and
        // the kernel's copy to us is not sent on a second time.
        let forwarding = SignalForwarding(skipKernelSent: true)
        defer { forwarding.restore() }
        var spawn = request(environment: environment)
        spawn.defaultSignals = forwarding.forwarded
        let child: ChildProcess
        do { child = try ChildProcess.spawn(spawn) } catch { throw startFailure(error) }
        forwarding.attach(child.pid)
        do { return try child.wait() } catch {
            throw VaultError.failure("cannot wait for \(path): \(error.reason)")
        }
    }
}
