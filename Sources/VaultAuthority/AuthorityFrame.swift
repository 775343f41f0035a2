public import VaultKit
internal import VaultSystem
internal import Foundation

/// The system authority's wire format, version 1. A frame is a big-endian u32 length `L`, then
/// `L` bytes: a version byte (1), a big-endian u32 JSON length `J`, `J` bytes of JSON (one
/// `AuthorityRequest` or `AuthorityReply`), and `L - 5 - J` bytes of binary tail: a 32-byte key
/// (the proof key of a `bind`, the slot key of `bound` and `key`), empty otherwise. Both sides
/// wipe the frame's bytes when it goes.
public final class AuthorityFrame {
    /// The version byte this code writes and reads.
    public static let version: UInt8 = 2
    /// Version byte and JSON length.
    static let headerBytes = 5

    /// The JSON message.
    public var json: [UInt8]
    /// The binary tail (a key), empty otherwise.
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

    /// The frame's bytes, length prefix included (the caller wipes them after sending).
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

/// Why a frame was refused; the connection it came on is closed after one `failed` reply.
public enum AuthorityFrameError: Error, Equatable, Sendable {
    /// The declared length is over the limit.
    case tooLarge(length: Int, limit: Int)
    /// The declared length cannot hold the version byte and the JSON length.
    case tooShort(length: Int)
    /// Not version 1.
    case unsupportedVersion(UInt8)
    /// The JSON length runs past the frame.
    case badJSONLength(Int, frame: Int)

    /// The refusal as a usage error, for the reply.
    public var vaultError: VaultError {
        switch self {
        case .tooLarge(let n, let limit): .usage("refused: a frame of \(n) bytes is over the key authority's limit of \(limit)")
        case .tooShort(let n): .usage("refused: a frame of \(n) bytes is too short")
        case .unsupportedVersion(let v):
            .usage("refused: key authority protocol version \(v) is not supported (vault-authd speaks version \(AuthorityFrame.version))",
                   hint: "install matching versions of vault and vault-authd")
        case .badJSONLength(let j, let n): .usage("refused: a JSON length of \(j) bytes does not fit a frame of \(n)")
        }
    }
}

/// An incremental frame decoder with a bound: bytes go in as they arrive, whole frames come out.
/// A frame is refused as soon as its header shows it is over the limit, of another version or
/// inconsistent, before its body is read. Consumed bytes are wiped.
public final class AuthorityFrameDecoder {
    /// The largest frame accepted (the `L` of the header).
    public let limit: Int
    private var buffer: [UInt8] = []
    private var start = 0

    /// A decoder refusing frames over `limit` bytes.
    public init(limit: Int) {
        self.limit = limit
    }

    deinit { wipe(&buffer) }

    /// Whether part of a frame has arrived and the rest has not.
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
    /// - Throws: `AuthorityFrameError` when the frame's header is refused; the decoder is then spent.
    public func next() throws(AuthorityFrameError) -> AuthorityFrame? {
        let available = buffer.count - start
        guard available >= 4 else { return nil }
        let length = Int(readU32(buffer, at: start))
        guard length <= limit else { throw .tooLarge(length: length, limit: limit) }
        guard length >= AuthorityFrame.headerBytes else { throw .tooShort(length: length) }
        guard available >= 5 else { return nil }
        guard buffer[start + 4] == AuthorityFrame.version else { throw .unsupportedVersion(buffer[start + 4]) }
        guard available >= 9 else { return nil }
        let jsonLength = Int(readU32(buffer, at: start + 5))
        guard jsonLength <= length - AuthorityFrame.headerBytes else { throw .badJSONLength(jsonLength, frame: length) }
        guard available >= 4 + length else { return nil }
        let body = start + 9
        let end = start + 4 + length
        let frame = AuthorityFrame(json: Array(buffer[body..<(body + jsonLength)]), tail: Array(buffer[(body + jsonLength)..<end]))
        buffer.withUnsafeMutableBytes { b in
            _ = UnsafeMutableRawBufferPointer(rebasing: b[start..<end]).initializeMemory(as: UInt8.self, repeating: 0)
        }
        start = end
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

/// Encoding and decoding of messages inside frames.
public enum AuthorityCodec {
    /// A request as a frame; `tail` is the proof key of a `bind`.
    /// - Throws: `.usage` when the request is out of bounds or cannot be encoded.
    public static func frame(_ request: AuthorityRequest, tail: [UInt8] = []) throws(VaultError) -> AuthorityFrame {
        try request.validate()
        guard let json = try? WireJSON.encode(request),
              AuthorityFrame.headerBytes + json.count + tail.count <= AuthorityLimits.requestFrame else {
            throw .usage("the request cannot be encoded for the key authority")
        }
        return AuthorityFrame(json: Array(json), tail: tail)
    }

    /// Decodes a request frame.
    /// - Throws: `.usage` for malformed JSON, a missing field, a field of the wrong type or out of
    ///   bounds, a missing or misplaced key tail.
    public static func request(_ frame: AuthorityFrame) throws(VaultError) -> AuthorityRequest {
        let request: AuthorityRequest
        guard !JSONDepth.exceeds(frame.json) else { throw .usage("malformed request: nested too deeply") }
        do {
            request = try WireJSON.decode(AuthorityRequest.self, from: frame.json)
        } catch let e as DecodingError {
            throw .usage("malformed request: \(describe(e))")
        } catch {
            throw .usage("malformed request")
        }
        if request.carriesKey {
            guard frame.tail.count == AuthorityLimits.keyBytes else {
                throw .usage("malformed request: bind, rekey and reregister carry a \(AuthorityLimits.keyBytes)-byte proof key")
            }
        } else if !frame.tail.isEmpty {
            throw .usage("malformed request: only bind, rekey and reregister carry binary data")
        }
        try request.validate()
        return request
    }

    /// A reply as a frame; `tail` is the key of `bound` and `key`. A reply that cannot be
    /// encoded or is over the limit becomes a `failed` reply saying so.
    public static func frame(_ reply: AuthorityReply, tail: [UInt8] = []) -> AuthorityFrame {
        if let json = try? WireJSON.encode(reply), AuthorityFrame.headerBytes + json.count + tail.count <= AuthorityLimits.replyFrame {
            return AuthorityFrame(json: Array(json), tail: tail)
        }
        let error = VaultError.failure("the key authority's reply is over its limit of \(AuthorityLimits.replyFrame) bytes")
        return AuthorityFrame(json: (try? WireJSON.encode(AuthorityReply.failed(error: error))) ?? [])
    }

    /// Decodes a reply frame.
    /// - Throws: `.failure` when the reply is unreadable, or a key is missing or misplaced.
    public static func reply(_ frame: AuthorityFrame) throws(VaultError) -> AuthorityReply {
        guard !JSONDepth.exceeds(frame.json), let reply = try? WireJSON.decode(AuthorityReply.self, from: frame.json) else {
            throw .failure("vault-authd sent an unreadable reply", hint: "install matching versions of vault and vault-authd")
        }
        guard frame.tail.count == reply.tailBytes else {
            throw .failure("vault-authd sent a reply with a malformed key")
        }
        return reply
    }

    /// What is wrong, by the field's path (never the value).
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
