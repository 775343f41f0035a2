import Foundation
import Testing
import VaultAgent
import VaultKit
import VaultSystem
import VaultWire

/// VaultWire's one accept loop, which the agent and vault-authd share, driven with raw sockets.
@Suite struct FrameServerTests {
    /// A server of agent frames on a fresh path, each connection echoing the JSON of its requests.
    final class Echo: @unchecked Sendable {
        let root = TempRoot()
        let path: String
        let server: FrameServer<AgentWire>
        private let lock = NSLock()
        private var ending: ServerEnding?
        private let done = DispatchSemaphore(value: 0)

        init(admit: @escaping @Sendable (PeerCredentials) -> Admission = { _ in .admit(release: {}) }) throws {
            try FileManager.default.createDirectory(atPath: root.path, withIntermediateDirectories: true)
            path = root.path + "/s.sock"
            server = FrameServer(socketPath: path, frameLimit: 4096, replyDeadline: 2, threadName: "test connection")
            let listener = try server.bind()
            let server = server
            // The listener moves to the serving thread inside a box: it is not copyable.
            let box = ListenerBox(listener)
            Thread { [self] in
                let e = server.serve(box.take(), checkEvery: 0.05, admit: admit) { connection, _ in
                    while let frame = connection.nextRequest(requestDeadline: 5, idleSeconds: 30, replySeconds: 2, while: { !server.isStopped }) {
                        guard connection.send(Frame<AgentWire>(json: frame.json), within: 2) else { return }
                    }
                }
                lock.withLock { ending = e }
                done.signal()
            }.start()
        }

        /// How `serve` ended, waiting for it (a test failure rather than a hang after 30 s).
        func ended() -> ServerEnding? {
            guard done.wait(timeout: .now() + 30) == .success else { return nil }
            return lock.withLock { ending }
        }

        deinit { server.stop() }
    }

    final class ListenerBox: @unchecked Sendable {
        private var listener: FrameServer<AgentWire>.Listener?
        init(_ l: consuming FrameServer<AgentWire>.Listener) { listener = consume l }
        func take() -> FrameServer<AgentWire>.Listener { listener.take()! }
    }

    /// A client connection, reading frames until the server closes.
    static func connect(_ path: String) throws -> FramedConnection<AgentWire> {
        FramedConnection(try UnixSocket.connect(path: path), limit: 1 << 20)
    }

    @Test func aPeerIsServedWhileAnotherSitsSilent() throws {
        let echo = try Echo()
        let silent = try Self.connect(echo.path)
        let talker = try Self.connect(echo.path)
        #expect(talker.send(Frame<AgentWire>(json: Array("{\"a\":1}".utf8)), within: 2))
        let answer = try talker.nextFrame()
        #expect(answer?.json == Array("{\"a\":1}".utf8))
        silent.close()
        talker.close()
        echo.server.stop()
        #expect(echo.ended() == .stopped)
        #expect(!FileSystem.exists(echo.path), "a stopped server removes its own socket")
    }

    @Test func aRefusedPeerGetsOneFailedFrameThenTheEnd() throws {
        let echo = try Echo(admit: { _ in .refuse(.failure("refused: not you")) })
        let peer = try Self.connect(echo.path)
        let frame = try #require(try peer.nextFrame())
        let reply = try AgentCodec.reply(frame)
        guard case .failed(let error) = reply else { Issue.record("expected a failed reply, got \(reply)"); return }
        #expect(error.message == "refused: not you")
        #expect(try peer.nextFrame() == nil, "the server closes after the refusal")
    }

    @Test func theReleaseRunsOnceTheConnectionEnds() throws {
        let released = DispatchSemaphore(value: 0)
        let echo = try Echo(admit: { _ in .admit(release: { released.signal() }) })
        let peer = try Self.connect(echo.path)
        #expect(released.wait(timeout: .now() + 0.2) == .timedOut, "released while the peer is connected")
        peer.close()
        #expect(released.wait(timeout: .now() + 30) == .success)
    }

    @Test func aSecondServerOnALivePathIsToldAnotherAnswers() throws {
        let echo = try Echo()
        let second = FrameServer<AgentWire>(socketPath: echo.path, frameLimit: 4096, replyDeadline: 2, threadName: "second")
        #expect(throws: BindFailure.self) { _ = try second.bind() }
        do {
            _ = try second.bind()
        } catch .anotherServerAnswers {
        } catch {
            Issue.record("expected anotherServerAnswers, got \(error)")
        }
        #expect(echo.server.isOwn(), "the live server's socket is left alone")
    }

    @Test func aStaleSocketFileIsReplaced() throws {
        let root = TempRoot()
        try FileManager.default.createDirectory(atPath: root.path, withIntermediateDirectories: true)
        let path = root.path + "/s.sock"
        do {
            var dead = try UnixSocket.listen(path: path)
            try dead.close()
        }
        #expect(FileSystem.exists(path), "a closed listener leaves its file behind")
        let server = FrameServer<AgentWire>(socketPath: path, frameLimit: 4096, replyDeadline: 2, threadName: "t")
        let listener = try server.bind()
        #expect(server.isOwn())
        _ = consume listener
    }

    @Test func aSocketPutInItsPlaceEndsTheServerAndIsLeftAlone() throws {
        let echo = try Echo()
        try FileSystem.remove(echo.path)
        var usurper = try UnixSocket.listen(path: echo.path)
        defer { try? usurper.close() }
        #expect(echo.ended() == .socketLost)
        #expect(FileSystem.exists(echo.path), "the other server's socket file is not removed")
        #expect(FrameServer<AgentWire>.someoneAnswers(echo.path))
    }
}
