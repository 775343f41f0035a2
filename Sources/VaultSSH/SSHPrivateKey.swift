import VaultKit
internal import VaultSystem

/// A private key in memory: its public key (a certificate's, when it came with one) and its
/// secret numbers in guarded memory (`SecretBytes`), wiped when the key goes. The secret
/// numbers are copied out only for the length of one signature.
public final class SSHPrivateKey: @unchecked Sendable {
    /// The public key (or certificate) this key answers to.
    public let publicKey: SSHPublicKey
    /// The private fields, SSH-encoded: ed25519 the 64-byte secret key; ecdsa `mpint d`; rsa
    /// `mpint d, iqmp, p, q, dmp1, dmq1`; dsa `mpint x`.
    private let secret: SecretBytes

    init(publicKey: SSHPublicKey, secret: consuming SecretBytes) {
        self.publicKey = publicKey
        self.secret = secret
    }

    /// Reads a key as `SSH2_AGENTC_ADD_IDENTITY` carries it (draft-miller-ssh-agent 4.2: the
    /// type, the public and private fields; a certificate's blob replaces the public fields),
    /// leaving `r` at the comment. The key is checked: sizes, the point on its curve, the
    /// private part against the public one.
    /// - Throws: `SSHWireError` for a malformed, unknown or inconsistent key.
    public static func readAgentEncoding(from r: inout SSHReader) throws(SSHWireError) -> SSHPrivateKey {
        let type = try r.text()
        let publicKey: SSHPublicKey
        var w = SSHWriter()
        defer { wipe(&w.bytes) }
        if type.hasSuffix(SSHPublicKey.certSuffix) {
            publicKey = try SSHPublicKey.parse(try r.string())
            guard publicKey.typeName == type else { throw .invalid("a certificate of another type") }
            try readPrivate(publicKey.kind, certified: true, from: &r, into: &w)
        } else {
            let kind: SSHKeyKind
            if type == "ssh-rsa" {
                let n = try r.mpint(), e = try r.mpint()
                kind = try SSHKeyKind.checkedRSA(e: e, n: n)
            } else {
                kind = try SSHKeyKind.read(type: type, from: &r)
            }
            publicKey = SSHPublicKey(kind: kind)
            try readPrivate(kind, certified: false, from: &r, into: &w)
        }
        guard let secret = try? SecretBytes(copying: w.bytes) else { throw .invalid("out of guarded memory") }
        let key = SSHPrivateKey(publicKey: publicKey, secret: secret)
        guard key.isConsistent() else { throw .invalid("the private key does not match its public key") }
        return key
    }

    /// Reads the private fields of `kind` (for ed25519 and DSA plain keys the public fields come
    /// first and are part of `kind` already: they are read again here and compared).
    private static func readPrivate(_ kind: SSHKeyKind, certified: Bool, from r: inout SSHReader, into w: inout SSHWriter) throws(SSHWireError) {
        switch kind {
        case .ed25519(let pk):
            if certified { guard try r.string() == pk else { throw .invalid("an ed25519 key's two public keys differ") } }
            var sk = try r.string()
            defer { wipe(&sk) }
            guard sk.count == 64 else { throw .invalid("an ed25519 secret key is not 64 bytes") }
            w.raw(sk)
        case .ecdsa:
            var d = try r.mpint()
            defer { wipe(&d) }
            w.mpint(d)
        case .rsa:
            var d = try r.mpint(), iqmp = try r.mpint(), p = try r.mpint(), q = try r.mpint()
            defer { wipe(&d); wipe(&iqmp); wipe(&p); wipe(&q) }
            guard var (dp, dq) = try? LibCrypto.crtExponents(d: d, p: p, q: q) else { throw .invalid("an RSA key's numbers") }
            defer { wipe(&dp); wipe(&dq) }
            for v in [d, iqmp, p, q, dp, dq] { w.mpint(v) }
        case .dsa:
            var x = try r.mpint()
            defer { wipe(&x) }
            w.mpint(x)
        }
    }

    /// libcrypto's view of the key pair, built from the secret for one use.
    private func withCryptoKey<R>(_ body: (LibCrypto.KeyData) throws -> R) throws -> R {
        guard var data = publicKey.kind.cryptoKey else { throw SSHWireError.unsupported("ed25519 through libcrypto") }
        var numbers: [[UInt8]] = secret.withUnsafeBytes { raw in
            var copy = Array(raw)
            defer { wipe(&copy) }
            var out: [[UInt8]] = []
            do {
                var r = SSHReader(copy)
                while !r.isAtEnd, let v = try? r.mpint() { out.append(v) }
            }
            return out
        }
        // Wiped after `data` (which shares these buffers) is gone: the numbers are copied out of
        // guarded memory for one operation only.
        defer { for i in numbers.indices { wipe(&numbers[i]) } }
        switch publicKey.kind {
        case .rsa:
            guard numbers.count == 6 else { throw SSHWireError.invalid("an RSA key's numbers") }
            let names = ["d", "rsa-coefficient1", "rsa-factor1", "rsa-factor2", "rsa-exponent1", "rsa-exponent2"]
            for (name, v) in zip(names, numbers) { data.numbers.append(.init(name: name, magnitude: v)) }
        case .ecdsa, .dsa:
            guard numbers.count == 1 else { throw SSHWireError.invalid("a key's private number") }
            data.numbers.append(.init(name: "priv", magnitude: numbers[0]))
        case .ed25519:
            break
        }
        data.isPrivate = true
        return try body(data)
    }

    /// Whether the private part belongs to the public key.
    private func isConsistent() -> Bool {
        switch publicKey.kind {
        case .ed25519(let pk):
            return Ed25519.secretKey(secret, matches: pk)
        default:
            guard let pub = publicKey.kind.cryptoKey else { return false }
            guard LibCrypto.publicKeyIsValid(pub) else { return false }
            return (try? withCryptoKey { LibCrypto.keyPairIsConsistent($0) }) ?? false
        }
    }

    /// The signature of `data` as an agent returns it (`string algorithm, string blob`).
    /// - Throws: when libcrypto cannot be loaded or fails.
    public func sign(_ data: [UInt8], flags: UInt32) throws -> [UInt8] {
        let algorithm = SSHSignature.algorithm(for: publicKey.kind, flags: flags)
        var w = SSHWriter()
        w.text(algorithm)
        switch publicKey.kind {
        case .ed25519:
            w.string(try Ed25519.sign(data, secretKey: secret))
        case .rsa(_, let n):
            let digest: LibCrypto.Digest = algorithm == "rsa-sha2-256" ? .sha256 : algorithm == "rsa-sha2-512" ? .sha512 : .sha1
            let raw = try withCryptoKey { try LibCrypto.sign(data, with: $0, digest: digest) }
            let size = (SSHKeyKind.bitLength(n) + 7) / 8
            w.string([UInt8](repeating: 0, count: max(0, size - raw.count)) + raw)
        case .ecdsa(let curve, _):
            let der = try withCryptoKey { try LibCrypto.sign(data, with: $0, digest: ECCurve(name: curve)!.digest) }
            guard let (r, s) = DER.parseSignature(der) else { throw SSHWireError.invalid("libcrypto's ECDSA signature") }
            var inner = SSHWriter()
            inner.mpint(r)
            inner.mpint(s)
            w.string(inner.bytes)
        case .dsa:
            let der = try withCryptoKey { try LibCrypto.sign(data, with: $0, digest: .sha1) }
            guard let (r, s) = DER.parseSignature(der), r.count <= 20, s.count <= 20 else { throw SSHWireError.invalid("libcrypto's DSA signature") }
            w.string([UInt8](repeating: 0, count: 20 - r.count) + r + [UInt8](repeating: 0, count: 20 - s.count) + s)
        }
        return w.bytes
    }
}

extension SSHPrivateKey {
    /// The key as `SSH2_AGENTC_ADD_IDENTITY` and an openssh-key-v1 file's private section carry
    /// it: the type, the public fields, the private fields (RSA `n, e, d, iqmp, p, q`). The caller
    /// wipes it. A certificate's key is written as its plain key.
    public func agentEncoding() -> [UInt8] {
        var w = SSHWriter()
        w.text(publicKey.kind.typeName)
        secret.withUnsafeBytes { raw in
            var copy = Array(raw)
            defer { wipe(&copy) }
            switch publicKey.kind {
            case .ed25519(let pk):
                w.string(pk)
                w.string(copy)
            case .rsa(let e, let n):
                w.mpint(n)
                w.mpint(e)
                // d, iqmp, p, q of the six numbers held (the CRT exponents are left out).
                var r = SSHReader(copy)
                for _ in 0..<4 {
                    guard var v = try? r.mpint() else { break }
                    w.mpint(v)
                    wipe(&v)
                }
            case .ecdsa(let curve, let point):
                w.text(curve)
                w.string(point)
                w.raw(copy)
            case .dsa(let p, let q, let g, let y):
                for v in [p, q, g, y] { w.mpint(v) }
                w.raw(copy)
            }
        }
        return w.bytes
    }

    /// The key types `generate` makes.
    public enum Generated: String, CaseIterable, Sendable {
        case ed25519, ecdsa, rsa
    }

    /// A new key: Ed25519 (libsodium), ECDSA on P-256, P-384 or P-521 (`bits` 256, 384, 521;
    /// default 256) or RSA of `bits` 2048 to 16384 (default 3072), both through libcrypto.
    /// - Throws: `SSHWireError.invalid` for bits the type does not take; libcrypto's failures.
    public static func generate(_ type: Generated, bits: Int? = nil) throws -> SSHPrivateKey {
        var w = SSHWriter()
        defer { wipe(&w.bytes) }
        switch type {
        case .ed25519:
            guard bits == nil || bits == 256 else { throw SSHWireError.invalid("an ed25519 key has 256 bits") }
            let sk = try Ed25519.generate()
            var both = sk.exposedBytes()
            defer { wipe(&both) }
            w.text("ssh-ed25519")
            w.string(Array(both[32...]))
            w.string(both)
        case .ecdsa:
            let curves = [256: ("nistp256", "P-256"), 384: ("nistp384", "P-384"), 521: ("nistp521", "P-521")]
            guard let (curve, group) = curves[bits ?? 256] else { throw SSHWireError.invalid("an ecdsa key has 256, 384 or 521 bits") }
            var numbers = try LibCrypto.generateEC(group: group)
            defer { for k in numbers.keys { wipe(&numbers[k]!) } }
            w.text("ecdsa-sha2-" + curve)
            w.text(curve)
            w.string(numbers["pub"]!)
            w.mpint(numbers["priv"]!)
        case .rsa:
            let b = bits ?? 3072
            guard (2048...16384).contains(b) else { throw SSHWireError.invalid("an rsa key has 2048 to 16384 bits") }
            var numbers = try LibCrypto.generateRSA(bits: b)
            defer { for k in numbers.keys { wipe(&numbers[k]!) } }
            w.text("ssh-rsa")
            for name in ["n", "e", "d", "rsa-coefficient1", "rsa-factor1", "rsa-factor2"] { w.mpint(numbers[name]!) }
        }
        var r = SSHReader(w.bytes)
        return try readAgentEncoding(from: &r)
    }
}
