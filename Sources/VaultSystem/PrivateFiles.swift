internal import Glibc

/// Why a path is not a private file or folder of this user. Designed to map onto a caller's own
/// errors: the first three cases are "accessible by others" (`chmod 700`/`chmod 600` fixes them,
/// or the path is not to be trusted), the last two are I/O problems naming the path.
public enum PrivateFileError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The mode has group or other bits (`permissions & 0o077 != 0`).
    case notPrivate(path: String, isDirectory: Bool, permissions: UInt32)
    /// The path belongs to another uid.
    case foreignOwner(path: String, isDirectory: Bool, owner: UInt32)
    /// A symbolic link where a file or folder of our own was expected (found with `lstat`, never followed).
    case symbolicLink(path: String, isDirectory: Bool)
    /// A file where a folder was expected, or the reverse (or a socket, a device, ...).
    case wrongKind(path: String, expectedDirectory: Bool)
    /// The check itself failed (`ENOENT`, `EACCES`, ...).
    case system(SystemError)

    /// The path concerned.
    public var path: String {
        switch self {
        case .notPrivate(let p, _, _), .foreignOwner(let p, _, _), .symbolicLink(let p, _), .wrongKind(let p, _): p
        case .system(let e): e.path ?? ""
        }
    }

    /// Whether others could read, change or replace the path: a mode, owner or symlink problem
    /// (for VaultKit's `insecurePermissions(path:isDirectory:)`).
    public var isInsecure: Bool {
        switch self {
        case .notPrivate, .foreignOwner, .symbolicLink: true
        case .wrongKind, .system: false
        }
    }

    /// Whether the path does not exist.
    public var isNotFound: Bool {
        if case .system(let e) = self { return e.isNotFound }
        return false
    }

    /// The problem without the path, lower case (for an `io(path:, message)` error).
    public var message: String {
        switch self {
        case .notPrivate(_, let dir, let mode):
            "\(dir ? "folder" : "file") mode \(String(mode, radix: 8)) lets other users in (must be \(dir ? "700" : "600"))"
        case .foreignOwner(_, _, let owner): "owned by another user (uid \(owner))"
        case .symbolicLink: "is a symbolic link"
        case .wrongKind(_, let dir): dir ? "not a folder" : "not a regular file"
        case .system(let e): e.reason
        }
    }

    /// `path: message`.
    public var description: String { "\(path): \(message)" }
}

/// Folders and files only this user can use: created 0700/0600, checked for mode, owner and kind.
public enum PrivateFiles {
    /// `mkdir -p` with mode 0700 for every folder it creates (never loosening an existing one).
    /// The umask can only remove bits from 0700; owner bits it removes are put back, so the result
    /// is what `umask 077` would give.
    /// - Throws: ``SystemError`` for `mkdir` (`ENOTDIR` when a component is not a folder).
    public static func makeFolder(_ path: String) throws(SystemError) {
        // A folder that is there already (the common case) is every step of the way there too.
        if let status = try? FileStatus.of(path, followingLinks: true), status.kind == .directory { return }
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            current.append("/")
            current.append(contentsOf: part)
            let folder = current
            do {
                try syscall("mkdir", path: folder) { mkdir(folder, 0o700) }
                if try FileStatus.of(folder).permissions & 0o700 != 0o700 {
                    try syscall("chmod", path: folder) { chmod(folder, 0o700) }
                }
            } catch where error.isExists {
                let status = try FileStatus.of(folder, followingLinks: true)
                guard status.kind == .directory else { throw SystemError(call: "mkdir", path: folder, code: ENOTDIR) }
            }
        }
    }

    /// Checks that `path` (not followed if a link) is a folder (`isDirectory`) or a regular
    /// file, owned by this process's effective uid, with no group or other permission bits.
    /// - Throws: ``PrivateFileError``.
    public static func check(_ path: String, isDirectory: Bool) throws(PrivateFileError) {
        let status: FileStatus
        do { status = try FileStatus.of(path) } catch { throw .system(error) }
        try check(status, path: path, isDirectory: isDirectory)
    }

    static func check(_ status: FileStatus, path: String, isDirectory: Bool) throws(PrivateFileError) {
        if status.kind == .symbolicLink { throw .symbolicLink(path: path, isDirectory: isDirectory) }
        guard status.kind == (isDirectory ? .directory : .regular) else {
            throw .wrongKind(path: path, expectedDirectory: isDirectory)
        }
        guard status.owner == geteuid() else { throw .foreignOwner(path: path, isDirectory: isDirectory, owner: status.owner) }
        guard status.permissions & 0o077 == 0 else {
            throw .notPrivate(path: path, isDirectory: isDirectory, permissions: status.permissions)
        }
    }

    /// Reads a private file whole: opened with `O_NOFOLLOW` (a symlink is refused), then checked
    /// on the open descriptor (regular, ours, no group/other bits), so no swap between check and
    /// read is possible.
    /// - Throws: ``PrivateFileError``: `.symbolicLink` for a link, `.system` for `open`/`read`
    ///   failures (`EFBIG` past `limit`).
    public static func read(_ path: String, limit: Int) throws(PrivateFileError) -> [UInt8] {
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(path, .readOnly, options: [.noFollow, .nonBlocking])
        } catch where error.isSymbolicLink {
            throw .symbolicLink(path: path, isDirectory: false)
        } catch {
            throw .system(error)
        }
        do {
            try check(try fd.status(), path: path, isDirectory: false)
            try fd.setNonBlocking(false)
            return try fd.readAll(limit: limit)
        } catch let e as PrivateFileError {
            throw e
        } catch let e as SystemError {
            throw .system(e)
        } catch {
            throw .system(SystemError(call: "read", path: path, code: EIO))
        }
    }
}

/// Whole-file replacement that never leaves a half-written file, nor a temporary one.
public enum AtomicFile {
    /// Writes `bytes` to `path`: a temporary file in the same folder with a random name, created
    /// `O_CREAT|O_EXCL|O_NOFOLLOW` with `mode`; every byte written; `fsync` checked; then `rename`
    /// over `path` (or, `exclusive`, `link` to it: the first writer wins); then the folder is
    /// synced. The temporary file is removed on every failure.
    /// - Returns: false only when `exclusive` and `path` already existed (nothing was changed).
    /// - Throws: ``SystemError``: `ENOSPC` (``SystemError/isFull``) and every other write error
    ///   included; none is dropped.
    @discardableResult
    public static func write(_ bytes: [UInt8], to path: String, exclusive: Bool = false,
                             mode: UInt32 = 0o600) throws(SystemError) -> Bool {
        try narrowing { try bytes.withUnsafeBytes { b in try write(b, to: path, exclusive: exclusive, mode: mode) } }
    }

    /// ``write(_:to:exclusive:mode:)-([UInt8],_,_,_)`` from a buffer (no copy of a secret is made).
    @discardableResult
    public static func write(_ bytes: UnsafeRawBufferPointer, to path: String, exclusive: Bool = false,
                             mode: UInt32 = 0o600) throws(SystemError) -> Bool {
        let folder = folderOf(path)
        let base = path.split(separator: "/").last.map(String.init) ?? path
        var temporary = ""
        var fd = FileDescriptor(owning: -1)
        for attempt in 0..<8 {
            var random = SystemRandomNumberGenerator()
            let suffix = String(random.next(), radix: 16)
            let prefix = !path.contains("/") ? "" : folder == "/" ? "/" : folder + "/"
            temporary = prefix + ".\(base).tmp-\(suffix)"
            do {
                fd = try FileDescriptor.open(temporary, .writeOnly, options: [.create, .exclusive, .noFollow], mode: mode)
                break
            } catch where error.isExists && attempt < 7 {
                continue
            } catch {
                throw error.about(path)
            }
        }
        let name = temporary
        do {
            try fd.writeAll(bytes)
            try fd.sync()
            try fd.close()
            if exclusive {
                do {
                    try syscall("link", path: path) { link(name, path) }
                } catch where error.isExists {
                    _ = unlink(name)
                    return false
                }
                _ = unlink(name)
            } else {
                try syscall("rename", path: path) { rename(name, path) }
            }
        } catch {
            _ = unlink(name)
            throw error.about(error.path == name ? path : error.path ?? path)
        }
        try syncFolder(folder)
        return true
    }

    /// Removes what killed writers left behind in `folder`: regular files of this user whose name
    /// starts with `.` and contains one of `markers` (`.tmp-` by default: ``write(_:to:exclusive:mode:)-([UInt8],_,_,_)``'s
    /// temporaries), last changed more than `seconds` ago (a live writer's file is younger).
    /// - Returns: how many went.
    @discardableResult
    public static func removeStaleTemporaries(in folder: String, olderThan seconds: Int = 60, markers: [String] = [".tmp-"]) -> Int {
        guard let names = try? FileSystem.contents(of: folder) else { return 0 }
        var removed = 0
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        for name in names where name.hasPrefix(".") && markers.contains(where: { name.contains($0) }) {
            let path = folder + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == getuid(),
                  Int(now.tv_sec) - Int(st.st_mtim.tv_sec) > seconds else { continue }
            if unlink(path) == 0 { removed += 1 }
        }
        return removed
    }

    /// Flushes a folder's entries (a rename or a new file in it) to the disk. File systems that
    /// cannot sync a folder (`EINVAL`) count as done.
    /// - Throws: ``SystemError`` for `open` or `fsync`.
    public static func syncFolder(_ folder: String) throws(SystemError) {
        let dir = try FileDescriptor.open(folder, .readOnly, options: [.directory])
        do { try dir.sync() } catch where error.code == EINVAL {}
    }

    static func folderOf(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
