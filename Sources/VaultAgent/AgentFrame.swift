public import VaultKit
internal import VaultSystem
internal import Foundation

/// The agent's wire format, version 5. A frame is a big-endian u32 length `L`, then `L` bytes:
/// a version byte (5), a big-endian u32 JSON length `J`, `J` bytes of JSON (one `AgentRequest`
/// or `AgentReply`), and `L - 5 - J` bytes of binary tail: the 32-byte master key of an `unlock`
/// request (kept out of the JSON so it can be wiped), the overview records of a listing page,
/// the secrets released (since version 4: every release; version 3 carried items with secrets
/// in the JSON, and only a single secret in the tail). Version 5: a fresh match travels as the
/// key authority's token over a nonce of the agent (`freshMatchNonce`), not as a flag the
/// client sets (version 4's `"freshMatch": true`). `L` is at most
/// `AgentLimits.requestFrame` for requests and `AgentLimits.replyFrame` for replies.
public final class AgentFrame {
    /// The version byte this code writes and reads.
    public static let version: UInt8 = 5
    /// Version byte and JSON length.
    static let headerBytes = 5

    /// The JSON message.
    public var json: [UInt8]
    /// The binary tail (the master key of an `unlock`), empty otherwise.
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

    /// The frame's bytes, length prefix included.
    public func encoded() -> [UInt8] {
        let length = Self.headerBytes + json.count + tail.count
        var out: [UInt8] = []
        out.reserveCapacity(4 + length)
        appendU32(UInt32(truncatingIfNeeded: length), to: &out)
        out.append(Self.version)
        appendU32(UInt32(truncatingIfNeeded: json.count), to: &out)
        out += json
        out += tail
        return out
    }
}

/// Why a frame was refused. The connection it came on is closed after one refusal reply.
public enum FrameError: Error, Equatable, Sendable {
    /// The declared length is over the limit.
    case tooLarge(length: Int, limit: Int)
    /// The declared length cannot hold the version byte and the JSON length.
    case tooShort(length: Int)
    /// Not version 5 (a version 1 frame starts with a zero byte here).
    case unsupportedVersion(UInt8)
    /// The JSON length runs past the frame.
    case badJSONLength(Int, frame: Int)

    /// The refusal as a usage error, for the reply.
    public var vaultError: VaultError {
        switch self {
        case .tooLarge(let n, let limit): .usage("refused: a frame of \(n) bytes is over the agent's limit of \(limit)")
        case .tooShort(let n): .usage("refused: a frame of \(n) bytes is too short")
        case .unsupportedVersion(let v): .usage("refused: agent protocol version \(v) is not supported (this agent speaks version \(AgentFrame.version))",
                                                hint: "stop the old agent with 'vault lock --all' and unlock again")
        case .badJSONLength(let j, let n): .usage("refused: a JSON length of \(j) bytes does not fit a frame of \(n)")
        }
    }
}

/// An incremental frame decoder with a bound: bytes go in as they arrive, whole frames come out.
/// A frame is refused as soon as its header shows it is over the limit, of another version or
/// inconsistent, before its body is read. Consumed bytes are wiped.
public final class FrameDecoder {
    /// The largest frame accepted (the `L` of the header).
    public let limit: Int
    private var buffer: [UInt8] = []

    /// A decoder refusing frames over `limit` bytes.
    public init(limit: Int) {
        self.limit = limit
    }

    deinit { wipe(&buffer) }

    /// Whether part of a frame has arrived and the rest has not (the peer's request deadline runs).
    public var hasPartialFrame: Bool { !buffer.isEmpty }

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
    public func next() throws(FrameError) -> AgentFrame? {
        guard buffer.count >= 4 else { return nil }
        let length = Int(readU32(buffer, at: 0))
        guard length <= limit else { throw .tooLarge(length: length, limit: limit) }
        guard length >= AgentFrame.headerBytes else { throw .tooShort(length: length) }
        guard buffer.count >= 5 else { return nil }
        guard buffer[4] == AgentFrame.version else { throw .unsupportedVersion(buffer[4]) }
        guard buffer.count >= 9 else { return nil }
        let jsonLength = Int(readU32(buffer, at: 5))
        guard jsonLength <= length - AgentFrame.headerBytes else { throw .badJSONLength(jsonLength, frame: length) }
        let end = 4 + length
        guard buffer.count >= end else { return nil }
        let frame = AgentFrame(json: Array(buffer[9..<(9 + jsonLength)]), tail: Array(buffer[(9 + jsonLength)..<end]))
        buffer.withUnsafeMutableBytes { b in _ = UnsafeMutableRawBufferPointer(rebasing: b[0..<end]).initializeMemory(as: UInt8.self, repeating: 0) }
        buffer.removeFirst(end)
        return frame
    }
}

/// Encoding and decoding of messages inside frames.
public enum AgentCodec {
    /// A request as a frame; `tail` is the master key of an `unlock`.
    /// - Throws: `.usage` when the request cannot be encoded or its frame is over the request limit.
    public static func frame(_ request: AgentRequest, tail: [UInt8] = []) throws -> AgentFrame {
        let json: [UInt8]
        do {
            json = try WireJSON.encode(request)
        } catch {
            throw VaultError.usage("the request cannot be encoded for the agent")
        }
        let size = AgentFrame.headerBytes + json.count + tail.count
        guard size <= AgentLimits.requestFrame else {
            throw VaultError.usage("the request (\(size) bytes) is over the unlock session's limit of \(AgentLimits.requestFrame) bytes",
                                   hint: "run the command without the session: add --passcode")
        }
        return AgentFrame(json: json, tail: tail)
    }

    /// Decodes a request frame.
    /// - Throws: `.usage` for malformed JSON, a missing field, a field of the wrong type, a field out
    ///   of bounds, or a tail on a request other than `unlock`.
    public static func request(_ frame: AgentFrame) throws(VaultError) -> AgentRequest {
        let request: AgentRequest
        guard !JSONDepth.exceeds(frame.json) else { throw .usage("malformed request: nested too deeply") }
        do {
            request = try WireJSON.decode(AgentRequest.self, from: frame.json)
        } catch let e as DecodingError {
            throw .usage("malformed request: \(describe(e))")
        } catch {
            throw .usage("malformed request")
        }
        if case .unlock = request {} else if !frame.tail.isEmpty {
            throw .usage("malformed request: only unlock carries binary data")
        }
        do { try request.validate() } catch let e as VaultError { throw e } catch { throw .usage("malformed request") }
        return request
    }

    /// A reply as a frame. A reply that cannot be encoded or is over the reply limit becomes a
    /// `failed` reply saying so.
    public static func frame(_ reply: AgentReply, tail: [UInt8] = []) -> AgentFrame {
        if let json = try? WireJSON.encode(reply), AgentFrame.headerBytes + json.count + tail.count <= AgentLimits.replyFrame {
            return AgentFrame(json: Array(json), tail: tail)
        }
        let error = VaultError.failure("the reply is over the unlock session's limit of \(AgentLimits.replyFrame) bytes",
                                       hint: "run the command without the session: add --passcode")
        return AgentFrame(json: (try? WireJSON.encode(AgentReply.failed(error: error))) ?? [])
    }

    /// Decodes a reply frame.
    /// - Throws: `.failure` when the agent's reply is unreadable.
    public static func reply(_ frame: AgentFrame) throws(VaultError) -> AgentReply {
        guard !JSONDepth.exceeds(frame.json) else { throw .failure("the agent sent an unreadable reply (nested too deeply)") }
        do {
            return try WireJSON.decode(AgentReply.self, from: frame.json)
        } catch {
            throw .failure("the agent sent an unreadable reply", hint: "stop the agent with 'vault lock --all' and unlock again")
        }
    }

    /// What is wrong, by the field's path (never the value: it may be a secret).
    static func describe(_ e: DecodingError) -> String {
        func path(_ p: [any CodingKey]) -> String {
            let keys = p.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.filter { $0 != "_0" }
            return keys.isEmpty ? "the message" : "'" + keys.joined(separator: ".") + "'"
        }
        switch e {
        case .typeMismatch(_, let c): return "\(path(c.codingPath)) has the wrong type"
        case .valueNotFound(_, let c): return "\(path(c.codingPath)) is null"
        case .keyNotFound(let k, let c): return "\(path(c.codingPath + [k])) is missing"
        case .dataCorrupted(let c): return c.codingPath.isEmpty ? "not a JSON request" : "\(path(c.codingPath)) is invalid"
        @unknown default: return "unreadable"
        }
    }
}

func appendU32(_ n: UInt32, to out: inout [UInt8]) {
    out += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
}

func readU32(_ b: [UInt8], at i: Int) -> UInt32 {
    UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
}
