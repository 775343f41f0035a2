internal import CSodium

/// XChaCha20-Poly1305-IETF: 32-byte key, 24-byte random nonce, 16-byte tag.
package enum AEAD {
    /// Key length in bytes.
    package static let keyLength = 32
    /// Nonce length in bytes; random nonces of this size never collide in practice.
    package static let nonceLength = 24
    /// Tag length in bytes.
    package static let tagLength = 16

    /// Seals `plaintext` under `key` with a fresh random nonce. Returns (nonce, ciphertext||tag).
    package static func seal(_ plaintext: UnsafeRawBufferPointer, key: borrowing SecretBytes, associatedData: [UInt8]) throws -> (nonce: [UInt8], ciphertext: [UInt8]) {
        let nonce = randomBytes(nonceLength)
        return (nonce, try seal(plaintext, key: key, nonce: nonce, associatedData: associatedData))
    }

    /// Seals an array (convenience for tests and public data).
    static func seal(_ plaintext: [UInt8], key: borrowing SecretBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try plaintext.withUnsafeBytes { p in try seal(p, key: key, nonce: nonce, associatedData: associatedData) }
    }

    /// Seals with an explicit nonce. Only test vectors pass a nonce; everything else uses the random one.
    static func seal(_ plaintext: UnsafeRawBufferPointer, key: borrowing SecretBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        guard key.count == keyLength else { throw CryptoError.badLength("key") }
        guard nonce.count == nonceLength else { throw CryptoError.badLength("nonce") }
        var out = [UInt8](repeating: 0, count: plaintext.count + tagLength)
        var outLen: UInt64 = 0
        let rc = key.withUnsafeBytes { k in
            out.withUnsafeMutableBufferPointer { o in
                crypto_aead_xchacha20poly1305_ietf_encrypt(
                    o.baseAddress!, &outLen,
                    plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                    associatedData, UInt64(associatedData.count), nil, nonce,
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        try Sodium.check(rc, "xchacha20poly1305 encrypt")
        return out
    }

    /// Opens `ciphertext` (ciphertext||tag) into guarded memory.
    /// - Throws: `CryptoError.authenticationFailed` if the key, nonce, data or associated data differ.
    package static func open(_ ciphertext: [UInt8], key: borrowing SecretBytes, nonce: [UInt8], associatedData: [UInt8]) throws -> SecretBytes {
        guard ciphertext.count >= tagLength else { throw CryptoError.authenticationFailed }
        let out = try SecretBytes(zeroed: ciphertext.count - tagLength)
        _ = try open(ciphertext, key: key, nonce: nonce, associatedData: associatedData, into: out)
        return out
    }

    /// Opens into the start of an existing guarded buffer (reused across many records, to spare a
    /// guarded allocation each); returns the plaintext length.
    /// - Throws: `CryptoError.authenticationFailed`, or `.badLength` when `buffer` is too small.
    package static func open(_ ciphertext: [UInt8], key: borrowing SecretBytes, nonce: [UInt8], associatedData: [UInt8],
                            into out: borrowing SecretBytes) throws -> Int {
        guard key.count == keyLength else { throw CryptoError.badLength("key") }
        guard nonce.count == nonceLength else { throw CryptoError.badLength("nonce") }
        guard ciphertext.count >= tagLength else { throw CryptoError.authenticationFailed }
        guard out.count >= ciphertext.count - tagLength else { throw CryptoError.badLength("buffer") }
        var outLen: UInt64 = 0
        let rc = key.withUnsafeBytes { k in
            out.withUnsafeMutableBytes { o in
                crypto_aead_xchacha20poly1305_ietf_decrypt(
                    o.baseAddress!.assumingMemoryBound(to: UInt8.self), &outLen, nil,
                    ciphertext, UInt64(ciphertext.count),
                    associatedData, UInt64(associatedData.count), nonce,
                    k.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        if rc != 0 { throw CryptoError.authenticationFailed }
        return Int(outLen)
    }
}
