extension UnlockedVault {
    /// The sizes of the rows' overview plaintexts, counted by SQLite without opening a record (a
    /// sealed overview is its plaintext and the AEAD tag): how many rows, their bytes in all,
    /// and for each of `thresholds` how many are at least that long. The agent sizes the block
    /// of its overview index with these before it reads the records.
    public func overviewPlaintextSizes(countingAtLeast thresholds: [Int]) throws -> (rows: Int, bytes: Int, atLeast: [Int]) {
        let tag = AEAD.tagLength
        let counts = thresholds.map { ", coalesce(sum(length(overview) >= \($0 + tag)), 0)" }.joined()
        let row = try db.query("SELECT count(*), coalesce(sum(length(overview)), 0) - \(tag) * count(*)\(counts) FROM items").first ?? []
        let values = row.map { Int($0.int ?? 0) }
        guard values.count == 2 + thresholds.count else { return (0, 0, thresholds.map { _ in 0 }) }
        return (values[0], values[1], Array(values[2...]))
    }

    /// Gives back the memory SQLite holds for this vault's connection beyond what it is using
    /// (`PRAGMA shrink_memory`: the page cache a scan of every row filled). For a long-lived
    /// process after such a scan (the agent's overview index); the next reads fill it again. A
    /// failure leaves the cache as it was, which is harmless.
    public func releaseCachedPages() {
        try? db.execute("PRAGMA shrink_memory")
    }
}
