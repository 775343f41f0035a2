internal import CSodium

/// X25519 sealing to a public key (ECIES over XChaCha20-Poly1305 with associated data): lets a
/// slot be re-wrapped by whoever holds only the public key, while opening needs the private key.
/// Used by the recovery slot so rotation can re-wrap it without the recovery key.
enum X25519Seal {
    /// The public key of the private scalar `secret` (32 bytes).
    static func publicKey(of secret: borrowing SecretBytes) throws -> [UInt8] {
        var pk = [UInt8](repeating: 0, count: 32)
        let rc = secret.withUnsafeBytes { s in
            pk.withUnsafeMutableBufferPointer { crypto_scalarmult_base($0.baseAddress!, s.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
        }
        try Sodium.check(rc, "x25519 base")
        return pk
    }

    /// The key-encryption key from a shared point and both public keys.
    private static func kek(shared: borrowing SecretBytes, ephemeral: [UInt8], recipient: [UInt8]) throws -> SecretBytes {
        try SecretBytes(copying: try KeyedHash.hash(Array("vault-x25519-seal-v1".utf8) + ephemeral + recipient, key: shared, outputLength: 32))
    }

    private static func sharedPoint(_ secret: borrowing SecretBytes, _ point: [UInt8]) throws -> SecretBytes {
        guard point.count == 32 else { throw CryptoError.badLength("public key") }
        let out = try SecretBytes(zeroed: 32)
        let rc = secret.withUnsafeBytes { s in
            out.withUnsafeMutableBytes { o in
                crypto_scalarmult(o.baseAddress!.assumingMemoryBound(to: UInt8.self), s.baseAddress!.assumingMemoryBound(to: UInt8.self), point)
            }
        }
        // A low-order point gives an all-zero result, which libsodium reports as an error.
        if rc != 0 { throw CryptoError.authenticationFailed }
        return out
    }

    /// Seals `plaintext` to `recipient`: returns (nonce, ephemeral public key ‖ ciphertext).
    static func seal(_ plaintext: borrowing SecretBytes, to recipient: [UInt8], associatedData: [UInt8]) throws -> (nonce: [UInt8], sealed: [UInt8]) {
        let eph = try SecretBytes.random(count: 32)
        let ephPublic = try publicKey(of: eph)
        let key = try kek(shared: try sharedPoint(eph, recipient), ephemeral: ephPublic, recipient: recipient)
        let s = try plaintext.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: associatedData) }
        return (s.nonce, ephPublic + s.ciphertext)
    }

    /// Opens what `seal` made with the recipient's private scalar.
    static func open(_ sealed: [UInt8], nonce: [UInt8], secret: borrowing SecretBytes, associatedData: [UInt8]) throws -> SecretBytes {
        guard sealed.count > 32 else { throw CryptoError.authenticationFailed }
        let ephPublic = Array(sealed[..<32])
        let key = try kek(shared: try sharedPoint(secret, ephPublic), ephemeral: ephPublic, recipient: try publicKey(of: secret))
        return try AEAD.open(Array(sealed[32...]), key: key, nonce: nonce, associatedData: associatedData)
    }
}
