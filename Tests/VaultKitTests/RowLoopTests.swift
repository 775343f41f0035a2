import Foundation
import Testing
@testable import VaultKit

/// The loops over every item row (listings, search, export, repair, rotation) read each column
/// in place from the statement and build the associated data in one reused buffer: what they
/// read, open, report and write is what reading `[SQLValue]` rows and building an array per
/// record did.
@Suite struct RowLoopTests {
    let root = TempRoot()

    func makeVault() throws -> UnlockedVault {
        try VaultStore.create(at: try root.location(), passcode: try secret("correct horse"), kdf: fastKDF).vault
    }

    /// Items that differ in every column a listing reads: names with accents and capitals, URLs,
    /// tags, a record larger than the loops' first buffers.
    static var items: [Item] {
        var big = Item(name: "Big", username: "b", password: String(repeating: "p", count: 6000), urls: ["https://b.example"], now: 3)
        big.notes = String(repeating: "n", count: 9000)
        big.tags = (0..<300).map { "tag\($0)" }
        return [ReleasedSecretsTests.full, Item(name: "café ☕", username: "Ünïcode", password: "x", now: 1),
                Item(name: "alpha", username: "a", urls: ["https://EX.example"], now: 2), big]
    }

    @Test(arguments: [0, 1, 16, 300])
    func theReusedAssociatedDataIsWhatRecordADBuilds(idLength: Int) throws {
        let vault = try makeVault()
        let buffer = RecordADBuffer()
        let id = randomBytes(idLength), nonce = randomBytes(24)
        for generation: Int64 in [1, -1, .max, 0x0102030405060708] {
            for kind in [RecordKind.overview, .secrets] {
                let reused = id.withUnsafeBytes { i in
                    nonce.withUnsafeBytes { n in
                        Array(buffer.bytes(prefix: vault.recordADPrefix, id: i, kind: kind, generation: generation, overviewNonce: n))
                    }
                }
                #expect(reused == vault.recordAD(id: id, kind: kind, generation: generation, overviewNonce: nonce), "\(kind) \(generation)")
            }
        }
    }

    /// The in-place UTF-8 check accepts exactly what `String(validating:)` accepts, and a
    /// record's text is the String it makes: every one-
    /// and two-byte string, the edges of every three- and four-byte form, and random strings
    /// with and without an ASCII run before them (the check reads eight ASCII bytes at a time).
    @Test func theInPlaceUTF8CheckAcceptsWhatStringsAccept() {
        func agree(_ bytes: [UInt8]) -> Bool {
            let inPlace = bytes.withUnsafeBytes { RecordReader.isUTF8($0) }
            let strings = String(validating: bytes, as: UTF8.self)
            // A record's text is that String, or refused when there is none.
            let text = bytes.withUnsafeBytes { try? RecordReader.text($0) }
            return inPlace == (strings != nil) && text == strings
        }
        var disagreements: [[UInt8]] = []
        func check(_ bytes: [UInt8]) { if !agree(bytes) { disagreements.append(bytes) } }
        for a in 0...255 {
            check([UInt8(a)])
            for b in 0...255 { check([UInt8(a), UInt8(b)]) }
        }
        let edges: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]
        for a in 0xC0...0xFF {
            for b in edges {
                for c in edges {
                    check([UInt8(a), b, c])
                    for d in edges { check([UInt8(a), b, c, d]) }
                }
            }
        }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let run = [UInt8](repeating: 0x61, count: Int.random(in: 0...17, using: &rng))
            let tail = (0..<Int.random(in: 0...9, using: &rng)).map { _ in Bool.random(using: &rng) ? edges.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng) }
            check(run + tail)
            check(tail + run)
        }
        check(Array("plain ascii, more than eight bytes long".utf8))
        check(Array("café ☕ 𝄞 — 中文".utf8))
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
    }

    /// `Statement.bytes` and `integer` read each kind of value as `SQLValue.bytes` and `.int`
    /// read the row `next` makes (a text to its NUL with bad UTF-8 repaired, a float as nothing).
    @Test func columnsReadInPlaceAreWhatTheArrayRowsHold() throws {
        let vault = try makeVault()
        let sql = "SELECT x'00ff10', 'a' || char(0) || 'b', CAST('caf' || x'ff' AS TEXT), 7, NULL, x'', 2.5, '', -9"
        let whole = try #require(try vault.db.query(sql).first)
        let statement = try vault.db.prepare(sql)
        #expect(try statement.step())
        #expect(statement.columnCount == Int32(whole.count))
        for (c, value) in whole.enumerated() {
            #expect(Array(statement.bytes(Int32(c))) == value.bytes ?? [], "column \(c)")
            #expect(statement.integer(Int32(c)) == value.int, "column \(c)")
        }
        #expect(try !statement.step())
    }

    /// Every loop over the rows gives what the items hold, and reports a damaged row (by its
    /// id) in its place: the listing of records, of decoded overviews, with a search term, the
    /// export's stream, repair's list, and a rotation that refuses to run over it.
    @Test func everyLoopReadsTheRowsAndReportsTheDamagedOne() throws {
        let vault = try makeVault()
        for item in Self.items { try vault.add(item) }
        try vault.add(Item(name: "victim", password: "v", now: 4))
        let mac = try vault.nameMAC("victim")
        let row = try #require(try vault.db.query("SELECT id, overview FROM items WHERE name_mac=?", [.blob(mac)]).first)
        var flipped = try #require(row[1].bytes)
        flipped[3] ^= 1
        try vault.db.query("UPDATE items SET overview=? WHERE name_mac=?", [.blob(flipped), .blob(mac)])
        let damagedID = hexString(try #require(row[0].bytes))

        var names: [String] = [], damaged: [String] = []
        try vault.forEachOverviewRecord { e in
            switch e {
            case .record(let plain): names.append(try ItemOverview.checkedName(ofRecord: plain))
            case .damaged(let id): damaged.append(id)
            }
        }
        #expect(names.sorted() == Self.items.map(\.name).sorted())
        #expect(damaged == [damagedID])

        var overviews: [Item] = []
        damaged = []
        try vault.forEachOverview(matching: nil) { e in
            switch e {
            case .item(let o): overviews.append(o.item)
            case .damaged(let id): damaged.append(id)
            }
        }
        #expect(overviews.sorted { $0.name < $1.name } == Self.items.map { $0.withholdingSecrets(except: .fields([])) }.sorted { $0.name < $1.name })
        #expect(damaged == [damagedID])

        var found: [String] = []
        try vault.forEachOverview(matching: "ex") { e in if case .item(let o) = e { found.append(o.item.name) } }
        #expect(found.sorted() == ["Big", "alpha", "db"])
        found = []
        try vault.forEachOverviewRecord(matching: "CAFÉ") { e in if case .record(let p) = e { found.append(try ItemOverview.name(ofRecord: p)) } }
        #expect(found == ["café ☕"])
        // The name, the username, URLs and tags are searched; never the notes, a password, a custom field.
        for (term, names) in [("ADMIN", ["db"]), ("tag299", ["Big"]), ("prod", ["db"]), ("line1", []), ("1234", []), ("pppp", []), ("eu", [])] {
            found = []
            try vault.forEachOverviewRecord(matching: term) { e in if case .record(let p) = e { found.append(try ItemOverview.name(ofRecord: p)) } }
            #expect(found.sorted() == names, "\(term)")
        }

        var exported: [Item] = []
        damaged = []
        try vault.releaseEach(command: "export", freshMatch: nil) { e in
            switch e {
            case .item(let item): exported.append(item)
            case .damaged(let id): damaged.append(id)
            }
        }
        #expect(exported.sorted { $0.name < $1.name } == Self.items.sorted { $0.name < $1.name })
        #expect(damaged == [damagedID])
        #expect(try vault.damagedRows() == [damagedID])

        #expect(throws: VaultError.corrupt("1 damaged item row(s) (\(damagedID)) cannot be re-sealed; nothing was changed (list them with 'vault repair', remove them with 'vault repair --remove')")) {
            _ = try vault.rotate(passcode: try secret("correct horse"), kdf: nil, recovery: .keep, authority: nil)
        }
        #expect(try vault.removeDamagedRows([damagedID]) == 1)
    }

    /// A rotation re-seals every row from its batch buffer: every item reads as before under the
    /// new keys, with its index entry and login hint rewritten, and no row keeps a nonce or a
    /// sealed record of before.
    @Test func aRotationReSealsEveryRowInPlace() throws {
        let vault = try makeVault()
        var guarded = Item(name: "guarded", password: "g", now: 5)
        guarded.fingerprintLogin = true
        let items = Self.items + [guarded] + (0..<600).map { Item(name: "bulk\($0)", password: "p\($0)", now: 6) }
        #expect(try vault.add(contentsOf: items, replace: false) == items.count)
        let before = try vault.db.query("SELECT id, overview_nonce, overview, secrets_nonce, secrets, name_mac FROM items")
        try vault.db.query("UPDATE items SET login_hint=NULL")
        var progress: [Int] = []
        let result = try vault.rotate(passcode: try secret("correct horse"), kdf: nil, recovery: .keep, authority: nil,
                                      progress: { done, total in progress.append(done); #expect(total == items.count) })
        #expect(result.items == items.count)
        #expect(progress.last == items.count)
        let fresh = result.vault
        let token = try fresh.tokenOfItsOwnProofKey(for: .releaseAll)
        let all = try fresh.releaseAll(command: "export", freshMatch: token).map { e -> Item in
            guard case .item(let item) = e else { Issue.record("damaged"); return Item(name: "?", now: 0) }
            return item
        }
        #expect(all.sorted { $0.name < $1.name } == items.sorted { $0.name < $1.name })
        for item in items { #expect(try fresh.item(named: item.name) == item) }
        let after = try fresh.db.query("SELECT id, overview_nonce, overview, secrets_nonce, secrets, name_mac, generation, login_hint FROM items")
        #expect(after.count == before.count)
        let old = Dictionary(uniqueKeysWithValues: before.map { (hexString($0[0].bytes!), $0) })
        for r in after {
            let was = try #require(old[hexString(r[0].bytes!)])
            for c in 1...5 { #expect(r[c].bytes != was[c].bytes, "column \(c) rewritten") }
            #expect(r[6].int == fresh.generation)
        }
        let hints = try fresh.db.query("SELECT login_hint, count(*) FROM items GROUP BY login_hint ORDER BY login_hint").map { [$0[0].int, $0[1].int] }
        #expect(hints == [[0, Int64(items.count - 1)], [1, 1]])
        #expect(try fresh.damagedRows().isEmpty)
    }
}
