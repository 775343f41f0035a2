public import VaultKit

/// One request to the agent. Encoded as JSON with one key, the request's kind, whose value holds
/// its fields (`{"release":{"vault":"/…/vault.db","name":"db","fields":["password"],"command":"get"}}`).
/// `vault` is always the vault's database path: the key of its session. The master key of an
/// `unlock` never travels in the JSON: it is the frame's binary tail.
public enum AgentRequest: Codable, Equatable, Sendable {
    /// Opens (or replaces) the session of the vault at `root`/`name` with the key in the frame's
    /// tail, which must belong to key generation `generation`. Durations are clamped to
    /// `AgentLimits.sessionDuration`.
    case unlock(root: String, name: String, generation: Int64, idleSeconds: Double, hardLimitSeconds: Double, scope: SessionScope = .terminal)
    /// Ends the session of `vault`, or every session when nil.
    case lock(vault: String?)
    /// The agent's pid and its sessions.
    case status
    /// Whether `vault` has a session (an ended session is reported here once).
    case probe(vault: String)
    /// One item with its secrets withheld.
    case overview(vault: String, name: String)
    /// A single-use nonce of the session's vault for a fresh match for `purpose` (of the item
    /// `name`; none for `release-all`): the client has its key authority verify a match over it
    /// and sends the token back with the request it is for (`freshMatchNonce` reply).
    case freshMatchNonce(vault: String, name: String?, purpose: FreshMatchPurpose.Kind)
    /// One item with the secrets `fields` selects (`"all"` or a list of fields on the wire): the
    /// agent writes one audit record per field named that the item has, naming the peer's uid,
    /// pid and executable, before it replies. Secrets not selected are withheld; those
    /// selected travel as a secrets record in the reply frame's binary
    /// tail, never in the JSON. An item with fingerprint login on needs `freshMatch`, the key
    /// authority's token over a nonce of this session for releasing it.
    case release(vault: String, name: String, fields: FieldSelection, command: String, freshMatch: FreshMatchToken? = nil)
    /// One secret of an item, in the reply frame's binary tail (never in the JSON): the agent
    /// writes its audit record first, naming the peer; fingerprint login as for `release`.
    case releaseSecret(vault: String, name: String, field: ItemField, command: String, freshMatch: FreshMatchToken? = nil)
    /// One page of the session's overview index, from position `from` (0 when nil), only the
    /// items `term` matches when given (`OverviewMatcher`). The records travel in the reply's
    /// binary tail; nothing is decrypted to answer.
    case list(vault: String, term: String? = nil, from: Int? = nil)
    /// Every item with its secrets (export): one audit record for the whole release. The items
    /// travel in the reply frame's binary tail, never in the JSON.
    case releaseAll(vault: String, command: String, freshMatch: FreshMatchToken? = nil)
    /// Whether an item exists.
    case contains(vault: String, name: String)
    /// Adds an item (or replaces one of that name).
    case add(vault: String, item: Item, replace: Bool)
    /// Items of an import. Without `commit` they are held for this connection; with it, they and
    /// every item held before are written in one transaction.
    case importItems(vault: String, items: [Item], replace: Bool, commit: Bool)
    /// Applies field changes to an item inside one write transaction; turning fingerprint login
    /// off needs `freshMatch`, a token for the switch of this item.
    case update(vault: String, name: String, change: ItemChange, freshMatch: FreshMatchToken? = nil)
    /// Deletes an item.
    case remove(vault: String, name: String)
    /// The audit log, the last `limit` records (at most `AgentLimits.auditRecords`).
    case audit(vault: String, limit: Int?)
    /// Syncs the session's vault with its git remote (`vault sync` in a session: the key stays here).
    case sync(vault: String)
    /// The conflicts the vault's syncs resolved (`vault sync --conflicts` in a session), the
    /// newest `AgentLimits.syncConflicts`, without the secret values a conflict set aside.
    case syncConflicts(vault: String)

    /// The vault the request is about, when it is about one.
    public var vault: String? {
        switch self {
        case .unlock, .status: nil
        case .lock(let v): v
        case .probe(let v), .overview(let v, _), .freshMatchNonce(let v, _, _), .release(let v, _, _, _, _), .releaseSecret(let v, _, _, _, _),
             .list(let v, _, _), .releaseAll(let v, _, _), .contains(let v, _), .add(let v, _, _), .importItems(let v, _, _, _), .update(let v, _, _, _),
             .remove(let v, _), .audit(let v, _), .sync(let v), .syncConflicts(let v):
            v
        }
    }

    /// Whether the reply may be large (a listing or a bulk write): the client waits longer for it.
    public var isBulk: Bool {
        switch self {
        case .list, .releaseAll, .importItems, .audit, .sync, .syncConflicts: true
        default: false
        }
    }
}

/// Whom an unlock session serves: by default the terminal session that opened it (its session
/// id and controlling terminal, read by the agent from the peer's pid), as sudo's tty tickets;
/// `user`: every process of the uid (scripts, services, other terminals), as before.
public enum SessionScope: String, Codable, Equatable, Sendable, CaseIterable {
    /// The opener's terminal session only.
    case terminal
    /// Every process of the user.
    case user
}

/// One session as `status` reports it.
public struct SessionStatus: Codable, Equatable, Sendable {
    /// The vault's database path (the session's key).
    public var vault: String
    /// The vault's name.
    public var name: String
    /// Whole seconds until the idle timeout ends it.
    public var idleLeft: Int
    /// Whole seconds until the hard limit ends it.
    public var hardLeft: Int
    /// Whom it serves.
    public var scope: SessionScope
    /// Whether it serves the process that asked for the status (false: a terminal-scoped
    /// session of another terminal).
    public var servesCaller: Bool
    /// The session's identity within its agent, drawn at random when it was opened: a session
    /// opened again (after a lock, an expiry) has another, so what was granted in one session is
    /// told apart from the next (the Secret Service's per-program approvals). Absent from an
    /// agent that predates it.
    public var serial: Int64?

    /// A status line.
    public init(vault: String, name: String, idleLeft: Int, hardLeft: Int, scope: SessionScope = .user, servesCaller: Bool = true,
                serial: Int64? = nil) {
        self.vault = vault
        self.name = name
        self.idleLeft = idleLeft
        self.hardLeft = hardLeft
        self.scope = scope
        self.servesCaller = servesCaller
        self.serial = serial
    }
}

/// The agent's answer to one request: a result, "no session for this vault", or a `VaultError`.
public enum AgentReply: Codable, Equatable, Sendable {
    /// The session is open (`unlock`, `probe`).
    case sessionOpen
    /// The vault has no session (never opened, or ended and already reported): the client
    /// authenticates by itself.
    case noSession
    /// How many sessions `lock` ended.
    case locked(count: Int)
    /// `status`.
    case status(pid: Int32, sessions: [SessionStatus])
    /// `overview`: never a secret.
    case overview(overview: ItemOverview)
    /// `freshMatchNonce`: 32 random bytes, single use, valid `FreshMatchBook.lifetime` seconds.
    case freshMatchNonce(nonce: [UInt8])
    /// `release`: the item's overview; the secrets named in the request are the frame's binary
    /// tail, as a secrets record (docs/format.md, "Records").
    case released(overview: ItemOverview)
    /// `releaseSecret`: the secret is the frame's binary tail.
    case releasedSecret
    /// `list`: one page of overview records (in the frame's binary tail: each a big-endian u32
    /// length and the record), where the next page starts (nil: this was the last), the ids of
    /// rows that failed authentication (on the first page), and the index version the page
    /// belongs to (a listing that sees it change starts again).
    case listingPage(next: Int?, damaged: [String], version: Int64)
    /// `releaseAll`: every readable item in the frame's binary tail (each a big-endian u32
    /// length and its overview record, then a u32 length and its secrets record), and the ids of
    /// rows that failed authentication.
    case releasedAll(damaged: [String])
    /// `contains`.
    case contains(exists: Bool)
    /// `add`, `update`, `remove`.
    case done
    /// `importItems`: how many items are held (without `commit`) or were written (with it).
    case imported(count: Int, committed: Bool)
    /// `sync`: what it did (`vault sync`'s summary).
    case synced(sent: Int, received: Int, deleted: Int, merged: Bool, retries: Int, conflicts: [String], head: String)
    /// `syncConflicts`: oldest first.
    case syncConflicts(records: [SyncConflict])
    /// `audit`: records oldest first, and how many failed authentication.
    case audit(records: [AuditRecord], damaged: Int)
    /// The request failed, or was refused (malformed, out of bounds, another uid).
    case failed(error: VaultError)
}

/// One conflict a sync resolved, as the agent sends it for `vault sync --conflicts`: the
/// values of a secret field (`secret`) are never in it, only an empty `kept`/`lost` saying one
/// was there (`--reveal` opens the key in the command's own process).
public struct SyncConflict: Codable, Sendable, Equatable {
    public var kind: String
    public var name: String
    public var field: String?
    public var kept: String?
    public var lost: String?
    public var secret: Bool
    public var time: Int64
    /// The line `vault sync --conflicts` prints.
    public var text: String

    public init(kind: String, name: String, field: String?, kept: String?, lost: String?, secret: Bool, time: Int64, text: String) {
        self.kind = kind; self.name = name; self.field = field; self.kept = kept; self.lost = lost
        self.secret = secret; self.time = time; self.text = text
    }
}

/// Every bound the agent enforces: frames, fields, counts, durations.
public enum AgentLimits {
    /// The largest request frame: an `add` of a large item must fit (4 MiB).
    public static let requestFrame = 4 << 20
    /// The largest reply frame: an export of a large vault (64 MiB).
    public static let replyFrame = 64 << 20
    /// About how many bytes of records one listing page carries.
    public static let listingPage = 1 << 20
    /// The longest vault path (PATH_MAX).
    public static let path = 4096
    /// The longest item name in UTF-8 bytes (256 characters of up to four bytes).
    public static let name = 1024
    /// At most this many fields in one release.
    public static let fields = 16
    /// At most this many conflicts in a `syncConflicts` reply (the newest).
    public static let syncConflicts = 1000
    /// The longest field name.
    public static let fieldName = 32
    /// The longest command label in an audit record.
    public static let command = 128
    /// At most this many audit records in one reply.
    public static let auditRecords = 100_000
    /// At most this many items held by one connection for an import.
    public static let importItems = 1_000_000
    /// At most this many bytes of items held by one connection for an import (256 MiB).
    public static let importBytes = 256 << 20
    /// At most this many bytes of items held for imports by all connections together (512 MiB).
    public static let importBytesTotal = 512 << 20
    /// Session idle timeouts and hard limits: from one second to seven days.
    public static let sessionDuration: ClosedRange<Double> = 1...(7 * 86400)
    /// The time a peer has to send the rest of a request once its first byte arrived.
    public static let requestSeconds: Double = 10
    /// The time a peer has to take a reply.
    public static let replySeconds: Double = 10
    /// A connection with no request for this long is closed (clients reconnect after idling).
    public static let connectionIdleSeconds: Double = 600
    /// At most this many connections are served at once; more are refused.
    public static let connections = 128
    /// At most this many of them from one peer process (`SO_PEERCRED`'s pid): a process that
    /// leaks connections does not lock out the user's other commands.
    public static let connectionsPerProcess = 16
    /// The last this many of `connections` go only to a process that holds none yet, so
    /// processes that each hold some (the children of one that forked) leave room for another's
    /// first connection (`vault status`).
    public static let connectionReserve = 16
    /// How long a starting agent waits for the agent holding its socket's lock to end (one
    /// whose socket is gone ends within a second), and a starting `vault` for another `vault`
    /// starting one.
    public static let startSeconds: Double = 10
    /// How often the agent checks that its socket file is still its own (seconds): the most a
    /// removed or replaced socket goes unnoticed while the agent is idle.
    public static let socketCheckSeconds: Double = 0.5

    /// `seconds` clamped into `range`; NaN becomes `fallback`. Never traps, for any Double.
    public static func clamp(_ seconds: Double, to range: ClosedRange<Double> = sessionDuration, fallback: Double) -> Double {
        guard !seconds.isNaN else { return min(max(fallback, range.lowerBound), range.upperBound) }
        return min(max(seconds, range.lowerBound), range.upperBound)
    }

    /// Whole seconds of a duration, never trapping (NaN is 0; the infinities saturate).
    public static func wholeSeconds(_ seconds: Double) -> Int {
        guard !seconds.isNaN else { return 0 }
        if seconds >= Double(Int32.max) { return Int(Int32.max) }
        if seconds <= Double(Int32.min) { return Int(Int32.min) }
        return Int(seconds)
    }
}

extension AgentRequest {
    /// Checks every field against `AgentLimits`.
    /// - Throws: `.usage` naming the field that is out of bounds.
    public func validate() throws {
        if let vault { try Self.check(path: vault, "vault") }
        switch self {
        case .unlock(let root, let name, _, _, _, _):
            try Self.check(path: root, "root")
            try Self.check(name, "name", limit: AgentLimits.name)
        case .lock, .status, .probe, .sync, .syncConflicts:
            break
        case .list(_, let term, let from):
            if let term { try Self.check(term, "search term", limit: AgentLimits.name, allowEmpty: true) }
            if let from, from < 0 { throw VaultError.usage("a listing cannot start before 0") }
        case .overview(_, let name), .contains(_, let name), .remove(_, let name):
            try Self.check(name, "name", limit: AgentLimits.name)
        case .freshMatchNonce(_, let name, let purpose):
            if let name { try Self.check(name, "name", limit: AgentLimits.name) }
            guard (name == nil) == (purpose == .releaseAll) else {
                throw VaultError.usage(purpose == .releaseAll ? "a fresh match for the whole vault names no item" : "a fresh match for '\(purpose.rawValue)' names its item")
            }
        case .release(_, let name, let fields, let command, let token):
            try Self.check(name, "name", limit: AgentLimits.name)
            if case .fields(let named) = fields {
                guard (1...AgentLimits.fields).contains(named.count) else {
                    throw VaultError.usage("a release names 1 to \(AgentLimits.fields) fields, or all")
                }
                for f in named { try Self.check(f) }
            }
            try Self.check(command, "command", limit: AgentLimits.command, allowEmpty: true)
            try Self.check(token)
        case .releaseAll(_, let command, let token):
            try Self.check(command, "command", limit: AgentLimits.command, allowEmpty: true)
            try Self.check(token)
        case .releaseSecret(_, let name, let field, let command, let token):
            try Self.check(name, "name", limit: AgentLimits.name)
            try Self.check(field)
            try Self.check(command, "command", limit: AgentLimits.command, allowEmpty: true)
            try Self.check(token)
        case .add(_, let item, _):
            try Self.check(item.name, "item name", limit: AgentLimits.name)
        case .importItems(_, let items, _, _):
            for i in items { try Self.check(i.name, "item name", limit: AgentLimits.name) }
        case .update(_, let name, let change, let token):
            try Self.check(name, "name", limit: AgentLimits.name)
            if let r = change.rename { try Self.check(r, "new name", limit: AgentLimits.name) }
            try Self.check(token)
        case .audit(_, let limit):
            if let limit, limit < 0 { throw VaultError.usage("the audit limit cannot be negative") }
        }
    }

    /// A token's shape (what it proves is the vault's to check): a vault id of 1 to 64 bytes, a
    /// 32-byte nonce, 1 to `FreshMatchToken.maximumMACs` MACs of 32 bytes, an age within the
    /// reuse window.
    static func check(_ token: FreshMatchToken?) throws {
        guard let token else { return }
        guard (1...64).contains(token.vaultID.count), token.nonce.count == 32,
              (1...FreshMatchToken.maximumMACs).contains(token.macs.count), token.macs.allSatisfy({ $0.count == 32 }),
              token.reusedAge.map({ (0...FreshMatchToken.maximumReuse).contains($0) }) ?? true else {
            throw VaultError.usage("a fresh-match token has a vault id, a 32-byte nonce, 1 to \(FreshMatchToken.maximumMACs) MACs of 32 bytes and an age of 0 to \(FreshMatchToken.maximumReuse) s")
        }
    }

    /// A field's shape: a custom field's name is 1 to `AgentLimits.fieldName` bytes.
    static func check(_ field: ItemField) throws {
        if case .custom(let name) = field { try check(name, "field", limit: AgentLimits.fieldName) }
    }

    static func check(path: String, _ what: String) throws {
        try check(path, what, limit: AgentLimits.path)
        guard path.hasPrefix("/") else { throw VaultError.usage("the \(what) must be an absolute path") }
    }

    static func check(_ value: String, _ what: String, limit: Int, allowEmpty: Bool = false) throws {
        let n = value.utf8.count
        guard n <= limit, allowEmpty || n > 0 else {
            throw VaultError.usage("the \(what) must be \(allowEmpty ? 0 : 1) to \(limit) bytes")
        }
    }
}
