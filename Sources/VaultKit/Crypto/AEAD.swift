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
        try ciphertext.withUnsafeBytes { c in
            try nonce.withUnsafeBytes { n in
                try associatedData.withUnsafeBytes { ad in try open(c, key: key, nonce: n, associatedData: ad, into: out) }
            }
        }
    }

    /// Opens bytes read in place (a row's columns as SQLite holds them, associated data built in
    /// a reused buffer) into the start of `out`; returns the plaintext length.
    /// - Throws: `CryptoError.authenticationFailed`, or `.badLength` when `out` is too small.
    package static func open(_ ciphertext: UnsafeRawBufferPointer, key: borrowing SecretBytes, nonce: UnsafeRawBufferPointer,
                            associatedData: UnsafeRawBufferPointer, into out: borrowing SecretBytes) throws -> Int {
        try out.withUnsafeMutableBytes { o in try open(ciphertext, key: key, nonce: nonce, associatedData: associatedData, into: o) }
    }

    /// Opens bytes read in place into the start of `out`, guarded memory the caller lends (a
    /// reused record buffer, already borrowed for the plaintext's whole use); returns the
    /// plaintext length.
    /// - Throws: `CryptoError.authenticationFailed`, or `.badLength` when `out` is too small.
    package static func open(_ ciphertext: UnsafeRawBufferPointer, key: borrowing SecretBytes, nonce: UnsafeRawBufferPointer,
                            associatedData: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) throws -> Int {
        guard key.count == keyLength else { throw CryptoError.badLength("key") }
        guard nonce.count == nonceLength else { throw CryptoError.badLength("nonce") }
        guard ciphertext.count >= tagLength else { throw CryptoError.authenticationFailed }
        guard out.count >= ciphertext.count - tagLength else { throw CryptoError.badLength("buffer") }
        var outLen: UInt64 = 0
        let rc = key.withUnsafeBytes { k in
            crypto_aead_xchacha20poly1305_ietf_decrypt(
                out.baseAddress!.assumingMemoryBound(to: UInt8.self), &outLen, nil,
                ciphertext.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(ciphertext.count),
                associatedData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(associatedData.count),
                nonce.baseAddress!.assumingMemoryBound(to: UInt8.self),
                k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        if rc != 0 { throw CryptoError.authenticationFailed }
        return Int(outLen)
    }

    /// Seals `plaintext` under `key` with `nonce` (24 random bytes the caller drew) into the
    /// start of `out` (ciphertext||tag, `plaintext.count + tagLength` bytes): a loop that re-seals
    /// every row into one reused buffer.
    /// - Throws: `.badLength` for a key or nonce of the wrong size or an `out` too small.
    static func seal(_ plaintext: UnsafeRawBufferPointer, key: borrowing SecretBytes, nonce: UnsafeRawBufferPointer,
                     associatedData: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) throws {
        guard key.count == keyLength else { throw CryptoError.badLength("key") }
        guard nonce.count == nonceLength else { throw CryptoError.badLength("nonce") }
        guard out.count >= plaintext.count + tagLength else { throw CryptoError.badLength("buffer") }
        var outLen: UInt64 = 0
        let rc = key.withUnsafeBytes { k in
            crypto_aead_xchacha20poly1305_ietf_encrypt(
                out.baseAddress!.assumingMemoryBound(to: UInt8.self), &outLen,
                plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                associatedData.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(associatedData.count), nil,
                nonce.baseAddress!.assumingMemoryBound(to: UInt8.self),
                k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        try Sodium.check(rc, "xchacha20poly1305 encrypt")
    }
}
