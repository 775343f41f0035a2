internal import Glibc
internal import VaultKit

/// Temporary until VaultSystem's child processes and signals land: starting the agent detached,
/// and ignoring SIGPIPE.
enum AgentLauncher {
    /// Starts `path` in a session of its own, stdio on /dev/null, with an empty environment.
    static func spawnDetached(path: String, arguments: [String]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setflags(&attr, Int16(0x80)) // POSIX_SPAWN_SETSID
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp: [UnsafeMutablePointer<CChar>?] = [nil]
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attr, argv, envp)
        guard rc == 0 else { throw VaultError.failure("could not start the agent: \(String(cString: strerror(rc)))") }
    }

    static func ignoreSIGPIPE() { signal(SIGPIPE, SIG_IGN) }
}
