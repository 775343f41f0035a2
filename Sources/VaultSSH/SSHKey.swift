import VaultKit

/// The public part of a key, by algorithm.
public enum SSHKeyKind: Equatable, Sendable {
    /// `ssh-ed25519`: the 32-byte public key.
    case ed25519(publicKey: [UInt8])
    /// `ecdsa-sha2-nistpN`: the curve's name (`nistp256` ...) and the uncompressed point.
    case ecdsa(curve: String, point: [UInt8])
    /// `ssh-rsa`: the exponent and the modulus.
    case rsa(e: [UInt8], n: [UInt8])
    /// `ssh-dss`: the domain parameters and the public value.
    case dsa(p: [UInt8], q: [UInt8], g: [UInt8], y: [UInt8])

    /// The plain key type's name.
    public var typeName: String {
        switch self {
        case .ed25519: return "ssh-ed25519"
        case .ecdsa(let curve, _): return "ecdsa-sha2-\(curve)"
        case .rsa: return "ssh-rsa"
        case .dsa: return "ssh-dss"
        }
    }

    /// The key's size in bits, as `ssh-add -l` shows it.
    public var bits: Int {
        switch self {
        case .ed25519: return 256
        case .ecdsa(let curve, _): return ECCurve(name: curve)?.bits ?? 0
        case .rsa(_, let n): return SSHKeyKind.bitLength(n)
        case .dsa(let p, _, _, _): return SSHKeyKind.bitLength(p)
        }
    }

    static func bitLength(_ magnitude: [UInt8]) -> Int {
        guard let i = magnitude.firstIndex(where: { $0 != 0 }) else { return 0 }
        return (magnitude.count - i) * 8 - magnitude[i].leadingZeroBitCount
    }

    /// An RSA key of 1024 to 16384 bits (OpenSSH's limits) with an odd exponent.
    static func checkedRSA(e: [UInt8], n: [UInt8]) throws(SSHWireError) -> SSHKeyKind {
        guard bitLength(n) >= 1024, bitLength(n) <= 16384, let last = e.last, last & 1 == 1, e.count <= 8 else {
            throw .invalid("an RSA key of a size vault does not accept")
        }
        return .rsa(e: e, n: n)
    }

    /// Reads the public fields after the type name (`ssh-rsa`: e, n; ...).
    static func read(type: String, from r: inout SSHReader) throws(SSHWireError) -> SSHKeyKind {
        switch type {
        case "ssh-ed25519":
            let pk = try r.string()
            guard pk.count == 32 else { throw .invalid("an ed25519 key is not 32 bytes") }
            return .ed25519(publicKey: pk)
        case "ssh-rsa":
            let e = try r.mpint(), n = try r.mpint()
            return try checkedRSA(e: e, n: n)
        case "ssh-dss":
            let p = try r.mpint(), q = try r.mpint(), g = try r.mpint(), y = try r.mpint()
            guard bitLength(p) >= 1024, bitLength(p) <= 10000, bitLength(q) == 160 else { throw .invalid("a DSA key of a size vault does not accept") }
            return .dsa(p: p, q: q, g: g, y: y)
        default:
            guard type.hasPrefix("ecdsa-sha2-"), let curve = ECCurve(name: String(type.dropFirst(11))) else { throw .unsupported(type) }
            let name = try r.text()
            guard name == curve.name else { throw .invalid("an ECDSA key names another curve") }
            let point = try r.string()
            guard point.count == 1 + 2 * curve.fieldBytes, point.first == 4 else { throw .invalid("an ECDSA point is not uncompressed") }
            return .ecdsa(curve: curve.name, point: point)
        }
    }

    /// Writes the public fields after the type name.
    func write(to w: inout SSHWriter) {
        switch self {
        case .ed25519(let pk): w.string(pk)
        case .rsa(let e, let n): w.mpint(e); w.mpint(n)
        case .dsa(let p, let q, let g, let y): w.mpint(p); w.mpint(q); w.mpint(g); w.mpint(y)
        case .ecdsa(let curve, let point): w.text(curve); w.string(point)
        }
    }

    /// libcrypto's view of the public key (not for Ed25519).
    var cryptoKey: LibCrypto.KeyData? {
        switch self {
        case .ed25519: return nil
        case .rsa(let e, let n): return .rsa(n: n, e: e)
        case .dsa(let p, let q, let g, let y): return .dsa(p: p, q: q, g: g, y: y)
        case .ecdsa(let curve, let point): return .ec(group: ECCurve(name: curve)!.group, point: point)
        }
    }
}

/// The NIST curves of `ecdsa-sha2-*` keys.
public struct ECCurve: Sendable {
    /// The SSH name (`nistp256`).
    public let name: String
    /// OpenSSL's group name.
    let group: String
    /// The order's size in bits.
    public let bits: Int
    /// The size of a coordinate in bytes.
    let fieldBytes: Int
    /// The digest of the curve's signatures (RFC 5656).
    let digest: LibCrypto.Digest

    /// The curve of an SSH name, nil for another.
    public init?(name: String) {
        switch name {
        case "nistp256": (group, bits, fieldBytes, digest) = ("P-256", 256, 32, .sha256)
        case "nistp384": (group, bits, fieldBytes, digest) = ("P-384", 384, 48, .sha384)
        case "nistp521": (group, bits, fieldBytes, digest) = ("P-521", 521, 66, .sha512)
        default: return nil
        }
        self.name = name
    }
}

/// An OpenSSH certificate (PROTOCOL.certkeys): the certified key, and the fields an agent reads.
/// Kept as its blob; the CA's signature is checked when it is parsed.
public struct SSHCertificate: Equatable, Sendable {
    /// The certified key.
    public let key: SSHKeyKind
    /// 1: user, 2: host.
    public let certType: UInt32
    /// The key id.
    public let keyID: String
    /// The valid principals (empty: any).
    public let principals: [String]
    /// Valid after and before (seconds since the epoch).
    public let validAfter: UInt64, validBefore: UInt64
    /// The CA's public key blob.
    public let signatureKey: [UInt8]
}

/// A public key: its blob (the exact bytes compared and sent) and what it says.
public struct SSHPublicKey: Equatable, Sendable {
    /// The key type's name (`ssh-ed25519`, `ssh-rsa-cert-v01@openssh.com` ...).
    public let typeName: String
    /// The wire encoding.
    public let blob: [UInt8]
    /// The key (a certificate's certified key).
    public let kind: SSHKeyKind
    /// The certificate, for a `*-cert-v01@openssh.com` key.
    public let certificate: SSHCertificate?

    /// Reads a public key blob.
    /// - Throws: `SSHWireError` for a malformed blob, an unknown type, or a certificate whose
    ///   CA signature does not verify.
    public static func parse(_ blob: [UInt8]) throws(SSHWireError) -> SSHPublicKey {
        var r = SSHReader(blob)
        let key = try read(from: &r, blob: blob)
        guard r.isAtEnd else { throw .invalid("bytes after a public key") }
        return key
    }

    /// Builds the public key of `kind` (its canonical blob).
    public init(kind: SSHKeyKind) {
        var w = SSHWriter()
        w.text(kind.typeName)
        kind.write(to: &w)
        self.init(typeName: kind.typeName, blob: w.bytes, kind: kind, certificate: nil)
    }

    private init(typeName: String, blob: [UInt8], kind: SSHKeyKind, certificate: SSHCertificate?) {
        (self.typeName, self.blob, self.kind, self.certificate) = (typeName, blob, kind, certificate)
    }

    /// The suffix of certificate type names.
    static let certSuffix = "-cert-v01@openssh.com"

    /// Reads a key whose blob is `blob` from the start of `r`.
    private static func read(from r: inout SSHReader, blob: [UInt8]) throws(SSHWireError) -> SSHPublicKey {
        let type = try r.text()
        guard type.hasSuffix(certSuffix) else {
            return SSHPublicKey(typeName: type, blob: blob, kind: try SSHKeyKind.read(type: type, from: &r), certificate: nil)
        }
        let plain = String(type.dropLast(certSuffix.count))
        _ = try r.string() // nonce
        let kind = try SSHKeyKind.read(type: plain, from: &r)
        _ = try r.uint64() // serial
        let certType = try r.uint32()
        let keyID = try r.text()
        var principalReader = SSHReader(try r.string())
        var principals: [String] = []
        while !principalReader.isAtEnd { principals.append(try principalReader.text()) }
        let after = try r.uint64(), before = try r.uint64()
        _ = try r.string() // critical options
        _ = try r.string() // extensions
        _ = try r.string() // reserved
        let caBlob = try r.string()
        let signed = Array(blob[..<r.offset])
        let signature = try r.string()
        guard certType == 1 || certType == 2 else { throw .invalid("a certificate of an unknown type") }
        let ca = try parse(caBlob)
        guard ca.certificate == nil else { throw .invalid("a certificate signed by a certificate") }
        guard SSHSignature.verify(signature, of: signed, by: ca.kind) else { throw .invalid("a certificate whose CA signature does not verify") }
        let cert = SSHCertificate(key: kind, certType: certType, keyID: keyID, principals: principals,
                                  validAfter: after, validBefore: before, signatureKey: caBlob)
        return SSHPublicKey(typeName: type, blob: blob, kind: kind, certificate: cert)
    }

    /// The SHA-256 fingerprint as OpenSSH prints it (`SHA256:` and unpadded base64).
    public var fingerprint: String {
        "SHA256:" + Base64.unpadded(SHA2.sha256(blob))
    }

    /// The fingerprint of `-E HASH`: `sha512`, else SHA-256 (MD5 is not made).
    public func fingerprint(hash: String) -> String {
        hash == "sha512" ? "SHA512:" + Base64.unpadded(SHA2.sha512(blob)) : fingerprint
    }

    /// The `authorized_keys` line: type, base64 blob, and the comment when there is one.
    public func authorizedKeysLine(comment: String) -> String {
        let line = typeName + " " + Base64.encode(blob)
        return comment.isEmpty ? line : line + " " + comment
    }
}

/// Standard base64 (RFC 4648) for key lines and fingerprints.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 3) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? alphabet[Int((b1 & 15) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(b2 & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Base64 without its `=` padding (fingerprints).
    static func unpadded(_ bytes: [UInt8]) -> String {
        String(encode(bytes).prefix { $0 != "=" })
    }

    /// The bytes of `text` (padding optional, no whitespace), nil when it is not base64.
    static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        for c in text.utf8 where c != UInt8(ascii: "=") {
            guard let v = alphabet.firstIndex(of: c) else { return nil }
            values.append(UInt8(v))
        }
        var out: [UInt8] = []
        var i = 0
        while i + 1 < values.count {
            out.append(values[i] << 2 | values[i + 1] >> 4)
            if i + 2 < values.count { out.append(values[i + 1] << 4 | values[i + 2] >> 2) }
            if i + 3 < values.count { out.append(values[i + 2] << 6 | values[i + 3]) }
            i += 4
        }
        return out
    }
}
