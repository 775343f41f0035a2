/// Builds associated data and other byte strings field by field, with lengths, so that no two
/// different field lists encode to the same bytes.
struct ByteWriter {
    private(set) var bytes: [UInt8] = []

    init(label: String) {
        bytes.reserveCapacity(128)
        append(label)
    }

    mutating func append(_ s: String) {
        append(UInt32(s.utf8.count))
        bytes.append(contentsOf: s.utf8)
    }

    mutating func append(_ b: [UInt8]) {
        append(UInt32(b.count))
        bytes.append(contentsOf: b)
    }

    mutating func append(_ n: UInt32) {
        bytes.append(UInt8(n >> 24 & 0xff))
        bytes.append(UInt8(n >> 16 & 0xff))
        bytes.append(UInt8(n >> 8 & 0xff))
        bytes.append(UInt8(n & 0xff))
    }

    mutating func append(_ n: Int64) {
        let u = UInt64(bitPattern: n)
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(u >> UInt64(shift) & 0xff)) }
    }
}

/// Lower-case hexadecimal.
package func hexString(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef")
    var s = ""
    s.reserveCapacity(bytes.count * 2)
    for b in bytes { s.append(digits[Int(b >> 4)]); s.append(digits[Int(b & 15)]) }
    return s
}

/// Parses hexadecimal (either case); nil when malformed.
package func bytesFromHex(_ s: String) -> [UInt8]? {
    let chars = Array(s.utf8)
    guard chars.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    out.reserveCapacity(chars.count / 2)
    func v(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 97...102: c - 87
        case 65...70: c - 55
        default: nil
        }
    }
    var i = 0
    while i < chars.count {
        guard let h = v(chars[i]), let l = v(chars[i + 1]) else { return nil }
        out.append(h << 4 | l)
        i += 2
    }
    return out
}

/// RFC 4648 base32 (upper case, no padding), used for the recovery key.
enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")

    static func encode(_ data: [UInt8]) -> String {
        var out = ""
        var buffer = 0, bits = 0
        for byte in data {
            buffer = buffer << 8 | Int(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[(buffer >> (bits - 5)) & 31])
                bits -= 5
            }
            buffer &= (1 << bits) - 1
        }
        if bits > 0 { out.append(alphabet[(buffer << (5 - bits)) & 31]) }
        return out
    }

    /// Decodes, ignoring case, spaces and dashes; nil on any other character.
    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer = 0, bits = 0
        for ch in text.uppercased() where ch != "-" && ch != " " {
            guard let v = alphabet.firstIndex(of: ch) else { return nil }
            buffer = buffer << 5 | v
            bits += 5
            if bits >= 8 {
                out.append(UInt8((buffer >> (bits - 8)) & 0xff))
                bits -= 8
            }
            buffer &= (1 << bits) - 1
        }
        return out
    }
}
