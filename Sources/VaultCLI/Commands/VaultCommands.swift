import FoundationEssentials
import VaultKit
internal import VaultSystem

/// The options of `generate` (and of `add --generate`, `edit --generate`), declared once.
enum PasswordOptions {
    static let length = OptionSpec.value("--length", "N", "characters (default 24)")
    static let noSymbols = OptionSpec.flag("--no-symbols", "no punctuation")
    static let noDigits = OptionSpec.flag("--no-digits", "no digits")
    static let noUpper = OptionSpec.flag("--no-upper", "no upper case")
    static let noLower = OptionSpec.flag("--no-lower", "no lower case")
    static let excludeSimilar = OptionSpec.flag("--exclude-similar", "leave out characters easily confused: i l 1 L o 0 O")
    static let chars = OptionSpec.value("--chars", "SET", "draw only from these characters (replaces the classes)")
    static let words = OptionSpec.value("--words", "N", "N words of the EFF large word list instead of characters (12.9 bits each)")
    static let separator = OptionSpec.value("--separator", "S", "between words (default -)")
    /// The options that shape characters, which `--words` leaves no room for.
    static let characterOptions = [length, chars, excludeSimilar, noSymbols, noDigits, noUpper, noLower]
    /// The character classes `--chars` replaces.
    static let classes = [noSymbols, noDigits, noUpper, noLower]
}

enum VaultCommands {
    /// The options of `initCommand`, declared once: the table lists them and the command reads them.
    enum InitOptions {
        static let kdfMemory = OptionSpec.value("--kdf-memory", "MIB", "Argon2id memory for the passcode slot (default 256)")
        static let kdfOps = OptionSpec.value("--kdf-ops", "N", "Argon2id passes (default 3)")
        static let json = OptionSpec.flag("--json", "print the result as JSON")
        static let noFingerprint = OptionSpec.flag("--no-fingerprint", "do not enrol a finger or bind the vault to the enrolled prints")
        static let finger = OptionSpec.value("--finger", "F", "the finger to enrol when none is enrolled yet (default right-index)")
        static let scanTimeout = OptionSpec.value("--scan-timeout", "D", "how long to wait for each touch (default 30s)")
    }

    static let initCommand = CommandSpec(
        name: "init", summary: "create a vault: passcode, recovery key (printed once on stdout)",
        usage: "vault init [--vault NAME] [--kdf-memory MIB] [--kdf-ops N] [--json]",
        options: [
            InitOptions.kdfMemory,
            InitOptions.kdfOps,
            InitOptions.json,
            InitOptions.noFingerprint,
            InitOptions.finger,
            InitOptions.scanTimeout,
        ],
        examples: """
        vault init
        vault init --vault work --passcode-fd 3 3<passcode.txt > recovery-key.txt
        """,
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            let kdf = try kdfParameters(inv) ?? KDFParameters()
            // Every option is checked before anything is created.
            _ = try inv[InitOptions.finger].map(FingerprintCommands.parseFinger)
            _ = try scanTimeout(inv)
            if loc.exists {
                throw VaultError.failure("a vault named '\(loc.name)' already exists at \(loc.folder)",
                                         hint: "'vault enroll' sets up its fingerprint; another vault needs another name (--vault NAME)")
            }
            let passcode: SecretBytes
            if let fd = try SecretInput.descriptor(inv, GlobalOptions.passcodeFD) {
                passcode = try PasscodeRule.normalized(try SecretInput.line(fd: fd, what: "passcode"))
                try PasscodeRule.check(passcode)
            } else {
                passcode = try SecretInput.newPasscode(ctx, inv, fdOption: GlobalOptions.passcodeFD)
            }
            // The recovery key is shown before the vault exists (a vault whose key was never shown
            // cannot be left behind, by a crash or a failed enrolment) and before any fingerprint.
            let created = try VaultStore.create(at: loc, passcode: passcode, kdf: kdf) { key in
                if inv.has(InitOptions.json) {
                    ctx.stdout.write(jsonText(["vault": loc.name, "path": loc.folder, "recovery_key": key]))
                } else {
                    ctx.say("vault: your recovery key for vault '\(loc.name)' (printed once on standard output; write it down and keep it apart from this machine):")
                    ctx.stdout.write(key + "\n")
                }
                if let f = ctx.stdout.failure { throw VaultError.io(path: "standard output", f.reason + "; the vault was not created") }
                if !inv.has(InitOptions.json) { try RecoveryKeyScreen.waitAndClear(key, inv, ctx) }
            }
            ctx.say("vault: created vault '\(loc.name)' at \(loc.folder)")
            if !inv.has(InitOptions.noFingerprint) {
                do {
                    try FingerprintCommands.setUpAtInit(created.vault, inv, ctx)
                } catch {
                    ctx.say("vault: the vault was created, but setting up the fingerprint did not finish; 'vault enroll\(loc.name == "default" ? "" : " --vault \(loc.name)")' continues")
                    throw error
                }
            }
            try Auth.authority(for: created.vault.store, inv, ctx).recordUnlock(of: created.vault)
        })

    /// The options of `passcode`, declared once: the table lists them and the command reads them.
    enum PasscodeOptions {
        static let newPasscodeFD = OptionSpec.value("--new-passcode-fd", "M", "read the new passcode from file descriptor M")
        static let kdfMemory = OptionSpec.value("--kdf-memory", "MIB", "new Argon2id memory")
        static let kdfOps = OptionSpec.value("--kdf-ops", "N", "new Argon2id passes")
    }

    static let passcode = CommandSpec(
        name: "passcode", summary: "change the passcode (re-wraps the passcode slot only)",
        usage: "vault passcode [--passcode-fd N] [--new-passcode-fd M] [--kdf-memory MIB] [--kdf-ops N]",
        options: [
            PasscodeOptions.newPasscodeFD,
            PasscodeOptions.kdfMemory,
            PasscodeOptions.kdfOps,
        ],
        examples: "vault passcode\nvault passcode --passcode-fd 3 --new-passcode-fd 4 3<old 4<new",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let kdf = try kdfParameters(inv)
            let vault = try Auth.unlockWithPasscode(store, inv, ctx, why: "current passcode")
            let new = try SecretInput.newPasscode(ctx, inv, fdOption: PasscodeOptions.newPasscodeFD)
            try vault.changePasscode(to: new, kdf: kdf)
            ctx.say("vault: passcode changed (only the passcode slot was re-wrapped; 'vault rotate' replaces every key)")
            FingerprintCommands.rebindAfterPasscodeChange(vault, inv, ctx)
        })

    /// The options of `recover`, declared once: the table lists them and the command reads them.
    enum RecoverOptions {
        static let recoveryKeyFD = OptionSpec.value("--recovery-key-fd", "N", "read the recovery key from file descriptor N")
        static let newPasscodeFD = OptionSpec.value("--new-passcode-fd", "M", "read the new passcode from file descriptor M")
    }

    static let recover = CommandSpec(
        name: "recover", summary: "set a new passcode with the recovery key",
        usage: "vault recover [--recovery-key-fd N] [--new-passcode-fd M]",
        options: [
            RecoverOptions.recoveryKeyFD,
            RecoverOptions.newPasscodeFD,
        ],
        examples: "vault recover\nvault recover --recovery-key-fd 3 --new-passcode-fd 4 3<key.txt 4<new",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let vault = try Auth.unlockWithRecoveryKey(store, inv, ctx)
            let new = try SecretInput.newPasscode(ctx, inv, fdOption: RecoverOptions.newPasscodeFD)
            // The recovery key is the way in on another machine: a passcode that was on a TPM
            // goes on this machine's TPM, or is a plain passcode when there is none here.
            let keepOnTPM = vault.passcodeIsOnTPM && store.location.tpm != nil
            if vault.passcodeIsOnTPM && !keepOnTPM {
                ctx.say("vault: warning: no TPM here: the new passcode is not on a TPM; turn it on again with 'vault settings --passcode-on-tpm on'")
            }
            try vault.changePasscode(to: new, kdf: nil, onTPM: keepOnTPM)
            ctx.say("vault: new passcode set for vault '\(store.location.name)'")
            FingerprintCommands.rebindAfterPasscodeChange(vault, inv, ctx)
        })

    /// The options of `status`, declared once: the table lists them and the command reads them.
    enum StatusOptions {
        static let json = OptionSpec.flag("--json", "print JSON")
    }

    static let status = CommandSpec(
        name: "status", summary: "show the vault, its slots and the fingerprint state",
        usage: "vault status [--json]",
        options: [StatusOptions.json],
        examples: "vault status\nvault status --json | jq .domain_state",
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            let store = try VaultStore.open(loc)
            let settings = try store.settings()
            var o: [String: Any] = [
                "vault": loc.name, "path": loc.folder, "schema_version": try store.storedSchemaVersion(),
                "key_generation": try store.keyGeneration(), "items": try store.itemCount(),
                "slots": try store.slots().map(\.kind.rawValue), "policy": settings.policy.rawValue,
                "passcode_interval_hours": settings.passcodeIntervalHours,
                "passcode_after_reboot": settings.passcodeAfterReboot,
            ]
            if let m = try store.migration() { o["migrated"] = ["from_schema": m.fromSchema, "at": m.at] }
            if try store.storedSchemaVersion() < VaultStore.schemaVersion { o["migration"] = "at the next unlock (schema \(try store.storedSchemaVersion()) to \(VaultStore.schemaVersion))" }
            o.merge(try Auth.statusFields(store, inv, ctx)) { $1 }
            o.merge(SessionCommands.statusFields(loc, ctx)) { $1 }
            if inv.has(StatusOptions.json) {
                ctx.stdout.write(jsonText(o))
            } else {
                ctx.stdout.write(summary(o, now: ctx.clock()))
            }
        })

    /// `vault status` for a person: locked or not and for how long, the fingers, whether a finger
    /// unlocks now (and if not, the command that fixes it), the lockout count, when the passcode
    /// is next asked for, the authority. Hashes and slot details are left to `--json`.
    static func summary(_ o: [String: Any], now: Int64) -> String {
        let name = o["vault"] as? String ?? "default"
        let v = name == "default" ? "" : " --vault \(name)"
        func span(_ seconds: Int) -> String {
            seconds >= 7200 ? "\(seconds / 3600) h" : seconds >= 120 ? "\(seconds / 60) min" : "\(seconds) s"
        }
        var lines: [String] = []
        let session = o["session"] as? [String: Any] ?? [:]
        if session["open"] as? Bool == true, let idle = session["idle_left"] as? Int, let hard = session["hard_left"] as? Int {
            let scope = session["scope"] as? String == "user" ? "for every process of yours" : "for this terminal"
            lines.append("vault '\(name)': unlocked \(scope) (session ends in \(span(idle)) idle, \(span(hard)) at most; 'vault lock\(v)')")
        } else if session["other_terminal"] as? Bool == true {
            lines.append("vault '\(name)': locked here (unlocked in another terminal)")
        } else {
            lines.append("vault '\(name)': locked")
        }
        let items = o["items"] as? Int ?? 0
        lines.append("  items: \(items)")
        let fingers = (o["enrolled_fingers"] as? [[String: Any]] ?? []).compactMap { $0["finger"] as? String }
        lines.append("  fingers: " + (fingers.isEmpty ? "none enrolled ('vault enroll\(v)')" : fingers.joinedText(separator: ", ")))
        let lockout = o["lockout"] as? [String: Any] ?? [:]
        let failures = lockout["failures"] as? Int ?? 0, threshold = lockout["threshold"] as? Int ?? 5
        let hasSlot = !(o["fingerprint_slot"] is JSONNull) && o["fingerprint_slot"] != nil
        let readers = (o["readers"] as? [Any] ?? []).count
        let ready: String
        if !hasSlot {
            ready = fingers.isEmpty ? "not set up ('vault enroll\(v)')" : "not bound to the enrolled prints ('vault enroll --bind\(v)')"
        } else if o["fingerprint_bound"] as? Bool != true {
            ready = "no: the prints changed since it was bound ('\(VaultError.rebindCommand(vault: name))')"
        } else if lockout["locked"] as? Bool == true {
            ready = "no: locked out after \(failures) failed matches (the passcode unlocks and resets it)"
        } else if readers == 0 && (o["authority"] as? [String: Any])?["kind"] as? String != "system" {
            ready = "no reader found ('vault doctor')"
        } else {
            ready = "ready"
        }
        lines.append("  fingerprint unlock: " + ready)
        lines.append("  failed matches: \(failures) of \(threshold)")
        let passcode: String
        if ready != "ready" {
            passcode = "at every unlock, until a finger can unlock"
        } else if o["passcode_after_reboot_due"] as? Bool == true {
            passcode = "at the next unlock (first since the machine started)"
        } else if let due = o["passcode_due"] as? Int64 ?? (o["passcode_due"] as? Int).map(Int64.init) {
            passcode = due <= now ? "at the next unlock (\(o["passcode_interval_hours"] ?? 48) h without one)" : "in \(span(Int(due - now)))"
        } else {
            passcode = "only when you choose it or after a lockout"
        }
        lines.append("  passcode next asked: " + passcode)
        lines.append("  policy: \(o["policy"] ?? "biometrics-or-passcode")")
        if let a = o["authority"] as? [String: Any], let kind = a["kind"] as? String {
            lines.append("  key authority: \(kind)" + ((a["protects"] as? String).map { " (\($0))" } ?? ""))
        }
        if let hint = o["authority_hint"] as? String { lines.append("  note: " + hint) }
        if let m = o["migrated"] as? [String: Any], let from = m["from_schema"], let at = (m["at"] as? Int64) ?? (m["at"] as? Int).map(Int64.init) {
            let when = ISOTime.string(at)
            lines.append("  migrated: from schema \(from) on \(when)")
        }
        if let m = o["migration"] as? String { lines.append("  migration: " + m) }
        if let e = o["prints_error"] as? String { lines.append("  prints: " + e) }
        lines.append("  path: \(o["path"] ?? "")  ('vault status --json' for slots, hashes and settings)")
        return lines.joinedText(separator: "\n") + "\n"
    }

    static func describe(_ v: Any) -> String {
        if let a = v as? [Any] { return a.isEmpty ? "none" : a.map(describe).joinedText(separator: ", ") }
        if let d = v as? [String: Any] { return d.keys.sorted().map { "\($0)=\(describe(d[$0]!))" }.joinedText(separator: " ") }
        if let b = v as? Bool { return b ? "yes" : "no" }
        return "\(v)"
    }

    /// The options of `generate`, declared once: the table lists them and the command reads them.
    enum GenerateOptions {
        static let json = OptionSpec.flag("--json", "print {\"password\": ..., \"entropy_bits\": ...} (with NAME: the name and the bits, never the password)")
        static let clip = OptionSpec.flag("--clip", "copy the password to the clipboard (cleared after 45s) instead of printing it")
        static let force = OptionSpec.flag("--force", "with NAME: give an existing item a new password")
    }

    static let generate = CommandSpec(
        name: "generate", summary: "print a random password, copy it (--clip) or store it as NAME's password",
        usage: "vault generate [NAME [--force]] [--clip] [--length N] [--no-symbols] [--no-digits] [--no-upper] [--no-lower] [--exclude-similar] [--chars SET] | --words N [--separator S] [--json]",
        options: passwordOptions + [GenerateOptions.json, GenerateOptions.clip, GenerateOptions.force] + Auth.options,
        arguments: 0...1,
        examples: "vault generate --length 32\nvault generate --words 6\nvault generate --clip\nvault generate wifi --length 20 --no-symbols     # stored, as pass generate\nvault generate github --force                 # a new password for an existing login",
        run: { inv, ctx in
            if inv.has(GenerateOptions.clip) { try Clipboard.check(ctx.environment) }
            if inv.has(GenerateOptions.force) && inv.arguments.isEmpty { throw VaultError.usage("--force goes with NAME: it replaces NAME's password") }
            let (password, bits) = try password(inv)
            if let raw = inv.arguments.first {
                // As `pass generate NAME`: stored in one step (a new login, or with --force a new
                // password for an existing one); printed only when asked (--json, or --clip copies it).
                let name = try Item.normalize(name: raw)
                let vault = try openAccess(inv, ctx, purpose: "store a new password for '\(name)'")
                if try vault.contains(name) {
                    guard inv.has(GenerateOptions.force) else {
                        throw VaultError.usage("'\(name)' exists", hint: "'vault generate \(name) --force' gives it a new password (the old one stays in its history)")
                    }
                    var change = ItemChange()
                    change.password = password
                    try vault.update(name, change)
                    ctx.say("vault: gave '\(name)' a new password (\(Int(bits)) bits)")
                } else {
                    try vault.add(Item(name: name, password: password, now: ctx.clock()), replace: false)
                    ctx.say("vault: saved '\(name)' with a new password (\(Int(bits)) bits)")
                }
                if inv.has(GenerateOptions.clip) { try Clipboard.copy(password, clearAfter: 45, ctx); ctx.say("vault: copied it to the clipboard; it is cleared in 45s") }
                if inv.has(GenerateOptions.json) { ctx.stdout.write(jsonText(["name": name, "entropy_bits": (bits * 10).rounded(.down) / 10])) }
                return
            }
            if inv.has(GenerateOptions.clip) {
                try Clipboard.copy(password, clearAfter: 45, ctx)
                ctx.say("vault: copied a new password (\(Int(bits)) bits) to the clipboard; it is cleared in 45s")
                return
            }
            if inv.has(GenerateOptions.json) {
                ctx.stdout.write(jsonText(["password": password, "entropy_bits": (bits * 10).rounded(.down) / 10]))
            } else {
                ctx.stdout.write(password + "\n")
            }
        })

    /// The options of `generate`, which `add --generate` and `edit --generate` take too.
    static let passwordOptions: [OptionSpec] = [
        PasswordOptions.length, PasswordOptions.noSymbols, PasswordOptions.noDigits, PasswordOptions.noUpper,
        PasswordOptions.noLower, PasswordOptions.excludeSimilar, PasswordOptions.chars, PasswordOptions.words,
        PasswordOptions.separator,
    ]

    /// A password as `generate`'s options ask (never starting with `-`), and its entropy in bits.
    static func password(_ inv: Invocation) throws -> (password: String, bits: Double) {
        if let w = try inv.int(PasswordOptions.words) {
            for option in PasswordOptions.characterOptions where inv.has(option) {
                throw VaultError.usage("\(option.name) applies to characters, not to --words", hint: "the number of words sets the length")
            }
            return (try PasswordGenerator.words(w, separator: inv[PasswordOptions.separator] ?? "-"), PasswordGenerator.wordsEntropyBits(w))
        }
        if inv.has(PasswordOptions.separator) { throw VaultError.usage("--separator applies to --words only") }
        var g = PasswordGenerator(length: try inv.int(PasswordOptions.length) ?? 24)
        g.symbols = !inv.has(PasswordOptions.noSymbols)
        g.digits = !inv.has(PasswordOptions.noDigits)
        g.upper = !inv.has(PasswordOptions.noUpper)
        g.lower = !inv.has(PasswordOptions.noLower)
        g.excludeSimilar = inv.has(PasswordOptions.excludeSimilar)
        g.characters = inv[PasswordOptions.chars]
        if g.characters != nil, PasswordOptions.classes.contains(where: inv.has) {
            throw VaultError.usage("--chars replaces the character classes: leave out --no-*")
        }
        return (try g.generate(), g.entropyBits)
    }

    /// The options of `version`, declared once: the table lists them and the command reads them.
    enum VersionOptions {
        static let json = OptionSpec.flag("--json", "print {\"name\": \"vault\", \"version\": ...}")
    }

    static let version = CommandSpec(
        name: "version", summary: "print the version (also 'vault --version')", usage: "vault version [--json]",
        options: [VersionOptions.json],
        examples: "vault --version\nvault version --json | jq -r .version",
        run: { inv, ctx in
            if inv.has(VersionOptions.json) {
                ctx.stdout.write(jsonText(["name": "vault", "version": VaultCLI.version]))
            } else {
                ctx.stdout.write("vault \(VaultCLI.version)\n")
            }
        })
}
