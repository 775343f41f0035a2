public import VaultKit
internal import VaultSystem

/// The overview records of one session's vault, opened once and kept sorted by name, so a
/// listing or a search inside the session decrypts nothing. It follows every write made through
/// the session (the one row written is re-read), and is rebuilt when another process has
/// committed to the vault since (SQLite's `data_version` moved). It goes with the session: a
/// `lock`, an expiry or an invalidation drops it with the key, its records wiped.
final class OverviewIndex {
    /// Every record, back to back (records replaced or removed leave holes until a compaction).
    private var storage: [UInt8] = []
    /// Where each record is in `storage`, sorted by item name.
    private var entries: [(offset: Int, length: Int)] = []
    private var holes = 0
    private(set) var damaged: [String] = []
    /// Changes whenever the entries do: a paged listing that sees it move starts again.
    private(set) var version: Int64
    private var changeCounter: Int64

    /// How many items it holds.
    var count: Int { entries.count }

    /// Reads every overview record of `vault`.
    init(_ vault: UnlockedVault) throws {
        changeCounter = try vault.changeCounter()
        version = Int64.random(in: 1...Int64.max)
        try vault.forEachOverviewRecord { entry in
            switch entry {
            case .record(let plain):
                entries.append((storage.count, plain.count))
                storage.append(contentsOf: plain)
            case .damaged(let id):
                damaged.append(id)
            }
        }
        storage.withUnsafeBytes { all in
            entries.sort { Self.name(in: all, $0).lexicographicallyPrecedes(Self.name(in: all, $1)) }
        }
    }

    deinit { wipe(&storage) }

    /// The name bytes of the record at `entry` (VaultKit reads the record's first field).
    private static func name(in all: UnsafeRawBufferPointer, _ entry: (offset: Int, length: Int)) -> UnsafeRawBufferPointer {
        ItemOverview.nameBytes(ofRecord: UnsafeRawBufferPointer(rebasing: all[entry.offset..<(entry.offset + entry.length)]))
    }

    /// Whether no other connection has committed to `vault` since this index was read.
    func isCurrent(for vault: UnlockedVault) -> Bool {
        (try? vault.changeCounter()) == changeCounter
    }

    private func position(of name: String) -> (index: Int, found: Bool) {
        let key = Array(name.utf8)
        return storage.withUnsafeBytes { all in
            var low = 0, high = entries.count
            while low < high {
                let mid = (low + high) / 2
                if Self.name(in: all, entries[mid]).lexicographicallyPrecedes(key) { low = mid + 1 } else { high = mid }
            }
            return (low, low < entries.count && Self.name(in: all, entries[low]).elementsEqual(key))
        }
    }

    /// Re-reads the item called `name` after a write through the session (gone: removed).
    func refresh(_ name: String, from vault: UnlockedVault) throws {
        guard let n = try? Item.normalize(name: name) else { return }
        var record: [UInt8]?
        do {
            record = try vault.overviewRecord(named: n)
        } catch VaultError.itemNotFound {
            record = nil
        }
        defer { if record != nil { wipe(&record!) } }
        let (i, found) = position(of: n)
        if found {
            holes += entries[i].length
            entries.remove(at: i)
        }
        if let r = record {
            entries.insert((storage.count, r.count), at: i)
            storage.append(contentsOf: r)
        }
        if holes > 1 << 16, holes > storage.count / 2 { compact() }
        version = Int64.random(in: 1...Int64.max)
    }

    /// Drops the holes left by replaced and removed records.
    private func compact() {
        var fresh: [UInt8] = []
        fresh.reserveCapacity(storage.count - holes)
        for k in entries.indices {
            let e = entries[k]
            entries[k].offset = fresh.count
            fresh.append(contentsOf: storage[e.offset..<(e.offset + e.length)])
        }
        wipe(&storage)
        storage = fresh
        holes = 0
    }

    /// One page of a listing: from `start`, the records `matcher` matches (every record without
    /// one), until about `budget` bytes; each record as a big-endian u32 length and its bytes.
    /// - Returns: the page and where the next one starts (nil at the end).
    func page(from start: Int, matcher: OverviewMatcher?, budget: Int) -> (tail: [UInt8], next: Int?) {
        var tail: [UInt8] = []
        var i = max(0, start)
        storage.withUnsafeBytes { all in
            while i < entries.count, tail.count < budget {
                let e = entries[i]
                i += 1
                let r = UnsafeRawBufferPointer(rebasing: all[e.offset..<(e.offset + e.length)])
                if let matcher, !matcher.matches(r) { continue }
                let n = UInt32(r.count)
                tail += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
                tail.append(contentsOf: r)
            }
        }
        return (tail, i < entries.count ? i : nil)
    }
}

extension AgentCodec {
    /// Splits a page's tail into records.
    /// - Throws: `.failure` for a tail that is not a sequence of length-prefixed records.
    public static func overviews(inListingPage tail: [UInt8]) throws -> [ItemOverview] {
        var out: [ItemOverview] = []
        try forEachRecord(inListingPage: tail) { out.append(try ItemOverview(record: $0)) }
        return out
    }

    /// Lends each record of a page's tail in place, in order.
    /// - Throws: `.failure` for a tail that is not a sequence of length-prefixed records.
    public static func forEachRecord(inListingPage tail: [UInt8], _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var i = 0
        try tail.withUnsafeBytes { all in
            while i < all.count {
                guard all.count - i >= 4 else { throw VaultError.failure("the agent sent a malformed listing page") }
                let n = Int(all[i]) << 24 | Int(all[i + 1]) << 16 | Int(all[i + 2]) << 8 | Int(all[i + 3])
                i += 4
                guard n <= all.count - i else { throw VaultError.failure("the agent sent a malformed listing page") }
                try body(UnsafeRawBufferPointer(rebasing: all[i..<(i + n)]))
                i += n
            }
        }
    }

    /// Walks the tail of a `releasedAll` reply (each item a big-endian u32 length and its
    /// overview record, then a u32 length and its secrets record), lending each item's overview
    /// and secrets in place: the caller has copied the tail into guarded memory.
    /// - Throws: `.failure` for a tail that is not such a sequence, `.corrupt` for a record that
    ///   does not decode.
    public static func forEachReleased(inExport tail: UnsafeRawBufferPointer,
                                       _ body: (ItemOverview, ItemSecrets) throws -> Void) throws {
        var i = 0
        func record() throws -> UnsafeRawBufferPointer {
            guard tail.count - i >= 4 else { throw VaultError.failure("the agent sent a malformed export") }
            let n = Int(tail[i]) << 24 | Int(tail[i + 1]) << 16 | Int(tail[i + 2]) << 8 | Int(tail[i + 3])
            i += 4
            guard n <= tail.count - i else { throw VaultError.failure("the agent sent a malformed export") }
            defer { i += n }
            return UnsafeRawBufferPointer(rebasing: tail[i..<(i + n)])
        }
        while i < tail.count {
            let overview = try ItemOverview(record: try record())
            try body(overview, try ItemSecrets(record: try record(), of: overview.item))
        }
    }
}
