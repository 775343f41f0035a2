import FoundationEssentials
import VaultKit

enum RotateCommand {
    /// The options of `rotate`, declared once: the table lists them and the command reads them.
    enum RotateOptions {
        static let newRecoveryKey = OptionSpec.flag("--new-recovery-key", "also replace the recovery key (the new one is printed once on stdout)")
        static let recovery = OptionSpec.flag("--recovery", "authenticate with the recovery key instead of the passcode (then a new passcode is set)")
        static let recoveryKeyFD = OptionSpec.value("--recovery-key-fd", "N", "read the recovery key from file descriptor N (implies --recovery)")
        static let newPasscodeFD = OptionSpec.value("--new-passcode-fd", "M", "read the new passcode from file descriptor M")
        static let kdfMemory = OptionSpec.value("--kdf-memory", "MIB", "new Argon2id memory for the passcode slot")
        static let kdfOps = OptionSpec.value("--kdf-ops", "N", "new Argon2id passes")
    }

    static let rotate = CommandSpec(
        name: "rotate", summary: "replace the vault's keys: re-seal every item, re-make every slot (needs the passcode or recovery key)",
        usage: "vault rotate [--new-recovery-key] [--recovery-key-fd N --new-passcode-fd M] [--kdf-memory MIB] [--kdf-ops N]",
        options: [
            RotateOptions.newRecoveryKey,
            RotateOptions.recovery,
            RotateOptions.recoveryKeyFD,
            RotateOptions.newPasscodeFD,
            RotateOptions.kdfMemory,
            RotateOptions.kdfOps,
        ],
        examples: """
        vault rotate
        vault rotate --new-recovery-key --passcode-fd 3 3<passcode > new-recovery-key.txt
        vault rotate --recovery-key-fd 3 --new-passcode-fd 4 3<key.txt 4<new-passcode
        """,
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let kdf = try kdfParameters(inv)
            if inv.has(RotateOptions.recovery) || inv.has(RotateOptions.recoveryKeyFD) {
                let vault = try Auth.unlockWithRecoveryKey(store, inv, ctx)
                let passcode = try SecretInput.newPasscode(ctx, inv, fdOption: RotateOptions.newPasscodeFD)
                try rotate(vault, passcode: passcode, kdf: kdf, inv, ctx)
            } else {
                _ = try Auth.unlockWithPasscode(store, inv, ctx, why: "rotating the keys needs the passcode") { vault, passcode in
                    if inv.has(RotateOptions.newPasscodeFD) {
                        try rotate(vault, passcode: try SecretInput.newPasscode(ctx, inv, fdOption: RotateOptions.newPasscodeFD), kdf: kdf, inv, ctx)
                    } else {
                        try rotate(vault, passcode: passcode, kdf: kdf, inv, ctx)
                    }
                }
            }
        })

    /// Rotates `vault`, re-binding its fingerprint slot to the current prints when a reader with
    /// enrolled prints is present; prints "re-sealed N items" and, if replaced, the new recovery key.
    @discardableResult
    static func rotate(_ vault: UnlockedVault, passcode: borrowing SecretBytes, kdf: KDFParameters?,
                       _ inv: Invocation, _ ctx: CommandContext, authority given: (any KeyAuthority)? = nil) throws -> UnlockedVault {
        let authority = try given ?? Auth.ownerAuthority(vault, inv, ctx)
        let bound = BindingReport()
        let result = try vault.rotate(passcode: passcode, kdf: kdf, recovery: inv.hasIfDeclared(RotateOptions.newRecoveryKey) ? .replace : .keep,
                                      authority: authority, report: bound, progress: progressBar(inv, ctx))
        // Rotations take the passcode (or the recovery key): recorded under the new keys, whose
        // proof key then replaces the old one at the authority (bound or not: it was announced).
        authority.recordUnlock(of: result.vault)
        report(result, of: vault, ctx)
        if result.fingerprintBound { FingerprintCommands.say(bound, of: vault, ctx) }
        return result.vault
    }

    /// A progress bar on the terminal (nothing otherwise).
    static func progressBar(_ inv: Invocation, _ ctx: CommandContext) -> (Int, Int) -> Void {
        let onTerminal = ctx.terminal.isAvailable && !inv.noInput
        let line = ProgressLine(ctx, everyStep: false)
        return { done, total in
            guard onTerminal, total > 0 else { return }
            line.draw(done, of: total, width: 30, "items re-sealed")
        }
    }

    /// What a rotation did; a new recovery key goes to stdout, once.
    static func report(_ result: RotationResult, of vault: UnlockedVault, _ ctx: CommandContext) {
        let name = vault.store.location.name, v = name == "default" ? "" : " --vault \(name)"
        let slot = result.fingerprintBound ? "; fingerprint slot bound to the current prints"
            : result.fingersEnrolled ? "; no fingerprint slot (no reader now): bind later with 'vault enroll --bind\(v)'"
            : "; no fingerprint slot: no finger enrolled: enrol one with 'vault enroll\(v)'"
        ctx.say("vault: re-sealed \(result.items) item\(result.items == 1 ? "" : "s") of vault '\(name)' under new keys (generation \(result.vault.generation))" + slot)
        if let why = result.authorityNotTold {
            ctx.say("vault: note: the key authority was not told the new key (\(why)); the next passcode unlock brings it in step")
        }
        if let key = result.recoveryKey {
            ctx.say("vault: your new recovery key (the old one no longer works; printed once on standard output):")
            ctx.stdout.write(key + "\n")
            // The rotation is committed: Ctrl-C here only skips the wait.
            try? RecoveryKeyScreen.waitAndClear(key, nil, ctx)
        }
    }
}
