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
/// tail (keys and secrets, kept out of the JSON). The tail lives in guarded memory (libsodium's
/// `sodium_malloc`: guard pages, no core dump, wiped when freed): a decoder copies it there straight
/// from the bytes it read (which it wipes), and a `FramedConnection` sends it from there. The
/// JSON is wiped when the frame goes. See docs/format.md, "Frames".
public final class Frame<Format: WireFormat> {
    /// The version byte this code writes and reads.
    public static var version: UInt8 { Format.version }
    /// Version byte and JSON length.
    public static var headerBytes: Int { 5 }

    /// The JSON message.
    public var json: [UInt8]
    /// The binary tail in guarded memory; nil when the message has none.
    private let guardedTail: GuardedTail?

    /// A frame of `json` with no tail.
    public init(json: [UInt8]) {
        self.json = json
        guardedTail = nil
    }

    /// A frame of `json` and a copy of `tail` in guarded memory (the caller wipes its own copy).
    /// - Throws: `FrameError.outOfGuardedMemory` when libsodium cannot allocate.
    public init(json: [UInt8], tail: [UInt8]) throws(FrameError<Format>) {
        self.json = json
        if tail.isEmpty {
            guardedTail = nil
        } else {
            do { guardedTail = GuardedTail(try SecretBytes(copying: tail)) } catch { throw .outOfGuardedMemory }
        }
    }

    /// A frame of `json` and a tail already in guarded memory.
    public init(json: [UInt8], guarded tail: consuming SecretBytes) {
        self.json = json
        guardedTail = tail.count == 0 ? nil : GuardedTail(tail)
    }

    /// Decoded bytes: the JSON and the tail, the tail copied straight into guarded memory.
    init(json: [UInt8], tailBytes: UnsafeRawBufferPointer) throws(FrameError<Format>) {
        self.json = json
        if tailBytes.isEmpty {
            guardedTail = nil
        } else {
            do { guardedTail = GuardedTail(try SecretBytes(copying: tailBytes)) } catch { throw .outOfGuardedMemory }
        }
    }

    deinit {
        wipe(&json)
    }

    /// The tail's size in bytes.
    public var tailCount: Int { guardedTail?.bytes.count ?? 0 }

    /// Lends the tail's bytes from guarded memory (empty when there is none).
    public func withTail<R: ~Copyable>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        guard let guardedTail else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return try guardedTail.bytes.withUnsafeBytes(body)
    }

    /// A copy of the tail's bytes `range` in guarded memory (a key taken from the tail).
    /// - Throws: `CryptoError.outOfMemory`.
    public func tailSecret(_ range: Range<Int>? = nil) throws -> SecretBytes {
        try withTail { all in try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: all[range ?? 0..<all.count])) }
    }

    /// A copy of the tail in ordinary memory, for a consumer that keeps bytes (the caller wipes
    /// it; ``withTailCopy(_:)`` does that for a consumer that does not keep them).
    public var tail: [UInt8] { withTail { Array($0) } }

    /// Runs `body` with a copy of the tail in ordinary memory (what an API taking `[UInt8]`
    /// needs), wiped when `body` returns.
    public func withTailCopy<R>(_ body: ([UInt8]) throws -> R) rethrows -> R {
        var copy = tail
        defer { wipe(&copy) }
        return try body(copy)
    }

    /// The size of the frame without its length prefix (the `L` a decoder checks against its limit).
    public var length: Int { Self.headerBytes + json.count + tailCount }

    /// The length prefix, version byte, JSON length and JSON: what goes before the tail.
    public func head() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(9 + json.count)
        appendU32(UInt32(truncatingIfNeeded: length), to: &out)
        out.append(Format.version)
        appendU32(UInt32(truncatingIfNeeded: json.count), to: &out)
        out += json
        return out
    }

    /// The frame's bytes, length prefix and tail included, in ordinary memory (the caller wipes
    /// them after sending; `FramedConnection` sends the tail from guarded memory instead).
    public func encoded() -> [UInt8] {
        var out = head()
        withTail { out.append(contentsOf: $0) }
        return out
    }
}

/// A frame's tail, boxed: a class holds the non-copyable bytes so a frame may have none.
private final class GuardedTail {
    let bytes: SecretBytes
    init(_ bytes: consuming SecretBytes) { self.bytes = bytes }
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
    /// Guarded memory for the tail could not be had.
    case outOfGuardedMemory

    /// The refusal as a usage error, for the reply.
    public var vaultError: VaultError {
        switch self {
        case .tooLarge(let n, let limit): .usage("refused: a frame of \(n) bytes is over the \(Format.terms.name)'s limit of \(limit)")
        case .tooShort(let n): .usage("refused: a frame of \(n) bytes is too short")
        case .unsupportedVersion(let v):
            .usage("refused: \(Format.terms.name) protocol version \(v) is not supported (\(Format.terms.speaker) speaks version \(Format.version))",
                   hint: Format.terms.versionHint)
        case .badJSONLength(let j, let n): .usage("refused: a JSON length of \(j) bytes does not fit a frame of \(n)")
        case .outOfGuardedMemory: .failure("out of guarded memory for a frame's keys", hint: "raise the locked-memory limit (ulimit -l)")
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
        let json = Array(buffer[body..<(body + jsonLength)])
        let tailResult: Result<Frame<Format>, FrameError<Format>> = buffer.withUnsafeBytes { b in
            Result { () throws(FrameError<Format>) in
                try Frame<Format>(json: json, tailBytes: UnsafeRawBufferPointer(rebasing: b[(body + jsonLength)..<end]))
            }
        }
        let frame = try tailResult.get()
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
