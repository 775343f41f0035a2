internal import CNettle
import VaultKit

/// The one gate Nettle calls pass through. vault uses Nettle (already loaded with libarchive) only
/// for HMAC-SHA-1, which libsodium lacks and TOTP needs, and SHA-256/512 with it, so one library
/// makes every code. Nettle's HMAC functions cannot fail; what is checked is the digest's length.
enum Nettle {
    /// Throws `CryptoError.badLength` unless `digest` has the algorithm's size.
    static func check(_ digest: [UInt8], _ size: Int, _ operation: String) throws -> [UInt8] {
        guard digest.count == size else { throw CryptoError.badLength(operation) }
        return digest
    }

    /// The HMAC of `message` under `key` (`nettle_hmac_sha1/256/512`).
    static func hmac(_ algorithm: HMACAlgorithm, key: [UInt8], message: [UInt8]) throws -> [UInt8] {
        switch algorithm {
        case .sha1:
            var ctx = hmac_sha1_ctx()
            var digest = [UInt8](repeating: 0, count: Int(SHA1_DIGEST_SIZE))
            nettle_hmac_sha1_set_key(&ctx, key.count, key)
            nettle_hmac_sha1_update(&ctx, message.count, message)
            nettle_hmac_sha1_digest(&ctx, digest.count, &digest)
            withUnsafeMutableBytes(of: &ctx) { $0.initializeMemory(as: UInt8.self, repeating: 0) }
            return try check(digest, 20, "HMAC-SHA-1 digest")
        case .sha256:
            var ctx = hmac_sha256_ctx()
            var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_SIZE))
            nettle_hmac_sha256_set_key(&ctx, key.count, key)
            nettle_hmac_sha256_update(&ctx, message.count, message)
            nettle_hmac_sha256_digest(&ctx, digest.count, &digest)
            withUnsafeMutableBytes(of: &ctx) { $0.initializeMemory(as: UInt8.self, repeating: 0) }
            return try check(digest, 32, "HMAC-SHA-256 digest")
        case .sha512:
            var ctx = hmac_sha512_ctx()
            var digest = [UInt8](repeating: 0, count: Int(SHA512_DIGEST_SIZE))
            nettle_hmac_sha512_set_key(&ctx, key.count, key)
            nettle_hmac_sha512_update(&ctx, message.count, message)
            nettle_hmac_sha512_digest(&ctx, digest.count, &digest)
            withUnsafeMutableBytes(of: &ctx) { $0.initializeMemory(as: UInt8.self, repeating: 0) }
            return try check(digest, 64, "HMAC-SHA-512 digest")
        }
    }
}
