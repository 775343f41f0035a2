internal import CSQLite
import FoundationEssentials
internal import VaultSystem

/// A value bound to or read from a statement.
enum SQLValue {
    case integer(Int64)
    case text(String)
    case blob([UInt8])
    case null
}

/// libsqlite3, opened on the first database a process opens (`dlopen`, see CSQLite/shim.h).
enum SQLiteLibrary {
    /// The function table, or why the library could not be opened; loaded once, on first use.
    static let loaded: Result<vault_sqlite_api, VaultError> = LibraryTable.load(vault_sqlite_open)
        .mapError { .failure("SQLite cannot be loaded (\($0.message))", hint: "install the Debian package libsqlite3-0") }
}

/// The SQLite functions. Reached only after `Database.init` loaded the library (every statement
/// and call belongs to an open database), so the failure case cannot occur here. Taken out of
/// the `Result` once: a computed property copied the whole `Result` (the table and its error
/// case) at every call, every column of every row.
private let sqlite: vault_sqlite_api = {
    guard case .success(let table) = SQLiteLibrary.loaded else { preconditionFailure("SQLite called before a database was opened") }
    return table
}()

/// One SQLite connection. Every return code passes through `check`, which throws a `VaultError`
/// naming the database path.
final class Database {
    private let handle: OpaquePointer
    /// The database file.
    let path: String
    /// The statements `query` ran, prepared once for the connection's life (an agent's session
    /// answered every `get` by preparing the same few statements again: 0.7-0.9 ms a request).
    /// Each is reset and its bindings cleared after use, so none holds a read transaction or a
    /// bound value between calls.
    private var prepared: [String: OpaquePointer] = [:]
    /// At most this many kept: `query`'s SQL is a fixed text at every call site.
    private static let preparedLimit = 64

    /// Opens (or, with `create`, creates) the database at `path` with WAL, foreign keys and a busy timeout.
    init(path: String, create: Bool) throws {
        self.path = path
        _ = try SQLiteLibrary.loaded.get()
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX
        let rc = sqlite.sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.flatMap { sqlite.sqlite3_errmsg($0).map { String(cString: $0) } } ?? "cannot open"
            if let db { _ = sqlite.sqlite3_close_v2(db) }
            throw Database.error(code: rc, message: message, path: path)
        }
        handle = db
        _ = sqlite.sqlite3_extended_result_codes(db, 1)
        try check(sqlite.sqlite3_busy_timeout(db, 5000))
        try execute("PRAGMA journal_mode=WAL")
        try execute("PRAGMA foreign_keys=ON")
        try execute("PRAGMA synchronous=NORMAL")
        try execute("PRAGMA secure_delete=ON")
    }

    deinit {
        for (_, statement) in prepared { _ = sqlite.sqlite3_finalize(statement) }
        _ = sqlite.sqlite3_close_v2(handle)
    }

    /// Maps an SQLite result code to the vault's error: damage is exit 5, access problems exit 6.
    static func error(code: Int32, message: String, path: String) -> VaultError {
        switch code & 0xff {
        case SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_FORMAT:
            return .corrupt("\(path) is not a valid vault database (\(message))")
        case SQLITE_BUSY, SQLITE_LOCKED:
            return .io(path: path, "the database is locked by another process")
        case SQLITE_FULL:
            return .io(path: path, "the disk is full")
        default:
            return .io(path: path, message)
        }
    }

    /// Throws unless `code` is SQLITE_OK (or one of `accept`).
    func check(_ code: Int32, accept: [Int32] = []) throws {
        if code == SQLITE_OK || accept.contains(code) { return }
        throw Database.error(code: code, message: sqlite.sqlite3_errmsg(handle).map { String(cString: $0) } ?? "unknown error", path: path)
    }

    /// Runs SQL without results.
    func execute(_ sql: String) throws {
        try check(sqlite.sqlite3_exec(handle, sql, nil, nil, nil))
    }

    /// Prepares one statement.
    func prepare(_ sql: String) throws -> Statement {
        var stmt: OpaquePointer?
        try check(sqlite.sqlite3_prepare_v2(handle, sql, -1, &stmt, nil))
        return Statement(stmt!, database: self)
    }

    /// Runs `sql` with `values` and returns every row. The statement is kept prepared for the
    /// next call with the same SQL.
    @discardableResult
    func query(_ sql: String, _ values: [SQLValue] = []) throws -> [[SQLValue]] {
        let statement: OpaquePointer
        var kept = true
        if let p = prepared[sql] {
            statement = p
        } else {
            var stmt: OpaquePointer?
            try check(sqlite.sqlite3_prepare_v2(handle, sql, -1, &stmt, nil))
            statement = stmt!
            if prepared.count < Self.preparedLimit { prepared[sql] = statement } else { kept = false }
        }
        defer {
            if kept {
                _ = sqlite.sqlite3_reset(statement)
                _ = sqlite.sqlite3_clear_bindings(statement)
            } else {
                _ = sqlite.sqlite3_finalize(statement)
            }
        }
        try Statement.bind(values, to: statement, in: self)
        var rows: [[SQLValue]] = []
        while let row = try Statement.step(statement, in: self) { rows.append(row) }
        return rows
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction, rolled back if it throws.
    @discardableResult
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// The rowid of the last insert.
    var lastInsertRowID: Int64 { sqlite.sqlite3_last_insert_rowid(handle) }

    /// Rows changed by the last statement.
    var changes: Int { Int(sqlite.sqlite3_changes(handle)) }
}

/// A prepared statement, finalized in `deinit`.
///
/// Rows are read either whole (`next`, one `SQLValue` per column) or in place: `step` makes a
/// row current and `integer(_:)`, `bytes(_:)` read its columns where SQLite holds them, valid
/// until the statement steps, resets or ends (the loops over every item row read so, with no
/// array per column).
final class Statement {
    private let handle: OpaquePointer
    private let database: Database
    /// Copies made by `bytes(_:)` of the current row's text columns, freed when it moves on.
    private var textCopies: [UnsafeMutableRawBufferPointer] = []

    init(_ handle: OpaquePointer, database: Database) {
        self.handle = handle
        self.database = database
    }

    deinit {
        freeTextCopies()
        _ = sqlite.sqlite3_finalize(handle)
    }

    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Binds values to the parameters 1...n.
    func bind(_ values: [SQLValue]) throws {
        freeTextCopies()
        try Self.bind(values, to: handle, in: database)
    }

    /// Steps once: the next row, or nil when done.
    func next() throws -> [SQLValue]? {
        freeTextCopies()
        return try Self.step(handle, in: database)
    }

    /// Steps once: true when a row is current, its columns readable in place until the next
    /// step, reset or `deinit`; false when done.
    func step() throws -> Bool {
        freeTextCopies()
        let rc = sqlite.sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc != SQLITE_DONE { try database.check(rc) }
        return false
    }

    /// How many columns a row of this statement has.
    var columnCount: Int32 { sqlite.sqlite3_column_count(handle) }

    /// Column `c` of the current row as `SQLValue.int` reads it: its integer, nil when it
    /// holds no integer.
    func integer(_ c: Int32) -> Int64? {
        sqlite.sqlite3_column_type(handle, c) == SQLITE_INTEGER ? sqlite.sqlite3_column_int64(handle, c) : nil
    }

    /// Column `c` of the current row as `SQLValue.bytes` reads it, in place: a blob's bytes, a
    /// text's UTF-8 as `next` reads the text (to its first NUL, invalid UTF-8 repaired; a copy,
    /// which no vault writes), empty for anything else. Valid until the statement steps,
    /// resets or ends.
    func bytes(_ c: Int32) -> UnsafeRawBufferPointer {
        switch sqlite.sqlite3_column_type(handle, c) {
        case SQLITE_BLOB:
            let n = Int(sqlite.sqlite3_column_bytes(handle, c))
            guard n > 0, let p = sqlite.sqlite3_column_blob(handle, c) else { return UnsafeRawBufferPointer(start: nil, count: 0) }
            return UnsafeRawBufferPointer(start: p, count: n)
        case SQLITE_TEXT:
            let text = Array((sqlite.sqlite3_column_text(handle, c).map { String(cString: $0) } ?? "").utf8)
            let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: text.count, alignment: 1)
            copy.copyBytes(from: text)
            textCopies.append(copy)
            return UnsafeRawBufferPointer(copy)
        default:
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }
    }

    private func freeTextCopies() {
        guard !textCopies.isEmpty else { return }
        for copy in textCopies { copy.deallocate() }
        textCopies.removeAll()
    }

    /// Resets the statement and clears its bindings (rows read in place end here).
    func reset() throws {
        freeTextCopies()
        try database.check(sqlite.sqlite3_reset(handle))
        try database.check(sqlite.sqlite3_clear_bindings(handle))
    }

    /// Binds an integer to parameter `i` (1-based).
    func bind(_ n: Int64, at i: Int32) throws { try database.check(sqlite.sqlite3_bind_int64(handle, i, n)) }

    /// Binds NULL to parameter `i`.
    func bindNull(at i: Int32) throws { try database.check(sqlite.sqlite3_bind_null(handle, i)) }

    /// Binds `bytes` as a blob to parameter `i`, as `.blob` binds them (empty is a zero-length
    /// blob, not NULL) but without a copy (SQLITE_STATIC): the caller keeps them unchanged until the statement
    /// has stepped, then calls `reset`. The statement must be reset (`reset`) before binding.
    func bind(borrowing bytes: UnsafeRawBufferPointer, at i: Int32) throws {
        try database.check(sqlite.sqlite3_bind_blob(handle, i, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(bytes.count), nil))
    }

    /// Resets `handle` and binds values to its parameters 1...n.
    static func bind(_ values: [SQLValue], to handle: OpaquePointer, in database: Database) throws {
        try database.check(sqlite.sqlite3_reset(handle))
        try database.check(sqlite.sqlite3_clear_bindings(handle))
        for (i, v) in values.enumerated() {
            let idx = Int32(i + 1)
            let rc: Int32
            switch v {
            case .integer(let n): rc = sqlite.sqlite3_bind_int64(handle, idx, n)
            case .text(let t): rc = sqlite.sqlite3_bind_text(handle, idx, t, -1, Statement.transient)
            case .blob(let b):
                rc = b.withUnsafeBytes { sqlite.sqlite3_bind_blob(handle, idx, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(b.count), Statement.transient) }
            case .null: rc = sqlite.sqlite3_bind_null(handle, idx)
            }
            try database.check(rc)
        }
    }

    /// Steps `handle` once: the next row, or nil when done.
    static func step(_ handle: OpaquePointer, in database: Database) throws -> [SQLValue]? {
        let rc = sqlite.sqlite3_step(handle)
        if rc == SQLITE_DONE { return nil }
        guard rc == SQLITE_ROW else {
            try database.check(rc)
            return nil
        }
        var row: [SQLValue] = []
        for c in 0..<sqlite.sqlite3_column_count(handle) {
            switch sqlite.sqlite3_column_type(handle, c) {
            case SQLITE_INTEGER: row.append(.integer(sqlite.sqlite3_column_int64(handle, c)))
            case SQLITE_TEXT: row.append(.text(sqlite.sqlite3_column_text(handle, c).map { String(cString: $0) } ?? ""))
            case SQLITE_BLOB:
                let n = Int(sqlite.sqlite3_column_bytes(handle, c))
                if n == 0 { row.append(.blob([])) } else {
                    row.append(.blob(Array(UnsafeRawBufferPointer(start: sqlite.sqlite3_column_blob(handle, c), count: n))))
                }
            default: row.append(.null)
            }
        }
        return row
    }
}

extension SQLValue {
    /// The integer value, or nil.
    var int: Int64? { if case .integer(let n) = self { n } else { nil } }
    /// The blob value (text read as UTF-8), or nil.
    var bytes: [UInt8]? {
        switch self {
        case .blob(let b): b
        case .text(let t): Array(t.utf8)
        default: nil
        }
    }
    /// The text value, or nil.
    var string: String? {
        switch self {
        case .text(let t): t
        case .blob(let b): String(decoding: b, as: UTF8.self)
        default: nil
        }
    }
}
