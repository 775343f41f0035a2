import Foundation
import VaultKit
import VaultSystem
import VaultOTP

/// The location named by `--vault` and the environment.
func location(_ inv: Invocation, _ ctx: CommandContext) throws -> VaultLocation {
    try VaultLocation(name: inv.value("--vault"), environment: ctx.environment)
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
    try vault.forEachOverview(matching: term) { e in
        switch e {
        case .item(let o):
            if let tag, !o.item.tags.contains(tag) { return }
            if json { items.append(o.item) } else { names.append(o.item.name) }
        case .damaged(let id): damaged.append(id)
        }
    }
    if json {
        items.sort { $0.name < $1.name }
        ctx.stdout.write(jsonText(["items": items.map(listingJSON), "damaged": damaged]))
    } else {
        names.sort()
        // One write per 64 KiB, not per line.
        var chunk = ""
        chunk.reserveCapacity(1 << 16)
        for n in names {
            chunk += n
            chunk += "\n"
            if chunk.utf8.count >= 1 << 16 { ctx.stdout.write(chunk); chunk.removeAll(keepingCapacity: true) }
        }
        if !chunk.isEmpty { ctx.stdout.write(chunk) }
    }
    for id in damaged { ctx.say("vault: warning: item row \(id) is damaged and was skipped") }
    if !damaged.isEmpty { throw VaultError.corrupt("\(damaged.count) item(s) could not be read") }
}

enum ItemCommands {
    static let add = CommandSpec(
        name: "add", summary: "save a new login",
        usage: "vault add NAME [--type T] [--username U] [--url URL]... [--password-stdin | --generate] [--totp-stdin] [--field NAME[:KIND][=VALUE]]... [--force]",
        options: [
            .value("--username", "U", "the account name"),
            .value("--url", "URL", "where the login is used (repeatable)", repeatable: true),
            .value("--notes", "TEXT", "free text"),
            .value("--tag", "TAG", "a label (repeatable)", repeatable: true),
            .flag("--password-stdin", "read the password from the first line of standard input"),
            .flag("--totp-stdin", "read an otpauth:// URI from the next line of standard input"),
            .flag("--generate", "generate a random password (with generate's options below)"),
            .flag("--force", "replace an existing item of that name"),
            .value("--type", "TYPE", "login (default), note, card or identity"),
            .value("--field", "NAME[:KIND][=VALUE]", "set a custom field; KIND text (default), url, hidden or totp; hidden and totp values are read from standard input, never given here", repeatable: true),
        ] + VaultCommands.passwordOptions + Auth.options,
        arguments: 1...1,
        examples: """
        printf '%s\\n' "$PW" | vault add github --username me --url https://github.com --password-stdin
        vault add wifi --generate --length 32
        printf '%s\\n' "$PIN" | vault add bank-card --type card --field holder=Me --field pin:hidden
        """,
        run: { inv, ctx in
            if inv.has("--password-stdin") && inv.has("--generate") {
                throw VaultError.usage("--password-stdin and --generate exclude each other")
            }
            let name = try Item.normalize(name: inv.arguments[0])
            let vault = try openAccess(inv, ctx, purpose: "add '\(name)'")
            if try vault.contains(name) {
                guard inv.has("--force") else { throw VaultError.alreadyExists(name) }
                // Replacing an item turns its fingerprint login off: the person confirms with a
                // touch, as with edit. (The vault does not demand the token here: replacing hands
                // out nothing of the old item.)
                if try vault.overview(named: name).item.fingerprintLogin {
                    _ = try Release.freshMatch(.fingerprintLoginSwitch(item: name), vault, inv, ctx,
                                               prompt: "touch the fingerprint reader to replace '\(name)' (fingerprint login is on)")
                }
            }
            let fieldSpecs = try inv.all("--field").map(FieldSpec.parse)
            let type = try itemType(inv)
            var item = Item(name: name, type: type ?? .login, username: inv.value("--username"), urls: inv.all("--url"),
                            notes: inv.value("--notes"), tags: inv.all("--tag"), now: ctx.clock())
            item.password = try newPassword(inv, ctx, name: name, askWhenMissing: true)
            if inv.has("--totp-stdin") { item.totp = try totp(ctx, label: name) }
            item.fields = try FieldSpec.values(fieldSpecs, ctx, label: name)
            try vault.add(item, replace: inv.has("--force"))
            ctx.say("vault: saved '\(name)'")
            if item.password == nil && item.totp == nil {
                ctx.say("vault: warning: '\(name)' has no password; add one with 'vault edit \(name) --password-stdin' or '--generate'")
            }
        })

    /// The password for add/edit: stdin (asked twice with echo off when standard input is the
    /// terminal, as `pass insert` does), generated, or, for a new item on a terminal
    /// (`askWhenMissing`), asked (Enter alone: none); nil when none is given.
    static func newPassword(_ inv: Invocation, _ ctx: CommandContext, name: String, askWhenMissing: Bool = false) throws -> String? {
        let person = !inv.noInput && ctx.terminal.isAvailable
        if inv.has("--password-stdin") {
            if person && isTerminal(ctx.stdinFD) { return try typedPassword(ctx, inv, name: name, optional: false) }
            return try SecretInput.stdinText(ctx, what: "password")
        }
        if inv.has("--generate") {
            return try VaultCommands.password(inv).password
        }
        if askWhenMissing && person && isTerminal(ctx.stdinFD) && !inv.has("--totp-stdin") {
            return try typedPassword(ctx, inv, name: name, optional: true)
        }
        return nil
    }

    /// A password typed on the terminal: echo off, asked twice, three rounds; `optional`: Enter
    /// alone at the first prompt gives none.
    static func typedPassword(_ ctx: CommandContext, _ inv: Invocation, name: String, optional: Bool) throws -> String? {
        for _ in 1...3 {
            let first = try SecretInput.ask(ctx, inv, prompt: "password for '\(name)'\(optional ? " (Enter for none)" : ""): ", reason: "no terminal")
            if first.count == 0 {
                if optional { return nil }
                ctx.say("vault: the password is empty; try again")
                continue
            }
            let second = try SecretInput.ask(ctx, inv, prompt: "repeat the password: ", reason: "no terminal")
            guard first.isEqual(to: second) else {
                ctx.say("vault: the two passwords differ; try again")
                continue
            }
            guard let text = first.withUnsafeBytes({ String(validating: $0, as: UTF8.self) }) else {
                throw VaultError.usage("the password typed is not valid UTF-8")
            }
            return text
        }
        throw VaultError.usage("no password was given; nothing was saved")
    }

    /// A TOTP secret from the next line of stdin: an otpauth:// URI (checked) or a bare base32 secret.
    static func totp(_ ctx: CommandContext, label: String) throws -> String {
        try OTP.normalize(try SecretInput.stdinText(ctx, what: "otpauth:// URI or base32 secret"), label: label)
    }

    /// `--type`, checked.
    static func itemType(_ inv: Invocation) throws -> ItemType? {
        guard let t = inv.value("--type") else { return nil }
        guard let type = ItemType(rawValue: t) else { throw VaultError.usage("--type: unknown type '\(t)' (login, note, card or identity)") }
        return type
    }

    static let edit = CommandSpec(
        name: "edit", summary: "change fields of a login",
        usage: "vault edit NAME [--username U] [--url URL]... [--notes T] [--tag T]... [--password-stdin | --generate] [--totp-stdin] [--type T] [--field NAME[:KIND][=VALUE]]... [--remove-field NAME]... [--fingerprint-login on|off]",
        options: [
            .value("--username", "U", "new account name"),
            .value("--url", "URL", "replace the URLs (repeatable)", repeatable: true),
            .value("--notes", "TEXT", "replace the notes"),
            .value("--tag", "TAG", "replace the tags (repeatable)", repeatable: true),
            .flag("--password-stdin", "read the new password from standard input"),
            .flag("--totp-stdin", "read a new otpauth:// URI from standard input"),
            .flag("--generate", "generate a new random password (with generate's options below)"),
            .value("--clear", "FIELD", "remove a field: username, url, notes, tags, totp, password, user-prompt, password-prompt", repeatable: true),
            .value("--user-prompt", "REGEX", "how 'vault login' recognises the program's username prompt"),
            .value("--password-prompt", "REGEX", "how 'vault login' recognises the program's password prompt"),
            .value("--fingerprint-login", "on|off", "let 'vault login' fill this login after a fresh finger scan (changing it needs a scan)"),
            .value("--type", "TYPE", "login (default), note, card or identity"),
            .value("--field", "NAME[:KIND][=VALUE]", "set a custom field; KIND text (default), url, hidden or totp; hidden and totp values are read from standard input, never given here", repeatable: true),
            .value("--remove-field", "NAME", "remove a custom field", repeatable: true),
        ] + VaultCommands.passwordOptions + Auth.options,
        arguments: 1...1,
        examples: """
        vault edit github --username new-me --url https://github.com/login
        vault edit github --generate
        vault edit prod-db --fingerprint-login on
        """,
        run: { inv, ctx in
            if inv.has("--password-stdin") && inv.has("--generate") {
                throw VaultError.usage("--password-stdin and --generate exclude each other")
            }
            let name = try Item.normalize(name: inv.arguments[0])
            let clears = inv.all("--clear")
            for c in clears where !["username", "url", "notes", "tags", "totp", "password", "user-prompt", "password-prompt"].contains(c) {
                throw VaultError.usage("--clear: unknown field '\(c)'")
            }
            for option in ["--user-prompt", "--password-prompt"] {
                if let p = inv.value(option), (try? NSRegularExpression(pattern: p)) == nil {
                    throw VaultError.usage("\(option): '\(p)' is not a regular expression")
                }
            }
            let fingerprintLogin = try Auth.parseSwitch(inv)
            let changes = ["--username", "--url", "--notes", "--tag", "--password-stdin", "--generate", "--totp-stdin", "--clear",
                           "--user-prompt", "--password-prompt", "--fingerprint-login", "--type", "--field", "--remove-field"]
            guard changes.contains(where: inv.has) else {
                throw VaultError.usage("nothing to change for '\(name)'", hint: "usage: \(inv.command.usage)")
            }
            let fieldSpecs = try inv.all("--field").map(FieldSpec.parse)
            let type = try itemType(inv)
            let vault = try openAccess(inv, ctx, purpose: "edit '\(name)'")
            guard try vault.contains(name) else { throw VaultError.itemNotFound(name) }
            // A live scan, never a --reuse of an older match: this switch decides when a finger is
            // demanded. Turning it off, the vault checks the token; on, the touch shows the finger works.
            let switchPrompt = { (item: String) in "touch the fingerprint reader to turn fingerprint login \(fingerprintLogin == true ? "on" : "off") for '\(item)'" }
            var switchToken: FreshMatchToken?
            if fingerprintLogin != nil {
                switchToken = try Release.freshMatch(.fingerprintLoginSwitch(item: name), vault, inv, ctx, prompt: switchPrompt(name))
            }
            let password = try newPassword(inv, ctx, name: name)
            let totp = inv.has("--totp-stdin") ? try totp(ctx, label: name) : nil
            let setFields = try FieldSpec.values(fieldSpecs, ctx, label: name)
            var change = ItemChange()
            change.clear = clears.compactMap(ItemField.init(rawValue:))
            change.username = inv.value("--username")
            change.urls = inv.has("--url") ? inv.all("--url") : nil
            change.notes = inv.value("--notes")
            change.tags = inv.has("--tag") ? inv.all("--tag") : nil
            change.password = password
            change.totp = totp
            change.userPrompt = inv.value("--user-prompt")
            change.passwordPrompt = inv.value("--password-prompt")
            change.fingerprintLogin = fingerprintLogin
            change.type = type
            change.setFields = setFields
            change.removeFields = inv.all("--remove-field")
            // A token that aged out while the new values were read is made again from this
            // command's own match.
            try Release.guarded(vault, inv, ctx, first: switchToken, purpose: { .fingerprintLoginSwitch(item: $0) }, prompt: switchPrompt) {
                try vault.update(name, change, freshMatch: $0)
            }
            ctx.say("vault: updated '\(name)'")
        })

    static let rm = CommandSpec(
        name: "rm", summary: "delete a login",
        usage: "vault rm NAME [--force]",
        options: [.flag("--force", "do not ask for confirmation (required without a terminal)")] + Auth.options,
        arguments: 1...1,
        examples: "vault rm old-login\nvault rm old-login --force --no-input --passcode-fd 3",
        run: { inv, ctx in
            let name = try Item.normalize(name: inv.arguments[0])
            if !inv.has("--force") && (inv.noInput || !ctx.terminal.isAvailable) {
                throw VaultError.usage("refusing to delete '\(name)' without confirmation", hint: "pass --force")
            }
            let vault = try openAccess(inv, ctx, purpose: "delete '\(name)'")
            guard try vault.contains(name) else { throw VaultError.itemNotFound(name) }
            if !inv.has("--force") {
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
            try vault.update(old, change)
            ctx.say("vault: renamed '\(old)' to '\(new)'")
        })

    static let ls = CommandSpec(
        name: "ls", summary: "list the logins (names only, or --json)",
        usage: "vault ls [--tag TAG] [--json]",
        options: [.flag("--json", "print JSON"), .value("--tag", "TAG", "only items with this tag")] + Auth.options,
        examples: "vault ls\nvault ls --json | jq -r '.items[].name'",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "list the items")
            try printListing(vault, tag: inv.value("--tag"), json: inv.has("--json"), ctx)
        })

    static let search = CommandSpec(
        name: "search", summary: "find logins by name, username, URL or tag (never in notes or secrets)",
        usage: "vault search TERM [--json]",
        options: [.flag("--json", "print JSON")] + Auth.options,
        arguments: 1...1,
        examples: "vault search github",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "search the items")
            try printListing(vault, term: inv.arguments[0], json: inv.has("--json"), ctx)
        })

    static let get = CommandSpec(
        name: "get", summary: "print a login or one of its fields",
        usage: "vault get NAME [--field F] [--json] [--reveal]",
        options: [
            .value("--field", "F", "print only this field: \(Item.fieldNames.joined(separator: ", ")), totp-uri, or a custom field's name (totp prints the current code)"),
            .flag("--json", "print JSON (the password only with --reveal or --field password)"),
            .flag("--reveal", "include the password, the TOTP secret and the notes"),
            .flag("--clip", "copy the value (the password, or --field) to the clipboard instead of printing it"),
            .value("--clear-after", "D", "with --clip: empty the clipboard after D (at most 1h) if it still holds the value (default 45s)"),
        ] + Auth.options,
        arguments: 1...1,
        examples: """
        vault get github --field password
        vault get github --json | jq -r .username
        vault get github --clip
        PGPASSWORD=$(vault get prod-db --field password --no-input) psql ...
        """,
        run: { inv, ctx in
            let name = try Item.normalize(name: inv.arguments[0])
            if inv.has("--clip") && inv.has("--json") { throw VaultError.usage("--clip and --json exclude each other") }
            let clearAfter = try SessionCommands.duration(inv, "--clear-after", default: 45)
            // The clearer waits at most an hour: a longer promise would not be kept.
            guard clearAfter <= 3600 else { throw VaultError.usage("--clear-after is at most 1h, not '\(inv.value("--clear-after") ?? "")'") }
            // No touch is spent on a copy that cannot be made.
            if inv.has("--clip") { try Clipboard.check(ctx.environment) }
            let vault = try openAccess(inv, ctx, purpose: "read '\(name)'")
            let field = inv.value("--field")
            // One secret printed as is: from the record's guarded memory to write(2), never a String.
            func printSecret(_ f: String) throws {
                let secret = try Release.secret(name, field: f, command: "get", from: vault, inv, ctx)
                ctx.stdout.writeSecret(secret)
                ctx.stdout.write("\n")
            }
            // A built-in secret field needs no overview to be checked first: a script's
            // `get --field password` is one request to the agent, not two.
            if let f = field, !inv.has("--json"), !inv.has("--clip"), f != "totp", ItemField(rawValue: f)?.isSecret == true {
                return try printSecret(f)
            }
            let overview = try vault.overview(named: name)
            if let f = field, !Item.fieldNames.contains(f), f != "totp-uri", overview.item.customField(f) == nil {
                throw VaultError.usage("unknown field '\(f)'", hint: "fields: \((Item.fieldNames + ["totp-uri"]).joined(separator: ", "))\(overview.item.fields.isEmpty ? "" : ", or one of this item's: " + overview.item.fields.map(\.name).joined(separator: ", "))")
            }
            // `totp` is the current code, `totp-uri` the secret's URI: both release the secret.
            // The URI printed is the secret itself: from the record's guarded memory to write(2).
            if field == "totp-uri", !inv.has("--clip") {
                let secret = try Release.secret(name, field: "totp", command: "get", from: vault, inv, ctx)
                if inv.has("--json") {
                    let out = try SecretOutput(capacity: secret.count + 32)
                    secret.withUnsafeBytes { JSONText.append(["totp-uri": JSONSecret($0)], to: out) }
                    out.append("\n")
                    ctx.stdout.writeSecret(out)
                } else {
                    ctx.stdout.writeSecret(secret)
                    ctx.stdout.write("\n")
                }
                return
            }
            if field == "totp" || field == "totp-uri" {
                let value: String
                if field == "totp" {
                    value = try OTPCommand.current(name, command: inv.has("--clip") ? "get --clip" : "get", from: vault, inv, ctx).code
                } else {
                    let item = try Release.item(name, fields: ["totp"], command: inv.has("--clip") ? "get --clip" : "get", from: vault, inv, ctx)
                    guard let uri = item.totp else { throw VaultError.failure("item '\(item.name)' has no totp") }
                    value = uri
                }
                if inv.has("--clip") {
                    try Clipboard.copy(value, clearAfter: clearAfter, ctx)
                    ctx.say("vault: copied the \(field!) of '\(name)' to the clipboard; it is cleared in \(SessionCommands.describe(clearAfter))")
                } else if inv.has("--json") {
                    ctx.stdout.write(jsonText([field!: value]))
                } else {
                    ctx.stdout.write(terminalSafe(value, onTerminal: ctx.stdout.isTerminal) + "\n")
                }
                return
            }
            if inv.has("--clip") {
                let field = field ?? "password"
                if field != "history", overview.item.isSecretField(field) {
                    // From the record's guarded memory to the clipboard owner's pipe, never a String.
                    let secret = try Release.secret(name, field: field, command: "get --clip", from: vault, inv, ctx)
                    try Clipboard.copy(secret, clearAfter: clearAfter, ctx)
                } else {
                    let item = try Release.item(name, fields: overview.item.isSecretField(field) ? [field] : [], command: "get --clip", from: vault, inv, ctx)
                    guard let value = try item.field(field) else { throw VaultError.failure("item '\(item.name)' has no \(field)") }
                    try Clipboard.copy(value, clearAfter: clearAfter, ctx)
                }
                ctx.say("vault: copied the \(field) of '\(overview.item.name)' to the clipboard; it is cleared in \(SessionCommands.describe(clearAfter))")
                return
            }
            if let f = field, !inv.has("--json"), f != "history", overview.item.isSecretField(f) { return try printSecret(f) }
            // Only the secrets printed are released (and so logged).
            let released: [String]
            if let f = field {
                released = overview.item.isSecretField(f) ? [f] : []
            } else {
                released = inv.has("--reveal") ? ["password", "totp", "notes"] + overview.item.fields.filter(\.kind.isSecret).map(\.name) : []
            }
            if let f = released.first, inv.value("--field") != nil {
                // A field the item does not have is not released, so not logged as released.
                let overview = try vault.overview(named: name)
                let present = f == "password" ? overview.hasPassword : f == "totp" ? overview.hasTOTP : true
                if !present { throw VaultError.failure("item '\(overview.item.name)' has no \(f)") }
            }
            // The secrets go from the released record (guarded memory) into a guarded output.
            try printItem(released.isEmpty ? try ReleasedItem(withholdingAllOf: overview)
                                           : try Release.secrets(name, fields: released, command: "get", from: vault, inv, ctx), inv, ctx)
        })

    /// One value of `--field`: text of the overview, or bytes of a released secret.
    enum FieldValue {
        case text(String)
        case secret(UnsafeRawBufferPointer)
    }

    /// Prints an item, `--field`, `--json` and `--reveal` as asked. The output is assembled in
    /// guarded memory (escaped byte by byte for a terminal) and written from there, the secrets
    /// copied into it from the released record: none of them becomes a String.
    static func printItem(_ released: ReleasedItem, _ inv: Invocation, _ ctx: CommandContext) throws {
        let overview = released.overview
        let item = overview.item
        let out = try SecretOutput()
        let onTerminal = ctx.stdout.isTerminal
        func put(_ text: String) {
            if onTerminal { var t = text; t.withUTF8 { out.appendTerminalSafe(UnsafeRawBufferPointer($0)) } } else { out.append(text) }
        }
        func put(secret bytes: UnsafeRawBufferPointer) {
            if onTerminal { out.appendTerminalSafe(bytes) } else { out.append(bytes) }
        }
        try released.withSecrets { s in
            // Former passwords, newest first, one a line (as `Item.field("history")`).
            let history = try SecretOutput()
            var former: [UnsafeRawBufferPointer] = []
            s.forEachFormerPassword { _, p in former.append(p) }
            for (k, p) in former.reversed().enumerated() {
                if k > 0 { history.append(UInt8(ascii: "\n")) }
                history.append(p)
            }
            try history.withUnsafeBytes { historyBytes in
                if let f = inv.value("--field") {
                    let value: FieldValue?
                    if f == "history" {
                        value = former.isEmpty ? nil : .secret(historyBytes)
                    } else if ["password", "totp", "notes"].contains(f) {
                        value = s.value(of: f).map(FieldValue.secret)
                    } else if let custom = item.customField(f), custom.kind.isSecret, !Item.fieldNames.contains(f) {
                        value = s.customValue(of: f).map(FieldValue.secret) ?? .text(custom.value)
                    } else {
                        value = try item.field(f).map(FieldValue.text)
                    }
                    guard let value else { throw VaultError.failure("item '\(item.name)' has no \(f)") }
                    if inv.has("--json") {
                        switch value {
                        case .text(let t): JSONText.append([f: t], to: out)
                        case .secret(let b): JSONText.append([f: JSONSecret(b)], to: out)
                        }
                        out.append("\n")
                    } else {
                        switch value {
                        case .text(let t): put(t)
                        case .secret(let b): put(secret: b)
                        }
                        out.append("\n")
                    }
                    return
                }
                let reveal = inv.has("--reveal")
                func customValue(_ f: CustomField) -> Any {
                    f.kind.isSecret ? s.customValue(of: f.name).map(JSONSecret.init) ?? "" : f.value
                }
                if inv.has("--json") {
                    var o = listingJSON(item)
                    if let n = s.value(of: "notes") { o["notes"] = JSONSecret(n) }
                    o["type"] = item.type.rawValue
                    if !item.fields.isEmpty {
                        o["fields"] = item.fields.map { f -> [String: Any] in
                            var e: [String: Any] = ["name": f.name, "kind": f.kind.rawValue]
                            if !f.kind.isSecret || reveal { e["value"] = customValue(f) }
                            return e
                        }
                    }
                    if overview.historyCount > 0 { o["history_count"] = overview.historyCount }
                    if reveal {
                        if let p = s.value(of: "password") { o["password"] = JSONSecret(p) }
                        if let t = s.value(of: "totp") { o["totp"] = JSONSecret(t) }
                    } else {
                        o["has_password"] = overview.hasPassword
                        o["has_notes"] = overview.hasNotes
                    }
                    JSONText.append(o, to: out)
                    out.append("\n")
                    return
                }
                put("name: \(item.name)")
                if item.type != .login { put("\ntype: \(item.type.rawValue)") }
                if let u = item.username { put("\nusername: \(u)") }
                if overview.hasPassword {
                    put("\npassword: ")
                    if reveal { s.value(of: "password").map { put(secret: $0) } } else { put("******** (--reveal or --field password shows it)") }
                }
                for u in item.urls { put("\nurl: \(u)") }
                if !item.tags.isEmpty { put("\ntags: \(item.tags.joined(separator: ", "))") }
                if overview.hasTOTP {
                    put("\ntotp: ")
                    if reveal { s.value(of: "totp").map { put(secret: $0) } } else { put("set") }
                }
                if let n = s.value(of: "notes") {
                    put("\nnotes: ")
                    put(secret: n)
                } else if overview.hasNotes {
                    put("\nnotes: (kept with the secrets: --reveal or --field notes shows them)")
                }
                for f in item.fields {
                    put("\n\(f.name): ")
                    if !f.kind.isSecret {
                        put(f.value)
                    } else if reveal, let v = s.customValue(of: f.name), !v.isEmpty {
                        put(secret: v)
                    } else {
                        put("******** (--field '\(f.name)' shows it)")
                    }
                }
                if overview.historyCount > 0 { put("\npassword history: \(overview.historyCount) former password\(overview.historyCount == 1 ? "" : "s") (--field history)") }
                put("\nfingerprint login: \(item.fingerprintLogin ? "on" : "off")")
                out.append("\n")
            }
        }
        ctx.stdout.writeSecret(out)
    }
}

extension ItemCommands {
    static let log = CommandSpec(
        name: "log", summary: "show the audit log: every secret released, when, to which command, uid and executable",
        usage: "vault log [--limit N] [--json]",
        options: [.flag("--json", "print JSON"), .value("--limit", "N", "only the last N records")] + Auth.options,
        examples: "vault log --limit 20",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "read the audit log")
            let records = try vault.auditRecords(limit: try inv.int("--limit"))
            var damaged = 0
            var rows: [[String: Any]] = []
            let formatter = ISO8601DateFormatter()
            for r in records {
                switch r {
                case .success(let a):
                    rows.append(["time": a.time, "item": a.item, "field": a.field, "command": a.command, "uid": a.uid, "pid": a.pid ?? NSNull(),
                                 "executable": a.executable ?? NSNull()])
                    if !inv.has("--json") {
                        // The command is what the caller said; the executable is what the kernel said it ran.
                        let exe = a.executable.map { terminalSafe($0, onTerminal: ctx.stdout.isTerminal) } ?? "-"
                        ctx.stdout.write("\(formatter.string(from: Date(timeIntervalSince1970: TimeInterval(a.time))))  uid \(a.uid)  \(terminalSafe(a.command, onTerminal: ctx.stdout.isTerminal))  \(a.item)  \(a.field)  \(exe)\n")
                    }
                case .failure: damaged += 1
                }
            }
            if inv.has("--json") { ctx.stdout.write(jsonText(["records": rows, "damaged": damaged])) }
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
        name = name.trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty else { throw VaultError.usage("--field needs a name: --field NAME[:KIND][=VALUE]") }
        if Item.fieldNames.contains(name) || name == "totp-uri" || name == "all" {
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
    static func values(_ specs: [FieldSpec], _ ctx: CommandContext, label: String) throws -> [CustomField] {
        var out: [CustomField] = []
        for spec in specs {
            if out.contains(where: { $0.name == spec.name }) { throw VaultError.usage("--field '\(spec.name)' given twice") }
            var value = try spec.value ?? SecretInput.stdinText(ctx, what: "value of the field '\(spec.name)'")
            if spec.kind == .totp { value = try OTP.normalize(value, label: label) }
            out.append(CustomField(name: spec.name, kind: spec.kind, value: value))
        }
        return out
    }
}
