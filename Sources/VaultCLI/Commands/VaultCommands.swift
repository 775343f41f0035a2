import Foundation
import VaultKit

enum VaultCommands {
    static let initCommand = CommandSpec(
        name: "init", summary: "create a vault: passcode, recovery key (printed once on stdout)",
        usage: "vault init [--vault NAME] [--kdf-memory MIB] [--kdf-ops N] [--json]",
        options: [
            .value("--kdf-memory", "MIB", "Argon2id memory for the passcode slot (default 256)"),
            .value("--kdf-ops", "N", "Argon2id passes (default 3)"),
            .flag("--json", "print the result as JSON"),
            .flag("--no-fingerprint", "do not enrol a finger or bind the vault to the enrolled prints"),
            .value("--finger", "F", "the finger to enrol when none is enrolled yet (default right-index)"),
            .value("--scan-timeout", "D", "how long to wait for each touch (default 30s)"),
        ],
        examples: """
        vault init
        vault init --vault work --passcode-fd 3 3<passcode.txt > recovery-key.txt
        """,
        run: { inv, ctx in
            let loc = try location(inv, ctx)
            let kdf = try kdfParameters(inv) ?? KDFParameters()
            // Every option is checked before anything is created.
            _ = try inv.value("--finger").map(FingerprintCommands.parseFinger)
            _ = try scanTimeout(inv)
            if loc.exists {
                throw VaultError.failure("a vault named '\(loc.name)' already exists at \(loc.folder)",
                                         hint: "pick another name with --vault NAME")
            }
            let passcode: SecretBytes
            if let fd = try SecretInput.descriptor(inv, "--passcode-fd") {
                passcode = try SecretInput.line(fd: fd, what: "passcode")
                try PasscodeRule.check(passcode)
            } else {
                passcode = try SecretInput.newPasscode(ctx, inv, fdOption: "--passcode-fd")
            }
            // The recovery key is shown before the vault exists (a vault whose key was never shown
            // cannot be left behind, by a crash or a failed enrolment) and before any fingerprint.
            let created = try VaultStore.create(at: loc, passcode: passcode, kdf: kdf) { key in
                if inv.has("--json") {
                    ctx.stdout.write(jsonText(["vault": loc.name, "path": loc.folder, "recovery_key": key]))
                } else {
                    ctx.say("your recovery key for vault '\(loc.name)' (printed once on standard output; write it down and keep it apart from this machine):")
                    ctx.stdout.write(key + "\n")
                }
                if let f = ctx.stdout.failure { throw VaultError.io(path: "standard output", f.reason + "; the vault was not created") }
            }
            ctx.say("created vault '\(loc.name)' at \(loc.folder)")
            if !inv.has("--no-fingerprint") {
                do {
                    try FingerprintCommands.setUpAtInit(created.vault, inv, ctx)
                } catch {
                    ctx.say("vault: the vault was created, but setting up the fingerprint did not finish; 'vault enroll\(loc.name == "default" ? "" : " --vault \(loc.name)")' continues")
                    throw error
                }
            }
            try Auth.authority(for: created.vault.store, inv, ctx).recordUnlock(of: created.vault)
        })

    static let passcode = CommandSpec(
        name: "passcode", summary: "change the passcode (re-wraps the passcode slot only)",
        usage: "vault passcode [--passcode-fd N] [--new-passcode-fd M] [--kdf-memory MIB] [--kdf-ops N]",
        options: [
            .value("--new-passcode-fd", "M", "read the new passcode from file descriptor M"),
            .value("--kdf-memory", "MIB", "new Argon2id memory"),
            .value("--kdf-ops", "N", "new Argon2id passes"),
        ],
        examples: "vault passcode\nvault passcode --passcode-fd 3 --new-passcode-fd 4 3<old 4<new",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let kdf = try kdfParameters(inv)
            let vault = try Auth.unlockWithPasscode(store, inv, ctx)
            let new = try SecretInput.newPasscode(ctx, inv, fdOption: "--new-passcode-fd")
            try vault.changePasscode(to: new, kdf: kdf)
            ctx.say("passcode changed (only the passcode slot was re-wrapped; 'vault rotate' replaces every key)")
        })

    static let recover = CommandSpec(
        name: "recover", summary: "set a new passcode with the recovery key",
        usage: "vault recover [--recovery-key-fd N] [--new-passcode-fd M]",
        options: [
            .value("--recovery-key-fd", "N", "read the recovery key from file descriptor N"),
            .value("--new-passcode-fd", "M", "read the new passcode from file descriptor M"),
        ],
        examples: "vault recover\nvault recover --recovery-key-fd 3 --new-passcode-fd 4 3<key.txt 4<new",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let vault = try Auth.unlockWithRecoveryKey(store, inv, ctx)
            let new = try SecretInput.newPasscode(ctx, inv, fdOption: "--new-passcode-fd")
            try vault.changePasscode(to: new, kdf: nil)
            ctx.say("new passcode set for vault '\(store.location.name)'")
        })

    static let status = CommandSpec(
        name: "status", summary: "show the vault, its slots and the fingerprint state",
        usage: "vault status [--json]",
        options: [.flag("--json", "print JSON")],
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
            if inv.has("--json") {
                ctx.stdout.write(jsonText(o))
            } else {
                let order = ["vault", "path", "items", "slots", "key_generation", "policy"] + o.keys.sorted().filter {
                    !["vault", "path", "items", "slots", "key_generation", "policy"].contains($0)
                }
                for k in order {
                    guard let v = o[k] else { continue }
                    if k == "migrated", let m = try store.migration() {
                        let when = Date(timeIntervalSince1970: TimeInterval(m.at)).formatted(.iso8601.year().month().day().dateSeparator(.dash).time(includingFractionalSeconds: false).timeSeparator(.colon))
                        ctx.stdout.write("migrated: from schema \(m.fromSchema) on \(when)\n")
                        continue
                    }
                    ctx.stdout.write("\(k.replacingOccurrences(of: "_", with: " ")): \(describe(v))\n")
                }
            }
        })

    static func describe(_ v: Any) -> String {
        if let a = v as? [Any] { return a.isEmpty ? "none" : a.map(describe).joined(separator: ", ") }
        if let d = v as? [String: Any] { return d.keys.sorted().map { "\($0)=\(describe(d[$0]!))" }.joined(separator: " ") }
        if let b = v as? Bool { return b ? "yes" : "no" }
        return "\(v)"
    }

    static let generate = CommandSpec(
        name: "generate", summary: "print a random password",
        usage: "vault generate [--length N] [--no-symbols] [--no-digits] [--no-upper] [--no-lower] [--exclude-similar] [--chars SET] | --words N [--separator S] [--json]",
        options: [
            .value("--length", "N", "characters (default 24)"),
            .flag("--no-symbols", "no punctuation"), .flag("--no-digits", "no digits"),
            .flag("--no-upper", "no upper case"), .flag("--no-lower", "no lower case"),
            .flag("--exclude-similar", "leave out characters easily confused: i l 1 L o 0 O"),
            .value("--chars", "SET", "draw only from these characters (replaces the classes)"),
            .value("--words", "N", "N words of the EFF large word list instead of characters (12.9 bits each)"),
            .value("--separator", "S", "between words (default -)"),
            .flag("--json", "print {\"password\": ..., \"entropy_bits\": ...}"),
        ],
        examples: "vault generate --length 32\nvault generate --words 6\nvault generate --chars 0123456789abcdef --length 40",
        run: { inv, ctx in
            func put(_ password: String, bits: Double) {
                if inv.has("--json") {
                    ctx.stdout.write(jsonText(["password": password, "entropy_bits": (bits * 10).rounded(.down) / 10]))
                } else {
                    ctx.stdout.write(password + "\n")
                }
            }
            if let w = try inv.int("--words") {
                for option in ["--length", "--chars", "--exclude-similar", "--no-symbols", "--no-digits", "--no-upper", "--no-lower"] where inv.has(option) {
                    throw VaultError.usage("\(option) applies to characters, not to --words", hint: "the number of words sets the length")
                }
                put(try PasswordGenerator.words(w, separator: inv.value("--separator") ?? "-"), bits: PasswordGenerator.wordsEntropyBits(w))
                return
            }
            if inv.has("--separator") { throw VaultError.usage("--separator applies to --words only") }
            var g = PasswordGenerator(length: try inv.int("--length") ?? 24)
            g.symbols = !inv.has("--no-symbols")
            g.digits = !inv.has("--no-digits")
            g.upper = !inv.has("--no-upper")
            g.lower = !inv.has("--no-lower")
            g.excludeSimilar = inv.has("--exclude-similar")
            g.characters = inv.value("--chars")
            if g.characters != nil, ["--no-symbols", "--no-digits", "--no-upper", "--no-lower"].contains(where: inv.has) {
                throw VaultError.usage("--chars replaces the character classes: leave out --no-*")
            }
            put(try g.generate(), bits: g.entropyBits)
        })

    static let version = CommandSpec(
        name: "version", summary: "print the version (also 'vault --version')", usage: "vault version [--json]",
        options: [.flag("--json", "print {\"name\": \"vault\", \"version\": ...}")],
        examples: "vault --version\nvault version --json | jq -r .version",
        run: { inv, ctx in
            if inv.has("--json") {
                ctx.stdout.write(jsonText(["name": "vault", "version": VaultCLI.version]))
            } else {
                ctx.stdout.write("vault \(VaultCLI.version)\n")
            }
        })
}
