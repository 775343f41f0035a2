import Testing
@testable import VaultAgent
import VaultKit

/// The overview index's one block: records sorted by name behind LEB128 lengths, a sparse table of
/// every 64th record's offset, patched in place by the writes of the session. Each check compares
/// the index with the vault itself (its overview records read in-process).
@Suite struct OverviewIndexLayoutTests {
    /// `i` as four digits (names that sort as numbers).
    static func digits(_ i: Int) -> String {
        let s = String(i)
        return String(repeating: "0", count: max(0, 4 - s.count)) + s
    }

    /// The vault's names in byte order, and the bytes its records take with their lengths.
    static func truth(_ vault: UnlockedVault) throws -> (names: [String], bytes: Int) {
        var names: [String] = [], bytes = 0
        try vault.forEachOverviewRecord { e in
            guard case .record(let plain) = e else { return }
            names.append(try ItemOverview.name(ofRecord: plain))
            bytes += LengthPrefix.size(plain.count) + plain.count
        }
        return (names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }, bytes)
    }

    /// The names a listing from `start` pages through.
    static func listing(_ index: OverviewIndex, from start: Int = 0, term: String? = nil, budget: Int = AgentLimits.listingPage) throws -> [String] {
        var out: [String] = []
        var from: Int? = start
        while let s = from {
            let page = index.page(from: s, matcher: term.map(OverviewMatcher.init(term:)), budget: budget)
            out += try AgentCodec.overviews(inListingPage: page.tail).map(\.item.name)
            from = page.next
        }
        return out
    }

    /// The index lists what the vault holds, from every start around the sparse table's groups,
    /// and takes exactly the records' bytes (a block no more than twice that after removals).
    static func check(_ index: OverviewIndex, _ vault: UnlockedVault, _ what: Comment) throws {
        let (names, bytes) = try truth(vault)
        #expect(index.count == names.count, what)
        #expect(index.recordBytes == bytes, what)
        #expect(index.blockBytes >= bytes && index.blockBytes <= max(2 * bytes, bytes + (1 << 16)) + OverviewIndex.room(for: bytes), what)
        #expect(index.unusedBytesAreZero, "\(what): nothing is left of a removed or moved record")
        #expect(try listing(index) == names, what)
        for start in [1, 63, 64, 65, 127, 128, 129, 191, 192, names.count - 1, names.count, names.count + 1] where start >= 0 {
            #expect(try listing(index, from: start) == Array(names.dropFirst(start)), "\(what), from \(start)")
        }
    }

    @Test func lengthPrefixesTakeOneByteBelow128AndTwoBelow16384() {
        for (n, size) in [(0, 1), (1, 1), (127, 1), (128, 2), (300, 2), (16383, 2), (16384, 3), ((1 << 21) - 1, 3), (1 << 21, 4), (1 << 40, 6)] {
            var bytes = [UInt8](repeating: 0xEE, count: 12)
            let written = bytes.withUnsafeMutableBytes { LengthPrefix.write(n, to: $0.baseAddress! + 3) }
            #expect(written == size && LengthPrefix.size(n) == size, "\(n)")
            let read = bytes.withUnsafeBytes { LengthPrefix.read($0, at: 3) }
            #expect(read.length == n && read.size == size, "\(n)")
            #expect(bytes[..<3].allSatisfy { $0 == 0xEE } && bytes[(3 + size)...].allSatisfy { $0 == 0xEE }, "only its own bytes")
        }
    }

    @Test func everyStartAcrossTheGroupsAndEveryPrefixSize() throws {
        let v = try TestVault(items: false)
        var items = (0..<150).map { Item(name: "n" + Self.digits($0), username: "user\($0)") }
        items[64].username = String(repeating: "w", count: 200)     // a record over 127 bytes: a 2-byte length
        items[100].username = String(repeating: "x", count: 20_000) // over 16,383: a 3-byte length
        items += [Item(name: "café"), Item(name: "日本"), Item(name: "ż-last"), Item(name: "Zürich")]
        _ = try v.vault.add(contentsOf: items, replace: false)
        let index = try OverviewIndex(v.vault)
        try Self.check(index, v.vault, "built")
        // Sized from SQLite's count: the records, at most one byte more a record, and the room.
        let bound = index.recordBytes + index.count + 3
        #expect(index.blockBytes >= index.recordBytes + OverviewIndex.room(for: index.recordBytes)
                && index.blockBytes <= bound + OverviewIndex.room(for: bound), "built to size")
        #expect(try Self.listing(index).last == "日本", "multi-byte names sort by their bytes, after every ASCII name")
        #expect(try Self.listing(index, term: "n01") == (100..<150).map { "n0" + String($0) })
        #expect(try Self.listing(index, term: "xxx") == ["n0100"], "a search reads the long record whole")
        // Pages of a small budget end after the record that crosses it, and resume there.
        #expect(try Self.listing(index, budget: 1) == (try Self.truth(v.vault)).names)
        let first = index.page(from: 0, matcher: nil, budget: 1)
        #expect(try first.next == 1 && AgentCodec.overviews(inListingPage: first.tail).map(\.item.name) == ["Zürich"])
    }

    @Test func aBuildMergesManySortedChunksIntoTheSameBlock() throws {
        let v = try TestVault(items: false)
        var items = (0..<400).map { Item(name: "r" + Self.digits($0), username: String(repeating: "u", count: $0 % 7 * 40)) }
        items[17].username = String(repeating: "y", count: 10_000) // larger than a chunk: one of its own
        var generator = SystemRandomNumberGenerator()
        items.shuffle(using: &generator)                             // rows not in name order
        _ = try v.vault.add(contentsOf: items, replace: false)
        let merged = try OverviewIndex(v.vault, chunkSize: 4096)    // about 20 chunks, each sorted, then merged
        try Self.check(merged, v.vault, "merged from small chunks")
        let whole = try OverviewIndex(v.vault)                      // one chunk
        #expect(merged.blockBytes == whole.blockBytes)
        let a = merged.page(from: 0, matcher: nil, budget: 1 << 24), b = whole.page(from: 0, matcher: nil, budget: 1 << 24)
        #expect(a.tail == b.tail && a.next == nil, "the same bytes, however the records were spilled")
    }

    @Test func writesPatchTheBlockAndTheTableAtEitherEndAndAtTheGroupBoundaries() throws {
        let v = try TestVault(items: false)
        _ = try v.vault.add(contentsOf: (0..<130).map { Item(name: "m" + Self.digits($0), username: "u") }, replace: false)
        let index = try OverviewIndex(v.vault)
        try Self.check(index, v.vault, "built")

        try v.vault.add(Item(name: "0-first"))
        try index.refresh("0-first", from: v.vault)
        try Self.check(index, v.vault, "added first")
        try v.vault.add(Item(name: "ż-last"))
        try index.refresh("ż-last", from: v.vault)
        try Self.check(index, v.vault, "added last")

        // Replaced in place at each boundary of the table, growing to a 2-byte length and back.
        for ordinal in [0, 63, 64, 65, 127, 128, 131] {
            let name = try Self.truth(v.vault).names[ordinal]
            for username in [String(repeating: "g", count: 300), "s"] {
                var change = ItemChange()
                change.username = username
                try v.vault.update(name, change)
                try index.refresh(name, from: v.vault)
                try Self.check(index, v.vault, "\(name) replaced (\(username.count))")
            }
        }
        // Renamed from first to last and back: the old name leaves, the new one comes.
        var rename = ItemChange()
        rename.rename = "żz-renamed"
        try v.vault.update("0-first", rename)
        for n in ["0-first", "żz-renamed"] { try index.refresh(n, from: v.vault) }
        try Self.check(index, v.vault, "renamed to last")
        rename.rename = "0-first"
        try v.vault.update("żz-renamed", rename)
        for n in ["żz-renamed", "0-first"] { try index.refresh(n, from: v.vault) }
        try Self.check(index, v.vault, "renamed to first")

        // Removed at a group's start (every later group's first record changes), first, last.
        for name in [try Self.truth(v.vault).names[64], "0-first", "ż-last"] {
            try v.vault.remove(name)
            try index.refresh(name, from: v.vault)
            try Self.check(index, v.vault, "removed \(name)")
        }
        // A name not in the vault, or not a name at all, changes nothing.
        try index.refresh("m9999", from: v.vault)
        try index.refresh(" not a name", from: v.vault)
        try Self.check(index, v.vault, "refreshed absent names")

        // A large record grows the block (a new one); its removal makes it exactly sized again.
        try v.vault.add(Item(name: "m0010-big", username: String(repeating: "b", count: 100_000)))
        try index.refresh("m0010-big", from: v.vault)
        try Self.check(index, v.vault, "a large record added")
        try v.vault.remove("m0010-big")
        try index.refresh("m0010-big", from: v.vault)
        try Self.check(index, v.vault, "the large record removed")
        #expect(index.blockBytes == index.recordBytes + OverviewIndex.room(for: index.recordBytes),
                "a block more than half unused is made again to size")

        // Down to the only record, then none, then one again.
        let all = try Self.truth(v.vault).names
        for name in all.dropLast() {
            try v.vault.remove(name)
            try index.refresh(name, from: v.vault)
        }
        try Self.check(index, v.vault, "the only record")
        #expect(index.blockBytes <= (1 << 16) + 2 * OverviewIndex.room(for: 0), "the removals gave the block back")
        try v.vault.remove(all.last!)
        try index.refresh(all.last!, from: v.vault)
        try Self.check(index, v.vault, "none")
        #expect(index.page(from: 0, matcher: nil, budget: 1 << 20).next == nil)
        try v.vault.add(Item(name: "again", username: String(repeating: "a", count: 200)))
        try index.refresh("again", from: v.vault)
        try Self.check(index, v.vault, "one again")
    }

    @Test func aListingThroughTheSessionStartsAnywhere() throws {
        let v = try TestVault(items: false)
        _ = try v.vault.add(contentsOf: (0..<200).map { Item(name: "k" + Self.digits($0)) }, replace: false)
        let h = AgentRequestHandler(uid: me.uid, pid: 77, clock: ManualClock().read)
        v.open(in: h)
        var staging = ImportStaging()
        for start in [0, 63, 64, 128, 199, 200] {
            let (reply, tail) = h.respond(.list(vault: v.path, term: nil, from: start), from: me, staging: &staging)
            guard case .listingPage(let next, _, _) = reply else { Issue.record("not a page: \(reply)"); continue }
            #expect(next == nil)
            #expect(try AgentCodec.overviews(inListingPage: tail).map(\.item.name) == (start..<200).map { "k" + Self.digits($0) })
        }
        #expect(h.handle(.remove(vault: v.path, name: "k0064"), from: me) == .done)
        let (reply, tail) = h.respond(.list(vault: v.path, term: nil, from: 64), from: me, staging: &staging)
        guard case .listingPage = reply else { Issue.record("not a page: \(reply)"); return }
        #expect(try AgentCodec.overviews(inListingPage: tail).first?.item.name == "k0065", "the table follows a write through the session")
    }
}
