import Foundation
import Testing
import VaultAgent
import VaultKit
import VaultSystem

/// A reader that matches every scan (or none) and counts them; its enrolment returns a fixed print.
final class ScriptedReader: FingerprintReader {
    let identity = SensorIdentity(driver: "virtual_device", deviceID: "0")
    var matches = true
    private(set) var scans = 0
    func chipPrints() throws -> [String] { [] }
    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        scans += 1
        return matches ? 0 : nil
    }
    func enroll(finger: String) throws -> [UInt8] { Array("FP3 fake print \(finger)".utf8) }
    func deletePrint(_ data: [UInt8]) throws {}
}

/// A test vault with an item that has fingerprint login on, bound to one fake print through an
/// embedded key authority on a scripted reader: the authority makes real tokens, MAC'd under the
/// proof key it registered when the vault was bound.
struct GuardedVault {
    let v: TestVault
    let reader = ScriptedReader()
    let authority: EmbeddedKeyAuthority
    let slot: SlotReference

    init() throws {
        v = try TestVault()
        try v.vault.add(Item(name: "guarded", username: "g", password: "g-secret-7", totp: "otpauth://totp/g?secret=JBSWY3DPEHPK3PXP",
                             fingerprintLogin: true))
        let reader = reader
        authority = try EmbeddedKeyAuthority(folder: v.root.path + "/state", challenges: ChallengeBook(), openReader: { _ in reader })
        _ = try authority.enroll(finger: "right-index", sensor: reader.identity, proof: nil, label: nil)
        try v.vault.bindFingerprint(authority: authority, sensor: reader.identity, confirm: ["right-index"])
        slot = try #require(try v.vault.store.fingerprintSlot()).reference
    }

    /// The authority's token of a live match over `nonce`.
    func token(over nonce: [UInt8]) throws -> FreshMatchToken {
        try authority.verify(slot, nonce: nonce, reuse: 0, prompt: "touch", events: { _ in })
    }

    /// A nonce of the agent's session for `purpose`, then the authority's token over it.
    func token(from h: AgentRequestHandler, _ kind: FreshMatchPurpose.Kind, _ name: String?) throws -> FreshMatchToken {
        guard case .freshMatchNonce(let nonce) = h.handle(.freshMatchNonce(vault: v.path, name: name, purpose: kind), from: me) else {
            throw VaultError.failure("no nonce")
        }
        #expect(nonce.count == 32)
        return try token(over: nonce)
    }
}

/// The agent trusts only itself: a fresh match is a key authority's token over a nonce the
/// session's vault issued for that very request, checked by the vault, used once.
@Suite struct FreshMatchHandlerTests {
    let clock = ManualClock()

    func released(_ h: AgentRequestHandler, _ g: GuardedVault, _ token: FreshMatchToken?, field: ItemField = .password) -> (AgentReply, [UInt8]) {
        h.respond(.releaseSecret(vault: g.v.path, name: "guarded", field: field, command: "get", freshMatch: token), from: me)
    }

    @Test func onlyAValidTokenForThisItemReleasesItAndOnlyOnce() throws {
        let g = try GuardedVault()
        let h = AgentRequestHandler(uid: me.uid, pid: 77, clock: clock.read)
        g.v.open(in: h)
        let before = try g.v.vault.auditRecords().count
        func refused(_ token: FreshMatchToken?, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let (reply, tail) = released(h, g, token)
            #expect(failureCode(reply) == 10, "\(what): \(reply)", sourceLocation: sourceLocation)
            #expect(tail.isEmpty, sourceLocation: sourceLocation)
            let (whole, rest) = h.respond(.release(vault: g.v.path, name: "guarded", fields: .fields([.password]), command: "get", freshMatch: token), from: me)
            #expect(failureCode(whole) == 10 || failureCode(whole) == 2, "\(what), release: \(whole)", sourceLocation: sourceLocation)
            #expect(rest.isEmpty, sourceLocation: sourceLocation)
        }
        refused(nil, "no token")
        // Forged: the shape of a token, MACs of nobody's key.
        let forgedNonce = try g.token(from: h, .release, "guarded").nonce
        refused(FreshMatchToken(vaultID: g.v.vault.store.vaultID, nonce: forgedNonce, reusedAge: nil, macs: [randomBytes(32)]), "forged")
        // A MAC made under a key of the test's own choosing over a nonce of the agent.
        guard case .freshMatchNonce(let n2) = h.handle(.freshMatchNonce(vault: g.v.path, name: "guarded", purpose: .release), from: me) else {
            Issue.record("no nonce"); return
        }
        let guessedKey = try SecretBytes.random(count: 32)
        refused(FreshMatchToken(vaultID: g.v.vault.store.vaultID, nonce: n2, reusedAge: nil,
                                macs: [try FreshMatchMAC.mac(key: guessedKey, vaultID: g.v.vault.store.vaultID, nonce: n2, reusedAge: nil)]), "own key")
        // A real token, but for another item, for the switch, or for the whole vault.
        refused(try g.token(from: h, .release, "db"), "another item's")
        refused(try g.token(from: h, .fingerprintLoginSwitch, "guarded"), "the switch's")
        refused(try g.token(from: h, .releaseAll, nil), "the whole vault's")
        // A real token over a nonce the agent never issued (the test's own vault object's).
        refused(try g.token(over: try g.v.vault.freshMatchNonce(for: .release(item: "guarded"))), "another vault object's nonce")
        // An old nonce: issued more than a minute before it comes back.
        let late = try g.token(from: h, .release, "guarded")
        clock.advance(FreshMatchBook.lifetime + 1)
        refused(late, "expired")
        // A token whose claimed age was changed after the MAC.
        var aged = try g.token(from: h, .release, "guarded")
        aged.reusedAge = 3
        refused(aged, "altered age")
        #expect(try g.v.vault.auditRecords().count == before, "nothing refused was logged")

        // A valid token releases once, and only once.
        let scans = g.reader.scans
        let good = try g.token(from: h, .release, "guarded")
        #expect(g.reader.scans == scans + 1, "the token came from a live scan")
        let (reply, tail) = released(h, g, good)
        #expect(reply == .releasedSecret && tail == Array("g-secret-7".utf8))
        refused(good, "replayed")
        #expect(try g.v.vault.auditRecords().count == before + 1)

        // The whole release and the export take tokens of their own kinds.
        let item = releasedItem(h.respond(.release(vault: g.v.path, name: "guarded", fields: .fields([.password, .totp]), command: "get",
                                                   freshMatch: try g.token(from: h, .release, "guarded")), from: me))
        #expect(item?.password == "g-secret-7" && item?.totp != nil)
        #expect(failureCode(h.handle(.releaseAll(vault: g.v.path, command: "export", freshMatch: try g.token(from: h, .release, "guarded")), from: me)) == 10)
        let all = releasedItems(h.respond(.releaseAll(vault: g.v.path, command: "export", freshMatch: try g.token(from: h, .releaseAll, nil)), from: me))
        #expect(all?.count == 3)
        // An item without fingerprint login needs no token.
        #expect(h.respond(.releaseSecret(vault: g.v.path, name: "db", field: .password, command: "get"), from: me).tail == Array("db-secret-9".utf8))
    }

    @Test func turningFingerprintLoginOffNeedsAValidTokenForTheSwitch() throws {
        let g = try GuardedVault()
        let h = AgentRequestHandler(uid: me.uid, pid: 77, clock: clock.read)
        g.v.open(in: h)
        var off = ItemChange()
        off.fingerprintLogin = false
        for (token, what) in [(nil, "none"), (try g.token(from: h, .release, "guarded"), "a release's"),
                              (try g.token(from: h, .fingerprintLoginSwitch, "db"), "another item's"),
                              (FreshMatchToken(vaultID: g.v.vault.store.vaultID, nonce: randomBytes(32), reusedAge: nil, macs: [randomBytes(32)]), "forged")] {
            #expect(failureCode(h.handle(.update(vault: g.v.path, name: "guarded", change: off, freshMatch: token), from: me)) == 10, "\(what)")
            #expect(try g.v.vault.item(named: "guarded").fingerprintLogin, "\(what): the switch stays on")
        }
        // Rename and switch off in one change: still the switch of this item.
        var both = off
        both.rename = "renamed"
        #expect(failureCode(h.handle(.update(vault: g.v.path, name: "guarded", change: both), from: me)) == 10)
        #expect(try g.v.vault.contains("guarded"))
        let good = try g.token(from: h, .fingerprintLoginSwitch, "guarded")
        #expect(h.handle(.update(vault: g.v.path, name: "guarded", change: off, freshMatch: good), from: me) == .done)
        #expect(try !g.v.vault.item(named: "guarded").fingerprintLogin)
        // Now the item is released without a touch, as any item with the switch off.
        #expect(released(h, g, nil).1 == Array("g-secret-7".utf8))
        var on = ItemChange()
        on.fingerprintLogin = true
        #expect(h.handle(.update(vault: g.v.path, name: "guarded", change: on), from: me) == .done)
        #expect(failureCode(h.handle(.update(vault: g.v.path, name: "guarded", change: off, freshMatch: good), from: me)) == 10, "replayed")
        #expect(try g.v.vault.item(named: "guarded").fingerprintLogin)
    }

    @Test func aNonceRequestIsCheckedAndBounded() throws {
        let g = try GuardedVault()
        let h = AgentRequestHandler(uid: me.uid, pid: 77, clock: clock.read)
        #expect(h.handle(.freshMatchNonce(vault: g.v.path, name: "guarded", purpose: .release), from: me) == .noSession)
        g.v.open(in: h)
        #expect(failureCode(h.handle(.freshMatchNonce(vault: g.v.path, name: nil, purpose: .release), from: me)) == 2)
        #expect(failureCode(h.handle(.freshMatchNonce(vault: g.v.path, name: "guarded", purpose: .releaseAll), from: me)) == 2)
        #expect(failureCode(h.handle(.freshMatchNonce(vault: g.v.path, name: String(repeating: "n", count: 2000), purpose: .release), from: me)) == 2)
        // A token of the wrong shape is refused before the vault is asked.
        let bad = FreshMatchToken(vaultID: g.v.vault.store.vaultID, nonce: [1, 2], reusedAge: nil, macs: [randomBytes(32)])
        #expect(failureCode(released(h, g, bad).0) == 2)
        let tooMany = FreshMatchToken(vaultID: g.v.vault.store.vaultID, nonce: randomBytes(32), reusedAge: nil,
                                      macs: Array(repeating: randomBytes(32), count: FreshMatchToken.maximumMACs + 1))
        #expect(failureCode(released(h, g, tooMany).0) == 2)
        // Asked for in a loop, the oldest nonces go: the book stays bounded.
        let first = try g.token(from: h, .release, "guarded")
        for _ in 0..<100 { _ = h.handle(.freshMatchNonce(vault: g.v.path, name: "db", purpose: .release), from: me) }
        #expect(failureCode(released(h, g, first).0) == 10)
        // The old flag does not decode as a token: a malformed request.
        let old = #"{"releaseSecret":{"vault":"\#(g.v.path)","name":"guarded","field":"password","command":"get","freshMatch":true}}"#
        #expect(throws: VaultError.self) { _ = try AgentCodec.request(rawFrame(old)) }
        do { _ = try AgentCodec.request(rawFrame(old)) } catch { #expect(error.exitCode == 2) }
    }
}

/// The same through a real agent on its socket: raw requests a client could send by hand.
@Suite(.serialized) struct FreshMatchServerTests {
    @Test func rawRequestsWithoutAValidTokenReleaseNothing() throws {
        let s = try RunningServer()
        let g = try GuardedVault()
        try s.client().openSession(for: g.v.vault, idleSeconds: 60, hardLimitSeconds: 600)
        let client = try s.client()
        let before = try g.v.vault.auditRecords().count

        // The request of the issue: the old flag, in a frame of the current version.
        for json in [#"{"releaseSecret":{"vault":"\#(g.v.path)","name":"guarded","field":"password","command":"get","freshMatch":true}}"#,
                     #"{"release":{"vault":"\#(g.v.path)","name":"guarded","fields":["password"],"command":"get","freshMatch":true}}"#,
                     #"{"releaseAll":{"vault":"\#(g.v.path)","command":"export","freshMatch":true}}"#,
                     #"{"update":{"vault":"\#(g.v.path)","name":"guarded","change":{"clear":[],"setFields":[],"removeFields":[],"fingerprintLogin":false},"freshMatch":true}}"#] {
            let c = try s.raw()
            #expect(c.send(rawFrame(json).encoded()))
            let bytes = try #require(c.readToEnd(within: 3))
            guard case .failed(let e)? = replies(bytes).first else { Issue.record("not refused: \(json)"); continue }
            #expect(e.exitCode == 2, "\(json): \(e)")
            #expect(!String(decoding: bytes, as: UTF8.self).contains("g-secret-7"))
        }
        // Forged, another item's, replayed: exit 10, nothing in the tail.
        guard case .freshMatchNonce(let nonce) = try client.send(.freshMatchNonce(vault: g.v.path, name: "guarded", purpose: .release)) else {
            Issue.record("no nonce"); return
        }
        let forged = FreshMatchToken(vaultID: g.v.vault.store.vaultID, nonce: nonce, reusedAge: nil, macs: [randomBytes(32)])
        guard case .freshMatchNonce(let dbNonce) = try client.send(.freshMatchNonce(vault: g.v.path, name: "db", purpose: .release)) else {
            Issue.record("no nonce"); return
        }
        let others = try g.token(over: dbNonce)
        guard case .freshMatchNonce(let goodNonce) = try client.send(.freshMatchNonce(vault: g.v.path, name: "guarded", purpose: .release)) else {
            Issue.record("no nonce"); return
        }
        let good = try g.token(over: goodNonce)
        let first = try client.exchange(.releaseSecret(vault: g.v.path, name: "guarded", field: .password, command: "get", freshMatch: good))
        #expect(first.reply == .releasedSecret && first.tail == Array("g-secret-7".utf8))
        for token in [forged, others, good] {
            let (reply, tail) = try client.exchange(.releaseSecret(vault: g.v.path, name: "guarded", field: .password, command: "get", freshMatch: token))
            #expect(failureCode(reply) == 10, "\(reply)")
            #expect(tail.isEmpty)
        }
        // A raw update turning the switch off without a valid token: refused, the switch stays on.
        var off = ItemChange()
        off.fingerprintLogin = false
        #expect(failureCode(try client.send(.update(vault: g.v.path, name: "guarded", change: off))) == 10)
        #expect(failureCode(try client.send(.update(vault: g.v.path, name: "guarded", change: off, freshMatch: forged))) == 10)
        #expect(try g.v.vault.item(named: "guarded").fingerprintLogin)
        #expect(try g.v.vault.auditRecords().count == before + 1, "only the valid token's release was logged")
    }

    @Test func theSessionPathMakesAndSendsItsTokenAndTheAuditNamesThePeersExecutable() throws {
        let s = try RunningServer()
        let g = try GuardedVault()
        try s.client().openSession(for: g.v.vault, idleSeconds: 60, hardLimitSeconds: 600)
        let access = try #require(try SessionAccess.open(g.v.location, environment: s.environment))
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) {
            _ = try access.releaseSecret(named: "guarded", field: .password, command: "get", freshMatch: nil)
        }
        let token = try g.token(over: try access.freshMatchNonce(for: .release(item: "guarded")))
        let secret = try access.releaseSecret(named: "guarded", field: .password, command: "label-the-client-chose", freshMatch: token)
        #expect(secret.exposedBytes() == Array("g-secret-7".utf8))

        let records = try access.auditRecords(limit: nil).map { try $0.get() }
        let record = try #require(records.last)
        // The test process is the peer: the kernel's link of its executable, read independently.
        let mine = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(record.executable == mine, "\(String(describing: record.executable)) vs \(mine)")
        #expect(record.command == "label-the-client-chose" && record.pid == getpid() && record.uid == getuid())
        #expect(mine.contains("vaultPackageTests") || mine.contains("xctest"), "\(mine)")
    }
}
