// The fuzz targets of VaultKit's parsers (docs/fuzzing.md), and their smoke pass.
//
// One source for both runners: `Fuzz/run.sh TARGET` compiles this file, with VAULT_FUZZ_HARNESS
// defined (which leaves the tests out), next to a four-line libFuzzer entry point in
// `Fuzz/Targets/`; the suite at the end runs the same functions over the corpus in
// `Fuzz/corpus/` and over seeded mutations of it, in-process, in a few seconds.
import Foundation
import VaultKit
import VaultInterchange
#if !VAULT_FUZZ_HARNESS
import Testing
#endif

/// A broken promise found by a fuzz target: an error of a type the entry point does not
/// document, a round trip that changes a value, a plan naming an item that cannot be added.
/// (A crash needs no finding: it ends the process, the fuzzer saves the input.)
struct KitFuzzFinding: Error, CustomStringConvertible {
    let target: String
    let what: String
    var description: String { "\(target): \(what)" }
}

/// The fuzz targets of VaultKit: what each is fed and what it checks.
enum KitFuzzTarget: String, CaseIterable {
    /// The decoding step of `UnlockedVault.open` after the AEAD: JSON into `Item` (only a
    /// `DecodingError`, which `open` reports as a damaged row), `Item.normalize(name:)` (only
    /// `VaultError`), every field; after a NUL byte, an `ItemChange` applied to the item. Checks:
    /// a decoded item (and a changed one) seals and opens again unchanged; applying a change twice
    /// is applying it once.
    case record
    /// git's credential format: `GitCredentialRequest(parsing:)`, its target, the plans of
    /// `get`, `store` and `erase` over a few items, and every value as a URL for
    /// `CredentialTarget(url:defaultScheme:)`. Checks: an item a plan adds has a valid name.
    case git
    /// docker's helper input: `DockerCredential(json:)` (store) and
    /// `DockerCredentialRules.serverURL(input:)` (get, erase), the plans over a few items.
    /// Checks: a parsed server names a host; an item `store` adds has a valid name.
    case docker
    /// `vault import`: `VaultJSON.items(from:)` (only `VaultError`), each name normalised (only
    /// `VaultError`). Checks: what was read exports (as `vault export` writes it) and imports
    /// again unchanged.
    case `import`
    /// The recovery key: `RecoveryKey.parse` (only `VaultError`), `Base32.decode`, and the
    /// input's bytes through base32 and hex. Checks: decoding what was encoded gives the bytes back.
    case recovery
    /// Secret references and what carries them: the input as a reference (`SecretReference`),
    /// a template (`SecretTemplate`) and a dotenv file (`DotEnv.parse`), each only `VaultError`;
    /// after a NUL byte, secrets separated by 0x01 for `SecretMasker` over the first part. Checks:
    /// a template written back from its pieces parses to the same pieces; masking in chunks (cut
    /// where the input says) gives what masking at once gives; the masked output holds no secret
    /// that could not be part of the replacement text.
    case references
    /// otpauth URIs and bare secrets: `OTPAuth(uri:)` and `OTP.normalize` (only `VaultError`).
    /// Checks: what `normalize` stores parses again with the same secret; an HOTP URI with its
    /// counter set by `OTP.setCounter` parses with that counter.
    case otpauth
    /// Other managers' exports: the first byte picks the reader (Bitwarden JSON, the five CSV
    /// formats, 1PUX `export.data`, a pass entry), the rest is its input (only `VaultError`).
    /// Checks: every item of a batch has a name `Item.normalize` accepts, names are unique,
    /// custom field names unique within an item, a TOTP secret parses.
    case foreign

    /// Runs the target on one input.
    /// - Throws: `KitFuzzFinding` for a broken promise.
    func run(_ bytes: [UInt8]) throws(KitFuzzFinding) {
        switch self {
        case .record: try Self.record(bytes)
        case .git: try Self.git(bytes)
        case .docker: try Self.docker(bytes)
        case .import: try Self.importJSON(bytes)
        case .recovery: try Self.recovery(bytes)
        case .references: try Self.references(bytes)
        case .otpauth: try Self.otpauth(bytes)
        case .foreign: try Self.foreign(bytes)
        }
    }

    fileprivate func finding(_ what: String) -> KitFuzzFinding { KitFuzzFinding(target: rawValue, what: what) }

    /// Runs `body`; an error other than an `E` is a finding.
    fileprivate func expectOnly<E: Error>(_ type: E.Type, _ what: String, _ body: () throws -> Void) throws(KitFuzzFinding) {
        do {
            try body()
        } catch is E {
        } catch {
            throw finding("\(what) threw \(Swift.type(of: error)) (\(error)), not \(E.self)")
        }
    }

    // MARK: record

    private static func record(_ input: [UInt8]) throws(KitFuzzFinding) {
        let cut = input.firstIndex(of: 0)
        let item: Item
        do {
            item = try JSONDecoder().decode(Item.self, from: Data(input[..<(cut ?? input.endIndex)]))
        } catch is DecodingError {
            return
        } catch {
            throw Self.record.finding("decoding an item threw \(type(of: error)), not DecodingError")
        }
        try checkRecord(item)
        guard let cut else { return }
        let change: ItemChange
        do {
            change = try JSONDecoder().decode(ItemChange.self, from: Data(input[(cut + 1)...]))
        } catch is DecodingError {
            return
        } catch {
            throw Self.record.finding("decoding a change threw \(type(of: error)), not DecodingError")
        }
        var changed = item
        change.apply(to: &changed)
        var twice = changed
        change.apply(to: &twice)
        guard twice == changed else { throw Self.record.finding("applying a change twice differs from applying it once") }
        if change.isEmpty, changed != item { throw Self.record.finding("an empty change changed the item") }
        try checkRecord(changed)
    }

    /// What `UnlockedVault` does with a record: normalise its name, seal it (JSON), open it again.
    private static func checkRecord(_ item: Item) throws(KitFuzzFinding) {
        try Self.record.expectOnly(VaultError.self, "Item.normalize") { _ = try Item.normalize(name: item.name) }
        for field in ItemField.builtIn + item.fields.map({ .custom($0.name) }) {
            _ = item.value(of: field)
            try Self.record.expectOnly(VaultError.self, "ItemField.checked") { _ = try field.checked(in: item) }
        }
        _ = item.releaseNeedsFreshMatch(.fields([.password]))
        _ = item.releaseNeedsFreshMatch(.all)
        let overview = ItemOverview(item)
        guard overview.item.password == nil, overview.item.totp == nil, overview.hasPassword == (item.password != nil) else {
            throw Self.record.finding("an overview shows a secret")
        }
        let opened: Item
        do {
            opened = try JSONDecoder().decode(Item.self, from: try JSONEncoder().encode(item))
        } catch {
            throw Self.record.finding("a decoded item does not seal and open again: \(error)")
        }
        guard opened == item else { throw Self.record.finding("an item changes when sealed and opened again") }
    }

    // MARK: git

    /// Items the credential plans run over: the helper's own, a person's, docker's.
    static let helperItems = [
        Item(name: "git/example.com (me)", username: "me", urls: ["https://example.com"], origin: "git", now: 100),
        Item(name: "work", username: "me", urls: ["https://example.com/team/repo.git", "ssh://git.example.com:22"], now: 200),
        Item(name: "docker/ghcr.io", username: "bot", urls: ["ghcr.io"], tags: ["docker"], origin: "docker", now: 300),
        Item(name: "docker/registry:5000", username: "ci", urls: ["http://registry:5000/v2/"], origin: "docker", now: 400),
    ]

    private static func git(_ input: [UInt8]) throws(KitFuzzFinding) {
        let request = GitCredentialRequest(parsing: input)
        if let target = request.target { try checkTarget(target, .git) }
        for action in GitCredentialAction.allCases {
            _ = GitCredentialRules.needsVault(action, request)
            _ = GitCredentialRules.auditCommand(action)
            try checkPlan(GitCredentialRules.plan(action, request, items: helperItems, now: 1000), .git)
        }
        for item in helperItems { _ = GitCredentialRules.answer(from: item) }
        for line in input.split(separator: 10) {
            guard let eq = line.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let value = String(decoding: line[(eq + 1)...], as: UTF8.self)
            for scheme in [nil, "https"] {
                if let t = CredentialTarget(url: value, defaultScheme: scheme) { try checkTarget(t, .git) }
            }
        }
    }

    /// A place's label fits a name; the URL a helper-made item keeps for it reads back as the same
    /// place (else the helper never finds its own item again). A scheme the URL reader refuses
    /// (git's `protocol=` can be anything) has no URL to read back.
    private static func checkTarget(_ t: CredentialTarget, _ target: KitFuzzTarget) throws(KitFuzzFinding) {
        guard t.label.count <= 200 else { throw target.finding("a label is over 200 characters") }
        guard !t.scheme.isEmpty, t.scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }) else { return }
        guard let back = CredentialTarget(url: t.url, defaultScheme: nil), back.samePlace(t) else {
            throw target.finding("the URL kept for a place does not read back as that place")
        }
    }

    /// A plan may add only an item the vault accepts.
    private static func checkPlan(_ plan: CredentialPlan, _ target: KitFuzzTarget) throws(KitFuzzFinding) {
        switch plan {
        case .add(let item):
            do {
                _ = try Item.normalize(name: item.name)
            } catch {
                throw target.finding("a plan adds an item the vault refuses: \(error)")
            }
        case .compareThenWrite(_, _, let otherwise):
            try checkPlan(otherwise, target)
        case .none, .release, .releaseFirst, .update, .remove, .compareThenRemove:
            break
        }
    }

    // MARK: docker

    private static func docker(_ input: [UInt8]) throws(KitFuzzFinding) {
        var credential: DockerCredential?
        do { credential = try DockerCredential(json: input) } catch { _ = (error.message, error.isProtocolText) }
        if let credential {
            guard !credential.username.isEmpty, !credential.server.host.isEmpty else {
                throw Self.docker.finding("a stored credential has no username or no host")
            }
            try checkTarget(credential.server, .docker)
            try checkPlan(DockerCredentialRules.store(credential, items: helperItems, now: 1000), .docker)
        }
        var server: (text: String, server: CredentialTarget)?
        do { server = try DockerCredentialRules.serverURL(input: input) } catch { _ = (error.message, error.isProtocolText) }
        if let (text, server) = server {
            guard !text.isEmpty, !server.host.isEmpty else { throw Self.docker.finding("a server URL names no host") }
            try checkTarget(server, .docker)
            _ = try? DockerCredentialRules.get(server, items: helperItems)
            _ = try? DockerCredentialRules.erase(server, items: helperItems)
        }
        _ = DockerCredentialRules.list(helperItems)
    }

    // MARK: import

    private static func importJSON(_ input: [UInt8]) throws(KitFuzzFinding) {
        var items: [Item] = []
        var whole: [Item]?
        try Self.import.expectOnly(VaultError.self, "VaultJSON.items") { whole = try VaultJSON.items(from: input, now: 1000) }
        try streamAgrees(input, whole)
        items = whole ?? []
        for item in items {
            try Self.import.expectOnly(VaultError.self, "Item.normalize") { _ = try Item.normalize(name: item.name) }
        }
        guard !items.isEmpty else { return }
        // As `vault export` writes it (VaultCLI's jsonText).
        let exported: Data
        do {
            exported = try JSONSerialization.data(withJSONObject: items.map(VaultJSON.object), options: [.sortedKeys, .withoutEscapingSlashes])
        } catch {
            throw Self.import.finding("imported items cannot be exported: \(error)")
        }
        let again: [Item]
        do {
            again = try VaultJSON.items(from: Array(exported), now: 2000)
        } catch {
            throw Self.import.finding("an export does not import: \(error)")
        }
        guard again == items else { throw Self.import.finding("items change in an export and import") }
    }

    /// The streamed reader (chunks of 1 to 16 bytes, by the input's length) splits the array as
    /// the whole-text reader does: the same items, or both refuse.
    private static func streamAgrees(_ input: [UInt8], _ items: [Item]?) throws(KitFuzzFinding) {
        var offset = 0
        let size = 1 + input.count % 16
        var stream = JSONArrayStream {
            guard offset < input.count else { return nil }
            defer { offset += size }
            return Array(input[offset..<min(input.count, offset + size)])
        }
        var streamed: [Item]?
        try Self.import.expectOnly(VaultError.self, "VaultJSON.batch(from: stream)") { streamed = try VaultJSON.batch(from: &stream, now: 1000).items }
        guard streamed == items else { throw Self.import.finding("the streamed reader and the whole-text reader disagree") }
    }

    // MARK: otpauth

    private static func otpauth(_ input: [UInt8]) throws(KitFuzzFinding) {
        let text = String(decoding: input, as: UTF8.self)
        var parsed: OTPAuth?
        try Self.otpauth.expectOnly(VaultError.self, "OTPAuth(uri:)") { parsed = try OTPAuth(uri: text) }
        var stored: String?
        try Self.otpauth.expectOnly(VaultError.self, "OTP.normalize") { stored = try OTP.normalize(text, label: "fuzz item") }
        if let stored {
            guard let again = try? OTPAuth(uri: stored) else { throw Self.otpauth.finding("a normalized secret does not parse") }
            if let parsed, again.secret != parsed.secret { throw Self.otpauth.finding("normalizing changed the secret") }
        }
        if let parsed, parsed.kind == .hotp, parsed.counter < UInt64.max {
            let next = OTP.setCounter(text, parsed.counter + 1)
            guard let back = try? OTPAuth(uri: next), back.counter == parsed.counter + 1 else {
                throw Self.otpauth.finding("an advanced HOTP counter does not read back")
            }
        }
    }

    // MARK: foreign

    private static func foreign(_ input: [UInt8]) throws(KitFuzzFinding) {
        guard let selector = input.first else { return }
        let body = Array(input.dropFirst())
        var batch: ImportBatch?
        let csv: [ImportFormat] = [.bitwardenCSV, .keepassxcCSV, .onePasswordCSV, .chromeCSV, .firefoxCSV]
        try Self.foreign.expectOnly(VaultError.self, "reader \(selector % 8)") {
            switch selector % 8 {
            case 0: batch = try BitwardenJSON.read(body, now: 1000)
            case 1...5: batch = try ForeignCSV.read(body, format: csv[Int(selector % 8) - 1], now: 1000)
            case 6: batch = try OnePUX.read(exportData: body, now: 1000)
            default:
                var b = ImportBatch()
                try b.add(PassEntry.item(path: "fuzz/entry", text: String(decoding: body, as: UTF8.self), modified: nil, now: 1000), entry: "entry")
                batch = b
            }
        }
        _ = ImportFormat.detect(body)
        guard let batch else { return }
        var names: Set<String> = []
        for item in batch.items {
            guard (try? Item.normalize(name: item.name)) == item.name else { throw Self.foreign.finding("an imported name is not valid: \(item.name.debugDescription)") }
            guard names.insert(item.name).inserted else { throw Self.foreign.finding("two imported items share a name") }
            guard Set(item.fields.map(\.name)).count == item.fields.count else { throw Self.foreign.finding("two custom fields share a name") }
            if let t = item.totp, (try? OTPAuth(uri: t)) == nil { throw Self.foreign.finding("an imported TOTP secret does not parse") }
        }
    }

    // MARK: recovery

    private static func references(_ input: [UInt8]) throws(KitFuzzFinding) {
        let f = Self.references
        let cut = input.firstIndex(of: 0) ?? input.count
        let head = Array(input[..<cut])
        let text = String(decoding: head, as: UTF8.self)
        try f.expectOnly(VaultError.self, "SecretReference(parsing:)") {
            let r = try SecretReference(parsing: text)
            guard (try? SecretReference(parsing: r.text)) == r else { throw f.finding("a reference does not parse to itself again") }
        }
        try f.expectOnly(VaultError.self, "DotEnv.parse") { _ = try DotEnv.parse(text) }
        try f.expectOnly(VaultError.self, "SecretTemplate(parsing:)") {
            let t = try SecretTemplate(parsing: head)
            var again: [UInt8] = []
            for piece in t.pieces {
                switch piece {
                case .text(let b): again += b
                case .reference(let r): again += Array("{{ \(r.text) }}".utf8)
                }
            }
            // The placeholders' spacing may differ: compare the pieces, merged, after parsing again.
            guard try SecretTemplate(parsing: again).pieces == t.pieces else { throw f.finding("a template written back parses differently") }
        }
        guard cut < input.count else { return }
        let secrets = input[(cut + 1)...].split(separator: 1, omittingEmptySubsequences: true).prefix(8).map { Array($0.prefix(64)) }
        var list = secrets.enumerated().map { (key: "s\($0.offset)", bytes: $0.element, secret: true) }
        guard let values = try? SecretValues(&list) else { return }
        func masked(_ chunks: [ArraySlice<UInt8>]) -> [UInt8] {
            let m = SecretMasker(values)
            var out: [UInt8] = []
            for c in chunks { out += Array(c).withUnsafeBytes { m.feed($0) } }
            return out + m.finish()
        }
        let whole = masked([head[...]])
        // Cut points from the stream's own bytes: deterministic per input.
        var chunks: [ArraySlice<UInt8>] = [], at = 0
        for b in head where at < head.count {
            let n = min(head.count - at, Int(b % 7) + 1)
            chunks.append(head[at..<(at + n)])
            at += n
        }
        if at < head.count { chunks.append(head[at...]) }
        guard masked(chunks) == whole else { throw f.finding("masking in chunks differs from masking at once") }
        let replacement = SecretMasker.replacement
        for s in secrets where !s.isEmpty && !s.contains(UInt8(ascii: "<")) && !s.contains(UInt8(ascii: ">")) {
            if whole.count >= s.count, (0...(whole.count - s.count)).contains(where: { whole[$0..<($0 + s.count)].elementsEqual(s) }),
               !(0...max(0, replacement.count - s.count)).contains(where: { replacement.count >= s.count && replacement[$0..<($0 + s.count)].elementsEqual(s) }) {
                throw f.finding("a secret is in the masked output")
            }
        }
    }

    private static func recovery(_ input: [UInt8]) throws(KitFuzzFinding) {
        let text = String(decoding: input, as: UTF8.self)
        try Self.recovery.expectOnly(VaultError.self, "RecoveryKey.parse") { try FuzzEntryPoints.parseRecoveryKey(text) }
        if let decoded = FuzzEntryPoints.base32Decode(text),
           FuzzEntryPoints.base32Decode(FuzzEntryPoints.base32Encode(decoded)) != decoded {
            throw Self.recovery.finding("base32 of decoded text does not decode to the same bytes")
        }
        guard FuzzEntryPoints.base32Decode(FuzzEntryPoints.base32Encode(input)) == input else {
            throw Self.recovery.finding("base32 does not decode to the bytes it encoded")
        }
        guard bytesFromHex(hexString(input)) == input else { throw Self.recovery.finding("hex does not decode to the bytes it encoded") }
        if let bytes = bytesFromHex(text), hexString(bytes) != text.lowercased() {
            throw Self.recovery.finding("hex text does not encode back to itself")
        }
    }
}

#if VAULT_FUZZ_HARNESS
/// The libFuzzer entry of `target`: a finding is printed and traps, so libFuzzer saves the input.
func libFuzzerEntry(_ target: KitFuzzTarget, _ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
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
struct KitCorpusMutator {
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
func kitCorpus(_ target: KitFuzzTarget) throws -> [[UInt8]] {
    let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/corpus/\(target.rawValue)")
    let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
    return try names.map { Array(try Data(contentsOf: folder.appendingPathComponent($0))) }
}

/// Pieces the mutator inserts: JSON syntax, odd numbers and escapes, URL and name characters.
let kitTokens: [[UInt8]] = [
    "\"", "{", "}", "[", "]", ":", ",", "null", "true", "1e400", "-1e300", "9223372036854775808", "\\u0000", "\\ud800",
    "%2F", "%25", "%40", "://", "@", ":443", "/../", "\u{200B}", "\u{0301}", "\u{202E}", "=", "\nurl=", "-",
].map { Array($0.utf8) }

@Suite struct KitFuzzSmokeTests {
    /// Every corpus file, then seeded mutations: no finding, no trap.
    @Test(arguments: KitFuzzTarget.allCases)
    func corpusAndMutationsHoldEveryPromise(_ target: KitFuzzTarget) throws {
        let corpus = try kitCorpus(target)
        #expect(corpus.count >= 10, "the corpus of \(target.rawValue) is in Fuzz/corpus")
        var mutator = KitCorpusMutator(seed: 0x7661_756c_7400 | UInt64(target.rawValue.count))
        var inputs = corpus
        for i in 0..<3000 {
            inputs.append(mutator.mutate(corpus[i % corpus.count], other: corpus[mutator.below(corpus.count)], tokens: kitTokens))
        }
        for input in inputs {
            do {
                try target.run(input)
            } catch {
                Issue.record("\(error) for input \(hexString(input))")
            }
        }
    }

    // Regressions: each input the fuzzers found, as kept in Fuzz/corpus/TARGET/regression-*.

    /// The name git `store` gives an item, for a request in git's format.
    private func storedName(_ text: String) throws -> String {
        guard case .add(let item) = GitCredentialRules.plan(.store, GitCredentialRequest(parsing: Array(text.utf8)),
                                                            items: [], now: 1) else {
            Issue.record("store does not add")
            return ""
        }
        return item.name
    }

    /// git `store` for a host with a zero-width space named its item after the host as written, a
    /// name `Item.normalize` refuses (format characters): the helper failed with exit 2.
    @Test func regressionFormatCharacterInHost() throws {
        let name = try storedName("protocol=https\nhost=git\u{200B}hub.com\nusername=me\npassword=p\n")
        #expect(name == "git/github.com (me)")
        #expect(throws: Never.self) { try Item.normalize(name: name) }
        // The URL the item keeps is the place as git named it (the label is only the name), so
        // it never serves the look-alike `github.com`.
        let request = GitCredentialRequest(parsing: Array("protocol=https\nhost=git\u{200B}hub.com\npassword=p\n".utf8))
        guard case .add(let item) = GitCredentialRules.plan(.store, request, items: []) else {
            Issue.record("store does not add"); return
        }
        #expect(item.urls == ["https://git%E2%80%8Bhub.com"])
        #expect(GitCredentialRules.plan(.get, request, items: [item]) == .releaseFirst([item.name]))
        let lookAlike = GitCredentialRequest(parsing: Array("protocol=https\nhost=github.com\n".utf8))
        #expect(GitCredentialRules.plan(.get, lookAlike, items: [item]) == CredentialPlan.none)
    }

    /// A 300-character username made a name over the 256-character limit.
    @Test func regressionLongUsername() throws {
        let name = try storedName("protocol=https\nhost=example.com\nusername=\(String(repeating: "u", count: 300))\npassword=p\n")
        #expect(name == "git/example.com (\(String(repeating: "u", count: 40)))")
        #expect(throws: Never.self) { try Item.normalize(name: name) }
    }

    /// A label's `.` and `..` were judged before control characters were dropped (`.\u{7}.`
    /// became `..`) and before a trailing space was trimmed (`.. `).
    @Test func regressionDotDotAfterControlDroppedOrSpaceTrimmed() throws {
        for (path, label) in [("a/.\u{7}.", "example.org/a/_"), ("b/.. ", "example.org/b/_")] {
            #expect(CredentialTarget(scheme: "https", host: "example.org", path: path).label == label)
            let name = try storedName("protocol=https\nhost=example.org\npath=\(path)\npassword=p\n")
            #expect(throws: Never.self) { try Item.normalize(name: name) }
        }
    }

    /// The URL a helper-made item keeps read back as another place when the host or path held a
    /// `%`, `?`, `#`, white space (or, in the host, `/` or `@`), or the host two default ports
    /// (the fuzzer's input was `=%20`: a host of one space).
    @Test func regressionURLOfADecodedSpace() throws {
        for raw in ["https://%20", "https://a%2Fb/c", "https://h/x%3Fy", "https://a%40b/", "https://h/a%2520b", "https://h:443:443",
                    "https://h/%23frag%20"] {
            let t = try #require(CredentialTarget(url: raw, defaultScheme: nil))
            #expect(try #require(CredentialTarget(url: t.url, defaultScheme: nil)).samePlace(t), "\(raw) -> \(t.url)")
        }
        #expect(try #require(CredentialTarget(url: "https://h:443:443", defaultScheme: nil)).host == "h")
        #expect(CredentialTarget(scheme: "https", host: "example.com", path: "team/my repo").url == "https://example.com/team/my%20repo")
    }

    /// git sent `path=a%20b` (a literal `%`): `store` kept `https://h/a%20b`, which reads back as
    /// `a b`, so every later `store` added another item (`... 2`, `... 3`) and `get` found none.
    @Test func regressionPercentInPath() throws {
        let request = GitCredentialRequest(parsing: Array("protocol=https\nhost=h\npath=a%20b\nusername=u\npassword=p\n".utf8))
        guard case .add(let first) = GitCredentialRules.plan(.store, request, items: []) else { Issue.record("store does not add"); return }
        #expect(first.urls == ["https://h/a%2520b"])
        if case .add(let again) = GitCredentialRules.plan(.store, request, items: [first]) {
            Issue.record("a second store adds \(again.name)")
        }
        #expect(GitCredentialRules.plan(.get, request, items: [first]) == .releaseFirst([first.name]))
    }

    /// `"tags": [null]` escaped `VaultJSON.items` as a raw `DecodingError` (exit 1 with Swift's
    /// debug text) instead of a usage error naming the item and the key.
    /// A streamed array whose last element ran to the end of the input, across a chunk boundary,
    /// indexed the element from before the buffer was compacted: out of range, a trap.
    @Test func regressionStreamEndsInAScalar() throws {
        let input = Array(#"[{"name":"a"},1"#.utf8)
        var offset = 0
        var stream = JSONArrayStream {
            guard offset < input.count else { return nil }
            defer { offset += 4 }
            return Array(input[offset..<min(input.count, offset + 4)])
        }
        #expect(throws: VaultError.self) { _ = try VaultJSON.batch(from: &stream, now: 1) }
    }

    @Test func regressionNullInsideList() {
        #expect(throws: VaultError.usage("item 1 ('x'): 'tags[0]' holds a null")) {
            _ = try VaultJSON.items(from: Array(#"[{"name":"x","tags":[null],"urls":null}]"#.utf8))
        }
    }

    /// The checks can fail: an error of a type an entry point does not document is a finding.
    @Test func anUnexpectedErrorTypeIsAFinding() {
        struct Surprise: Error {}
        #expect(throws: KitFuzzFinding.self) { try KitFuzzTarget.import.expectOnly(VaultError.self, "a parser") { throw Surprise() } }
        #expect(throws: Never.self) { try KitFuzzTarget.import.expectOnly(VaultError.self, "a parser") { throw VaultError.usage("x") } }
    }
}
#endif

#if !VAULT_FUZZ_HARNESS
@Suite struct JSONDepthTests {
    @Test func deepNestingIsFoundBeforeAnyDecoderRecurses() {
        #expect(JSONDepth.exceeds(Array(String(repeating: "[", count: 100_000).utf8)))
        #expect(!JSONDepth.exceeds(Array(#"{"a":[{"b":[1,2,{"c":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"["}]}]}"#.utf8)), "brackets in strings do not count")
        #expect(JSONDepth.exceeds(Array((String(repeating: "{\"a\":", count: 33) + "1" + String(repeating: "}", count: 33)).utf8)))
        #expect(throws: VaultError.self) { _ = try VaultJSON.items(from: Array(String(repeating: "[", count: 100_000).utf8)) }
    }
}
#endif
