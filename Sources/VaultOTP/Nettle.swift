internal import CNettle
import VaultKit
internal import VaultSystem

/// The one gate Nettle calls pass through. vault uses Nettle only for HMAC-SHA-1, which libsodium
/// lacks and TOTP needs, and SHA-256/512 with it, so one library makes every code. It is opened
/// with `dlopen` on the first code (CNettle/shim.h), so commands that make none do not load it.
/// Nettle's HMAC functions cannot fail; what is checked is the digest's length.
enum Nettle {
    /// The function table, or why libnettle could not be opened; loaded once, on first use.
    private static let loaded: Result<vault_nettle_api, VaultError> = LibraryTable.load(vault_nettle_open)
        .mapError { .failure("one-time codes need Nettle, which cannot be loaded (\($0.message))", hint: "install the Debian package libnettle8") }

    /// Throws `CryptoError.badLength` unless `digest` has the algorithm's size.
    static func check(_ digest: [UInt8], _ size: Int, _ operation: String) throws -> [UInt8] {
        guard digest.count == size else { throw CryptoError.badLength(operation) }
        return digest
    }

    /// The HMAC of `message` under `key` (`nettle_hmac_sha1/256/512`).
    static func hmac(_ algorithm: HMACAlgorithm, key: [UInt8], message: [UInt8]) throws -> [UInt8] {
        let n = try loaded.get()
        switch algorithm {
        case .sha1:
            var ctx = hmac_sha1_ctx()
            var digest = [UInt8](repeating: 0, count: Int(SHA1_DIGEST_SIZE))
            n.nettle_hmac_sha1_set_key(&ctx, key.count, key)
            n.nettle_hmac_sha1_update(&ctx, message.count, message)
            n.nettle_hmac_sha1_digest(&ctx, digest.count, &digest)
            _ = withUnsafeMutableBytes(of: &ctx) { $0.initializeMemory(as: UInt8.self, repeating: 0) }
            return try check(digest, 20, "HMAC-SHA-1 digest")
        case .sha256:
            var ctx = hmac_sha256_ctx()
            var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_SIZE))
            n.nettle_hmac_sha256_set_key(&ctx, key.count, key)
            n.nettle_hmac_sha256_update(&ctx, message.count, message)
            n.nettle_hmac_sha256_digest(&ctx, digest.count, &digest)
            _ = withUnsafeMutableBytes(of: &ctx) { $0.initializeMemory(as: UInt8.self, repeating: 0) }
            return try check(digest, 32, "HMAC-SHA-256 digest")
        case .sha512:
            var ctx = hmac_sha512_ctx()
            var digest = [UInt8](repeating: 0, count: Int(SHA512_DIGEST_SIZE))
            n.nettle_hmac_sha512_set_key(&ctx, key.count, key)
            n.nettle_hmac_sha512_update(&ctx, message.count, message)
            n.nettle_hmac_sha512_digest(&ctx, digest.count, &digest)
            _ = withUnsafeMutableBytes(of: &ctx) { $0.initializeMemory(as: UInt8.self, repeating: 0) }
            return try check(digest, 64, "HMAC-SHA-512 digest")
        }
    }
}
