import Foundation
import Testing
@testable import VaultKit
import VaultInterchange

/// Schema 1 vaults (one sealed JSON record per item) made by the code before record format 2
/// migrate at their first unlock, in one transaction.
@Suite struct MigrationTests {
    let box = Sandbox()
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("VaultKitTests/Fixtures/v1-vault").path

    static func read(_ name: String) throws -> String {
        try String(contentsOfFile: fixture + "/" + name, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The fixture copied into the sandbox as vault `legacy` (0600 in a 0700 folder, as vault makes them).
    func installFixture() throws -> VaultLocation {
        let folder = box.home + "/vaults/legacy"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        chmod(box.home + "/vaults", 0o700)
        try? FileManager.default.removeItem(atPath: folder + "/vault.db")
        try FileManager.default.copyItem(atPath: Self.fixture + "/vault.db", toPath: folder + "/vault.db")
        chmod(folder + "/vault.db", 0o600)
        return try VaultLocation(name: "legacy", environment: box.env)
    }

    /// What the fixture holds, from its items.json.
    static func expectedItems() throws -> [Item] {
        try VaultJSON.items(from: Array(try read("items.json").utf8))
    }

    @Test func theV1FixtureMigratesAndReadsTheSame() throws {
        let loc = try installFixture()
        let passcode = try Self.read("passcode.txt")
        let before = try VaultStore.open(loc)
        #expect(try before.storedSchemaVersion() == 1)
        #expect(try before.migration() == nil)

        // Through the binary: the first unlock migrates, status says so.
        var r = box.vault(["ls", "--vault", "legacy"], passcode: passcode)
        #expect(r.status == 0, "\(r.stderr)")
        let want = try Self.expectedItems()
        #expect(r.stdout == want.map(\.name).sorted().map { $0 + "\n" }.joined())
        r = box.vault(["status", "--vault", "legacy", "--json"])
        #expect(r.status == 0, "\(r.stderr)")
        let status = json(r.stdout)
        #expect(status["schema_version"] as? Int == VaultStore.schemaVersion)
        #expect((status["migrated"] as? [String: Any])?["from_schema"] as? Int == 1, "\(r.stdout)")
        r = box.vault(["status", "--vault", "legacy"])
        #expect(r.stdout.contains("migrated: from schema 1 on "), "\(r.stdout)")

        // Every field of every item reads as it was written, secrets included.
        let store = try VaultStore.open(loc)
        #expect(try store.storedSchemaVersion() == VaultStore.schemaVersion)
        let vault = try store.unlock(passcode: try SecretBytes(copying: Array(passcode.utf8)))
        for item in want {
            #expect(try vault.item(named: item.name) == item, "\(item.name)")
        }
        #expect(try vault.allItems().count == want.count)
        // The fingerprint-login switch came through: the item still asks for a fresh match.
        #expect(throws: VaultError.freshMatchNeeded(item: "prod-db")) { _ = try vault.release(named: "prod-db", fields: .fields([.password]), command: "get") }
        // The audit record written by the old code still opens, and the recovery key still works.
        let audit = try vault.auditRecords()
        #expect(audit.count == 1)
        #expect(try audit.first?.get().item == "github")
        #expect(try store.unlock(recoveryKey: try Self.read("recovery-key.txt")).item(named: "wifi/home").password == "correct horse battery staple")
        // The rows are schema 3 rows now: both records and the login hint, nothing of the old JSON.
        let columns = try store.db.query("SELECT name FROM pragma_table_info('items')").compactMap(\.first?.string)
        #expect(columns == ["id", "name_mac", "generation", "overview_nonce", "overview", "secrets_nonce", "secrets", "login_hint"])
        // prod-db's fingerprint login is the one hint that says on.
        #expect(try store.db.query("SELECT count(*) FROM items WHERE login_hint=1").first?.first?.int == 1)
        #expect(try store.db.query("SELECT count(*) FROM items WHERE login_hint IS NOT 1").first?.first?.int == Int64(want.count - 1))
        // A rotation after the migration keeps everything.
        let rotated = try vault.rotate(passcode: try SecretBytes(copying: Array(passcode.utf8)), kdf: nil, recovery: .keep, authority: nil).vault
        for item in want { #expect(try rotated.item(named: item.name) == item) }
    }

    /// A schema 1 vault of a few thousand items (the fixture's, plus rows sealed by the schema 1
    /// rules documented in docs/format.md) is migrated by `vault ls` killed at random moments:
    /// each time the vault is either still schema 1, every row readable, or schema 3 with every
    /// item, never a mix.
    @Test func sigkillDuringTheMigrationLeavesTheOldOrTheNewVaultWhole() throws {
        let loc = try installFixture()
        let passcode = try Self.read("passcode.txt")
        let extra = 3000
        do {
            let store = try VaultStore.open(loc)
            let v1 = try store.unlock(passcode: try SecretBytes(copying: Array(passcode.utf8)), migrating: false)
            try v1.db.transaction {
                for i in 0..<extra {
                    let item = Item(name: "bulk-\(i)", username: "u\(i)", password: "p-\(i)", urls: ["https://\(i).example"],
                                    notes: "n\(i)", now: 1_700_000_000)
                    try v1.insertSchema1(item)
                }
            }
        }
        let pristine = box.home + "/v1-pristine.db"
        try FileManager.default.copyItem(atPath: loc.databasePath, toPath: pristine)
        let total = extra + (try Self.expectedItems()).count

        func restore() throws {
            for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: loc.databasePath + s) }
            try FileManager.default.copyItem(atPath: pristine, toPath: loc.databasePath)
            chmod(loc.databasePath, 0o600)
        }
        /// The schema the vault is in, after checking it is whole.
        func checkWhole(_ run: Int) throws -> Int {
            let store = try VaultStore.open(loc)
            let schema = try store.storedSchemaVersion()
            if schema == 1 {
                let v1 = try store.unlock(passcode: try SecretBytes(copying: Array(passcode.utf8)), migrating: false)
                #expect(try v1.schema1RowsThatOpen() == total, "run \(run): a schema 1 vault lost rows")
            } else {
                #expect(schema == VaultStore.schemaVersion, "run \(run)")
                let vault = try store.unlock(passcode: try SecretBytes(copying: Array(passcode.utf8)))
                var items = 0
                try vault.forEachItem { e in
                    guard case .item(let i) = e else { Issue.record("run \(run): a damaged row after the migration"); return }
                    if i.name.hasPrefix("bulk-") {
                        let n = i.name.dropFirst(5)
                        #expect(i.password == "p-\(n)" && i.notes == "n\(n)", "run \(run): \(i.name)")
                    }
                    items += 1
                }
                #expect(items == total, "run \(run)")
            }
            return schema
        }

        // One uninterrupted migration gives the time scale.
        let t0 = Date()
        #expect(reap(start(vaultBinary, ["ls", "--vault", "legacy", "--passcode-fd", "3"], env: box.env, fds: [3: passcode + "\n"])) == 0)
        var window = Date().timeIntervalSince(t0)
        #expect(try checkWhole(-1) == VaultStore.schemaVersion)

        var killed = 0, sawV1 = 0, sawV2 = 0
        for run in 0..<16 {
            try restore()
            let pid = start(vaultBinary, ["ls", "--vault", "legacy", "--passcode-fd", "3"], env: box.env, fds: [3: passcode + "\n"])
            usleep(useconds_t(Double.random(in: 0...window) * 1_000_000))
            kill(pid, SIGKILL)
            let status = reap(pid)
            if status == 128 + SIGKILL { killed += 1 } else {
                #expect(status == 0, "run \(run) ended with \(status)")
                window *= 0.7
            }
            if try checkWhole(run) == 1 { sawV1 += 1 } else { sawV2 += 1 }
        }
        print("sigkillDuringTheMigration: \(killed) of 16 runs killed; \(sawV1) left schema 1, \(sawV2) migrated")
        #expect(killed >= 8, "only \(killed) of 16 runs were killed")
        #expect(sawV1 > 0, "no kill landed before the migration committed")
    }
}

extension UnlockedVault {
    /// Inserts `item` as a schema 1 row: XChaCha20-Poly1305 over its JSON under the item key,
    /// associated data "vault-item-v1", vault id, item id, format version 1, generation
    /// (docs/format.md, "Schema 1").
    func insertSchema1(_ item: Item) throws {
        let id = randomBytes(16)
        var w = ByteWriter(label: "vault-item-v1")
        w.append(store.vaultID)
        w.append(id)
        w.append(UInt32(1))
        w.append(generation)
        let plain = try JSONEncoder().encode(item)
        let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: itemKey, associatedData: w.bytes) }
        try db.query("INSERT INTO items(id, name_mac, generation, nonce, sealed) VALUES(?,?,?,?,?)",
                     [.blob(id), .blob(try nameMAC(item.name)), .integer(generation), .blob(s.nonce), .blob(s.ciphertext)])
    }

    /// How many schema 1 rows open with this key.
    func schema1RowsThatOpen() throws -> Int {
        let scratch = try RecordScratch()
        return try db.query("SELECT id, name_mac, nonce, sealed, generation FROM items").filter { r in
            (try? openSchema1(id: r[0].bytes ?? [], nameMAC: r[1].bytes ?? [], nonce: r[2].bytes ?? [], sealed: r[3].bytes ?? [],
                              generation: r[4].int ?? -1, scratch: scratch)) != nil
        }.count
    }
}
