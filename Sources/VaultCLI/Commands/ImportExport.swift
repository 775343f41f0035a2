import FoundationEssentials
import VaultAgent
import VaultKit
import VaultInterchange
import VaultSystem

/// `vault import` and `vault export`: vault's own JSON (lossless), the exports of other managers,
/// a Bitwarden JSON for leaving, and an encrypted export for backups.
enum ImportExport {
    static let formatNames = ImportFormat.allCases.filter { $0 != .encrypted }.map(\.rawValue)

    /// The options of `importCommand`, declared once: the table lists them and the command reads them.
    enum ImportOptions {
        static let from = OptionSpec.value("--from", "FORMAT", "the format (else detected): \(formatNames.joinedText(separator: ", "))")
        static let dryRun = OptionSpec.flag("--dry-run", "print what would be imported and change nothing")
        static let force = OptionSpec.flag("--force", "replace items whose names exist")
        static let json = OptionSpec.flag("--json", "print the counts as JSON: imported, added, replaced")
        static let passphraseFD = OptionSpec.value("--passphrase-fd", "N", "read an encrypted export's passphrase from file descriptor N")
        static let columns = OptionSpec.value("--columns", "C,C...", "with --from csv: what each column holds (\(MappedCSV.targets.joinedText(separator: ", ")), field:NAME); else the header row says")
    }

    static let importCommand = CommandSpec(
        name: "import", summary: "add items from vault's JSON or another manager's export (one transaction: all or nothing)",
        usage: "vault import [--from FORMAT [--columns C,C...]] [--dry-run] [--force] [--json] [--passphrase-fd N] [FILE | DIR | -]",
        options: [
            ImportOptions.from,
            ImportOptions.columns,
            ImportOptions.dryRun,
            ImportOptions.force,
            ImportOptions.json,
            ImportOptions.passphraseFD,
        ] + Auth.options,
        arguments: 0...1,
        examples: """
        vault import bitwarden_export.json
        vault import --from keepassxc-csv passwords.csv --dry-run
        vault import --from pass ~/.password-store
        vault import --from csv --columns name,username,password,url,notes logins.csv
        vault export --vault old | vault import --vault new
        """,
        run: { inv, ctx in
            let source = inv.arguments.first ?? "-"
            var format = try inv[ImportOptions.from].map { name -> ImportFormat in
                guard let f = ImportFormat(rawValue: name), f != .encrypted else {
                    throw VaultError.usage("unknown import format '\(name)'", hint: "formats: \(formatNames.joinedText(separator: ", "))")
                }
                return f
            }
            guard !inv.has(ImportOptions.columns) || format == .csv else {
                throw VaultError.usage("--columns goes with --from csv", hint: "'vault import --from csv --columns name,username,password,url,notes FILE'")
            }
            var batch: ImportBatch
            if source != "-", isFolder(source) {
                guard format == nil || format == .pass else { throw VaultError.usage("'\(source)' is a folder; only --from pass reads a folder") }
                if format == nil { ctx.say("vault: this looks like \(ImportFormat.pass.label) (--from pass)") }
                format = .pass
                batch = try PassStore.read(source, environment: ctx.environment, now: ctx.clock())
            } else {
                let input = try SourceReader(source, ctx)
                var head = try input.chunk(64 * 1024) ?? []
                defer { wipe(&head) }
                if format == nil {
                    guard let found = ImportFormat.detect(head) else {
                        throw VaultError.usage("cannot tell what format \(input.label) is in",
                                               hint: "name it with --from: \(formatNames.joinedText(separator: ", "))")
                    }
                    if found != .vault { ctx.say("vault: this looks like \(found.label) (--from \(found.rawValue))") }
                    format = found
                }
                if format == .vault, !inv.has(ImportOptions.dryRun), !inv.has(ImportOptions.force) {
                    // Straight into the vault: each item is decoded as its text is read and written
                    // in the one transaction (one item held at a time; a bad one anywhere writes
                    // nothing). With --force or --dry-run the names are needed first, so the items
                    // are collected below.
                    var stream = JSONArrayStream(prefix: head) { try input.chunk(1 << 20) }
                    let vault = try openAccess(inv, ctx, purpose: "import the items of \(input.label)")
                    var counted = ImportBatch(), index = 0
                    let now = ctx.clock()
                    let n: Int
                    if let direct = vault as? UnlockedVault {
                        // The vault's unique index of names finds a name given twice as the item
                        // is inserted (no set of names here); the item is the one just read.
                        n = try direct.add(replace: false, givenTwice: { ImportBatch.givenTwice($0, entry: "item \(index)") }) {
                            try VaultJSON.next(from: &stream, index: &index, now: now, counting: &counted, checkingNames: false)
                        }
                    } else {
                        // A session's agent adds the items only once all are sent: the names are
                        // checked here, as they are read.
                        n = try vault.add(replace: false) { try VaultJSON.next(from: &stream, index: &index, now: now, counting: &counted) }
                    }
                    report(written: n, replaced: 0, counted, from: .vault, inv, ctx)
                    return
                }
                // Read as it arrives, before the vault is opened: the readers hold the chunk
                // being read and one item's text, and the items (ImportLimits).
                batch = try read(input, head: head, format: format!, source: source, inv, ctx)
            }
            let used = format!
            if inv.has(ImportOptions.dryRun) {
                for item in batch.items { ctx.stdout.write("\(item.type.rawValue)\t\(terminalSafe(item.name, onTerminal: ctx.stdout.isTerminal))\n") }
                summarize(batch, verb: "would import", from: used, ctx)
                return
            }
            let vault = try openAccess(inv, ctx, purpose: "import \(batch.items.count) item\(batch.items.count == 1 ? "" : "s")")
            if inv.has(ImportOptions.force) {
                // Replacing an item with fingerprint login on changes what a touch protects: the
                // person confirms with one touch. (The vault does not demand the token: replacing
                // hands out nothing of the old items.)
                let guarded = try CredentialHelpers.readableItems(vault).filter(\.fingerprintLogin).map(\.name)
                if let first = batch.items.lazy.compactMap({ try? Item.normalize(name: $0.name) }).first(where: guarded.contains) {
                    _ = try Release.freshMatch(.fingerprintLoginSwitch(item: first), vault, inv, ctx,
                                               prompt: "touch the fingerprint reader to replace '\(first)' (fingerprint login is on)")
                }
            }
            let items = batch.takeItems()
            let replaced = inv.has(ImportOptions.json) && inv.has(ImportOptions.force)
                ? Set(try CredentialHelpers.readableItems(vault).map(\.name)).intersection(items.compactMap { try? Item.normalize(name: $0.name) }).count
                : 0
            let n = try vault.add(contentsOf: items, replace: inv.has(ImportOptions.force))
            report(written: n, replaced: replaced, batch, from: used, inv, ctx)
        })

    /// What an import wrote: the counts as JSON on stdout with `--json`, the summary on stderr.
    static func report(written n: Int, replaced: Int, _ batch: ImportBatch, from format: ImportFormat,
                       _ inv: Invocation, _ ctx: CommandContext) {
        if inv.has(ImportOptions.json) { ctx.stdout.write(jsonText(["imported": n, "added": n - replaced, "replaced": replaced])) }
        summarize(batch, verb: "imported", from: format, ctx)
    }

    /// FILE or standard input, read in chunks.
    final class SourceReader {
        let fd: Int32
        let owned: Bool
        let label: String

        init(_ source: String, _ ctx: CommandContext) throws {
            label = source == "-" ? "standard input" : "'\(source)'"
            if source == "-" {
                fd = ctx.stdinFD
                owned = false
            } else {
                do {
                    var file = try FileDescriptor.open(source, .readOnly)
                    fd = file.take()
                } catch {
                    throw VaultError.io(path: source, error.reason)
                }
                owned = true
            }
        }

        deinit { if owned { _ = FileDescriptor(owning: fd) } }

        /// Up to `count` bytes; nil at the end.
        func chunk(_ count: Int) throws -> [UInt8]? {
            var buffer = [UInt8](repeating: 0, count: count)
            let n: Int
            do {
                n = try buffer.withUnsafeMutableBytes { (b) throws(SystemError) -> Int in try readSome(fd: fd, into: b, label: label) }
            } catch {
                throw VaultError.io(path: label, (error as? SystemError)?.reason ?? "\(error)")
            }
            if n == 0 { return nil }
            buffer.removeSubrange(n...)
            return buffer
        }

    }

    /// An encrypted export, opened chunk by chunk as it is read; vault JSON inside is streamed
    /// on into the item reader, Bitwarden JSON gathered first.
    static func readEncrypted(_ input: SourceReader, head: [UInt8], _ inv: Invocation, _ ctx: CommandContext) throws -> ImportBatch {
        let passphrase: SecretBytes
        if let fd = try SecretInput.descriptor(inv, ImportOptions.passphraseFD) {
            passphrase = try SecretInput.line(fd: fd, what: "passphrase")
        } else {
            passphrase = try SecretInput.ask(ctx, inv, prompt: "passphrase of the encrypted export: ", reason: "no terminal and no --passphrase-fd")
        }
        var pending: [UInt8]? = head
        let reader = try EncryptedExport.Reader(passphrase: passphrase) {
            if let p = pending { pending = nil; return p }
            return try input.chunk(1 << 20)
        }
        var first = try reader.next() ?? []
        defer { wipe(&first) }
        switch ImportFormat.detect(first) {
        case .vault?:
            var stream = JSONArrayStream(prefix: first) { try reader.next() }
            return try VaultJSON.batch(from: &stream, now: ctx.clock())
        case .bitwarden?:
            return try BitwardenJSON.read(JSONStreamReader(prefix: first) { try reader.next() }, now: ctx.clock())
        default:
            throw VaultError.corrupt("the encrypted export holds neither vault nor Bitwarden JSON")
        }
    }

    /// Reads `input` as `format`, a chunk at a time after `head` (already read).
    static func read(_ input: SourceReader, head: [UInt8], format: ImportFormat, source: String, _ inv: Invocation,
                     _ ctx: CommandContext) throws -> ImportBatch {
        let now = ctx.clock()
        let more = { try input.chunk(1 << 20) }
        switch format {
        case .vault:
            var stream = JSONArrayStream(prefix: head, read: more)
            return try VaultJSON.batch(from: &stream, now: now)
        case .encrypted:
            return try readEncrypted(input, head: head, inv, ctx)
        case .bitwarden:
            return try BitwardenJSON.read(JSONStreamReader(prefix: head, read: more), now: now)
        case .bitwardenCSV, .keepassxcCSV, .onePasswordCSV, .chromeCSV, .firefoxCSV:
            var reader = CSVReader(prefix: head, read: more)
            return try ForeignCSV.read(&reader, format: format, now: now)
        case .csv:
            var reader = CSVReader(prefix: head, read: more)
            return try MappedCSV.read(&reader, columns: inv[ImportOptions.columns].map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) }, now: now)
        case .keepassXML:
            return try KeePassXMLReader.read(prefix: head, read: more, now: now)
        case .onePUX:
            // The zip is read a block at a time; export.data is parsed as it inflates.
            let zip = try ZipReader(fd: input.fd, head: head)
            var batch: ImportBatch?, attachments = 0
            while let path = try zip.nextFile() {
                if path == "export.data" {
                    guard batch == nil else { throw VaultError.usage("the 1PUX archive holds export.data twice") }
                    batch = try OnePUX.read(JSONStreamReader { try zip.chunk(limit: ImportLimits.inflated) }, now: now)
                } else if path.hasPrefix("files/") {
                    attachments += 1
                }
            }
            guard var batch else { throw VaultError.usage("the 1PUX archive has no export.data") }
            batch.drop("attachments: vault stores no files", attachments)
            return batch
        case .pass:
            return try PassStore.read(source, environment: ctx.environment, now: ctx.clock())
        }
    }

    /// The per-type summary on stderr, and what could not be kept and why.
    static func summarize(_ batch: ImportBatch, verb: String, from format: ImportFormat, _ ctx: CommandContext) {
        let taken = batch.items.isEmpty && batch.count > 0
        let byType = taken ? batch.counts : batch.countsByType
        let total = byType.reduce(0) { $0 + $1.1 }
        let types = byType.map { "\($0.1) \($0.0.rawValue)\($0.1 == 1 ? "" : "s")" }
        ctx.say("vault: \(verb) \(total) item\(total == 1 ? "" : "s")\(format == .vault ? "" : " from " + format.label)")
        if !types.isEmpty { ctx.say("vault: by type: \(types.joinedText(separator: ", "))") }
        for (reason, n) in batch.notKept.sorted(by: { $0.key < $1.key }) { ctx.say("vault: not kept: \(n) \(reason)") }
        for (reason, n) in batch.skipped.sorted(by: { $0.key < $1.key }) { ctx.say("vault: skipped \(n) item\(n == 1 ? "" : "s") \(reason)") }
        if batch.renamed > 0 { ctx.say("vault: \(batch.renamed) item\(batch.renamed == 1 ? " was" : "s were") renamed to keep names valid and unique ('name (2)')") }
    }

    /// The passphrase of an encrypted export: the first line of `--passphrase-fd`, or asked twice
    /// on the terminal (the passcode rule: at least 4 characters, not only blanks).
    static func newPassphrase(_ inv: Invocation, _ ctx: CommandContext) throws -> SecretBytes {
        if let fd = try SecretInput.descriptor(inv, ExportOptions.passphraseFD) {
            let s = try SecretInput.line(fd: fd, what: "passphrase")
            try PasscodeRule.check(s)
            return s
        }
        let reason = "no terminal and no --passphrase-fd"
        let first = try SecretInput.ask(ctx, inv, prompt: "passphrase for the encrypted export: ", reason: reason)
        try PasscodeRule.check(first)
        let second = try SecretInput.ask(ctx, inv, prompt: "repeat the passphrase: ", reason: reason)
        guard first.isEqual(to: second) else { throw VaultError.usage("the two passphrases differ; nothing was exported") }
        return first
    }

    /// The options of `exportCommand`, declared once: the table lists them and the command reads them.
    enum ExportOptions {
        static let format = OptionSpec.value("--format", "FORMAT", "vault (default: every field, for vault import) or bitwarden (for Bitwarden's importer)")
        static let encrypt = OptionSpec.flag("--encrypt", "seal the export with a passphrase (Argon2id + libsodium secretstream)")
        static let passphraseFD = OptionSpec.value("--passphrase-fd", "N", "with --encrypt: read the passphrase from file descriptor N (else asked twice)")
        static let kdfMemory = OptionSpec.value("--kdf-memory", "MIB", "with --encrypt: Argon2id memory (default 256)")
        static let kdfOps = OptionSpec.value("--kdf-ops", "N", "with --encrypt: Argon2id passes (default 3)")
        static let force = OptionSpec.flag("--force", "write a plain export to a terminal (else refused: every secret would be on the screen)")
    }

    static let exportCommand = CommandSpec(
        name: "export", summary: "print every item, secrets included (vault JSON, Bitwarden JSON, or encrypted)",
        usage: "vault export [--format vault|bitwarden] [--encrypt [--passphrase-fd N] [--kdf-memory MIB] [--kdf-ops N]] [--force]",
        options: [
            ExportOptions.format,
            ExportOptions.encrypt,
            ExportOptions.passphraseFD,
            ExportOptions.kdfMemory,
            ExportOptions.kdfOps,
            ExportOptions.force,
        ] + Auth.options,
        examples: """
        vault export > items.json
        vault export --format bitwarden > bitwarden.json
        vault export --encrypt > backup.vault-export && vault import backup.vault-export
        """,
        run: { inv, ctx in
            let format = inv[ExportOptions.format] ?? "vault"
            guard ["vault", "bitwarden"].contains(format) else { throw VaultError.usage("unknown export format '\(format)' (vault or bitwarden)") }
            if !inv.has(ExportOptions.encrypt) {
                for option in [ExportOptions.passphraseFD, ExportOptions.kdfMemory, ExportOptions.kdfOps] where inv.has(option) {
                    throw VaultError.usage("\(option.name) goes with --encrypt")
                }
            }
            if !inv.has(ExportOptions.encrypt) && ctx.stdout.isTerminal && !inv.has(ExportOptions.force) {
                throw VaultError.usage("refusing to print every secret of the vault on the terminal",
                                       hint: "redirect it to a file ('vault export > items.json'), seal it with --encrypt, or pass --force")
            }
            let cost = try kdfParameters(inv) ?? KDFParameters()
            // The passphrase first: a mistake there should not cost a fingerprint scan.
            var sealer: EncryptedExport.Writer?
            if inv.has(ExportOptions.encrypt) {
                let passphrase = try newPassphrase(inv, ctx)
                sealer = try EncryptedExport.Writer(passphrase: passphrase, cost: cost) { ctx.stdout.write($0) }
            }
            // Every secret at once: a finger or the passcode now, even in an unlock session
            // (whose key any process of the user could otherwise use for it, with --no-input).
            let loc = try location(inv, ctx)
            if !inv.has(AuthOptions.passcode) && !inv.has(GlobalOptions.passcodeFD), (try? SessionAccess.open(loc, environment: ctx.environment)) != nil {
                ctx.say("vault: an export hands out every secret: it needs a finger or the passcode even in an unlock session")
            }
            let vault = try Auth.unlock(try VaultStore.open(loc), inv, ctx, purpose: "export every item")
            // Written as read, about 64 KiB at a time (sealed in 64 KiB chunks with --encrypt):
            // never the whole vault in memory. The chunk is guarded memory: vault JSON is written
            // into it from each item's two opened records, the secrets copied from theirs.
            let chunk = try SecretOutput(capacity: 1 << 17)
            func flush() throws {
                if let sealer {
                    var plain = try chunk.withUnsafeBytes { Array($0) }
                    defer { wipe(&plain) }
                    try sealer.write(plain)
                } else {
                    ctx.stdout.writeSecret(chunk)
                }
                chunk.removeAll()
            }
            var damaged = 0, first = true, exported = 0
            var bitwarden = BitwardenJSON.Exporter()
            chunk.append(format == "bitwarden" ? #"{"encrypted":false,"items":["# : "[")
            try Release.each(command: "export", from: vault, inv, ctx) { e in
                switch e {
                case .item(let records):
                    if !first { chunk.append(",\n") }
                    if format == "bitwarden" {
                        // Bitwarden's exporter takes the item as Strings (see docs/threat-model.md).
                        var item = try records.decodedOverview().item
                        try records.secrets.decode(into: &item)
                        JSONText.append(bitwarden.object(item), to: chunk)
                    } else {
                        ExportJSON.write(records, to: chunk)
                    }
                    first = false
                    exported += 1
                    if chunk.count >= 1 << 16 { try flush() }
                case .damaged: damaged += 1
                }
            }
            if format == "bitwarden" {
                chunk.append(#"],"folders":"#)
                JSONText.append(bitwarden.folders, to: chunk)
                chunk.append("}\n")
            } else {
                chunk.append("]\n")
            }
            try flush()
            try sealer?.finish()
            if ctx.stdout.failure == nil {
                let what = sealer != nil ? "encrypted" : format == "bitwarden" ? "plain Bitwarden JSON: every secret readable" : "plain vault JSON: every secret readable"
                ctx.say("vault: exported \(exported) item\(exported == 1 ? "" : "s") (\(what))")
            }
            if damaged > 0 { throw VaultError.corrupt("\(damaged) damaged item(s) were not exported") }
        })
}
