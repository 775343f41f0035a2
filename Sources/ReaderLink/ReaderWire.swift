internal import VaultSystem
internal import VaultKit
internal import Foundation

/// The reader link's wire format: one JSON value per line (`\n`-terminated; WireJSON never
/// writes a raw newline), at most `limit` bytes a line and nested at most 32 deep. Prints travel as
/// base64 inside the JSON. The channel is a socketpair between vault and its own child, so the limit
/// and depth checks guard against a broken child, not a hostile one.
public final class ReaderWire: @unchecked Sendable {
    /// The longest line accepted.
    public static let limit = 16 << 20
    private let fd: Int32
    private var buffer: [UInt8] = []
    private let writing = NSLock()

    /// A wire over `fd` (borrowed: the caller keeps it open while the wire is used).
    public init(fd: Int32) {
        self.fd = fd
    }

    /// Writes one message (from any thread; lines are not interleaved).
    /// - Throws: ``SystemError`` when the other side is gone.
    public func send(_ message: some Encodable) throws {
        var line = try WireJSON.encode(message)
        line.append(0x0a)
        try writing.withLock { try writeAll(fd: fd, bytes: Array(line), label: "the reader process") }
    }

    /// Reads the next message; nil at end of input.
    /// - Throws: ``SystemError`` for a read error, `ReaderWireError` for a line over the limit,
    ///   too deep, or not the expected type.
    public func receive<T: Decodable>(_ type: T.Type) throws -> T? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0a) {
                // Lines carry prints (biometric data): the bytes are wiped once decoded.
                var line = Array(buffer[..<newline])
                for i in 0...newline { buffer[i] = 0 }
                buffer.removeSubrange(...newline)
                defer { wipe(&line) }
                guard !JSONDepth.exceeds(line) else { throw ReaderWireError.malformed("nested too deep") }
                do { return try WireJSON.decode(T.self, from: line) } catch {
                    throw ReaderWireError.malformed("\(error)")
                }
            }
            guard buffer.count <= Self.limit else { throw ReaderWireError.malformed("a line over \(Self.limit) bytes") }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = try chunk.withUnsafeMutableBytes { try readSome(fd: fd, into: $0, label: "the reader process") }
            if n == 0 { return nil }
            buffer += chunk[..<n]
        }
    }
}

/// A line the reader link could not use.
public enum ReaderWireError: Error, Equatable, Sendable {
    case malformed(String)
}
