import VaultKit
import VaultSystem

/// A recovery key shown on a person's screen (standard output is the terminal): vault waits
/// until it is written down, then erases it from the screen where the terminal allows (cursor
/// up and erase to the end of the screen; not with `TERM=dumb`, which is told to clear it by
/// hand). A key written to a file or a pipe is not on a screen: nothing is asked.
enum RecoveryKeyScreen {
    /// Asks for Enter, then erases the lines from the key down.
    /// - Throws: `.userCancel` when the terminal ends or Ctrl-C is pressed before Enter
    ///   (`vault init` then creates nothing: the key on the screen would open no vault).
    static func waitAndClear(_ key: String, _ inv: Invocation?, _ ctx: CommandContext) throws {
        guard ctx.stdout.isTerminal, ctx.terminal.isAvailable, inv?.noInput != true else { return }
        let prompt = "vault: press Enter once it is written down "
        guard ctx.terminal.readLine(prompt: prompt) != nil, !ctx.interrupted() else { throw VaultError.userCancel }
        guard ctx.environment["TERM"] != "dumb", !(ctx.environment["TERM"] ?? "").isEmpty else {
            ctx.say("vault: clear the screen now (the recovery key is on it)")
            return
        }
        let columns = max(1, Int((try? WindowSize.get(ctx.terminal.inputFD))?.columns ?? 80))
        func rows(_ text: String) -> Int { max(1, (text.count + columns - 1) / columns) }
        let lines = rows(key) + rows(prompt)
        // Up to the key's first line, then erase from there to the end of the screen.
        ctx.terminal.write("\u{1b}[\(lines)A\r\u{1b}[J")
        ctx.say("vault: the recovery key was cleared from the screen")
    }
}
