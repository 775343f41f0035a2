// The fuzz targets of VaultAgent (docs/fuzzing.md), and their smoke pass.
//
// One source for both runners: `Fuzz/run.sh frame|handler` compiles this file, with
// VAULT_FUZZ_HARNESS defined (which leaves the tests out), next to a four-line libFuzzer entry
// point in `Fuzz/Targets/`; the suite at the end runs the same functions over the corpus in
// `Fuzz/corpus/` and over seeded mutations of it, in-process, in a few seconds.
import Foundation
import VaultAgent
import VaultKit
import VaultSystem
#if !VAULT_FUZZ_HARNESS
import Testing
#endif

/// A broken promise found by a fuzz target: an error of a type the entry point does not
/// document, a round trip that changes a value, or a vault left damaged. (A crash needs no
/// finding: it ends the process, the fuzzer saves the input.)
struct AgentFuzzFinding: Error, CustomStringConvertible {
    let target: String
    let what: String
    var description: String { "\(target): \(what)" }
}

/// The fuzz targets of VaultAgent: what each is fed and what it checks.
enum AgentFuzzTarget: String, CaseIterable {
    /// A byte stream from a peer: a control byte (low nibble: the size of the pieces the bytes
    /// arrive in, 0 for all at once; bit 4: a 4 KiB frame limit instead of the request limit),
    /// then the stream. Every frame goes through `FrameDecoder`, then `AgentCodec.request` (with
    /// `validate()`) and `AgentCodec.reply`. Checks: a frame re-encodes to the bytes it came
    /// from; the decoder knows whether it holds part of a frame; a decoded request or reply
    /// survives encoding and decoding unchanged; the durations of an `unlock` clamp without trapping.
    case frame
    /// Requests from a hostile peer of the right uid, against a real vault with an open session:
    /// up to 8 requests, one per line, each `JSON[\0TAIL]`, with `$VAULT`, `$ROOT` and `$NAME`
    /// replaced by the session's vault; an `unlock` without a tail carries the vault's real key.
    /// Each input starts from the same vault (two items, a fresh handler, one session). Checks: no
    /// trap; every reply encodes and decodes unchanged; a release hands out only the secrets it
    /// names, and only after the agent wrote an audit record; a listing or an overview carries no
    /// secret; afterwards every row of the vault still opens and the key generation is unchanged.
    case handler

    /// Runs the target on one input.
    /// - Throws: `AgentFuzzFinding` for a broken promise.
    func run(_ bytes: [UInt8]) throws(AgentFuzzFinding) {
        switch self {
        case .frame: try Self.frame(bytes)
        case .handler: try Self.handler(bytes)
        }
    }

    fileprivate func finding(_ what: String) -> AgentFuzzFinding { AgentFuzzFinding(target: rawValue, what: what) }

    // MARK: frame

    private static func frame(_ input: [UInt8]) throws(AgentFuzzFinding) {
        guard let control = input.first else { return }
        let stream = Array(input.dropFirst())
        let piece = Int(control & 0x0f)
        let decoder = AgentFrameDecoder(limit: control & 0x10 != 0 ? 4096 : AgentLimits.requestFrame)
        var fed = 0, consumed = 0
        while true {
            let frame: AgentFrame?
            do {
                frame = try decoder.next()
            } catch {
                _ = error.vaultError.message
                return
            }
            if let frame {
                let encoded = frame.encoded()
                guard consumed + encoded.count <= fed, Array(stream[consumed..<(consumed + encoded.count)]) == encoded else {
                    throw Self.frame.finding("a frame does not re-encode to the bytes it came from")
                }
                consumed += encoded.count
                try checkRequest(frame)
                try checkReply(frame)
                continue
            }
            guard decoder.hasPartialFrame == (consumed < fed) else {
                throw Self.frame.finding("hasPartialFrame is \(decoder.hasPartialFrame) with \(fed - consumed) bytes held")
            }
            guard fed < stream.count else { return }
            let end = piece == 0 ? stream.count : min(stream.count, fed + piece)
            decoder.append(Array(stream[fed..<end]))
            fed = end
        }
    }

    private static func checkRequest(_ frame: AgentFrame) throws(AgentFuzzFinding) {
        guard let request = try? AgentCodec.request(frame) else { return }
        _ = request.vault
        _ = request.isBulk
        if case .unlock(_, _, _, let idle, let hard, _) = request {
            for d in [idle, hard] {
                let c = AgentLimits.clamp(d, fallback: 120)
                guard AgentLimits.sessionDuration.contains(c) else { throw Self.frame.finding("clamp(\(d)) is \(c), out of range") }
                _ = AgentLimits.wholeSeconds(d)
                _ = AgentLimits.wholeSeconds(c - d)
            }
        }
        let again: AgentFrame
        do {
            again = try AgentCodec.frame(request, tail: frame.tail)
        } catch is VaultError {
            return
        } catch {
            throw Self.frame.finding("AgentCodec.frame threw \(type(of: error))")
        }
        let decoded: AgentRequest
        do {
            decoded = try AgentCodec.request(again)
        } catch {
            throw Self.frame.finding("a decoded request is refused once encoded again: \(error.message)")
        }
        guard decoded == request else { throw Self.frame.finding("a decoded request changes when encoded and decoded again") }
    }

    private static func checkReply(_ frame: AgentFrame) throws(AgentFuzzFinding) {
        guard let reply = try? AgentCodec.reply(frame) else { return }
        try checkRoundTrip(reply, Self.frame)
    }

    fileprivate static func checkRoundTrip(_ reply: AgentReply, _ target: AgentFuzzTarget) throws(AgentFuzzFinding) {
        let frame = AgentCodec.frame(reply)
        guard frame.encoded().count - 4 <= AgentLimits.replyFrame else {
            throw target.finding("a reply frame is over the reply limit")
        }
        let again: AgentReply
        do {
            again = try AgentCodec.reply(frame)
        } catch {
            throw target.finding("a reply the agent encodes cannot be decoded: \(error.message)")
        }
        // A reply over the limit becomes a `failed` one on purpose; any other must come back unchanged.
        let fits = (try? JSONEncoder().encode(reply)).map { AgentFrame(json: Array($0)).encoded().count - 4 <= AgentLimits.replyFrame } ?? false
        if fits ? again != reply : again != AgentReply.failed(error: overLimit(again)) {
            throw target.finding("a reply changes when encoded and decoded again")
        }
    }

    private static func overLimit(_ reply: AgentReply) -> VaultError {
        if case .failed(let e) = reply, e.message.hasPrefix("the reply is over") { return e }
        return .failure("not the over-limit reply")
    }

    // MARK: handler

    private static func handler(_ input: [UInt8]) throws(AgentFuzzFinding) {
        let fixture: HandlerFixture
        do {
            fixture = try HandlerFixture.shared()
            try fixture.restore()
        } catch {
            throw Self.handler.finding("the fixture cannot be made: \(error)")
        }
        let clock = FuzzClock()
        let handler = AgentRequestHandler(uid: fixture.peer.uid, pid: 77, clock: clock.read)
        guard handler.handle(fixture.unlockRequest, key: fixture.key, from: fixture.peer) == .sessionOpen else {
            throw Self.handler.finding("the fixture's session does not open")
        }
        var staging = ImportStaging()
        for line in input.split(separator: 0x0a, maxSplits: 7, omittingEmptySubsequences: true) {
            let (json, tail) = fixture.expand(line)
            clock.advance()
            guard let request = try? AgentCodec.request(AgentFrame(json: json, tail: tail)) else { continue }
            let key: [UInt8]
            if case .unlock = request, tail.isEmpty { key = fixture.key } else { key = tail }
            let releases: Bool
            switch request {
            case .release, .releaseAll, .releaseSecret, .update: releases = true
            default: releases = false
            }
            let audited = releases ? fixture.auditRecords() : 0
            // The input cannot make a key authority's token (it never holds the proof key): an
            // item with fingerprint login on must come out of no release, nor be switched off.
            let guarded = releases ? fixture.fingerprintLoginItems() : []
            let (reply, replyTail) = handler.respond(request, key: key, from: fixture.peer, staging: &staging)
            try checkRoundTrip(reply, .handler)
            try checkSecrets(request, reply, tail: replyTail, audited: audited, fixture)
            try checkFingerprintLogin(request, reply, tail: replyTail, guarded: guarded, fixture)
        }
        handler.discard(&staging)
        if let problem = fixture.damage() { throw Self.handler.finding(problem) }
    }
}

extension AgentFuzzTarget {
    /// A release hands out only the secrets it names, each audited by the agent before the reply;
    /// an overview or a listing hands out none.
    fileprivate static func checkSecrets(_ request: AgentRequest, _ reply: AgentReply, tail: [UInt8], audited: Int,
                                         _ fixture: HandlerFixture) throws(AgentFuzzFinding) {
        func hasSecret(_ i: Item) -> Bool { i.password != nil || i.totp != nil || i.oauthRefreshToken != nil }
        switch (request, reply) {
        case (.release(_, _, let fields, _, _), .released(let overview)):
            guard let item = try? tail.withUnsafeBytes({ try ReleasedItem(overview: overview, secretsRecord: $0).item() }) else {
                throw Self.handler.finding("a release the client cannot read")
            }
            if hasSecret(overview.item) { throw Self.handler.finding("a release carries a secret in its JSON") }
            // The git helper's refresh token (a hidden custom field) goes out only when named.
            let named = fields.resolved(for: overview.item)
            if item.password != nil && !named.contains(.password) || item.totp != nil && !named.contains(.totp)
                || item.oauthRefreshToken != nil && !named.contains(.custom(CredentialExtras.refreshTokenField)) {
                throw Self.handler.finding("a release handed out a secret it did not name")
            }
            if hasSecret(item), fixture.auditRecords() <= audited { throw Self.handler.finding("a secret was released without an audit record") }
        case (.releaseAll, .releasedAll):
            var items: [Item] = []
            do {
                try tail.withUnsafeBytes { t in
                    try AgentCodec.forEachReleased(inExport: t) { o, s in
                        var i = o.item
                        try s.decode(into: &i)
                        items.append(i)
                    }
                }
            } catch {
                throw Self.handler.finding("an export the client cannot read")
            }
            if items.contains(where: hasSecret), fixture.auditRecords() <= audited {
                throw Self.handler.finding("an export was released without an audit record")
            }
        case (.releaseSecret, .releasedSecret):
            if fixture.auditRecords() <= audited { throw Self.handler.finding("a secret was released without an audit record") }
        case (_, .releasedSecret):
            throw Self.handler.finding("a secret came back for a request that releases none")
        case (_, .listingPage):
            guard let pages = try? AgentCodec.overviews(inListingPage: tail) else { throw Self.handler.finding("a listing page the client cannot read") }
            if pages.map(\.item).contains(where: hasSecret) { throw Self.handler.finding("a listing carries a secret") }
        case (_, .overview(let o)):
            if hasSecret(o.item) { throw Self.handler.finding("an overview carries a secret") }
        case (_, .released), (_, .releasedAll):
            throw Self.handler.finding("secrets came back for a request that releases none")
        default:
            break
        }
    }
}

extension AgentFuzzTarget {
    /// No release of an item that had fingerprint login on, and no update that switched it off,
    /// succeeds without a valid token (which an input cannot make).
    fileprivate static func checkFingerprintLogin(_ request: AgentRequest, _ reply: AgentReply, tail: [UInt8], guarded: Set<String>,
                                                  _ fixture: HandlerFixture) throws(AgentFuzzFinding) {
        guard !guarded.isEmpty else { return }
        switch (request, reply) {
        case (.release(_, _, let fields, _, _), .released(let overview)):
            if guarded.contains(overview.item.name), overview.item.releaseNeedsFreshMatch(fields) {
                throw Self.handler.finding("a fingerprint-login item was released without a token")
            }
        case (.releaseSecret(_, let name, _, _, _), .releasedSecret):
            if let n = try? Item.normalize(name: name), guarded.contains(n) {
                throw Self.handler.finding("a fingerprint-login item's secret was released without a token")
            }
        case (.releaseAll, .releasedAll):
            throw Self.handler.finding("a vault with a fingerprint-login item was exported without a token")
        case (.update, .done):
            // One item changed; renamed with its switch kept, it still counts.
            if fixture.fingerprintLoginItems().count < guarded.count {
                throw Self.handler.finding("fingerprint login was switched off without a token")
            }
        default:
            break
        }
    }
}

/// A clock that moves one second per request, so sessions time out the same way on every run.
final class FuzzClock: @unchecked Sendable {
    private let lock = NSLock()
    private var seconds = 1000.0
    func advance() { lock.withLock { seconds += 1 } }
    var read: AgentClock { { self.lock.withLock { self.seconds } } }
}

/// The vault the handler target runs against: made once per process (fast KDF), its database
/// kept as bytes and written back before every input, so each input starts from the same state.
final class HandlerFixture: @unchecked Sendable {
    private nonisolated(unsafe) static var current: HandlerFixture?
    private static let lock = NSLock()

    let root: String
    let location: VaultLocation
    let key: [UInt8]
    let generation: Int64
    let peer = Requester(uid: ProcessIdentity.uid, pid: 4242, terminal: TerminalSession(sessionID: 4242, terminal: 34816))
    private let pristine: [UInt8]

    /// The fixture of this process, made on first use.
    static func shared() throws -> HandlerFixture {
        try lock.withLock {
            if let current { return current }
            let made = try HandlerFixture()
            current = made
            return made
        }
    }

    private init() throws {
        root = NSTemporaryDirectory() + "vault-fuzz-handler-\(ProcessIdentity.pid)-" + hexString(randomBytes(4))
        location = try VaultLocation(name: "default", environment: ["VAULT_HOME": root])
        var made: (key: [UInt8], generation: Int64)
        do {
            let vault = try VaultStore.create(at: location, passcode: try SecretBytes(copying: Array("fuzz passcode".utf8)),
                                              kdf: KDFParameters(memoryMiB: 8, operations: 1)).vault
            var db = Item(name: "db", username: "admin", password: "db-secret", urls: ["https://db.example"],
                          totp: "otpauth://totp/x?secret=JBSWY3DPEHPK3PXP", now: 100)
            db.oauthRefreshToken = "db-refresh-token"
            db.passwordExpiry = 4_000_000_000
            try vault.add(db)
            try vault.add(Item(name: "web", password: "web-secret", urls: ["https://example.com"], tags: ["a"], now: 200))
            made = (vault.withMasterKey { $0.exposedBytes() }, vault.generation)
        }
        key = made.key
        generation = made.generation
        // The creating connection is closed here, so the database file holds everything (no WAL).
        pristine = try PrivateFiles.read(location.databasePath, limit: 64 << 20)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    var unlockRequest: AgentRequest {
        .unlock(root: location.root, name: location.name, generation: generation, idleSeconds: 600, hardLimitSeconds: 3600)
    }

    /// Writes the database back as it was made.
    func restore() throws {
        for suffix in ["-wal", "-shm"] { try? FileSystem.remove(location.databasePath + suffix) }
        try AtomicFile.write(pristine, to: location.databasePath)
    }

    /// One request line: the JSON with the placeholders replaced, and the tail after the first NUL.
    func expand(_ line: ArraySlice<UInt8>) -> (json: [UInt8], tail: [UInt8]) {
        let cut = line.firstIndex(of: 0) ?? line.endIndex
        var json = String(decoding: line[..<cut], as: UTF8.self)
        if json.contains("$") {
            json = json.replacingOccurrences(of: "$VAULT", with: location.databasePath)
                .replacingOccurrences(of: "$ROOT", with: location.root)
                .replacingOccurrences(of: "$NAME", with: location.name)
        }
        return (Array(json.utf8), cut == line.endIndex ? [] : Array(line[(cut + 1)...]))
    }

    /// The names of the items with fingerprint login on (empty when the vault cannot be read).
    func fingerprintLoginItems() -> Set<String> {
        guard let store = try? VaultStore.open(location),
              let vault = try? store.adopt(masterKey: try SecretBytes(copying: key), generation: generation),
              let entries = try? vault.allItems() else { return [] }
        var names = Set<String>()
        for case .item(let i) in entries where i.fingerprintLogin { names.insert(i.name) }
        return names
    }

    /// How many audit records the vault holds (-1 when they cannot be read).
    func auditRecords() -> Int {
        guard let store = try? VaultStore.open(location),
              let vault = try? store.adopt(masterKey: try SecretBytes(copying: key), generation: generation),
              let records = try? vault.auditRecords() else { return -1 }
        return records.count
    }

    /// What is wrong with the vault after an input: a row that no longer opens, a key generation
    /// that moved; nil when it is sound.
    func damage() -> String? {
        do {
            let store = try VaultStore.open(location)
            guard try store.keyGeneration() == generation else { return "the key generation moved" }
            let vault = try store.adopt(masterKey: try SecretBytes(copying: key), generation: generation)
            let damaged = try vault.damagedRows()
            return damaged.isEmpty ? nil : "\(damaged.count) row(s) no longer open"
        } catch {
            return "the vault no longer opens with its key: \(error)"
        }
    }
}

#if VAULT_FUZZ_HARNESS
/// The libFuzzer entry of `target`: a finding is printed and traps, so libFuzzer saves the input.
func libFuzzerEntry(_ target: AgentFuzzTarget, _ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    do {
        try target.run(Array(UnsafeBufferPointer(start: data, count: size)))
    } catch {
        fatalError("fuzz finding: \(error)")
    }
    return 0
}
#else

/// Seeded mutations of corpus files (bit flips, interesting bytes, insertions, deletions,
/// duplicated and spliced pieces), so the smoke pass is the same on every run.
struct AgentCorpusMutator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    /// SplitMix64.
    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    mutating func below(_ n: Int) -> Int { n <= 1 ? 0 : Int(next() % UInt64(n)) }

    /// One to four mutations of `bytes`, splicing from `other`.
    mutating func mutate(_ bytes: [UInt8], other: [UInt8], tokens: [[UInt8]]) -> [UInt8] {
        var b = bytes
        for _ in 0...below(4) {
            let at = below(b.count + 1)
            switch below(7) {
            case 0 where !b.isEmpty: b[min(at, b.count - 1)] ^= UInt8(1) << UInt8(below(8))
            case 1 where !b.isEmpty: b[min(at, b.count - 1)] = [0, 0xff, 0x7f, 0x80, 0x22, 0x5c, 0x0a, 0x2d][below(8)]
            case 2: b.insert(UInt8(truncatingIfNeeded: next()), at: at)
            case 3 where !b.isEmpty: b.removeSubrange(min(at, b.count - 1)..<min(b.count, at + 1 + below(8)))
            case 4 where !b.isEmpty:
                let start = min(at, b.count - 1), end = min(b.count, start + 1 + below(16))
                b.insert(contentsOf: b[start..<end], at: below(b.count + 1))
            case 5 where !other.isEmpty:
                let start = below(other.count), end = min(other.count, start + 1 + below(32))
                b.insert(contentsOf: other[start..<end], at: at)
            case 6 where !tokens.isEmpty: b.insert(contentsOf: tokens[below(tokens.count)], at: at)
            default: b.append(UInt8(truncatingIfNeeded: next()))
            }
        }
        return b
    }
}

/// The corpus of a target, as kept in the repository.
func agentCorpus(_ target: AgentFuzzTarget) throws -> [[UInt8]] {
    let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/corpus/\(target.rawValue)")
    let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
    return try names.map { Array(try Data(contentsOf: folder.appendingPathComponent($0))) }
}

/// JSON pieces the mutator inserts.
let agentTokens: [[UInt8]] = [
    "\"", "{", "}", "[", "]", ":", ",", "null", "true", "1e400", "-1e300", "9223372036854775808", "\\u0000", "\\ud800",
    "\"$VAULT\"", "\"$ROOT\"", "{\"name\":\"x\",\"urls\":[],\"tags\":[],\"fingerprintLogin\":false,\"created\":0,\"modified\":0}",
].map { Array($0.utf8) }

/// Serialized: the handler target's vault is one per process.
@Suite(.serialized) struct AgentFuzzSmokeTests {
    /// Every corpus file, then seeded mutations: no finding, no trap.
    @Test(arguments: [(AgentFuzzTarget.frame, 4000), (.handler, 400)])
    func corpusAndMutationsHoldEveryPromise(_ target: AgentFuzzTarget, mutations: Int) throws {
        let corpus = try agentCorpus(target)
        #expect(corpus.count >= 10, "the corpus of \(target.rawValue) is in Fuzz/corpus")
        var mutator = AgentCorpusMutator(seed: 0x7661_756c_7400 | UInt64(target.rawValue.count))
        var inputs = corpus
        for i in 0..<mutations {
            inputs.append(mutator.mutate(corpus[i % corpus.count], other: corpus[mutator.below(corpus.count)], tokens: agentTokens))
        }
        for input in inputs {
            do {
                try target.run(input)
            } catch {
                Issue.record("\(error) for input \(hexString(input))")
            }
        }
    }

    /// The vault check can fail: a database that no longer opens is reported.
    @Test func theChecksCanFail() throws {
        let fixture = try HandlerFixture.shared()
        try fixture.restore()
        #expect(fixture.damage() == nil)
        try AtomicFile.write(Array("not a database".utf8), to: fixture.location.databasePath)
        #expect(fixture.damage() != nil)
        try fixture.restore()
        #expect(throws: Never.self) { try AgentFuzzTarget.handler.run(Array(#"{"status":{}}"#.utf8)) }
    }
}
#endif
