internal import Glibc

/// A private folder in memory for a secret that must pass through a file (the notes a person
/// edits with `$EDITOR`): made 0700 with `mkdtemp` on a tmpfs (`$XDG_RUNTIME_DIR`, else
/// `/dev/shm`), so the file never reaches a disk; ``wipe()`` overwrites every file in it
/// with zeros (the editor's swap and backup files too) before removing them and the folder.
public struct ScratchFolder: Sendable {
    /// The folder's path.
    public let path: String

    /// The tmpfs folders tried, in order: `$XDG_RUNTIME_DIR` (the user's own), then `/dev/shm`.
    public static func candidates(environment: [String: String]) -> [String] {
        [environment["XDG_RUNTIME_DIR"], "/dev/shm"].compactMap { $0.flatMap { $0.hasPrefix("/") ? $0 : nil } }
    }

    /// Whether `path` is on a tmpfs (memory, not a disk): the file system of the longest mount
    /// point in `/proc/self/mounts` that holds the path (resolved).
    public static func isMemory(_ path: String) -> Bool {
        guard let resolved = realpath(path, nil) else { return false }
        let real = String(cString: resolved)
        free(resolved)
        guard let table = try? FileDescriptor.open("/proc/self/mounts", .readOnly).readAll(limit: 4 << 20) else { return false }
        var best = (length: -1, type: "")
        for line in table.split(separator: 10) {
            let fields = line.split(separator: 32)
            guard fields.count >= 3 else { continue }
            let point = unescapeMountPoint(String(decoding: fields[1], as: UTF8.self))
            let holds = point == "/" || real == point || real.hasPrefix(point + "/")
            if holds && point.count > best.length { best = (point.count, String(decoding: fields[2], as: UTF8.self)) }
        }
        return best.type == "tmpfs" || best.type == "ramfs"
    }

    /// A mount point as the kernel writes it: space, tab, newline and backslash as `\ooo`.
    static func unescapeMountPoint(_ text: String) -> String {
        var out: [UInt8] = [], bytes = Array(text.utf8), i = 0
        while i < bytes.count {
            if bytes[i] == 92, i + 3 < bytes.count + 0, let v = UInt8(String(decoding: bytes[(i + 1)...min(i + 3, bytes.count - 1)], as: UTF8.self), radix: 8) {
                out.append(v)
                i += 4
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Makes `vault-PURPOSE-XXXXXX` (0700) in the first candidate that is a tmpfs.
    /// - Throws: ``SystemError`` for `mkdtemp`; `ENOENT` naming the candidates when none is a tmpfs.
    public static func make(_ purpose: String, environment: [String: String]) throws(SystemError) -> ScratchFolder {
        let all = candidates(environment: environment)
        guard let base = all.first(where: isMemory) else {
            throw SystemError(call: "statfs", path: all.joinedText(separator: ", ") + " (no tmpfs)", code: ENOENT)
        }
        var template = Array((base + "/vault-\(purpose)-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard made != nil else { throw SystemError.current("mkdtemp", path: base) }
        let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // mkdtemp makes 0700 whatever the umask; checked all the same.
        try syscall("chmod", path: path) { chmod(path, 0o700) }
        return ScratchFolder(path: path)
    }

    /// Writes `bytes` to a new file `name` (0600, `O_EXCL`, no symlink followed) in the folder.
    /// - Returns: the file's path.
    /// - Throws: ``SystemError`` for `open` or `write`.
    public func create(_ name: String, _ bytes: UnsafeRawBufferPointer) throws(SystemError) -> String {
        let file = path + "/" + name
        var fd = try FileDescriptor.open(file, .writeOnly, options: [.create, .exclusive, .noFollow], mode: 0o600)
        try fd.writeAll(bytes)
        try fd.close()
        return file
    }

    /// Overwrites every regular file in the folder with zeros (flushed), then removes the files
    /// and the folder. Best effort on each file: one that cannot be wiped is still removed.
    public func wipe() {
        if let dir = opendir(path) {
            var names: [String] = []
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(dir)
            for name in names {
                let file = path + "/" + name
                do {
                    let fd = try FileDescriptor.open(file, .writeOnly, options: [.noFollow])
                    var s = stat()
                    if fstat(fd.rawValue, &s) == 0, (s.st_mode & S_IFMT) == S_IFREG, s.st_size > 0 {
                        try fd.writeAll([UInt8](repeating: 0, count: Int(s.st_size)))
                        _ = fsync(fd.rawValue)
                    }
                } catch {
                    // Not a file we can open (a folder, a socket): removed below all the same.
                }
                unlink(file)
            }
        }
        rmdir(path)
    }
}
