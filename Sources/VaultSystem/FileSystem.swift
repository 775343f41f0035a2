import Glibc

/// Single file-system calls that VaultSystem's other types do not already make, each through
/// the one errno check.
public enum FileSystem {
    /// A second name for `existing` (`link(2)`): fails with EEXIST instead of replacing a file.
    public static func link(_ existing: String, to new: String) throws(SystemError) {
        try syscall("link", path: new) { Glibc.link(existing, new) }
    }

    /// Removes a file; a missing one is not an error.
    public static func remove(_ path: String) throws(SystemError) {
        do {
            try syscall("unlink", path: path) { unlink(path) }
        } catch let e where e.isNotFound {
            return
        }
    }

    /// Removes an empty folder (`rmdir(2)`); a missing one is not an error.
    /// - Throws: ``SystemError`` for `rmdir` (`ENOTEMPTY` when something is left in it).
    public static func removeFolder(_ path: String) throws(SystemError) {
        do {
            try syscall("rmdir", path: path) { rmdir(path) }
        } catch let e where e.isNotFound {
            return
        }
    }

    /// Renames `old` to `new` (`rename(2)`, replacing `new`).
    public static func rename(_ old: String, to new: String) throws(SystemError) {
        try syscall("rename", path: old) { Glibc.rename(old, new) }
    }

    /// Overwrites the start of an existing file in place with `bytes` and syncs it (never through
    /// a symlink): what a secret's file gets before it is removed.
    public static func overwrite(_ path: String, with bytes: [UInt8]) throws(SystemError) {
        var fd = try FileDescriptor.open(path, .writeOnly, options: [.noFollow])
        try fd.writeAll(bytes)
        try fd.sync()
        try fd.close()
    }

    /// Sets the permission bits of `path` (never following a symlink at the last component is not
    /// possible with chmod; callers check the kind first or own the folder).
    public static func setPermissions(_ path: String, _ mode: UInt32) throws(SystemError) {
        try syscall("chmod", path: path) { chmod(path, mode_t(mode)) }
    }

    /// Whether anything (a file, a folder, a dangling symlink) exists at `path`.
    public static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// What is left on the file system holding `path` for a process without privileges
    /// (`statvfs(2)`: `f_bavail`, `f_favail`; the blocks ext4 keeps back for root are not counted).
    /// - Throws: ``SystemError`` for `statvfs`.
    public static func space(of path: String) throws(SystemError) -> FileSystemSpace {
        var s = statvfs()
        try syscall("statvfs", path: path) { statvfs(path, &s) }
        let unit = Int64(s.f_frsize > 0 ? s.f_frsize : s.f_bsize)
        return FileSystemSpace(availableBytes: Int64(s.f_bavail) * unit,
                               availableInodes: s.f_files == 0 ? nil : Int64(s.f_favail))
    }

    /// The names in a folder (without `.` and `..`).
    public static func contents(of folder: String) throws(SystemError) -> [String] {
        guard let dir = opendir(folder) else { throw SystemError.current("opendir", path: folder) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}

/// Room left on a file system (``FileSystem/space(of:)``).
public struct FileSystemSpace: Equatable, Sendable {
    /// Bytes an unprivileged process may still allocate.
    public var availableBytes: Int64
    /// Inodes (new files) it may still create; nil when the file system does not count them
    /// (btrfs and others that make inodes as they go report 0 in all).
    public var availableInodes: Int64?

    /// Room of `availableBytes` and `availableInodes`.
    public init(availableBytes: Int64, availableInodes: Int64?) {
        self.availableBytes = availableBytes
        self.availableInodes = availableInodes
    }
}
