internal import CSodium

/// BLAKE2b (`crypto_generichash`), keyed or not.
package enum KeyedHash {
    /// BLAKE2b of `message` with an optional key (empty = unkeyed), `outputLength` 16...64 bytes.
    package static func hash(_ message: [UInt8], key: [UInt8], outputLength: Int = 32) throws -> [UInt8] {
        _ = Sodium.ready
        var out = [UInt8](repeating: 0, count: outputLength)
        let rc = out.withUnsafeMutableBufferPointer { o in
            crypto_generichash(o.baseAddress!, outputLength, message, UInt64(message.count),
                               key.isEmpty ? nil : key, key.count)
        }
        try Sodium.check(rc, "blake2b")
        return out
    }

    /// BLAKE2b keyed with a secret key (the key stays in guarded memory).
    package static func hash(_ message: [UInt8], key: borrowing SecretBytes, outputLength: Int = 32) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: outputLength)
        let rc = key.withUnsafeBytes { k in
            out.withUnsafeMutableBufferPointer { o in
                crypto_generichash(o.baseAddress!, outputLength, message, UInt64(message.count),
                                   k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
            }
        }
        try Sodium.check(rc, "blake2b")
        return out
    }

    /// BLAKE2b keyed with a secret key of bytes read in place, into `out` (its whole length,
    /// 16...64 bytes): a loop that checks every row's name index without an array per row.
    package static func hash(_ message: UnsafeRawBufferPointer, key: borrowing SecretBytes, into out: UnsafeMutableRawBufferPointer) throws {
        let rc = key.withUnsafeBytes { k in
            crypto_generichash(out.baseAddress!.assumingMemoryBound(to: UInt8.self), out.count,
                               message.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(message.count),
                               k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
        }
        try Sodium.check(rc, "blake2b")
    }

    /// Derives a 32-byte subkey in guarded memory: BLAKE2b-256 keyed by `key` over `context`.
    package static func deriveKey(from key: borrowing SecretBytes, context: String) throws -> SecretBytes {
        let out = try SecretBytes(zeroed: 32)
        let msg = Array(context.utf8)
        let rc = key.withUnsafeBytes { k in
            out.withUnsafeMutableBytes { o in
                crypto_generichash(o.baseAddress!.assumingMemoryBound(to: UInt8.self), 32, msg, UInt64(msg.count),
                                   k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
            }
        }
        try Sodium.check(rc, "blake2b derive")
        return out
    }
}
