public import VaultKit
public import VaultWire
internal import VaultSystem
internal import FoundationEssentials

/// The agent's wire format, version 5: VaultWire's `Frame`. A frame is a big-endian u32 length `L`, then `L` bytes:
/// a version byte (5), a big-endian u32 JSON length `J`, `J` bytes of JSON (one `AgentRequest`
/// or `AgentReply`), and `L - 5 - J` bytes of binary tail: the 32-byte master key of an `unlock`
/// request (kept out of the JSON so it can be wiped), the overview records of a listing page,
/// the secrets released (since version 4: every release; version 3 carried items with secrets
/// in the JSON, and only a single secret in the tail). Version 5: a fresh match travels as the
/// key authority's token over a nonce of the agent (`freshMatchNonce`), not as a flag the
/// client sets (version 4's `"freshMatch": true`). `L` is at most
/// `AgentLimits.requestFrame` for requests and `AgentLimits.replyFrame` for replies.
public enum AgentWire: WireFormat {
    /// Version 5 (a version 1 frame starts with a zero byte where the version is).
    public static let version: UInt8 = 5
    /// "agent", "this agent", and stopping an old agent.
    public static let terms = WireTerms(name: "agent", speaker: "this agent",
                                        versionHint: "stop the old agent with 'vault lock --all' and unlock again")
}

/// The agent's frames, their decoder, why one is refused, and a connection carrying them.
public typealias AgentFrame = Frame<AgentWire>
public typealias AgentFrameDecoder = FrameDecoder<AgentWire>
public typealias AgentFrameError = FrameError<AgentWire>
typealias AgentConnection = FramedConnection<AgentWire>

/// Encoding and decoding of messages inside frames.
public enum AgentCodec {
    /// A request as a frame; `tail` is the master key of an `unlock`.
    /// - Throws: `.usage` when the request cannot be encoded or its frame is over the request limit.
    public static func frame(_ request: AgentRequest, tail: [UInt8] = []) throws -> AgentFrame {
        guard let frame = try AgentFrame.encoding(request, tail: tail, limit: AgentLimits.requestFrame) else {
            throw VaultError.usage("the request is over the unlock session's limit of \(AgentLimits.requestFrame) bytes",
                                   hint: "run the command without the session: add --passcode")
        }
        return frame
    }

    /// Decodes a request frame.
    /// - Throws: `.usage` for malformed JSON, a missing field, a field of the wrong type, a field out
    ///   of bounds, or a tail on a request other than `unlock`.
    public static func request(_ frame: AgentFrame) throws(VaultError) -> AgentRequest {
        let request = try frame.request(AgentRequest.self)
        if case .unlock = request {} else if frame.tailCount > 0 {
            throw .usage("malformed request: only unlock carries binary data")
        }
        do { try request.validate() } catch let e as VaultError { throw e } catch { throw .usage("malformed request") }
        return request
    }

    /// A reply as a frame. A reply that cannot be encoded or is over the reply limit becomes a
    /// `failed` reply saying so.
    public static func frame(_ reply: AgentReply, tail: [UInt8] = []) -> AgentFrame {
        .reply(reply, tail: tail, limit: AgentLimits.replyFrame,
               overLimit: .failure("the reply is over the unlock session's limit of \(AgentLimits.replyFrame) bytes",
                                   hint: "run the command without the session: add --passcode"),
               failed: { .failed(error: $0) })
    }

    /// Decodes a reply frame.
    /// - Throws: `.failure` when the agent's reply is unreadable.
    public static func reply(_ frame: AgentFrame) throws(VaultError) -> AgentReply {
        guard let reply = frame.reply(AgentReply.self) else {
            throw .failure("the agent sent an unreadable reply", hint: "stop the agent with 'vault lock --all' and unlock again")
        }
        return reply
    }
}

extension AgentWire {
    /// A `failed` reply carrying `error`.
    public static func refusal(_ error: VaultError) -> AgentFrame {
        AgentCodec.frame(.failed(error: error))
    }
}
