import FoundationEssentials
import VaultKit
import VaultSystem
import VaultOTP

/// The location named by `--vault` and the environment.
func location(_ inv: Invocation, _ ctx: CommandContext) throws -> VaultLocation {
    try VaultLocation(name: inv[GlobalOptions.vault], environment: ctx.environment)
}

/// Fields of an item a listing shows (never the password, TOTP secret or notes).
func listingJSON(_ item: Item) -> [String: Any] {
    var o: [String: Any] = ["name": item.name, "urls": item.urls, "tags": item.tags,
                            "fingerprint_login": item.fingerprintLogin, "created": item.created, "modified": item.modified]
    if let u = item.username { o["username"] = u }
    if let origin = item.origin { o["origin"] = origin }
    return o
}

/// Prints a listing sorted by name: the overviews `vault` streams (those `term` matches, with
/// `tag`), names only or `--json`. Damaged rows are reported on stderr and make the command end
/// with exit 5 after everything readable was printed. No secret is opened.
func printListing(_ vault: any VaultAccess, term: String? = nil, tag: String? = nil, json: Bool, _ ctx: CommandContext) throws {
    var items: [Item] = [], names: [String] = [], damaged: [String] = []
    if json || tag != nil {
        try vault.forEachOverview(matching: term) { e in
            switch e {
            case .item(let o):
                if let tag, !o.item.tags.contains(tag) { return }
                if json { items.append(o.item) } else { names.append(o.item.name) }
            case .damaged(let id): damaged.append(id)
            }
        }
    } else {
        // Names only: each read in place from its record (checked whole, nothing else decoded).
        try vault.forEachOverviewRecord(matching: term) { e in
            switch e {
            case .record(let plain): names.append(try ItemOverview.checkedName(ofRecord: plain))
            case .damaged(let id): damaged.append(id)
            }
        }
    }
    if json {
        items.sort { $0.name < $1.name }
        ctx.stdout.write(jsonText(["items": items.map(listingJSON), "damaged": damaged]))
    } else {
        names.sort()
        // One write per 64 KiB, not per line, gathered as bytes (a String grown line by line
        // cost 340 instructions an append).
        var chunk: [UInt8] = []
        chunk.reserveCapacity((1 << 16) + 4096)
        for n in names {
            chunk.append(contentsOf: n.utf8)
            chunk.append(0x0A)
            if chunk.count >= 1 << 16 { ctx.stdout.write(String(decoding: chunk, as: UTF8.self)); chunk.removeAll(keepingCapacity: true) }
        }
        if !chunk.isEmpty { ctx.stdout.write(String(decoding: chunk, as: UTF8.self)) }
    }
    // An empty answer says so to a person (a script reads the empty output).
    if names.isEmpty && items.isEmpty && damaged.isEmpty && ctx.stderr.isTerminal && !json {
        ctx.say(term.map { "vault: no item matches '\($0)'" } ?? (tag.map { "vault: no item is tagged '\($0)'" } ?? "vault: the vault holds no items yet ('vault add NAME')"))
    }
    for id in damaged { ctx.say("vault: warning: item row \(id) is damaged and was skipped") }
    if !damaged.isEmpty { throw VaultError.corrupt("\(damaged.count) item(s) could not be read") }
}

/// The options of `add` and `edit`: one list for both. Each option is declared once with its
/// help in `add` (or in the command that alone takes it); a row says which commands take it and
/// how `edit` words it when that differs.
enum ItemOptions {
    static let username = OptionSpec.value("--username", "U", "the account name")
    static let url = OptionSpec.value("--url", "URL", "where the login is used (repeatable)", repeatable: true)
    static let notes = OptionSpec.value("--notes", "TEXT", "free text (seen by ps and kept in shell history: --notes-stdin for a secret)")
    static let notesStdin = OptionSpec.flag("--notes-stdin", "read the notes from standard input (the rest of it; on a terminal one line, asked twice with echo off)")
    static let notesEdit = OptionSpec.flag("--notes-edit", "edit the notes with $VISUAL or $EDITOR (a file in a private tmpfs folder, wiped after)")
    static let tag = OptionSpec.value("--tag", "TAG", "a label (repeatable)", repeatable: true)
    static let passwordStdin = OptionSpec.flag("--password-stdin", "read the password from the first line of standard input")
    static let totpStdin = OptionSpec.flag("--totp-stdin", "read an otpauth:// URI from the next line of standard input")
    static let generate = OptionSpec.flag("--generate", "generate a random password (with generate's options below)")
    static let force = OptionSpec.flag("--force", "replace an existing item of that name")
    static let clear = OptionSpec.value("--clear", "FIELD", "remove a field: \(ItemField.clearable.map(\.spelling).joinedText(separator: ", "))", repeatable: true)
    static let userPrompt = OptionSpec.value("--user-prompt", "REGEX", "how 'vault login' recognises the program's username prompt")
    static let passwordPrompt = OptionSpec.value("--password-prompt", "REGEX", "how 'vault login' recognises the program's password prompt")
    static let fingerprintLogin = OptionSpec.value("--fingerprint-login", "on|off", "let 'vault login' fill this login after a fresh finger scan (changing it needs a scan)")
    static let type = OptionSpec.value("--type", "TYPE", "login (default), note, card or identity")
    static let field = OptionSpec.value("--field", "NAME[:KIND][=VALUE]", "set a custom field; KIND text (default), url, hidden or totp; hidden and totp values are read from standard input, never given here", repeatable: true)
    static let removeField = OptionSpec.value("--remove-field", "NAME", "remove a custom field", repeatable: true)

    /// The two commands of the list.
    enum Command { case add, edit }

    /// Which of the two commands take an option.
    enum Use {
        case both
        /// Both; `edit` words the help so.
        case bothWorded(edit: String)
        case addOnly
        case editOnly
    }

    /// Every option of add and edit, in the order help lists them.
    static let rows: [(option: OptionSpec, use: Use)] = [
        (username, .bothWorded(edit: "new account name")),
        (url, .bothWorded(edit: "replace the URLs (repeatable)")),
        (notes, .bothWorded(edit: "replace the notes")),
        (notesStdin, .bothWorded(edit: "read the new notes from standard input (the rest of it; on a terminal one line, asked twice)")),
        (notesEdit, .editOnly),
        (tag, .bothWorded(edit: "replace the tags (repeatable)")),
        (passwordStdin, .bothWorded(edit: "read the new password from standard input")),
        (totpStdin, .bothWorded(edit: "read a new otpauth:// URI from standard input")),
        (generate, .bothWorded(edit: "generate a new random password (with generate's options below)")),
        (force, .addOnly),
        (clear, .editOnly), (userPrompt, .editOnly), (passwordPrompt, .editOnly), (fingerprintLogin, .editOnly),
        (type, .both), (field, .both),
        (removeField, .editOnly),
    ]

    /// The options `command` takes, worded for it.
    static func list(for command: Command) -> [OptionSpec] {
        rows.compactMap { option, use in
            switch (use, command) {
            case (.both, _), (.bothWorded, .add), (.addOnly, .add), (.editOnly, .edit): return option
            case (.bothWorded(let help), .edit):
                var o = option
                o.help = help
                return o
            case (.addOnly, .edit), (.editOnly, .add): return nil
            }
        }
    }

    /// The options that change an item: `edit` needs at least one.
    static let changes = [username, url, notes, notesStdin, notesEdit, tag, passwordStdin, generate, totpStdin, clear,
                          userPrompt, passwordPrompt, fingerprintLogin, type, field, removeField]
}

/// Item names a person may have mistyped: after an unlock, a missing name gets "did you mean",
/// and `get` takes a name that is the only one containing what was typed (as `bw get`).
enum ItemLookup {
    /// `name` when the vault holds it; otherwise `.itemNotFound`, or `.itemNotFoundNear` naming
    /// the nearest name.
    static func existing(_ name: String, in vault: any VaultAccess) throws -> String {
        if try vault.contains(name) { return name }
        throw notFound(name, among: try names(vault))
    }

    /// `name`, or (`substring`) the one name that contains it, said on stderr; else not found
    /// with the nearest name.
    static func resolve(_ name: String, in vault: any VaultAccess, _ ctx: CommandContext, substring: Bool) throws -> String {
        let all = try names(vault)
        if all.contains(name) { return name }
        if substring {
            let term = name.lowercased()
            let containing = all.filter { $0.lowercased().contains(term) }
            if containing.count == 1 {
                ctx.say("vault: no item named '\(name)'; using '\(containing[0])', the only one whose name contains it")
                return containing[0]
            }
            if containing.count > 1 {
                throw VaultError.itemNotFoundNear(name, near: containing.sorted().prefix(3).joinedText(separator: "' or '"))
            }
        }
        throw notFound(name, among: all)
    }

    static func notFound(_ name: String, among all: [String]) -> VaultError {
        if let near = Parser.suggestion(name, among: all) { return .itemNotFoundNear(name, near: near) }
        return .itemNotFound(name)
    }

    /// Every readable name (overviews only: no secret is opened).
    static func names(_ vault: any VaultAccess) throws -> [String] {
        var out: [String] = []
        try vault.forEachOverview(matching: nil) { e in if case .item(let o) = e { out.append(o.item.name) } }
        return out
    }
}

enum ItemCommands {
    static let add = CommandSpec(
        name: "add", summary: "save a new login",
        usage: "vault add NAME [--type T] [--username U] [--url URL]... [--password-stdin | --generate] [--totp-stdin] [--field NAME[:KIND][=VALUE]]... [--force]",
        options: ItemOptions.list(for: .add) + VaultCommands.passwordOptions + Auth.options,
        arguments: 1...1,
        examples: """
        printf '%s\\n' "$PW" | vault add github --username me --url https://github.com --password-stdin
        vault add wifi --generate --length 32
        printf '%s\\n' "$PIN" | vault add bank-card --type card --field holder=Me --field pin:hidden
        """,
        run: { inv, ctx in
            if inv.has(ItemOptions.passwordStdin) && inv.has(ItemOptions.generate) {
                throw VaultError.usage("--password-stdin and --generate exclude each other")
            }
            if inv.has(ItemOptions.notes) && inv.has(ItemOptions.notesStdin) {
                throw VaultError.usage("--notes and --notes-stdin exclude each other")
            }
            let name = try Item.normalize(name: inv.arguments[0])
            let type = try itemType(inv)
            let vault = try openAccess(inv, ctx, purpose: "add '\(name)'")
            if try vault.contains(name) {
                guard inv.has(ItemOptions.force) else { throw VaultError.alreadyExists(name) }
                // Replacing an item turns its fingerprint login off: the person confirms with a
                // touch, as with edit. (The vault does not demand the token here: replacing hands
                // out nothing of the old item.)
                if try vault.overview(named: name).item.fingerprintLogin {
                    _ = try Release.freshMatch(.fingerprintLoginSwitch(item: name), vault, inv, ctx,
                                               prompt: "touch the fingerprint reader to replace '\(name)' (fingerprint login is on)")
                }
            }
            let fieldSpecs = try inv.all(ItemOptions.field).map(FieldSpec.parse)
            var item = Item(name: name, type: type ?? .login, username: inv[ItemOptions.username], urls: inv.all(ItemOptions.url),
                            notes: inv[ItemOptions.notes], tags: inv.all(ItemOptions.tag), now: ctx.clock())
            // Only a login is asked for a password it was not given: notes, cards and identities
            // have none as a rule.
            item.password = try newPassword(inv, ctx, name: name, askWhenMissing: item.type == .login)
            if inv.has(ItemOptions.totpStdin) { item.totp = try totp(ctx, inv, label: name) }
            item.fields = try FieldSpec.values(fieldSpecs, ctx, inv, label: name)
            if inv.has(ItemOptions.notesStdin) { item.notes = try SecretInput.notes(ctx, inv, label: name) }
            try vault.add(item, replace: inv.has(ItemOptions.force))
            ctx.say("vault: saved '\(name)'")
            if item.type == .login && item.password == nil && item.totp == nil {
                ctx.say("vault: warning: '\(name)' has no password; add one with 'vault edit \(name) --password-stdin' or '--generate'")
            }
        })

    /// The password for add/edit: stdin (asked twice with echo off when standard input is the
    /// terminal, as `pass insert` does), generated, or, for a new item on a terminal
    /// (`askWhenMissing`), asked (Enter alone: none); nil when none is given.
    static func newPassword(_ inv: Invocation, _ ctx: CommandContext, name: String, askWhenMissing: Bool = false) throws -> String? {
        let person = !inv.noInput && ctx.terminal.isAvailable
        if inv.has(ItemOptions.passwordStdin) {
            if person && isTerminal(ctx.stdinFD) { return try typedPassword(ctx, inv, name: name, optional: false) }
            return try SecretInput.stdinText(ctx, what: "password")
        }
        if inv.has(ItemOptions.generate) {
            return try VaultCommands.password(inv).password
        }
        if askWhenMissing && person && isTerminal(ctx.stdinFD) && !inv.has(ItemOptions.totpStdin) {
            return try typedPassword(ctx, inv, name: name, optional: true)
        }
        return nil
    }

    /// A password typed on the terminal: echo off, asked twice, three rounds; `optional`: Enter
    /// alone at the first prompt gives none.
    static func typedPassword(_ ctx: CommandContext, _ inv: Invocation, name: String, optional: Bool) throws -> String? {
        try SecretInput.typedSecret(ctx, inv, prompt: "password for '\(name)'\(optional ? " (Enter for none)" : ""): ", what: "password", optional: optional)
    }

    /// A TOTP secret: an otpauth:// URI (checked) or a bare base32 secret, from the next line of
    /// stdin, or typed at a prompt (echo off, twice) when standard input is the terminal.
    static func totp(_ ctx: CommandContext, _ inv: Invocation, label: String) throws -> String {
        let text = try SecretInput.secretValue(ctx, inv, prompt: "TOTP secret or otpauth:// URI for '\(label)': ", what: "TOTP secret")
        return try OTP.normalize(text, label: label)
    }

    /// `--type`, checked.
    static func itemType(_ inv: Invocation) throws -> ItemType? {
        guard let t = inv[ItemOptions.type] else { return nil }
        guard let type = ItemType(rawValue: t) else { throw VaultError.usage("--type: unknown type '\(t)' (login, note, card, identity, secret-service or ssh-key)") }
        return type
    }

    static let edit = CommandSpec(
        name: "edit", summary: "change fields of a login",
        usage: "vault edit NAME [--username U] [--url URL]... [--notes T] [--tag T]... [--password-stdin | --generate] [--totp-stdin] [--type T] [--field NAME[:KIND][=VALUE]]... [--remove-field NAME]... [--fingerprint-login on|off]",
        options: ItemOptions.list(for: .edit) + VaultCommands.passwordOptions + Auth.options,
        arguments: 1...1,
        examples: """
        vault edit github --username new-me --url https://github.com/login
        vault edit github --generate
        vault edit prod-db --fingerprint-login on
        """,
        run: { inv, ctx in
            if inv.has(ItemOptions.passwordStdin) && inv.has(ItemOptions.generate) {
                throw VaultError.usage("--password-stdin and --generate exclude each other")
            }
            if [ItemOptions.notes, ItemOptions.notesStdin, ItemOptions.notesEdit].filter(inv.has).count > 1 {
                throw VaultError.usage("--notes, --notes-stdin and --notes-edit exclude each other")
            }
            if inv.has(ItemOptions.notesEdit) && (inv.noInput || !ctx.terminal.isAvailable) {
                throw VaultError.usage("--notes-edit needs a terminal", hint: "give the notes on standard input: --notes-stdin")
            }
            let name = try Item.normalize(name: inv.arguments[0])
            let clears = try inv.all(ItemOptions.clear).map { c in
                let field = ItemField(parsing: c)
                guard ItemField.clearable.contains(field) else {
                    let near = Spelling.nearest(to: c, among: ItemField.clearable.map(\.spelling))
                    throw VaultError.usage("--clear: unknown field '\(c)'", hint: (near.map { "did you mean '\($0)'? " } ?? "") + "fields: \(ItemField.clearable.map(\.spelling).joinedText(separator: ", "))")
                }
                return field
            }
            for option in [ItemOptions.userPrompt, ItemOptions.passwordPrompt] {
                if let p = inv[option] { _ = try PromptAnswerer.compile(p, option: option.name) }
            }
            let fingerprintLogin = try Auth.parseSwitch(inv)
            guard ItemOptions.changes.contains(where: inv.has) else {
                throw VaultError.usage("nothing to change for '\(name)'", hint: "usage: \(inv.command.usage)")
            }
            let fieldSpecs = try inv.all(ItemOptions.field).map(FieldSpec.parse)
            let type = try itemType(inv)
            let vault = try openAccess(inv, ctx, purpose: "edit '\(name)'")
            _ = try ItemLookup.existing(name, in: vault)
            // A live scan, never a --reuse of an older match: this switch decides when a finger is
            // demanded. Turning it off, the vault checks the token; on, the touch shows the finger works.
            let switchPrompt = { (item: String) in "touch the fingerprint reader to turn fingerprint login \(fingerprintLogin == true ? "on" : "off") for '\(item)'" }
            var switchToken: FreshMatchToken?
            if fingerprintLogin != nil {
                switchToken = try Release.freshMatch(.fingerprintLoginSwitch(item: name), vault, inv, ctx, prompt: switchPrompt(name))
            }
            let password = try newPassword(inv, ctx, name: name)
            let totp = inv.has(ItemOptions.totpStdin) ? try totp(ctx, inv, label: name) : nil
            let setFields = try FieldSpec.values(fieldSpecs, ctx, inv, label: name)
            var clearsToo = clears
            var notes = inv.has(ItemOptions.notesStdin) ? try SecretInput.notes(ctx, inv, label: name) : inv[ItemOptions.notes]
            if inv.has(ItemOptions.notesEdit) {
                switch try NotesEditor.edit(name, in: vault, inv, ctx) {
                case .unchanged:
                    if ItemOptions.changes.filter(inv.has).count == 1 {
                        ctx.say("vault: the notes of '\(name)' are unchanged; nothing was written")
                        return
                    }
                case .cleared: clearsToo.append(.notes)
                case .changed(let text): notes = text
                }
            }
            var change = ItemChange()
            change.clear = clearsToo
            change.username = inv[ItemOptions.username]
            change.urls = inv.has(ItemOptions.url) ? inv.all(ItemOptions.url) : nil
            change.notes = notes
            change.tags = inv.has(ItemOptions.tag) ? inv.all(ItemOptions.tag) : nil
            change.password = password
            change.totp = totp
            change.userPrompt = inv[ItemOptions.userPrompt]
            change.passwordPrompt = inv[ItemOptions.passwordPrompt]
            change.fingerprintLogin = fingerprintLogin
            change.type = type
            change.setFields = setFields
            change.removeFields = inv.all(ItemOptions.removeField)
            // A token that aged out while the new values were read is made again from this
            // command's own match.
            try Release.guarded(vault, inv, ctx, first: switchToken, purpose: { .fingerprintLoginSwitch(item: $0) }, prompt: switchPrompt) {
                try vault.update(name, change, freshMatch: $0)
            }
            ctx.say("vault: updated '\(name)'")
        })

    /// The options of `rm`, declared once: the table lists them and the command reads them.
    enum RmOptions {
        static let force = OptionSpec.flag("--force", "do not ask for confirmation (required without a terminal)").alias("-f")
    }

    static let rm = CommandSpec(
        name: "rm", summary: "delete a login",
        usage: "vault rm NAME [--force | -f]",
        options: [RmOptions.force] + Auth.options,
        arguments: 1...1,
        examples: "vault rm old-login\nvault rm old-login --force --no-input --passcode-fd 3",
        run: { inv, ctx in
            let name = try Item.normalize(name: inv.arguments[0])
            if !inv.has(RmOptions.force) && (inv.noInput || !ctx.terminal.isAvailable) {
                throw VaultError.usage("refusing to delete '\(name)' without confirmation", hint: "pass --force")
            }
            let vault = try openAccess(inv, ctx, purpose: "delete '\(name)'")
            _ = try ItemLookup.existing(name, in: vault)
            if !inv.has(RmOptions.force) {
                let answer = ctx.terminal.readLine(prompt: "delete '\(name)'? [y/N] ") ?? ""
                guard ["y", "yes"].contains(answer.lowercased()) else { throw VaultError.userCancel }
            }
            try vault.remove(name)
            ctx.say("vault: deleted '\(name)'")
        })

    static let mv = CommandSpec(
        name: "mv", summary: "rename a login",
        usage: "vault mv OLD NEW",
        options: Auth.options,
        arguments: 2...2,
        examples: "vault mv github github-personal",
        run: { inv, ctx in
            let old = try Item.normalize(name: inv.arguments[0]), new = try Item.normalize(name: inv.arguments[1])
            let vault = try openAccess(inv, ctx, purpose: "rename '\(old)'")
            if try vault.contains(new) { throw VaultError.alreadyExists(new) }
            var change = ItemChange()
            change.rename = new
            try vault.update(try ItemLookup.existing(old, in: vault), change)
            ctx.say("vault: renamed '\(old)' to '\(new)'")
        })

    /// The options of `ls`, declared once: the table lists them and the command reads them.
    enum LsOptions {
        static let json = OptionSpec.flag("--json", "print JSON")
        static let tag = OptionSpec.value("--tag", "TAG", "only items with this tag")
    }

    static let ls = CommandSpec(
        name: "ls", summary: "list the logins (names only, or --json)",
        usage: "vault ls [--tag TAG] [--json]",
        options: [LsOptions.json, LsOptions.tag] + Auth.options,
        examples: "vault ls\nvault ls --json | jq -r '.items[].name'",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "list the items")
            try printListing(vault, tag: inv[LsOptions.tag], json: inv.has(LsOptions.json), ctx)
        })

    /// The options of `search`, declared once: the table lists them and the command reads them.
    enum SearchOptions {
        static let json = OptionSpec.flag("--json", "print JSON")
    }

    static let search = CommandSpec(
        name: "search", summary: "find logins by name, username, URL or tag (never in notes or secrets)",
        usage: "vault search TERM [--json]",
        options: [SearchOptions.json] + Auth.options,
        arguments: 1...1,
        examples: "vault search github",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "search the items")
            try printListing(vault, term: inv.arguments[0], json: inv.has(SearchOptions.json), ctx)
        })

}

extension ItemCommands {
    /// The options of `log`, declared once: the table lists them and the command reads them.
    enum LogOptions {
        static let json = OptionSpec.flag("--json", "print JSON")
        static let limit = OptionSpec.value("--limit", "N", "only the last N records")
    }

    static let log = CommandSpec(
        name: "log", summary: "show the audit log: every secret released, when, to which command, uid and executable",
        usage: "vault log [--limit N] [--json]",
        options: [LogOptions.json, LogOptions.limit] + Auth.options,
        examples: "vault log --limit 20",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "read the audit log")
            let records = try vault.auditRecords(limit: try inv.int(LogOptions.limit))
            var damaged = 0
            var rows: [[String: Any]] = []
            for r in records {
                switch r {
                case .success(let a):
                    rows.append(["time": a.time, "item": a.item, "field": a.field, "command": a.command, "uid": a.uid, "pid": a.pid ?? JSONNull(),
                                 "executable": a.executable ?? JSONNull()])
                    if !inv.has(LogOptions.json) {
                        // The command is what the caller said; the executable is what the kernel said it ran.
                        let exe = a.executable.map { terminalSafe($0, onTerminal: ctx.stdout.isTerminal) } ?? "-"
                        ctx.stdout.write("\(ISOTime.string(a.time))  uid \(a.uid)  \(terminalSafe(a.command, onTerminal: ctx.stdout.isTerminal))  \(a.item)  \(a.field)  \(exe)\n")
                    }
                case .failure: damaged += 1
                }
            }
            if inv.has(LogOptions.json) { ctx.stdout.write(jsonText(["records": rows, "damaged": damaged])) }
            if damaged > 0 { throw VaultError.corrupt("\(damaged) audit record(s) failed authentication") }
        })
}

/// One `--field NAME[:KIND][=VALUE]` of add/edit. A hidden or TOTP value is never taken from the
/// command line (argv is visible in `ps`): it is read from the next line of standard input, in
/// the order the options are given, after the password and TOTP lines.
struct FieldSpec {
    var name: String
    var kind: CustomFieldKind
    var value: String?

    static func parse(_ text: String) throws -> FieldSpec {
        let eq = text.firstIndex(of: "=")
        var name = String(text[..<(eq ?? text.endIndex)])
        let value = eq.map { String(text[text.index(after: $0)...]) }
        var kind = CustomFieldKind.text
        if let colon = name.lastIndex(of: ":"), let k = CustomFieldKind(rawValue: String(name[name.index(after: colon)...])) {
            kind = k
            name = String(name[..<colon])
        }
        name = name.trimmed(.whitespaces)
        guard !name.isEmpty else { throw VaultError.usage("--field needs a name: --field NAME[:KIND][=VALUE]") }
        if ItemField(parsing: name).isBuiltIn {
            throw VaultError.usage("--field: '\(name)' is a built-in field; use its own option")
        }
        if kind.isSecret, value != nil {
            throw VaultError.usage("--field \(name):\(kind.rawValue): a \(kind.rawValue) value is read from standard input, never from the command line",
                                   hint: "printf '%s\\n' \"$VALUE\" | vault add ... --field \(name):\(kind.rawValue)")
        }
        if !kind.isSecret, value == nil { throw VaultError.usage("--field \(name): give its value: --field \(name)=VALUE") }
        return FieldSpec(name: name, kind: kind, value: value)
    }

    /// The fields, secret values read from stdin now.
    /// On a terminal each is asked at a prompt, echo off, twice.
    static func values(_ specs: [FieldSpec], _ ctx: CommandContext, _ inv: Invocation, label: String) throws -> [CustomField] {
        var out: [CustomField] = []
        for spec in specs {
            if out.contains(where: { $0.name == spec.name }) { throw VaultError.usage("--field '\(spec.name)' given twice") }
            var value = try spec.value ?? SecretInput.secretValue(ctx, inv, prompt: "\(spec.name) (\(spec.kind.rawValue)) for '\(label)': ",
                                                                  what: "value of the field '\(spec.name)'")
            if spec.kind == .totp { value = try OTP.normalize(value, label: label) }
            out.append(CustomField(name: spec.name, kind: spec.kind, value: value))
        }
        return out
    }
}
