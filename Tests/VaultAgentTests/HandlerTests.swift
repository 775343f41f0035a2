import Foundation
import Testing
import VaultAgent
import VaultKit

/// The request handler in-process: every request kind, the session rules, the audit log.
@Suite struct HandlerTests {
    let clock = ManualClock()
    var handler: AgentRequestHandler { AgentRequestHandler(uid: me.uid, pid: 77, clock: clock.read) }

    @Test func everyRequestKind() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        #expect(h.handle(.probe(vault: v.path), from: me) == .sessionOpen)
        guard case .status(let pid, let sessions) = h.handle(.status, from: me) else { Issue.record("status"); return }
        #expect(pid == 77)
        #expect(sessions.map { var s = $0; s.serial = nil; return s }
                == [SessionStatus(vault: v.path, name: "default", idleLeft: 120, hardLeft: 3600, scope: .terminal, servesCaller: true)])
        #expect(sessions.first?.serial != nil, "a session names its identity")

        guard case .overview(let o) = h.handle(.overview(vault: v.path, name: "db"), from: me) else { Issue.record("overview"); return }
        #expect(o.item.username == "admin" && o.item.password == nil && o.hasPassword && o.hasTOTP)

        let releaseAnswer = h.respond(.release(vault: v.path, name: "db", fields: .fields([.password]), command: "get"), from: me)
        guard case .released(let releasedOverview) = releaseAnswer.reply, let item = releasedItem(releaseAnswer) else {
            Issue.record("release"); return
        }
        #expect(releasedOverview.item.password == nil, "the reply's JSON carries no secret: it is in the tail")
        #expect(!String(decoding: AgentCodec.frame(releaseAnswer.reply, tail: releaseAnswer.tail).json, as: UTF8.self).contains("db-secret-9"))
        #expect(item.password == "db-secret-9")
        #expect(item.totp == nil, "a secret not named in the release is withheld")

        var listStaging = ImportStaging()
        let (page, tail) = h.respond(.list(vault: v.path), from: me, staging: &listStaging)
        guard case .listingPage(let next, let damaged, _) = page else { Issue.record("list"); return }
        let items = try AgentCodec.overviews(inListingPage: tail).map(\.item)
        #expect(items.map(\.name) == ["db", "web"] && damaged.isEmpty && next == nil)
        #expect(items.allSatisfy { $0.password == nil && $0.totp == nil }, "a listing carries no secret")

        let exportAnswer = h.respond(.releaseAll(vault: v.path, command: "export"), from: me)
        guard let all = releasedItems(exportAnswer) else { Issue.record("releaseAll"); return }
        #expect(!String(decoding: AgentCodec.frame(exportAnswer.reply, tail: exportAnswer.tail).json, as: UTF8.self).contains("secret"),
                "the export's JSON carries no secret: the items are in the tail")
        #expect(Set(all.compactMap(\.password)) == ["db-secret-9", "web-secret-3"])

        #expect(h.handle(.contains(vault: v.path, name: "web"), from: me) == .contains(exists: true))
        #expect(h.handle(.contains(vault: v.path, name: "nope"), from: me) == .contains(exists: false))
        #expect(h.handle(.add(vault: v.path, item: Item(name: "new", password: "n"), replace: false), from: me) == .done)
        #expect(failureCode(h.handle(.add(vault: v.path, item: Item(name: "new"), replace: false), from: me)) == 4)

        var change = ItemChange()
        change.username = "root"
        #expect(h.handle(.update(vault: v.path, name: "new", change: change), from: me) == .done)
        #expect(try v.vault.item(named: "new").username == "root")
        #expect(try v.vault.item(named: "new").password == "n", "a field change keeps the other fields")

        #expect(h.handle(.remove(vault: v.path, name: "new"), from: me) == .done)
        #expect(failureCode(h.handle(.remove(vault: v.path, name: "new"), from: me)) == 3)
        #expect(failureCode(h.handle(.overview(vault: v.path, name: "new"), from: me)) == 3)

        // An import in two frames of one connection lands in one transaction.
        var staging = ImportStaging()
        #expect(h.handle(.importItems(vault: v.path, items: [Item(name: "i1")], replace: false, commit: false), from: me, staging: &staging)
                == .imported(count: 1, committed: false))
        #expect(try !v.vault.contains("i1"))
        #expect(h.handle(.importItems(vault: v.path, items: [Item(name: "i2")], replace: false, commit: true), from: me, staging: &staging)
                == .imported(count: 2, committed: true))
        #expect(try v.vault.contains("i1") && v.vault.contains("i2"))
        // An existing name aborts the whole import.
        #expect(h.handle(.importItems(vault: v.path, items: [Item(name: "i3")], replace: false, commit: false), from: me, staging: &staging)
                == .imported(count: 1, committed: false))
        #expect(failureCode(h.handle(.importItems(vault: v.path, items: [Item(name: "i1")], replace: false, commit: true), from: me, staging: &staging)) == 4)
        #expect(try !v.vault.contains("i3"))

        guard case .audit(let records, let bad) = h.handle(.audit(vault: v.path, limit: nil), from: me) else { Issue.record("audit"); return }
        #expect(records.map(\.command) == ["get", "export"] && bad == 0)
        guard case .audit(let last, _) = h.handle(.audit(vault: v.path, limit: 1), from: me) else { Issue.record("audit"); return }
        #expect(last.map(\.command) == ["export"])

        // Locked from elsewhere (another terminal session): the opener hears why, once.
        #expect(h.handle(.lock(vault: v.path), from: Requester(uid: me.uid, pid: 9, terminal: TerminalSession(sessionID: 9, terminal: 0))) == .locked(count: 1))
        #expect(failureCode(h.handle(.probe(vault: v.path), from: me)) == 19)
        #expect(h.handle(.probe(vault: v.path), from: me) == .noSession)
        #expect(h.handle(.lock(vault: nil), from: me) == .locked(count: 0))
    }

    // Issue 25, item 4: a session serves the terminal session that opened it, unless `user`.
    @Test func aTerminalScopedSessionServesOnlyItsOwnTerminalSession() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        let sameTerminal = Requester(uid: me.uid, pid: 5151, terminal: testTerminal)
        let otherTerminal = Requester(uid: me.uid, pid: 6161, terminal: TerminalSession(sessionID: 6000, terminal: 34817))
        let background = Requester(uid: me.uid, pid: 7171, terminal: TerminalSession(sessionID: 7000, terminal: 0))
        let unknown = Requester(uid: me.uid, pid: 0)
        #expect(h.handle(.probe(vault: v.path), from: sameTerminal) == .sessionOpen)
        for peer in [otherTerminal, background, unknown] {
            #expect(h.handle(.probe(vault: v.path), from: peer) == .noSession)
            #expect(h.respond(.releaseSecret(vault: v.path, name: "db", field: .password, command: "get"), from: peer).reply == .noSession)
            #expect(h.respond(.list(vault: v.path), from: peer).reply == .noSession)
            guard case .status(_, let sessions) = h.handle(.status, from: peer) else { Issue.record("status"); return }
            #expect(sessions.map(\.servesCaller) == [false])
        }
        // A lock from another terminal leaves the opener a note; a lock from its own does not.
        #expect(h.handle(.lock(vault: v.path), from: otherTerminal) == .locked(count: 1))
        #expect(failureCode(h.handle(.probe(vault: v.path), from: me)) == 19)
        v.open(in: h)
        #expect(h.handle(.lock(vault: v.path), from: sameTerminal) == .locked(count: 1))
        #expect(h.handle(.probe(vault: v.path), from: me) == .noSession)
        // `user`: every process of the uid, as before.
        let user = AgentRequest.unlock(root: v.location.root, name: v.location.name, generation: v.vault.generation,
                                       idleSeconds: 120, hardLimitSeconds: 3600, scope: .user)
        #expect(h.handle(user, key: v.key, from: me) == .sessionOpen)
        for peer in [otherTerminal, background, unknown] { #expect(h.handle(.probe(vault: v.path), from: peer) == .sessionOpen) }
        // An opener whose terminal session cannot be read gets no terminal-scoped session.
        #expect(failureCode(h.handle(v.unlockRequest(), key: v.key, from: unknown)) == 2)
    }

    @Test func aVaultWithoutASessionGetsNoSession() throws {
        let h = handler
        for r: AgentRequest in [.probe(vault: "/nowhere/vault.db"), .overview(vault: "/nowhere/vault.db", name: "db"),
                                .release(vault: "/nowhere/vault.db", name: "db", fields: .fields([.password]), command: "get"),
                                .list(vault: "/nowhere/vault.db")] {
            #expect(h.handle(r, from: me) == .noSession)
        }
        #expect(h.handle(.status, from: me) == .status(pid: 77, sessions: []))
    }

    @Test func anEndedSessionIsReportedOnceThenTheVaultIsLocked() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h, idle: 5, hard: 60)
        clock.advance(4)
        #expect(h.handle(.probe(vault: v.path), from: me) == .sessionOpen, "a use restarts the idle time")
        clock.advance(4)
        #expect(h.handle(.contains(vault: v.path, name: "db"), from: me) == .contains(exists: true))
        clock.advance(5.5)
        let ended = h.handle(.release(vault: v.path, name: "db", fields: .fields([.password]), command: "get"), from: me)
        #expect(ended == .failed(error: .sessionInvalid("expired after 5 s idle")))
        #expect(h.handle(.release(vault: v.path, name: "db", fields: .fields([.password]), command: "get"), from: me) == .noSession)

        // The hard limit ends a busy session.
        v.open(in: h, idle: 30, hard: 10)
        for _ in 0..<5 {
            clock.advance(2.1)
            _ = h.handle(.probe(vault: v.path), from: me)
        }
        #expect(h.handle(.probe(vault: v.path), from: me) == .noSession)
        v.open(in: h, idle: 30, hard: 10)
        clock.advance(10.5)
        #expect(failureCode(h.handle(.probe(vault: v.path), from: me)) == 19)

        // A sweep ends it too, and the next request still learns why.
        v.open(in: h, idle: 2, hard: 10)
        clock.advance(3)
        h.sweepSessions()
        #expect(h.handle(.status, from: me) == .status(pid: 77, sessions: []))
        #expect(h.handle(.probe(vault: v.path), from: me) == .failed(error: .sessionInvalid("expired after 2 s idle")))
    }

    @Test func rotationAndSlotChangesEndTheSession() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        try v.vault.changePasscode(to: try SecretBytes(copying: Array("another passcode".utf8)), kdf: fastKDF)
        #expect(h.handle(.probe(vault: v.path), from: me) == .failed(error: .sessionInvalid("was invalidated by a change of the vault's key slots")))

        let w = try TestVault()
        w.open(in: h)
        _ = try w.vault.rotate(passcode: try SecretBytes(copying: Array(passcode.utf8)), kdf: fastKDF, recovery: .keep, authority: nil)
        #expect(h.handle(.probe(vault: w.path), from: me) == .failed(error: .sessionInvalid("was invalidated by a key rotation")))
        // The old generation's key is refused afterwards.
        #expect(failureCode(h.handle(w.unlockRequest(), key: w.key, from: me)) == 19)
    }

    @Test(arguments: [1e19, .infinity, -.infinity, .nan, -1e300, -1, 0, 1e-300, Double.greatestFiniteMagnitude])
    func durationsAreClamped(_ d: Double) throws {
        let v = try TestVault(items: false)
        let h = handler
        v.open(in: h, idle: d, hard: d)
        guard case .status(_, let sessions) = h.handle(.status, from: me), let s = sessions.first else { Issue.record("no session"); return }
        #expect((1...(7 * 86400)).contains(s.idleLeft) && (1...(7 * 86400)).contains(s.hardLeft), "\(s)")
        clock.advance(1e19)
        #expect(failureCode(h.handle(.probe(vault: v.path), from: me)) == 19)
        clock.advance(-.infinity)
        _ = h.handle(.status, from: me)
        _ = h.secondsWithoutSession()
    }

    @Test func releaseWritesOneAuditRecordPerReleasedFieldWithThePeersCredentials() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        let peer = Requester(uid: me.uid, pid: 31337, terminal: testTerminal)
        let before = try v.vault.auditRecords().count
        guard let item = releasedItem(h.respond(.release(vault: v.path, name: "db", fields: .fields([.password, .username, .totp]), command: "run"),
                                                from: peer)) else { Issue.record("release"); return }
        #expect(item.password == "db-secret-9" && item.totp != nil)
        // "web" has no username: only the password is handed out, so only it is recorded.
        _ = h.handle(.release(vault: v.path, name: "web", fields: .fields([.password, .username]), command: "login"), from: peer)
        let records = try v.vault.auditRecords().dropFirst(before).map { try $0.get() }
        #expect(records.map { "\($0.item).\($0.field)" } == ["db.password", "db.username", "db.totp", "web.password"])
        #expect(records.allSatisfy { $0.uid == peer.uid && $0.pid == 31337 })
        #expect(Set(records.map(\.command)) == ["run", "login"])

        _ = h.handle(.releaseAll(vault: v.path, command: "export"), from: peer)
        let all = try v.vault.auditRecords(limit: 1).map { try $0.get() }
        #expect(all.first?.item == "*" && all.first?.field == "all" && all.first?.pid == 31337)

        // Nothing else writes to the log: overviews, listings and lookups release nothing.
        let count = try v.vault.auditRecords().count
        _ = h.handle(.overview(vault: v.path, name: "db"), from: peer)
        _ = h.handle(.list(vault: v.path), from: peer)
        _ = h.handle(.contains(vault: v.path, name: "db"), from: peer)
        #expect(try v.vault.auditRecords().count == count)
        // A failed release (no such item) hands out nothing and records nothing.
        #expect(failureCode(h.handle(.release(vault: v.path, name: "nope", fields: .fields([.password]), command: "get"), from: peer)) == 3)
        #expect(try v.vault.auditRecords().count == count)
    }

    /// `.all` is decided by the key holder against the item: each secret it has is released
    /// and audited on its own (not the history); a selection of no field, too many fields or a
    /// custom name over the limit is refused before the vault is asked.
    @Test func aReleaseOfAllSecretsIsAuditedFieldByFieldAndABadSelectionIsRefused() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        var pinned = Item(name: "pinned", password: "p-1", notes: "n", fields: [CustomField(name: "pin", kind: .hidden, value: "1234"),
                                                                              CustomField(name: "site", value: "x")])
        pinned.replacePassword(with: "p-2")
        try v.vault.add(pinned)
        let before = try v.vault.auditRecords().count
        guard let item = releasedItem(h.respond(.release(vault: v.path, name: "pinned", fields: .all, command: "get"), from: me)) else {
            Issue.record("release"); return
        }
        #expect(item.password == "p-2" && item.notes == "n" && item.customField("pin")?.value == "1234" && item.passwordHistory.isEmpty)
        #expect(try v.vault.auditRecords().dropFirst(before).map { try $0.get().field } == ["password", "notes", "pin"])
        let long = String(repeating: "f", count: AgentLimits.fieldName + 1)
        for bad: FieldSelection in [.nothing, .fields(Array(repeating: .password, count: AgentLimits.fields + 1)), .fields([.custom(long)]), .fields([.custom("")])] {
            #expect(failureCode(h.handle(.release(vault: v.path, name: "pinned", fields: bad, command: "get"), from: me)) == 2, "\(bad)")
        }
        #expect(failureCode(h.handle(.releaseSecret(vault: v.path, name: "pinned", field: .custom(long), command: "get"), from: me)) == 2)
        #expect(try v.vault.auditRecords().count == before + 3)
    }

    @Test func overviewsAndListingsNeverCarryASecret() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        for r: AgentRequest in [.overview(vault: v.path, name: "db"), .list(vault: v.path),
                                .release(vault: v.path, name: "db", fields: .fields([.username]), command: "get")] {
            var staging = ImportStaging()
            let (reply, tail) = h.respond(r, from: me, staging: &staging)
            let frame = AgentCodec.frame(reply, tail: tail)
            let text = String(decoding: frame.json + frame.tail, as: UTF8.self)
            #expect(text.contains("admin") || text.contains("web"))
            for secret in ["db-secret-9", "web-secret-3", "JBSWY3DPEHPK3PXP"] { #expect(!text.contains(secret), "\(r)") }
        }
    }

    @Test(arguments: [true, false])
    func aKeyThatDoesNotOpenTheVaultIsRefused(withItems: Bool) throws {
        let v = try TestVault(items: withItems)
        let h = handler
        let reply = h.handle(v.unlockRequest(), key: randomBytes(32), from: me)
        #expect(failureCode(reply) == 10, "\(reply)")
        #expect(h.handle(.probe(vault: v.path), from: me) == .noSession)
        // Nothing was written with it: the vault's own key still opens every row.
        #expect(try v.vault.allItems().allSatisfy { if case .item = $0 { true } else { false } })
        #expect(failureCode(h.handle(v.unlockRequest(), key: Array(v.key.prefix(31)), from: me)) == 2)
        #expect(failureCode(h.handle(v.unlockRequest(), key: [], from: me)) == 2)
        v.open(in: h)
        #expect(h.handle(.probe(vault: v.path), from: me) == .sessionOpen)
    }

    @Test func aPeerOfAnotherUidIsRefused() throws {
        let v = try TestVault()
        let h = handler
        v.open(in: h)
        let stranger = Requester(uid: me.uid &+ 1, pid: 1)
        for r: AgentRequest in [.status, .release(vault: v.path, name: "db", fields: .fields([.password]), command: "get"), v.unlockRequest()] {
            let reply = h.handle(r, key: v.key, from: stranger)
            guard case .failed(let e) = reply else { Issue.record("served \(reply)"); continue }
            #expect(e.message.contains("refused"))
        }
    }

    @Test func unlockChecksTheVaultAndItsName() throws {
        let h = handler
        let v = try TestVault()
        #expect(failureCode(h.handle(.unlock(root: v.location.root, name: "../etc", generation: 1, idleSeconds: 1, hardLimitSeconds: 1),
                                     key: v.key, from: me)) == 2)
        #expect(failureCode(h.handle(.unlock(root: v.location.root, name: "absent", generation: 1, idleSeconds: 1, hardLimitSeconds: 1),
                                     key: v.key, from: me)) == 3)
        #expect(failureCode(h.handle(.unlock(root: v.location.root, name: "default", generation: 2, idleSeconds: 1, hardLimitSeconds: 1),
                                     key: v.key, from: me)) == 19)
    }
}

/// The session's overview index: read at the first listing, kept current by writes through the
/// session, re-read after a write by another process, dropped with the session.
@Suite struct OverviewIndexTests {
    let clock = ManualClock()

    func names(_ h: AgentRequestHandler, _ v: TestVault, term: String? = nil) throws -> [String] {
        var staging = ImportStaging()
        var out: [String] = []
        var from: Int? = 0
        while let start = from {
            let (reply, tail) = h.respond(.list(vault: v.path, term: term, from: start), from: me, staging: &staging)
            guard case .listingPage(let next, _, _) = reply else { throw VaultError.failure("not a page: \(reply)") }
            out += try AgentCodec.overviews(inListingPage: tail).map(\.item.name)
            from = next
        }
        return out
    }

    @Test func theIndexFollowsWritesThroughTheSessionAndOthersAndGoesWithTheSession() throws {
        let v = try TestVault()
        let h = AgentRequestHandler(uid: me.uid, pid: 77, clock: clock.read)
        v.open(in: h)
        #expect(h.indexedItemCount(vault: v.path) == nil, "read at the first listing, not before")
        #expect(try names(h, v) == ["db", "web"])
        #expect(h.indexedItemCount(vault: v.path) == 2)

        #expect(h.handle(.add(vault: v.path, item: Item(name: "api", username: "svc"), replace: false), from: me) == .done)
        var change = ItemChange()
        change.rename = "zeta"
        #expect(h.handle(.update(vault: v.path, name: "db", change: change), from: me) == .done)
        #expect(h.handle(.remove(vault: v.path, name: "web"), from: me) == .done)
        #expect(try names(h, v) == ["api", "zeta"])
        #expect(try names(h, v, term: "SVC") == ["api"], "search matches the username, case-insensitively")

        // Another process (here another connection to the database) writes: the index is re-read.
        let other = try VaultStore.open(v.location).adopt(masterKey: try SecretBytes(copying: v.key), generation: v.vault.generation)
        try other.add(Item(name: "from-elsewhere"))
        #expect(try names(h, v) == ["api", "from-elsewhere", "zeta"])

        // A listing larger than one page comes in several pages, in name order.
        let many = (0..<3000).map { Item(name: String(format: "bulk-%04d", $0), username: String(repeating: "u", count: 500)) }
        _ = try other.add(contentsOf: many, replace: false)
        let all = try names(h, v)
        #expect(all.count == 3003 && all == all.sorted())
        // Removing most of them through the session leaves holes the index compacts away.
        for i in 0..<3000 where i % 3 != 0 {
            #expect(h.handle(.remove(vault: v.path, name: String(format: "bulk-%04d", i)), from: me) == .done)
        }
        let left = try names(h, v)
        #expect(left == all.filter { n in
            guard n.hasPrefix("bulk-"), let i = Int(n.dropFirst(5)) else { return true }
            return i % 3 == 0
        })

        #expect(h.handle(.lock(vault: v.path), from: me) == .locked(count: 1))
        #expect(h.indexedItemCount(vault: v.path) == nil, "the index went with the session")
    }
}

/// A single secret travels as the reply frame's binary tail, never in its JSON.
@Suite struct ReleaseSecretTests {
    @Test func theSecretIsTheTailAndIsAudited() throws {
        let v = try TestVault()
        try v.vault.add(Item(name: "guarded", password: "g-secret", fingerprintLogin: true))
        let h = AgentRequestHandler(uid: me.uid, pid: 77, clock: ManualClock().read)
        v.open(in: h)
        var staging = ImportStaging()
        let before = try v.vault.auditRecords().count
        let (reply, tail) = h.respond(.releaseSecret(vault: v.path, name: "db", field: .password, command: "get"), from: me, staging: &staging)
        #expect(reply == .releasedSecret)
        #expect(tail == Array("db-secret-9".utf8))
        let frame = AgentCodec.frame(reply, tail: tail)
        #expect(!String(decoding: frame.json, as: UTF8.self).contains("db-secret-9"))
        #expect(try v.vault.auditRecords().count == before + 1)
        // Not a secret field, an item without it, fingerprint login: refused, nothing logged.
        for (request, code) in [(AgentRequest.releaseSecret(vault: v.path, name: "db", field: .username, command: "get"), 2),
                                (.releaseSecret(vault: v.path, name: "web", field: .notes, command: "get"), 1),
                                (.releaseSecret(vault: v.path, name: "guarded", field: .password, command: "get"), 10)] {
            let (r, t) = h.respond(request, from: me, staging: &staging)
            #expect(t.isEmpty)
            guard case .failed(let e) = r else { Issue.record("\(request) answered \(r)"); continue }
            #expect(e.exitCode == code, "\(request): \(e)")
        }
        #expect(try v.vault.auditRecords().count == before + 1)
        // The old flag counts for nothing: only a key authority's token does (FreshMatchTests).
        let (r, t) = h.respond(.releaseSecret(vault: v.path, name: "guarded", field: .password, command: "login", freshMatch: nil), from: me, staging: &staging)
        #expect(failureCode(r) == 10 && t.isEmpty)
    }
}
