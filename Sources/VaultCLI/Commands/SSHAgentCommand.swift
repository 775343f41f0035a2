internal import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// `vault ssh-agent ARGS...`: replaced by `vault-ssh-agent ARGS...` from the folder of the running
/// executable (`execve`, the same pid), before the command table parses anything: its command
/// line is OpenSSH ssh-agent's (`-s`, `-k`, `-a SOCKET`, `COMMAND...`), not vault's, and the SSH
/// keys and libcrypto then live in that lean process, never in `vault`.
enum SSHAgentCommand {
    /// The program run: `vault-ssh-agent` beside the running executable.
    static func programPath() -> String {
        return ProcessIdentity.siblingProgram("vault-ssh-agent")
    }

    /// Runs `vault-ssh-agent` in place of this process; returns only when it cannot (exit 1,
    /// the reason on standard error).
    static func exec(_ arguments: [String]) -> Int32 {
        let program = programPath()
        do {
            try ProcessReplacement.exec(program, arguments: [program] + arguments, environment: ProcessInfo.processInfo.environment)
        } catch {
            let text = "vault: error: cannot run \(program): \(error.reason)\nvault: hint: install vault-ssh-agent beside vault\n"
            try? writeAll(fd: 2, bytes: Array(text.utf8), label: "standard error")
            return 1
        }
    }
}
