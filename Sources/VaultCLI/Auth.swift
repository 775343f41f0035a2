import Foundation
import FingerprintKit
import VaultKit

/// Authentication for every command that needs the vault key: one `AuthContext` per command.
enum Auth {
    /// Options of commands that authenticate.
    static let options: [OptionSpec] = [
        .value("--policy", "NAME", "biometrics or biometrics-or-passcode (default: the vault's setting)"),
        .flag("--passcode", "use the passcode instead of a finger"),
        .value("--reason", "TEXT", "shown at the fingerprint prompt"),
        .value("--scan-timeout", "D", "how long to wait for a finger (default 30s)"),
    ]

    /// The key authority of this user.
    static func authority(_ ctx: CommandContext) throws -> EmbeddedKeyAuthority {
        try EmbeddedKeyAuthority(folder: EmbeddedKeyAuthority.defaultFolder(environment: ctx.environment))
    }

    /// The authority, for a caller that has just proved a passcode: a damaged prints file is reset
    /// (with a warning) instead of blocking enrolment forever.
    static func ownerAuthority(_ ctx: CommandContext) throws -> EmbeddedKeyAuthority {
        let authority = try authority(ctx)
        do {
            _ = try authority.prints()
        } catch VaultError.authorityDamaged(let why) {
            try authority.resetPrints()
            ctx.say("vault: warning: \(why); it was reset: every vault needs its passcode once, then enrol your fingers again with 'vault enroll'")
        }
        return authority
    }

    /// The reader the enrolled prints belong to, to prefer when none is named.
    static func enrolledSensor(_ authority: any KeyAuthority) -> SensorIdentity? {
        (try? authority.prints())?.first?.sensor
    }

    /// The context for `store`: policy from `--policy` or the vault, passcode from `--passcode-fd`
    /// or the terminal, the reader opened only when a scan is due.
    static func context(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> AuthContext {
        let policy: AuthPolicy
        if let p = inv.value("--policy") {
            guard let parsed = AuthPolicy(rawValue: p) else {
                throw VaultError.usage("unknown policy '\(p)'", hint: "policies: biometrics, biometrics-or-passcode")
            }
            policy = parsed
        } else {
            policy = AuthPolicy(rawValue: try store.settings().policy) ?? .biometricsOrPasscode
        }
        let timeout = try scanTimeout(inv)
        let passcodeFD = try SecretInput.descriptor(inv, "--passcode-fd")
        let interactive = !inv.noInput && ctx.terminal.isAvailable
        let auth = AuthContext(
            authority: try authority(ctx), policy: policy,
            openReader: { bound in
                LibfprintReader(sensor: try openSensor(inv, ctx, prefer: bound), ctx: ctx, timeout: timeout, interactive: interactive)
            },
            readPasscode: { prompt in
                if let fd = passcodeFD { return try SecretInput.line(fd: fd, what: "passcode") }
                guard interactive else { return nil }
                guard let s = try ctx.terminal.readSecret(prompt: prompt + ": ") else { throw VaultError.userCancel }
                if interruptRequested != 0 { throw VaultError.userCancel }
                return s
            },
            say: { ctx.say($0) })
        auth.reason = inv.value("--reason")
        auth.passcodeFirst = inv.has("--passcode") || passcodeFD != nil
        return auth
    }

    /// How this process last authenticated (a command that unlocked with a finger a moment ago
    /// does not ask for a second scan, nor one that took the passcode for a second passcode).
    nonisolated(unsafe) static var lastOutcome: AuthOutcome?

    /// Unlocks `store` for `purpose`.
    static func unlock(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext, purpose: String) throws -> UnlockedVault {
        let auth = try context(store, inv, ctx)
        if auth.reason == nil { auth.reason = purpose }
        let vault = try auth.unlock(store)
        lastOutcome = auth.outcome
        return vault
    }

    /// Unlocks with the passcode only (enrolment, passcode change): a finger never suffices there.
    static func unlockWithPasscode(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> UnlockedVault {
        let passcode = try SecretInput.passcode(ctx, inv, vault: store.location.name)
        let vault = try store.unlock(passcode: passcode)
        try passcodeSucceeded(store, ctx)
        lastOutcome = .passcode
        return vault
    }

    /// A passcode or recovery unlock succeeded: resets the fingerprint lockout and the passcode clock.
    static func passcodeSucceeded(_ store: VaultStore, _ ctx: CommandContext) throws {
        try authority(ctx).recordPasscodeUnlock()
    }

    /// Fingerprint fields of `vault status`.
    static func statusFields(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) throws -> [String: Any] {
        let authority = try authority(ctx)
        var o: [String: Any] = [:]
        var prints: [EnrolledPrint] = []
        do { prints = try authority.prints() } catch let e as VaultError { o["prints_error"] = e.message }
        o["enrolled_fingers"] = prints.map { ["finger": $0.finger, "sensor": $0.sensor.canonical] }
        let readers = (try? FingerprintService.shared.sensors()) ?? []
        o["readers"] = readers.map { ["driver": $0.driver, "device_id": $0.deviceID, "name": $0.name, "match_on_chip": $0.matchOnChip] }
        var chip: [String] = []
        var sensorID: SensorIdentity?
        let bound = try? AuthContext.binding(of: store)?.1.sensor
        if !readers.isEmpty, let sensor = try? openSensor(inv, ctx, prefer: bound ?? prints.first?.sensor) {
            sensorID = SensorIdentity(driver: sensor.info.driver, deviceID: sensor.info.deviceID)
            chip = (try? sensor.storedPrintIdentities()) ?? []
            sensor.close()
        }
        let state = try? authority.domainState(chipPrints: chip)
        o["domain_state"] = state?.hex ?? NSNull()
        if let (_, binding) = try AuthContext.binding(of: store) {
            o["fingerprint_slot"] = ["sensor": binding.sensor.canonical, "domain_state": binding.domainState]
            o["fingerprint_bound"] = state?.hex == binding.domainState && (sensorID == nil || sensorID == binding.sensor)
        } else {
            o["fingerprint_slot"] = NSNull()
            o["fingerprint_bound"] = false
        }
        let record = try authority.record()
        o["lockout"] = ["failures": record.failedMatches, "locked": record.failedMatches >= lockoutThreshold,
                        "threshold": lockoutThreshold]
        return o
    }
}
