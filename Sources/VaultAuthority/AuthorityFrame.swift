public import VaultKit
public import VaultWire
internal import VaultSystem
internal import FoundationEssentials

/// The system authority's wire format, version 2: VaultWire's `Frame`. A frame is a big-endian u32 length `L`, then
/// `L` bytes: a version byte (2), a big-endian u32 JSON length `J`, `J` bytes of JSON (one
/// `AuthorityRequest` or `AuthorityReply`), and `L - 5 - J` bytes of binary tail: a 32-byte key
/// (the proof key of a `bind`, the slot key of `bound` and `key`), empty otherwise. Both sides
/// wipe the frame's bytes when it goes.
public enum AuthorityWire: WireFormat {
    public static let version: UInt8 = 2
    public static let terms = WireTerms(name: "key authority", speaker: "vault-authd", versionHint: "install matching versions of vault and vault-authd")
    public static func refusal(_ error: VaultError) -> AuthorityFrame { AuthorityCodec.frame(.failed(error: error)) }
}

/// vault-authd's frames (`AuthorityFrame`), their decoder (`AuthorityFrameDecoder`), why one is
/// refused (`AuthorityFrameError`), and a connection carrying them.
public typealias AuthorityFrame = Frame<AuthorityWire>
public typealias AuthorityFrameDecoder = FrameDecoder<AuthorityWire>
public typealias AuthorityFrameError = FrameError<AuthorityWire>
typealias AuthorityConnection = FramedConnection<AuthorityWire>

/// Encoding and decoding of messages inside frames.
public enum AuthorityCodec {
    /// A request as a frame; `tail` is the proof key of a `bind`.
    /// - Throws: `.usage` when the request is out of bounds or cannot be encoded.
    package static func frame(_ request: AuthorityRequest, tail: [UInt8] = []) throws(VaultError) -> AuthorityFrame {
        try request.validate()
        let encoded: AuthorityFrame?
        do { encoded = try AuthorityFrame.encoding(request, tail: tail, limit: AuthorityLimits.requestFrame) } catch { throw error.vaultError }
        guard let frame = encoded else {
            throw .usage("the request cannot be encoded for the key authority")
        }
        return frame
    }

    /// Decodes a request frame.
    /// - Throws: `.usage` for malformed JSON, a missing field, a field of the wrong type or out of
    ///   bounds, a missing or misplaced key tail.
    package static func request(_ frame: AuthorityFrame) throws(VaultError) -> AuthorityRequest {
        let request = try frame.request(AuthorityRequest.self)
        if request.carriesKey {
            guard frame.tailCount == AuthorityLimits.keyBytes else {
                throw .usage("malformed request: bind, rekey and reregister carry a \(AuthorityLimits.keyBytes)-byte proof key")
            }
        } else if frame.tailCount > 0 {
            throw .usage("malformed request: only bind, rekey and reregister carry binary data")
        }
        try request.validate()
        return request
    }

    /// A reply as a frame; `tail` is the key of `bound` and `key`. A reply that cannot be
    /// encoded or is over the limit becomes a `failed` reply saying so.
    package static func frame(_ reply: AuthorityReply, tail: [UInt8] = []) -> AuthorityFrame {
        .reply(reply, tail: tail, limit: AuthorityLimits.replyFrame,
               overLimit: .failure("the key authority's reply is over its limit of \(AuthorityLimits.replyFrame) bytes"),
               failed: { .failed(error: $0) })
    }

    /// Decodes a reply frame.
    /// - Throws: `.failure` when the reply is unreadable, or a key is missing or misplaced.
    package static func reply(_ frame: AuthorityFrame) throws(VaultError) -> AuthorityReply {
        guard let reply = frame.reply(AuthorityReply.self) else {
            throw .failure("vault-authd sent an unreadable reply", hint: "install matching versions of vault and vault-authd")
        }
        guard frame.tailCount == reply.tailBytes else {
            throw .failure("vault-authd sent a reply with a malformed key")
        }
        return reply
    }
}
