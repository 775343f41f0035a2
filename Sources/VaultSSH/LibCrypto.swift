internal import CCrypto
import VaultKit
internal import VaultSystem

/// The one gate OpenSSL's libcrypto calls pass through: RSA, ECDSA and DSA signatures for the SSH
/// agent (Ed25519 is libsodium's). libcrypto is opened with `dlopen` on the first such key
/// (CCrypto/shim.h), so no other command loads it. Keys are made for each operation from their
/// components through `EVP_PKEY_fromdata` and freed after it (`BN_clear_free` for the secret
/// numbers); nothing of OpenSSL's leaves this file.
enum LibCrypto {
    /// The function table, or why libcrypto could not be opened; loaded once, on first use.
    private static let loaded: Result<vault_crypto_api, VaultError> = LibraryTable.load(vault_crypto_open)
        .mapError { .failure("RSA, ECDSA and DSA keys need OpenSSL's libcrypto, which cannot be loaded (\($0.message))", hint: "install the Debian package libssl3") }

    /// The digest of a signature, by OpenSSL's name.
    enum Digest: String {
        case sha1 = "SHA1", sha256 = "SHA256", sha384 = "SHA384", sha512 = "SHA512"
    }

    /// A failed libcrypto call (its name): the error queue is cleared, its text is not kept.
    struct Failure: Error, CustomStringConvertible {
        let call: String
        var description: String { "libcrypto: \(call) failed" }
    }

    /// One number of a key: public, or secret (wiped after use by `BN_clear_free`).
    struct Number {
        let name: String
        let magnitude: [UInt8]
    }

    /// The algorithm and the parameters of one key for `EVP_PKEY_fromdata`.
    struct KeyData {
        var algorithm: String
        var numbers: [Number] = []
        var group: String?
        var publicPoint: [UInt8]?
        var isPrivate: Bool

        static func rsa(n: [UInt8], e: [UInt8]) -> KeyData {
            KeyData(algorithm: "RSA", numbers: [Number(name: "n", magnitude: n), Number(name: "e", magnitude: e)], isPrivate: false)
        }
        static func dsa(p: [UInt8], q: [UInt8], g: [UInt8], y: [UInt8]) -> KeyData {
            KeyData(algorithm: "DSA", numbers: [Number(name: "p", magnitude: p), Number(name: "q", magnitude: q),
                                                Number(name: "g", magnitude: g), Number(name: "pub", magnitude: y)], isPrivate: false)
        }
        static func ec(group: String, point: [UInt8]) -> KeyData {
            KeyData(algorithm: "EC", group: group, publicPoint: point, isPrivate: false)
        }
    }

    private static func api() throws -> vault_crypto_api { try loaded.get() }

    /// Builds the `EVP_PKEY` of `data`, runs `body` with it and frees it.
    private static func withKey<R>(_ data: KeyData, _ body: (vault_crypto_api, OpaquePointer) throws -> R) throws -> R {
        let c = try api()
        c.ERR_clear_error()
        guard let bld = c.OSSL_PARAM_BLD_new() else { throw Failure(call: "OSSL_PARAM_BLD_new") }
        defer { c.OSSL_PARAM_BLD_free(bld) }
        var numbers: [OpaquePointer] = []
        defer { for n in numbers { c.BN_clear_free(n) } }
        // The builder keeps the names' pointers, not copies, until OSSL_PARAM_BLD_to_param.
        var names: [UnsafeMutablePointer<CChar>] = []
        defer { for n in names { n.deallocate() } }
        func name(_ s: String) -> UnsafeMutablePointer<CChar> {
            let chars = s.utf8CString
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: chars.count)
            chars.withUnsafeBufferPointer { p.initialize(from: $0.baseAddress!, count: chars.count) }
            names.append(p)
            return p
        }
        for number in data.numbers {
            guard let bn = number.magnitude.withUnsafeBufferPointer({ c.BN_bin2bn($0.baseAddress, Int32($0.count), nil) }) else {
                throw Failure(call: "BN_bin2bn")
            }
            numbers.append(bn)
            guard c.OSSL_PARAM_BLD_push_BN(bld, name(number.name), bn) == 1 else { throw Failure(call: "OSSL_PARAM_BLD_push_BN") }
        }
        if let group = data.group {
            guard c.OSSL_PARAM_BLD_push_utf8_string(bld, name("group"), name(group), 0) == 1 else { throw Failure(call: "OSSL_PARAM_BLD_push_utf8_string") }
        }
        if let point = data.publicPoint {
            let key = name("pub")
            let ok = point.withUnsafeBytes { c.OSSL_PARAM_BLD_push_octet_string(bld, key, $0.baseAddress, $0.count) }
            guard ok == 1 else { throw Failure(call: "OSSL_PARAM_BLD_push_octet_string") }
        }
        guard let params = c.OSSL_PARAM_BLD_to_param(bld) else { throw Failure(call: "OSSL_PARAM_BLD_to_param") }
        defer { c.OSSL_PARAM_free(params) }
        guard let ctx = c.EVP_PKEY_CTX_new_from_name(nil, data.algorithm, nil) else { throw Failure(call: "EVP_PKEY_CTX_new_from_name") }
        defer { c.EVP_PKEY_CTX_free(ctx) }
        guard c.EVP_PKEY_fromdata_init(ctx) == 1 else { throw Failure(call: "EVP_PKEY_fromdata_init") }
        var key: OpaquePointer?
        let selection = data.isPrivate ? vault_crypto_keypair : vault_crypto_public_key
        guard c.EVP_PKEY_fromdata(ctx, &key, selection, params) == 1, let key else { throw Failure(call: "EVP_PKEY_fromdata") }
        defer { c.EVP_PKEY_free(key) }
        return try body(c, key)
    }

    /// Whether the public key of `data` is well formed (an EC point on its curve, an RSA
    /// modulus and exponent OpenSSL accepts).
    static func publicKeyIsValid(_ data: KeyData) -> Bool {
        (try? withKey(data) { c, key -> Bool in
            guard let ctx = c.EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { return false }
            defer { c.EVP_PKEY_CTX_free(ctx) }
            return c.EVP_PKEY_public_check(ctx) == 1
        }) ?? false
    }

    /// Whether the private part of `data` belongs to its public part (`EVP_PKEY_pairwise_check`).
    static func keyPairIsConsistent(_ data: KeyData) -> Bool {
        (try? withKey(data) { c, key -> Bool in
            guard let ctx = c.EVP_PKEY_CTX_new_from_pkey(nil, key, nil) else { return false }
            defer { c.EVP_PKEY_CTX_free(ctx) }
            return c.EVP_PKEY_pairwise_check(ctx) == 1
        }) ?? false
    }

    /// The signature of `message` (digest then sign, `EVP_DigestSign`): PKCS #1 v1.5 bytes for
    /// RSA, a DER `SEQUENCE { r, s }` for ECDSA and DSA.
    static func sign(_ message: [UInt8], with data: KeyData, digest: Digest) throws -> [UInt8] {
        try withKey(data) { c, key in
            guard let md = c.EVP_MD_CTX_new() else { throw Failure(call: "EVP_MD_CTX_new") }
            defer { c.EVP_MD_CTX_free(md) }
            guard c.EVP_DigestSignInit_ex(md, nil, digest.rawValue, nil, nil, key, nil) == 1 else { throw Failure(call: "EVP_DigestSignInit_ex") }
            var length = 0
            guard message.withUnsafeBufferPointer({ c.EVP_DigestSign(md, nil, &length, $0.baseAddress, $0.count) }) == 1 else {
                throw Failure(call: "EVP_DigestSign")
            }
            var out = [UInt8](repeating: 0, count: length)
            let rc = out.withUnsafeMutableBufferPointer { o in
                message.withUnsafeBufferPointer { c.EVP_DigestSign(md, o.baseAddress, &length, $0.baseAddress, $0.count) }
            }
            guard rc == 1 else { throw Failure(call: "EVP_DigestSign") }
            return Array(out.prefix(length))
        }
    }

    /// Whether `signature` (as `sign` makes it) is valid for `message` under the public key.
    static func verify(_ signature: [UInt8], of message: [UInt8], with data: KeyData, digest: Digest) -> Bool {
        (try? withKey(data) { c, key -> Bool in
            guard let md = c.EVP_MD_CTX_new() else { return false }
            defer { c.EVP_MD_CTX_free(md) }
            guard c.EVP_DigestVerifyInit_ex(md, nil, digest.rawValue, nil, nil, key, nil) == 1 else { return false }
            let rc = signature.withUnsafeBufferPointer { s in
                message.withUnsafeBufferPointer { c.EVP_DigestVerify(md, s.baseAddress, s.count, $0.baseAddress, $0.count) }
            }
            c.ERR_clear_error()
            return rc == 1
        }) ?? false
    }

    /// A new RSA key of `bits` bits with e = 65537: (n, e, d, p, q, iqmp).
    static func generateRSA(bits: Int) throws -> [String: [UInt8]] {
        try generate(algorithm: "RSA", group: nil, bits: bits, numbers: ["n", "e", "d", "rsa-factor1", "rsa-factor2", "rsa-coefficient1"], point: false)
    }

    /// A new EC key on `group`: the private scalar "priv" and the public point "pub".
    static func generateEC(group: String) throws -> [String: [UInt8]] {
        try generate(algorithm: "EC", group: group, bits: nil, numbers: ["priv"], point: true)
    }

    private static func generate(algorithm: String, group: String?, bits: Int?, numbers: [String], point: Bool) throws -> [String: [UInt8]] {
        let c = try api()
        guard let ctx = c.EVP_PKEY_CTX_new_from_name(nil, algorithm, nil) else { throw Failure(call: "EVP_PKEY_CTX_new_from_name") }
        defer { c.EVP_PKEY_CTX_free(ctx) }
        guard c.EVP_PKEY_keygen_init(ctx) == 1 else { throw Failure(call: "EVP_PKEY_keygen_init") }
        guard let bld = c.OSSL_PARAM_BLD_new() else { throw Failure(call: "OSSL_PARAM_BLD_new") }
        defer { c.OSSL_PARAM_BLD_free(bld) }
        let groupKey = Array("group".utf8CString), groupValue = Array((group ?? "").utf8CString), bitsKey = Array("bits".utf8CString)
        let pushed: Bool = groupKey.withUnsafeBufferPointer { gk in groupValue.withUnsafeBufferPointer { gv in bitsKey.withUnsafeBufferPointer { bk in
            if group != nil, c.OSSL_PARAM_BLD_push_utf8_string(bld, gk.baseAddress, gv.baseAddress, 0) != 1 { return false }
            if let bits, c.OSSL_PARAM_BLD_push_uint(bld, bk.baseAddress, UInt32(bits)) != 1 { return false }
            guard let params = c.OSSL_PARAM_BLD_to_param(bld) else { return false }
            defer { c.OSSL_PARAM_free(params) }
            return c.EVP_PKEY_CTX_set_params(ctx, params) == 1
        } } }
        guard pushed else { throw Failure(call: "EVP_PKEY_CTX_set_params") }
        var key: OpaquePointer?
        guard c.EVP_PKEY_generate(ctx, &key) == 1, let key else { throw Failure(call: "EVP_PKEY_generate") }
        defer { c.EVP_PKEY_free(key) }
        var out: [String: [UInt8]] = [:]
        for name in numbers {
            var bn: OpaquePointer?
            guard c.EVP_PKEY_get_bn_param(key, name, &bn) == 1, let bn else { throw Failure(call: "EVP_PKEY_get_bn_param \(name)") }
            defer { c.BN_clear_free(bn) }
            let size = (Int(c.BN_num_bits(bn)) + 7) / 8
            var bytes = [UInt8](repeating: 0, count: size)
            _ = bytes.withUnsafeMutableBufferPointer { c.BN_bn2binpad(bn, $0.baseAddress, Int32(size)) }
            out[name] = bytes
        }
        if point {
            var length = 0
            var buffer = [UInt8](repeating: 0, count: 256)
            guard buffer.withUnsafeMutableBufferPointer({ c.EVP_PKEY_get_octet_string_param(key, "pub", $0.baseAddress, $0.count, &length) }) == 1 else {
                throw Failure(call: "EVP_PKEY_get_octet_string_param")
            }
            out["pub"] = Array(buffer.prefix(length))
        }
        return out
    }

    /// d mod (p - 1) and d mod (q - 1): the CRT exponents OpenSSH's key format leaves out.
    static func crtExponents(d: [UInt8], p: [UInt8], q: [UInt8]) throws -> ([UInt8], [UInt8]) {
        let c = try api()
        guard let ctx = c.BN_CTX_new() else { throw Failure(call: "BN_CTX_new") }
        defer { c.BN_CTX_free(ctx) }
        func bn(_ b: [UInt8]) throws -> OpaquePointer {
            guard let n = b.withUnsafeBufferPointer({ c.BN_bin2bn($0.baseAddress, Int32($0.count), nil) }) else { throw Failure(call: "BN_bin2bn") }
            return n
        }
        func exponent(_ prime: [UInt8]) throws -> [UInt8] {
            let dn = try bn(d), pn = try bn(prime)
            defer { c.BN_clear_free(dn); c.BN_clear_free(pn) }
            guard let pm1 = c.BN_new(), let rem = c.BN_new() else { throw Failure(call: "BN_new") }
            defer { c.BN_clear_free(pm1); c.BN_clear_free(rem) }
            guard c.BN_sub(pm1, pn, c.BN_value_one()) == 1, c.BN_div(nil, rem, dn, pm1, ctx) == 1 else { throw Failure(call: "BN_div") }
            let size = (Int(c.BN_num_bits(rem)) + 7) / 8
            var out = [UInt8](repeating: 0, count: max(size, 1))
            _ = out.withUnsafeMutableBufferPointer { c.BN_bn2binpad(rem, $0.baseAddress, Int32($0.count)) }
            return out
        }
        return (try exponent(p), try exponent(q))
    }
}

extension LibCrypto {
    /// The ciphers of an encrypted openssh-key-v1 file, by OpenSSL's name.
    enum Cipher: String {
        case aes256CTR = "AES-256-CTR", aes256GCM = "AES-256-GCM"
    }

    /// `ciphertext` decrypted under `key` and `iv` (for GCM, checked against `tag`; no
    /// additional data, as OpenSSH's key files have none).
    /// - Throws: `Failure` (for GCM, a tag that does not match: a wrong passphrase).
    static func decrypt(_ ciphertext: [UInt8], cipher: Cipher, key: [UInt8], iv: [UInt8], tag: [UInt8]? = nil) throws -> [UInt8] {
        let c = try api()
        c.ERR_clear_error()
        guard let algorithm = c.EVP_CIPHER_fetch(nil, cipher.rawValue, nil) else { throw Failure(call: "EVP_CIPHER_fetch") }
        defer { c.EVP_CIPHER_free(algorithm) }
        guard let ctx = c.EVP_CIPHER_CTX_new() else { throw Failure(call: "EVP_CIPHER_CTX_new") }
        defer { c.EVP_CIPHER_CTX_free(ctx) }
        guard c.EVP_DecryptInit_ex2(ctx, algorithm, key, iv, nil) == 1 else { throw Failure(call: "EVP_DecryptInit_ex2") }
        var out = [UInt8](repeating: 0, count: ciphertext.count + 32)
        var n: Int32 = 0, final: Int32 = 0
        let ok = out.withUnsafeMutableBufferPointer { o in
            ciphertext.withUnsafeBufferPointer { c.EVP_DecryptUpdate(ctx, o.baseAddress, &n, $0.baseAddress, Int32($0.count)) }
        }
        guard ok == 1 else { wipe(&out); throw Failure(call: "EVP_DecryptUpdate") }
        if var tag {
            let set = tag.withUnsafeMutableBytes { c.EVP_CIPHER_CTX_ctrl(ctx, vault_crypto_gcm_set_tag, Int32($0.count), $0.baseAddress) }
            guard set == 1 else { wipe(&out); throw Failure(call: "EVP_CIPHER_CTX_ctrl") }
        }
        let done = out.withUnsafeMutableBufferPointer { c.EVP_DecryptFinal_ex(ctx, $0.baseAddress! + Int(n), &final) }
        c.ERR_clear_error()
        guard done == 1 else { wipe(&out); throw Failure(call: "EVP_DecryptFinal_ex") }
        let plain = Array(out.prefix(Int(n + final)))
        wipe(&out)
        return plain
    }

    /// A key from a PEM or DER file libcrypto's decoders read (PKCS#1 `RSA PRIVATE KEY`, SEC 1
    /// `EC PRIVATE KEY`, `DSA PRIVATE KEY`, PKCS#8 `PRIVATE KEY` and `ENCRYPTED PRIVATE KEY`),
    /// as the agent's encoding of it (type, public fields, private fields; the caller wipes).
    /// nil when no decoder took it; `passphrase` is asked only when one is needed.
    /// - Throws: `Failure` when libcrypto cannot be loaded; `SSHWireError` for a key type vault
    ///   does not hold.
    static func decodePrivateKey(_ file: [UInt8], passphrase: [UInt8]?) throws -> [UInt8]? {
        let c = try api()
        c.ERR_clear_error()
        var key: OpaquePointer?
        guard let dctx = c.OSSL_DECODER_CTX_new_for_pkey(&key, nil, nil, nil, vault_crypto_keypair, nil, nil) else {
            throw Failure(call: "OSSL_DECODER_CTX_new_for_pkey")
        }
        defer { c.OSSL_DECODER_CTX_free(dctx) }
        if let passphrase {
            _ = passphrase.withUnsafeBufferPointer { c.OSSL_DECODER_CTX_set_passphrase(dctx, $0.baseAddress, $0.count) }
        }
        let decoded = file.withUnsafeBufferPointer { b -> Int32 in
            var p = b.baseAddress
            var left = b.count
            return c.OSSL_DECODER_from_data(dctx, &p, &left)
        }
        c.ERR_clear_error()
        guard decoded == 1, let key else { return nil }
        defer { c.EVP_PKEY_free(key) }
        func number(_ name: String) throws -> [UInt8] {
            var bn: OpaquePointer?
            guard c.EVP_PKEY_get_bn_param(key, name, &bn) == 1, let bn else { throw Failure(call: "EVP_PKEY_get_bn_param \(name)") }
            defer { c.BN_clear_free(bn) }
            let size = (Int(c.BN_num_bits(bn)) + 7) / 8
            var bytes = [UInt8](repeating: 0, count: max(size, 1))
            _ = bytes.withUnsafeMutableBufferPointer { c.BN_bn2binpad(bn, $0.baseAddress, Int32($0.count)) }
            return bytes
        }
        var w = SSHWriter()
        if c.EVP_PKEY_is_a(key, "RSA") == 1 {
            var d = try number("d"), iqmp = try number("rsa-coefficient1"), p = try number("rsa-factor1"), q = try number("rsa-factor2")
            defer { wipe(&d); wipe(&iqmp); wipe(&p); wipe(&q) }
            w.text("ssh-rsa")
            w.mpint(try number("n")); w.mpint(try number("e"))
            for v in [d, iqmp, p, q] { w.mpint(v) }
        } else if c.EVP_PKEY_is_a(key, "EC") == 1 {
            var name = [CChar](repeating: 0, count: 64)
            var length = 0
            guard c.EVP_PKEY_get_utf8_string_param(key, "group", &name, name.count, &length) == 1 else { throw Failure(call: "EVP_PKEY_get_utf8_string_param") }
            let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let curves = ["prime256v1": "nistp256", "P-256": "nistp256", "secp384r1": "nistp384", "P-384": "nistp384",
                          "secp521r1": "nistp521", "P-521": "nistp521"]
            guard let curve = curves[group] else { throw SSHWireError.unsupported("an EC key on \(group)") }
            var point = [UInt8](repeating: 0, count: 256)
            guard point.withUnsafeMutableBufferPointer({ c.EVP_PKEY_get_octet_string_param(key, "pub", $0.baseAddress, $0.count, &length) }) == 1 else {
                throw Failure(call: "EVP_PKEY_get_octet_string_param")
            }
            var d = try number("priv")
            defer { wipe(&d) }
            w.text("ecdsa-sha2-" + curve); w.text(curve); w.string(Array(point.prefix(length))); w.mpint(d)
        } else if c.EVP_PKEY_is_a(key, "ED25519") == 1 {
            var pk = [UInt8](repeating: 0, count: 32), sk = [UInt8](repeating: 0, count: 32)
            var n = 32, m = 32
            defer { wipe(&sk) }
            guard c.EVP_PKEY_get_raw_public_key(key, &pk, &n) == 1, n == 32, c.EVP_PKEY_get_raw_private_key(key, &sk, &m) == 1, m == 32 else {
                throw Failure(call: "EVP_PKEY_get_raw_private_key")
            }
            var both = sk + pk
            defer { wipe(&both) }
            w.text("ssh-ed25519"); w.string(pk); w.string(both)
        } else if c.EVP_PKEY_is_a(key, "DSA") == 1 {
            var x = try number("priv")
            defer { wipe(&x) }
            w.text("ssh-dss")
            for name in ["p", "q", "g", "pub"] { w.mpint(try number(name)) }
            w.mpint(x)
        } else {
            throw SSHWireError.unsupported("a key of this type")
        }
        return w.bytes
    }
}
