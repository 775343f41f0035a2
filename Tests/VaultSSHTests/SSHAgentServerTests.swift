import Foundation
import Testing
import VaultKit
import VaultSystem
@testable import VaultSSH

/// The accept loop (VaultWire's `SocketServer` with `SSHAgentConnection`) over a real socket:
/// replies framed as OpenSSH's, a message past 256 KiB closes its connection, a peer that stops
/// mid-message does not hold another and is closed at its deadline, a peer over its budget gets
/// one `SSH_AGENT_FAILURE`, and a removed socket ends the server.
@Suite struct SSHAgentServerTests {
    final class Running: @unchecked Sendable {
        let folder: String
        let path: String
        let server: SSHAgentServer
        let done = DispatchSemaphore(value: 0)

        init(messageDeadline: Double = AgentLimit.messageSeconds) throws {
            folder = try ProcessReplacement.makeTemporaryFolder(prefix: NSTemporaryDirectory() + "/ssh-agent-test-")
            path = folder + "/agent.sock"
            let listener = try UnixSocket.listen(path: path)
            server = SSHAgentServer(listening: listener, handler: AgentHandler(store: AgentKeyStore(), confirm: { _ in false }),
                                   messageDeadline: messageDeadline)
            Thread { [self] in
                server.run()
                done.signal()
            }.start()
        }

        func stop() {
            server.stop()
            done.wait()
            try? FileSystem.remove(path)
            try? FileSystem.removeFolder(folder)
        }
    }

    func frame(_ payload: [UInt8]) -> [UInt8] {
        var w = SSHWriter()
        w.string(payload)
        return w.bytes
    }

    @Test func repliesAreFramedAndAnOversizedMessageClosesItsConnection() throws {
        let agent = try Running()
        defer { agent.stop() }
        let stalled = try UnixSocket.connect(path: agent.path)
        try stalled.sendAll([0, 0, 0, 10, AgentMessage.requestIdentities]) // never finished
        let c = try UnixSocket.connect(path: agent.path)
        try c.setReceiveTimeout(seconds: 10)
        try c.sendAll(frame([AgentMessage.requestIdentities]))
        #expect(try c.receiveExactly(9) == [0, 0, 0, 5, AgentMessage.identitiesAnswer, 0, 0, 0, 0], "answered beside a stalled peer")
        try c.sendAll(frame([99]))
        #expect(try c.receiveExactly(5) == [0, 0, 0, 1, AgentMessage.failure], "an unknown message fails")
        let big = try UnixSocket.connect(path: agent.path)
        try big.setReceiveTimeout(seconds: 10)
        try big.sendAll([0, 4, 0, 1]) // 256 KiB + 1
        #expect(try big.receiveExactly(1).isEmpty, "closed without a reply")
    }

    @Test func aPeerThatStallsMidMessageIsClosedAtItsDeadlineAndPipelinedMessagesAreAnswered() throws {
        let agent = try Running(messageDeadline: 0.2)
        defer { agent.stop() }
        let stalled = try UnixSocket.connect(path: agent.path)
        try stalled.setReceiveTimeout(seconds: 10)
        try stalled.sendAll([0, 0, 0, 10, AgentMessage.requestIdentities])
        #expect(try stalled.receiveExactly(1).isEmpty, "closed unanswered once its deadline passed")
        let idle = try UnixSocket.connect(path: agent.path)
        try idle.setReceiveTimeout(seconds: 10)
        Thread.sleep(forTimeInterval: 0.5) // idle past the message deadline: nothing begun, still open
        try idle.sendAll(frame([AgentMessage.requestIdentities]) + frame([99]) + frame([AgentMessage.requestIdentities]))
        #expect(try idle.receiveExactly(9 + 5 + 9) == [0, 0, 0, 5, AgentMessage.identitiesAnswer, 0, 0, 0, 0,
                                                       0, 0, 0, 1, AgentMessage.failure,
                                                       0, 0, 0, 5, AgentMessage.identitiesAnswer, 0, 0, 0, 0])
    }

    @Test func aPeerOverItsConnectionBudgetGetsOneFailure() throws {
        let agent = try Running()
        defer { agent.stop() }
        final class Held { var socket: UnixSocket; init(_ s: consuming UnixSocket) { socket = s } }
        var held: [Held] = []
        for _ in 0..<AgentLimit.connectionsPerProcess { held.append(Held(try UnixSocket.connect(path: agent.path))) }
        let over = try UnixSocket.connect(path: agent.path)
        try over.setReceiveTimeout(seconds: 10)
        #expect(try over.receiveExactly(6) == [0, 0, 0, 1, AgentMessage.failure], "one failure, then closed")
        let first = held[0]
        try first.socket.setReceiveTimeout(seconds: 10)
        try first.socket.sendAll(frame([AgentMessage.requestIdentities]))
        #expect(try first.socket.receiveExactly(9) == [0, 0, 0, 5, AgentMessage.identitiesAnswer, 0, 0, 0, 0], "the admitted ones are served")
    }

    @Test func aRemovedSocketEndsTheServer() throws {
        let agent = try Running()
        try FileSystem.remove(agent.path)
        // The accept loop returns once it sees the path no longer names its socket (checked every 0.5 s).
        let ended = agent.done.wait(timeout: .now() + 60) == .success
        #expect(ended, "the server ended when its socket file was removed")
        if !ended { agent.stop() } else { try? FileSystem.removeFolder(agent.folder) }
    }
}
