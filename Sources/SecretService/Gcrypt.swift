internal import CGcrypt
public import VaultKit

/// The session algorithm `dh-ietf1024-sha256-aes128-cbc-pkcs7`, exactly as libsecret (and
/// gnome-keyring) do it: Diffie-Hellman in the 1024-bit MODP group of RFC 2409 (generator 2),
/// both public keys as unsigned big-endian bytes with no padding; the shared value left-padded
/// with zeros to the prime's 128 bytes; HKDF-SHA256 (RFC 5869) with no salt (32 zero bytes) and
/// no info, 16 bytes out: the AES-128 key; each secret in AES-128-CBC under a fresh random IV
/// with PKCS#7 padding. libgcrypt does the arithmetic, as it does in libsecret; the private
/// exponent, the shared value and the key live in gcrypt's secure memory or in `SecretBytes`.
public final class DHSessionKey: @unchecked Sendable {
    /// The service's public key, for the OpenSession reply.
    public let publicKey: [UInt8]
    private let key: SecretBytes

    /// RFC 2409, 6.2: the Second Oakley Group.
    static let prime: [UInt8] = hexBytes(
        "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
        + "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
        + "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF")

    static let ready: Bool = vault_gcrypt_init() != 0

    /// Agrees on a key with a client whose public key is `peer`.
    /// - Throws: `SessionCryptoError` for a public key out of range (not in 2...p-2) or a
    ///   libgcrypt failure.
    public init(peer: [UInt8]) throws(SessionCryptoError) {
        guard Self.ready else { throw .library("libgcrypt could not be initialised") }
        guard (1...128).contains(peer.count) else { throw .badPublicKey }
        var p: gcry_mpi_t?, y: gcry_mpi_t?
        defer { gcry_mpi_release(p); gcry_mpi_release(y) }
        guard gcry_mpi_scan(&p, GCRYMPI_FMT_USG, Self.prime, Self.prime.count, nil) == 0,
              gcry_mpi_scan(&y, GCRYMPI_FMT_USG, peer, peer.count, nil) == 0 else { throw .library("gcry_mpi_scan") }
        // 1 < y < p - 1: the values that leave the shared secret in a subgroup of order 1 or 2 are refused.
        let pMinusOne = gcry_mpi_new(1024)
        defer { gcry_mpi_release(pMinusOne) }
        gcry_mpi_sub_ui(pMinusOne, p, 1)
        guard gcry_mpi_cmp_ui(y, 1) > 0, gcry_mpi_cmp(y, pMinusOne) < 0 else { throw .badPublicKey }

        let x = gcry_mpi_snew(1024)
        defer { gcry_mpi_release(x) }
        repeat {
            gcry_mpi_randomize(x, 1024, GCRY_STRONG_RANDOM)
            gcry_mpi_clear_highbit(x, 1023)
        } while gcry_mpi_cmp_ui(x, 1) <= 0
        let g = gcry_mpi_set_ui(nil, 2)
        let ours = gcry_mpi_new(1024), shared = gcry_mpi_snew(1024)
        defer { gcry_mpi_release(g); gcry_mpi_release(ours); gcry_mpi_release(shared) }
        gcry_mpi_powm(ours, g, x, p)
        gcry_mpi_powm(shared, y, x, p)

        var n = 0
        guard gcry_mpi_print(GCRYMPI_FMT_USG, nil, 0, &n, ours) == 0, n <= 128 else { throw .library("gcry_mpi_print") }
        var exported = [UInt8](repeating: 0, count: n)
        guard gcry_mpi_print(GCRYMPI_FMT_USG, &exported, n, &n, ours) == 0 else { throw .library("gcry_mpi_print") }
        publicKey = Array(exported.prefix(n))

        do {
            let ikm = try SecretBytes(zeroed: 128)
            var m = 0
            guard gcry_mpi_print(GCRYMPI_FMT_USG, nil, 0, &m, shared) == 0, m <= 128 else { throw SessionCryptoError.library("gcry_mpi_print") }
            let status = ikm.withUnsafeMutableBytes { buffer in
                gcry_mpi_print(GCRYMPI_FMT_USG, buffer.baseAddress! + (128 - m), m, nil, shared)
            }
            guard status == 0 else { throw SessionCryptoError.library("gcry_mpi_print") }
            key = try Self.hkdf(ikm)
        } catch let e as SessionCryptoError {
            throw e
        } catch {
            throw .library("guarded memory: \(error)")
        }
    }

    /// HKDF-SHA256 with an empty salt and info, 16 bytes of output.
    static func hkdf(_ ikm: borrowing SecretBytes) throws -> SecretBytes {
        let prk = try SecretBytes(zeroed: 32)
        try ikm.withUnsafeBytes { input in
            try prk.withUnsafeMutableBytes { out in
                try hmacSHA256(key: UnsafeRawBufferPointer(start: nil, count: 0), zeroKey: true, input, into: out)
            }
        }
        let t1 = try SecretBytes(zeroed: 32)
        try prk.withUnsafeBytes { k in
            try t1.withUnsafeMutableBytes { out in
                try [UInt8(1)].withUnsafeBytes { try hmacSHA256(key: k, zeroKey: false, $0, into: out) }
            }
        }
        return try t1.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<16])) }
    }

    /// HMAC-SHA256 of `message` under `key` (32 zero bytes when `zeroKey`), into `out` (32 bytes).
    static func hmacSHA256(key: UnsafeRawBufferPointer, zeroKey: Bool, _ message: UnsafeRawBufferPointer,
                           into out: UnsafeMutableRawBufferPointer) throws(SessionCryptoError) {
        var h: gcry_md_hd_t?
        guard gcry_md_open(&h, Int32(GCRY_MD_SHA256.rawValue), UInt32(GCRY_MD_FLAG_HMAC.rawValue | GCRY_MD_FLAG_SECURE.rawValue)) == 0,
              let h else { throw .library("gcry_md_open") }
        defer { gcry_md_close(h) }
        let zeros = [UInt8](repeating: 0, count: 32)
        let status = zeroKey ? zeros.withUnsafeBytes { gcry_md_setkey(h, $0.baseAddress, 32) } : gcry_md_setkey(h, key.baseAddress, key.count)
        guard status == 0 else { throw .library("gcry_md_setkey") }
        gcry_md_write(h, message.baseAddress, message.count)
        guard let digest = gcry_md_read(h, 0) else { throw .library("gcry_md_read") }
        out.baseAddress!.copyMemory(from: digest, byteCount: 32)
    }

    /// `plain` encrypted: a fresh IV and the PKCS#7-padded AES-128-CBC ciphertext.
    public func encrypt(_ plain: UnsafeRawBufferPointer) throws(SessionCryptoError) -> (iv: [UInt8], ciphertext: [UInt8]) {
        let iv = randomBytes(16)
        let pad = 16 - plain.count % 16
        let buffer: SecretBytes
        do { buffer = try SecretBytes(zeroed: plain.count + pad) } catch { throw .library("guarded memory") }
        buffer.withUnsafeMutableBytes { b in
            if plain.count > 0 { b.baseAddress!.copyMemory(from: plain.baseAddress!, byteCount: plain.count) }
            for i in plain.count..<b.count { b[i] = UInt8(pad) }
        }
        try cipher(buffer, iv: iv, encrypt: true)
        return (iv, buffer.exposedBytes())
    }

    /// The plaintext of a client's `ciphertext` under `iv`, into guarded memory.
    /// - Throws: `.badCiphertext` for a wrong IV length, a length not a multiple of 16, or bad padding.
    public func decrypt(iv: [UInt8], _ ciphertext: UnsafeRawBufferPointer) throws(SessionCryptoError) -> SecretBytes {
        guard iv.count == 16, ciphertext.count >= 16, ciphertext.count % 16 == 0 else { throw .badCiphertext }
        let buffer: SecretBytes
        do { buffer = try SecretBytes(copying: ciphertext) } catch { throw .library("guarded memory") }
        return try decrypt(iv: iv, inPlace: buffer)
    }

    /// `decrypt(iv:_:)` of an array (tests, the fuzz target).
    public func decrypt(iv: [UInt8], _ ciphertext: [UInt8]) throws(SessionCryptoError) -> SecretBytes {
        guard iv.count == 16, ciphertext.count >= 16, ciphertext.count % 16 == 0 else { throw .badCiphertext }
        let buffer: SecretBytes
        do { buffer = try SecretBytes(copying: ciphertext) } catch { throw .library("guarded memory") }
        return try decrypt(iv: iv, inPlace: buffer)
    }

    private func decrypt(iv: [UInt8], inPlace buffer: consuming SecretBytes) throws(SessionCryptoError) -> SecretBytes {
        try cipher(buffer, iv: iv, encrypt: false)
        let length: Int? = buffer.withUnsafeBytes { b in
            let pad = Int(b[b.count - 1])
            guard (1...16).contains(pad) else { return nil }
            var bad: UInt8 = 0
            for i in (b.count - pad)..<b.count { bad |= b[i] ^ UInt8(pad) }
            return bad == 0 ? b.count - pad : nil
        }
        guard let length else { throw .badCiphertext }
        do {
            return try buffer.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
        } catch { throw .library("guarded memory") }
    }

    private func cipher(_ buffer: borrowing SecretBytes, iv: [UInt8], encrypt: Bool) throws(SessionCryptoError) {
        var h: gcry_cipher_hd_t?
        guard gcry_cipher_open(&h, Int32(GCRY_CIPHER_AES.rawValue), Int32(GCRY_CIPHER_MODE_CBC.rawValue),
                               UInt32(GCRY_CIPHER_SECURE.rawValue)) == 0, let h else { throw .library("gcry_cipher_open") }
        defer { gcry_cipher_close(h) }
        let keyed = key.withUnsafeBytes { gcry_cipher_setkey(h, $0.baseAddress, 16) }
        guard keyed == 0, iv.withUnsafeBytes({ gcry_cipher_setiv(h, $0.baseAddress, 16) }) == 0 else { throw .library("gcry_cipher_setkey") }
        let status = buffer.withUnsafeMutableBytes { b in
            encrypt ? gcry_cipher_encrypt(h, b.baseAddress, b.count, nil, 0) : gcry_cipher_decrypt(h, b.baseAddress, b.count, nil, 0)
        }
        guard status == 0 else { throw .library(encrypt ? "gcry_cipher_encrypt" : "gcry_cipher_decrypt") }
    }
}

/// Why a session's cryptography failed.
public enum SessionCryptoError: Error, Sendable, Equatable {
    /// The client's public key is not a number in 2...p-2 of at most 128 bytes.
    case badPublicKey
    /// A secret's IV or ciphertext is malformed, or its padding is wrong (the wrong key).
    case badCiphertext
    /// libgcrypt or guarded memory failed (the call's name).
    case library(String)
}

func hexBytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var high: UInt8?
    for c in hex.utf8 {
        let v: UInt8 = c <= 57 ? c - 48 : (c | 0x20) - 87
        if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
    }
    return out
}
