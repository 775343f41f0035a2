import Foundation
import Testing
@testable import VaultKit
@testable import VaultInterchange

/// Releases as bytes: `releaseSecrets` hands out a secrets record in guarded memory holding only
/// the fields named, `releaseEachSecrets` lends every item's record in place, and what is built
/// from them (`SecretOutput`, `JSONText` into guarded memory) is byte for byte what the `String`
/// paths wrote.
@Suite struct ReleasedSecretsTests {
    let root = TempRoot()

    func makeVault() throws -> UnlockedVault {
        try VaultStore.create(at: try root.location(), passcode: try secret("correct horse"), kdf: fastKDF).vault
    }

    /// An item with every kind of secret: a password, a TOTP URI, notes, hidden and TOTP custom
    /// fields, a text field and a password history.
    static var full: Item {
        var item = Item(name: "db", username: "admin", password: "pw \"quoted\" \\ é\u{1}", urls: ["https://db.example"],
                        notes: "line1\nline2\t✓", tags: ["prod"], totp: "otpauth://totp/db?secret=JBSWY3DPEHPK3PXP", now: 100)
        item.fields = [CustomField(name: "pin", kind: .hidden, value: "1234"), CustomField(name: "site", kind: .text, value: "eu"),
                       CustomField(name: "second", kind: .totp, value: "otpauth://totp/x?secret=GEZDGNBV")]
        item.passwordHistory = [PasswordChange(password: "older", replaced: 50), PasswordChange(password: "old", replaced: 80)]
        return item
    }

    @Test func aReleaseHoldsOnlyTheFieldsNamedAndAuditsWhatTheItemHas() throws {
        let vault = try makeVault()
        try vault.add(Self.full)
        let before = try vault.auditRecords().count
        let released = try vault.releaseSecrets(named: "db", fields: .fields([.password, .custom("pin"), .username, .url]), command: "get", freshMatch: nil)
        #expect(released.overview.item.password == nil && released.overview.hasTOTP, "the overview carries no secret")
        released.withSecrets { s in
            #expect(s.value(of: .password).map { Array($0) } == Array(Self.full.password!.utf8))
            #expect(s.value(of: .custom("pin")).map { Array($0) } == Array("1234".utf8))
            #expect(s.value(of: .totp) == nil && s.value(of: .notes) == nil && s.value(of: .custom("second")) == nil, "not named: withheld")
            #expect(s.formerPasswordCount == 0)
        }
        let item = try released.item()
        #expect(item == Self.full.withholdingSecrets(except: .fields([.password, .custom("pin")])))
        let records = try vault.auditRecords().dropFirst(before).map { try $0.get() }
        #expect(records.map(\.field) == ["password", "pin", "username", "url"])

        let history = try vault.releaseSecrets(named: "db", fields: .fields([.history]), command: "get", freshMatch: nil)
        var entries: [(Int64, String)] = []
        history.withSecrets { s in s.forEachFormerPassword { when, pw in entries.append((when, String(decoding: pw, as: UTF8.self))) } }
        #expect(entries.map(\.0) == [50, 80] && entries.map(\.1) == ["older", "old"])
        #expect(try history.item().passwordHistory == Self.full.passwordHistory)
    }

    @Test func aReleaseOfAFieldTheItemLacksIsNotLoggedAndFingerprintLoginIsKept() throws {
        let vault = try makeVault()
        var guarded = Item(name: "guarded", password: "g", now: 1)
        guarded.fingerprintLogin = true
        try vault.add(guarded)
        try vault.add(Item(name: "bare", username: "u", now: 1))
        let before = try vault.auditRecords().count
        let bare = try vault.releaseSecrets(named: "bare", fields: .fields([.password, .notes]), command: "get", freshMatch: nil)
        bare.withSecrets { #expect(!$0.has(.password) && !$0.has(.notes)) }
        #expect(try vault.auditRecords().count == before, "nothing the item has was released")
        #expect(throws: VaultError.freshMatchNeeded(item: "guarded")) {
            _ = try vault.releaseSecrets(named: "guarded", fields: .fields([.password]), command: "get", freshMatch: nil)
        }
        #expect(try vault.releaseSecrets(named: "guarded", fields: .fields([.username]), command: "get", freshMatch: nil).item().password == nil)
        let token = try vault.tokenOfItsOwnProofKey(for: .release(item: "guarded"))
        #expect(try vault.releaseSecrets(named: "guarded", fields: .fields([.password]), command: "get", freshMatch: token).item().password == "g")
    }

    /// Export's stream lends each record in place: decoded, it is the item; the whole-item
    /// `releaseEach` built on it gives what the vault holds.
    @Test func theExportStreamLendsEveryItemsSecrets() throws {
        let vault = try makeVault()
        try vault.add(Self.full)
        try vault.add(Item(name: "web", password: "w", now: 2))
        var seen: [String: Item] = [:]
        try vault.releaseEachSecrets(command: "export", freshMatch: nil) { e in
            guard case .item(let overview, let secrets) = e else { Issue.record("damaged"); return }
            var item = overview.item
            try secrets.decode(into: &item)
            seen[item.name] = item
        }
        #expect(seen["db"] == Self.full && seen["web"]?.password == "w")
        #expect(try vault.releaseAll(command: "export").count == 2)
        #expect(try vault.auditRecords(limit: 1).first?.get().field == "all")
    }

    /// Export's one pass (every login hint says off) and its two passes (a hint says on): a
    /// fingerprint-login item needs the token either way, and one whose hint was set to off in
    /// the file is not released.
    @Test func theExportNeedsTheTokenForAFingerprintLoginItemWhateverItsHintSays() throws {
        let vault = try makeVault()
        try vault.add(Item(name: "a-web", password: "w", now: 2))
        try vault.add(Item(name: "z-guarded", password: "g", fingerprintLogin: true, now: 2))
        #expect(throws: VaultError.freshMatchNeeded(item: "z-guarded")) {
            try vault.releaseEachSecrets(command: "export", freshMatch: nil) { _ in Issue.record("released before the match") }
        }
        let token = try vault.tokenOfItsOwnProofKey(for: .releaseAll)
        var names: [String] = []
        try vault.releaseEachSecrets(command: "export", freshMatch: token) { e in
            if case .item(let o, _) = e { names.append(o.item.name) }
        }
        #expect(names.sorted() == ["a-web", "z-guarded"])
        // The hint changed in the file: one pass, and it stops at the item, with or without a token.
        try vault.db.query("UPDATE items SET login_hint=0")
        for given in [nil, try vault.tokenOfItsOwnProofKey(for: .releaseAll)] {
            var released: [String] = []
            do {
                try vault.releaseEachSecrets(command: "export", freshMatch: given) { e in
                    if case .item(let o, _) = e { released.append(o.item.name) }
                }
                Issue.record("the export did not stop")
            } catch let e as VaultError {
                #expect(e.message.contains("'z-guarded' has fingerprint login on, which was not known"), "\(e)")
            }
            #expect(!released.contains("z-guarded"))
        }
    }

    /// A secrets record that authenticates but holds what its overview does not name is refused,
    /// as the String decoder refuses it.
    @Test func aRecordWithAFieldItsOverviewLacksIsRefused() throws {
        var w = RecordWriter(kind: .secrets)
        w.field(SecretsRecord.field, prefix: nil, name: "ghost", value: "x")
        #expect(throws: VaultError.self) { _ = try w.bytes.withUnsafeBytes { try ItemSecrets(record: $0, of: Item(name: "a", now: 0)) } }
        var bad = RecordWriter(kind: .secrets)
        bad.field(SecretsRecord.password, [0xff, 0xfe])
        #expect(throws: VaultError.self) { _ = try bad.bytes.withUnsafeBytes { try ItemSecrets(record: $0, of: Item(name: "a", now: 0)) } }
    }
}

@Suite struct SecretOutputTests {
    @Test func itGrowsKeepsEveryByteAndEmpties() throws {
        let out = try SecretOutput(capacity: 4)
        var expected: [UInt8] = []
        for k in 0..<5000 {
            out.append(UInt8(k & 0xff))
            expected.append(UInt8(k & 0xff))
        }
        out.append("✓")
        expected += Array("✓".utf8)
        try out.withUnsafeBytes { #expect(Array($0) == expected) }
        out.removeAll()
        #expect(out.count == 0)
        try out.withUnsafeBytes { #expect($0.isEmpty) }
    }

    /// The byte-level terminal escape agrees with the String one on every control character,
    /// C1 included, and leaves other text alone.
    @Test func terminalEscapesMatchTheStringRule() throws {
        var text = "plain é ✓ 🔑 \n\t"
        for v in Array(0..<0x20) + [0x7f] + Array(0x80...0x9f) + [0xa0, 0xff] { text.unicodeScalars.append(Unicode.Scalar(UInt32(v))!) }
        func stringRule(_ s: String) -> String {
            var out = ""
            for scalar in s.unicodeScalars {
                let v = scalar.value
                if (v < 0x20 && v != 0x0A && v != 0x09) || v == 0x7F || (0x80...0x9F).contains(v) {
                    out += "\\x" + (v < 16 ? "0" : "") + String(v, radix: 16)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
            return out
        }
        let out = try SecretOutput()
        Array(text.utf8).withUnsafeBytes { out.appendTerminalSafe($0) }
        try out.withUnsafeBytes { #expect(String(decoding: $0, as: UTF8.self) == stringRule(text)) }
    }

    /// JSON written into guarded memory, with secrets as lent bytes, is the JSON of the same
    /// object with Strings.
    @Test func jsonIntoGuardedMemoryIsTheSameText() throws {
        let secretText = "s\"e\\c\nr\u{1}et ✓"
        let plain: [String: Any] = ["password": secretText, "n": 3, "list": [secretText, true]]
        let bytes = Array(secretText.utf8)
        try bytes.withUnsafeBytes { b in
            let lent: [String: Any] = ["password": JSONSecret(b), "n": 3, "list": [JSONSecret(b), true]]
            let out = try SecretOutput()
            JSONText.append(lent, to: out)
            try out.withUnsafeBytes { #expect(String(decoding: $0, as: UTF8.self) == JSONText.text(plain)) }
            var ordinary: [UInt8] = []
            JSONText.append(lent, to: &ordinary)
            #expect(String(decoding: ordinary, as: UTF8.self) == JSONText.text(plain))
        }
    }
}

@Suite struct ExportJSONTests {
    /// `export`'s object with secrets lent is, as text, the object of the whole item.
    @Test func theLentObjectIsTheWholeItemsText() throws {
        let root = TempRoot()
        let vault = try VaultStore.create(at: try root.location(), passcode: try secret("correct horse"), kdf: fastKDF).vault
        var odd = Item(name: "odd", notes: "", now: 3)
        odd.fields = [CustomField(name: "password", kind: .hidden, value: "custom, not the built-in"), CustomField(name: "empty", kind: .hidden, value: "")]
        odd.origin = "keepass"
        odd.userPrompt = "login:"
        odd.passwordPrompt = "Password:"
        odd.fingerprintLogin = false
        let items = [ReleasedSecretsTests.full, Item(name: "plain", now: 1), odd]
        for item in items { try vault.add(item) }
        var seen = 0
        try vault.releaseEachSecrets(command: "export", freshMatch: nil) { e in
            guard case .item(let overview, let secrets) = e, let item = items.first(where: { $0.name == overview.item.name }) else {
                Issue.record("unexpected entry"); return
            }
            let out = try SecretOutput()
            JSONText.append(ExportJSON.object(overview, secrets), to: out)
            try out.withUnsafeBytes { #expect(String(decoding: $0, as: UTF8.self) == JSONText.text(VaultJSON.object(item)), "\(item.name)") }
            seen += 1
        }
        #expect(seen == items.count)
        // export's writer, from the two opened records, gives the same text, byte for byte.
        seen = 0
        try vault.releaseEachRecords(command: "export", freshMatch: nil) { e in
            guard case .item(let records) = e, let item = items.first(where: { $0.name == records.name }) else {
                Issue.record("unexpected entry"); return
            }
            let direct = try SecretOutput()
            ExportJSON.write(records, to: direct)
            try direct.withUnsafeBytes { #expect(String(decoding: $0, as: UTF8.self) == JSONText.text(VaultJSON.object(item)), "\(item.name), written directly") }
            seen += 1
        }
        #expect(seen == items.count)
    }
}
