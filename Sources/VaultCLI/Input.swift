import FoundationEssentials
import VaultKit
import VaultSystem


/// Reading secrets: from a descriptor named on the command line, else from the terminal, never
/// from argv or the environment.
enum SecretInput {
    /// A descriptor number from an option, checked to be open.
    static func descriptor(_ inv: Invocation, _ option: OptionSpec) throws -> Int32? {
        guard let raw = inv[option] else { return nil }
        guard let fd = Int32(raw), fd >= 0 else { throw VaultError.usage("\(option.name) expects a file descriptor number, not '\(raw)'") }
        guard isOpen(fd) else { throw VaultError.usage("\(option.name) \(fd): that file descriptor is not open") }
        return fd
    }

    /// The first line of `fd`, refused when empty.
    static func line(fd: Int32, what: String) throws -> SecretBytes {
        guard let s = try SecretLine.read(fd: fd), s.count > 0 else {
            throw VaultError.usage("no \(what) could be read from file descriptor \(fd)")
        }
        return s
    }

    /// Asks once on the terminal; `reason` explains a refusal to prompt.
    static func ask(_ ctx: CommandContext, _ inv: Invocation, prompt: String, reason: String) throws -> SecretBytes {
        guard !inv.noInput, ctx.terminal.isAvailable else { throw VaultError.passcodeNeeded(reason) }
        guard let s = try ctx.terminal.readSecret(prompt: prompt) else { throw VaultError.userCancel }
        if ctx.interrupted() { throw VaultError.userCancel }
        return s
    }

    /// The current passcode: `--passcode-fd`, else the terminal.
    /// `why` starts the prompt: what needs the passcode.
    static func passcode(_ ctx: CommandContext, _ inv: Invocation, vault: String, reason: String = "no terminal and no --passcode-fd",
                         why: String? = nil) throws -> SecretBytes {
        if let fd = try descriptor(inv, GlobalOptions.passcodeFD) { return try line(fd: fd, what: "passcode") }
        return try ask(ctx, inv, prompt: (why.map { $0 + "; " } ?? "") + "passcode for vault '\(vault)': ", reason: reason)
    }

    /// A new passcode: read once from `fdOption`, or asked twice on the terminal.
    static func newPasscode(_ ctx: CommandContext, _ inv: Invocation, fdOption: OptionSpec) throws -> SecretBytes {
        if let fd = try descriptor(inv, fdOption) {
            let s = try PasscodeRule.normalized(try line(fd: fd, what: "new passcode"))
            try PasscodeRule.check(s)
            return s
        }
        // On a terminal: the rule is checked before the confirmation, and a mistake asks again
        // (three rounds), as passwd(1) does.
        let reason = "no terminal and no \(fdOption.name)"
        var last = VaultError.usage("no new passcode was given; nothing was changed")
        for _ in 1...3 {
            let typed = try ask(ctx, inv, prompt: "new passcode: ", reason: reason)
            guard let first = try checkedNew(typed, ctx, &last) else { continue }
            let second = try ask(ctx, inv, prompt: "repeat the new passcode: ", reason: reason)
            if let again = try? PasscodeRule.normalized(second), first.isEqual(to: again) { return first }
            ctx.say("vault: the two passcodes differ; try again")
            last = VaultError.usage("the two passcodes differ; nothing was changed")
        }
        throw last
    }

    /// A new passcode typed at the prompt, normalised and checked; nil (said, kept in `last`)
    /// when it breaks the rule, so the prompt asks again.
    private static func checkedNew(_ typed: borrowing SecretBytes, _ ctx: CommandContext, _ last: inout VaultError) throws -> SecretBytes? {
        do {
            let s = try PasscodeRule.normalized(typed)
            try PasscodeRule.check(s)
            return s
        } catch let e as VaultError {
            ctx.say("vault: \(e.message); try again")
            last = e
            return nil
        }
    }

    /// Whether a secret "from standard input" is typed by a person: standard input is the
    /// terminal and prompts are allowed. It is then asked with a prompt, echo off, and a repeat.
    static func typedOnTerminal(_ ctx: CommandContext, _ inv: Invocation) -> Bool {
        !inv.noInput && ctx.terminal.isAvailable && isTerminal(ctx.stdinFD)
    }

    /// A secret typed on the terminal: `prompt` with echo off, then `repeat the WHAT:`, three
    /// rounds; `optional`: Enter alone at the first prompt gives none. Refused when not UTF-8.
    static func typedSecret(_ ctx: CommandContext, _ inv: Invocation, prompt: String, what: String, optional: Bool) throws -> String? {
        for _ in 1...3 {
            let first = try ask(ctx, inv, prompt: prompt, reason: "no terminal")
            if first.count == 0 {
                if optional { return nil }
                ctx.say("vault: the \(what) is empty; try again")
                continue
            }
            let second = try ask(ctx, inv, prompt: "repeat the \(what): ", reason: "no terminal")
            guard first.isEqual(to: second) else {
                ctx.say("vault: the two \(what)s differ; try again")
                continue
            }
            guard let text = first.withUnsafeBytes({ String(validating: $0, as: UTF8.self) }) else {
                throw VaultError.usage("the \(what) typed is not valid UTF-8", hint: "check the terminal's encoding (locale charmap should say UTF-8)")
            }
            return text
        }
        throw VaultError.usage("no \(what) was given; nothing was saved")
    }

    /// A secret value "from standard input" (`--totp-stdin`, a hidden or TOTP `--field`,
    /// `--notes-stdin`): typed at a prompt on the terminal (echo off, asked twice), else the
    /// next line of standard input, byte for byte.
    static func secretValue(_ ctx: CommandContext, _ inv: Invocation, prompt: String, what: String) throws -> String {
        if typedOnTerminal(ctx, inv) {
            return try typedSecret(ctx, inv, prompt: prompt, what: what, optional: false)!
        }
        return try stdinText(ctx, what: what)
    }

    /// The longest notes `--notes-stdin` and `--notes-edit` take.
    static let notesLimit = 1 << 20

    /// `--notes-stdin` without a terminal: the rest of standard input (every line, to its end),
    /// one final newline dropped; refused when not UTF-8. On a terminal: one line, asked twice.
    static func notes(_ ctx: CommandContext, _ inv: Invocation, label: String) throws -> String {
        if typedOnTerminal(ctx, inv) {
            return try typedSecret(ctx, inv, prompt: "notes for '\(label)' (one line; --notes-edit on edit for more): ", what: "notes", optional: false)!
        }
        var bytes: [UInt8] = []
        defer { wipe(&bytes) }
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { wipe(&chunk) }
        while true {
            let n: Int
            do {
                n = try chunk.withUnsafeMutableBytes { (b) throws(SystemError) -> Int in try readSome(fd: ctx.stdinFD, into: b, label: "standard input") }
            } catch {
                throw VaultError.io(path: "standard input", (error as? SystemError)?.reason ?? "\(error)")
            }
            if n == 0 { break }
            bytes += chunk[0..<n]
            guard bytes.count <= notesLimit else {
                throw VaultError.usage("the notes on standard input are longer than \(notesLimit >> 10) KiB")
            }
        }
        if bytes.last == 10 { bytes.removeLast() }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw VaultError.usage("the notes on standard input are not valid UTF-8", hint: "convert them to UTF-8 first (iconv)")
        }
        return text
    }

    /// `--password-stdin`: the next line of standard input.
    static func stdinLine(_ ctx: CommandContext, what: String) throws -> SecretBytes {
        guard let s = try SecretLine.read(fd: ctx.stdinFD) else {
            throw VaultError.usage("standard input is empty; expected the \(what)")
        }
        return s
    }

    /// A value stored byte for byte (`--password-stdin`): the next line, its bytes unchanged, as
    /// text. Refused, rather than altered, when it is not UTF-8 or ends with a carriage return.
    static func stdinText(_ ctx: CommandContext, what: String) throws -> String {
        guard let s = try SecretLine.read(fd: ctx.stdinFD, stripCarriageReturn: false) else {
            throw VaultError.usage("standard input is empty; expected the \(what)")
        }
        return try s.withUnsafeBytes { raw in
            if raw.last == 13 {
                throw VaultError.usage("the \(what) on standard input ends with a carriage return (a CRLF line)",
                                       hint: "vault stores it byte for byte: give it with a plain newline")
            }
            guard let text = String(validating: raw, as: UTF8.self) else {
                throw VaultError.usage("the \(what) on standard input is not valid UTF-8",
                                       hint: "vault would have to alter it; convert it to UTF-8 first (iconv)")
            }
            return text
        }
    }

}

/// Argon2id cost from `--kdf-memory MIB` and `--kdf-ops N`.
func kdfParameters(_ inv: Invocation) throws -> KDFParameters? {
    let mem = try inv.int(VaultCommands.InitOptions.kdfMemory), ops = try inv.int(VaultCommands.InitOptions.kdfOps)
    if mem == nil && ops == nil { return nil }
    let m = mem ?? KDFParameters.defaultMemoryMiB, o = ops ?? KDFParameters.defaultOperations
    guard (KDFParameters.minimumMemoryMiB...4096).contains(m) else {
        throw VaultError.usage("--kdf-memory must be between \(KDFParameters.minimumMemoryMiB) and 4096 MiB")
    }
    guard (1...20).contains(o) else { throw VaultError.usage("--kdf-ops must be between 1 and 20") }
    return KDFParameters(memoryMiB: m, operations: o)
}

/// JSON for scripts: sorted keys, one document, a newline.
func jsonText(_ object: Any) -> String {
    JSONText.text(object) + "\n"
}
