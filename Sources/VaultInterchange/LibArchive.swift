internal import CArchive
import FoundationEssentials
internal import Glibc
import VaultKit
internal import VaultSystem

/// The one gate libarchive calls pass through: a status below `ARCHIVE_WARN` throws with the
/// library's own message. vault reads zip archives with it (1Password's 1PUX). It is opened with
/// `dlopen` on first use (CArchive/shim.h), so the commands that read no archive do not load it
/// and its compression libraries.
enum LibArchive {
    /// The function table, or why libarchive could not be opened; loaded once, on first use.
    fileprivate static let loaded: Result<vault_archive_api, VaultError> = LibraryTable.load(vault_archive_open)
        .mapError { .failure("reading a zip archive needs libarchive, which cannot be loaded (\($0.message))", hint: "install the Debian package libarchive13") }

    /// Throws `.usage` with libarchive's message unless `code` is OK or a warning.
    static func check(_ code: Int32, _ archive: OpaquePointer, _ what: String) throws {
        guard code < ARCHIVE_WARN else { return }
        let api = try loaded.get()
        let reason = api.archive_error_string(archive).map { String(cString: $0) } ?? "error \(code)"
        throw VaultError.usage("\(what): \(reason)")
    }
}

/// A zip archive read from a file descriptor a block (64 KiB) at a time, never whole: a regular
/// file with seeks, through its central directory as unzip reads it; a pipe front to back, by
/// each member's local header. The members are visited in turn, a member's data read in chunks,
/// each member bounded by what it may inflate to.
package final class ZipReader {
    private let api: vault_archive_api
    private let archive: OpaquePointer
    private let source: ArchiveSource
    private var entryPath = ""
    private var inflated = 0

    /// The archive on `fd`, of which `head` was read (and nothing else yet). A regular file is
    /// read again from where the archive starts, with seeks; a pipe goes on after `head`.
    /// - Throws: `.usage` with libarchive's reason when it is not a zip archive.
    package init(fd: Int32, head: [UInt8]) throws {
        api = try LibArchive.loaded.get()
        var status = stat()
        let here = fstat(fd, &status) == 0 && status.st_mode & mode_t(Glibc.S_IFMT) == mode_t(Glibc.S_IFREG) ? lseek(fd, 0, SEEK_CUR) : -1
        let start: Int64? = here >= head.count ? Int64(here) - Int64(head.count) : nil
        if let start, lseek(fd, off_t(start), SEEK_SET) < 0 { throw VaultError.io(path: "the archive", SystemError.current("lseek").reason) }
        guard let a = api.archive_read_new() else { throw VaultError.failure("libarchive could not start") }
        archive = a
        source = ArchiveSource(fd: fd, head: start == nil ? head : [], start: start)
        try LibArchive.check(api.archive_read_support_format_zip(a), a, "the archive")
        _ = api.archive_read_set_read_callback(a) { _, context, block in
            Unmanaged<ArchiveSource>.fromOpaque(context!).takeUnretainedValue().next(block!)
        }
        if start != nil {
            _ = api.archive_read_set_seek_callback(a) { _, context, offset, whence in
                Unmanaged<ArchiveSource>.fromOpaque(context!).takeUnretainedValue().seek(offset, whence)
            }
        }
        _ = api.archive_read_set_callback_data(a, Unmanaged.passUnretained(source).toOpaque())
        try source.rethrow { try LibArchive.check(api.archive_read_open1(a), a, "the archive cannot be opened") }
    }

    deinit { _ = api.archive_read_free(archive) }

    /// The path of the next regular file in the archive (directories and links passed over);
    /// nil at the end.
    /// - Throws: `.usage` with libarchive's reason for a damaged archive.
    package func nextFile() throws -> String? {
        while true {
            var entry: OpaquePointer?
            let rc = try source.rethrow { api.archive_read_next_header(archive, &entry) }
            if rc == ARCHIVE_EOF { return nil }
            try LibArchive.check(rc, archive, "the archive is damaged")
            guard let entry, let path = api.archive_entry_pathname(entry) else { continue }
            guard api.archive_entry_filetype(entry) == UInt32(0o100000) else { continue }
            entryPath = String(cString: path)
            inflated = 0
            return entryPath
        }
    }

    /// Up to 64 KiB more of the current member's data, nil at its end.
    /// - Throws: `.usage` when the member inflates to more than `limit` bytes, or cannot be read.
    package func chunk(limit: Int) throws -> [UInt8]? {
        var data = [UInt8](repeating: 0, count: 64 * 1024)
        let n = try source.rethrow { data.withUnsafeMutableBytes { api.archive_read_data(archive, $0.baseAddress, $0.count) } }
        if n < 0 { try LibArchive.check(Int32(n), archive, "'\(entryPath)' in the archive cannot be read") }
        if n <= 0 { return nil }
        inflated += n
        guard inflated <= limit else {
            throw VaultError.usage("'\(entryPath)' in the archive inflates to more than \(limit >> 20) MiB",
                                   hint: "vault reads at most \(limit >> 20) MiB of it (a 1Password export of 100,000 items is about 100 MiB): is this archive the export itself?")
        }
        data.removeSubrange(n...)
        return data
    }
}

/// What libarchive's callbacks read: the file descriptor a block at a time (after the bytes
/// already read, for a pipe), or with seeks relative to where the archive starts in the file.
private final class ArchiveSource {
    let fd: Int32
    var head: [UInt8]
    let start: Int64?
    let block = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    /// Why the last read failed (thrown once libarchive returns).
    var failure: VaultError?

    init(fd: Int32, head: [UInt8], start: Int64?) {
        self.fd = fd
        self.head = head
        self.start = start
    }

    deinit {
        wipe(&head)
        block.initializeMemory(as: UInt8.self, repeating: 0)
        block.deallocate()
    }

    /// The next block for libarchive: its size, 0 at the end, -1 (ARCHIVE_FATAL) on an error.
    func next(_ out: UnsafeMutablePointer<UnsafeRawPointer?>) -> Int {
        out.pointee = UnsafeRawPointer(block.baseAddress)
        if !head.isEmpty {
            let n = min(head.count, block.count)
            head.withUnsafeBytes { block.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            head.removeSubrange(0..<n)
            return n
        }
        do { return try readSome(fd: fd, into: block) } catch {
            failure = .io(path: "the archive", error.reason)
            return Int(ARCHIVE_FATAL)
        }
    }

    /// libarchive's seek, relative to the archive's start.
    func seek(_ offset: Int64, _ whence: Int32) -> Int64 {
        let base = start ?? 0
        let r = lseek(fd, off_t(whence == SEEK_SET ? base + offset : offset), whence)
        return r < 0 ? Int64(ARCHIVE_FATAL) : Int64(r) - base
    }

    /// `body`'s result, or the read error a callback met during it.
    func rethrow<T>(_ body: () throws -> T) throws -> T {
        let result = Result { try body() }
        if let failure {
            self.failure = nil
            throw failure
        }
        return try result.get()
    }
}
