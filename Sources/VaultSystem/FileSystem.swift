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
