import FoundationEssentials
import VaultKit
import VaultSync

enum SettingsCommand {
    /// The options of `settings`, declared once: the table lists them and the command reads them.
    enum SettingsOptions {
        static let policy = OptionSpec.value("--policy", "P", "default policy: biometrics or biometrics-or-passcode")
        static let passcodeInterval = OptionSpec.value("--passcode-interval", "HOURS", "ask for the passcode after HOURS without one (0: never; default 48)")
        static let passcodeAfterReboot = OptionSpec.value("--passcode-after-reboot", "on|off", "ask for the passcode at the first unlock after a reboot (default on)")
        static let passcodeOnTpm = OptionSpec.value("--passcode-on-tpm", "on|off",
                   "make the passcode also need this machine's TPM, which limits wrong guesses (VAULT_TPM_TCTI, else /dev/tpmrm0; default off)")
        static let secretServiceApproval = OptionSpec.value("--secret-service-approval", "per-client|session",
                   "whom 'vault secret-service' releases this vault's secrets to: each client after a fresh finger match of its own (per-client), or every client while unlocked (session, the default)")
        static let syncAuto = OptionSpec.value("--sync-auto", "on|off",
                   "sync in the background after each write (needs a remote: 'vault remote set URL'; no passcode asked; default off)")
        static let json = OptionSpec.flag("--json", "print JSON")
    }

    static let settings = CommandSpec(
        name: "settings", summary: "show or change the vault's policy and passcode rules (changes need the passcode)",
        usage: "vault settings [--policy P] [--passcode-interval HOURS] [--passcode-after-reboot on|off] [--passcode-on-tpm on|off] [--secret-service-approval per-client|session] [--sync-auto on|off] [--json]",
        options: [
            SettingsOptions.policy,
            SettingsOptions.passcodeInterval,
            SettingsOptions.passcodeAfterReboot,
            SettingsOptions.passcodeOnTpm,
            SettingsOptions.secretServiceApproval,
            SettingsOptions.syncAuto,
            SettingsOptions.json,
        ],
        examples: "vault settings\nvault settings --policy biometrics --passcode-interval 24\nvault settings --passcode-on-tpm on\nvault settings --secret-service-approval per-client\nvault settings --sync-auto on",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            if let a = inv[SettingsOptions.syncAuto] {
                // A file beside vault.db, as `vault remote set --auto`: it decides when a sync
                // runs, not who may read, so it asks for no passcode.
                guard ["on", "off"].contains(a) else { throw VaultError.usage("--sync-auto takes on or off") }
                if a == "on", try SyncRemote.show(location: store.location, environment: ctx.environment) == nil {
                    throw VaultError.failure("vault '\(store.location.name)' has no remote to sync with", hint: "set one with 'vault remote set URL'")
                }
                try SyncRemote.setAuto(a == "on", location: store.location)
                ctx.say("vault: vault '\(store.location.name)' " + (a == "on" ? "syncs in the background after each write" : "syncs when 'vault sync' runs"))
            }
            let changing = inv.has(SettingsOptions.policy) || inv.has(SettingsOptions.passcodeInterval) || inv.has(SettingsOptions.passcodeAfterReboot)
                || inv.has(SettingsOptions.secretServiceApproval)
            var s: VaultSettings
            do {
                s = try store.settings()
            } catch VaultError.settingsDamaged where changing {
                // Setting them again is the way out of a damaged row (its hint says so).
                ctx.say("vault: warning: the damaged settings are replaced: what is not given now takes its default")
                s = VaultSettings()
            }
            let before = s
            if inv.has(SettingsOptions.passcodeOnTpm) && changing {
                // Each asks for the passcode and writes on its own; one command would leave the
                // others unsaved.
                throw VaultError.usage("--passcode-on-tpm goes alone", hint: "change the other settings with a second 'vault settings'")
            }
            if let t = inv[SettingsOptions.passcodeOnTpm] {
                guard ["on", "off"].contains(t) else { throw VaultError.usage("--passcode-on-tpm takes on or off") }
                // The passcode itself re-wraps the slot: turning it off needs it as much as turning it on.
                try Auth.unlockWithPasscode(store, inv, ctx, why: "moving the passcode onto or off the TPM needs it") { vault, passcode in
                    try vault.changePasscode(to: passcode, kdf: nil, onTPM: t == "on")
                }
                ctx.say(t == "on"
                    ? "vault: the passcode of vault '\(store.location.name)' now needs this machine's TPM, which counts wrong ones; the recovery key opens it anywhere"
                    : "vault: the passcode of vault '\(store.location.name)' no longer needs the TPM")
            } else if changing {
                if let p = inv[SettingsOptions.policy] { s.policy = try AuthPolicy.parse(p) }
                if let h = try inv.int(SettingsOptions.passcodeInterval) {
                    guard (0...8760).contains(h) else { throw VaultError.usage("--passcode-interval must be 0 to 8760 hours") }
                    s.passcodeIntervalHours = h
                }
                if let r = inv[SettingsOptions.passcodeAfterReboot] {
                    guard ["on", "off"].contains(r) else { throw VaultError.usage("--passcode-after-reboot takes on or off") }
                    s.passcodeAfterReboot = r == "on"
                }
                if let a = inv[SettingsOptions.secretServiceApproval] {
                    guard let approval = SecretServiceApproval(rawValue: a) else {
                        throw VaultError.usage("--secret-service-approval takes per-client or session")
                    }
                    s.secretServiceApproval = approval
                }
                // The passcode, not a finger: these rules decide when a finger is enough.
                let vault = try Auth.unlockWithPasscode(store, inv, ctx, why: "changing the settings needs the passcode")
                try store.setSettings(s)
                ctx.say("vault: settings of vault '\(store.location.name)' saved")
                // The key authority keeps the passcode rules with the binding (a request may only
                // tighten them): looser rules take effect through a new binding.
                if s.passcodeRules != before.passcodeRules, try store.slot(.fingerprint) != nil {
                    do {
                        try vault.bindFingerprint(authority: try Auth.authority(for: store, inv, ctx), sensor: nil)
                    } catch let e as VaultError {
                        ctx.say("vault: warning: the fingerprint binding keeps the old passcode rules until 'vault enroll --bind' (\(e.message))")
                    }
                }
            }
            let onTPM = try store.slot(.passcode)?.passcodeIsOnTPM ?? false
            let o: [String: Any] = ["policy": s.policy.rawValue, "passcode_interval_hours": s.passcodeIntervalHours,
                                    "passcode_after_reboot": s.passcodeAfterReboot, "passcode_on_tpm": onTPM,
                                    "secret_service_approval": (s.secretServiceApproval ?? .session).rawValue,
                                    "sync_auto": SyncRemote.isAuto(location: store.location)]
            if inv.has(SettingsOptions.json) { ctx.stdout.write(jsonText(o)) } else if !changing && !inv.has(SettingsOptions.passcodeOnTpm) && !inv.has(SettingsOptions.syncAuto) {
                ctx.stdout.write("policy: \(s.policy.rawValue)\npasscode interval: \(s.passcodeIntervalHours == 0 ? "never" : "\(s.passcodeIntervalHours) h")\npasscode after reboot: \(s.passcodeAfterReboot ? "on" : "off")\npasscode on TPM: \(onTPM ? "on" : "off")\nsecret service approval: \((s.secretServiceApproval ?? .session).rawValue)\nsync after each write: \(SyncRemote.isAuto(location: store.location) ? "on" : "off")\n")
            }
        })
}
