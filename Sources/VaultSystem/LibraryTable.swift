/// A C library opened with `dlopen` on first use: its shim's `vault_*_open` fills a table of the
/// functions vault calls (CSQLite, CTSS2, CNettle, CArchive, CXML2). One way to load them all.
public enum LibraryTable {
    /// The table `open` fills, or the loader's message (`dlerror`) when the library or one of its
    /// functions is missing. Callers keep the result in a `static let`, so each loads once.
    public static func load<Table>(_ open: (UnsafeMutablePointer<Table>) -> UnsafePointer<CChar>?) -> Result<Table, LoadError> {
        let table = UnsafeMutablePointer<Table>.allocate(capacity: 1)
        defer { table.deallocate() }
        if let error = open(table) { return .failure(LoadError(message: String(cString: error))) }
        return .success(table.pointee)
    }

    /// Why a library could not be opened, as the dynamic loader said it.
    public struct LoadError: Error, Sendable {
        /// `dlerror`'s text (the file or the symbol that is missing).
        public let message: String
    }
}
