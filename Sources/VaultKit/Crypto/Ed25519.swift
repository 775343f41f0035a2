internal import CSodium

/// Ed25519 signatures (RFC 8032) and the SHA-2 digests, from libsodium: what the SSH agent signs
/// with for `ssh-ed25519` keys and hashes for fingerprints. The secret key is libsodium's 64
/// bytes (seed ‖ public key), the layout OpenSSH's `ssh-ed25519` private key carries.
public enum Ed25519 {
    /// The size of a public key.
    public static let publicKeyBytes = 32
    /// The size of a secret key (seed ‖ public key).
    public static let secretKeyBytes = 64
    /// The size of a signature.
    public static let signatureBytes = 64

    /// A new 64-byte secret key in guarded memory (its second half is the public key).
    /// - Throws: `CryptoError` when libsodium fails or guarded memory runs out.
    public static func generate() throws -> SecretBytes {
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        let sk = try SecretBytes(zeroed: secretKeyBytes)
        let rc = sk.withUnsafeMutableBytes { crypto_sign_keypair(&pk, $0.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
        try Sodium.check(rc, "ed25519 keypair")
        return sk
    }

    /// The signature of `message` under the 64-byte secret key.
    /// - Throws: `CryptoError.badLength` for a secret key of another size.
    public static func sign(_ message: [UInt8], secretKey: borrowing SecretBytes) throws -> [UInt8] {
        guard secretKey.count == secretKeyBytes else { throw CryptoError.badLength("ed25519 secret key") }
        var sig = [UInt8](repeating: 0, count: signatureBytes)
        let rc = secretKey.withUnsafeBytes { sk in
            crypto_sign_detached(&sig, nil, message, UInt64(message.count), sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        try Sodium.check(rc, "ed25519 sign")
        return sig
    }

    /// Whether `signature` is a valid signature of `message` by `publicKey`. Wrong sizes are
    /// simply not valid.
    public static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        _ = Sodium.ready
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes else { return false }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }

    /// Whether the secret key's second half is `publicKey` and its seed makes that public key
    /// (a key an agent is handed is checked before it is kept).
    public static func secretKey(_ secretKey: borrowing SecretBytes, matches publicKey: [UInt8]) -> Bool {
        guard secretKey.count == secretKeyBytes, publicKey.count == publicKeyBytes else { return false }
        _ = Sodium.ready
        // libsodium's sk_to_pk only copies the second half: the public key is derived from the
        // seed (into guarded memory, with the key pair it makes), so a seed of another key fails.
        guard let derivedSecret = try? SecretBytes(zeroed: secretKeyBytes) else { return false }
        var derived = [UInt8](repeating: 0, count: publicKeyBytes)
        let rc = secretKey.withUnsafeBytes { sk in
            derivedSecret.withUnsafeMutableBytes { out in
                crypto_sign_seed_keypair(&derived, out.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                         sk.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        let stored = secretKey.withUnsafeBytes { Array($0[32..<64]) }
        return rc == 0 && constantTimeEqual(derived, publicKey) && constantTimeEqual(stored, publicKey)
    }
}

/// SHA-256 and SHA-512 of public data (fingerprints, signed-data digests), from libsodium.
public enum SHA2 {
    /// SHA-256 of `data`.
    public static func sha256(_ data: [UInt8]) -> [UInt8] {
        _ = Sodium.ready
        var out = [UInt8](repeating: 0, count: 32)
        _ = crypto_hash_sha256(&out, data, UInt64(data.count))
        return out
    }

    /// SHA-512 of `data`.
    public static func sha512(_ data: [UInt8]) -> [UInt8] {
        _ = Sodium.ready
        var out = [UInt8](repeating: 0, count: 64)
        _ = crypto_hash_sha512(&out, data, UInt64(data.count))
        return out
    }
}
