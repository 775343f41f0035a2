public import VaultKit
internal import VaultSystem

/// The overview records of one session's vault, opened once and kept sorted by name, so a
/// listing or a search inside the session decrypts nothing. It follows every write made through
/// the session (the one row written is re-read), and is rebuilt when another process has
/// committed to the vault since (SQLite's `data_version` moved). It goes with the session: a
/// `lock`, an expiry or an invalidation drops it with the key, its records wiped.
final class OverviewIndex {
    private(set) var entries: [(name: String, record: [UInt8])] = []
    private(set) var damaged: [String] = []
    /// Changes whenever the entries do: a paged listing that sees it move starts again.
    private(set) var version: Int64
    private var changeCounter: Int64

    /// Reads every overview record of `vault`.
    init(_ vault: UnlockedVault) throws {
        changeCounter = try vault.changeCounter()
        version = Int64.random(in: 1...Int64.max)
        try vault.forEachOverviewRecord { entry in
            switch entry {
            case .record(let plain):
                entries.append((try ItemOverview.name(ofRecord: plain), Array(plain)))
            case .damaged(let id):
                damaged.append(id)
            }
        }
        entries.sort { $0.name < $1.name }
    }

    deinit {
        for k in entries.indices { wipe(&entries[k].record) }
    }

    /// Whether no other connection has committed to `vault` since this index was read.
    func isCurrent(for vault: UnlockedVault) -> Bool {
        (try? vault.changeCounter()) == changeCounter
    }

    private func position(of name: String) -> (index: Int, found: Bool) {
        var low = 0, high = entries.count
        while low < high {
            let mid = (low + high) / 2
            if entries[mid].name < name { low = mid + 1 } else { high = mid }
        }
        return (low, low < entries.count && entries[low].name == name)
    }

    /// Re-reads the item called `name` after a write through the session (gone: removed).
    func refresh(_ name: String, from vault: UnlockedVault) throws {
        guard let n = try? Item.normalize(name: name) else { return }
        let record: [UInt8]?
        do {
            record = try vault.overviewRecord(named: n)
        } catch VaultError.itemNotFound {
            record = nil
        }
        let (i, found) = position(of: n)
        if found { wipe(&entries[i].record) }
        switch (record, found) {
        case (let r?, true): entries[i].record = r
        case (let r?, false): entries.insert((n, r), at: i)
        case (nil, true): entries.remove(at: i)
        case (nil, false): break
        }
        version = Int64.random(in: 1...Int64.max)
    }

    /// One page of a listing: from `start`, the records `matcher` matches (every record without
    /// one), until about `budget` bytes; each record as a big-endian u32 length and its bytes.
    /// - Returns: the page and where the next one starts (nil at the end).
    func page(from start: Int, matcher: OverviewMatcher?, budget: Int) -> (tail: [UInt8], next: Int?) {
        var tail: [UInt8] = []
        var i = max(0, start)
        while i < entries.count, tail.count < budget {
            let r = entries[i].record
            i += 1
            if let matcher, !r.withUnsafeBytes({ matcher.matches($0) }) { continue }
            let n = UInt32(r.count)
            tail += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
            tail += r
        }
        return (tail, i < entries.count ? i : nil)
    }
}

extension AgentCodec {
    /// Splits a page's tail into records.
    /// - Throws: `.failure` for a tail that is not a sequence of length-prefixed records.
    public static func overviews(inListingPage tail: [UInt8]) throws -> [ItemOverview] {
        var out: [ItemOverview] = []
        var i = 0
        try tail.withUnsafeBytes { all in
            while i < all.count {
                guard all.count - i >= 4 else { throw VaultError.failure("the agent sent a malformed listing page") }
                let n = Int(all[i]) << 24 | Int(all[i + 1]) << 16 | Int(all[i + 2]) << 8 | Int(all[i + 3])
                i += 4
                guard n <= all.count - i else { throw VaultError.failure("the agent sent a malformed listing page") }
                out.append(try ItemOverview(record: UnsafeRawBufferPointer(rebasing: all[i..<(i + n)])))
                i += n
            }
        }
        return out
    }
}
