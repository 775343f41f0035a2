internal import Glibc

/// Replacing this process's program, and the process-wide calls a daemon makes as it detaches.
public enum ProcessReplacement {
    /// Runs `path` in place of this program (`execve`): the pid stays, nothing of this program
    /// runs after a success. Descriptors without close-on-exec stay open in the new program.
    /// - Throws: ``SystemError`` for `execve` (it returns only on failure).
    public static func exec(_ path: String, arguments: [String], environment: [String: String]) throws(SystemError) -> Never {
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        _ = execve(path, &argv, &envp)
        let code = errno
        for p in argv { free(p) }
        for p in envp { free(p) }
        throw SystemError(call: "execve", path: path, code: code)
    }

    /// Makes `path` the current folder (`chdir`).
    /// - Throws: ``SystemError`` for `chdir`.
    public static func changeDirectory(_ path: String) throws(SystemError) {
        try syscall("chdir", path: path) { chdir(path) }
    }

    /// The current folder (`getcwd`), nil when it cannot be read.
    public static func currentDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getcwd(&buffer, buffer.count) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A new private folder `prefix` + 6 random characters (`mkdtemp`, mode 0700).
    /// - Throws: ``SystemError`` for `mkdtemp`.
    public static func makeTemporaryFolder(prefix: String) throws(SystemError) -> String {
        var template = Array((prefix + "XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) != nil }
        guard made else { throw SystemError(call: "mkdtemp", path: prefix, code: errno) }
        return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Paths a daemon removes when a signal ends it (its socket and the folder made for it), in a
/// handler that does only async-signal-safe work: `unlink`, `rmdir`, `_exit(0)`.
public enum ExitCleanup {
    nonisolated(unsafe) private static var file: UnsafeMutablePointer<CChar>?
    nonisolated(unsafe) private static var folder: UnsafeMutablePointer<CChar>?

    /// Removes `file` and then `folder` (when given) when one of `signals` comes, then exits 0.
    /// Call once, before any thread starts.
    public static func install(removing file: String, folder: String?, on signals: [Signal]) {
        Self.file = strdup(file)
        Self.folder = folder.map { strdup($0) }
        for s in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { _ in
                ExitCleanup.run()
                _exit(0)
            }
            sigemptyset(&action.sa_mask)
            _ = sigaction(s.rawValue, &action, nil)
        }
        Signal.unblock(signals)
    }

    /// Removes the paths now (a normal end calls this too).
    public static func run() {
        if let file { _ = unlink(file) }
        if let folder { _ = rmdir(folder) }
    }
}
