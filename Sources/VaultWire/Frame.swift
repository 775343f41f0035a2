public import VaultKit
internal import VaultSystem

/// What sets one protocol's frames apart from another's: its version byte and the words its
/// refusals use. The agent (`AgentWire`, version 5) and vault-authd (`AuthorityWire`, version 2)
/// each have one; the bytes of a frame are otherwise the same.
public protocol WireFormat: Sendable {
    /// The version byte this protocol writes and reads.
    static var version: UInt8 { get }
    /// How refusals name the protocol and its server.
    static var terms: WireTerms { get }
    /// The frame that tells a peer why its connection is closed (a `failed` reply).
    static func refusal(_ error: VaultError) -> Frame<Self>
}

/// The words of a protocol's refusals: "refused: a frame of N bytes is over the NAME's limit",
/// "refused: NAME protocol version V is not supported (SPEAKER speaks version W)", and the hint
/// for another version.
public struct WireTerms: Sendable {
    /// The protocol's name ("agent").
    public let name: String
    /// Who speaks it here ("this agent").
    public let speaker: String
    /// What to do about a peer of another version.
    public let versionHint: String

    /// The terms of a protocol called `name`, spoken by `speaker`.
    public init(name: String, speaker: String, versionHint: String) {
        (self.name, self.speaker, self.versionHint) = (name, speaker, versionHint)
    }
}

/// One message on a socket: a big-endian u32 length `L`, then `L` bytes: the protocol's version
/// byte, a big-endian u32 JSON length `J`, `J` bytes of JSON, and `L - 5 - J` bytes of binary
/// tail (keys and secrets, kept out of the JSON so they can be wiped). Both parts are wiped when
/// the frame goes. See docs/format.md, "Frames".
public final class Frame<Format: WireFormat> {
    /// The version byte this code writes and reads.
    public static var version: UInt8 { Format.version }
    /// Version byte and JSON length.
    public static var headerBytes: Int { 5 }

    /// The JSON message.
    public var json: [UInt8]
    /// The binary tail, empty when the message has none.
    public var tail: [UInt8]

    /// A frame of `json` and `tail`.
    public init(json: [UInt8], tail: [UInt8] = []) {
        self.json = json
        self.tail = tail
    }

    deinit {
        wipe(&json)
        wipe(&tail)
    }

    /// The size of the frame without its length prefix (the `L` a decoder checks against its limit).
    public var length: Int { Self.headerBytes + json.count + tail.count }

    /// The frame's bytes, length prefix included (the caller wipes them after sending).
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(4 + length)
        appendU32(UInt32(truncatingIfNeeded: length), to: &out)
        out.append(Format.version)
        appendU32(UInt32(truncatingIfNeeded: json.count), to: &out)
        out += json
        out += tail
        return out
    }
}

/// Why a frame was refused from its header. The connection it came on is closed after one
/// refusal reply.
public enum FrameError<Format: WireFormat>: Error, Equatable, Sendable {
    /// The declared length is over the limit.
    case tooLarge(length: Int, limit: Int)
    /// The declared length cannot hold the version byte and the JSON length.
    case tooShort(length: Int)
    /// Not this protocol's version (a version 1 agent frame starts with a zero byte here).
    case unsupportedVersion(UInt8)
    /// The JSON length runs past the frame.
    case badJSONLength(Int, frame: Int)

    /// The refusal as a usage error, for the reply.
    public var vaultError: VaultError {
        switch self {
        case .tooLarge(let n, let limit): .usage("refused: a frame of \(n) bytes is over the \(Format.terms.name)'s limit of \(limit)")
        case .tooShort(let n): .usage("refused: a frame of \(n) bytes is too short")
        case .unsupportedVersion(let v):
            .usage("refused: \(Format.terms.name) protocol version \(v) is not supported (\(Format.terms.speaker) speaks version \(Format.version))",
                   hint: Format.terms.versionHint)
        case .badJSONLength(let j, let n): .usage("refused: a JSON length of \(j) bytes does not fit a frame of \(n)")
        }
    }
}

/// An incremental frame decoder with a bound: bytes go in as they arrive, whole frames come out.
/// A frame is refused as soon as its header shows it is over the limit, of another version or
/// inconsistent, before its body is read. Consumed bytes are wiped.
public final class FrameDecoder<Format: WireFormat> {
    /// The largest frame accepted (the `L` of the header).
    public let limit: Int
    private var buffer: [UInt8] = []
    private var start = 0

    /// A decoder refusing frames over `limit` bytes.
    public init(limit: Int) {
        self.limit = limit
    }

    deinit { wipe(&buffer) }

    /// Whether part of a frame has arrived and the rest has not (the peer's request deadline runs).
    public var hasPartialFrame: Bool { buffer.count > start }

    /// Adds bytes that arrived.
    public func append(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
    }

    /// Adds bytes that arrived.
    public func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// The next whole frame, or nil until more bytes arrive.
    /// - Throws: `FrameError` when the frame's header is refused; the decoder is then spent.
    public func next() throws(FrameError<Format>) -> Frame<Format>? {
        let available = buffer.count - start
        guard available >= 4 else { return nil }
        let length = Int(readU32(buffer, at: start))
        guard length <= limit else { throw .tooLarge(length: length, limit: limit) }
        guard length >= Frame<Format>.headerBytes else { throw .tooShort(length: length) }
        guard available >= 5 else { return nil }
        guard buffer[start + 4] == Format.version else { throw .unsupportedVersion(buffer[start + 4]) }
        guard available >= 9 else { return nil }
        let jsonLength = Int(readU32(buffer, at: start + 5))
        guard jsonLength <= length - Frame<Format>.headerBytes else { throw .badJSONLength(jsonLength, frame: length) }
        guard available >= 4 + length else { return nil }
        let body = start + 9
        let end = start + 4 + length
        let frame = Frame<Format>(json: Array(buffer[body..<(body + jsonLength)]), tail: Array(buffer[(body + jsonLength)..<end]))
        buffer.withUnsafeMutableBytes { b in
            _ = UnsafeMutableRawBufferPointer(rebasing: b[start..<end]).initializeMemory(as: UInt8.self, repeating: 0)
        }
        start = end
        // Consumed bytes are not moved on every frame: only when all are consumed, or enough to matter.
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start >= 16 << 10 {
            buffer.removeFirst(start)
            start = 0
        }
        return frame
    }
}

func appendU32(_ n: UInt32, to out: inout [UInt8]) {
    out += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
}

func readU32(_ b: [UInt8], at i: Int) -> UInt32 {
    UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
}
