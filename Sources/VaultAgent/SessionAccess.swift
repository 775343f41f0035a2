public import VaultKit
package import VaultSync
internal import VaultSystem

/// The vault as served by its unlock session in the agent: the key stays in the agent, which
/// writes the audit record of every secret it hands out.
public final class SessionAccess: VaultAccess {
    let client: AgentClient
    /// The vault.
    public let location: VaultLocation
    /// The vault's name.
    public var vaultName: String { location.name }
    private var vault: String { location.databasePath }

    init(client: AgentClient, location: VaultLocation) {
        self.client = client
        self.location = location
    }

    /// The session of `location`, or nil when the agent is not running, has no session for it,
    /// or speaks another protocol version.
    /// - Throws: `.sessionInvalid` once for a session that ended (expired, locked, invalidated).
    public static func open(_ location: VaultLocation, environment: [String: String]) throws -> SessionAccess? {
        guard let client = AgentClient.connect(environment) else { return nil }
        let reply: AgentReply
        do {
            reply = try client.send(.probe(vault: location.databasePath))
        } catch where client.speaksAnotherVersion {
            // An agent of another vault version cannot serve us: the command authenticates by itself.
            return nil
        }
        switch reply {
        case .sessionOpen: return SessionAccess(client: client, location: location)
        case .noSession: return nil
        case .failed(let e): throw e
        default: throw AgentClient.unexpected
        }
    }

    /// Sends a request about this vault; "no session" in the middle of a command means the
    /// session was closed since it was opened.
    private func call(_ request: AgentRequest) throws -> AgentReply {
        try exchange(request).reply
    }

    private func exchange(_ request: AgentRequest) throws -> (reply: AgentReply, tail: [UInt8]) {
        let (reply, tail) = try client.exchange(request)
        switch reply {
        case .noSession: throw VaultError.sessionInvalid("was closed")
        case .failed(let e): throw e
        default: return (reply, tail)
        }
    }

    /// One item without its secrets.
    public func overview(named name: String) throws -> ItemOverview {
        guard case .overview(let o) = try call(.overview(vault: vault, name: name)) else { throw AgentClient.unexpected }
        return o
    }

    /// One item's overview with the secrets `fields` selects, from the reply frame's binary
    /// tail straight into guarded memory (the agent writes the audit records first).
    public func releaseSecrets(named name: String, fields: FieldSelection, command: String, freshMatch: FreshMatchToken?) throws -> ReleasedItem {
        var (reply, tail) = try exchange(.release(vault: vault, name: name, fields: fields, command: command, freshMatch: freshMatch))
        defer { wipe(&tail) }
        guard case .released(let overview) = reply else { throw AgentClient.unexpected }
        return try tail.withUnsafeBytes { try ReleasedItem(overview: overview, secretsRecord: $0) }
    }

    /// One secret, from the reply frame's binary tail straight into guarded memory (the agent
    /// writes the audit record first).
    public func releaseSecret(named name: String, field: ItemField, command: String, freshMatch: FreshMatchToken?) throws -> SecretBytes {
        var (reply, tail) = try exchange(.releaseSecret(vault: vault, name: name, field: field, command: command, freshMatch: freshMatch))
        defer { wipe(&tail) }
        guard case .releasedSecret = reply else { throw AgentClient.unexpected }
        return try SecretBytes(copying: tail)
    }

    /// Streams the session's overview index page by page (the agent decrypts nothing to answer);
    /// a listing that sees the index change between pages starts again (at most three times).
    public func forEachOverview(matching term: String?, _ body: (OverviewEntry) throws -> Void) throws {
        try forEachOverviewRecord(matching: term) { e in
            switch e {
            case .record(let plain): try body(.item(try ItemOverview(record: plain)))
            case .damaged(let id): try body(.damaged(rowID: id))
            }
        }
    }

    /// The same listing with each record lent in place from the page it came in.
    public func forEachOverviewRecord(matching term: String?, _ body: (OverviewRecordEntry) throws -> Void) throws {
        for _ in 0..<3 {
            var from: Int? = 0
            var version: Int64?
            var pages: [[UInt8]] = []
            var damaged: [String] = []
            restart: do {
                while let start = from {
                    let (reply, tail) = try exchange(.list(vault: vault, term: term, from: start))
                    guard case .listingPage(let next, let bad, let v) = reply else { throw AgentClient.unexpected }
                    if let version, version != v { break restart }
                    version = v
                    if start == 0 { damaged = bad }
                    pages.append(tail)
                    from = next
                }
                for page in pages { try AgentCodec.forEachRecord(inListingPage: page) { try body(.record($0)) } }
                for id in damaged { try body(.damaged(rowID: id)) }
                return
            }
        }
        throw VaultError.failure("the vault kept changing while it was listed", hint: "try again")
    }

    /// Every item with its secrets, streamed from the agent's one reply, whose tail is copied
    /// into guarded memory at once and each item's secrets lent from there; the agent writes
    /// one audit record for all.
    public func releaseEachSecrets(command: String, freshMatch: FreshMatchToken?, _ body: (ReleasedEntry) throws -> Void) throws {
        var (reply, tail) = try exchange(.releaseAll(vault: vault, command: command, freshMatch: freshMatch))
        defer { wipe(&tail) }
        guard case .releasedAll(let damaged) = reply else { throw AgentClient.unexpected }
        let guarded = try SecretBytes(copying: tail)
        wipe(&tail)
        try guarded.withUnsafeBytes { try AgentCodec.forEachReleased(inExport: $0) { try body(.item($0, $1)) } }
        for id in damaged { try body(.damaged(rowID: id)) }
    }

    /// Whether an item exists.
    public func contains(_ name: String) throws -> Bool {
        guard case .contains(let exists) = try call(.contains(vault: vault, name: name)) else { throw AgentClient.unexpected }
        return exists
    }

    /// Adds (or replaces) an item.
    /// - Throws: `.usage` for an item over the request frame limit.
    public func add(_ item: Item, replace: Bool) throws {
        guard case .done = try call(.add(vault: vault, item: item, replace: replace)) else { throw AgentClient.unexpected }
    }

    /// Adds the items `next` yields in one transaction. They are pulled a frame's worth at a time
    /// (under the request limit) and held by the agent until the last frame commits them all.
    public func add(replace: Bool, from next: () throws -> Item?) throws -> Int {
        let budget = AgentLimits.requestFrame / 2
        var pending = try next(), written = 0
        repeat {
            var run: [Item] = [], size = 0
            while let item = pending {
                let s = AgentRequestHandler.estimatedSize(item)
                guard run.isEmpty || size + s <= budget else { break }
                run.append(item)
                size += s
                pending = try next()
            }
            let pieces = try Self.fit(run, vault: vault, replace: replace)
            for (i, piece) in pieces.enumerated() {
                let commit = pending == nil && i == pieces.count - 1
                guard case .imported(let count, let committed) = try call(.importItems(vault: vault, items: piece, replace: replace, commit: commit)),
                      committed == commit else { throw AgentClient.unexpected }
                written = count
            }
        } while pending != nil
        return written
    }

    /// `run` in pieces whose request frames fit the limit (halving a piece that does not).
    static func fit(_ run: [Item], vault: String, replace: Bool) throws -> [[Item]] {
        do {
            _ = try AgentCodec.frame(.importItems(vault: vault, items: run, replace: replace, commit: false))
            return [run]
        } catch where run.count > 1 {
            let half = run.count / 2
            return try fit(Array(run[..<half]), vault: vault, replace: replace) + fit(Array(run[half...]), vault: vault, replace: replace)
        }
    }

    /// A nonce of the session's vault for a fresh match for `purpose` (the agent checks the token
    /// made over it: the client's word that it matched a finger counts for nothing).
    public func freshMatchNonce(for purpose: FreshMatchPurpose) throws -> [UInt8] {
        guard case .freshMatchNonce(let nonce) = try call(.freshMatchNonce(vault: vault, name: purpose.item, purpose: purpose.kind)),
              nonce.count == 32 else { throw AgentClient.unexpected }
        return nonce
    }

    /// Applies field changes inside the agent's write transaction (the item is never sent whole);
    /// turning fingerprint login off sends the token of a fresh match.
    public func update(_ name: String, _ change: ItemChange, freshMatch: FreshMatchToken?) throws {
        guard case .done = try call(.update(vault: vault, name: name, change: change, freshMatch: freshMatch)) else { throw AgentClient.unexpected }
    }

    /// Deletes an item.
    public func remove(_ name: String) throws {
        guard case .done = try call(.remove(vault: vault, name: name)) else { throw AgentClient.unexpected }
    }

    /// Syncs the vault with its git remote inside the agent (the key never leaves it).
    /// - Throws: what the sync threw there (exit 5 for a remote that does not hold, ...).
    package func sync() throws -> SyncSummary {
        guard case .synced(let sent, let received, let deleted, let merged, let retries, let conflicts, let head) =
                try call(.sync(vault: vault)) else { throw AgentClient.unexpected }
        var s = SyncSummary()
        s.sent = sent; s.received = received; s.deleted = deleted; s.merged = merged; s.retries = retries
        s.conflicts = conflicts; s.head = head
        return s
    }

    /// The conflicts the vault's syncs resolved, read inside the agent (oldest first, the newest
    /// `AgentLimits.syncConflicts`; no secret value).
    package func syncConflicts() throws -> [SyncConflict] {
        guard case .syncConflicts(let records) = try call(.syncConflicts(vault: vault)) else { throw AgentClient.unexpected }
        return records
    }

    /// The audit log (at most the last `AgentLimits.auditRecords` records through a session).
    public func auditRecords(limit: Int?) throws -> [Result<AuditRecord, VaultError>] {
        guard case .audit(let records, let damaged) = try call(.audit(vault: vault, limit: limit)) else { throw AgentClient.unexpected }
        return records.map { .success($0) } + (0..<damaged).map { _ in .failure(.corrupt("audit record failed authentication")) }
    }
}
