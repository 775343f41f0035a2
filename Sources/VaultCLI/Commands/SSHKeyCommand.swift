import FoundationEssentials
import VaultKit
import VaultSSH
import VaultSystem

/// `vault ssh-key generate|import|pub|ls`: SSH keys held in the vault as `ssh-key` items
/// (docs/format.md, "SSH keys"), which `vault ssh-agent` offers and a finger releases.
enum SSHKeyCommand {
    /// The options of `ssh-key`, declared once: the table lists them and the command reads them.
    enum SSHKeyOptions {
        static let type = OptionSpec.value("--type", "T", "generate: ed25519 (default), ecdsa or rsa")
        static let bits = OptionSpec.value("--bits", "N", "generate: ecdsa 256 (default), 384 or 521; rsa 2048 to 16384 (default 3072)")
        static let comment = OptionSpec.value("--comment", "C", "the public key's comment (generate: default NAME; import: else the file's, else NAME)")
        static let confirm = OptionSpec.value("--confirm", "P", "when the agent asks for a finger: sign (every signature), session (default: once per program until 'vault lock'), none (once, then any program)")
        static let passphraseFD = OptionSpec.value("--passphrase-fd", "N", "import: read the key file's passphrase from file descriptor N (else asked on the terminal)")
        static let json = OptionSpec.flag("--json", "ls: print {\"keys\": [{\"name\", \"type\", \"fingerprint\", \"public_key\", \"confirm\"}]}")
        static let force = OptionSpec.flag("--force", "replace an existing item of that name")
    }

    static let sshKey = CommandSpec(
        name: "ssh-key", summary: "SSH keys in the vault: generate, import, print the public key, list",
        usage: "vault ssh-key generate NAME [--type ed25519|ecdsa|rsa] [--bits N] [--comment C] [--confirm sign|session|none]\n"
            + "       vault ssh-key import NAME FILE [--passphrase-fd N] [--comment C] [--confirm P]\n"
            + "       vault ssh-key pub NAME\n"
            + "       vault ssh-key ls [--json]",
        options: [SSHKeyOptions.type, SSHKeyOptions.bits, SSHKeyOptions.comment, SSHKeyOptions.confirm, SSHKeyOptions.passphraseFD,
                  SSHKeyOptions.json, SSHKeyOptions.force] + Auth.options,
        arguments: 1...3,
        examples: """
        vault ssh-key generate github --confirm sign
        vault ssh-key pub github >> ~/.ssh/authorized_keys
        vault ssh-key import work ~/.ssh/id_ed25519 --passphrase-fd 3 3<passphrase.txt
        vault ssh-key ls --json | jq -r '.keys[].fingerprint'
        eval "$(vault ssh-agent -s)"; ssh-add -L
        """,
        run: { inv, ctx in
            let verb = inv.arguments[0]
            let counts = ["generate": 2...2, "import": 3...3, "pub": 2...2, "ls": 1...1]
            guard let count = counts[verb] else {
                throw VaultError.usage("ssh-key: unknown action '\(verb)'", hint: "actions: generate, import, pub, ls"
                                       + (Spelling.nearest(to: verb, among: Array(counts.keys)).map { "; did you mean '\($0)'?" } ?? ""))
            }
            guard count.contains(inv.arguments.count) else {
                throw VaultError.usage("ssh-key \(verb) takes \(count.lowerBound - 1 == 0 ? "no name" : verb == "import" ? "NAME FILE" : "NAME")")
            }
            switch verb {
            case "generate": try generate(inv, ctx)
            case "import": try importKey(inv, ctx)
            case "pub": try pub(inv, ctx)
            default: try list(inv, ctx)
            }
        })

    private static func confirmPolicy(_ inv: Invocation) throws -> SSHKeyConfirm {
        guard let raw = inv[SSHKeyOptions.confirm] else { return .session }
        guard let c = SSHKeyConfirm(rawValue: raw) else { throw VaultError.usage("--confirm: '\(raw)' is not sign, session or none") }
        return c
    }

    /// Stores `key` as the item `name` (refusing an existing one without `--force`).
    private static func store(_ key: SSHPrivateKey, name: String, comment: String, _ inv: Invocation, _ ctx: CommandContext) throws {
        let confirm = try confirmPolicy(inv)
        let item = try SSHKeyItem.item(name: name, key: key, comment: comment, confirm: confirm)
        let vault = try openAccess(inv, ctx, purpose: "store the SSH key '\(name)'")
        if try vault.contains(name), !inv.has(SSHKeyOptions.force) { throw VaultError.alreadyExists(name) }
        try vault.add(item, replace: inv.has(SSHKeyOptions.force))
        ctx.stdout.write(key.publicKey.authorizedKeysLine(comment: comment) + "\n")
    }

    private static func generate(_ inv: Invocation, _ ctx: CommandContext) throws {
        let name = try Item.normalize(name: inv.arguments[1])
        let rawType = inv[SSHKeyOptions.type] ?? "ed25519"
        guard let type = SSHPrivateKey.Generated(rawValue: rawType) else {
            throw VaultError.usage("--type: '\(rawType)' is not ed25519, ecdsa or rsa", hint: "vault never generates DSA keys")
        }
        _ = try confirmPolicy(inv)
        let key: SSHPrivateKey
        do { key = try SSHPrivateKey.generate(type, bits: try inv.int(SSHKeyOptions.bits)) } catch let e as SSHWireError {
            throw VaultError.usage("--bits: \(e)")
        }
        try store(key, name: name, comment: inv[SSHKeyOptions.comment] ?? name, inv, ctx)
    }

    private static func importKey(_ inv: Invocation, _ ctx: CommandContext) throws {
        let name = try Item.normalize(name: inv.arguments[1])
        let path = inv.arguments[2]
        _ = try confirmPolicy(inv)
        var file: [UInt8]
        do { file = try FileDescriptor.open(path, .readOnly).readAll(limit: 1 << 20) } catch {
            throw VaultError.io(path: path, "cannot read the key file: \(error.reason)")
        }
        defer { wipe(&file) }
        let read: (key: SSHPrivateKey, comment: String)
        do {
            read = try SSHKeyFile.read(file) {
                if let fd = try SecretInput.descriptor(inv, SSHKeyOptions.passphraseFD) {
                    return try SecretInput.line(fd: fd, what: "passphrase").exposedBytes()
                }
                guard !inv.noInput, ctx.terminal.isAvailable else { return nil }
                return try SecretInput.ask(ctx, inv, prompt: "passphrase of '\(path)': ", reason: "no terminal").exposedBytes()
            }
        } catch let e as SSHKeyFileError {
            switch e {
            case .passphraseNeeded:
                throw VaultError.usage("'\(path)' is encrypted and no passphrase can be read", hint: "give it with --passphrase-fd N, or run on a terminal")
            case .wrongPassphrase:
                throw VaultError.failure("the passphrase does not open '\(path)'")
            case .unreadable(let why):
                throw VaultError.failure("'\(path)' is not a private key vault reads: \(why)", hint: "vault reads OpenSSH private keys (openssh-key-v1) and PEM or PKCS#8 files")
            }
        } catch let e as SSHWireError {
            throw VaultError.failure("'\(path)' holds a key vault cannot use: \(e)")
        }
        try store(read.key, name: name, comment: inv[SSHKeyOptions.comment] ?? (read.comment.isEmpty ? name : read.comment), inv, ctx)
    }

    /// The `ssh-key` item `name`'s listing, or a usage error for another item.
    private static func listed(_ name: String, in vault: any VaultAccess) throws -> SSHKeyItem.Listed {
        let overview = try vault.overview(named: try ItemLookup.existing(name, in: vault))
        guard let listed = SSHKeyItem.listed(overview.item) else {
            throw VaultError.usage("'\(overview.item.name)' is not an SSH key (its type is \(overview.item.type.rawValue))", hint: "'vault ssh-key ls' lists them")
        }
        return listed
    }

    private static func pub(_ inv: Invocation, _ ctx: CommandContext) throws {
        let name = try Item.normalize(name: inv.arguments[1])
        let vault = try openAccess(inv, ctx, purpose: "print the public key of '\(name)'")
        ctx.stdout.write(try listed(name, in: vault).line + "\n")
    }

    private static func list(_ inv: Invocation, _ ctx: CommandContext) throws {
        let vault = try openAccess(inv, ctx, purpose: "list SSH keys")
        var keys: [SSHKeyItem.Listed] = []
        try vault.forEachOverview(matching: nil) { e in
            if case .item(let o) = e, let l = SSHKeyItem.listed(o.item) { keys.append(l) }
        }
        keys.sort { $0.name < $1.name }
        if inv.has(SSHKeyOptions.json) {
            ctx.stdout.write(jsonText(["keys": keys.map { k -> [String: Any] in
                ["name": k.name, "type": k.publicKey.typeName, "fingerprint": k.publicKey.fingerprint, "public_key": k.line,
                 "comment": k.comment, "confirm": k.confirm.rawValue]
            }]))
        } else {
            for k in keys { ctx.stdout.write("\(k.name)\t\(k.publicKey.fingerprint)\t\(k.confirm.rawValue)\t\(k.comment)\n") }
        }
    }
}
