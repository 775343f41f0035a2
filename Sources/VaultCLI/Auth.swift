import FoundationEssentials
import VaultKit
import VaultSystem

/// The command line's side of authentication: it builds the key authority and the `AuthContext`
/// from the options and the terminal, and shows what they report. Every decision (tries, lockout,
/// reboot and 48 h rules, fallback, proofs) is VaultKit's.
/// The options of commands that authenticate, declared once: `Auth.options` lists them.
enum AuthOptions {
    static let policy = OptionSpec.value("--policy", "NAME", "biometrics or biometrics-or-passcode (default: the vault's setting)")
    static let passcode = OptionSpec.flag("--passcode", "use the passcode instead of a finger")
    static let reason = OptionSpec.value("--reason", "TEXT", "shown at the fingerprint prompt")
    static let scanTimeout = OptionSpec.value("--scan-timeout", "D", "how long to wait for a finger (default 30s)")
}

enum Auth {
    /// Options of commands that authenticate.
    static let options: [OptionSpec] = [AuthOptions.policy, AuthOptions.passcode, AuthOptions.reason, AuthOptions.scanTimeout]

    /// Which authority `--authority` or `VAULT_AUTHORITY` asks for (nil: choose).
    static func requestedAuthority(_ inv: Invocation, _ ctx: CommandContext) throws -> AuthorityKind? {
        guard let raw = inv[GlobalOptions.authority] ?? ctx.environment["VAULT_AUTHORITY"].flatMap({ $0.isEmpty ? nil : $0 }) else {
            return nil
        }
        guard let kind = AuthorityKind(rawValue: raw) else {
            throw VaultError.usage("unknown key authority '\(raw)'", hint: "authorities: system, embedded")
        }
        return kind
    }

    /// The system authority's socket (`VAULT_AUTHD_SOCKET` moves it, for tests and odd installs).
    static func systemSocket(_ ctx: CommandContext) -> String {
        ctx.environment["VAULT_AUTHD_SOCKET"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/run/vault-auth/socket"
    }

    /// The key authority for new bindings and enrolment: the one asked for, else the system
    /// authority when `vault-authd` answers, else the embedded one.
    static func authority(_ inv: Invocation, _ ctx: CommandContext) throws -> any KeyAuthority {
        try authority(inv, ctx, kind: requestedAuthority(inv, ctx) ?? (SystemAuthorityLink.answers(systemSocket(ctx)) ? .system : .embedded))
    }

    /// The key authority of `kind` for this user, opening the reader selected by `--sensor` /
    /// `VAULT_SENSOR` (else the one it prefers) when a scan or an enrolment is due.
    /// - Throws: 15 when the system authority does not answer.
    static func authority(_ inv: Invocation, _ ctx: CommandContext, kind: AuthorityKind) throws -> any KeyAuthority {
        let timeout = try scanTimeout(inv)
        let interactive = !inv.noInput && ctx.terminal.isAvailable
        switch kind {
        case .system:
            do {
                return try SystemAuthorityLink.connect(systemSocket(ctx), inv, ctx, timeout: timeout, interactive: interactive)
            } catch VaultError.biometryNotAvailable(let reason) {
                // Fingerprint requests then say why (15); the passcode still opens every vault.
                return UnreachableAuthority(kind: .system, reason: reason)
            }
        case .embedded:
            return try EmbeddedKeyAuthority(
                folder: EmbeddedKeyAuthority.defaultFolder(environment: ctx.environment), clock: ctx.clock,
                openReader: { prefer in
                    LibfprintReader(sensor: try openSensor(inv, ctx, prefer: prefer), ctx: ctx, timeout: timeout, interactive: interactive)
                })
        }
    }

    /// The authority that holds `store`'s fingerprint binding (it alone can release that key and
    /// check that vault's proofs); without a binding, the one for new bindings.
    static func authority(for store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> any KeyAuthority {
        if let requested = try requestedAuthority(inv, ctx) { return try authority(inv, ctx, kind: requested) }
        guard let bound = try? store.fingerprintSlot()?.binding.authorityKind else { return try authority(inv, ctx) }
        return try authority(inv, ctx, kind: bound)
    }

    /// The authority for a caller that holds `vault`'s key after a passcode: a damaged prints
    /// file is reset (with a warning) instead of blocking enrolment forever.
    /// A vault bound to the system authority stays with it while vault-authd does not answer
    /// (its fingerprint slot then waits for the daemon): never a silent move to the embedded one.
    static func ownerAuthority(_ vault: UnlockedVault, _ inv: Invocation, _ ctx: CommandContext) throws -> any KeyAuthority {
        let authority = try enrolmentAuthority(vault.store, inv, ctx)
        if let why = try authority.resetIfDamaged() {
            ctx.say("vault: warning: \(why); it was reset: every vault needs its passcode once, then enrol your fingers again with 'vault enroll'")
        }
        return authority
    }

    /// The authority an owner of `store` enrols through (`ownerAuthority` without the reset):
    /// the system one for a vault bound there, else the one for new bindings.
    static func enrolmentAuthority(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> any KeyAuthority {
        let bound = try? store.fingerprintSlot()?.binding.authorityKind
        return try requestedAuthority(inv, ctx) == nil && bound == .system ? authority(inv, ctx, kind: .system) : authority(inv, ctx)
    }

    /// The context for `store`: policy from `--policy` or the vault, passcode from `--passcode-fd`
    /// or the terminal, the reader opened only when a scan is due.
    static func context(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> AuthContext {
        let policy = try inv[AuthOptions.policy].map(AuthPolicy.parse) ?? store.settings().policy
        let passcodeFD = try SecretInput.descriptor(inv, GlobalOptions.passcodeFD)
        let interactive = !inv.noInput && ctx.terminal.isAvailable
        let auth = AuthContext(
            authority: try authority(for: store, inv, ctx), policy: policy,
            readPasscode: { prompt in
                if let fd = passcodeFD {
                    if let once = inv.passcodeOnce { return try once.passcode(fd: fd) }
                    return try SecretInput.line(fd: fd, what: "passcode")
                }
                // Typed at the fingerprint prompt (echo off) instead of touching the reader.
                if let typed = ctx.typedPasscode.take() { return typed }
                guard interactive else { return nil }
                guard let s = try ctx.terminal.readSecret(prompt: prompt + ": ") else { throw VaultError.userCancel }
                if ctx.interrupted() { throw VaultError.userCancel }
                return s
            },
            say: { ctx.say($0) }, clock: ctx.clock)
        auth.reason = inv[AuthOptions.reason]
        auth.passcodeFirst = inv.has(AuthOptions.passcode) || passcodeFD != nil
        auth.passcodeTries = passcodeFD == nil && interactive ? 3 : 1
        auth.timeoutFallsBack = interactive
        return auth
    }

    /// Unlocks `store` for `purpose` (finger, or the passcode as the policy allows).
    static func unlock(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext, purpose: String) throws -> UnlockedVault {
        let auth = try context(store, inv, ctx)
        if auth.reason == nil { auth.reason = purpose }
        let vault = try quietTerminal(ctx) { try auth.unlock(store) }
        sayUnrecorded(vault, ctx, authority: auth.authority)
        return vault
    }

    /// Runs an evaluation with the terminal's echo off (passcode prompts still end their line):
    /// whatever is typed while vault waits for a finger, in this process or in vault-authd,
    /// never shows. Unread keys are dropped afterwards.
    /// Ctrl-Z and `fg` keep it quiet (`TerminalSuspension`).
    static func quietTerminal<T>(_ ctx: CommandContext, _ body: () throws -> T) throws -> T {
        try TerminalMode.withSilence(ctx.terminal.inputFD, body)
    }

    /// Unlocks with the passcode only (enrolment, passcode change, settings): a finger never
    /// suffices there. Like every passcode unlock, it resets the lockout.
    /// `why` starts the prompt (what needs the passcode); on a terminal a wrong passcode asks
    /// again, three tries.
    static func unlockWithPasscode(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext,
                                   reason: String = "no terminal and no --passcode-fd", why: String? = nil) throws -> UnlockedVault {
        try unlockWithPasscode(store, inv, ctx, reason: reason, why: why) { vault, _ in vault }
    }

    /// The same, for commands that need the passcode itself afterwards (rotate, enroll,
    /// unenroll, `unlock --rotate`, settings): `body` gets the vault and the passcode that opened
    /// it. Three tries on a terminal, one otherwise.
    static func unlockWithPasscode<R>(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext,
                                      reason: String = "no terminal and no --passcode-fd", why: String? = nil,
                                      then body: (UnlockedVault, borrowing SecretBytes) throws -> R) throws -> R {
        let authority = try authority(for: store, inv, ctx)
        let tries = inv[GlobalOptions.passcodeFD] == nil && !inv.noInput && ctx.terminal.isAvailable ? 3 : 1
        for attempt in 1...tries {
            let passcode = try SecretInput.passcode(ctx, inv, vault: store.location.name, reason: reason, why: attempt == 1 ? why : nil)
            let vault: UnlockedVault
            do {
                vault = try authority.unlock(store, passcode: passcode, waiting: waiting(ctx))
            } catch VaultError.wrongPasscode where attempt < tries {
                ctx.say("vault: wrong passcode; \(tries - attempt) \(tries - attempt == 1 ? "try" : "tries") left")
                continue
            }
            sayUnrecorded(vault, ctx, authority: authority)
            return try body(vault, passcode)
        }
        throw VaultError.wrongPasscode
    }

    /// A passcode or recovery-key unlock the key authority could not record opened the vault
    /// all the same: the person hears that the lockout and the passcode clock stay as they were.
    /// The passcode of a vault that does not manage the fingerprints does not lift a lockout:
    /// the person hears it when fingerprint is locked out, with the vault whose passcode does.
    static func sayUnrecorded(_ vault: UnlockedVault, _ ctx: CommandContext, authority: (any KeyAuthority)? = nil) {
        if let why = vault.unrecorded {
            ctx.say("vault: warning: the key authority did not record this unlock (\(why)); the vault is open, but a fingerprint lockout or the passcode rules stay until it can")
            if let hint = vault.unrecordedHint { ctx.say("vault: hint: " + hint) }
            return
        }
        guard vault.passcodeRecord == .vault, let authority,
              let s = try? authority.status(slot: nil, sensor: nil, rules: PasscodeRules(afterReboot: false, intervalHours: 0)),
              s.failedMatches >= s.threshold else { return }
        ctx.say("vault: fingerprint stays locked out: vault '\(vault.store.location.name)' does not manage your fingerprints; "
                + "the passcode of the first vault you bound lifts it (vault unlock --passcode --vault NAME)")
    }

    /// The wait after wrong passcodes, said, then slept.
    static func waiting(_ ctx: CommandContext) -> (Int) -> Void {
        { seconds in
            ctx.say("vault: wrong passcodes before: waiting \(seconds) s before this try")
            sleepBeforePasscode(seconds)
        }
    }

    /// Unlocks with the recovery key from `--recovery-key-fd` or the terminal; like a passcode
    /// unlock, it resets the fingerprint lockout.
    /// Typed on a terminal, a mistyped or wrong key asks again: three tries, as the passcode.
    static func unlockWithRecoveryKey(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> UnlockedVault {
        let fd = try SecretInput.descriptor(inv, VaultCommands.RecoverOptions.recoveryKeyFD)
        let authority = try authority(for: store, inv, ctx)
        let tries = fd == nil && !inv.noInput && ctx.terminal.isAvailable ? 3 : 1
        for attempt in 1...tries {
            let key: SecretBytes
            if let fd {
                key = try SecretInput.line(fd: fd, what: "recovery key")
            } else {
                key = try SecretInput.ask(ctx, inv, prompt: "recovery key: ", reason: "no terminal and no --recovery-key-fd")
            }
            do {
                let vault = try authority.unlock(store, recoveryKey: String(decoding: key.exposedBytes(), as: UTF8.self))
                sayUnrecorded(vault, ctx, authority: authority)
                return vault
            } catch let e as VaultError where e.kind == .authenticationFailed && attempt < tries && (try? store.slot(.recovery)) != nil {
                ctx.say("vault: \(e.message); \(tries - attempt) \(tries - attempt == 1 ? "try" : "tries") left")
            }
        }
        throw VaultError.authenticationFailed("wrong recovery key")
    }

    /// The fresh match fingerprint login demands (`vault login`, a release, the switch): a nonce
    /// of `access` for `purpose` (this process's vault, or the agent's), then the key authority's
    /// live scan over it, even in an unlock session; the token goes back with the request and the
    /// vault checks it. A match this command already made (the finger that unlocked, or an
    /// earlier item of `vault run`) is reused from the authority's own record, not rescanned.
    static func requireFreshMatch(_ access: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext, purpose: FreshMatchPurpose,
                                  reuse: Int = 0, prompt: String) throws -> FreshMatchToken {
        let store = try VaultStore.open(try location(inv, ctx))
        // No passcode is offered at this prompt: it could not stand in for the touch.
        let offered = ctx.scanOffersPasscode
        ctx.scanOffersPasscode = false
        defer { ctx.scanOffersPasscode = offered }
        let auth = try context(store, inv, ctx)
        let nonce = try access.freshMatchNonce(for: purpose)
        let key = store.location.databasePath
        let token = try quietTerminal(ctx) {
            try auth.requireFreshMatch(store, nonce: nonce, unlocked: access as? UnlockedVault, matchedAt: ctx.freshMatchTimes[key],
                                       reuse: reuse, prompt: prompt)
        }
        ctx.freshMatchTimes[key] = ctx.clock() - (token.reusedAge ?? 0)
        return token
    }

    /// `--fingerprint-login on|off`: the value, checked before anything is unlocked.
    static func parseSwitch(_ inv: Invocation) throws -> Bool? {
        guard let v = inv[ItemOptions.fingerprintLogin] else { return nil }
        switch v {
        case "on": return true
        case "off": return false
        default: throw VaultError.usage("--fingerprint-login expects on or off, not '\(v)'")
        }
    }

    /// The one command that moves vault `name`'s binding to vault-authd: a binding when fingers
    /// are enrolled there, else an enrolment there (which re-binds the vault).
    static func moveToSystem(_ name: String, _ inv: Invocation, _ ctx: CommandContext) -> String {
        let v = name == "default" ? "" : " --vault \(name)"
        let fingers = (try? authority(inv, ctx, kind: .system).fingers()) ?? []
        return fingers.isEmpty ? "'vault enroll\(v)' enrols a finger there and moves it" : "'vault enroll --bind\(v)' (its passcode) moves it"
    }

    /// Fingerprint fields of `vault status`.
    static func statusFields(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> [String: Any] {
        let authority = try authority(for: store, inv, ctx)
        let slot = try store.fingerprintSlot()
        let readers = (try? RemoteSensor.sensors(ctx)) ?? []
        let s = try authority.status(slot: slot?.reference, sensor: nil, rules: try store.settings().passcodeRules)
        var o: [String: Any] = [:]
        if let e = s.printsError { o["prints_error"] = e }
        if let b = s.readerBackend { o["reader_backend"] = b }
        o["authority"] = ["kind": s.kind.rawValue, "protects": s.kind.protection]
        o["enrolled_fingers"] = s.fingers.map { ["finger": $0.finger, "sensor": $0.sensor.canonical] }
        o["readers"] = readers.map { ["driver": $0.driver, "device_id": $0.deviceID, "name": $0.name, "match_on_chip": $0.matchOnChip] }
        o["domain_state"] = s.domainState?.hex ?? JSONNull()
        if let slot, slot.binding.authorityKind == .embedded, try requestedAuthority(inv, ctx) == nil,
           SystemAuthorityLink.answers(systemSocket(ctx)) {
            o["authority_hint"] = "this vault is bound to the embedded authority while vault-authd runs: \(moveToSystem(store.location.name, inv, ctx))"
        }
        if let slot {
            o["fingerprint_slot"] = ["sensor": slot.binding.sensor.canonical, "domain_state": slot.binding.domainState,
                                     "authority": slot.binding.authorityKind.rawValue, "key_id": slot.binding.keyID.map { $0 as Any } ?? JSONNull()] as [String: Any]
            o["fingerprint_bound"] = s.bindingCurrent ?? false
        } else {
            o["fingerprint_slot"] = JSONNull()
            o["fingerprint_bound"] = false
        }
        o["lockout"] = ["failures": s.failedMatches, "locked": s.failedMatches >= s.threshold, "threshold": s.threshold]
        o["passcode_due"] = s.passcodeDue.map { $0 as Any } ?? JSONNull()
        o["passcode_after_reboot_due"] = s.passcodeAfterRebootDue
        return o
    }
}
