import Foundation

/// Whole-file writes that never leave a half-written file: temp file, fsync, rename, fsync folder.
/// (Moves onto VaultSystem's atomic replace with the layers work.)
enum AtomicFile {
    static func write(_ bytes: [UInt8], to path: String, exclusive: Bool = false) throws {
        let tmp = path + ".tmp-\(getpid())-\(hexString(randomBytes(6)))"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw VaultError.io(path: tmp, String(cString: strerror(errno))) }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, bytes.count - off) }
            if n < 0 { if errno == EINTR { continue }; let e = errno; close(fd); unlink(tmp); throw VaultError.io(path: tmp, String(cString: strerror(e))) }
            off += n
        }
        if fsync(fd) != 0 { let e = errno; close(fd); unlink(tmp); throw VaultError.io(path: tmp, String(cString: strerror(e))) }
        close(fd)
        if exclusive {
            // link() fails if another process created the file first: the first writer wins.
            if link(tmp, path) != 0 { let e = errno; unlink(tmp); if e == EEXIST { return }; throw VaultError.io(path: path, String(cString: strerror(e))) }
            unlink(tmp)
        } else if rename(tmp, path) != 0 {
            let e = errno
            unlink(tmp)
            throw VaultError.io(path: path, String(cString: strerror(e)))
        }
        let dir = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY)
        if dir >= 0 { fsync(dir); close(dir) }
    }
}
