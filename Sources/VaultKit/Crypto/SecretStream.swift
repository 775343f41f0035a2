internal import CSodium

/// libsodium's `crypto_secretstream_xchacha20poly1305`: a sequence of authenticated chunks
/// under one key, the last marked final, so a truncated, reordered or altered stream fails.
package final class SecretStreamPush {
    private let state: UnsafeMutablePointer<crypto_secretstream_xchacha20poly1305_state>
    /// The stream header the reader needs first (24 bytes, public).
    package private(set) var header: [UInt8]

    /// A stream under `key` (32 bytes).
    package init(key: borrowing SecretBytes) throws {
        state = UnsafeMutablePointer<crypto_secretstream_xchacha20poly1305_state>.allocate(capacity: 1)
        state.initialize(to: crypto_secretstream_xchacha20poly1305_state())
        header = []
        guard key.count == Int(crypto_secretstream_xchacha20poly1305_KEYBYTES) else { throw CryptoError.badLength("secretstream key") }
        var h = [UInt8](repeating: 0, count: Int(crypto_secretstream_xchacha20poly1305_HEADERBYTES))
        let p = state
        let rc = key.withUnsafeBytes { crypto_secretstream_xchacha20poly1305_init_push(p, &h, $0.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
        try Sodium.check(rc, "secretstream_init_push")
        header = h
    }

    deinit {
        sodium_memzero(state, MemoryLayout<crypto_secretstream_xchacha20poly1305_state>.size)
        state.deallocate()
    }

    /// Seals one chunk (`final` marks the last).
    package func push(_ plaintext: UnsafeRawBufferPointer, associatedData: [UInt8] = [], final: Bool) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: plaintext.count + Int(crypto_secretstream_xchacha20poly1305_ABYTES))
        var written: UInt64 = 0
        let tag = UInt8(final ? crypto_secretstream_xchacha20poly1305_TAG_FINAL : crypto_secretstream_xchacha20poly1305_TAG_MESSAGE)
        let rc = crypto_secretstream_xchacha20poly1305_push(state, &out, &written, plaintext.baseAddress?.assumingMemoryBound(to: UInt8.self),
                                                            UInt64(plaintext.count), associatedData, UInt64(associatedData.count), tag)
        try Sodium.check(rc, "secretstream_push")
        return out
    }

    /// Bytes a chunk of `n` plaintext bytes takes.
    package static func sealedLength(_ n: Int) -> Int { n + Int(crypto_secretstream_xchacha20poly1305_ABYTES) }
}

/// The reading side of `SecretStreamPush`.
package final class SecretStreamPull {
    private let state: UnsafeMutablePointer<crypto_secretstream_xchacha20poly1305_state>

    /// A reader of the stream with `header` under `key`.
    /// - Throws: `.authenticationFailed` for a bad header.
    package init(key: borrowing SecretBytes, header: [UInt8]) throws {
        state = UnsafeMutablePointer<crypto_secretstream_xchacha20poly1305_state>.allocate(capacity: 1)
        state.initialize(to: crypto_secretstream_xchacha20poly1305_state())
        guard key.count == Int(crypto_secretstream_xchacha20poly1305_KEYBYTES) else { throw CryptoError.badLength("secretstream key") }
        guard header.count == Int(crypto_secretstream_xchacha20poly1305_HEADERBYTES) else { throw CryptoError.badLength("secretstream header") }
        let p = state
        let rc = key.withUnsafeBytes { crypto_secretstream_xchacha20poly1305_init_pull(p, header, $0.baseAddress!.assumingMemoryBound(to: UInt8.self)) }
        _ = Sodium.ready
        if rc != 0 { throw CryptoError.authenticationFailed }
    }

    deinit {
        sodium_memzero(state, MemoryLayout<crypto_secretstream_xchacha20poly1305_state>.size)
        state.deallocate()
    }

    /// Opens one chunk into `out` (appended); returns whether it was the final one.
    /// - Throws: `.authenticationFailed` for a wrong key or altered chunk.
    package func pull(_ chunk: ArraySlice<UInt8>, associatedData: [UInt8] = [], into out: inout [UInt8]) throws -> Bool {
        let abytes = Int(crypto_secretstream_xchacha20poly1305_ABYTES)
        guard chunk.count >= abytes else { throw CryptoError.authenticationFailed }
        var plain = [UInt8](repeating: 0, count: chunk.count - abytes)
        var written: UInt64 = 0
        var tag: UInt8 = 0
        let rc = chunk.withUnsafeBufferPointer { c in
            crypto_secretstream_xchacha20poly1305_pull(state, &plain, &written, &tag, c.baseAddress, UInt64(c.count),
                                                       associatedData, UInt64(associatedData.count))
        }
        if rc != 0 { throw CryptoError.authenticationFailed }
        out += plain.prefix(Int(written))
        sodium_memzero(&plain, plain.count)
        return tag == UInt8(crypto_secretstream_xchacha20poly1305_TAG_FINAL)
    }
}
