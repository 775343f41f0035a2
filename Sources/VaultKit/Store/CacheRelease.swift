extension UnlockedVault {
    /// Gives back the memory SQLite holds for this vault's connection beyond what it is using
    /// (`PRAGMA shrink_memory`: the page cache a scan of every row filled). For a long-lived
    /// process after such a scan (the agent's overview index); the next reads fill it again.
    public func releaseCachedPages() {
        try? db.execute("PRAGMA shrink_memory")
    }
}
