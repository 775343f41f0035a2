internal import CArchive
import VaultKit
internal import VaultSystem

/// The one gate libarchive calls pass through: a status below `ARCHIVE_WARN` throws with the
/// library's own message. vault reads zip archives with it (1Password's 1PUX). It is opened with
/// `dlopen` on first use (CArchive/shim.h), so the commands that read no archive do not load it
/// and its compression libraries.
enum LibArchive {
    /// The function table, or why libarchive could not be opened; loaded once, on first use.
    private static let loaded: Result<vault_archive_api, VaultError> = LibraryTable.load(vault_archive_open)
        .mapError { .failure("reading a zip archive needs libarchive, which cannot be loaded (\($0.message))", hint: "install the Debian package libarchive13") }

    /// Throws `.usage` with libarchive's message unless `code` is OK or a warning.
    static func check(_ code: Int32, _ archive: OpaquePointer, _ what: String) throws {
        guard code < ARCHIVE_WARN else { return }
        let api = try loaded.get()
        let reason = api.archive_error_string(archive).map { String(cString: $0) } ?? "error \(code)"
        throw VaultError.usage("\(what): \(reason)")
    }

    /// The regular files of the zip archive in `bytes`, by path; a file larger than `limit` is
    /// refused. `wanted` says which are read (the others are only listed, with no contents).
    static func zipEntries(_ bytes: [UInt8], limit: Int, wanted: (String) -> Bool) throws -> (files: [String: [UInt8]], others: [String]) {
        let api = try loaded.get()
        guard let a = api.archive_read_new() else { throw VaultError.failure("libarchive could not start") }
        defer { _ = api.archive_read_free(a) }
        try check(api.archive_read_support_format_zip(a), a, "the archive")
        var files: [String: [UInt8]] = [:], others: [String] = []
        try bytes.withUnsafeBytes { raw in
            try check(api.archive_read_open_memory(a, raw.baseAddress, raw.count), a, "the archive cannot be opened")
            var entry: OpaquePointer?
            while true {
                let rc = api.archive_read_next_header(a, &entry)
                if rc == ARCHIVE_EOF { break }
                try check(rc, a, "the archive is damaged")
                guard let entry, let cPath = api.archive_entry_pathname(entry) else { continue }
                let path = String(cString: cPath)
                guard api.archive_entry_filetype(entry) == UInt32(0o100000) else { continue }
                guard wanted(path) else { others.append(path); continue }
                var data: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 64 * 1024)
                while true {
                    let n = chunk.withUnsafeMutableBytes { api.archive_read_data(a, $0.baseAddress, $0.count) }
                    if n == 0 { break }
                    if n < 0 { try check(Int32(n), a, "'\(path)' in the archive cannot be read") }
                    data += chunk[0..<n]
                    guard data.count <= limit else { throw VaultError.usage("'\(path)' in the archive is larger than \(limit >> 20) MiB") }
                }
                files[path] = data
            }
        }
        return (files, others)
    }
}
