public import FoundationEssentials
public import VaultKit

/// A code `vault otp` prints, and what it changes.
public struct OTPCode: Equatable, Sendable {
    /// The code, zero-padded to its digits.
    public var code: String
    /// TOTP: seconds until the next code; nil for HOTP.
    public var secondsRemaining: Int?
    /// TOTP: the period in seconds.
    public var period: Int?
    /// HOTP: the item's URI with the counter advanced past this code, to be stored before the
    /// code is shown (a code must never be handed out twice); nil for TOTP.
    public var advancedURI: String?
}

/// One-time passwords: RFC 4226 HOTP and RFC 6238 TOTP over `HMACAlgorithm`. The one place a
/// code is made (`vault otp`, `get --field totp`, references).
extension OTP {
    /// RFC 4226: HMAC of the big-endian counter, dynamic truncation, `digits` decimal digits.
    public static func hotp(secret: [UInt8], counter: UInt64, digits: Int = 6, algorithm: HMACAlgorithm = .sha1) throws -> String {
        let message = (0..<8).map { UInt8(truncatingIfNeeded: counter >> (56 - 8 * UInt64($0))) }
        let mac = try algorithm.authenticate(message, key: secret)
        let offset = Int(mac[mac.count - 1] & 0x0F)
        let binary = (UInt32(mac[offset] & 0x7F) << 24) | (UInt32(mac[offset + 1]) << 16)
            | (UInt32(mac[offset + 2]) << 8) | UInt32(mac[offset + 3])
        var modulus: UInt32 = 1
        for _ in 0..<digits { modulus *= 10 }
        let text = String(binary % modulus)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }

    /// RFC 6238: HOTP of the number of whole periods since 1970 (T0 = 0).
    public static func totp(secret: [UInt8], time: Int64, period: Int = 30, digits: Int = 6, algorithm: HMACAlgorithm = .sha1) throws -> String {
        try hotp(secret: secret, counter: UInt64(max(0, time) / Int64(period)), digits: digits, algorithm: algorithm)
    }

    /// The code of `auth` at `time`.
    public static func code(for auth: OTPAuth, uri: String, at time: Int64) throws -> OTPCode {
        switch auth.kind {
        case .totp:
            let code = try totp(secret: auth.secret, time: time, period: auth.period, digits: auth.digits, algorithm: auth.algorithm)
            let left = auth.period - Int(max(0, time) % Int64(auth.period))
            return OTPCode(code: code, secondsRemaining: left, period: auth.period, advancedURI: nil)
        case .hotp:
            guard auth.counter < UInt64.max else { throw VaultError.usage("the HOTP counter is at its end") }
            let code = try hotp(secret: auth.secret, counter: auth.counter, digits: auth.digits, algorithm: auth.algorithm)
            return OTPCode(code: code, secondsRemaining: nil, period: nil, advancedURI: OTP.setCounter(uri, auth.counter + 1))
        }
    }

    /// The current code of `item`'s `totp` URI at `date`. An HOTP code comes with the advanced
    /// URI the caller stores (`ItemChange.totp`) before showing the code.
    /// - Throws: `.failure` when the item has no TOTP secret, `.usage` when its URI is invalid.
    public static func code(for item: Item, at date: Date = Date()) throws -> OTPCode {
        guard let uri = item.totp else { throw VaultError.failure("item '\(item.name)' has no TOTP secret") }
        return try code(for: OTPAuth(uri: uri), uri: uri, at: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

}

extension HMACAlgorithm {
    /// The MAC of `message` under `key` (any key length), from Nettle.
    public func authenticate(_ message: [UInt8], key: [UInt8]) throws -> [UInt8] {
        try Nettle.hmac(self, key: key, message: message)
    }
}
