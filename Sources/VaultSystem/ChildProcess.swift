internal import Glibc

/// How a child process ended.
public enum ExitStatus: Equatable, Sendable, CustomStringConvertible {
    /// It called `exit` with this code (0-255).
    case exited(Int32)
    /// A signal ended it.
    case signaled(Signal)

    /// The status as a shell reports it: the exit code, or 128 + the signal number.
    public var shellCode: Int32 {
        switch self {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal.rawValue
        }
    }

    /// Whether it exited with 0.
    public var isSuccess: Bool { self == .exited(0) }

    /// `exited 3` or `killed by TERM`.
    public var description: String {
        switch self {
        case .exited(let code): "exited \(code)"
        case .signaled(let signal): "killed by \(signal)"
        }
    }

    /// The status from a raw `waitpid` status word.
    init(raw status: Int32) {
        if status & 0x7f == 0 {
            self = .exited((status >> 8) & 0xff)
        } else {
            self = .signaled(Signal(rawValue: status & 0x7f))
        }
    }
}

/// What the child does with its descriptors before the program starts (posix_spawn file actions,
/// applied in order, after ``SpawnRequest/newSession``).
public enum FileAction: Sendable, Equatable {
    /// Opens `path` as descriptor `fd`. A session leader without a terminal that opens one
    /// (without ``FileDescriptor/Options/noControllingTerminal``) makes it its controlling terminal.
    case open(Int32, String, FileDescriptor.Access, FileDescriptor.Options = [])
    /// Makes `to` a copy of `from` (`dup2`); `from` stays open unless closed or close-on-exec.
    case dup2(from: Int32, to: Int32)
    /// Closes `fd` in the child.
    case close(Int32)
}

extension FileDescriptor.Options: Equatable {}

/// Everything ``ChildProcess/spawn(_:)`` needs.
public struct SpawnRequest: Sendable {
    /// The executable's path (no `PATH` search here: see ``ProgramLookup``).
    public var path: String
    /// The whole argv, `argv[0]` included.
    public var arguments: [String]
    /// The whole environment of the child.
    public var environment: [String: String]
    /// Descriptor set-up in the child, in order.
    public var fileActions: [FileAction]
    /// Starts the child in a session of its own (`POSIX_SPAWN_SETSID`): no controlling terminal
    /// until it opens one, and terminal signals of ours do not reach it.
    public var newSession: Bool
    /// Signals set back to their default disposition in the child (`POSIX_SPAWN_SETSIGDEF`).
    /// Caught signals are reset by `exec` anyway; this matters for ignored ones: `SIGPIPE`, which
    /// vault ignores, is always in the set.
    public var defaultSignals: [Signal]

    /// A request; the child's signal mask is always empty.
    public init(path: String, arguments: [String], environment: [String: String],
                fileActions: [FileAction] = [], newSession: Bool = false, defaultSignals: [Signal] = []) {
        self.path = path
        self.arguments = arguments
        self.environment = environment
        self.fileActions = fileActions
        self.newSession = newSession
        self.defaultSignals = defaultSignals
    }
}

/// A started child program: its pid, and waiting for its end.
public struct ChildProcess: Sendable, Equatable {
    /// The child's process id.
    public let pid: Int32

    /// A child known by pid (one started elsewhere).
    public init(pid: Int32) { self.pid = pid }

    /// Starts a program with `posix_spawn`: empty signal mask, `SIGPIPE` and `defaultSignals` at
    /// their default dispositions, the file actions applied, in a new session if asked. The
    /// environment strings are wiped before their memory is freed: they may hold secrets.
    /// - Throws: ``SystemError`` for `posix_spawn` on the path (`ENOENT`, `EACCES`, `ENOEXEC`, ...).
    public static func spawn(_ request: SpawnRequest) throws(SystemError) -> ChildProcess {
        try spawn(request, secretEnvironment: UnsafeRawBufferPointer(start: nil, count: 0))
    }

    /// Starts a program as ``spawn(_:)`` does, its environment completed by `secretEnvironment`:
    /// `NAME=value` entries, each ended by a NUL byte, in memory the caller owns and keeps for the
    /// call (guarded memory: the child's `envp` points straight into it, and no copy of the
    /// values is made here). An entry replaces the request's variable of the same name.
    /// - Throws: ``SystemError`` for `posix_spawn` on the path.
    public static func spawn(_ request: SpawnRequest, secretEnvironment block: UnsafeRawBufferPointer) throws(SystemError) -> ChildProcess {
        precondition(block.isEmpty || block[block.count - 1] == 0, "every secret environment entry ends with a NUL byte")
        var secretEntries: [UnsafeMutablePointer<CChar>?] = []
        var secretNames = Set<[UInt8]>()
        var start = 0
        for i in 0..<block.count where block[i] == 0 {
            let entry = UnsafeRawBufferPointer(rebasing: block[start..<i])
            secretNames.insert(Array(entry.prefix { $0 != UInt8(ascii: "=") }))
            secretEntries.append(UnsafeMutableRawPointer(mutating: block.baseAddress!.advanced(by: start)).assumingMemoryBound(to: CChar.self))
            start = i + 1
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var flags = Int32(POSIX_SPAWN_SETSIGMASK) | Int32(POSIX_SPAWN_SETSIGDEF)
        // POSIX_SPAWN_SETSID (glibc 2.26), not exported by the Glibc module.
        if request.newSession { flags |= 0x80 }
        var none = sigset_t()
        sigemptyset(&none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in Set(request.defaultSignals + [.brokenPipe]) { sigaddset(&defaults, s.rawValue) }
        try syscallReturningCode("posix_spawnattr_setsigmask") { posix_spawnattr_setsigmask(&attributes, &none) }
        try syscallReturningCode("posix_spawnattr_setsigdefault") { posix_spawnattr_setsigdefault(&attributes, &defaults) }
        try syscallReturningCode("posix_spawnattr_setflags") { posix_spawnattr_setflags(&attributes, Int16(flags)) }

        for action in request.fileActions {
            switch action {
            case .open(let fd, let path, let access, let options):
                let oflags = access.flags | options.rawValue
                try syscallReturningCode("posix_spawn_file_actions_addopen", path: path) {
                    posix_spawn_file_actions_addopen(&actions, fd, path, oflags, 0o600)
                }
            case .dup2(let from, let to):
                try syscallReturningCode("posix_spawn_file_actions_adddup2") { posix_spawn_file_actions_adddup2(&actions, from, to) }
            case .close(let fd):
                try syscallReturningCode("posix_spawn_file_actions_addclose") { posix_spawn_file_actions_addclose(&actions, fd) }
            }
        }

        let argv = request.arguments.map { strdup($0) } + [nil]
        let owned = request.environment.filter { !secretNames.contains(Array($0.key.utf8)) }.map { strdup("\($0.key)=\($0.value)") }
        let envp = owned + secretEntries + [nil]
        defer {
            argv.forEach { free($0) }
            for p in owned {
                if let p {
                    memset(p, 0, strlen(p))
                    free(p)
                }
            }
        }
        var pid: pid_t = 0
        try syscallReturningCode(.posixSpawn, path: request.path) {
            posix_spawn(&pid, request.path, &actions, &attributes, argv, envp)
        }
        return ChildProcess(pid: pid)
    }

    /// ``spawn(_:)`` with the request's fields as arguments.
    /// - Throws: ``SystemError`` for `posix_spawn`.
    public static func spawn(path: String, arguments: [String], environment: [String: String],
                             fileActions: [FileAction] = [], newSession: Bool = false,
                             defaultSignals: [Signal] = []) throws(SystemError) -> ChildProcess {
        try spawn(SpawnRequest(path: path, arguments: arguments, environment: environment, fileActions: fileActions,
                               newSession: newSession, defaultSignals: defaultSignals))
    }

    /// Waits for the child to end (resuming after signals) and reaps it.
    /// - Throws: ``SystemError`` for `waitpid` (`ECHILD`: not our child, or already reaped).
    public func wait() throws(SystemError) -> ExitStatus {
        var status: Int32 = 0
        let pid = self.pid
        try syscall("waitpid", path: "pid \(pid)") { waitpid(pid, &status, 0) }
        return ExitStatus(raw: status)
    }

    /// The status if the child has ended (and reaps it), else nil at once.
    /// - Throws: ``SystemError`` for `waitpid`.
    public func waitNonBlocking() throws(SystemError) -> ExitStatus? {
        var status: Int32 = 0
        let pid = self.pid
        let result = try syscall("waitpid", path: "pid \(pid)") { waitpid(pid, &status, WNOHANG) }
        return result == pid ? ExitStatus(raw: status) : nil
    }

    /// Sends `signal` to the child.
    /// - Throws: ``SystemError`` for `kill`.
    public func send(_ signal: Signal) throws(SystemError) {
        try signal.send(to: pid)
    }
}

/// `execvp`'s search for the program of `run`/`login`, done before anything is unlocked.
public enum ProgramLookup: Equatable, Sendable {
    /// An executable regular file at this path.
    case found(String)
    /// No such file anywhere searched.
    case notFound
    /// The first file of that name is not an executable regular file (the shell's 126).
    case notExecutable(String)

    /// A name with a slash is a path; otherwise each `searchPath` entry in order (an empty entry
    /// is the current folder). A later executable wins over an earlier non-executable file.
    public static func find(_ name: String, searchPath: String) -> ProgramLookup {
        func kind(_ path: String) -> ProgramLookup {
            guard let status = try? FileStatus.of(path, followingLinks: true) else { return .notFound }
            guard status.kind == .regular, (try? syscall("access", path: path, { access(path, X_OK) })) != nil else {
                return .notExecutable(path)
            }
            return .found(path)
        }
        if name.contains("/") { return kind(name) }
        var denied: ProgramLookup = .notFound
        for folder in searchPath.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = (folder.isEmpty ? "." : String(folder)) + "/" + name
            switch kind(candidate) {
            case .found(let path): return .found(path)
            case .notExecutable(let path): if denied == .notFound { denied = .notExecutable(path) }
            case .notFound: break
            }
        }
        return denied
    }
}

/// What ``ChildProcess/capture(path:arguments:environment:outputLimit:errorKept:timeoutSeconds:)``
/// read of a program run to its end.
public struct CapturedRun: Sendable {
    /// How it ended.
    public var status: ExitStatus
    /// Its standard output (empty when it wrote more than the limit).
    public var output: [UInt8]
    /// The last bytes of its standard error.
    public var errorTail: [UInt8]
    /// It wrote more than the limit to its standard output: it was sent SIGTERM and its output
    /// dropped (wiped).
    public var overLimit: Bool
    /// It was still running at the timeout: it was killed (SIGKILL).
    public var timedOut: Bool
}

extension ChildProcess {
    /// Runs a program with its standard input on `/dev/null`, reading its standard output and
    /// error as it writes them (a full pipe never stalls it) and waiting for its end. Output
    /// beyond `outputLimit` bytes stops it (SIGTERM, then its output is no longer read); only the
    /// last `errorKept` bytes of its errors are kept; past `timeoutSeconds` it is killed. The
    /// output may be a secret (a decrypted entry): every copy of it made while it grew is wiped,
    /// and the caller wipes what it gets.
    /// - Throws: ``SystemError`` for `pipe2`, `posix_spawn` or `waitpid`.
    public static func capture(path: String, arguments: [String], environment: [String: String],
                               outputLimit: Int, errorKept: Int, timeoutSeconds: Double? = nil) throws(SystemError) -> CapturedRun {
        var out = try UnixPipe(), err = try UnixPipe()
        let child = try spawn(SpawnRequest(
            path: path, arguments: arguments, environment: environment,
            fileActions: [.open(0, "/dev/null", .readOnly), .dup2(from: out.writeEnd.rawValue, to: 1),
                          .dup2(from: err.writeEnd.rawValue, to: 2)]))
        try? out.writeEnd.close()
        try? err.writeEnd.close()
        var output: [UInt8] = [], errors: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        defer { wipe(&buffer) }
        var reading = (out: true, err: true)
        var over = false, timedOut = false
        let deadline = timeoutSeconds.map { MonotonicClock.seconds() + $0 }
        while reading.out || reading.err {
            var wait: Int32 = -1
            if let deadline {
                let left = deadline - MonotonicClock.seconds()
                if left <= 0 {
                    try? child.send(.kill)
                    timedOut = true
                    break
                }
                wait = Int32(min(left * 1000 + 1, 60_000))
            }
            let ready: [PollEvents]
            do {
                ready = try Poll.wait([PollRequest(fd: reading.out ? out.readEnd.rawValue : -1, events: .readable),
                                       PollRequest(fd: reading.err ? err.readEnd.rawValue : -1, events: .readable)],
                                      timeoutMilliseconds: wait)
            } catch {
                // The pipes cannot be watched: the child is not left running unread, nor unreaped.
                wipe(&output)
                try? child.send(.kill)
                _ = try? child.wait()
                throw error
            }
            if reading.out, !ready[0].isEmpty {
                let n = buffer.withUnsafeMutableBytes { (try? out.readEnd.read(into: $0)) ?? 0 }
                if n == 0 {
                    reading.out = false
                } else if output.count + n > outputLimit {
                    over = true
                    wipe(&output)
                    try? child.send(.terminate)
                    // Not read any more: closed, so a child that goes on writing gets EPIPE.
                    try? out.readEnd.close()
                    reading.out = false
                } else {
                    if output.count + n > output.capacity {
                        var grown: [UInt8] = []
                        grown.reserveCapacity(max(2 * output.capacity, output.count + n, 4096))
                        grown += output
                        wipe(&output)
                        output = grown
                    }
                    output += buffer[..<n]
                }
            }
            if reading.err, !ready[1].isEmpty {
                let n = buffer.withUnsafeMutableBytes { (try? err.readEnd.read(into: $0)) ?? 0 }
                if n == 0 {
                    reading.err = false
                } else {
                    errors += buffer[..<n]
                    if errors.count > errorKept { errors.removeFirst(errors.count - errorKept) }
                }
            }
        }
        let status = try child.wait()
        return CapturedRun(status: status, output: output, errorTail: errors, overLimit: over, timedOut: timedOut)
    }
}
