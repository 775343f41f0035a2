import FoundationEssentials
import VaultSystem

/// Who asked for a secret: written into the audit record of its release. In-process it is this
/// process; in the agent it comes from the socket's peer credentials and the kernel's link to
/// the peer's executable, never from the request.
public struct Requester: Codable, Equatable, Sendable {
    /// The requesting uid.
    public var uid: UInt32
    /// The requesting process.
    public var pid: Int32
    /// The requesting process's executable as the kernel links it (`/proc/PID/exe`), nil when
    /// it could not be read (a peer that is not dumpable, to an agent that is not root).
    public var executable: String?
    /// The requesting process's terminal session (`/proc/PID/stat`, read with the executable),
    /// nil when it could not be read: what a terminal-scoped unlock session compares.
    public var terminal: TerminalSession?
    /// Creates a requester.
    public init(uid: UInt32, pid: Int32, executable: String? = nil, terminal: TerminalSession? = nil) {
        self.uid = uid
        self.pid = pid
        self.executable = executable
        self.terminal = terminal
    }
    /// This process.
    public static var current: Requester {
        Requester(uid: ProcessIdentity.uid, pid: ProcessIdentity.pid, executable: try? ProcessIdentity.executable(of: ProcessIdentity.pid))
    }
    /// The peer of a socket: its credentials, and its executable read now (at connection time,
    /// before its pid could be reused).
    public static func peer(uid: UInt32, pid: Int32) -> Requester {
        Requester(uid: uid, pid: pid, executable: try? ProcessIdentity.executable(of: pid),
                  terminal: TerminalSession(of: pid))
    }

    /// The audit record of releasing `field` of `item` to this requester, labelled `command`
    /// (what the caller says it is).
    func auditRecord(item: String, field: String, command: String) -> AuditRecord {
        AuditRecord(item: item, field: field, command: command, uid: uid, pid: pid, executable: executable)
    }
}

/// A process's terminal session: what sudo's tty tickets and a terminal-scoped unlock session
/// compare. Two processes share one when they are in the same session (`setsid`) with the same
/// controlling terminal: the shell of one terminal window and what it started.
public struct TerminalSession: Codable, Equatable, Hashable, Sendable {
    /// The session id (the pid of the session's leader).
    public var sessionID: Int32
    /// The controlling terminal's device number (`tty_nr`), 0 when there is none.
    public var terminal: Int32

    /// A session.
    public init(sessionID: Int32, terminal: Int32) {
        self.sessionID = sessionID
        self.terminal = terminal
    }

    /// The session of process `pid` as the kernel reports it, nil when it cannot be read.
    public init?(of pid: Int32) {
        guard let s = try? ProcessIdentity.terminalSession(of: pid) else { return nil }
        self.init(sessionID: s.sessionID, terminal: s.terminal)
    }
}

/// A change to an item, sent as field changes (not a whole item) and applied to the current
/// record inside the write transaction, so two concurrent edits of different fields both land.
public struct ItemChange: Codable, Equatable, Sendable {
    /// A new name.
    public var rename: String?
    /// Fields emptied first (of `ItemField.clearable`; any other is ignored).
    public var clear: [ItemField] = []
    /// New values (nil: unchanged).
    public var username: String?
    public var password: String?
    public var urls: [String]?
    public var notes: String?
    public var tags: [String]?
    public var totp: String?
    public var userPrompt: String?
    public var passwordPrompt: String?
    /// Turns fingerprint login on or off.
    public var fingerprintLogin: Bool?
    /// A new type.
    public var type: ItemType?
    /// Custom fields set (one of that name replaced in place, else appended).
    public var setFields: [CustomField] = []
    /// Custom fields removed, by name.
    public var removeFields: [String] = []
    /// When set, the change applies only if the item's TOTP URI is still this (an HOTP counter
    /// advanced by compare and set); otherwise `.changedMeanwhile` and nothing is written.
    public var requireTOTP: String?

    /// No change.
    public init() {}

    /// Whether nothing would change.
    public var isEmpty: Bool { self == ItemChange() }

    /// Applies the change (clears first, then the new values).
    public func apply(to item: inout Item) {
        for field in clear {
            switch field {
            case .username: item.username = nil
            case .password: item.replacePassword(with: nil)
            case .url, .urls: item.urls = []
            case .notes: item.notes = nil
            case .tags: item.tags = []
            case .totp: item.totp = nil
            case .userPrompt: item.userPrompt = nil
            case .passwordPrompt: item.passwordPrompt = nil
            case .name, .type, .totpURI, .otp, .history, .custom: break
            }
        }
        if let rename { item.name = rename }
        if let username { item.username = username }
        if let password { item.replacePassword(with: password) }
        if let urls { item.urls = urls }
        if let notes { item.notes = notes }
        if let tags { item.tags = tags }
        if let totp { item.totp = totp }
        if let userPrompt { item.userPrompt = userPrompt }
        if let passwordPrompt { item.passwordPrompt = passwordPrompt }
        if let fingerprintLogin { item.fingerprintLogin = fingerprintLogin }
        if let type { item.type = type }
        item.fields.removeAll { removeFields.contains($0.name) }
        for field in setFields {
            if let k = item.fields.firstIndex(where: { $0.name == field.name }) { item.fields[k] = field } else { item.fields.append(field) }
        }
    }
}

/// An item with its secrets withheld, and whether it has them: what listings, summaries and
/// matching see without releasing anything. It is exactly what the item's overview record holds.
public struct ItemOverview: Codable, Equatable, Sendable {
    /// The item; `password`, `totp` and `notes` are nil here, the password history empty, and
    /// the custom fields of a secret kind (hidden, TOTP) have an empty value.
    public var item: Item
    /// Whether the item has a password.
    public var hasPassword: Bool
    /// Whether the item has a TOTP secret.
    public var hasTOTP: Bool
    /// Whether the item has notes.
    public var hasNotes: Bool
    /// How many former passwords it keeps.
    public var historyCount: Int

    /// The overview of `item`.
    public init(_ item: Item) {
        var i = item
        hasPassword = i.password != nil
        hasTOTP = i.totp != nil
        hasNotes = i.notes != nil
        historyCount = i.passwordHistory.count
        i.password = nil
        i.totp = nil
        i.notes = nil
        i.passwordHistory = []
        for k in i.fields.indices where i.fields[k].kind.isSecret { i.fields[k].value = "" }
        self.item = i
    }

    /// An overview as decoded from its record.
    init(item: Item, hasPassword: Bool, hasTOTP: Bool, hasNotes: Bool, historyCount: Int) {
        self.item = item
        self.hasPassword = hasPassword
        self.hasTOTP = hasTOTP
        self.hasNotes = hasNotes
        self.historyCount = historyCount
    }
}

/// An open vault as commands use it: in this process (the key here, after authenticating here)
/// or through the unlock session's agent (the key stays in the agent). Every command goes
/// through this one protocol, so each works both ways and every secret handed out is audited by
/// whoever holds the key.
public protocol VaultAccess: AnyObject {
    /// The vault's name.
    var vaultName: String { get }
    /// One item without its secrets (`.itemNotFound`, `.corrupt`).
    func overview(named name: String) throws -> ItemOverview
    /// One item's overview with the secrets `fields` selects (`FieldSelection.resolved(for:)`;
    /// the non-secret fields named are the overview's), the secrets as a secrets record in
    /// guarded memory: they are never Strings on the way from the record to the caller. One
    /// audit record per field named that the item has is written first. An item
    /// with fingerprint login on is released only with `freshMatch`, a key authority's token
    /// over a nonce the vault issued for releasing this item (`freshMatchNonce(for:)`), used once;
    /// otherwise `.freshMatchNeeded`.
    /// - Throws: `.itemNotFound`, `.corrupt`, `.freshMatchNeeded`.
    func releaseSecrets(named name: String, fields: FieldSelection, command: String, freshMatch: FreshMatchToken?) throws -> ReleasedItem
    /// One secret of an item, the value of its secrets record `field` reads (`ItemField.source`:
    /// the password, the TOTP secret's URI for `totp`, `totp-uri` and `otp`, the notes, a secret
    /// custom field), in guarded memory: it is never a String on the way from the record to the
    /// caller. One audit record is written first; fingerprint login as for `releaseSecrets`.
    /// - Throws: `.itemNotFound`, `.usage` for a field that is not one secret of the item (the
    ///   history, a username), `.failure` when the item has no such secret, `.freshMatchNeeded`.
    func releaseSecret(named name: String, field: ItemField, command: String, freshMatch: FreshMatchToken?) throws -> SecretBytes
    /// Streams every row's overview (damaged rows reported as such), or with `term` only the
    /// items `OverviewMatcher` matches. No secret is opened.
    func forEachOverview(matching term: String?, _ body: (OverviewEntry) throws -> Void) throws
    /// The same rows as `forEachOverview`, each overview's plaintext lent (valid during the call)
    /// instead of decoded: a listing of names reads the name in place.
    func forEachOverviewRecord(matching term: String?, _ body: (OverviewRecordEntry) throws -> Void) throws
    /// Streams every item with its secrets (export), each lent from guarded memory during the
    /// call: one audit record for the whole release, written before the first item; with any
    /// fingerprint-login item in the vault, only with `freshMatch`, a token for `.releaseAll`
    /// (checked before anything is released).
    func releaseEachSecrets(command: String, freshMatch: FreshMatchToken?, _ body: (ReleasedEntry) throws -> Void) throws
    /// Whether an item exists.
    func contains(_ name: String) throws -> Bool
    /// Adds (or with `replace`, replaces) an item.
    func add(_ item: Item, replace: Bool) throws
    /// Adds the items `next` yields, pulled one at a time, in one transaction (an import holds
    /// one decoded item at a time, or one frame's worth through a session); returns how many.
    /// Nothing is written when `next` or any item throws.
    func add(replace: Bool, from next: () throws -> Item?) throws -> Int
    /// A single-use nonce (32 bytes, valid about a minute) for a fresh match for `purpose`: the
    /// caller has its key authority verify a match over it and sends the token with the request.
    func freshMatchNonce(for purpose: FreshMatchPurpose) throws -> [UInt8]
    /// Applies `change` to the item called `name` inside one write transaction. A change that
    /// turns the item's fingerprint login off needs `freshMatch`, a token for
    /// `.fingerprintLoginSwitch` of this item; otherwise `.freshMatchNeeded` and nothing changes.
    func update(_ name: String, _ change: ItemChange, freshMatch: FreshMatchToken?) throws
    /// Deletes an item.
    func remove(_ name: String) throws
    /// The audit log.
    func auditRecords(limit: Int?) throws -> [Result<AuditRecord, VaultError>]
}

extension VaultAccess {
    /// Adds many items in one transaction; returns how many.
    public func add(contentsOf items: [Item], replace: Bool) throws -> Int {
        var rest = items[...]
        return try add(replace: replace) { rest.popFirst() }
    }

    /// One item with the secrets `fields` selects as `String`s (the others withheld), audited
    /// as `releaseSecrets`: for the paths that still hand secrets out as text. Without
    /// `freshMatch`, an item with fingerprint login on refuses a secret.
    package func release(named name: String, fields: FieldSelection, command: String, freshMatch: FreshMatchToken? = nil) throws -> Item {
        try releaseSecrets(named: name, fields: fields, command: command, freshMatch: freshMatch).item()
    }

    /// Every item with its secrets as `String`s, streamed (tests, a Bitwarden export).
    package func releaseEach(command: String, freshMatch: FreshMatchToken?, _ body: (ItemEntry) throws -> Void) throws {
        try releaseEachSecrets(command: command, freshMatch: freshMatch) { try body($0.decoded()) }
    }

    /// Every item with its secrets, collected (tests and small vaults; export streams).
    package func releaseAll(command: String, freshMatch: FreshMatchToken? = nil) throws -> [ItemEntry] {
        var out: [ItemEntry] = []
        try releaseEach(command: command, freshMatch: freshMatch) { out.append($0) }
        return out
    }

    /// Applies `change` without a fresh match (a change that turns fingerprint login off is refused).
    public func update(_ name: String, _ change: ItemChange) throws {
        try update(name, change, freshMatch: nil)
    }

    /// Every row, secrets withheld (damaged ones reported as such), collected.
    public func allItems() throws -> [ItemEntry] {
        var out: [ItemEntry] = []
        try forEachOverview(matching: nil) { e in
            switch e {
            case .item(let o): out.append(.item(o.item))
            case .damaged(let id): out.append(.damaged(rowID: id))
            }
        }
        return out
    }
}

extension UnlockedVault: VaultAccess {
    /// The vault's name.
    public var vaultName: String { store.location.name }

    /// One item's overview and the secrets `fields` selects, audited as released to this process.
    public func releaseSecrets(named name: String, fields: FieldSelection, command: String, freshMatch: FreshMatchToken?) throws -> ReleasedItem {
        try releaseSecrets(named: name, fields: fields, command: command, to: .current, freshMatch: freshMatch)
    }

    /// One item's overview and the secrets `fields` selects, audited as released to
    /// `requester` (the agent passes its peer): the overview and the secrets record are opened
    /// from one read of the row, and the fields selected are copied from the opened record (in
    /// guarded memory) into a new secrets record in guarded memory. The secrets record is
    /// opened only when a secret is asked for; only what the item has is logged. Fingerprint
    /// login is checked here (`requireFreshMatch`), for every caller.
    package func releaseSecrets(named name: String, fields: FieldSelection, command: String, to requester: Requester,
                               freshMatch: FreshMatchToken? = nil) throws -> ReleasedItem {
        let n = try Item.normalize(name: name)
        let row = try row(named: n)
        let scratch = try RecordScratch(capacity: max(row.secrets.count, row.overview.count))
        let overview = try reading(n, record: .overview) { try openOverview(row, scratch: scratch) }
        let item = overview.item
        if item.releaseNeedsFreshMatch(fields) {
            try requireFreshMatch(freshMatch, for: .release(item: item.name), item: item.name)
        }
        let named = fields.resolved(for: item)
        let secret = Set(named.filter { item.isSecretField($0) })
        let released = secret.isEmpty ? try ReleasedItem(withholdingAllOf: overview) : try ReleasedItem(overview: overview, record: try reading(n, record: .secrets) {
            try withSecrets(row, scratch: scratch) { try SecretsRecord.keeping(secret, of: $0) }
        })
        let has = released.withSecrets { s in
            named.filter { f in secret.contains(f) ? s.has(f) : item.value(of: f) != nil }
        }
        for field in has {
            try appendAudit(requester.auditRecord(item: item.name, field: field.spelling, command: command))
        }
        return released
    }

    /// One secret in guarded memory, audited as released to this process.
    public func releaseSecret(named name: String, field: ItemField, command: String, freshMatch: FreshMatchToken?) throws -> SecretBytes {
        try releaseSecret(named: name, field: field, command: command, to: .current, freshMatch: freshMatch)
    }

    /// One secret in guarded memory, audited as released to `requester`: the secrets record is
    /// opened into guarded memory and the field's bytes copied from there into the result.
    package func releaseSecret(named name: String, field asked: ItemField, command: String, to requester: Requester,
                              freshMatch: FreshMatchToken? = nil) throws -> SecretBytes {
        let overview = try overview(named: name).item
        let field = asked.source
        guard field.isSingleSecret(of: overview) else {
            throw VaultError.usage("'\(asked)' is not a secret of item '\(overview.name)'")
        }
        if overview.releaseNeedsFreshMatch(.fields([field])) { try requireFreshMatch(freshMatch, for: .release(item: overview.name), item: overview.name) }
        let n = overview.name
        let row = try row(named: n)
        let scratch = try RecordScratch(capacity: row.secrets.count)
        let value = try reading(n, record: .secrets) {
            try withSecrets(row, scratch: scratch) { plain -> SecretBytes? in
                guard let v = try SecretsRecord.value(of: field, in: plain) else { return nil }
                return try SecretBytes(copying: v)
            }
        }
        guard let value else { throw VaultError.failure("item '\(n)' has no \(field)") }
        try appendAudit(requester.auditRecord(item: n, field: field.spelling, command: command))
        return value
    }

    /// Streams every row's overview, or those `term` matches.
    public func forEachOverview(matching term: String?, _ body: (OverviewEntry) throws -> Void) throws {
        try forEachOverview(matcher: term.map(OverviewMatcher.init(term:)), body)
    }

    /// Streams every row's overview record, or those `term` matches (checked, not decoded).
    public func forEachOverviewRecord(matching term: String?, _ body: (OverviewRecordEntry) throws -> Void) throws {
        let matcher = term.map(OverviewMatcher.init(term:))
        try forEachOverviewRecord { e in
            if let matcher, case .record(let plain) = e, !matcher.matches(plain) { return }
            try body(e)
        }
    }

    /// Every item with its secrets, lent from guarded memory, one audit record for all of them.
    public func releaseEachSecrets(command: String, freshMatch: FreshMatchToken?, _ body: (ReleasedEntry) throws -> Void) throws {
        try releaseEachSecrets(command: command, to: .current, freshMatch: freshMatch, body)
    }

    /// Every item with its secrets as `String`s, audited as released to `requester` (tests).
    package func releaseEach(command: String, to requester: Requester, freshMatch: FreshMatchToken? = nil, _ body: (ItemEntry) throws -> Void) throws {
        try releaseEachSecrets(command: command, to: requester, freshMatch: freshMatch) { try body($0.decoded()) }
    }

    /// Every item with its secrets, audited as released to `requester`, streamed as read: each
    /// secrets record is lent from the one guarded buffer it was opened into, with its overview
    /// decoded. The release is `releaseEachRecords`'s.
    package func releaseEachSecrets(command: String, to requester: Requester, freshMatch: FreshMatchToken? = nil,
                                   _ body: (ReleasedEntry) throws -> Void) throws {
        try releaseEachRecords(command: command, to: requester, freshMatch: freshMatch) { entry in
            switch entry {
            case .item(let records): try body(.item(try records.decodedOverview(), records.secrets))
            case .damaged(let id): try body(.damaged(rowID: id))
            }
        }
    }

    /// Every item's two records, audited as released to `requester` (the caller of this process
    /// by default), streamed as read and lent where they were opened (export writes its JSON
    /// from them). An item with fingerprint login on must be known before anything is released,
    /// and then `freshMatch` must be a token for `.releaseAll`: when the rows' login hints say no
    /// item has it on, the one pass releases; otherwise a first pass over the overviews finds
    /// one. Either way an item whose sealed flag says on while no token was checked (a hint
    /// changed in the file, or an item written between the two passes) stops the release before
    /// that item, as a failure (not a request for a match: what was already handed out would be
    /// handed out again).
    /// - Throws: `.freshMatchNeeded` (nothing released), `.failure` as above, `.keysRotated`.
    public func releaseEachRecords(command: String, to requester: Requester = .current, freshMatch: FreshMatchToken? = nil,
                                   _ body: (ReleasedRecordsEntry) throws -> Void) throws {
        var matched = false
        if try store.mayHaveFingerprintLogin(), let guarded = try firstFingerprintLoginItem() {
            try requireFreshMatch(freshMatch, for: .releaseAll, item: guarded)
            matched = true
        }
        try appendAudit(requester.auditRecord(item: "*", field: "all", command: command))
        try forEachItemRecords { entry in
            if !matched, case .item(let records) = entry, records.fingerprintLogin {
                throw VaultError.failure("'\(records.name)' has fingerprint login on, which was not known when the release began (it was written meanwhile, or its row's login hint was changed); it and the items after it were not released",
                                         hint: "run it again; if it says so again, 'vault rotate' rewrites every row's hint")
            }
            try body(entry)
        }
    }

    /// Applies `change` inside the write transaction (after checking `requireTOTP`); turning
    /// fingerprint login off takes `freshMatch` (checked by the closure form of `update`).
    public func update(_ name: String, _ change: ItemChange, freshMatch: FreshMatchToken?) throws {
        try update(name, freshMatch: freshMatch) { item in
            if let required = change.requireTOTP, item.totp != required { throw VaultError.changedMeanwhile(item: item.name) }
            change.apply(to: &item)
        }
    }
}
