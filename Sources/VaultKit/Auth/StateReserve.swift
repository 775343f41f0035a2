import Synchronization
import VaultSystem

/// Space a key authority keeps back on the file system of its state, so that recording a failed
/// match, a wrong passcode or a passcode unlock does not need space another user can take: a file
/// of ``size`` bytes of random data (real blocks, synced: neither sparse nor compressible to
/// nothing), made when there is room. A state write that fails because the file system or the
/// quota is full (`ENOSPC`, `EDQUOT`) gives back a piece of it and is tried once more; a later
/// ``replenish()`` that finds room makes it whole again. `vault-authd` keeps one (`STATE/reserve`);
/// the embedded authority, whose state is in the user's own files, has none.
package final class StateReserve: Sendable {
    /// The size kept back by default: 1 MiB.
    package static let defaultSize = 1 << 20
    /// The smallest piece a full write gets back: 64 KiB (a lockout record is under 8 KiB). Given
    /// back a piece at a time, the reserve outlasts a user who fills the disk again after each one.
    package static let piece = 64 << 10

    /// The reserve's file.
    package let path: String
    /// Its size when whole.
    package let size: Int
    private let folder: String
    private let log: @Sendable (String) -> Void
    /// Whether a piece was given back since the reserve was last whole (for the log).
    private let depleted = Mutex(false)

    /// A reserve of `size` bytes in the file `path` (in the state folder: the same file system),
    /// not made yet; `log` gets one line each time a piece is given back or it is whole again.
    package init(path: String, size: Int = StateReserve.defaultSize, log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.path = path
        self.size = max(StateReserve.piece, size)
        let slash = path.lastIndex(of: "/")
        folder = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        self.log = log
    }

    /// The bytes held now (0 when the file is missing).
    package var held: Int {
        guard let status = try? FileStatus.of(path), status.kind == .regular else { return 0 }
        return Int(status.size)
    }

    /// Makes the reserve whole when it is not and the file system has room for what is missing
    /// and a piece more (left for the request that follows). Never throws: a reserve that cannot
    /// be made now is made by a later call.
    /// - Returns: whether the reserve is whole.
    @discardableResult
    package func replenish() -> Bool {
        depleted.withLock { depleted in
            let have = held
            if have >= size { return true }
            guard let room = try? FileSystem.space(of: folder), room.availableBytes >= Int64(size - have + StateReserve.piece),
                  have > 0 || (room.availableInodes ?? 2) > 1 else { return false }
            do throws(SystemError) { try grow() } catch { return false }
            if depleted {
                log("the reserve \(path) is whole again (\(size >> 10) KiB)")
                depleted = false
            }
            return true
        }
    }

    /// Gives back space for a write of `bytes` (to `what`) that failed because the file system
    /// is full: a piece of at least ``piece`` bytes cut from the file's end, or the whole file
    /// when no more than that is left or when the file system has no inode left (removing the
    /// file frees one; cutting it does not).
    /// - Returns: the bytes given back; 0 when there was no reserve left.
    @discardableResult
    package func release(for bytes: Int, writing what: String) -> Int {
        depleted.withLock { depleted in
            let fd: FileDescriptor
            do throws(SystemError) { fd = try FileDescriptor.open(path, .writeOnly, options: [.noFollow]) } catch {
                log("the file system of \(folder) is full (writing \(what)) and no reserve is left")
                return 0
            }
            guard let status = try? fd.status(), status.kind == .regular, status.size > 0 else {
                log("the file system of \(folder) is full (writing \(what)) and no reserve is left")
                return 0
            }
            let have = Int(status.size)
            let want = (max(0, bytes) + (16 << 10) + StateReserve.piece - 1) / StateReserve.piece * StateReserve.piece
            let noInode = (try? FileSystem.space(of: folder))?.availableInodes == 0
            let freed: Int
            do throws(SystemError) {
                if noInode || have <= want {
                    try FileSystem.remove(path)
                    freed = have
                } else {
                    try fd.truncate(to: Int64(have - want))
                    freed = want
                }
            } catch {
                log("the file system of \(folder) is full (writing \(what)); the reserve could not be given back: \(error)")
                return 0
            }
            depleted = true
            log("the file system of \(folder) is full (writing \(what)): gave back \(freed >> 10) KiB of the reserve, \((have - freed) >> 10) KiB left")
            return freed
        }
    }

    /// Writes `bytes` to `path` atomically (VaultSystem's `AtomicFile`); when the file system
    /// is full, gives back a piece of the reserve and writes once more.
    /// - Throws: `.io` naming `path` (a full disk with no reserve left says so).
    package func write(_ bytes: [UInt8], to path: String) throws {
        do throws(SystemError) {
            do throws(SystemError) { try VaultSystem.AtomicFile.write(bytes, to: path) } catch where error.isFull {
                guard release(for: bytes.count, writing: path) > 0 else { throw error }
                try VaultSystem.AtomicFile.write(bytes, to: path)
            }
        } catch {
            throw error.vaultError
        }
    }

    /// Runs `body` (which may make files: a new user's folder and device secret); when it fails
    /// because the file system is full, gives back a piece of the reserve and runs it once more.
    /// `body` must be safe to run twice.
    /// - Throws: what `body` throws.
    package func retryingWhenFull<R>(_ what: String, _ body: () throws -> R) throws -> R {
        do { return try body() } catch where StateReserve.isFull(error) {
            guard release(for: 0, writing: what) > 0 else { throw error }
            return try body()
        }
    }

    /// Whether `error` says the file system or the quota is full: a `SystemError`, or the exit-6
    /// `.io` error VaultKit made of one (which keeps only the system's text of the code).
    static func isFull(_ error: any Error) -> Bool {
        if let e = error as? SystemError { return e.isFull }
        if case .io(_, let message)? = error as? VaultError {
            return message == SystemError.reason(Errno.noSpace) || message == SystemError.reason(Errno.quotaExceeded)
        }
        return false
    }

    /// Appends random bytes up to ``size`` and syncs; on failure cuts the file back to where it was.
    private func grow() throws(SystemError) {
        var fd = try FileDescriptor.open(path, .writeOnly, options: [.create, .append, .noFollow], mode: 0o600)
        let status = try fd.status()
        guard status.kind == .regular else { throw SystemError(call: "open", path: path, code: Errno.invalidArgument) }
        let start = status.size
        do throws(SystemError) {
            // Not a secret, only incompressible: one seed from the system, then SplitMix64.
            var seed = UInt64.random(in: .min ... .max)
            var chunk = [UInt8](repeating: 0, count: 64 << 10)
            var at = Int(start)
            while at < size {
                let n = min(chunk.count, size - at)
                chunk.withUnsafeMutableBytes { b in
                    for i in stride(from: 0, to: b.count - 7, by: 8) {
                        seed &+= 0x9E37_79B9_7F4A_7C15
                        var z = seed
                        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                        b.storeBytes(of: z ^ (z >> 31), toByteOffset: i, as: UInt64.self)
                    }
                }
                try fd.writeAll(n == chunk.count ? chunk : Array(chunk[..<n]))
                at += n
            }
            try fd.sync()
        } catch {
            try? fd.truncate(to: start)
            throw error
        }
        try fd.close()
    }
}
