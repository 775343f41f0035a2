internal import CSodium
internal import FoundationEssentials
internal import VaultSystem

/// Argon2id parameters, stored in the passcode slot so the cost can change without a format change.
public struct KDFParameters: Codable, Equatable, Sendable {
    /// Memory in bytes.
    public var memoryBytes: Int
    /// Passes (opslimit).
    public var operations: Int
    /// 16-byte salt.
    public var salt: [UInt8]

    /// The default cost: 256 MiB, 3 passes (libsodium's MODERATE), about half a second here.
    public static let defaultMemoryMiB = 256
    /// Default passes.
    public static let defaultOperations = 3
    /// Lowest accepted memory (MiB); anything lower is only useful to make tests fast.
    public static let minimumMemoryMiB = 8

    /// Fresh parameters with a random salt.
    public init(memoryMiB: Int = defaultMemoryMiB, operations: Int = defaultOperations) {
        memoryBytes = memoryMiB * 1024 * 1024
        self.operations = operations
        salt = randomBytes(Int(crypto_pwhash_saltbytes()))
    }
}

/// Argon2id password hashing (`crypto_pwhash`, ALG_ARGON2ID13).
public enum PasswordKDF {
    /// Derives a 32-byte key from `password` under `parameters`.
    public static func deriveKey(password: borrowing SecretBytes, parameters: KDFParameters) throws -> SecretBytes {
        guard parameters.salt.count == Int(crypto_pwhash_saltbytes()) else { throw CryptoError.badLength("salt") }
        let out = try SecretBytes(zeroed: 32)
        let rc = password.withUnsafeBytes { p in
            out.withUnsafeMutableBytes { o in
                crypto_pwhash(o.baseAddress!.assumingMemoryBound(to: UInt8.self), 32,
                              p.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(p.count),
                              parameters.salt, UInt64(parameters.operations), parameters.memoryBytes,
                              crypto_pwhash_alg_argon2id13())
            }
        }
        try Sodium.check(rc, "argon2id")
        return out
    }

    /// Checks an encoded `$argon2id$...` hash string against a password (`crypto_pwhash_str_verify`).
    public static func verify(encodedHash: String, password: [UInt8]) -> Bool {
        _ = Sodium.ready
        return password.withUnsafeBytes { p in
            crypto_pwhash_str_verify(encodedHash, p.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(p.count)) == 0
        }
    }
}

/// The rule a new passcode must pass: at least 4 characters (Unicode scalars, not bytes, so `éé`
/// is 2), not all of them white space.
public enum PasscodeRule {
    /// The fewest characters.
    public static let minimumCharacters = 4

    /// Checks `passcode` without making a String of it.
    /// - Throws: `.usage` saying what is missing.
    public static func check(_ passcode: borrowing SecretBytes) throws {
        let (characters, blank) = passcode.withUnsafeBytes { bytes -> (Int, Bool) in
            var n = 0, blank = true
            for b in bytes {
                if b & 0xC0 != 0x80 { n += 1 }
                if !(b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D || b == 0x0B || b == 0x0C) { blank = false }
            }
            return (n, blank)
        }
        guard characters >= minimumCharacters else {
            throw VaultError.usage("a passcode needs at least \(minimumCharacters) characters")
        }
        guard !blank else { throw VaultError.usage("a passcode cannot be only spaces or tabs") }
    }

    /// A new passcode as vault keeps it: valid UTF-8 (else it could never be typed again from a
    /// UTF-8 terminal) in Unicode normalisation form C, so the composed and decomposed `é` typed
    /// by two keyboards are one passcode. An ASCII passcode is returned as it is, never made a
    /// String; another goes through a Foundation String for the normalisation (its heap copy is
    /// not wiped: core dumps and ptrace are off in every vault process).
    /// - Throws: `.usage` for bytes that are not UTF-8, with a hint about the terminal's encoding.
    public static func normalized(_ passcode: borrowing SecretBytes) throws -> SecretBytes {
        if passcode.withUnsafeBytes({ $0.allSatisfy { $0 < 0x80 } }) { return try passcode.duplicate() }
        guard let nfc = nfcForm(passcode) else {
            throw VaultError.usage("the passcode is not valid UTF-8",
                                   hint: "the terminal does not send UTF-8: set a UTF-8 locale (locale: LANG=C.UTF-8) and the terminal's encoding to UTF-8, then try again")
        }
        return nfc
    }

    /// The NFC (or NFD, `decomposed`) form of a non-ASCII UTF-8 `passcode`, else nil: an unlock tries NFC
    /// first, then the bytes typed and NFD (a vault sealed before normalisation, from a keyboard
    /// of either form, keeps opening, and is sealed again in NFC).
    static func form(_ passcode: borrowing SecretBytes, decomposed: Bool) -> SecretBytes? {
        if passcode.withUnsafeBytes({ $0.allSatisfy { $0 < 0x80 } }) { return nil }
        return nfcForm(passcode, decomposed: decomposed)
    }

    private static func nfcForm(_ passcode: borrowing SecretBytes, decomposed: Bool = false) -> SecretBytes? {
        passcode.withUnsafeBytes { raw -> SecretBytes? in
            guard let text = String(validating: raw, as: UTF8.self) else { return nil }
            // Counted, then written straight into guarded memory: no copy of the form in a heap
            // array. (`text` itself is a heap copy of the passcode, as it was with Foundation.)
            func each(_ body: (UInt8) -> Void) { decomposed ? text.withNFDBytes(body) : text.withNFCBytes(body) }
            var count = 0
            each { _ in count += 1 }
            guard let form = try? SecretBytes(zeroed: count) else { return nil }
            form.withUnsafeMutableBytes { out in
                var i = 0
                each { b in
                    out[i] = b
                    i += 1
                }
            }
            return form
        }
    }
}
