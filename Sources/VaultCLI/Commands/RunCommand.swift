import FoundationEssentials
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
    /// The options of `run`, declared once: the table lists them and the command reads them.
    enum RunOptions {
        static let env = OptionSpec.value("--env", "VAR=NAME[.FIELD]",
                   "set VAR in the command's environment to a field of item NAME (default: password), or to a vault:// reference (repeatable)",
                   repeatable: true)
        static let envFile = OptionSpec.value("--env-file", "FILE", "read variables from a dotenv file; values that are vault:// references are resolved (repeatable)",
                   repeatable: true)
        static let noMasking = OptionSpec.flag("--no-masking", "let the command's output through as it is (by default every released secret in it is replaced by <concealed by vault>)")
    }

    static let run = CommandSpec(
        name: "run", summary: "run a command with secrets in its environment (never in its arguments), masked in its output",
        usage: "vault run [--env VAR=NAME[.FIELD]]... [--env-file FILE]... [--no-masking] -- COMMAND [ARG...]",
        options: [
            RunOptions.env,
            RunOptions.envFile,
            RunOptions.noMasking,
        ] + Auth.options,
        takesCommand: true,
        examples: """
        vault run --env PGPASSWORD=prod-db -- psql -h db -U admin
        vault run --env GH_TOKEN=github --env GH_USER=github.username -- ./deploy.sh
        vault run --env-file .env -- ./server       # .env: DB_PASSWORD=vault://prod-db/password
        DB_PASSWORD=vault://prod-db/password vault run -- ./server
        """,
        run: { inv, ctx in
            // `--env VAR=vault://...` is a reference; any other value is NAME[.FIELD].
            var bindings: [EnvBinding] = []
            var variables: [(key: String, value: String, fromReference: SecretReference?)] = []
            for text in inv.all(RunOptions.env) {
                if let eq = text.firstIndex(of: "="), SecretReference.looksLikeReference(String(text[text.index(after: eq)...])) {
                    let name = String(text[..<eq])
                    guard DotEnv.isVariableName(name) else {
                        throw VaultError.usage("--env: '\(name)' is not a variable name (letters, digits and _, not starting with a digit)")
                    }
                    let reference = try SecretReference(parsing: String(text[text.index(after: eq)...]))
                    variables.append((name, reference.text, reference))
                } else {
                    bindings.append(try EnvBinding.parse(text))
                }
            }
            var seen = Set<String>()
            for v in bindings.map(\.variable) + variables.map(\.key) where !seen.insert(v).inserted {
                throw VaultError.usage("--env sets \(v) twice")
            }
            // Lowest first: vault's environment, then the files in order, then --env.
            var fromFiles: [(key: String, value: String, fromReference: SecretReference?)] = []
            for path in inv.all(RunOptions.envFile) {
                for (k, v) in try envFile(path) {
                    fromFiles.removeAll { $0.key == k }
                    fromFiles.append((k, v, SecretReference.looksLikeReference(v) ? try SecretReference(parsing: v) : nil))
                }
            }
            var inherited: [(key: String, value: String, fromReference: SecretReference?)] = []
            for (k, v) in ctx.environment.sorted(by: { $0.key < $1.key }) where SecretReference.looksLikeReference(v) {
                do {
                    inherited.append((k, v, try SecretReference(parsing: v)))
                } catch let e as VaultError {
                    throw VaultError.usage("environment variable \(k): \(e.message)", hint: e.hint)
                }
            }
            let layered = inherited + fromFiles.filter { f in !variables.contains { $0.key == f.key } && !bindings.contains { $0.variable == f.key } }
                + variables
            guard !bindings.isEmpty || !layered.isEmpty else {
                throw VaultError.usage("'run' has nothing to resolve: give --env VAR=NAME[.FIELD], --env-file FILE, or vault:// references in the environment",
                                       hint: "usage: \(inv.command.usage)")
            }
            let program = try ChildProgram(inv, ctx)
            let resolver = ReferenceResolver(inv, ctx, command: "run", purpose: "run \(program.name)")
            // The command's vault is opened for NAME[.FIELD] bindings only: references name their
            // own. Bindings and references are all checked before anything is released.
            let named = bindings.isEmpty ? [] : try { () throws -> [(EnvBinding, (String, ItemField))] in
                let vault = try resolver.access(nil)
                return try bindings.map { b in (b, try b.resolve(in: vault)) }
            }()
            var resolved = try resolver.resolve(layered.compactMap(\.fromReference))
            do {
                for (b, (name, field)) in named {
                    let overview = try resolver.access(nil).overview(named: name)
                    if field.isSingleSecret(of: overview.item) {
                        // A secret goes from the record into guarded memory, never a String.
                        guard overview.has(field) else { throw VaultError.failure("item '\(overview.item.name)' has no \(field) (for \(b.variable))") }
                        var secret = try resolver.releaseSecret(name, field: field.source, vault: nil)
                        // `otp` is the current code; `totp` and `totp-uri` the otpauth:// URI.
                        if field == .otp { secret = try ReferenceResolver.currentCode(of: secret, "--env \(b.variable)", item: overview.item.name) }
                        resolved.append(("--env " + b.variable, .secret(secret), true))
                        continue
                    }
                    let item = try resolver.release(name, fields: .fields([field]), vault: nil)
                    guard let value = item.value(of: field) else {
                        throw VaultError.failure("item '\(item.name)' has no \(field) (for \(b.variable))")
                    }
                    // The password history is released as text; it is still masked as a secret.
                    resolved.append(("--env " + b.variable, .bytes(Array(value.utf8)), item.isSecretField(field)))
                }
            }
            let values = try SecretValues(resolved)
            // The resolved variables go to the child as one block of `NAME=value` entries in
            // guarded memory, which its envp points into: no value becomes a String here.
            var env = ctx.environment
            let secrets = try SecretOutput()
            func export(_ name: String, _ reference: String) {
                env[name] = nil
                secrets.append(name + "=")
                values.withValue(reference) { secrets.append($0) }
                secrets.append(UInt8(0))
            }
            for v in layered {
                if let r = v.fromReference { export(v.key, r.text) } else { env[v.key] = v.value }
            }
            for b in bindings { export(b.variable, "--env " + b.variable) }
            let status = inv.has(RunOptions.noMasking) || values.longestSecret == 0
                ? try program.runInheriting(environment: env, secrets: secrets)
                : try program.runMasked(environment: env, secrets: secrets, masking: values, ctx)
            env.removeAll()
            if !status.isSuccess { throw VaultError.childExited(status: status.shellCode) }
        })

    /// The variables of a dotenv file (at most 1 MiB).
    static func envFile(_ path: String) throws -> [(key: String, value: String)] {
        let bytes: [UInt8]
        do {
            let fd = try FileDescriptor.open(path, .readOnly)
            bytes = try fd.readAll(limit: 1 << 20)
        } catch {
            throw VaultError.io(path: path, error.reason)
        }
        do {
            return try DotEnv.parse(String(decoding: bytes, as: UTF8.self))
        } catch let e as VaultError {
            throw VaultError.usage("--env-file \(path): \(e.message)", hint: e.hint)
        }
    }
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

    /// The item and field meant. `a.b.username` is field `username` of item `a.b` when that item
    /// exists; a name whose last part is no field (`github.com`) is an item name, field password.
    func resolve(in vault: any VaultAccess) throws -> (String, ItemField) {
        var candidates: [(String, ItemField)] = []
        var unknownField: (item: String, field: String)?
        if let dot = reference.lastIndex(of: "."), dot != reference.startIndex {
            let prefix = String(reference[..<dot]), suffix = String(reference[reference.index(after: dot)...])
            let field = ItemField(parsing: suffix)
            if field.isBuiltIn {
                candidates.append((try Item.normalize(name: prefix), field))
            } else if !suffix.isEmpty {
                unknownField = (prefix, suffix)
            }
        }
        candidates.append((try Item.normalize(name: reference), .password))
        for (name, field) in candidates where try vault.contains(name) {
            return (try vault.overview(named: name).item.name, field)
        }
        if let u = unknownField, let name = try? Item.normalize(name: u.item), try vault.contains(name) {
            throw VaultError.usage("--env \(variable): item '\(name)' has no field '\(u.field)'",
                                   hint: ItemField.hint(for: u.field, in: nil))
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
        closeInChild = inv[GlobalOptions.passcodeFD].flatMap { Int32($0) }.flatMap { $0 > 2 && isOpen($0) ? $0 : nil }
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

    /// Starts `spawn`, with `secrets` (`NAME=value` entries, each ended by a NUL byte, in guarded
    /// memory) added to its environment straight from there.
    func start(_ spawn: SpawnRequest, secrets: SecretOutput?) throws -> ChildProcess {
        guard let secrets else {
            do { return try ChildProcess.spawn(spawn) } catch { throw startFailure(error) }
        }
        return try secrets.withUnsafeBytes { block in
            do throws(SystemError) { return try ChildProcess.spawn(spawn, secretEnvironment: block) } catch { throw startFailure(error) }
        }
    }

    /// A failure to start the program, as the user sees it.
    func startFailure(_ error: SystemError) -> VaultError {
        .failure("cannot run \(path): \(error.reason)")
    }

    /// Runs the program on our standard input, with its standard output and error through pipes
    /// to ours, every secret of `masking` replaced by `<concealed by vault>` (a secret split
    /// across two writes too); forwards SIGINT, SIGTERM and SIGHUP to it, and returns how it
    /// ended. When our side of a stream fails (a closed pipe), its pipe is closed, so the program
    /// sees the same failure it would have seen writing there itself.
    func runMasked(environment: [String: String], secrets: SecretOutput? = nil, masking values: SecretValues,
                   _ ctx: CommandContext) throws -> ExitStatus {
        let forwarding = SignalForwarding(skipKernelSent: true)
        defer { forwarding.restore() }
        func makePipe() throws -> UnixPipe {
            do { return try UnixPipe() } catch { throw startFailure(error) }
        }
        var out = try makePipe(), err = try makePipe()
        var spawn = request(environment: environment)
        spawn.fileActions += [.dup2(from: out.writeEnd.rawValue, to: 1), .dup2(from: err.writeEnd.rawValue, to: 2)]
        spawn.defaultSignals = forwarding.forwarded
        let child = try start(spawn, secrets: secrets)
        forwarding.attach(child.pid)
        try? out.writeEnd.close()
        try? err.writeEnd.close()
        var streams = [(fd: out.readEnd.take(), sink: ctx.stdout, masker: SecretMasker(values)),
                       (fd: err.readEnd.take(), sink: ctx.stderr, masker: SecretMasker(values))]
        defer { for s in streams { closeOwned(s.fd) } }
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { wipe(&chunk) }
        func end(_ index: Int) {
            let s = streams.remove(at: index)
            s.masker.finish().withUnsafeBytes { writeBytes($0, to: s.sink) }
            closeOwned(s.fd)
        }
        while !streams.isEmpty {
            let ready = try Poll.wait(streams.map { PollRequest(fd: $0.fd, events: .readable) }, timeoutMilliseconds: -1)
            for index in ready.indices.reversed() where !ready[index].isEmpty {
                let s = streams[index]
                let n = (try? chunk.withUnsafeMutableBytes { try readSome(fd: s.fd, into: $0) }) ?? 0
                if n == 0 { end(index); continue }
                chunk.withUnsafeBytes { b in
                    s.masker.feed(UnsafeRawBufferPointer(rebasing: b[0..<n])).withUnsafeBytes { writeBytes($0, to: s.sink) }
                }
                if s.sink.failure != nil { end(index) }
            }
        }
        do { return try child.wait() } catch {
            throw VaultError.failure("cannot wait for \(path): \(error.reason)")
        }
    }

    /// Closes a descriptor taken out of a `FileDescriptor`.
    private func closeOwned(_ fd: Int32) {
        var d = FileDescriptor(owning: fd)
        try? d.close()
    }

    /// Runs the program on our standard input, output and error, forwards SIGINT, SIGTERM and
    /// SIGHUP to it, and returns how it ended.
    func runInheriting(environment: [String: String], secrets: SecretOutput? = nil) throws -> ExitStatus {
        // The child is in our process group: Ctrl-C on the terminal reaches it directly, and
        // the kernel's copy to us is not sent on a second time.
        let forwarding = SignalForwarding(skipKernelSent: true)
        defer { forwarding.restore() }
        var spawn = request(environment: environment)
        spawn.defaultSignals = forwarding.forwarded
        let child = try start(spawn, secrets: secrets)
        forwarding.attach(child.pid)
        do { return try child.wait() } catch {
            throw VaultError.failure("cannot wait for \(path): \(error.reason)")
        }
    }
}
