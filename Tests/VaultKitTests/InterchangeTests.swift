import Foundation
import Testing
@testable import VaultKit
@testable import VaultInterchange
import VaultOTP

/// The pieces importers stand on: RFC 4180 CSV, the JSON element scanner, and one-time codes at
/// fixed times cross-checked with oathtool (an independent implementation, Debian's `oathtool`).
@Suite struct InterchangeTests {
    @Test func csvFollowsRFC4180() throws {
        var r = CSVReader(Array("\u{FEFF}a,b,c\r\n\"x,1\",\"he said \"\"hi\"\"\",\"two\r\nlines\"\n,,\n\nlast,row,here".utf8))
        #expect(try r.next()?.fields == ["a", "b", "c"])
        let row = try #require(try r.next())
        #expect(row.fields == ["x,1", "he said \"hi\"", "two\r\nlines"] && row.line == 2)
        #expect(try r.next()?.fields == ["", "", ""])
        let last = try #require(try r.next())
        #expect(last.fields == ["last", "row", "here"] && last.line == 6)
        #expect(try r.next() == nil)
        var bad = CSVReader(Array("a\n\"open".utf8))
        _ = try bad.next()
        #expect(throws: VaultError.self) { try bad.next() }
        #expect(CSVReader.quote("a,\"b\"") == "\"a,\"\"b\"\"\"" && CSVReader.quote("plain") == "plain")
    }

    @Test func jsonScanSplitsWithoutDecoding() throws {
        let text = Array(#" [ {"a": "x]y,z"}, [1, [2]], "s\"q", 3 , null ] "#.utf8)
        let parts = try JSONScan.elements(text).map { String(decoding: text[$0], as: UTF8.self) }
        #expect(parts == [#"{"a": "x]y,z"}"#, "[1, [2]]", #""s\"q""#, "3", "null"])
        let members = try JSONScan.members(Array(#"{"k": [1], "e\u0041": {}}"#.utf8)).map(\.key)
        #expect(members == ["k", "eA"])
        #expect(throws: JSONScan.Malformed.self) { try JSONScan.elements(Array("[1, 2".utf8)) }
        #expect(throws: JSONScan.Malformed.self) { try JSONScan.elements(Array("[1] x".utf8)) }
    }

    /// `bytes` handed out `size` at a time (a stream's chunks).
    static func chunks(_ bytes: [UInt8], _ size: Int) -> () -> [UInt8]? {
        var at = 0
        return {
            guard at < bytes.count else { return nil }
            defer { at += size }
            return Array(bytes[at..<min(bytes.count, at + size)])
        }
    }

    /// The CSV reader gives the same rows whatever the chunks its input arrives in (a doubled quote,
    /// a CRLF or the byte order mark cut between two), and refuses a row past its bound as soon
    /// as it passes it, without reading the rest.
    @Test func csvReadsChunksAndBoundsARow() throws {
        let text = Array("\u{FEFF}a,b,c\r\n\"x,1\",\"he said \"\"hi\"\"\",\"two\r\nlines\"\n,,\n\nlast,row,here".utf8)
        var whole = CSVReader(text), expected: [[String]] = []
        while let row = try whole.next() { expected.append(row.fields) }
        #expect(expected.count == 4)
        for size in 1...7 {
            var r = CSVReader(prefix: [], read: Self.chunks(text, size))
            var rows: [[String]] = []
            while let row = try r.next() { rows.append(row.fields) }
            #expect(rows == expected, "chunks of \(size)")
        }
        var reads = 0
        var long = CSVReader(prefix: Array("a,b\n".utf8), rowLimit: 100) {
            reads += 1
            return reads > 1000 ? nil : Array(repeating: UInt8(ascii: "x"), count: 10)
        }
        #expect(try long.next()?.fields == ["a", "b"])
        #expect { _ = try long.next() } throws: { ($0 as? VaultError)?.message.contains("line 2 is larger than") == true }
        #expect(reads <= 11, "the row is refused once it passes the bound (\(reads) chunks read)")
    }

    /// The streaming JSON reader walks objects and arrays one value at a time across any chunk
    /// boundary, passes over a value of any size without holding it, refuses one value over its
    /// limit and nesting over `JSONDepth.limit`.
    @Test func jsonStreamWalksValuesAndKeepsItsBounds() throws {
        let text = Array(#" {"a": [1, {"k": "v,]"}, "s\"q"], "big": "\#(String(repeating: "x", count: 5000))", "e\u0041": {} } "#.utf8)
        for size in [1, 2, 3, 64, text.count] {
            let r = JSONStreamReader(read: Self.chunks(text, size))
            var seen: [String] = []
            try r.eachMember { key in
                seen.append(key)
                switch key {
                case "a": try r.eachElement { seen.append(String(decoding: try r.value(limit: 100), as: UTF8.self)) }
                case "big": try r.skip()
                default: #expect(try r.value(limit: 2) == Array("{}".utf8))
                }
            }
            try r.finish()
            #expect(seen == ["a", "1", #"{"k": "v,]"}"#, #""s\"q""#, "big", "eA"], "chunks of \(size)")
        }
        let big = JSONStreamReader(read: Self.chunks(text, 16))
        try big.enterObject()
        _ = try big.nextKey()
        try big.skip()
        #expect(try big.nextKey() == "big")
        #expect(throws: JSONValueTooLarge.self) { try big.value(limit: 1000) }
        let deep = JSONStreamReader(prefix: Array((String(repeating: "[", count: 40) + String(repeating: "]", count: 40)).utf8)) { nil }
        try deep.enterArray()
        #expect(throws: JSONScan.Malformed.self) { _ = try deep.nextElement() ? try deep.value(limit: 1000) : [] }
        for bad in [#"{"a" 1}"#, #"{"a":1,}"#, "[1,]", "[1 2]", #"{"a":1} x"#] {
            let r = JSONStreamReader(prefix: Array(bad.utf8)) { nil }
            #expect(throws: JSONScan.Malformed.self, "\(bad)") {
                if bad.hasPrefix("{") { try r.eachMember { _ in try r.skip() } } else { try r.eachElement { try r.skip() } }
                try r.finish()
            }
        }
    }

    /// vault's own JSON refuses an element over `ImportLimits.item`, streamed or whole, naming it;
    /// one item of many small fields is refused by what it would hold, not only by its text; an
    /// item of another manager's JSON by the values it holds (`ImportLimits.jsonValues`).
    @Test func anItemOverTheLimitIsRefusedByEveryReader() throws {
        let note = String(repeating: "n", count: ImportLimits.item)
        let text = Array((#"[{"name":"a"},{"name":"b","notes":""# + note + #""}]"#).utf8)
        var stream = JSONArrayStream(read: Self.chunks(text, 4096))
        #expect { _ = try VaultJSON.batch(from: &stream, now: 1) } throws: { ($0 as? VaultError)?.message.hasPrefix("item 2 is larger than 1 MiB") == true }
        #expect { _ = try VaultJSON.batch(from: text, now: 1) } throws: { ($0 as? VaultError)?.message.hasPrefix("item 2 is larger than 1 MiB") == true }
        // 12,000 fields of one byte: 60 KB of CSV, but 1.5 MB as an item.
        let columns = (0..<12_000).map { "c\($0)" }
        let csv = Array(("name,url,username,password," + columns.joined(separator: ",") + "\nx,u,v,p," + Array(repeating: "1", count: 12_000).joined(separator: ",") + "\n").utf8)
        #expect { _ = try ForeignCSV.read(csv, format: .chromeCSV, now: 1) } throws: { ($0 as? VaultError)?.message.hasPrefix("line 2 is larger than 1 MiB") == true }
        let bitwarden = Array((#"{"items":[{"type":2,"name":"n","notes":""# + note + #""}]}"#).utf8)
        #expect { _ = try BitwardenJSON.read(bitwarden, now: 1) } throws: { ($0 as? VaultError)?.message.hasPrefix("entry 1 (line 1) is larger than 1 MiB") == true }
        // 7,000 objects of one key: 56 KB of text, 21,000 values for Foundation's decoder.
        let objects = Array((#"{"items":[{"type":2,"name":"n","x":["# + Array(repeating: #"{"a":1}"#, count: 7000).joined(separator: ",") + "]}]}").utf8)
        #expect { _ = try BitwardenJSON.read(objects, now: 1) } throws: { ($0 as? VaultError)?.message.hasPrefix("entry 1 (line 1) holds more than 20000 JSON values") == true }
        let pux = Array((#"{"accounts":[{"vaults":[{"items":[{"overview":{},"details":{"x":["# + Array(repeating: "[]", count: 21000).joined(separator: ",") + "]}}]}]}]}").utf8)
        #expect { _ = try OnePUX.read(exportData: pux, now: 1) } throws: { ($0 as? VaultError)?.message.hasPrefix("entry 1 holds more than 20000 JSON values") == true }
        #expect(try BitwardenJSON.read(Array((#"{"items":[{"type":2,"name":"n","x":["# + Array(repeating: "1", count: 19000).joined(separator: ",") + "]}]}").utf8), now: 1).items.count == 1)
    }

    /// Folders named after the items (as vault's own Bitwarden export writes them), and a 1PUX
    /// vault's name after its items, still become the items' tags, in the order they had.
    @Test func foldersAndVaultNamesMayComeAfterTheItems() throws {
        let bw = Array(#"{"items":[{"type":1,"name":"a","folderId":"f1","collectionIds":["c1"],"favorite":true},{"type":2,"name":"b"}],"#.utf8)
            + Array(#""folders":[{"id":"f1","name":"Work"}],"collections":[{"id":"c1","name":"Team"}],"encrypted":false}"#.utf8)
        let items = try BitwardenJSON.read(bw, now: 1).items
        #expect(items.map(\.tags) == [["Work", "Team", "favorite"], []])
        let pux = Array(#"{"accounts":[{"vaults":[{"items":[{"overview":{"title":"x","tags":["t"]},"details":{}}],"attrs":{"name":"Personal"}}]}]}"#.utf8)
        #expect(try OnePUX.read(exportData: pux, now: 1).items.map(\.tags) == [["Personal", "t"]])
    }

    /// A thousand items of one name become `name`, `name (2)`, ... `name (1000)` in as many
    /// steps, and an item's duplicate field names likewise.
    @Test func manyItemsOfOneNameAreNumberedInTurn() throws {
        var batch = ImportBatch()
        for _ in 0..<1000 { try batch.add(Item(name: "same", fields: [CustomField(name: "f", value: "1"), CustomField(name: "f", value: "2")], now: 1), entry: "e") }
        #expect(batch.items.first?.name == "same" && batch.items.last?.name == "same (1000)" && Set(batch.items.map(\.name)).count == 1000)
        #expect(batch.items[7].fields.map(\.name) == ["f", "f (2)"] && batch.renamed == 999)
    }

    @Test(arguments: [("sha1", HMACAlgorithm.sha1), ("sha256", .sha256), ("sha512", .sha512)])
    func codesMatchOathtool(_ name: String, _ algorithm: HMACAlgorithm) throws {
        let secret = Array("a secret of thirty-two bytes....".utf8) + [0xFF]
        let b32 = Base32.encode(secret)
        for (time, period, digits) in [(0, 30, 6), (1_111_111_111, 30, 8), (1_700_000_000, 60, 7), (4_102_444_800, 15, 6)] {
            let oath = try oathtool(["--totp=\(name)", "--base32", "--digits=\(digits)", "--time-step-size=\(period)s", "--now=@\(time)", b32])
            #expect(try OTP.totp(secret: secret, time: Int64(time), period: period, digits: digits, algorithm: algorithm) == oath, "\(name) at \(time)")
        }
        // oathtool's HOTP is HMAC-SHA-1 only (RFC 4226); the other hashes are checked through TOTP above.
        for counter in algorithm == .sha1 ? [0, 1, 99, 1 << 33] : [] {
            let oath = try oathtool(["--hotp", "--base32", "--counter=\(counter)", "--digits=8", b32])
            let mine = try OTP.hotp(secret: secret, counter: UInt64(counter), digits: 8, algorithm: algorithm)
            #expect(mine == oath, "HOTP \(name) counter \(counter)")
        }
    }

    @Test func hotpCodeAdvancesTheStoredCounter() throws {
        let item = Item(name: "h", totp: "otpauth://hotp/h?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&counter=3&digits=6")
        let code = try OTP.code(for: item)
        #expect(code.code == "969429" && code.secondsRemaining == nil)
        #expect(code.advancedURI == "otpauth://hotp/h?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&counter=4&digits=6")
        let totp = try OTP.code(for: Item(name: "t", totp: "otpauth://totp/t?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"),
                                at: Date(timeIntervalSince1970: 59))
        #expect(totp.code == "287082" && totp.secondsRemaining == 1 && totp.period == 30)
        #expect(throws: VaultError.self) { try OTP.code(for: Item(name: "none")) }
    }

    private func oathtool(_ args: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/oathtool")
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        try #require(p.terminationStatus == 0, "oathtool \(args)")
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
