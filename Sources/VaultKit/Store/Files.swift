import FoundationEssentials
import VaultSystem

/// VaultSystem's private files and atomic replace, with their errors as the vault reports them:
/// a folder or file reachable by others is exit 6 with a `chmod` hint, anything else exit 6
/// naming the path.
enum PrivateFiles {
    /// Creates `path` and its parents as 0700 folders.
    static func makeFolder(_ path: String) throws {
        do { try VaultSystem.PrivateFiles.makeFolder(path) } catch { throw error.vaultError }
    }

    /// Throws unless `path` is absent or private to this user (no group or other bits, owned by
    /// this uid, not a symlink, of the expected kind).
    static func checkPrivate(_ path: String, isDirectory: Bool) throws {
        do {
            try VaultSystem.PrivateFiles.check(path, isDirectory: isDirectory)
        } catch {
            if error.isNotFound { return }
            switch error {
            case .notPrivate, .symbolicLink: throw VaultError.insecurePermissions(path: path, isDirectory: isDirectory)
            default: throw VaultError.io(path: error.path, error.message)
            }
        }
    }
}

extension PrivateFiles {
    /// The content of a private file (never through a symlink, checked on the open descriptor),
    /// or nil when there is none.
    static func read(_ path: String, limit: Int = 1 << 20) throws -> [UInt8]? {
        do {
            return try VaultSystem.PrivateFiles.read(path, limit: limit)
        } catch {
            if error.isNotFound { return nil }
            switch error {
            case .notPrivate, .symbolicLink: throw VaultError.insecurePermissions(path: path, isDirectory: false)
            default: throw VaultError.io(path: error.path, error.message)
            }
        }
    }
}

/// Whole-file writes that never leave a half-written file (VaultSystem's atomic replace).
enum AtomicFile {
    static func write(_ bytes: [UInt8], to path: String, exclusive: Bool = false) throws {
        do { try VaultSystem.AtomicFile.write(bytes, to: path, exclusive: exclusive) } catch { throw error.vaultError }
    }
}

extension SystemError {
    /// Exit 6 naming the path (or the call when there is none).
    var vaultError: VaultError { .io(path: path ?? call.rawValue, reason) }
}
