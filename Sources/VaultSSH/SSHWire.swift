/// Why bytes from a peer were not a valid SSH encoding. Never carries the bytes themselves.
public enum SSHWireError: Error, Equatable, Sendable {
    /// The data ended inside a field.
    case truncated
    /// A field has a value the encoding forbids (a negative or non-minimal mpint, a string
    /// that is not UTF-8, a length past a limit).
    case invalid(String)
    /// A key, signature or algorithm vault does not know.
    case unsupported(String)
}

/// A bounded reader over RFC 4251 encodings (byte, boolean, uint32, uint64, string, mpint):
/// every read checks the bytes left and throws `SSHWireError.truncated` rather than trap.
public struct SSHReader {
    private let bytes: [UInt8]
    /// The index of the next byte.
    public private(set) var offset: Int
    private let end: Int

    /// A reader over all of `bytes`.
    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
        offset = 0
        end = bytes.count
    }

    /// How many bytes are left.
    public var remaining: Int { end - offset }
    /// Whether every byte was read.
    public var isAtEnd: Bool { offset == end }

    /// One byte.
    public mutating func byte() throws(SSHWireError) -> UInt8 {
        guard remaining >= 1 else { throw .truncated }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// A boolean (any non-zero byte is true, as RFC 4251 says).
    public mutating func bool() throws(SSHWireError) -> Bool { try byte() != 0 }

    /// A big-endian uint32.
    public mutating func uint32() throws(SSHWireError) -> UInt32 {
        guard remaining >= 4 else { throw .truncated }
        defer { offset += 4 }
        return bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// A big-endian uint64.
    public mutating func uint64() throws(SSHWireError) -> UInt64 {
        guard remaining >= 8 else { throw .truncated }
        defer { offset += 8 }
        return bytes[offset..<offset + 8].reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// `count` raw bytes.
    public mutating func raw(_ count: Int) throws(SSHWireError) -> [UInt8] {
        guard count >= 0, remaining >= count else { throw .truncated }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    /// A string's bytes (uint32 length, then the bytes).
    public mutating func string() throws(SSHWireError) -> [UInt8] {
        let n = try uint32()
        guard Int(n) <= remaining else { throw .truncated }
        return try raw(Int(n))
    }

    /// A string that must be UTF-8 text (names, comments, user names).
    public mutating func text() throws(SSHWireError) -> String {
        let b = try string()
        guard let s = String(validating: b, as: UTF8.self) else { throw .invalid("a name is not UTF-8") }
        return s
    }

    /// A non-negative mpint's magnitude, big-endian with no leading zero (zero is empty).
    /// A negative or non-minimal encoding is refused, as OpenSSH refuses it.
    public mutating func mpint() throws(SSHWireError) -> [UInt8] {
        let b = try string()
        guard let first = b.first else { return [] }
        guard first & 0x80 == 0 else { throw .invalid("a negative mpint") }
        if first == 0 {
            guard b.count > 1, b[1] & 0x80 != 0 else { throw .invalid("an mpint with a needless leading zero") }
            return Array(b.dropFirst())
        }
        return b
    }

    /// The rest of the bytes.
    public mutating func rest() -> [UInt8] {
        defer { offset = end }
        return Array(bytes[offset..<end])
    }
}

/// Builds RFC 4251 encodings. Callers that put secrets in wipe `bytes` when done.
public struct SSHWriter {
    /// What was written.
    public var bytes: [UInt8] = []

    /// An empty writer.
    public init() {}

    /// One byte.
    public mutating func byte(_ v: UInt8) { bytes.append(v) }
    /// A boolean.
    public mutating func bool(_ v: Bool) { bytes.append(v ? 1 : 0) }
    /// A big-endian uint32.
    public mutating func uint32(_ v: UInt32) {
        bytes += [UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)]
    }
    /// A big-endian uint64.
    public mutating func uint64(_ v: UInt64) {
        uint32(UInt32(v >> 32))
        uint32(UInt32(v & 0xffff_ffff))
    }
    /// Raw bytes.
    public mutating func raw(_ b: [UInt8]) { bytes += b }
    /// A string.
    public mutating func string(_ b: [UInt8]) {
        uint32(UInt32(b.count))
        bytes += b
    }
    /// A UTF-8 string.
    public mutating func text(_ s: String) { string(Array(s.utf8)) }
    /// An mpint from a big-endian magnitude (leading zeros dropped, one added before a high bit).
    public mutating func mpint(_ magnitude: [UInt8]) {
        let trimmed = Array(magnitude.drop { $0 == 0 })
        if let first = trimmed.first, first & 0x80 != 0 {
            string([0] + trimmed)
        } else {
            string(trimmed)
        }
    }
}
