import FoundationEssentials
internal import VaultSystem

/// The recovery key: 32 random bytes plus a 3-byte BLAKE2b checksum (so a typo is caught before
/// any slot is tried), written as upper-case base32 in groups of four joined by `-`.
struct RecoveryKey: ~Copyable {
    private let secret: SecretBytes
    /// The printable form, shown once by `vault init`.
    let text: String

    private init(secret: consuming SecretBytes, text: String) {
        self.secret = secret
        self.text = text
    }

    static func generate() throws -> RecoveryKey {
        let s = try SecretBytes.random(count: 32)
        let raw = s.exposedBytes()
        let sum = try KeyedHash.hash(raw, key: Array("vault-recovery-checksum".utf8), outputLength: 16).prefix(3)
        let b32 = Base32.encode(raw + sum)
        var groups: [String] = []
        var chars = Array(b32)[...]
        while !chars.isEmpty { groups.append(String(chars.prefix(4))); chars = chars.dropFirst(4) }
        return RecoveryKey(secret: s, text: groups.joinedText(separator: "-"))
    }

    static func parse(_ text: String) throws -> RecoveryKey {
        let trimmed = text.trimmed()
        guard let raw = Base32.decode(trimmed), raw.count == 35 else {
            throw VaultError.authenticationFailed("that is not a recovery key (expected 56 letters and digits in groups of four)")
        }
        let key = Array(raw.prefix(32)), sum = Array(raw.suffix(3))
        let expected = Array(try KeyedHash.hash(key, key: Array("vault-recovery-checksum".utf8), outputLength: 16).prefix(3))
        guard constantTimeEqual(sum, expected) else {
            throw VaultError.authenticationFailed("the recovery key has a typo (its checksum does not match)")
        }
        return RecoveryKey(secret: try SecretBytes(copying: key), text: trimmed)
    }

    /// The X25519 private scalar the recovery slot is sealed to.
    func scalar() throws -> SecretBytes {
        try KeyedHash.deriveKey(from: secret, context: "vault/v1/recovery-x25519")
    }

    /// The matching public key, kept in the recovery slot's parameters.
    func publicKey() throws -> [UInt8] {
        try X25519Seal.publicKey(of: try scalar())
    }
}
