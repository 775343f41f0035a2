public import VaultKit
public import VaultSystem

/// One end of a framed connection, owned by a class so it can move to the thread that serves
/// it: the socket, its decoder, and the one receive loop (read into a chunk, hand it to the
/// decoder, wipe the chunk). Servers and clients of every framed protocol read and write through
/// it. A request's deadline runs from its first byte; a reply is written in slices, each under
/// what is left of its deadline, so a peer that does not read cannot hold a server's thread for
/// longer.
public final class FramedConnection<Format: WireFormat>: ServedConnection, @unchecked Sendable {
    /// What a wait for a frame came to.
    enum Arrival {
        /// A whole frame.
        case frame(Frame<Format>)
        /// A frame refused from its header.
        case refused(FrameError<Format>)
        /// A frame begun and not finished within the request deadline.
        case late
        /// Nothing arrived for the idle time, the peer closed, the read failed or the server stopped.
        case ended
    }

    /// The socket.
    public var socket: UnixSocket
    /// The frames that arrived, and the part of one still arriving.
    public let decoder: FrameDecoder<Format>
    /// What `receive` reads into. Never zeroed as a whole: each read's bytes are wiped as soon
    /// as the decoder has them, so no byte that came in outlives its `receive` here (zeroing all
    /// 64 KiB at the start, after every read and at the end cost a session `get` 260,000
    /// instructions on each side; docs/performance.md).
    private let chunk: UnsafeMutableRawBufferPointer

    /// A connection over `socket` accepting frames of at most `limit` bytes, read `chunkBytes` at a time.
    public init(_ socket: consuming UnixSocket, limit: Int, chunkBytes: Int = 64 << 10) {
        self.socket = socket
        decoder = FrameDecoder(limit: limit)
        chunk = .allocate(byteCount: chunkBytes, alignment: 16)
    }

    deinit { chunk.deallocate() }

    /// Closes the socket (again is harmless).
    public func close() {
        try? socket.close()
    }

    /// Whether input (or the peer's end) is there within `milliseconds`; nil when the socket cannot be polled.
    public func isReadable(within milliseconds: Int32) -> Bool? {
        try? Poll.isReadable(socket.rawValue, timeoutMilliseconds: milliseconds)
    }

    /// Reads what arrived into the decoder and wipes the chunk it went through; false when the
    /// peer closed or the read failed.
    public func receive() -> Bool {
        let count: Int
        do {
            count = try socket.receive(into: chunk)
        } catch {
            return false
        }
        guard count > 0 else { return false }
        let arrived = UnsafeMutableRawBufferPointer(rebasing: chunk[0..<count])
        decoder.append(UnsafeRawBufferPointer(arrived))
        wipe(arrived)
        return true
    }

    /// The next frame, waiting as long as it takes (a link to a process of our own, whose answer
    /// may follow a scan); nil at the peer's end of input or a failed read.
    /// - Throws: `FrameError` when a frame's header is refused.
    public func nextFrame() throws(FrameError<Format>) -> Frame<Format>? {
        while true {
            if let frame = try decoder.next() { return frame }
            guard receive() else { return nil }
        }
    }

    /// The next frame of a peer that sends requests: one already decoded, else what arrives
    /// while `running` holds. Once a frame has begun, it must be whole within `requestDeadline`
    /// seconds; with nothing begun, the connection may idle for `idleSeconds`. Both clocks start
    /// at the call (after the reply to the last request was sent).
    func awaitFrame(requestDeadline: Double, idleSeconds: Double, while running: () -> Bool) -> Arrival {
        let idleSince = MonotonicClock.seconds()
        var frameStarted = idleSince
        while running() {
            do {
                if let frame = try decoder.next() { return .frame(frame) }
            } catch {
                return .refused(error)
            }
            let now = MonotonicClock.seconds()
            let deadline = decoder.hasPartialFrame ? frameStarted + requestDeadline : idleSince + idleSeconds
            guard now < deadline else { return decoder.hasPartialFrame ? .late : .ended }
            guard let readable = isReadable(within: Int32(max(1, min(500, (deadline - now) * 1000)))) else { return .ended }
            guard readable else { continue }
            let partial = decoder.hasPartialFrame
            guard receive() else { return .ended }
            if !partial { frameStarted = MonotonicClock.seconds() }
        }
        return .ended
    }

    /// The next request of a peer, as ``awaitFrame(requestDeadline:idleSeconds:while:)`` waits for
    /// it; nil when the connection is to end. A frame refused from its header, or begun and not
    /// finished in time, is answered with one refusal (sent within `replySeconds`) first.
    public func nextRequest(requestDeadline: Double, idleSeconds: Double, replySeconds: Double,
                            while running: () -> Bool) -> Frame<Format>? {
        switch awaitFrame(requestDeadline: requestDeadline, idleSeconds: idleSeconds, while: running) {
        case .frame(let frame): return frame
        case .refused(let error): refuse(error.vaultError, within: replySeconds)
        case .late: refuse(.usage("refused: a request must arrive whole within \(requestDeadline) s"), within: replySeconds)
        case .ended: break
        }
        return nil
    }

    /// Sends `frame` within `seconds` and a second more per MiB, in slices of 256 KiB, each under
    /// what is left of that time; false when the peer is gone or too slow to take it. The head's
    /// bytes are wiped; the tail goes out straight from the frame's guarded memory.
    @discardableResult
    public func send(_ frame: Frame<Format>, within seconds: Double) -> Bool {
        var head = frame.head()
        defer { wipe(&head) }
        let deadline = MonotonicClock.seconds() + seconds + Double(frame.length >> 20)
        func sendSliced(_ all: UnsafeRawBufferPointer) -> Bool {
            var offset = 0
            while offset < all.count {
                let left = deadline - MonotonicClock.seconds()
                guard left > 0, (try? socket.setSendTimeout(seconds: min(left, seconds))) != nil else { return false }
                let end = min(all.count, offset + (256 << 10))
                do {
                    try socket.sendAll(UnsafeRawBufferPointer(rebasing: all[offset..<end]))
                } catch {
                    return false
                }
                offset = end
            }
            return true
        }
        return head.withUnsafeBytes { sendSliced($0) } && frame.withTail { sendSliced($0) }
    }

    /// Sends one refusal (within `seconds`) and closes: the peer's unread input is dropped, never drained.
    public func refuse(_ error: VaultError, within seconds: Double) {
        send(Format.refusal(error), within: seconds)
        close()
    }
}
