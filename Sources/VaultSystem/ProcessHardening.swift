internal import Glibc

/// prctl(2) is variadic in C, which Swift cannot call; this binds the symbol with a fixed prototype
/// (all integer arguments, valid for the Linux calling conventions Swift runs on).
@_silgen_name("prctl")
private func prctl5(_ option: Int32, _ a2: UInt, _ a3: UInt, _ a4: UInt, _ a5: UInt) -> Int32

/// close_range(2) (Linux 5.9, glibc 2.34), bound by name: the Glibc module does not export it.
@_silgen_name("close_range")
private func closeRange(_ first: UInt32, _ last: UInt32, _ flags: Int32) -> Int32

/// Keeping secrets out of core dumps, `ptrace` and inherited descriptors.
public enum ProcessHardening {
    /// No core file and no same-uid `ptrace`/`/proc/PID/mem` (`PR_SET_DUMPABLE` 0), and a core
    /// size limit of 0 (`RLIMIT_CORE`).
    /// - Throws: ``SystemError`` for `prctl` or `setrlimit`.
    public static func disableCoreDumps() throws(SystemError) {
        try syscall("prctl") { prctl5(4 /* PR_SET_DUMPABLE */, 0, 0, 0, 0) }
        var limit = rlimit(rlim_cur: 0, rlim_max: 0)
        try syscall("setrlimit") { setrlimit(Int32(RLIMIT_CORE.rawValue), &limit) }
    }

    /// Whether the process is dumpable (`PR_GET_DUMPABLE`).
    public static var isDumpable: Bool {
        prctl5(3 /* PR_GET_DUMPABLE */, 0, 0, 0, 0) == 1
    }

    /// Closes every descriptor from `first` up: what the starting process left open (pipes of
    /// its own caller) is not ours to hold, and holding it keeps those pipes from ending.
    /// One `close_range(2)` call; where the kernel has none (before 5.9), one `close` per
    /// descriptor up to the open-files limit (20,000 calls at a limit of 20,000; about 0.2 s at
    /// the 1,048,576 systemd user sessions often set, hence the cap).
    public static func closeInheritedDescriptors(from first: Int32 = 3) {
        guard first >= 0 else { return }
        if closeRange(UInt32(first), UInt32.max, 0) == 0 { return }
        let end = Int32(min(Int(getdtablesize()), 65536))
        guard first < end else { return }
        for fd in first..<end { _ = close(fd) }
    }
}

/// Who and where this process is: for peer checks and the "first unlock after a reboot" rule.
public enum ProcessIdentity {
    /// Sets the file-creation mask to 077 for the whole process (every file and folder vault
    /// makes is private unless it says otherwise). Call once at start, before threads.
    public static func restrictFileCreation() {
        umask(0o077)
    }

    /// The real user id.
    public static var uid: UInt32 { getuid() }
    /// The effective user id.
    public static var effectiveUID: UInt32 { geteuid() }
    /// The process id.
    public static var pid: Int32 { getpid() }
    /// The parent's process id.
    public static var parentPID: Int32 { getppid() }

    /// The login name of `uid` (`getpwuid_r`), nil when the user database has none (or cannot
    /// be read).
    public static func userName(of uid: UInt32) -> String? {
        if case .account(let name) = lookUpUser(uid) { return name }
        return nil
    }

    /// What the user database says of `uid` (`getpwuid_r`, through NSS: `/etc/passwd`, sssd,
    /// LDAP...). A uid of a subordinate range (`/etc/subuid`) or of a deleted user has no
    /// account; a backend that fails says nothing either way (`.unknown`).
    public static func lookUpUser(_ uid: UInt32) -> UserLookup {
        passwdEntry(uid) { String(cString: $0.pw_name) }
    }

    /// The home folder the user database gives `uid` (`pw_dir`), nil when it has no account for
    /// it (Foundation's `NSHomeDirectory()` for the running user).
    public static func homeDirectory(of uid: UInt32) -> String? {
        if case .account(let home) = passwdEntry(uid, { $0.pw_dir.map { String(cString: $0) } ?? "" }), !home.isEmpty {
            return home
        }
        return nil
    }

    /// The running executable's path (`/proc/self/exe`; `argv[0]` where that cannot be read).
    public static var runningExecutable: String {
        (try? executable(of: getpid())) ?? CommandLine.arguments[0]
    }

    /// The program called `name` in the folder of the running executable (`/proc/self/exe`;
    /// `argv[0]` where that cannot be read): how vault finds its helper processes.
    public static func siblingProgram(_ name: String) -> String {
        let folder = PathText.folder(of: runningExecutable)
        return (folder.isEmpty ? "." : folder) + "/" + name
    }

    /// `read` of `uid`'s user-database entry, `.account(read(entry))` when there is one.
    private static func passwdEntry(_ uid: UInt32, _ read: (passwd) -> String) -> UserLookup {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var size = 16384
        while true {
            var buffer = [CChar](repeating: 0, count: size)
            let code = getpwuid_r(uid, &entry, &buffer, buffer.count, &found)
            if code == ERANGE && size < 1 << 20 {
                size *= 4
                continue
            }
            // glibc reports "no such entry" as 0 with no result; anything else (ENOENT included:
            // nss_files says so when it cannot open /etc/passwd) is a failure, not an answer.
            if code == 0 {
                guard found != nil, entry.pw_name != nil else { return .noAccount }
                return .account(name: read(entry))
            }
            return .unknown(SystemError(call: "getpwuid_r", path: "uid \(uid)", code: code))
        }
    }

    /// The executable process `pid` runs, as the kernel links it (`readlink` of
    /// `/proc/PID/exe`; " (deleted)" ends it when the file was removed since). The kernel allows
    /// it for a process that may ptrace-read the other: the same uid, unless the other made
    /// itself not dumpable (then only root).
    /// - Throws: ``SystemError`` for `readlink` (`EACCES`, `ENOENT` for a process gone).
    public static func executable(of pid: Int32) throws(SystemError) -> String {
        let path = "/proc/\(pid)/exe"
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = try syscall("readlink", path: path) { readlink(path, &buffer, buffer.count) }
        guard n < buffer.count else { throw SystemError(call: "readlink", path: path, code: ENAMETOOLONG) }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The terminal session process `pid` belongs to (`/proc/PID/stat`: its session id and its
    /// controlling terminal's device number, 0 for none), as the kernel reports it; readable for
    /// any process, non-dumpable ones too.
    /// - Throws: ``SystemError`` for `open`/`read` (`ENOENT` for a process gone); `EPROTO` for a
    ///   line that cannot be read.
    public static func terminalSession(of pid: Int32) throws(SystemError) -> (sessionID: Int32, terminal: Int32) {
        let path = "/proc/\(pid)/stat"
        let bytes = try FileDescriptor.open(path, .readOnly).readAll(limit: 4096)
        // "pid (comm) state ppid pgrp session tty_nr ...": comm may hold anything, even ')'.
        guard let close = bytes.lastIndex(of: UInt8(ascii: ")")) else { throw SystemError(call: "read", path: path, code: EPROTO) }
        // The fields after it, split on spaces (runs of them count as one) and read as bytes: a
        // String split walks Characters (the agent asks this at every request).
        let fields = bytes[(close + 1)...].split(separator: UInt8(ascii: " "), maxSplits: 5)
        guard fields.count > 4, let session = Int32(decimal: fields[3]), let tty = Int32(decimal: fields[4]) else {
            throw SystemError(call: "read", path: path, code: EPROTO)
        }
        return (session, tty)
    }

    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`, a UUID that changes on every boot).
    /// - Throws: ``SystemError`` for `open`/`read`; `EPROTO` when the file is empty.
    public static func bootID() throws(SystemError) -> String {
        let path = "/proc/sys/kernel/random/boot_id"
        let bytes = try FileDescriptor.open(path, .readOnly).readAll(limit: 256)
        let text = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
        guard !text.isEmpty else { throw SystemError(call: "read", path: path, code: EPROTO) }
        return text
    }
}

/// What the user database says of a uid (``ProcessIdentity/lookUpUser(_:)``).
public enum UserLookup: Equatable, Sendable {
    /// An account has that uid; its login name.
    case account(name: String)
    /// No account has that uid: a uid of a subordinate range, or of a deleted user.
    case noAccount
    /// The database could not be read (an NSS backend failed): nothing is known of the uid.
    case unknown(SystemError)
}

/// Ending the process (only `main` does).
public enum ProcessExit {
    /// Exits with `code` (`exit(3)`: atexit handlers and stdio flushed).
    public static func exit(_ code: Int32) -> Never { Glibc.exit(code) }
}

extension Int32 {
    /// An optionally signed decimal number in ASCII bytes, as `Int32(String)` reads it (nil for
    /// anything else, or past the type's range).
    init?(decimal bytes: ArraySlice<UInt8>) {
        var rest = bytes[...]
        let negative = rest.first == UInt8(ascii: "-")
        if negative || rest.first == UInt8(ascii: "+") { rest = rest.dropFirst() }
        guard !rest.isEmpty else { return nil }
        var value: Int64 = 0
        for b in rest {
            guard b >= UInt8(ascii: "0"), b <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(b - UInt8(ascii: "0"))
            guard value <= Int64(Int32.max) + 1 else { return nil }
        }
        if negative { value = -value }
        guard let v = Int32(exactly: value) else { return nil }
        self = v
    }
}
