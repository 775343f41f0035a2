internal import CSodium

/// The one gate every libsodium call passes through: initialises the library once and turns a
/// non-zero return code into a thrown `CryptoError`.
enum Sodium {
    /// `sodium_init` runs once per process; a failure there leaves no safe way to go on.
    static let ready: Bool = {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
        return true
    }()

    /// Throws `CryptoError.failed(operation)` unless `code` is 0.
    static func check(_ code: Int32, _ operation: String) throws {
        _ = ready
        if code != 0 { throw CryptoError.failed(operation) }
    }
}

/// Errors raised by the crypto layer. They never carry secret material.
package enum CryptoError: Error, Equatable, Sendable {
    /// A libsodium call returned an error (the operation name says which).
    case failed(String)
    /// An authenticated decryption failed: wrong key, or the data was altered.
    case authenticationFailed
    /// Out of guarded memory.
    case outOfMemory
    /// A key, nonce or salt of the wrong size was passed.
    case badLength(String)
}

extension CryptoError {
    /// The vault error a crypto failure that reached a command means: never a debug dump.
    package var vaultError: VaultError {
        switch self {
        case .failed(let op):
            .failure("the cryptographic operation \(op) failed", hint: "argon2id needs the memory its slot asks for; close other programs or check 'ulimit -v'")
        case .authenticationFailed: .corrupt("a record failed authentication")
        case .outOfMemory:
            .failure("out of locked memory for keys", hint: "raise the locked-memory limit ('ulimit -l') or close other vault processes")
        case .badLength(let what): .corrupt("\(what) has the wrong length")
        }
    }
}
