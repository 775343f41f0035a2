import FoundationEssentials
import VaultKit
import VaultSystem
import VaultOTP

extension ItemCommands {
    /// The options of `get`, declared once: the table lists them and the command reads them.
    enum GetOptions {
        static let field = OptionSpec.value("--field", "F", "print only this field: \(ItemField.builtIn.map(\.spelling).joinedText(separator: ", ")), or a custom field's name (totp and otp print the current code)")
        static let json = OptionSpec.flag("--json", "print JSON (the password only with --reveal or --field password)")
        static let reveal = OptionSpec.flag("--reveal", "include the password, the TOTP secret and the notes")
        static let clip = OptionSpec.flag("--clip", "copy the value (the password, or --field) to the clipboard instead of printing it")
        static let clearAfter = OptionSpec.value("--clear-after", "D", "with --clip: empty the clipboard after D (at most 1h) if it still holds the value (default 45s)")
        static let freshMatch = OptionSpec.flag("--fresh-match", "release only after a fresh finger match, even with fingerprint login off (what 'vault secret-service' asks for a per-client collection)")
    }

    static let get = CommandSpec(
        name: "get", summary: "print a login or one of its fields",
        usage: "vault get NAME [--field F] [--json] [--reveal]",
        options: [GetOptions.field, GetOptions.json, GetOptions.reveal, GetOptions.clip, GetOptions.clearAfter, GetOptions.freshMatch] + Auth.options,
        arguments: 1...1,
        examples: """
        vault get github --field password
        vault get github --json | jq -r .username
        vault get github --clip
        PGPASSWORD=$(vault get prod-db --field password --no-input) psql ...
        """,
        run: { inv, ctx in
            var request = try GetRequest(inv)
            // No touch is spent on a copy that cannot be made.
            if request.clip { try Clipboard.check(ctx.environment) }
            let vault = try openAccess(inv, ctx, purpose: "read '\(request.name)'")
            // A built-in secret field needs no overview to be checked first: a script's
            // `get --field password` is one request to the agent, not two. A name that is not
            // there is looked up afterwards: for a person at a terminal (who sees the note) a
            // unique substring match is taken, as `bw get` does; a script gets only the exact
            // name, so a rename never hands it another item's secret.
            do {
                let plan = try request.direct ?? request.plan(for: try vault.overview(named: request.name))
                try perform(plan, request, vault, inv, ctx)
            } catch VaultError.itemNotFound(let n) where n == request.name {
                request.name = try ItemLookup.resolve(n, in: vault, ctx, substring: ctx.stderr.isTerminal)
                let plan = try request.direct ?? request.plan(for: try vault.overview(named: request.name))
                try perform(plan, request, vault, inv, ctx)
            }
        })

    /// Carries out what `get` decided: releases what the plan names (and nothing else) and
    /// prints or copies it.
    static func perform(_ plan: GetPlan, _ request: GetRequest, _ vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext) throws {
        let name = request.name
        if inv.has(GetOptions.freshMatch) {
            // The key authority's live scan over a nonce of the vault, whatever the item's switch:
            // nothing is released when it fails. An item with the switch on is checked again by
            // the vault, which reuses this match.
            _ = try Release.freshMatch(try FreshMatchPurpose(kind: .release, item: name), vault, inv, ctx,
                                       prompt: "touch the fingerprint reader to release '\(name)'")
        }
        func copied(_ what: String, of item: String) {
            ctx.say("vault: copied the \(what) of '\(item)' to the clipboard; it is cleared in \(SessionCommands.describe(request.clearAfter))")
        }
        switch plan {
        case .secret(let field):
            // One secret printed as is: from the record's guarded memory to write(2), never a String.
            let secret = try Release.secret(name, field: field, command: "get", from: vault, inv, ctx)
            ctx.stdout.writeSecret(secret)
            ctx.stdout.write("\n")
        case .totpURI(let json):
            // The URI printed is the secret itself: from the record's guarded memory to write(2).
            let secret = try Release.secret(name, field: .totp, command: "get", from: vault, inv, ctx)
            if json {
                let out = try SecretOutput(capacity: secret.count + 32)
                secret.withUnsafeBytes { JSONText.append([ItemField.totpURI.spelling: JSONSecret($0)], to: out) }
                out.append("\n")
                ctx.stdout.writeSecret(out)
            } else {
                ctx.stdout.writeSecret(secret)
                ctx.stdout.write("\n")
            }
        case .totp(let kind, let destination):
            let command = destination == .clipboard ? "get --clip" : "get"
            let value: String
            switch kind {
            case .code:
                value = try OTPCommand.current(name, command: command, from: vault, inv, ctx).code
            case .uri:
                let item = try Release.item(name, fields: .fields([.totp]), command: command, from: vault, inv, ctx)
                guard let uri = item.totp else { throw VaultError.failure("item '\(item.name)' has no totp") }
                value = uri
            }
            switch destination {
            case .clipboard:
                try Clipboard.copy(value, clearAfter: request.clearAfter, ctx)
                copied(kind.field, of: name)
            case .json: ctx.stdout.write(jsonText([kind.field: value]))
            case .text: ctx.stdout.write(terminalSafe(value, onTerminal: ctx.stdout.isTerminal) + "\n")
            }
        case .copy(let field, let secret, let release, let itemName):
            if secret {
                // From the record's guarded memory to the clipboard owner's pipe, never a String.
                let value = try Release.secret(name, field: field, command: "get --clip", from: vault, inv, ctx)
                try Clipboard.copy(value, clearAfter: request.clearAfter, ctx)
            } else {
                let item = try Release.item(name, fields: release, command: "get --clip", from: vault, inv, ctx)
                guard let value = item.value(of: field) else { throw VaultError.failure("item '\(item.name)' has no \(field)") }
                try Clipboard.copy(value, clearAfter: request.clearAfter, ctx)
            }
            copied(field.spelling, of: itemName)
        case .item(let overview, let release):
            // The secrets go from the released record (guarded memory) into a guarded output.
            try printItem(release.isEmpty ? try ReleasedItem(withholdingAllOf: overview)
                                          : try Release.secrets(name, fields: release, command: "get", from: vault, inv, ctx), request, ctx)
        }
    }

    /// One value of `--field`: text of the overview, or bytes of a released secret.
    enum FieldValue {
        case text(String)
        case secret(UnsafeRawBufferPointer)
    }

    /// Prints an item, `--field`, `--json` and `--reveal` as `request` asks. The output is
    /// assembled in guarded memory (escaped byte by byte for a terminal) and written from there,
    /// the secrets copied into it from the released record: none of them becomes a String.
    static func printItem(_ released: ReleasedItem, _ request: GetRequest, _ ctx: CommandContext) throws {
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
            // Former passwords, newest first, one a line (as `Item.value(of: .history)`).
            let history = try SecretOutput()
            var former: [UnsafeRawBufferPointer] = []
            s.forEachFormerPassword { _, p in former.append(p) }
            for (k, p) in former.reversed().enumerated() {
                if k > 0 { history.append(UInt8(ascii: "\n")) }
                history.append(p)
            }
            try history.withUnsafeBytes { historyBytes in
                if let f = request.field {
                    let value: FieldValue?
                    if f == .history {
                        value = former.isEmpty ? nil : .secret(historyBytes)
                    } else if item.isSecretField(f) {
                        // A secret custom field not released shows its overview's (empty) value.
                        value = s.value(of: f).map(FieldValue.secret) ?? item.value(of: f).map(FieldValue.text)
                    } else {
                        value = item.value(of: f).map(FieldValue.text)
                    }
                    guard let value else { throw VaultError.failure("item '\(item.name)' has no \(f)") }
                    if request.json {
                        switch value {
                        case .text(let t): JSONText.append([f.spelling: t], to: out)
                        case .secret(let b): JSONText.append([f.spelling: JSONSecret(b)], to: out)
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
                let reveal = request.reveal
                func customValue(_ f: CustomField) -> Any {
                    f.kind.isSecret ? s.value(of: .custom(f.name)).map(JSONSecret.init) ?? "" : f.value
                }
                if request.json {
                    var o = listingJSON(item)
                    if let n = s.value(of: .notes) { o["notes"] = JSONSecret(n) }
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
                        if let p = s.value(of: .password) { o["password"] = JSONSecret(p) }
                        if let t = s.value(of: .totp) { o["totp"] = JSONSecret(t) }
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
                    if reveal { s.value(of: .password).map { put(secret: $0) } } else { put("******** (--reveal or --field password shows it)") }
                }
                for u in item.urls { put("\nurl: \(u)") }
                if !item.tags.isEmpty { put("\ntags: \(item.tags.joinedText(separator: ", "))") }
                if overview.hasTOTP {
                    put("\ntotp: ")
                    if reveal { s.value(of: .totp).map { put(secret: $0) } } else { put("set") }
                }
                if let n = s.value(of: .notes) {
                    put("\nnotes: ")
                    put(secret: n)
                } else if overview.hasNotes {
                    put("\nnotes: (kept with the secrets: --reveal or --field notes shows them)")
                }
                for f in item.fields {
                    put("\n\(f.name): ")
                    if !f.kind.isSecret {
                        put(f.value)
                    } else if reveal, let v = s.value(of: .custom(f.name)), !v.isEmpty {
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

/// What `vault get` was asked: the item and its options, checked.
struct GetRequest: Equatable {
    var name: String
    /// `--field`, as `ItemField(parsing:)` reads it (checked against the item by `plan`).
    var field: ItemField?
    var json = false
    var reveal = false
    var clip = false
    /// Seconds until the clipboard is emptied (`--clear-after`, default 45, at most an hour).
    var clearAfter: Double = 45

    /// A request as given (tests).
    init(name: String, field: ItemField? = nil, json: Bool = false, reveal: Bool = false, clip: Bool = false, clearAfter: Double = 45) {
        self.name = name
        self.field = field
        self.json = json
        self.reveal = reveal
        self.clip = clip
        self.clearAfter = clearAfter
    }

    /// The request of a parsed `get`.
    /// - Throws: `.usage` for a bad name, `--clip` with `--json`, a bad or too long `--clear-after`.
    init(_ inv: Invocation) throws {
        typealias O = ItemCommands.GetOptions
        name = try Item.normalize(name: inv.arguments[0])
        clip = inv.has(O.clip)
        json = inv.has(O.json)
        if clip && json { throw VaultError.usage("--clip and --json exclude each other") }
        clearAfter = try SessionCommands.duration(inv, O.clearAfter, default: 45)
        // The clearer waits at most an hour: a longer promise would not be kept.
        guard clearAfter <= 3600 else { throw VaultError.usage("--clear-after is at most 1h, not '\(inv[O.clearAfter] ?? "")'") }
        field = inv[O.field].map(ItemField.init(parsing:))
        reveal = inv.has(O.reveal)
    }

    /// The plan that needs no overview: a built-in secret field printed as is, the password or
    /// the notes (nil: look at the item first; `totp` prints a code).
    var direct: GetPlan? {
        guard let f = field, !json, !clip, f == .password || f == .notes else { return nil }
        return .secret(field: f)
    }

    /// What to release and print for the item `overview` describes. Only the secrets printed
    /// are released (and so logged).
    /// - Throws: `.usage` for a field the item does not have, `.failure` for a secret field it lacks.
    func plan(for overview: ItemOverview) throws -> GetPlan {
        let item = overview.item
        let field = try self.field?.checked(in: item)
        // An SSH key's private key is printed only when asked for by name and with --reveal.
        let privateKey = ItemField.custom(SSHKeyFields.privateKey)
        if item.type == .sshKey, field == privateKey, !reveal || clip {
            throw VaultError.usage("the private key of '\(item.name)' is printed only with --field private-key --reveal",
                                   hint: "'vault ssh-key pub \(item.name)' prints the public key")
        }
        // `totp` and `otp` are the current code, `totp-uri` the secret's URI: all release the secret.
        if field == .totpURI, !clip { return .totpURI(json: json) }
        if let f = field, f.source == .totp {
            return .totp(f == .totpURI ? .uri : .code, clip ? .clipboard : json ? .json : .text)
        }
        if clip {
            let f = field ?? .password
            let secret = item.isSecretField(f)
            return .copy(field: f, secret: f.isSingleSecret(of: item), release: secret ? .fields([f]) : .nothing, item: item.name)
        }
        if let f = field, !json, f.isSingleSecret(of: item) { return .secret(field: f) }
        let release: FieldSelection
        if let f = field {
            release = item.isSecretField(f) ? .fields([f]) : .nothing
            // A field the item does not have is not released, so not logged as released.
            if f == .password, !overview.hasPassword { throw VaultError.failure("item '\(item.name)' has no password") }
        } else {
            release = !reveal ? .nothing : item.type == .sshKey ? .fields(FieldSelection.all.resolved(for: item).filter { $0 != privateKey }) : .all
        }
        return .item(overview, release: release)
    }
}

/// What `vault get` does, decided from the request and the item's overview before anything is
/// released: the executor, `ItemCommands.perform`, releases exactly what a case names.
enum GetPlan: Equatable {
    /// One secret field, from the record's guarded memory to stdout, then a newline.
    case secret(field: ItemField)
    /// The TOTP secret as its otpauth:// URI, as is or as JSON `{"totp-uri": ...}`.
    case totpURI(json: Bool)
    /// The TOTP code or URI as text: to the clipboard, as JSON or as a line.
    case totp(TOTPValue, GetDestination)
    /// One field to the clipboard: a secret straight from the released record, else read from
    /// the item released with `release`; the message names `item`.
    case copy(field: ItemField, secret: Bool, release: FieldSelection, item: String)
    /// The item (all of it, or `--field` as text or JSON) with these secrets released.
    case item(ItemOverview, release: FieldSelection)

    /// Which TOTP value `get` prints.
    enum TOTPValue {
        case code, uri
        /// The field's name as `--field` and JSON spell it.
        var field: String { (self == .code ? ItemField.totp : .totpURI).spelling }
    }
}

/// Where a value `get` prints goes.
enum GetDestination { case clipboard, json, text }
