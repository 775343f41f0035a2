import VaultKit
internal import VaultSystem
internal import VaultWire

/// One connection of an SSH agent's client, made by VaultWire's `SocketServer`: messages as
/// OpenSSH frames them (a u32 length, then the message), each at most `limit` bytes and whole
/// within its deadline from its first byte; with nothing begun, a connection may stay open as
/// long as the agent runs (ssh holds its connection for a session). Bytes are read straight into
/// the message they belong to, at most `chunkBytes` at a time and never beyond it (a pipelined
/// next message waits in the socket), so no copy of a message is left to wipe but the one handed
/// out. A reply goes out in slices, each under what is left of its deadline.
final class SSHAgentConnection: ServedConnection, @unchecked Sendable {
    /// What a wait for a message came to.
    enum Arrival {
        /// A whole message (the caller wipes it).
        case message([UInt8])
        /// A length of 0 or over the limit: OpenSSH's agent closes such a connection unanswered.
        case refused(length: Int)
        /// A message begun and not finished within its deadline.
        case late
        /// The peer closed, the read failed, or the agent stopped.
        case ended
    }

    /// The socket.
    var socket: UnixSocket
    /// The longest message accepted.
    let limit: Int
    private let chunkBytes: Int
    private var header = [UInt8](repeating: 0, count: 4)
    private var headerFilled = 0
    private var message: [UInt8] = []
    private var messageFilled = 0

    /// A connection over `socket` accepting messages of at most `limit` bytes, read at most `chunkBytes` at a time.
    init(_ socket: consuming UnixSocket, limit: Int, chunkBytes: Int = 64 << 10) {
        self.socket = socket
        self.limit = limit
        self.chunkBytes = max(1, chunkBytes)
    }

    deinit {
        wipe(&header)
        wipe(&message)
    }

    /// Closes the socket (again is harmless).
    func close() {
        try? socket.close()
    }

    /// Sends `SSH_AGENT_FAILURE` (within `seconds`) and closes: the refusal of the SSH agent
    /// protocol, which carries no reason.
    func refuse(_ error: VaultError, within seconds: Double) {
        send([AgentMessage.failure], within: seconds)
        close()
    }

    /// Whether part of a message has arrived.
    var hasPartialMessage: Bool { headerFilled > 0 }

    /// The next message, waiting while `running` holds; once its first byte arrived, it must be
    /// whole within `deadline` seconds.
    func nextMessage(deadline: Double, while running: () -> Bool) -> Arrival {
        var started = MonotonicClock.seconds()
        while running() {
            let partial = hasPartialMessage
            let now = MonotonicClock.seconds()
            if partial, now >= started + deadline { return .late }
            let wait = partial ? Int32(max(1, min(500, (started + deadline - now) * 1000))) : 500
            guard let readable = try? Poll.isReadable(socket.rawValue, timeoutMilliseconds: wait) else { return .ended }
            guard readable else { continue }
            if !partial { started = MonotonicClock.seconds() }
            switch receive() {
            case .some(let arrival): return arrival
            case .none: continue
            }
        }
        return .ended
    }

    /// Reads what is there of the current header or message; an arrival when it completed a
    /// message, refused one, or found the peer gone, else nil.
    private func receive() -> Arrival? {
        if headerFilled < 4 {
            guard let count = read(into: &header, from: headerFilled, upTo: 4) else { return .ended }
            headerFilled += count
            guard headerFilled == 4 else { return nil }
            let length = header.reduce(0) { $0 << 8 | Int($1) }
            for i in header.indices { header[i] = 0 }
            guard length > 0, length <= limit else { return .refused(length: length) }
            message = [UInt8](repeating: 0, count: length)
            messageFilled = 0
            return nil
        }
        guard let count = read(into: &message, from: messageFilled, upTo: message.count) else { return .ended }
        messageFilled += count
        guard messageFilled == message.count else { return nil }
        let whole = message
        message = []
        (headerFilled, messageFilled) = (0, 0)
        return .message(whole)
    }

    /// Reads into `buffer[from..<upTo]` (at most `chunkBytes`); nil when the peer closed or the read failed.
    private func read(into buffer: inout [UInt8], from start: Int, upTo end: Int) -> Int? {
        let want = min(end - start, chunkBytes)
        let count: Int
        do {
            count = try buffer.withUnsafeMutableBytes { (b) throws(SystemError) -> Int in
                try socket.receive(into: UnsafeMutableRawBufferPointer(rebasing: b[start..<(start + want)]))
            }
        } catch {
            return nil
        }
        return count > 0 ? count : nil
    }

    /// Sends `reply` framed (its u32 length first) within `seconds` and a second more per MiB, in
    /// slices of 256 KiB, each under what is left of that time; false when the peer is gone or
    /// too slow to take it. The framed copy is wiped.
    @discardableResult
    func send(_ reply: [UInt8], within seconds: Double) -> Bool {
        var w = SSHWriter()
        w.string(reply)
        defer { wipe(&w.bytes) }
        let deadline = MonotonicClock.seconds() + seconds + Double(w.bytes.count >> 20)
        var offset = 0
        while offset < w.bytes.count {
            let left = deadline - MonotonicClock.seconds()
            guard left > 0, (try? socket.setSendTimeout(seconds: min(left, seconds))) != nil else { return false }
            let end = min(w.bytes.count, offset + (256 << 10))
            let sent = w.bytes.withUnsafeBytes { b in
                (try? socket.sendAll(UnsafeRawBufferPointer(rebasing: b[offset..<end]))) != nil
            }
            guard sent else { return false }
            offset = end
        }
        return true
    }
}
