import VaultKit

/// SSH signatures (RFC 4253 6.6, RFC 5656, RFC 8332, RFC 8709): made with a private key, checked
/// with a public one. A signature is `string algorithm, string blob`.
public enum SSHSignature {
    /// The flags of a sign request that choose an RSA signature's hash (PROTOCOL.agent).
    public static let rsaSHA256Flag: UInt32 = 2
    /// SHA-512 (`rsa-sha2-512`).
    public static let rsaSHA512Flag: UInt32 = 4

    /// Whether `signature` (the full encoding) is a valid signature of `data` by `key`.
    public static func verify(_ signature: [UInt8], of data: [UInt8], by key: SSHKeyKind) -> Bool {
        var r = SSHReader(signature)
        guard let algorithm = try? r.text(), let blob = try? r.string(), r.isAtEnd else { return false }
        switch key {
        case .ed25519(let pk):
            return algorithm == "ssh-ed25519" && Ed25519.verify(blob, of: data, publicKey: pk)
        case .rsa:
            let digest: LibCrypto.Digest
            switch algorithm {
            case "rsa-sha2-256": digest = .sha256
            case "rsa-sha2-512": digest = .sha512
            case "ssh-rsa": digest = .sha1
            default: return false
            }
            return LibCrypto.verify(blob, of: data, with: key.cryptoKey!, digest: digest)
        case .ecdsa(let curve, _):
            guard algorithm == key.typeName, let c = ECCurve(name: curve) else { return false }
            var inner = SSHReader(blob)
            guard let rr = try? inner.mpint(), let s = try? inner.mpint(), inner.isAtEnd else { return false }
            return LibCrypto.verify(DER.signature(r: rr, s: s), of: data, with: key.cryptoKey!, digest: c.digest)
        case .dsa:
            guard algorithm == "ssh-dss", blob.count == 40 else { return false }
            return LibCrypto.verify(DER.signature(r: Array(blob[..<20]), s: Array(blob[20...])), of: data, with: key.cryptoKey!, digest: .sha1)
        }
    }

    /// The algorithm an agent signs with for `key` and the request's flags: for RSA,
    /// `rsa-sha2-256`/`-512` when a flag asks, else `ssh-rsa` (SHA-1), as OpenSSH's agent does.
    public static func algorithm(for key: SSHKeyKind, flags: UInt32) -> String {
        guard case .rsa = key else { return key.typeName }
        if flags & rsaSHA256Flag != 0 { return "rsa-sha2-256" }
        if flags & rsaSHA512Flag != 0 { return "rsa-sha2-512" }
        return "ssh-rsa"
    }
}

/// The DER `ECDSA-Sig-Value`/`Dss-Sig-Value` (`SEQUENCE { INTEGER r, INTEGER s }`) libcrypto speaks.
enum DER {
    static func integer(_ magnitude: [UInt8]) -> [UInt8] {
        var m = Array(magnitude.drop { $0 == 0 })
        if m.isEmpty { m = [0] }
        if m[0] & 0x80 != 0 { m.insert(0, at: 0) }
        return [0x02] + length(m.count) + m
    }

    static func length(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        if n < 0x100 { return [0x81, UInt8(n)] }
        return [0x82, UInt8(n >> 8), UInt8(n & 0xff)]
    }

    static func signature(r: [UInt8], s: [UInt8]) -> [UInt8] {
        let body = integer(r) + integer(s)
        return [0x30] + length(body.count) + body
    }

    /// r and s of a DER signature (magnitudes), nil when it is not one.
    static func parseSignature(_ der: [UInt8]) -> (r: [UInt8], s: [UInt8])? {
        var i = 0
        func readLength() -> Int? {
            guard i < der.count else { return nil }
            let first = der[i]; i += 1
            if first < 0x80 { return Int(first) }
            let count = Int(first & 0x7f)
            guard count <= 2, i + count <= der.count else { return nil }
            var n = 0
            for _ in 0..<count { n = n << 8 | Int(der[i]); i += 1 }
            return n
        }
        func readInteger() -> [UInt8]? {
            guard i < der.count, der[i] == 0x02 else { return nil }
            i += 1
            guard let n = readLength(), n > 0, i + n <= der.count else { return nil }
            defer { i += n }
            return Array(der[i..<i + n].drop { $0 == 0 })
        }
        guard der.first == 0x30 else { return nil }
        i = 1
        guard let total = readLength(), i + total == der.count, let r = readInteger(), let s = readInteger(), i == der.count else { return nil }
        return (r, s)
    }
}

extension SSHSignature {
    /// Whether a userauth request's algorithm name fits `key` (OpenSSH's
    /// `sshkey_type_from_name(pkalg) == key->type`: an RSA key under any of its three names).
    static func algorithmFits(_ algorithm: String, key: SSHPublicKey) -> Bool {
        if algorithm == key.typeName { return true }
        guard case .rsa = key.kind else { return false }
        if key.certificate == nil { return ["rsa-sha2-256", "rsa-sha2-512"].contains(algorithm) }
        return ["rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com"].contains(algorithm)
    }
}
