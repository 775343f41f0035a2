public import VaultKit

/// The one message coding of every framed protocol: the JSON part of a frame is one `Codable`
/// message written and read by VaultKit's `WireJSON` (no Foundation coder: its conformance scans
/// cost a `vault get` half its CPU), nested at most 32 deep; what is wrong with a malformed one is
/// told by the field's path, never its value (it may be a secret).
extension Frame {
    /// A frame of `message` and `tail`, or nil when the message cannot be encoded or the frame
    /// would be over `limit` bytes.
    /// - Throws: `FrameError.outOfGuardedMemory` when the tail cannot be put in guarded memory.
    public static func encoding(_ message: some Encodable, tail: [UInt8] = [], limit: Int) throws(FrameError<Format>) -> Frame? {
        guard let json = try? WireJSON.encode(message), headerBytes + json.count + tail.count <= limit else { return nil }
        return try Frame(json: json, tail: tail)
    }

    /// A reply as a frame: `message` and `tail`; when the message cannot be encoded or is over
    /// `limit` the frame of `failed(overLimit)`, and when its tail cannot be kept in guarded
    /// memory the frame of `failed` saying so. A server always has a reply to send.
    public static func reply<Reply: Encodable>(_ message: Reply, tail: [UInt8] = [], limit: Int, overLimit: @autoclosure () -> VaultError,
                                               failed: (VaultError) -> Reply) -> Frame {
        let why: VaultError
        do {
            if let frame = try encoding(message, tail: tail, limit: limit) { return frame }
            why = overLimit()
        } catch {
            why = error.vaultError
        }
        return Frame(json: (try? WireJSON.encode(failed(why))) ?? [])
    }

    /// The frame's JSON decoded as a request of type `T`.
    /// - Throws: `.usage("malformed request: ...")` naming the field that is wrong.
    public func request<T: Decodable>(_ type: T.Type) throws(VaultError) -> T {
        guard !JSONDepth.exceeds(json) else { throw .usage("malformed request: nested too deeply") }
        do {
            return try WireJSON.decode(T.self, from: json)
        } catch let e as DecodingError {
            throw .usage("malformed request: \(describeDecodingError(e))")
        } catch {
            throw .usage("malformed request")
        }
    }

    /// The frame's JSON decoded as a reply of type `T`, or nil when it is unreadable (the caller
    /// says whose reply it was).
    public func reply<T: Decodable>(_ type: T.Type) -> T? {
        guard !JSONDepth.exceeds(json) else { return nil }
        return try? WireJSON.decode(T.self, from: json)
    }
}

/// What is wrong with a message, by the field's path (never the value: it may be a secret).
public func describeDecodingError(_ e: DecodingError) -> String {
    func path(_ p: [any CodingKey]) -> String {
        let keys = p.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.filter { $0 != "_0" }
        return keys.isEmpty ? "the message" : "'" + keys.joinedText(separator: ".") + "'"
    }
    switch e {
    case .typeMismatch(_, let c): return "\(path(c.codingPath)) has the wrong type"
    case .valueNotFound(_, let c): return "\(path(c.codingPath)) is null"
    case .keyNotFound(let k, let c): return "\(path(c.codingPath + [k])) is missing"
    case .dataCorrupted(let c): return c.codingPath.isEmpty ? "not a JSON request" : "\(path(c.codingPath)) is invalid"
    @unknown default: return "unreadable"
    }
}
