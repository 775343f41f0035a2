import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// `vault-ssh-agent` (what `vault ssh-agent` runs): OpenSSH ssh-agent's command line,
///   `[-c | -s] [-Dd] [-a SOCKET] [-E HASH] [-O OPTION] [-P PROVIDERS] [-t LIFE] [COMMAND [ARG...]]`
/// and `-k`, with the same lines printed, the same detaching and the same socket place, so a
/// program that starts ssh-agent can start it instead.
public enum SSHAgentMain {
    static let usage = """
    usage: vault ssh-agent [--vault NAME]... [-c | -s] [-Dd] [-a bind_address] [-E fingerprint_hash]
                           [-O option] [-P allowed_providers] [-t life]
           vault ssh-agent [-a bind_address] [-E fingerprint_hash] [-O option]
                           [-P allowed_providers] [-t life] command [arg ...]
           vault ssh-agent [-c | -s] -k
    """

    /// The options, as ssh-agent's getopt string `cDdksE:a:O:P:t:` reads them.
    struct Options {
        var csh: Bool?
        var foreground = false
        var debug = false
        var kill = false
        var socket: String?
        var fingerprintHash = "sha256"
        var lifetime: UInt32?
        var command: [String] = []
        /// `--vault NAME` (repeatable): whose keys are offered; none given, the default vault.
        var vaults: [String] = []
    }

    /// The hidden form the detached agent is started with: `--daemon SOCKET FOLDER LIFE HASH PARENT`
    /// (FOLDER, LIFE and PARENT `-` for none), the listening socket as descriptor 3.
    static let daemonFlag = "--daemon"

    /// Runs with `arguments` (the program name first); returns the exit code. `notifier` shows
    /// a touch prompt on the desktop (the program passes VaultDBus's notifications).
    public static func run(_ arguments: [String], notifier: TouchPrompt.Notifier? = nil) -> Int32 {
        let args = Array(arguments.dropFirst())
        if args.first == daemonFlag { return daemon(Array(args.dropFirst()), notifier: notifier) }
        let options: Options
        do { options = try parse(args) } catch {
            print(error: "\(error)")
            print(error: usage)
            return 1
        }
        let env = ProcessInfo.processInfo.environment
        let csh = options.csh ?? (env["SHELL"].map { $0.hasSuffix("csh") } ?? false)
        if options.kill { return kill(csh: csh, environment: env) }
        return start(options, csh: csh, environment: env, notifier: notifier)
    }

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    static func parse(_ given: [String]) throws -> Options {
        var o = Options()
        // vault's own long option, before ssh-agent's: `--vault NAME` or `--vault=NAME`.
        var args: [String] = []
        var k = 0
        while k < given.count {
            let a = given[k]
            if a == "--" || (!a.hasPrefix("-") && !args.isEmpty && !["-a", "-E", "-O", "-P", "-t"].contains(args.last!)) { args += given[k...]; break }
            if a == "--vault" {
                guard k + 1 < given.count else { throw UsageError(description: "--vault requires a vault name") }
                o.vaults.append(given[k + 1])
                k += 2
                continue
            }
            if a.hasPrefix("--vault=") { o.vaults.append(String(a.dropFirst(8))); k += 1; continue }
            args.append(a)
            k += 1
        }
        var i = 0
        parsing: while i < args.count {
            let a = args[i]
            guard a.hasPrefix("-"), a.count > 1 else { break }
            if a == "--" { i += 1; break }
            var chars = Array(a.dropFirst())
            while !chars.isEmpty {
                let c = chars.removeFirst()
                switch c {
                case "c": o.csh = true
                case "s": o.csh = false
                case "D": o.foreground = true
                case "d": o.debug = true
                case "k": o.kill = true
                case "E", "a", "O", "P", "t":
                    let value: String
                    if !chars.isEmpty { value = String(chars); chars = [] } else {
                        i += 1
                        guard i < args.count else { throw UsageError(description: "option requires an argument -- \(c)") }
                        value = args[i]
                    }
                    switch c {
                    case "E":
                        guard ["sha256", "sha512", "md5"].contains(value) else { throw UsageError(description: "Invalid hash algorithm \"\(value)\"") }
                        o.fingerprintHash = value
                    case "a": o.socket = value
                    case "t":
                        guard let life = parseLifetime(value) else { throw UsageError(description: "Invalid lifetime") }
                        o.lifetime = life
                    case "P":
                        break // PKCS#11 providers: vault loads none (smartcard requests fail).
                    default:
                        guard ["no-restrict-websafe", "allow-remote-pkcs11"].contains(value) || value.hasPrefix("websafe-allow=") else {
                            throw UsageError(description: "Unknown -O option")
                        }
                    }
                default:
                    throw UsageError(description: "illegal option -- \(c)")
                }
            }
            i += 1
            continue parsing
        }
        o.command = Array(args[i...])
        if o.kill, !o.command.isEmpty || o.foreground || o.debug { throw UsageError(description: "-k takes no command") }
        if o.foreground && o.debug { throw UsageError(description: "-d and -D cannot be used together") }
        if !o.command.isEmpty && (o.foreground || o.debug) { throw UsageError(description: "a command cannot run with -d or -D") }
        return o
    }

    /// OpenSSH's time format (`convtime`): seconds, or a sequence of NUMBER[smhdwSMHDW].
    static func parseLifetime(_ text: String) -> UInt32? {
        var total: UInt64 = 0, number: UInt64 = 0, digits = 0
        for c in text {
            if let d = c.wholeNumberValue, c.isASCII {
                number = number * 10 + UInt64(d)
                digits += 1
                guard number < 1 << 32 else { return nil }
                continue
            }
            guard digits > 0 else { return nil }
            let unit: UInt64
            switch c.lowercased() {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86400
            case "w": unit = 604800
            default: return nil
            }
            total += number * unit
            number = 0
            digits = 0
        }
        total += number
        guard !text.isEmpty, total > 0, total < 1 << 32 else { return nil }
        return UInt32(total)
    }

    private static func print(error text: String) {
        try? writeAll(fd: 2, bytes: Array("vault-ssh-agent: \(text)\n".utf8), label: "standard error")
    }

    private static func out(_ text: String) {
        try? writeAll(fd: 1, bytes: Array(text.utf8), label: "standard output")
    }

    private static func kill(csh: Bool, environment: [String: String]) -> Int32 {
        guard let text = environment["SSH_AGENT_PID"], !text.isEmpty else {
            print(error: "SSH_AGENT_PID not set, cannot kill agent")
            return 1
        }
        guard let pid = Int32(text), pid >= 2 else {
            print(error: "SSH_AGENT_PID=\"\(text)\", which is not a good PID")
            return 1
        }
        do { try Signal.terminate.send(to: pid) } catch {
            print(error: "kill: \(error.reason)")
            return 1
        }
        out(csh ? "unsetenv SSH_AUTH_SOCK;\nunsetenv SSH_AGENT_PID;\n" : "unset SSH_AUTH_SOCK;\nunset SSH_AGENT_PID;\n")
        out("echo Agent pid \(pid) killed;\n")
        return 0
    }

    /// Six random letters: with mkdtemp's six, the folder has twelve, as OpenSSH's has.
    private static func randomName() -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        return String(randomBytes(6).map { letters[Int($0) % letters.count] })
    }

    private static func shellLine(_ name: String, _ value: String, csh: Bool) -> String {
        csh ? "setenv \(name) \(value);\n" : "\(name)=\(value); export \(name);\n"
    }

    private static func start(_ o: Options, csh: Bool, environment: [String: String], notifier: TouchPrompt.Notifier?) -> Int32 {
        ProcessIdentity.restrictFileCreation()
        let pid = ProcessIdentity.pid
        var folder: String?
        let socketPath: String
        if let given = o.socket {
            socketPath = given.hasPrefix("/") ? given : (ProcessReplacement.currentDirectory() ?? ".") + "/" + given
        } else {
            let tmp = environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
            do {
                folder = try ProcessReplacement.makeTemporaryFolder(prefix: tmp + "/ssh-" + randomName())
            } catch {
                print(error: "mkdtemp: private socket dir: \(error.reason)")
                return 1
            }
            socketPath = folder! + "/agent.\(pid)"
        }
        let listener: UnixSocket
        do { listener = try UnixSocket.listen(path: socketPath, backlog: 128) } catch {
            print(error: "bind: \(error.reason)")
            if let folder { try? FileSystem.removeFolder(folder) }
            return 1
        }
        if o.foreground || o.debug {
            out(shellLine("SSH_AUTH_SOCK", socketPath, csh: csh))
            out("echo Agent pid \(pid);\n")
            ExitCleanup.install(removing: socketPath, folder: folder, on: [.terminate, .hangUp, .interrupt])
            return serve(listener, lifetime: o.lifetime, hash: o.fingerprintHash, parent: nil, debug: o.debug, vaults: o.vaults, notifier: notifier)
        }
        // Detach: the agent is a child in a session of its own with the socket as descriptor 3
        // and /dev/null for its standard streams; this process prints its lines or runs COMMAND.
        let me = (try? ProcessIdentity.executable(of: pid)) ?? CommandLine.arguments[0]
        let daemonArgs = [me, daemonFlag, socketPath, folder ?? "-", o.lifetime.map(String.init) ?? "-", o.fingerprintHash,
                          o.command.isEmpty ? "-" : String(pid)] + o.vaults
        let request = SpawnRequest(path: me, arguments: daemonArgs, environment: environment,
                                   fileActions: [.dup2(from: listener.rawValue, to: 3), .open(0, "/dev/null", .readOnly),
                                                 .open(1, "/dev/null", .writeOnly), .open(2, "/dev/null", .writeOnly)],
                                   newSession: true)
        let child: ChildProcess
        do { child = try ChildProcess.spawn(request) } catch {
            print(error: "fork: \(error.reason)")
            try? FileSystem.remove(socketPath)
            if let folder { try? FileSystem.removeFolder(folder) }
            return 1
        }
        if o.command.isEmpty {
            out(shellLine("SSH_AUTH_SOCK", socketPath, csh: csh))
            out(shellLine("SSH_AGENT_PID", String(child.pid), csh: csh))
            out("echo Agent pid \(child.pid);\n")
            return 0
        }
        var env = environment
        env["SSH_AUTH_SOCK"] = socketPath
        env["SSH_AGENT_PID"] = String(child.pid)
        guard case .found(let program) = ProgramLookup.find(o.command[0], searchPath: env["PATH"] ?? "/usr/bin:/bin") else {
            print(error: "\(o.command[0]): No such file or directory")
            return 1
        }
        do { try ProcessReplacement.exec(program, arguments: o.command, environment: env) } catch {
            print(error: "\(o.command[0]): \(error.reason)")
            return 1
        }
    }

    /// The detached agent: `--daemon SOCKET FOLDER LIFE HASH PARENT`, the socket as descriptor 3.
    private static func daemon(_ args: [String], notifier: TouchPrompt.Notifier?) -> Int32 {
        guard args.count >= 5 else { return 2 }
        let folder = args[1] == "-" ? nil : args[1]
        ExitCleanup.install(removing: args[0], folder: folder, on: [.terminate, .hangUp])
        _ = try? ProcessReplacement.changeDirectory("/")
        // `dup2` placed it without FD_CLOEXEC: the `vault get` of a release must not inherit it.
        do { try setCloseOnExec(fd: 3, label: args[0]) } catch {
            print(error: "the listening socket: \(error.reason)")
            ExitCleanup.run()
            return 1
        }
        let listener = UnixSocket(owning: 3, path: args[0])
        // The peer credentials of a connection are the listener's at `listen`: this process's, not
        // those of the one that bound the socket and has exited (`vault doctor` reads them).
        try? listener.listenAgain(backlog: 128)
        let status = serve(listener, lifetime: UInt32(args[2]), hash: args[3], parent: Int32(args[4]), debug: false, vaults: Array(args[5...]),
                           notifier: notifier)
        return status
    }

    @Sendable private static func debugLine(_ line: String) {
        try? writeAll(fd: 2, bytes: Array("debug1: \(line)\n".utf8), label: "standard error")
    }

    /// The `vault` program beside this one (what releases a vault key).
    static func vaultProgram() -> String {
        return ProcessIdentity.siblingProgram("vault")
    }

    private static func serve(_ listener: consuming UnixSocket, lifetime: UInt32?, hash: String, parent: Int32?, debug: Bool,
                              vaults: [String], notifier: TouchPrompt.Notifier?) -> Int32 {
        do { try ProcessHardening.disableCoreDumps() } catch {
            print(error: "cannot turn off core dumps: \(error.reason)")
            ExitCleanup.run()
            return 1
        }
        _ = ignoreBrokenPipe()
        let log: (@Sendable (String) -> Void)? = debug ? debugLine : nil
        let keys = VaultKeys(vaults: vaults, environment: ProcessInfo.processInfo.environment, program: vaultProgram(), log: log,
                             notifier: notifier)
        let handler = AgentHandler(store: AgentKeyStore(defaultLifetime: lifetime), fingerprintHash: hash, log: log, vaultKeys: keys)
        SSHAgentServer(listening: listener, handler: handler, parentPID: parent, log: log).run()
        ExitCleanup.run()
        return 0
    }
}
