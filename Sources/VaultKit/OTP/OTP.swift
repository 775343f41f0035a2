internal import FoundationEssentials
internal import VaultSystem

/// The hash function of a one-time password (RFC 6238 allows SHA-1, SHA-256, SHA-512). The
/// HMAC itself is computed in VaultOTP (Nettle, which libarchive already loads), so VaultKit and vault-agent link no HMAC library.
public enum HMACAlgorithm: String, CaseIterable, Sendable {
    case sha1 = "SHA1", sha256 = "SHA256", sha512 = "SHA512"
}

/// A one-time-password secret as an `otpauth://` URI holds it (the Key URI format of Google
/// Authenticator, which every manager exports): TOTP (RFC 6238) or HOTP (RFC 4226).
public struct OTPAuth: Equatable, Sendable {
    /// Time-based or counter-based.
    public enum Kind: String, Sendable { case totp, hotp }

    /// Time-based or counter-based.
    public var kind: Kind
    /// The shared secret (decoded from base32).
    public var secret: [UInt8]
    /// The HMAC hash function (default SHA-1).
    public var algorithm: HMACAlgorithm
    /// Digits of a code, 6 to 8 (default 6).
    public var digits: Int
    /// Seconds a TOTP code lives (default 30).
    public var period: Int
    /// The HOTP counter: the code `vault otp` prints next.
    public var counter: UInt64
    /// Who issued it (the `issuer` parameter, else the label's prefix).
    public var issuer: String?
    /// The account (the label without its issuer prefix).
    public var account: String?

    /// Parses an `otpauth://` URI.
    /// - Throws: `.usage` saying what is wrong (never quoting the secret).
    public init(uri: String) throws {
        guard uri.lowercased().hasPrefix("otpauth://") else {
            throw VaultError.usage("a TOTP secret must be an otpauth:// URI or a base32 secret")
        }
        let rest = uri.dropFirst("otpauth://".count)
        guard let slash = rest.firstIndex(of: "/") else { throw VaultError.usage("the otpauth URI has no type (otpauth://totp/...)") }
        switch rest[..<slash].lowercased() {
        case "totp": kind = .totp
        case "hotp": kind = .hotp
        default: throw VaultError.usage("the otpauth URI has an unknown type '\(rest[..<slash])' (totp or hotp)")
        }
        let afterType = rest[rest.index(after: slash)...]
        let query = afterType.firstIndex(of: "?")
        let rawLabel = String(afterType[..<(query ?? afterType.endIndex)])
        guard let label = rawLabel.percentDecoded else { throw VaultError.usage("the otpauth URI's label is not valid percent-encoding") }
        var params: [String: String] = [:]
        if let query {
            for pair in afterType[afterType.index(after: query)...].split(separator: "&") where !pair.isEmpty {
                let eq = pair.firstIndex(of: "=") ?? pair.endIndex
                let key = pair[..<eq].lowercased()
                let raw = eq == pair.endIndex ? "" : String(pair[pair.index(after: eq)...])
                guard let value = raw.percentDecoded else { throw VaultError.usage("the otpauth URI's '\(key)' is not valid percent-encoding") }
                guard params[key] == nil else { throw VaultError.usage("the otpauth URI gives '\(key)' twice") }
                params[key] = value
            }
        }
        guard let encoded = params["secret"], !encoded.isEmpty else { throw VaultError.usage("the otpauth URI has no secret") }
        secret = try OTPSecret.decode(encoded)
        switch params["algorithm"]?.uppercased() {
        case nil, "SHA1": algorithm = .sha1
        case "SHA256": algorithm = .sha256
        case "SHA512": algorithm = .sha512
        case let other?: throw VaultError.usage("the otpauth URI has an unknown algorithm '\(other)' (SHA1, SHA256 or SHA512)")
        }
        digits = 6
        if let d = params["digits"] {
            guard let n = Int(d), (6...8).contains(n) else { throw VaultError.usage("the otpauth URI's digits must be 6, 7 or 8, not '\(d)'") }
            digits = n
        }
        period = 30
        if let p = params["period"] {
            guard let n = Int(p), n > 0, n <= 86_400 else { throw VaultError.usage("the otpauth URI's period must be 1 to 86400 seconds, not '\(p)'") }
            period = n
        }
        counter = 0
        if kind == .hotp {
            guard let c = params["counter"] else { throw VaultError.usage("an otpauth://hotp URI needs a counter") }
            guard let n = UInt64(c) else { throw VaultError.usage("the otpauth URI's counter must be a whole number, not '\(c)'") }
            counter = n
        }
        // The label is `Issuer:account` or `account`; the issuer parameter wins when both are given.
        if let colon = label.firstIndex(of: ":") {
            issuer = String(label[..<colon])
            account = String(label[label.index(after: colon)...]).trimmed(.whitespaces)
        } else {
            account = label.isEmpty ? nil : label
        }
        if let i = params["issuer"], !i.isEmpty { issuer = i }
    }
}

/// An OTP secret in base32 as managers write it: case-insensitive, spaces, dashes and trailing
/// `=` padding ignored (the recovery key's `Base32` does the decoding).
enum OTPSecret {
    /// The bytes of `text`.
    /// - Throws: `.usage` naming the position of a character outside the alphabet (never the character).
    static func decode(_ text: String) throws -> [UInt8] {
        var body = Substring(text)
        while body.last == "=" { body = body.dropLast() }
        guard let bytes = Base32.decode(String(body)) else {
            let position = (body.uppercased().firstIndex { !Base32.alphabet.contains($0) && $0 != " " && $0 != "-" })
                .map { body.uppercased().distance(from: body.uppercased().startIndex, to: $0) + 1 }
            throw VaultError.usage("the TOTP secret is not valid base32 (character \(position ?? 0) is not A-Z or 2-7)")
        }
        guard !bytes.isEmpty else { throw VaultError.usage("the TOTP secret is empty") }
        return bytes
    }
}

/// Checking and storing TOTP secrets (no HMAC here: codes are made in VaultOTP).
public enum OTP {
    /// The URI to store for a TOTP secret given by a person or another manager: an `otpauth://`
    /// URI is checked and kept as given; a bare base32 secret becomes `otpauth://totp/LABEL?secret=...`.
    /// - Throws: `.usage` saying what is wrong.
    public static func normalize(_ input: String, label: String) throws -> String {
        let text = input.trimmed()
        if text.lowercased().hasPrefix("otpauth://") {
            _ = try OTPAuth(uri: text)
            return text
        }
        let secret = try OTPSecret.decode(text)
        let encodedLabel = label.percentEncoded(keeping: \.isAlphanumeric)
        return "otpauth://totp/\(encodedLabel)?secret=\(Base32.encode(secret))"
    }

    /// `uri` with its `counter` parameter set to `value` (the rest as written).
    public static func setCounter(_ uri: String, _ value: UInt64) -> String {
        guard let q = uri.firstIndex(of: "?") else { return uri + "?counter=\(value)" }
        var pairs = uri[uri.index(after: q)...].split(separator: "&", omittingEmptySubsequences: false).map(String.init)
        if let k = pairs.firstIndex(where: { $0.lowercased().hasPrefix("counter=") }) { pairs[k] = "counter=\(value)" } else { pairs.append("counter=\(value)") }
        return String(uri[...q]) + pairs.joinedText(separator: "&")
    }
}
