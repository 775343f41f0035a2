internal import CArchive
import VaultKit

/// The one gate libarchive calls pass through: a status below `ARCHIVE_WARN` throws with the
/// library's own message. vault reads zip archives with it (1Password's 1PUX).
enum LibArchive {
    /// Throws `.usage` with libarchive's message unless `code` is OK or a warning.
    static func check(_ code: Int32, _ archive: OpaquePointer, _ what: String) throws {
        guard code < ARCHIVE_WARN else { return }
        let reason = archive_error_string(archive).map { String(cString: $0) } ?? "error \(code)"
        throw VaultError.usage("\(what): \(reason)")
    }

    /// The regular files of the zip archive in `bytes`, by path; a file larger than `limit` is
    /// refused. `wanted` says which are read (the others are only listed, with no contents).
    static func zipEntries(_ bytes: [UInt8], limit: Int, wanted: (String) -> Bool) throws -> (files: [String: [UInt8]], others: [String]) {
        guard let a = archive_read_new() else { throw VaultError.failure("libarchive could not start") }
        defer { archive_read_free(a) }
        try check(archive_read_support_format_zip(a), a, "the archive")
        var files: [String: [UInt8]] = [:], others: [String] = []
        try bytes.withUnsafeBytes { raw in
            try check(archive_read_open_memory(a, raw.baseAddress, raw.count), a, "the archive cannot be opened")
            var entry: OpaquePointer?
            while true {
                let rc = archive_read_next_header(a, &entry)
                if rc == ARCHIVE_EOF { break }
                try check(rc, a, "the archive is damaged")
                guard let entry, let cPath = archive_entry_pathname(entry) else { continue }
                let path = String(cString: cPath)
                guard archive_entry_filetype(entry) == UInt32(0o100000) else { continue }
                guard wanted(path) else { others.append(path); continue }
                var data: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 64 * 1024)
                while true {
                    let n = chunk.withUnsafeMutableBytes { archive_read_data(a, $0.baseAddress, $0.count) }
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
