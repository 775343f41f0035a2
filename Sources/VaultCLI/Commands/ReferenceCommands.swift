import FoundationEssentials
import VaultKit
import VaultOTP
import VaultSystem

/// Resolves secret references (`vault://[VAULT/]ITEM/FIELD`) for one command: each vault is
/// opened once (one finger touch, or its unlock session, per vault and command, however many
/// references name it), every reference is checked before any secret is released, and each
/// released secret is one audit record (`command`), however often it is named.
final class ReferenceResolver {
    private let inv: Invocation
    private let ctx: CommandContext
    private let command: String
    private let purpose: String
    private var opened: [String: any VaultAccess] = [:]

    /// A resolver for `command` (the audit log's name); `purpose` is shown at the prompt.
    init(_ inv: Invocation, _ ctx: CommandContext, command: String, purpose: String) {
        var inv = inv
        inv.passcodeOnce = PasscodeOnce()
        self.inv = inv
        self.ctx = ctx
        self.command = command
        self.purpose = purpose
    }

    /// The name of the vault `vault` (nil: the command's) as `VaultLocation` reads it.
    func vaultName(_ vault: String?) throws -> String {
        try VaultLocation(name: vault ?? inv[GlobalOptions.vault], environment: ctx.environment).name
    }

    /// The open vault `vault` (nil: the command's), opened on first use.
    func access(_ vault: String?) throws -> any VaultAccess {
        let name = try vaultName(vault)
        if let a = opened[name] { return a }
        var i = inv
        i.set(GlobalOptions.vault, to: [name])
        let a = try openAccess(i, ctx, purpose: purpose)
        opened[name] = a
        return a
    }

    /// The item with the secrets `fields` selects from `vault`, after the fresh match its
    /// fingerprint login asks for (one touch per vault and command: later items reuse that
    /// match, each with a token of its own).
    func release(_ item: String, fields: FieldSelection, vault: String?) throws -> Item {
        let (a, i) = try accessAndInvocation(vault)
        return try Release.guarded(a, i, ctx) { try a.release(named: item, fields: fields, command: command, freshMatch: $0) }
    }

    /// One secret field of an item into guarded memory (`VaultAccess.releaseSecret`: one audit
    /// record), after the fresh match its fingerprint login asks for (as `release`).
    func releaseSecret(_ item: String, field: ItemField, vault: String?) throws -> SecretBox {
        let (a, i) = try accessAndInvocation(vault)
        return SecretBox(try Release.guarded(a, i, ctx) { try a.releaseSecret(named: item, field: field, command: command, freshMatch: $0) })
    }

    /// The open vault `vault` and this command's invocation naming it (what the fresh match
    /// opens the vault's store and authority with).
    private func accessAndInvocation(_ vault: String?) throws -> (any VaultAccess, Invocation) {
        let name = try vaultName(vault)
        var i = inv
        i.set(GlobalOptions.vault, to: [name])
        return (try access(vault), i)
    }

    /// Every reference's value, keyed by its text; secrets (released fields) marked so. A
    /// secret goes from its record to guarded memory without becoming a String.
    /// - Throws: `.referenceNotFound` (exit 3) naming the first reference with no such field
    ///   name, vault, item or value: then nothing is released.
    func resolve(_ references: [SecretReference]) throws -> [(key: String, part: SecretValues.Part, secret: Bool)] {
        var seen = Set<SecretReference>()
        let references = references.filter { seen.insert($0).inserted }
        // Everything is checked on the overviews (no secret) before the first release.
        var overviews: [SecretReference: ItemOverview] = [:]
        for r in references {
            let overview: ItemOverview
            do {
                overview = try access(r.vault).overview(named: r.item)
            } catch VaultError.itemNotFound(let n) {
                throw VaultError.referenceNotFound(reference: r.text, "no item named '\(n)'")
            } catch VaultError.vaultNotFound(let n, _) {
                throw VaultError.referenceNotFound(reference: r.text, "no vault named '\(n)'")
            }
            let item = overview.item
            guard r.field != .history else {
                throw VaultError.referenceNotFound(reference: r.text, "a reference names one value, not the password history (vault get ITEM --field history)")
            }
            guard overview.has(r.field) else {
                throw VaultError.referenceNotFound(reference: r.text, "item '\(item.name)' has no \(r.field.isBuiltIn ? r.field.spelling : "field '\(r.field)'")")
            }
            overviews[r] = overview
        }
        // One release per secret (vault, item, field), however often it is named.
        struct SecretKey: Hashable { let vault: String; let item: String; let field: ItemField }
        var released: [SecretKey: SecretBox] = [:]
        return try references.map { r in
            let item = overviews[r]!.item
            guard item.isSecretField(r.field) else {
                guard let value = item.value(of: r.field) else {
                    throw VaultError.referenceNotFound(reference: r.text, "item '\(item.name)' has no \(r.field)")
                }
                return (r.text, .bytes(Array(value.utf8)), false)
            }
            let field = r.field.source
            let key = SecretKey(vault: try vaultName(r.vault), item: item.name, field: field)
            if released[key] == nil { released[key] = try releaseSecret(item.name, field: field, vault: r.vault) }
            // `otp` and `totp` are the current code of the TOTP secret released; `totp-uri` the secret.
            if r.field == .otp || r.field == .totp { return (r.text, .secret(try Self.currentCode(of: released[key]!, r.text, item: r.item)), true) }
            return (r.text, .secret(released[key]!), true)
        }
    }
}

extension ReferenceResolver {
    /// The current TOTP code of a released `otpauth://` URI. An HOTP secret is refused: a
    /// reference cannot advance and store its counter (`vault otp NAME` does).
    static func currentCode(of uri: SecretBox, _ what: String, item: String) throws -> SecretBox {
        let text = uri.bytes.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
        let auth = try OTPAuth(uri: text)
        guard auth.kind == .totp else {
            throw VaultError.usage("'\(what)' names an HOTP secret: a reference cannot advance its counter", hint: "use 'vault otp \(item)'")
        }
        let code = try OTP.code(for: auth, uri: text, at: Int64(Date().timeIntervalSince1970.rounded(.down)))
        return SecretBox(try SecretBytes(copying: Array(code.code.utf8)))
    }
}

/// The passcode of `--passcode-fd`, read on first use and lent to each vault a command opens:
/// the descriptor holds one line, and a command resolving references to two vaults opens both.
final class PasscodeOnce {
    private final class Held {
        let passcode: SecretBytes
        init(_ p: consuming SecretBytes) { passcode = p }
    }
    private var held: Held?

    /// A copy of the passcode, read from `fd` the first time.
    func passcode(fd: Int32) throws -> SecretBytes {
        if held == nil { held = Held(try SecretInput.line(fd: fd, what: "passcode")) }
        return try held!.passcode.duplicate()
    }
}

/// `vault read` and `vault inject`: secret references resolved for scripts.
enum ReferenceCommands {
    static let all: [CommandSpec] = [read, inject]

    /// The options of `read`, declared once: the table lists them and the command reads them.
    enum ReadOptions {
        static let noNewline = OptionSpec.flag("--no-newline", "print the value without a newline after it")
    }

    static let read = CommandSpec(
        name: "read", summary: "print the value a secret reference vault://[VAULT/]ITEM/FIELD names",
        usage: "vault read vault://[VAULT/]ITEM/FIELD [--no-newline]",
        options: [ReadOptions.noNewline] + Auth.options,
        arguments: 1...1,
        examples: """
        vault read vault://github/password
        vault read vault://work/prod%2Fdb/username
        PGPASSWORD=$(vault read vault://prod-db/password --no-input) psql ...
        """,
        run: { inv, ctx in
            let reference = try SecretReference(parsing: inv.arguments[0])
            let resolver = ReferenceResolver(inv, ctx, command: "read", purpose: "read \(reference.text)")
            let values = try SecretValues(try resolver.resolve([reference]))
            values.withValue(reference.text) { v in
                if ctx.stdout.isTerminal {
                    ctx.stdout.write(terminalSafe(String(decoding: v, as: UTF8.self), onTerminal: true))
                } else {
                    writeBytes(v, to: ctx.stdout)
                }
            }
            if !inv.has(ReadOptions.noNewline) { ctx.stdout.write("\n") }
        })

    /// The options of `inject`, declared once: the table lists them and the command reads them.
    enum InjectOptions {
        static let inFile = OptionSpec.value("--in-file", "TEMPLATE", "read the template from this file (default: standard input)").alias("-i")
        static let outFile = OptionSpec.value("--out-file", "OUT", "write the result to this file, created 0600 (default: standard output)").alias("-o")
    }

    static let inject = CommandSpec(
        name: "inject", summary: "fill {{ vault://ITEM/FIELD }} placeholders of a template",
        usage: "vault inject [-i TEMPLATE] [-o OUT]",
        options: [
            InjectOptions.inFile,
            InjectOptions.outFile,
        ] + Auth.options,
        examples: """
        vault inject -i config.yml.tpl -o config.yml
        echo 'db_password: {{ vault://prod-db/password }}' | vault inject
        """,
        run: { inv, ctx in
            var input = try readTemplate(inv, ctx)
            defer { wipe(&input) }
            let template = try SecretTemplate(parsing: input)
            let references = template.references
            let resolver = ReferenceResolver(inv, ctx, command: "inject", purpose: "fill a template")
            let values = try SecretValues(try resolver.resolve(references))
            var size = 0
            for piece in template.pieces {
                switch piece {
                case .text(let t): size += t.count
                case .reference(let r): size += values.withValue(r.text) { $0.count }
                }
            }
            let output = try SecretBytes(zeroed: size)
            output.withUnsafeMutableBytes { out in
                var at = 0
                func put(_ b: UnsafeRawBufferPointer) {
                    guard let s = b.baseAddress, !b.isEmpty else { return }
                    out.baseAddress!.advanced(by: at).copyMemory(from: s, byteCount: b.count)
                    at += b.count
                }
                for piece in template.pieces {
                    switch piece {
                    case .text(let t): t.withUnsafeBytes(put)
                    case .reference(let r): values.withValue(r.text, put)
                    }
                }
            }
            if let path = inv[InjectOptions.outFile] {
                let failure = output.withUnsafeBytes { b -> SystemError? in
                    do throws(SystemError) { try AtomicFile.write(b, to: path, mode: 0o600); return nil } catch { return error }
                }
                if let failure { throw VaultError.io(path: path, failure.reason) }
                ctx.say("vault: wrote \(path) (\(references.count) reference\(references.count == 1 ? "" : "s"))")
            } else {
                output.withUnsafeBytes { writeBytes($0, to: ctx.stdout) }
            }
        })

    /// The template: the file `--in-file`, else standard input (at most 16 MiB).
    static func readTemplate(_ inv: Invocation, _ ctx: CommandContext) throws -> [UInt8] {
        let limit = 16 << 20
        do {
            if let path = inv[InjectOptions.inFile] {
                let fd = try FileDescriptor.open(path, .readOnly)
                return try fd.readAll(limit: limit)
            }
            return try readAll(fd: ctx.stdinFD, limit: limit, label: "standard input")
        } catch {
            throw VaultError.io(path: error.path ?? inv[InjectOptions.inFile] ?? "standard input", error.reason)
        }
    }
}
