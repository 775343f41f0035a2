import Foundation
import Testing
@testable import VaultKit

/// A throw-away vault root, removed when the test ends.
final class TempRoot {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "vault-test-" + hexString(randomBytes(6))
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
    func location(_ name: String = "default") throws -> VaultLocation {
        try VaultLocation(name: name, environment: ["VAULT_HOME": path])
    }
}

let fastKDF = KDFParameters(memoryMiB: 8, operations: 1)

func secret(_ s: String) throws -> SecretBytes { try SecretBytes(copying: Array(s.utf8)) }

extension UnlockedVault {
    /// A fresh-match token for `purpose` MAC'd with this vault's own proof key: what a key
    /// authority that bound the vault hands out after a match (the tests of the authority itself
    /// make theirs through one).
    func tokenOfItsOwnProofKey(for purpose: FreshMatchPurpose, reusedAge: Int64? = nil) throws -> FreshMatchToken {
        let nonce = try freshMatchNonce(for: purpose)
        return try FreshMatchMAC.token(vaultID: store.vaultID, nonce: nonce, reusedAge: reusedAge, keys: [try proofKey().exposedBytes()])
    }
}

@Suite struct StoreTests {
    let root = TempRoot()

    func makeVault() throws -> (UnlockedVault, String) {
        let r = try VaultStore.create(at: try root.location(), passcode: try secret("correct horse"), kdf: fastKDF)
        return (r.vault, r.recoveryKey)
    }

    // Issue 25, item 8: one passcode in NFC and NFD, and a vault sealed with NFD bytes before
    // passcodes were normalised still opens, its slot sealed again in NFC.
    @Test func aPasscodeSealedAsDecomposedBytesOpensInEitherFormAndMovesToNFC() throws {
        let nfd = "cafe\u{301}-pass", nfc = "caf\u{e9}-pass"
        #expect(Array(nfd.utf8) != Array(nfc.utf8))
        // As vault sealed it before: the bytes typed, unnormalised.
        _ = try VaultStore.create(at: try root.location(), passcode: try SecretBytes(copying: Array(nfd.utf8)), kdf: fastKDF)
        let store = try VaultStore.open(try root.location())
        let before = try store.slotSequence()
        _ = try store.unlock(passcode: try SecretBytes(copying: Array(nfc.utf8)))
        #expect(try store.slotSequence() != before, "the passcode slot was not sealed again")
        // Now sealed in NFC: both forms open it, a wrong passcode still does not.
        _ = try VaultStore.open(try root.location()).unlock(passcode: try SecretBytes(copying: Array(nfd.utf8)))
        _ = try VaultStore.open(try root.location()).unlock(passcode: try SecretBytes(copying: Array(nfc.utf8)))
        #expect(throws: VaultError.wrongPasscode) {
            _ = try VaultStore.open(try root.location()).unlock(passcode: try SecretBytes(copying: Array("cafe-pass".utf8)))
        }
        #expect(throws: VaultError.self) { _ = try PasscodeRule.normalized(try SecretBytes(copying: [0xff, 0xfe, 0x41, 0x42, 0x43])) }
        let normalized = try PasscodeRule.normalized(try SecretBytes(copying: Array(nfd.utf8)))
        #expect(normalized.withUnsafeBytes { Array($0) } == Array(nfc.utf8))
    }

    @Test func createsPrivateFilesAndReopensWithThePasscode() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "github", username: "me", password: "s3cret", urls: ["https://github.com"]))
        let loc = try root.location()
        var st = stat()
        #expect(stat(loc.folder, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o700)
        #expect(stat(loc.databasePath, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o600)
        let reopened = try VaultStore.open(loc).unlock(passcode: try secret("correct horse"))
        let item = try reopened.item(named: "github")
        #expect(item.password == "s3cret")
        #expect(item.username == "me")
    }

    /// Pins a limit docs/threat-model.md states ("Replay of one row"): within one key generation,
    /// an older copy of an item's own row written back, or a deleted row put back, reads as valid.
    /// Rotation ends it (rows of an older generation never open); rows moved between items or
    /// vaults still fail (swappedRowsBetweenItemsFailAuthentication).
    @Test func aReplayedRowOfTheSameGenerationIsNotDetectedUntilARotation() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "db", password: "old"))
        let cols = "overview_nonce, overview, secrets_nonce, secrets"
        let old = try #require(try vault.db.query("SELECT id, name_mac, \(cols) FROM items").first)
        var change = ItemChange()
        change.password = "new"
        try vault.update("db", change)
        try vault.db.query("UPDATE items SET overview_nonce=?, overview=?, secrets_nonce=?, secrets=? WHERE id=?", Array(old[2...]) + [old[0]])
        #expect(try vault.item(named: "db").password == "old", "the documented limit: the older row reads")
        try vault.remove("db")
        try vault.db.query("INSERT INTO items(id, name_mac, generation, \(cols)) VALUES(?,?,1,?,?,?,?)", old)
        #expect(try vault.item(named: "db").password == "old", "a deleted row put back reads too")
        // After a rotation, a row saved before it never opens again.
        let rotated = try vault.rotate(passcode: try secret("correct horse"), kdf: nil, recovery: .keep, authority: nil).vault
        try rotated.db.query("UPDATE items SET overview_nonce=?, overview=?, secrets_nonce=?, secrets=? WHERE id=?", Array(old[2...]) + [old[0]])
        #expect(throws: VaultError.self) { _ = try rotated.item(named: "db") }
    }

    @Test func namesAndSecretsAreNotStoredInClear() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "very-distinctive-name", password: "very-distinctive-password"))
        let raw = try Data(contentsOf: URL(fileURLWithPath: try root.location().databasePath))
            + ((try? Data(contentsOf: URL(fileURLWithPath: try root.location().databasePath + "-wal"))) ?? Data())
        #expect(raw.range(of: Data("very-distinctive".utf8)) == nil)
    }

    @Test func wrongPasscodeFails() throws {
        _ = try makeVault()
        #expect(throws: VaultError.wrongPasscode) {
            _ = try VaultStore.open(try root.location()).unlock(passcode: try secret("wrong horse"))
        }
    }

    @Test func recoveryKeyUnlocksAndAWrongOneFails() throws {
        let (vault, recovery) = try makeVault()
        try vault.add(Item(name: "a", password: "1"))
        let store = try VaultStore.open(try root.location())
        #expect(try store.unlock(recoveryKey: recovery.lowercased()).item(named: "a").password == "1")
        // A fresh, well-formed key of another vault: checksum fine, slot does not open.
        let other = try VaultStore.create(at: try root.location("other"), passcode: try secret("xxxx"), kdf: fastKDF).recoveryKey
        #expect(throws: VaultError.authenticationFailed("wrong recovery key")) { _ = try store.unlock(recoveryKey: other) }
        // One character changed: the checksum catches the typo.
        var chars = Array(recovery)
        chars[0] = chars[0] == "A" ? "B" : "A"
        #expect(throws: VaultError.self) { _ = try store.unlock(recoveryKey: String(chars)) }
    }

    @Test func tamperedSlotDoesNotOpen() throws {
        _ = try makeVault()
        let store = try VaultStore.open(try root.location())
        try store.db.query("UPDATE slots SET params = replace(params, '\"operations\":1', '\"operations\":2') WHERE kind='passcode'")
        #expect(throws: VaultError.wrongPasscode) { _ = try store.unlock(passcode: try secret("correct horse")) }
    }

    @Test(arguments: ["overview", "secrets"])
    func tamperedRecordIsReportedAndOthersStillRead(record: String) throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "good", password: "g"))
        try vault.add(Item(name: "bad", password: "b"))
        let mac = try vault.nameMAC("bad")
        var flipped = try vault.db.query("SELECT \(record) FROM items WHERE name_mac=?", [.blob(mac)])[0][0].bytes!
        flipped[5] ^= 0x01
        try vault.db.query("UPDATE items SET \(record)=? WHERE name_mac=?", [.blob(flipped), .blob(mac)])
        #expect(throws: VaultError.corrupt("item 'bad' failed authentication (its \(record) record)")) { _ = try vault.item(named: "bad") }
        #expect(try vault.item(named: "good").password == "g")
        let entries = try vault.allItems()
        #expect(entries.count == 2)
        // A listing opens overviews only: a damaged secrets record does not show there.
        #expect(entries.filter { if case .damaged = $0 { true } else { false } }.count == (record == "overview" ? 1 : 0))
    }

    /// Records moved between items, or a secrets record next to another revision's overview of
    /// the same item, fail authentication for that item alone.
    @Test(arguments: [["overview_nonce", "overview"], ["secrets_nonce", "secrets"],
                      ["overview_nonce", "overview", "secrets_nonce", "secrets"]])
    func swappedRecordsBetweenItemsFailAuthentication(columns: [String]) throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "one", password: "1"))
        try vault.add(Item(name: "two", password: "2"))
        try vault.add(Item(name: "three", password: "3"))
        let list = columns.joined(separator: ", ")
        let set = columns.map { "\($0)=?" }.joined(separator: ", ")
        let one = try vault.db.query("SELECT id, \(list) FROM items WHERE name_mac=?", [.blob(try vault.nameMAC("one"))])[0]
        let two = try vault.db.query("SELECT id, \(list) FROM items WHERE name_mac=?", [.blob(try vault.nameMAC("two"))])[0]
        try vault.db.query("UPDATE items SET \(set) WHERE id=?", Array(two[1...]) + [one[0]])
        try vault.db.query("UPDATE items SET \(set) WHERE id=?", Array(one[1...]) + [two[0]])
        #expect(throws: VaultError.self) { _ = try vault.item(named: "one") }
        #expect(throws: VaultError.self) { _ = try vault.item(named: "two") }
        #expect(try vault.item(named: "three").password == "3")
    }

    @Test func aSecretsRecordOpensOnlyNextToTheOverviewWrittenWithIt() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "db", username: "u1", password: "old"))
        let old = try vault.db.query("SELECT secrets_nonce, secrets FROM items")[0]
        var change = ItemChange()
        change.password = "new"
        try vault.update("db", change)
        try vault.db.query("UPDATE items SET secrets_nonce=?, secrets=?", old)
        #expect(throws: VaultError.corrupt("item 'db' failed authentication (its secrets record)")) { _ = try vault.item(named: "db") }
        #expect(try vault.overview(named: "db").item.username == "u1", "the overview still reads")
    }

    @Test func swappedNameIndexIsDetected() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "one", password: "1"))
        try vault.add(Item(name: "two", password: "2"))
        let m1 = try vault.nameMAC("one"), m2 = try vault.nameMAC("two")
        try vault.db.transaction {
            try vault.db.query("UPDATE items SET name_mac=? WHERE name_mac=?", [.blob([0]), .blob(m1)])
            try vault.db.query("UPDATE items SET name_mac=? WHERE name_mac=?", [.blob(m1), .blob(m2)])
            try vault.db.query("UPDATE items SET name_mac=? WHERE name_mac=?", [.blob(m2), .blob([0])])
        }
        #expect(throws: VaultError.corrupt("item 'one' failed authentication (its overview record)")) { _ = try vault.item(named: "one") }
    }

    // Issue 25, item 9: the login hints tell, before the vault opens, whether any item may have
    // fingerprint login on; every write keeps them, a rotation and the migration from schema 2 too.
    @Test func loginHintsFollowEveryWriteAndTheMigration() throws {
        let (vault, _) = try makeVault()
        let store = vault.store
        func hints() throws -> [Int64?] { try store.db.query("SELECT login_hint FROM items ORDER BY login_hint").map { $0[0].int } }
        #expect(try !store.mayHaveFingerprintLogin())
        try vault.add(Item(name: "plain", password: "p"))
        try vault.add(Item(name: "imported", password: "q"))
        #expect(try !store.mayHaveFingerprintLogin() && hints() == [0, 0])
        try vault.add(Item(name: "fp", password: "f", fingerprintLogin: true))
        #expect(try store.mayHaveFingerprintLogin() && hints() == [0, 0, 1])
        // Turning it off (with the match it needs) and on again, in place.
        try vault.update("fp", freshMatch: try vault.tokenOfItsOwnProofKey(for: .fingerprintLoginSwitch(item: "fp"))) { $0.fingerprintLogin = false }
        #expect(try !store.mayHaveFingerprintLogin())
        try vault.update("plain") { $0.fingerprintLogin = true }
        #expect(try store.mayHaveFingerprintLogin())
        // An import that replaces the item.
        var batch = [Item(name: "plain", password: "p2")]
        try vault.add(replace: true) { batch.popLast() }
        #expect(try !store.mayHaveFingerprintLogin() && hints() == [0, 0, 0])
        try vault.add(Item(name: "fp2", password: "g", fingerprintLogin: true))
        // A rotation keeps each row's hint.
        let rotated = try vault.rotate(passcode: try secret("correct horse"), kdf: fastKDF, recovery: .keep, authority: nil).vault
        #expect(try hints() == [0, 0, 0, 1])
        // A hint of unknown (a row the migration could not open) counts as maybe.
        try store.db.query("UPDATE items SET login_hint=NULL WHERE login_hint=1")
        #expect(try store.mayHaveFingerprintLogin())
        try rotated.remove("fp2")
        #expect(try !store.mayHaveFingerprintLogin())
        try rotated.add(Item(name: "fp3", password: "h", fingerprintLogin: true))

        // Back to schema 2 (no column, no index): nothing is known before the first unlock, which
        // migrates and reads each row's flag from its overview.
        try store.db.execute("DROP INDEX items_login_hint")
        try store.db.execute("ALTER TABLE items DROP COLUMN login_hint")
        try store.db.query("UPDATE meta SET value=2 WHERE key='schema_version'")
        let old = try VaultStore.open(try root.location())
        #expect(try old.storedSchemaVersion() == 2 && old.mayHaveFingerprintLogin())
        let migrated = try old.unlock(passcode: try secret("correct horse"))
        #expect(try old.storedSchemaVersion() == 3)
        #expect(try old.meta("migrated_from")?.int == 2)
        #expect(try old.db.query("SELECT login_hint FROM items ORDER BY login_hint").map { $0[0].int } == [0, 0, 0, 1])
        #expect(try migrated.item(named: "fp3").fingerprintLogin)
        try migrated.remove("fp3")
        #expect(try !old.mayHaveFingerprintLogin())
    }

    @Test func newerSchemaVersionIsAClearError() throws {
        _ = try makeVault()
        let store = try VaultStore.open(try root.location())
        try store.db.query("UPDATE meta SET value=99 WHERE key='schema_version'")
        #expect(throws: VaultError.newerFormat(found: 99, supported: VaultStore.schemaVersion)) {
            _ = try VaultStore.open(try root.location())
        }
    }

    @Test func notADatabaseAndTruncatedFilesAreCorrupt() throws {
        _ = try makeVault()
        let path = try root.location().databasePath
        try? FileManager.default.removeItem(atPath: path + "-wal")
        try? FileManager.default.removeItem(atPath: path + "-shm")
        let original = try Data(contentsOf: URL(fileURLWithPath: path))
        try original.prefix(1000).write(to: URL(fileURLWithPath: path))
        #expect(throws: VaultError.self) { _ = try VaultStore.open(try root.location()).unlock(passcode: try secret("correct horse")) }
        try Data("this is not sqlite at all, just text".utf8).write(to: URL(fileURLWithPath: path))
        do {
            _ = try VaultStore.open(try root.location())
            Issue.record("opened a text file as a vault")
        } catch let e as VaultError {
            #expect(e.exitCode == 5)
        }
    }

    @Test func groupReadableFolderIsRefused() throws {
        _ = try makeVault()
        let loc = try root.location()
        chmod(loc.folder, 0o750)
        #expect(throws: VaultError.insecurePermissions(path: loc.folder, isDirectory: true)) { _ = try VaultStore.open(loc) }
        chmod(loc.folder, 0o700)
        chmod(loc.databasePath, 0o644)
        #expect(throws: VaultError.insecurePermissions(path: loc.databasePath, isDirectory: false)) { _ = try VaultStore.open(loc) }
    }

    @Test func addRefusesDuplicatesUnlessReplacing() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "x", password: "1"))
        #expect(throws: VaultError.alreadyExists("x")) { try vault.add(Item(name: "x", password: "2")) }
        try vault.add(Item(name: "x", password: "2"), replace: true)
        #expect(try vault.item(named: "x").password == "2")
    }

    /// An import (many items, one transaction): an existing name refuses the whole import, or
    /// with `replace` its row is replaced (one row per name), and a name given twice is refused.
    @Test func anImportRefusesOrReplacesExistingNamesAsAWhole() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "b", password: "old"))
        let batch = [Item(name: "a", password: "1"), Item(name: "b", password: "2"), Item(name: "c", password: "3")]
        #expect(throws: VaultError.alreadyExists("b")) { _ = try vault.add(contentsOf: batch, replace: false) }
        #expect(try vault.allItems().count == 1, "nothing of the refused import was written")
        #expect(try vault.add(contentsOf: batch, replace: true) == 3)
        #expect(try vault.allItems().count == 3 && vault.item(named: "b").password == "2")
        #expect(throws: VaultError.usage("'a' appears twice in the import")) {
            _ = try vault.add(contentsOf: [Item(name: "z"), Item(name: "a"), Item(name: "a")], replace: true)
        }
        #expect(try vault.item(named: "a").password == "1" && (try? vault.item(named: "z")) == nil)
        // The unique index tells the two apart: a name met twice in the import (also as two
        // spellings of one NFC name), or one the vault had before it.
        #expect(throws: VaultError.usage("'y' appears twice in the import")) {
            _ = try vault.add(contentsOf: [Item(name: "y"), Item(name: "x"), Item(name: "y")], replace: false)
        }
        #expect(throws: VaultError.usage("'\u{E9}' appears twice in the import")) {
            _ = try vault.add(contentsOf: [Item(name: "\u{E9}"), Item(name: "e\u{301}")], replace: true)
        }
        #expect(throws: VaultError.alreadyExists("c")) { _ = try vault.add(contentsOf: [Item(name: "y"), Item(name: "c")], replace: false) }
        #expect(try vault.allItems().count == 3, "nothing of the refused imports was written")
    }

    /// Rows an import seals into its reused buffers open to the items given (every type and
    /// field kind, long and empty values; a large record after a small one and back), and a name
    /// met twice is told by `givenTwice` with the name as the later item gives it.
    @Test func anImportsReusedRowBuffersSealEveryItemAsGiven() throws {
        let (vault, _) = try makeVault()
        let items = (RecordEncodingTests.items + RecordEncodingTests.items.reversed()).enumerated().map { k, item in
            var i = item
            i.name = "\(k) \(item.name)"
            return i
        }
        var rest = items[...]
        #expect(try vault.add(replace: false, givenTwice: { VaultError.usage("twice: \($0)") }, from: { rest.popFirst() }) == items.count)
        for item in items { #expect(try vault.item(named: item.name) == item, "\(item.name)") }
        #expect(try vault.db.query("SELECT count(*) FROM items WHERE login_hint=1").first?.first?.int == Int64(items.filter(\.fingerprintLogin).count))
        rest = [Item(name: "n\u{E9}"), Item(name: "ne\u{301}")][...]
        #expect(throws: VaultError.usage("twice: ne\u{301}")) { _ = try vault.add(replace: false, givenTwice: { VaultError.usage("twice: \($0)") }, from: { rest.popFirst() }) }
        #expect(try vault.allItems().count == items.count)
    }

    @Test func renameMovesTheIndexAndRemoveDeletes() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "old", password: "p"))
        try vault.add(Item(name: "taken", password: "t"))
        #expect(throws: VaultError.alreadyExists("taken")) { try vault.update("old") { $0.name = "taken" } }
        try vault.update("old") { $0.name = "new" }
        #expect(throws: VaultError.itemNotFound("old")) { _ = try vault.item(named: "old") }
        #expect(try vault.item(named: "new").password == "p")
        try vault.remove("new")
        #expect(throws: VaultError.itemNotFound("new")) { try vault.remove("new") }
    }

    @Test func changingThePasscodeKeepsItemsAndRetiresTheOldOne() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "x", password: "1"))
        try vault.changePasscode(to: try secret("new passcode"), kdf: nil)
        let store = try VaultStore.open(try root.location())
        #expect(throws: VaultError.wrongPasscode) { _ = try store.unlock(passcode: try secret("correct horse")) }
        #expect(try store.unlock(passcode: try secret("new passcode")).item(named: "x").password == "1")
        #expect(try store.slots().filter { $0.kind == .passcode }.count == 1)
    }

    @Test func namesAreNormalised() throws {
        let (vault, _) = try makeVault()
        try vault.add(Item(name: "caf\u{65}\u{301}", password: "1"))
        #expect(try vault.item(named: "caf\u{e9}").password == "1")
        for bad in ["", " lead", "a/../b", "tab\there"] {
            #expect(throws: VaultError.self) { try vault.add(Item(name: bad, password: "1")) }
        }
    }
}

@Suite struct CryptoTests {
    @Test func secretBytesCompareInConstantTimeAndCopy() throws {
        let a = try secret("abc"), b = try secret("abc"), c = try secret("abd")
        let same = a.isEqual(to: b), differ = a.isEqual(to: c)
        #expect(same)
        #expect(!differ)
        let d = try a.duplicate()
        let copied = d.isEqual(to: a)
        #expect(copied)
    }

    @Test func aeadRejectsWrongAssociatedData() throws {
        let key = try SecretBytes.random(count: 32)
        let sealed = try Array("hello".utf8).withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: [1]) }
        #expect(try AEAD.open(sealed.ciphertext, key: key, nonce: sealed.nonce, associatedData: [1]).exposedBytes() == Array("hello".utf8))
        #expect(throws: CryptoError.authenticationFailed) { _ = try AEAD.open(sealed.ciphertext, key: key, nonce: sealed.nonce, associatedData: [2]) }
    }

    @Test func base32RoundTrips() {
        for n in 0..<40 {
            let b = randomBytes(n)
            #expect(Base32.decode(Base32.encode(b)) == b)
        }
        #expect(Base32.encode(Array("foobar".utf8)) == "MZXW6YTBOI")
    }

    @Test func generatorHonoursClassesAndLength() throws {
        var g = PasswordGenerator(length: 40)
        g.symbols = false
        for _ in 0..<50 {
            let p = try g.generate()
            #expect(p.count == 40)
            #expect(p.allSatisfy { $0.isLetter || $0.isNumber })
            #expect(p.contains { $0.isNumber })
        }
        let w = try PasswordGenerator.words(5)
        #expect(w.split(separator: "-").count == 5)
        #expect(throws: VaultError.self) { _ = try PasswordGenerator(length: 2).generate() }
    }
}
