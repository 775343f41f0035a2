import Foundation
import Testing
@testable import VaultKit
@testable import VaultInterchange

/// export writes each item's JSON straight from its two opened records (`ReleasedRecords`,
/// `ExportJSON.write`). These tests hold it to the writer it replaced, kept here as the
/// reference (`ItemExportWriter`, the code of commit 7f51e18): the same bytes for odd items, and
/// the same records refused (with the same reasons) when records are damaged.
@Suite struct ExportRecordsTests {
    /// Text with everything JSON escapes or might: a quote, backslashes, a slash, U+2028 and
    /// U+2029, non-ASCII and an astral character, every control character and DEL.
    static let odd = "q\"uo\\te /slash\u{2028}\u{2029} é ☕ 𝄞 " + String((0..<32).map { Character(Unicode.Scalar(UInt8($0))) }) + "\u{7f}"

    /// Items with every item type, every custom field kind, every optional field present, empty
    /// and absent, times at the ends of Int64, and texts longer than the writer's 4 KiB pieces
    /// with escapes on both sides of a piece's edge.
    static var items: [Item] {
        var all = Item(name: "all " + odd, username: odd, password: odd, urls: ["https://a.example", odd, ""], notes: odd,
                       tags: ["t1", odd, ""], totp: "otpauth://totp/x?secret=JBSWY3DPEHPK3PXP", now: Int64.min)
        all.modified = Int64.max
        all.origin = "git"
        all.userPrompt = "login:\""
        all.passwordPrompt = odd
        all.fields = [CustomField(name: "site", kind: .text, value: odd), CustomField(name: "pin", kind: .hidden, value: odd),
                      CustomField(name: "u", kind: .url, value: "https://x"), CustomField(name: "second", kind: .totp, value: "otpauth://totp/y"),
                      CustomField(name: "empty", kind: .hidden, value: ""), CustomField(name: "", kind: .text, value: ""),
                      CustomField(name: "password", kind: .hidden, value: "custom, not the built-in"),
                      CustomField(name: "naïve \u{2028}", kind: .hidden, value: "v\u{2028}")]
        all.passwordHistory = [PasswordChange(password: "older\"", replaced: 50), PasswordChange(password: "", replaced: -5),
                               PasswordChange(password: odd, replaced: Int64.max)]
        var empty = Item(name: "empty strings", username: "", password: "", notes: "", now: 0)
        empty.origin = ""
        empty.userPrompt = ""
        empty.passwordPrompt = ""
        var ssh = Item(name: "ssh", type: .sshKey, now: 12)
        ssh.fields = [CustomField(name: "public-key", kind: .text, value: "ssh-ed25519 AAAAC3Nza comment"),
                      CustomField(name: "private-key", kind: .hidden, value: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----\n"),
                      CustomField(name: "confirm", kind: .text, value: "sign")]
        var guarded = Item(name: "guarded", password: "g", now: 1)
        guarded.fingerprintLogin = true
        let long = String(repeating: "x", count: 4093) + "\"\\\u{1}" + String(repeating: "y", count: 4094) + "\n" + String(repeating: "z", count: 9000)
        var items = [Item(name: "plain", now: 1), all, empty, ssh, guarded,
                     Item(name: "note ✓", type: .note, notes: long, now: 4),
                     Item(name: "card", type: .card, now: 6), Item(name: "identity", type: .identity, username: "Ünïcode", now: 8),
                     Item(name: "ss", type: .secretService, password: "s", now: 10),
                     Item(name: "long password", password: String(repeating: "p", count: 70_000) + "\\\\", now: 14),
                     Item(name: "eight", username: "1234567\"", password: "12345678", urls: ["12345678123456781234567\\"], now: 16)]
        items[6].fields = [CustomField(name: "number", kind: .hidden, value: "4111")]
        items[8].fields = [CustomField(name: "secret-service.label", kind: .text, value: "L")]
        for i in 0..<24 { items.append(Item(name: "n\(i)", password: String(repeating: "a", count: i) + "\"" + String(repeating: "b", count: i % 9), now: Int64(i))) }
        return items
    }

    /// The records of `item` as the vault seals them.
    static func records(_ item: Item) -> (overview: [UInt8], secrets: [UInt8]) {
        (OverviewRecord.encode(item), SecretsRecord.encode(item))
    }

    /// What the writer of before makes of two records, or why decoding refused them.
    static func before(_ overview: [UInt8], _ secrets: [UInt8]) -> Result<[UInt8], RecordFormatError> {
        overview.withUnsafeBytes { o in
            secrets.withUnsafeBytes { s in
                do throws(RecordFormatError) {
                    let decoded = try OverviewRecord.decode(o)
                    let lent = try ItemSecrets(checking: s, of: decoded.item)
                    var out: [UInt8] = []
                    ItemExportWriter.appendExportObject(decoded, lent, to: &out)
                    return .success(out)
                } catch {
                    return .failure(error)
                }
            }
        }
    }

    /// What export's writer makes of two records, or why `ReleasedRecords` refused them.
    static func after(_ overview: [UInt8], _ secrets: [UInt8]) throws -> Result<[UInt8], RecordFormatError> {
        let out = try SecretOutput(capacity: 64)
        let records: Result<Void, RecordFormatError> = overview.withUnsafeBytes { o in
            secrets.withUnsafeBytes { s in
                do throws(RecordFormatError) {
                    ExportJSON.write(try ReleasedRecords(overview: o, secrets: s), to: out)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
        }
        switch records {
        case .success: return .success(try out.withUnsafeBytes { Array($0) })
        case .failure(let error): return .failure(error)
        }
    }

    @Test func theRecordsWriterWritesWhatTheItemWriterWrote() throws {
        for item in Self.items {
            let (o, s) = Self.records(item)
            let old = try Self.before(o, s).get(), new = try Self.after(o, s).get()
            #expect(new == old, "\(item.name.prefix(20))")
            #expect(String(decoding: new, as: UTF8.self) == JSONText.text(VaultJSON.object(item)), "\(item.name.prefix(20)): the whole item's text")
        }
    }

    /// Records no item of today encodes, which a file could still hold: no type (a login), no
    /// times (0), a secret custom field without its value, two secret fields of one name, and
    /// names whose bytes differ but whose strings are equal (NFC and NFD, the Kelvin sign).
    @Test func oddRecordsAreWrittenAsBefore() throws {
        var w = RecordWriter(kind: .overview)
        w.field(OverviewRecord.name, "bare")
        w.field(OverviewRecord.flags, [0])
        let bare = w.bytes
        let none = [RecordWriter.version, RecordKind.secrets.rawValue]
        #expect(try Self.after(bare, none).get() == Self.before(bare, none).get())
        #expect(String(decoding: try Self.after(bare, none).get(), as: UTF8.self).contains(#""created":0,"#))

        for (overviewName, secretsName) in [("é", "e\u{301}"), ("e\u{301}", "é"), ("K", "\u{212A}"), ("\u{212A}", "K"), ("dup", "dup"), ("a", "b")] {
            var item = Item(name: "names", password: "p", now: 1)
            item.fields = [CustomField(name: overviewName, kind: .hidden, value: ""), CustomField(name: overviewName, kind: .totp, value: ""),
                           CustomField(name: "missing", kind: .hidden, value: "")]
            var holder = item
            holder.fields = [CustomField(name: secretsName, kind: .hidden, value: "secret of \(secretsName)")]
            let o = OverviewRecord.encode(item), s = SecretsRecord.encode(holder)
            let old = Self.before(o, s), new = try Self.after(o, s)
            switch (old, new) {
            case (.success(let a), .success(let b)): #expect(a == b, "\(overviewName) / \(secretsName)")
            case (.failure(let a), .failure(let b)): #expect(a == b, "\(overviewName) / \(secretsName)")
            default: Issue.record("\(overviewName) / \(secretsName): before \(old), after \(new)")
            }
        }
    }

    /// Damaged records (bytes flipped, set, cut, inserted or dropped; fields dropped, repeated,
    /// swapped, retagged; texts made invalid UTF-8): whatever decoding refused is refused, for
    /// the same reason, and whatever it read is written as before.
    @Test func damagedRecordsAreRefusedAsBefore() throws {
        var rng = SplitMix(seed: 27)
        var accepted = 0, refused = 0
        for item in Self.items where item.name.utf8.count < 200 && (item.password?.utf8.count ?? 0) < 1000 && (item.notes?.utf8.count ?? 0) < 1000 {
            let (o, s) = Self.records(item)
            for round in 0..<400 {
                var mo = o, ms = s
                switch round % 3 {
                case 0: Self.damage(&mo, &rng)
                case 1: Self.damage(&ms, &rng)
                default: Self.damage(&mo, &rng); Self.damage(&ms, &rng)
                }
                let old = Self.before(mo, ms), new = try Self.after(mo, ms)
                switch (old, new) {
                case (.success(let a), .success(let b)):
                    accepted += 1
                    #expect(a == b, "\(item.name.prefix(20)) round \(round)")
                case (.failure(let a), .failure(let b)):
                    refused += 1
                    #expect(a == b, "\(item.name.prefix(20)) round \(round)")
                default:
                    Issue.record("\(item.name.prefix(20)) round \(round): before \(old), after \(new); \(mo) \(ms)")
                }
            }
        }
        #expect(accepted > 500 && refused > 500, "both kinds seen: \(accepted) read, \(refused) refused")
    }

    /// One damage to a record, chosen by `rng`.
    static func damage(_ r: inout [UInt8], _ rng: inout SplitMix) {
        func at(_ n: Int) -> Int { Int(rng.next() % UInt64(max(n, 1))) }
        func byte() -> UInt8 { UInt8(truncatingIfNeeded: rng.next()) }
        guard r.count > 2 else { r.append(byte()); return }
        switch rng.next() % 10 {
        case 0 where !r.isEmpty: r[at(r.count)] ^= 1 << UInt8(rng.next() % 8)
        case 1 where !r.isEmpty: r[at(r.count)] = byte()
        case 2: r.removeSubrange(at(r.count + 1)...)
        case 3: r.insert(byte(), at: at(r.count + 1))
        case 4 where !r.isEmpty: r.remove(at: at(r.count))
        case 5 where r.count > 2:
            // A text byte made one UTF-8 refuses: a lone continuation, an overlong or surrogate lead, 0xFF.
            r[2 + at(r.count - 2)] = [0x80, 0xC0, 0xED, 0xF5, 0xFF, 0xE0][at(6)]
        default:
            guard var fields = Self.fields(r) else { r[at(r.count)] ^= 0x40; return }
            guard !fields.isEmpty else { fields.append((UInt8(at(16)), [byte()])); r = Self.encode(r, fields); return }
            let i = at(fields.count)
            switch rng.next() % 5 {
            case 0: fields.remove(at: i)
            case 1: fields.insert(fields[i], at: i)
            case 2 where fields.count > 1: fields.swapAt(i, (i + 1) % fields.count)
            case 3: fields[i].tag = UInt8(at(16))
            default: fields[i].value = Array(fields[i].value.prefix(at(fields[i].value.count + 1))) + (rng.next() % 2 == 0 ? [] : [byte()])
            }
            r = Self.encode(r, fields)
        }
    }

    /// A record's fields, nil when it does not parse.
    static func fields(_ r: [UInt8]) -> [(tag: UInt8, value: [UInt8])]? {
        guard r.count >= 2 else { return nil }
        var out: [(tag: UInt8, value: [UInt8])] = [], i = 2
        while i < r.count {
            let tag = r[i]
            i += 1
            var n = 0, shift = 0
            while true {
                guard i < r.count, shift < 35 else { return nil }
                n |= Int(r[i] & 0x7f) << shift
                i += 1
                if r[i - 1] & 0x80 == 0 { break }
                shift += 7
            }
            guard n <= r.count - i else { return nil }
            out.append((tag, Array(r[i..<(i + n)])))
            i += n
        }
        return out
    }

    /// `r`'s header with `fields`.
    static func encode(_ r: [UInt8], _ fields: [(tag: UInt8, value: [UInt8])]) -> [UInt8] {
        var w = RecordWriter(kind: r.count > 1 && r[1] == RecordKind.secrets.rawValue ? .secrets : .overview)
        for f in fields { w.field(f.tag, f.value) }
        var bytes = w.bytes
        bytes[0] = r.first ?? bytes[0]
        return bytes
    }

    /// Rows the vault cannot read are counted, not written: an overview or secrets record that
    /// fails authentication, and a secrets record that authenticates but holds a value for a
    /// field its overview does not have; every other item is lent once, as before.
    @Test func theVaultLendsTheReadableRowsAndReportsTheDamagedOnes() throws {
        let root = TempRoot()
        let vault = try VaultStore.create(at: try root.location(), passcode: try secret("correct horse"), kdf: fastKDF).vault
        // (A vault refuses control characters in a name: the odd one goes.)
        let items = Self.items.filter { !$0.fingerprintLogin }.map { item in
            var item = item
            if item.name.hasPrefix("all ") { item.name = "all" }
            return item
        }
        #expect(try vault.add(contentsOf: items, replace: false) == items.count)
        for name in ["overview", "secrets", "stray"] { try vault.add(Item(name: name, password: "v", now: 2)) }
        func rowOf(_ name: String) throws -> [SQLValue] {
            try #require(try vault.db.query("SELECT id, overview, secrets, overview_nonce FROM items WHERE name_mac=?", [.blob(vault.nameMAC(name))]).first)
        }
        var flipped = try #require(try rowOf("overview")[1].bytes)
        flipped[5] ^= 1
        try vault.db.query("UPDATE items SET overview=? WHERE name_mac=?", [.blob(flipped), .blob(vault.nameMAC("overview"))])
        flipped = try #require(try rowOf("secrets")[2].bytes)
        flipped[5] ^= 1
        try vault.db.query("UPDATE items SET secrets=? WHERE name_mac=?", [.blob(flipped), .blob(vault.nameMAC("secrets"))])
        // A secrets record sealed with the vault's key for a custom field the overview lacks.
        let stray = try rowOf("stray")
        var holder = Item(name: "stray", password: "v", now: 2)
        holder.fields = [CustomField(name: "pin", kind: .hidden, value: "1")]
        let sealed = try SecretsRecord.encode(holder).withUnsafeBytes {
            try AEAD.seal($0, key: vault.itemKey, associatedData: vault.recordAD(id: stray[0].bytes!, kind: .secrets, generation: vault.generation,
                                                                                  overviewNonce: stray[3].bytes!))
        }
        try vault.db.query("UPDATE items SET secrets=?, secrets_nonce=? WHERE name_mac=?", [.blob(sealed.ciphertext), .blob(sealed.nonce), .blob(vault.nameMAC("stray"))])
        let damagedIDs = try ["overview", "secrets", "stray"].map { hexString(try rowOf($0)[0].bytes!) }

        var written: [String] = [], damaged: [String] = []
        try vault.releaseEachRecords(command: "export", freshMatch: nil) { e in
            switch e {
            case .item(let records):
                let out = try SecretOutput()
                ExportJSON.write(records, to: out)
                written.append(try out.withUnsafeBytes { String(decoding: $0, as: UTF8.self) })
            case .damaged(let id): damaged.append(id)
            }
        }
        #expect(written == items.map { JSONText.text(VaultJSON.object($0)) })
        #expect(damaged == damagedIDs)
    }

    /// The export of the fixture's items is the one the build before printed (the file).
    @Test func theFixtureExportsAsBefore() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/export")
        let items = try VaultJSON.items(from: Array(try Data(contentsOf: folder.appendingPathComponent("odd-items.json"))), now: 0)
        let expected = Array(try Data(contentsOf: folder.appendingPathComponent("odd-expected.json")))
        let root = TempRoot()
        let vault = try VaultStore.create(at: try root.location(), passcode: try secret("correct horse"), kdf: fastKDF).vault
        #expect(try vault.add(contentsOf: items, replace: false) == items.count)
        let out = try SecretOutput()
        out.append("[")
        var first = true
        try vault.releaseEachRecords(command: "export", freshMatch: nil) { e in
            guard case .item(let records) = e else { Issue.record("damaged"); return }
            if !first { out.append(",\n") }
            first = false
            ExportJSON.write(records, to: out)
        }
        out.append("]\n")
        try out.withUnsafeBytes { #expect(Array($0) == expected) }
    }
}

/// A small deterministic generator (SplitMix64), so a failing case can be run again.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The export writer of commit 7f51e18, over a decoded overview and its lent secrets, kept as
/// the reference `ExportRecordsTests` compares the records writer with.
enum ItemExportWriter {
    static func appendExportObject<Out: JSONOutput>(_ overview: ItemOverview, _ secrets: ItemSecrets, to out: inout Out) {
        let item = overview.item
        func text(_ key: StaticString, _ value: String?) {
            guard let value else { return }
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            JSONText.appendString(value, to: &out)
        }
        func secret(_ key: StaticString, _ value: UnsafeRawBufferPointer?) {
            guard let value else { return }
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            JSONText.appendString(bytes: value, to: &out)
        }
        func texts(_ key: StaticString, _ values: [String]) {
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            out.append(UInt8(ascii: "["))
            for (i, v) in values.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(v, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(ascii: #"{"created":"#)
        out.append(ascii: String(item.created))
        if !item.fields.isEmpty {
            out.append(ascii: #","fields":["#)
            for (i, f) in item.fields.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                text(#"{"kind":"#, f.kind.rawValue)
                text(#","name":"#, f.name)
                if f.kind.isSecret {
                    out.append(ascii: #","value":"#)
                    if let v = secrets.value(of: .custom(f.name)) { JSONText.appendString(bytes: v, to: &out) } else { JSONText.appendString("", to: &out) }
                } else {
                    text(#","value":"#, f.value)
                }
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(ascii: item.fingerprintLogin ? #","fingerprint_login":true"# : #","fingerprint_login":false"#)
        out.append(ascii: #","modified":"#)
        out.append(ascii: String(item.modified))
        text(#","name":"#, item.name)
        secret(#","notes":"#, secrets.value(of: .notes))
        text(#","origin":"#, item.origin)
        secret(#","password":"#, secrets.value(of: .password))
        var formerPasswords = 0
        secrets.forEachFormerPassword { replaced, password in
            out.append(ascii: formerPasswords == 0 ? #","password_history":["# : ",")
            formerPasswords += 1
            secret(#"{"password":"#, password)
            out.append(ascii: #","replaced":"#)
            out.append(ascii: String(replaced))
            out.append(UInt8(ascii: "}"))
        }
        if formerPasswords > 0 { out.append(UInt8(ascii: "]")) }
        text(#","password_prompt":"#, item.passwordPrompt)
        texts(#","tags":"#, item.tags)
        secret(#","totp":"#, secrets.value(of: .totp))
        text(#","type":"#, item.type.rawValue)
        texts(#","urls":"#, item.urls)
        text(#","user_prompt":"#, item.userPrompt)
        text(#","username":"#, item.username)
        out.append(UInt8(ascii: "}"))
    }
}
