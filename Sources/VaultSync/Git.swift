import FoundationEssentials
import VaultKit
import VaultSystem

/// What one run of `git` gave back.
struct GitOutput {
    /// How it ended.
    var status: ExitStatus
    /// Everything it wrote to standard output.
    var stdout: [UInt8]
    /// Its standard error, as text (for messages; never holds a secret: git sees sealed data only).
    var stderr: String

    /// Standard output as text, without the final newline.
    var text: String { String(decoding: stdout, as: UTF8.self).trimmed(.newlines) }
}

/// Runs `git` (Debian's, found on `PATH`) as a program on one bare repository, through
/// VaultSystem's one child-process path. Every run disables what a repository's configuration
/// could make git run (hooks, fsmonitor, external transports) and checks every object it fetches;
/// the user's own configuration (credentials, ssh, URL rewrites) still applies.
struct Git {
    /// The bare repository (`ROOT/NAME/sync.git`).
    let repository: String
    /// The path of the `git` program.
    let program: String
    /// The environment git runs with.
    let environment: [String: String]

    /// Options given before every subcommand.
    static let safety: [String] = [
        "-c", "core.hooksPath=/dev/null",
        "-c", "core.fsmonitor=false",
        "-c", "protocol.ext.allow=never",
        "-c", "transfer.fsckObjects=true",
        "-c", "fetch.fsckObjects=true",
        "-c", "receive.fsckObjects=true",
        "-c", "gc.autoDetach=false",
        "-c", "core.autocrlf=false",
        "-c", "commit.gpgSign=false",
        "-c", "init.defaultBranch=vault",
        // Sealed files do not compress and never delta against each other: git's zlib and
        // delta search were a third of a first sync's CPU for nothing.
        "-c", "core.compression=0",
        "-c", "pack.window=0",
    ]

    /// A runner for `repository`, with `git` looked up on the caller's `PATH`.
    /// - Throws: `.failure` when no git program is found.
    init(repository: String, environment base: [String: String], interactive: Bool) throws {
        guard case .found(let path) = ProgramLookup.find("git", searchPath: base["PATH"] ?? "/usr/bin:/bin") else {
            throw VaultError.failure("no 'git' program on PATH: vault syncs through git", hint: "install it: apt install git")
        }
        program = path
        self.repository = repository
        var env = base
        // Variables that would point git at another repository or another configuration than
        // the user's own are dropped; the rest (HOME, SSH_AUTH_SOCK, GIT_SSH_COMMAND, proxies) stay.
        for name in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                     "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES",
                     "GIT_EXTERNAL_DIFF", "GIT_EXEC_PATH", "GIT_TRACE", "GIT_TRACE_PACKET", "GIT_TRACE_CURL"] {
            env[name] = nil
        }
        env["LC_ALL"] = "C"
        env["GIT_PAGER"] = "cat"
        if !interactive { env["GIT_TERMINAL_PROMPT"] = "0" }
        environment = env
    }

    /// The options before every subcommand.
    private var prefix: [String] { Git.safety + ["--git-dir=" + repository] }

    /// Runs `git ARGS` with `input` on its standard input (and `extra` added to its
    /// environment: a temporary index file); waits for it.
    /// - Throws: `.io` when it cannot be started or its output not read.
    func run(_ arguments: [String], input: [UInt8] = [], extra: [String: String] = [:]) throws -> GitOutput {
        let scratch = repository + "/vault-tmp-" + hexString(randomBytes(8))
        let inputPath = scratch + ".in", errorPath = scratch + ".err"
        defer {
            try? FileSystem.remove(inputPath)
            try? FileSystem.remove(errorPath)
        }
        do {
            try AtomicFile.write(input, to: inputPath)
            var pipe = try UnixPipe()
            let child = try ChildProcess.spawn(SpawnRequest(
                path: program, arguments: ["git"] + prefix + arguments, environment: environment.merging(extra) { _, new in new },
                fileActions: [.open(0, inputPath, .readOnly), .dup2(from: pipe.writeEnd.rawValue, to: 1),
                              .open(2, errorPath, .writeOnly, [.create, .truncate])]))
            try pipe.writeEnd.close()
            let out: [UInt8]
            do { out = try pipe.readEnd.readAll(limit: 1 << 34) } catch {
                try? child.send(.kill)
                _ = try? child.wait()
                throw error
            }
            let status = try child.wait()
            let err = (try? PrivateFiles.read(errorPath, limit: 1 << 20)) ?? []
            return GitOutput(status: status, stdout: out, stderr: String(decoding: err, as: UTF8.self))
        } catch let e as SystemError {
            throw VaultError.io(path: repository, "git: \(e)")
        }
    }

    /// Runs `git ARGS` and returns its output, or throws naming the command and git's message.
    /// - Throws: `.failure` when git fails.
    @discardableResult
    func checked(_ arguments: [String], input: [UInt8] = [], extra: [String: String] = [:]) throws -> GitOutput {
        let out = try run(arguments, input: input, extra: extra)
        guard out.status.isSuccess else {
            let message = out.stderr.split(separator: "\n").last.map(String.init) ?? "\(out.status)"
            throw VaultError.failure("git \(arguments.first ?? "") failed: \(message)")
        }
        return out
    }
}
