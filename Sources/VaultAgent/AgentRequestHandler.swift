public import VaultKit
internal import FoundationEssentials
internal import VaultSystem
internal import VaultSync

/// Seconds on a clock that never jumps and keeps running while the machine sleeps (Linux's
/// CLOCK_BOOTTIME, through `ContinuousClock`), so a suspended laptop's sessions time out too.
public typealias AgentClock = @Sendable () -> Double

/// The default `AgentClock`.
public let continuousSeconds: AgentClock = {
    let origin = ContinuousClock.now
    return {
        let c = origin.duration(to: .now).components
        return Double(c.seconds) + Double(c.attoseconds) * 1e-18
    }
}()

/// One vault's unlock session: the adopted vault and the limits that end it.
final class Session {
    let location: VaultLocation
    let vault: UnlockedVault
    let slotSequence: Int64
    let started: Double
    /// The session's identity (`SessionStatus.serial`): random, below 2^53 so JSON carries it exactly.
    let serial = Int64.random(in: 1..<(1 << 53))
    var lastUse: Double
    let idle: Double
    let hardLimit: Double
    /// Whom it serves, and the terminal session of the process that opened it.
    let scope: SessionScope
    let opener: TerminalSession?
    /// The overviews of the vault, read at the first listing or search.
    private var index: OverviewIndex?

    /// The session's overview index, read now when there is none or another process wrote to
    /// the vault since it was read.
    func overviews() throws -> OverviewIndex {
        if let index, index.isCurrent(for: vault) { return index }
        index = nil
        let fresh = try OverviewIndex(vault)
        index = fresh
        return fresh
    }

    /// How many items the index holds, nil without one.
    var indexedItemCount: Int? { index?.count }

    /// Brings the index up to date after a write through the session to the items `names`
    /// (nil: many items, the index is read again when next needed).
    func wrote(_ names: [String]?) {
        guard let current = index else { return }
        guard let names, current.isCurrent(for: vault) else { index = nil; return }
        do {
            for n in names { try current.refresh(n, from: vault) }
        } catch {
            index = nil
        }
    }

    init(location: VaultLocation, vault: UnlockedVault, slotSequence: Int64, idle: Double, hardLimit: Double, now: Double,
         scope: SessionScope, opener: TerminalSession?) {
        self.scope = scope
        self.opener = opener
        self.location = location
        self.vault = vault
        self.slotSequence = slotSequence
        started = now
        lastUse = now
        self.idle = idle
        self.hardLimit = hardLimit
    }

    /// Whether the session serves `peer`: any process of the uid for `user`; for `terminal`,
    /// only a process of the opener's terminal session (kernel data from the peer's pid, never
    /// from the request).
    func serves(_ peer: Requester?) -> Bool {
        scope == .user || (opener != nil && peer?.terminal == opener)
    }

    /// Why the session is over, or nil while it is valid.
    func endReason(now: Double) -> String? {
        if now - lastUse > idle { return "expired after \(AgentLimits.wholeSeconds(idle)) s idle" }
        if now - started > hardLimit { return "reached its limit of \(AgentLimits.wholeSeconds(hardLimit)) s" }
        let current = try? vault.store.keyGenerationAndSlotSequence()
        if current?.generation != vault.generation { return "was invalidated by a key rotation" }
        if current?.slotSequence != slotSequence { return "was invalidated by a change of the vault's key slots" }
        return nil
    }
}

/// Items of an import held for one connection until the request that commits them.
public struct ImportStaging: Sendable {
    var vault: String?
    var items: [Item] = []
    var bytes = 0

    /// Nothing held.
    public init() {}
}

/// The agent's sessions and the answer to every request, without any socket: the server feeds
/// it decoded requests with the peer's credentials; tests call it directly. One lock serialises
/// requests (each session's SQLite connection is used by one request at a time); reading and
/// writing frames happen outside it, so a slow peer holds up nobody.
public final class AgentRequestHandler: @unchecked Sendable {
    private let lock = ThreadLock()
    private var sessions: [String: Session] = [:]
    /// Ended sessions: the next request for one is answered with why (exit 19), once.
    private var ended: [String: String] = [:]
    private var lastLive: Double
    /// Bytes of import items held by all connections.
    private var stagedBytes = 0
    /// The peer of the request being answered (set under `lock`): terminal-scoped sessions
    /// serve only their own terminal session.
    private var requester: Requester?
    private let clock: AgentClock
    /// The uid served: every other peer is refused.
    public let uid: UInt32
    /// The agent's pid, reported by `status`.
    public let pid: Int32

    /// A handler serving `uid`, timing sessions with `clock`.
    public init(uid: UInt32, pid: Int32, clock: @escaping AgentClock = continuousSeconds) {
        self.uid = uid
        self.pid = pid
        self.clock = clock
        lastLive = clock()
    }

    /// Seconds since the last session ended (0 while one is open): the agent exits after a while.
    public func secondsWithoutSession() -> Double {
        lock.withLock {
            sweep()
            return sessions.isEmpty ? clock() - lastLive : 0
        }
    }

    /// Ends sessions past their limits or invalidated; their keys are wiped now.
    public func sweepSessions() {
        lock.withLock { sweep() }
    }

    /// Ends every session now, their keys wiped (the agent is going away: its socket is lost).
    /// Waits for a request being answered to finish first.
    /// - Returns: how many ended.
    @discardableResult
    public func endAllSessions() -> Int {
        lock.withLock {
            let count = sessions.count
            sessions.removeAll()
            return count
        }
    }

    /// How many sessions are open.
    public var sessionCount: Int { lock.withLock { sessions.count } }

    /// Answers one request from `peer`. `key` is the frame's binary tail (the master key of an
    /// `unlock`); the caller wipes it afterwards. `staging` holds an import's items between the
    /// requests of one connection. Never throws: every failure is a `failed` reply.
    public func handle(_ request: AgentRequest, key: [UInt8] = [], from peer: Requester,
                       staging: inout ImportStaging) -> AgentReply {
        respond(request, key: key, from: peer, staging: &staging).reply
    }

    /// Answers one request: the reply and its frame's binary tail (the records of a listing page).
    public func respond(_ request: AgentRequest, key: [UInt8] = [], from peer: Requester,
                        staging: inout ImportStaging) -> (reply: AgentReply, tail: [UInt8]) {
        guard peer.uid == uid else {
            return (.failed(error: .failure("refused: the agent serves only uid \(uid)")), [])
        }
        do {
            try request.validate()
            if case .sync(let vault) = request { return (try sync(vault, from: peer), []) }
            if case .syncConflicts(let vault) = request { return (try syncConflicts(vault, from: peer), []) }
            return try lock.withLock {
                sweep()
                requester = peer
                defer { requester = nil }
                if case .list(let vault, let term, let from) = request { return try listing(vault, term: term, from: from ?? 0) }
                if case .releaseSecret(let vault, let name, let field, let command, let freshMatch) = request {
                    var tail: [UInt8] = []
                    let reply = try withSession(vault) { s in
                        let secret = try s.vault.releaseSecret(named: name, field: field, command: command, to: peer, freshMatch: freshMatch)
                        tail = secret.exposedBytes()
                        return .releasedSecret
                    }
                    return (reply, tail)
                }
                if case .release(let vault, let name, let fields, let command, let freshMatch) = request {
                    var tail: [UInt8] = []
                    // Only the secrets named are audited, and only they are handed out.
                    let reply = try withSession(vault) { s in
                        let released = try s.vault.releaseSecrets(named: name, fields: fields, command: command, to: peer, freshMatch: freshMatch)
                        tail = released.withRecord { Array($0) }
                        return .released(overview: released.overview)
                    }
                    return (reply, tail)
                }
                if case .releaseAll(let vault, let command, let freshMatch) = request {
                    // Assembled in guarded memory, copied once into the frame (which wipes it):
                    // no grown and abandoned copy of the secrets is left in the heap.
                    let out = try SecretOutput(capacity: 1 << 16)
                    let reply = try withSession(vault) { s in
                        var damaged: [String] = []
                        try s.vault.releaseEachSecrets(command: command, to: peer, freshMatch: freshMatch) { e in
                            switch e {
                            case .item(let overview, let secrets):
                                overview.record.withUnsafeBytes { Self.appendRecord($0, to: out) }
                                secrets.withRecord { Self.appendRecord($0, to: out) }
                            case .damaged(let id): damaged.append(id)
                            }
                        }
                        return .releasedAll(damaged: damaged)
                    }
                    return (reply, try out.withUnsafeBytes { Array($0) })
                }
                return (try answer(request, key: key, peer: peer, staging: &staging), [])
            }
        } catch let e as VaultError {
            return (.failed(error: e), [])
        } catch {
            return (.failed(error: .failure("the agent could not serve the request (\(type(of: error)))")), [])
        }
    }

    /// One page of the session's overview index.
    private func listing(_ vault: String, term: String?, from: Int) throws -> (reply: AgentReply, tail: [UInt8]) {
        var tail: [UInt8] = []
        let reply = try withSession(vault) { s in
            let index = try s.overviews()
            let page = index.page(from: from, matcher: term.map(OverviewMatcher.init(term:)), budget: AgentLimits.listingPage)
            tail = page.tail
            return .listingPage(next: page.next, damaged: from == 0 ? index.damaged : [], version: index.version)
        }
        return (reply, tail)
    }

    /// How many items the overview index of `vault`'s session holds, nil when the session has
    /// none (not listed yet, or the session ended and took it).
    public func indexedItemCount(vault: String) -> Int? {
        lock.withLock { sessions[vault]?.indexedItemCount }
    }

    /// Drops what a connection held for an import (the server calls it when the connection ends).
    public func discard(_ staging: inout ImportStaging) {
        lock.withLock { reset(&staging) }
    }

    private func reset(_ staging: inout ImportStaging) {
        stagedBytes -= staging.bytes
        staging = ImportStaging()
    }

    /// Answers one request that needs no import staging.
    public func handle(_ request: AgentRequest, key: [UInt8] = [], from peer: Requester) -> AgentReply {
        var staging = ImportStaging()
        return handle(request, key: key, from: peer, staging: &staging)
    }

    private func sweep() {
        let now = clock()
        for (vault, s) in sessions {
            if let reason = s.endReason(now: now) {
                sessions[vault] = nil
                ended[vault] = reason
            }
        }
        if !sessions.isEmpty { lastLive = now }
    }

    private func answer(_ request: AgentRequest, key: [UInt8], peer: Requester, staging: inout ImportStaging) throws -> AgentReply {
        switch request {
        case .unlock(let root, let name, let generation, let idle, let hardLimit, let scope):
            return try unlock(root: root, name: name, generation: generation, idle: idle, hardLimit: hardLimit, key: key,
                              scope: scope, opener: peer.terminal)
        case .lock(let vault):
            let keys = vault.map { [$0] } ?? Array(sessions.keys)
            var count = 0
            // A locked session leaves a note, so a script asking later learns why (exit 19);
            // not for the terminal session that locked it: its person knows.
            for k in keys {
                guard let s = sessions.removeValue(forKey: k) else { continue }
                if s.opener == nil || s.opener != peer.terminal { ended[k] = "was ended by 'vault lock'" }
                count += 1
            }
            return .locked(count: count)
        case .status:
            let now = clock()
            let list = sessions.map { vault, s in
                SessionStatus(vault: vault, name: s.location.name,
                              idleLeft: max(0, AgentLimits.wholeSeconds(s.idle - (now - s.lastUse))),
                              hardLeft: max(0, AgentLimits.wholeSeconds(s.hardLimit - (now - s.started))),
                              scope: s.scope, servesCaller: s.serves(peer), serial: s.serial)
            }
            return .status(pid: pid, sessions: list.sorted { $0.vault < $1.vault })
        case .probe(let vault):
            return try withSession(vault) { _ in .sessionOpen }
        case .overview(let vault, let name):
            return try withSession(vault) { .overview(overview: try $0.vault.overview(named: name)) }
        case .freshMatchNonce(let vault, let name, let purpose):
            // The nonce is the session's vault's own: only a token over it, made by a key
            // authority under the vault's proof key, releases what it was asked for.
            return try withSession(vault) { .freshMatchNonce(nonce: try $0.vault.freshMatchNonce(for: try FreshMatchPurpose(kind: purpose, item: name))) }
        case .list, .releaseSecret, .release, .releaseAll:
            throw VaultError.failure("answered with a binary tail")
        case .contains(let vault, let name):
            return try withSession(vault) { .contains(exists: try $0.vault.contains(name)) }
        case .add(let vault, let item, let replace):
            return try withSession(vault) { s in
                defer { s.wrote([item.name]) }
                try s.vault.add(item, replace: replace)
                return .done
            }
        case .importItems(let vault, let items, let replace, let commit):
            return try withSession(vault) { s in try stage(items, vault: vault, replace: replace, commit: commit, in: s, &staging) }
        case .update(let vault, let name, let change, let freshMatch):
            return try withSession(vault) { s in
                defer { s.wrote([name] + (change.rename.map { [$0] } ?? [])) }
                try s.vault.update(name, change, freshMatch: freshMatch)
                return .done
            }
        case .remove(let vault, let name):
            return try withSession(vault) { s in
                defer { s.wrote([name]) }
                try s.vault.remove(name)
                return .done
            }
        case .sync, .syncConflicts:
            throw VaultError.failure("answered outside the lock")
        case .audit(let vault, let limit):
            return try withSession(vault) { s in
                var records: [AuditRecord] = [], damaged = 0
                for r in try s.vault.auditRecords(limit: min(limit ?? AgentLimits.auditRecords, AgentLimits.auditRecords)) {
                    switch r {
                    case .success(let a): records.append(a)
                    case .failure: damaged += 1
                    }
                }
                return .audit(records: records, damaged: damaged)
            }
        }
    }

    /// Runs `body` on the session of `vault`; without one, answers `noSession`, or once the
    /// reason a session ended.
    /// `sync`: runs here, where the key is, but outside the handler's lock, on a second handle
    /// of the session's vault (its own connection, a copy of the key): the session's other
    /// requests, writes included, go on meanwhile. A write that lands while the sync runs makes
    /// its apply write nothing (the rows moved: "run 'vault sync' again") or is committed by the
    /// next sync; it is never lost. git starts from the agent, with the agent's environment (the
    /// one of the `vault unlock` that started it).
    private func sync(_ vault: String, from peer: Requester) throws -> AgentReply {
        try withSessionCopy(vault, from: peer, wrote: true) { copy in
            let r = try SyncEngine(vault: copy, environment: ProcessInfo.processInfo.environment, interactive: false).sync()
            return .synced(sent: r.sent, received: r.received, deleted: r.deleted, merged: r.merged, retries: r.retries,
                           conflicts: r.conflicts, head: r.head)
        }
    }

    /// `syncConflicts`: read from the repository on a second handle, outside the lock, as a
    /// sync; the newest `AgentLimits.syncConflicts`, and of a secret field neither value.
    private func syncConflicts(_ vault: String, from peer: Requester) throws -> AgentReply {
        try withSessionCopy(vault, from: peer, wrote: false) { copy in
            let all = try SyncEngine(vault: copy, environment: ProcessInfo.processInfo.environment, interactive: false).conflicts()
            return .syncConflicts(records: all.suffix(AgentLimits.syncConflicts).map { c in
                SyncConflict(kind: c.record.kind, name: c.record.name, field: c.record.field,
                             kept: c.record.secret ? c.record.kept.map { _ in "" } : c.record.kept,
                             lost: c.record.secret ? c.record.lost.map { _ in "" } : c.record.lost,
                             secret: c.record.secret, time: c.record.time, text: c.text)
            })
        }
    }

    /// Runs `body` on a second handle of the session of `vault` (its own connection, a copy of
    /// the key, wiped when it ends), outside the handler's lock; `wrote` tells the session its
    /// vault may have changed (a sync wrote into it).
    private func withSessionCopy(_ vault: String, from peer: Requester, wrote: Bool,
                                 _ body: (UnlockedVault) throws -> AgentReply) throws -> AgentReply {
        var prepared: (copy: UnlockedVault, session: Session)?
        let early: AgentReply? = try lock.withLock {
            sweep()
            requester = peer
            defer { requester = nil }
            let reply = try withSession(vault) { s in
                prepared = (try s.vault.reopened(), s)
                return .done
            }
            return prepared == nil ? reply : nil
        }
        if let early { return early }
        guard let (copy, session) = prepared else { throw AgentClient.unexpected }
        defer { if wrote { lock.withLock { session.wrote(nil) } } }
        return try body(copy)
    }

    private func withSession(_ vault: String, _ body: (Session) throws -> AgentReply) throws -> AgentReply {
        guard let s = sessions[vault] else {
            if let reason = ended.removeValue(forKey: vault) { throw VaultError.sessionInvalid(reason) }
            return .noSession
        }
        // Another terminal's session is not there for this peer: it authenticates itself.
        guard s.serves(requester) else { return .noSession }
        s.lastUse = clock()
        return try body(s)
    }

    private func unlock(root: String, name: String, generation: Int64, idle: Double, hardLimit: Double, key: [UInt8],
                        scope: SessionScope, opener: TerminalSession?) throws -> AgentReply {
        let location = try VaultLocation(root: root, name: name)
        guard key.count == 32 else { throw VaultError.usage("refused: an unlock carries a 32-byte key, not \(key.count) bytes") }
        if scope == .terminal && opener == nil {
            throw VaultError.usage("refused: the agent cannot tell the terminal session of the unlocking process (another pid namespace?)",
                                   hint: "'vault unlock --scope user' opens a session for every process of the user")
        }
        let store = try VaultStore.open(location)
        // adopt checks the key against the vault's key-check value: an arbitrary key is refused.
        let vault = try store.adopt(masterKey: try SecretBytes(copying: key), generation: generation)
        // The session's fresh-match nonces age on the agent's clock (which keeps running through
        // a suspend, and which tests move).
        vault.freshMatches.clock = clock
        let now = clock()
        sessions[location.databasePath] = Session(
            location: location, vault: vault, slotSequence: try store.slotSequence(),
            idle: AgentLimits.clamp(idle, fallback: 120), hardLimit: AgentLimits.clamp(hardLimit, fallback: 12 * 3600), now: now,
            scope: scope, opener: opener)
        ended[location.databasePath] = nil
        lastLive = now
        return .sessionOpen
    }

    private func stage(_ items: [Item], vault: String, replace: Bool, commit: Bool, in s: Session,
                       _ staging: inout ImportStaging) throws -> AgentReply {
        if let held = staging.vault, held != vault {
            reset(&staging)
            throw VaultError.usage("an import's items all go to one vault")
        }
        let bytes = items.reduce(0) { $0 + Self.estimatedSize($1) }
        guard staging.items.count + items.count <= AgentLimits.importItems, staging.bytes + bytes <= AgentLimits.importBytes,
              stagedBytes + bytes <= AgentLimits.importBytesTotal else {
            reset(&staging)
            throw VaultError.usage("an import through the unlock session holds at most \(AgentLimits.importItems) items and \(AgentLimits.importBytes >> 20) MiB",
                                   hint: "import without the session: add --passcode")
        }
        staging.vault = vault
        staging.items += items
        staging.bytes += bytes
        stagedBytes += bytes
        guard commit else { return .imported(count: staging.items.count, committed: false) }
        let all = staging.items
        reset(&staging)
        defer { s.wrote(nil) }
        return .imported(count: try s.vault.add(contentsOf: all, replace: replace), committed: true)
    }

    /// Appends a big-endian u32 length and `record`.
    static func appendRecord(_ record: UnsafeRawBufferPointer, to out: SecretOutput) {
        let n = UInt32(record.count)
        for shift in [24, 16, 8, 0] as [UInt32] { out.append(UInt8(truncatingIfNeeded: n >> shift)) }
        out.append(record)
    }

    static func estimatedSize(_ i: Item) -> Int {
        let texts = [i.name, i.username, i.password, i.notes, i.totp, i.origin, i.userPrompt, i.passwordPrompt]
        return 64 + texts.reduce(0) { $0 + ($1?.utf8.count ?? 0) } + (i.urls + i.tags).reduce(0) { $0 + $1.utf8.count + 4 }
    }
}
