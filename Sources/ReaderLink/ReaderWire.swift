public import VaultSystem
public import VaultKit
public import VaultWire
internal import FoundationEssentials

/// The reader link's frames: VaultWire's `Frame` with version byte 1, one JSON message each
/// (a `ReaderRequest` or a `ReaderReply`; prints travel as base64 inside it), at most
/// ``ReaderWire/limit`` bytes and nested at most 32 deep. The channel is a socketpair between
/// vault and its own child, so the limits guard against a broken child, not a hostile one.
public enum ReaderFormat: WireFormat {
    /// Version 1.
    public static let version: UInt8 = 1
    /// "reader link", "this vault-reader", and the one cure for a mismatch.
    public static let terms = WireTerms(name: "reader link", speaker: "this vault-reader",
                                        versionHint: "vault and vault-reader come from one build: install both again with Vault/install.sh")
    /// A `failed` reply carrying `error`'s message.
    public static func refusal(_ error: VaultError) -> Frame<ReaderFormat> {
        let fault = ReaderFault(kind: .other, message: error.message, hint: error.hint)
        return Frame(json: (try? WireJSON.encode(ReaderReply.failed(fault: fault))) ?? [])
    }
}

/// One end of the reader link: messages in and out over VaultWire's `FramedConnection` (the one
/// receive loop that wipes what it read). Sends may come from two threads (a `cancel` while a
/// scan's reply is awaited); frames are never interleaved.
public final class ReaderWire: @unchecked Sendable {
    /// The largest frame accepted.
    public static let limit = 16 << 20
    /// Seconds the other side has to take a message (and a second more per MiB).
    static let sendSeconds = 10.0
    private let connection: FramedConnection<ReaderFormat>
    private let writing = ThreadLock()

    /// A wire over `socket`, which it owns from now on.
    public init(_ socket: consuming UnixSocket) {
        connection = FramedConnection(socket, limit: Self.limit)
    }

    /// Closes the socket: the other side sees end of input.
    public func close() {
        connection.close()
    }

    /// Writes one message (from any thread).
    /// - Throws: `ReaderWireError.gone` when the other side does not take it.
    public func send(_ message: some Encodable) throws {
        guard let frame = try Frame<ReaderFormat>.encoding(message, limit: Self.limit) else {
            throw ReaderWireError.malformed("a message over \(Self.limit) bytes")
        }
        let sent = writing.withLock { connection.send(frame, within: Self.sendSeconds) }
        guard sent else { throw ReaderWireError.gone }
    }

    /// Reads the next message; nil at end of input.
    /// - Throws: `ReaderWireError.malformed` for a frame refused from its header, too deep, or not
    ///   the expected type.
    public func receive<T: Decodable>(_ type: T.Type) throws -> T? {
        let frame: Frame<ReaderFormat>?
        do { frame = try connection.nextFrame() } catch { throw ReaderWireError.malformed(error.vaultError.message) }
        guard let frame else { return nil }
        guard let message = frame.reply(T.self) else { throw ReaderWireError.malformed("an unreadable message") }
        return message
    }
}

/// A message the reader link could not carry.
public enum ReaderWireError: Error, Equatable, Sendable {
    /// The frame or its JSON was refused.
    case malformed(String)
    /// The other side did not take a message.
    case gone
}
