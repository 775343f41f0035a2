import Foundation
import VaultKit

/// The agent's wire format, version 1. A frame is a big-endian u32 length, then that many bytes:
/// a big-endian u32 header length, the JSON header, and an optional binary tail (the vault key,
/// only in `unlock` requests). Frames over `maxFrame` bytes are refused and the connection closed.
enum AgentWire {
    static let version = 1
    static let maxFrame = 1 << 20
    /// Responses may carry a whole listing.
    static let maxResponse = 256 << 20

    /// Encodes a frame.
    static func frame(_ header: [String: Any], tail: [UInt8] = []) -> [UInt8] {
        var h = header
        h["v"] = version
        // No .sortedKeys: sorting sets up an ICU locale, a millisecond per process on the `get` path.
        let json = Array((try? JSONSerialization.data(withJSONObject: h)) ?? Data("{}".utf8))
        var out: [UInt8] = []
        out.reserveCapacity(8 + json.count + tail.count)
        append(UInt32(4 + json.count + tail.count), to: &out)
        append(UInt32(json.count), to: &out)
        out += json
        out += tail
        return out
    }

    static func append(_ n: UInt32, to out: inout [UInt8]) {
        out += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
    }

    static func u32(_ b: ArraySlice<UInt8>) -> Int {
        let i = b.startIndex
        return Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3])
    }

    /// Splits a frame body into its JSON header and binary tail.
    static func parse(body: ArraySlice<UInt8>) -> (header: [String: Any], tail: ArraySlice<UInt8>)? {
        guard body.count >= 4 else { return nil }
        let hlen = u32(body)
        guard hlen <= body.count - 4 else { return nil }
        let start = body.startIndex + 4
        guard let obj = try? JSONSerialization.jsonObject(with: Data(body[start..<start + hlen])) as? [String: Any] else { return nil }
        return (obj, body[(start + hlen)...])
    }

    /// The agent's socket: `$XDG_RUNTIME_DIR/vault/agent.sock`, else `/tmp/vault-UID/agent.sock`.
    static func socketPath(_ env: [String: String]) -> String {
        folder(env) + "/agent.sock"
    }

    static func folder(_ env: [String: String]) -> String {
        if let r = env["XDG_RUNTIME_DIR"], r.hasPrefix("/") { return r + "/vault" }
        return "/tmp/vault-\(getuid())"
    }

    /// Writes all bytes (a send timeout keeps a stuck peer from blocking the agent for long).
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + off, bytes.count - off, Int32(MSG_NOSIGNAL)) }
            if n < 0 { if errno == EINTR { continue }; return false }
            off += n
        }
        return true
    }

    /// Reads one frame body (blocking); nil at EOF or on a malformed/oversized frame.
    static func readFrame(_ fd: Int32, limit: Int) -> [UInt8]? {
        guard let head = readExactly(fd, 4) else { return nil }
        let len = u32(head[...])
        guard len >= 4, len <= limit else { return nil }
        return readExactly(fd, len)
    }

    static func readExactly(_ fd: Int32, _ count: Int) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: count)
        var off = 0
        while off < count {
            let n = out.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + off, count - off, 0) }
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { return nil }
            off += n
        }
        return out
    }

    /// The uid and pid of the process on the other end of a Unix socket.
    static func peer(_ fd: Int32) -> (uid: uid_t, pid: pid_t)? {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (Glibc hides it behind _GNU_SOURCE).
        var cred: (Int32, UInt32, UInt32) = (0, 0, 0)
        var len = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0, len == 12 else { return nil }
        return (cred.1, cred.0)
    }

    /// Wipes an array that held secret bytes.
    static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { b in
            if let p = b.baseAddress { memset(p, 0, b.count) }
        }
        bytes.removeAll()
    }
}

/// Item <-> JSON for the wire (the same field names as the sealed record).
enum ItemWire {
    static func encode(_ item: Item) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: JSONEncoder().encode(item))) as? [String: Any] ?? [:]
    }
    static func decode(_ obj: Any?) throws -> Item {
        guard let obj, let data = try? JSONSerialization.data(withJSONObject: obj),
              let item = try? JSONDecoder().decode(Item.self, from: data) else {
            throw VaultError.failure("the agent sent an unreadable item")
        }
        return item
    }
    static func error(_ e: VaultError) -> [String: Any] {
        var o: [String: Any] = ["ok": false, "code": Int(e.exitCode), "message": e.message]
        if let h = e.hint { o["hint"] = h }
        return o
    }
}
