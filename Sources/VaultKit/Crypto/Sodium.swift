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
public enum CryptoError: Error, Equatable, Sendable {
    /// A libsodium call returned an error (the operation name says which).
    case failed(String)
    /// An authenticated decryption failed: wrong key, or the data was altered.
    case authenticationFailed
    /// Out of guarded memory.
    case outOfMemory
    /// A key, nonce or salt of the wrong size was passed.
    case badLength(String)
}
