import Foundation
import Testing
import VaultKit
import VaultSystem
@testable import VaultSSH

/// The accept loop over a real socket: replies framed as OpenSSH's, a message past 256 KiB closes
/// its connection, and a peer that stops mid-message does not hold another.
@Suite struct SSHAgentServerTests {
    final class Running: @unchecked Sendable {
        let folder: String
        let path: String
        let server: SSHAgentServer
        let done = DispatchSemaphore(value: 0)

        init() throws {
            folder = try ProcessReplacement.makeTemporaryFolder(prefix: NSTemporaryDirectory() + "/ssh-agent-test-")
            path = folder + "/agent.sock"
            let listener = try UnixSocket.listen(path: path)
            server = SSHAgentServer(listening: listener, handler: AgentHandler(store: AgentKeyStore(), confirm: { _ in false }))
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
}
