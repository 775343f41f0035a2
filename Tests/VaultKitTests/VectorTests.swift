// Crypto known-answer tests driven by files in Vectors/ (one case per file, in the manner of
// age's testkit; one generic runner, in the manner of swift-crypto's Wycheproof runner).
//
// File format:
//   - `key: value` lines; the value is everything after the first `:`, trimmed; may be empty.
//   - blank lines and lines starting with `#` are ignored (every file says where it comes from).
//   - the first non-comment line is `expect: <kind>`; each kind has a fixed set of fields and a
//     missing, unknown or repeated field fails the case.
//   - byte strings are lower-case hex (empty value = zero bytes).
//
// Kinds:
//   xchacha20poly1305         key nonce ad plaintext ciphertext   seal gives ciphertext||tag; open gives plaintext
//   xchacha20poly1305-reject  key nonce ad ciphertext             open must fail authentication
//   blake2b                   key message outlen digest           BLAKE2b (empty key = unkeyed)
//   argon2id-verify           password hash valid                 crypto_pwhash_str_verify == valid
//   hotp                      key counter digits algorithm code   RFC 4226 HOTP (algorithm SHA1, SHA256, SHA512)
//   totp                      key time period digits algorithm code  RFC 6238 TOTP at `time` (seconds since 1970)
//   otpauth                   uri secret algorithm digits period counter issuer account   OTPAuth parses to these
//   otpauth-reject            uri error                           OTPAuth refuses with a message containing `error`

import Foundation
import Testing
@testable import VaultKit
import VaultOTP

/// The kinds this runner knows, each with the exact fields a file of that kind must carry.
private let vectorKinds: [String: Set<String>] = [
    "xchacha20poly1305": ["key", "nonce", "ad", "plaintext", "ciphertext"],
    "xchacha20poly1305-reject": ["key", "nonce", "ad", "ciphertext"],
    "blake2b": ["key", "message", "outlen", "digest"],
    "argon2id-verify": ["password", "hash", "valid"],
    "hotp": ["key", "counter", "digits", "algorithm", "code"],
    "totp": ["key", "time", "period", "digits", "algorithm", "code"],
    "otpauth": ["uri", "secret", "algorithm", "digits", "period", "counter", "issuer", "account"],
    "otpauth-reject": ["uri", "error"],
]

/// The bundled Vectors folder, or nil when the resource is missing.
private func vectorsDirectory() -> URL? {
    Bundle.module.url(forResource: "Vectors", withExtension: nil)
}

/// Names of every vector file (hidden files skipped), sorted. Empty if the folder is missing;
/// `everyKindHasVectors` then fails, so a lost folder cannot pass silently.
let allVectorFiles: [String] = {
    guard let dir = vectorsDirectory(),
          let urls = try? FileManager.default.contentsOfDirectory(
              at: dir, includingPropertiesForKeys: [.isRegularFileKey], options: [.skipsHiddenFiles])
    else { return [] }
    return urls
        .filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }
        .map(\.lastPathComponent)
        .sorted()
}()

struct VectorError: Error, CustomStringConvertible {
    let description: String
    init(_ file: String, _ message: String) { description = "\(file): \(message)" }
}

/// One parsed vector file.
struct Vector {
    let file: String
    let kind: String
    let fields: [String: String]

    /// Reads and parses `Vectors/<name>`: checks the `expect:` header, the kind and its field set.
    static func load(_ name: String) throws -> Vector {
        guard let dir = vectorsDirectory() else { throw VectorError(name, "Vectors resource folder not found") }
        let text = try String(contentsOf: dir.appendingPathComponent(name), encoding: .utf8)
        return try parse(text, file: name)
    }

    static func parse(_ text: String, file: String) throws -> Vector {
        var kind: String?
        var fields: [String: String] = [:]
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let colon = line.firstIndex(of: ":") else {
                throw VectorError(file, "line \(index + 1): expected `key: value`")
            }
            let key = line[..<colon].trimmingCharacters(in: .whitespaces)
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            if kind == nil {
                guard key == "expect" else {
                    throw VectorError(file, "line \(index + 1): first non-comment line must be `expect: <kind>`")
                }
                kind = value
                continue
            }
            guard key != "expect" else { throw VectorError(file, "line \(index + 1): second `expect:`") }
            guard fields[key] == nil else { throw VectorError(file, "line \(index + 1): field `\(key)` repeated") }
            fields[key] = value
        }
        guard let kind else { throw VectorError(file, "no `expect:` line") }
        guard let wanted = vectorKinds[kind] else { throw VectorError(file, "unknown kind `\(kind)`") }
        let present = Set(fields.keys)
        if let missing = wanted.subtracting(present).sorted().first {
            throw VectorError(file, "missing field `\(missing)` for kind `\(kind)`")
        }
        if let extra = present.subtracting(wanted).sorted().first {
            throw VectorError(file, "unexpected field `\(extra)` for kind `\(kind)`")
        }
        return Vector(file: file, kind: kind, fields: fields)
    }

    func text(_ key: String) throws -> String {
        guard let value = fields[key] else { throw VectorError(file, "missing field `\(key)`") }
        return value
    }

    /// A lower-case hex field as bytes.
    func hex(_ key: String) throws -> [UInt8] {
        let s = Array(try text(key).utf8)
        guard s.count % 2 == 0 else { throw VectorError(file, "`\(key)`: odd number of hex digits") }
        func nibble(_ c: UInt8) throws -> UInt8 {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            default: throw VectorError(file, "`\(key)`: not lower-case hex")
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(s.count / 2)
        var i = 0
        while i < s.count {
            out.append(try nibble(s[i]) << 4 | nibble(s[i + 1]))
            i += 2
        }
        return out
    }

    func int(_ key: String) throws -> Int {
        guard let n = Int(try text(key)) else { throw VectorError(file, "`\(key)`: not a decimal integer") }
        return n
    }

    func bool(_ key: String) throws -> Bool {
        switch try text(key) {
        case "true": return true
        case "false": return false
        default: throw VectorError(file, "`\(key)`: expected true or false")
        }
    }
}

private func hexString(_ bytes: [UInt8]) -> String {
    bytes.map { String(format: "%02x", $0) }.joined()
}

@Suite("Crypto test vectors")
struct VectorTests {
    @Test("Known-answer vector", arguments: allVectorFiles)
    func vector(_ name: String) throws {
        let v = try Vector.load(name)
        switch v.kind {
        case "xchacha20poly1305":
            try runXChaCha(v)
        case "xchacha20poly1305-reject":
            try runXChaChaReject(v)
        case "blake2b":
            try runBlake2b(v)
        case "argon2id-verify":
            try runArgon2idVerify(v)
        case "hotp":
            try runHOTP(v)
        case "totp":
            try runTOTP(v)
        case "otpauth":
            try runOTPAuth(v)
        case "otpauth-reject":
            try runOTPAuthReject(v)
        default:
            // Vector.parse already rejects unknown kinds; this keeps the switch honest if a kind is
            // added to `vectorKinds` without a runner.
            Issue.record("\(name): no runner for kind `\(v.kind)`")
        }
    }

    @Test("Every kind has at least one vector file")
    func everyKindHasVectors() throws {
        try #require(vectorsDirectory() != nil, "Vectors resource folder is missing from the test bundle")
        var seen: Set<String> = []
        for name in allVectorFiles {
            // A file that fails to parse is reported by the parameterized test.
            if let v = try? Vector.load(name) { seen.insert(v.kind) }
        }
        for kind in vectorKinds.keys.sorted() {
            #expect(seen.contains(kind), "no vector file with `expect: \(kind)`")
        }
    }

    private func runXChaCha(_ v: Vector) throws {
        let keyBytes = try v.hex("key"), nonce = try v.hex("nonce"), ad = try v.hex("ad")
        let plaintext = try v.hex("plaintext"), expected = try v.hex("ciphertext")
        let key = try SecretBytes(copying: keyBytes)

        let sealed = try AEAD.seal(plaintext, key: key, nonce: nonce, associatedData: ad)
        #expect(hexString(sealed) == hexString(expected), "\(v.file): seal output differs")

        let opened = try AEAD.open(expected, key: key, nonce: nonce, associatedData: ad)
        #expect(opened.count == plaintext.count, "\(v.file): opened length differs")
        let openedBytes = opened.withUnsafeBytes { Array($0) }
        #expect(hexString(openedBytes) == hexString(plaintext), "\(v.file): open output differs")
    }

    private func runXChaChaReject(_ v: Vector) throws {
        let keyBytes = try v.hex("key"), nonce = try v.hex("nonce"), ad = try v.hex("ad")
        let ciphertext = try v.hex("ciphertext")
        let key = try SecretBytes(copying: keyBytes)
        // Specifically an authentication failure: a length error would mean a malformed vector.
        #expect(throws: CryptoError.authenticationFailed, "\(v.file): tampered ciphertext opened") {
            _ = try AEAD.open(ciphertext, key: key, nonce: nonce, associatedData: ad)
        }
    }

    private func runBlake2b(_ v: Vector) throws {
        let key = try v.hex("key"), message = try v.hex("message")
        let outlen = try v.int("outlen"), digest = try v.hex("digest")
        try #require(digest.count == outlen, "\(v.file): digest is \(digest.count) bytes, outlen says \(outlen)")
        let got = try KeyedHash.hash(message, key: key, outputLength: outlen)
        #expect(hexString(got) == hexString(digest), "\(v.file): BLAKE2b digest differs")
    }

    private func runArgon2idVerify(_ v: Vector) throws {
        let password = Array(try v.text("password").utf8)
        let hash = try v.text("hash"), valid = try v.bool("valid")
        try #require(hash.hasPrefix("$argon2id$v=19$"), "\(v.file): not an argon2id v=19 hash string")
        let got = PasswordKDF.verify(encodedHash: hash, password: password)
        #expect(got == valid, "\(v.file): verify returned \(got), expected \(valid)")
    }

    private func algorithm(_ v: Vector) throws -> HMACAlgorithm {
        guard let a = HMACAlgorithm(rawValue: try v.text("algorithm")) else { throw VectorError(v.file, "unknown algorithm") }
        return a
    }

    private func runHOTP(_ v: Vector) throws {
        let got = try OTP.hotp(secret: try v.hex("key"), counter: UInt64(try v.int("counter")), digits: try v.int("digits"),
                               algorithm: try algorithm(v))
        #expect(got == (try v.text("code")), "\(v.file): HOTP code differs")
    }

    private func runTOTP(_ v: Vector) throws {
        let got = try OTP.totp(secret: try v.hex("key"), time: Int64(try v.int("time")), period: try v.int("period"),
                               digits: try v.int("digits"), algorithm: try algorithm(v))
        #expect(got == (try v.text("code")), "\(v.file): TOTP code differs")
    }

    private func runOTPAuth(_ v: Vector) throws {
        let auth = try OTPAuth(uri: try v.text("uri"))
        #expect(hexString(auth.secret) == (try v.text("secret")), "\(v.file): secret differs")
        #expect(auth.algorithm == (try algorithm(v)), "\(v.file): algorithm differs")
        #expect(auth.digits == (try v.int("digits")), "\(v.file): digits differ")
        #expect(auth.period == (try v.int("period")), "\(v.file): period differs")
        #expect(auth.counter == UInt64(try v.int("counter")), "\(v.file): counter differs")
        #expect((auth.issuer ?? "") == (try v.text("issuer")), "\(v.file): issuer differs")
        #expect((auth.account ?? "") == (try v.text("account")), "\(v.file): account differs")
    }

    private func runOTPAuthReject(_ v: Vector) throws {
        let wanted = try v.text("error")
        do {
            _ = try OTPAuth(uri: try v.text("uri"))
            Issue.record("\(v.file): accepted")
        } catch let e as VaultError {
            #expect(e.message.contains(wanted), "\(v.file): message '\(e.message)' lacks '\(wanted)'")
            #expect(e.exitCode == 2, "\(v.file): not a usage error")
        }
    }
}
