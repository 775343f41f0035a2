import Foundation
import Testing
import VaultAgent
import VaultKit
import VaultSystem

/// A private folder of one test under /tmp (short: a socket path fits `sun_path`), removed at the end.
final class SocketFolder {
    let path = "/tmp/vas-" + hexString(randomBytes(4))
    var socketPath: String { path + "/vault/agent.sock" }
    init() throws { try PrivateFiles.makeFolder(path + "/vault") }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// The first reply frame on `connection`, waiting at most `seconds`; nil when none came.
func firstReply(on connection: SocketBox, within seconds: Double) -> AgentReply? {
    let decoder = AgentFrameDecoder(limit: AgentLimits.replyFrame)
    var chunk = [UInt8](repeating: 0, count: 65536)
    let end = MonotonicClock.seconds() + seconds
    while MonotonicClock.seconds() < end {
        if let frame = try? decoder.next() { return try? AgentCodec.reply(frame) }
        guard (try? Poll.isReadable(connection.socket.rawValue, timeoutMilliseconds: 100)) == true else { continue }
        guard let n = try? chunk.withUnsafeMutableBytes({ (b) throws(SystemError) -> Int in try connection.socket.receive(into: b) }),
              n > 0 else { return nil }
        decoder.append(Array(chunk[0..<n]))
    }
    return nil
}

/// Waits at most `seconds` for `condition`; whether it held.
func eventually(_ seconds: Double, _ condition: () -> Bool) -> Bool {
    let end = MonotonicClock.seconds() + seconds
    while !condition() {
        if MonotonicClock.seconds() >= end { return false }
        usleep(5_000)
    }
    return true
}

/// One agent per socket (issue 29): a server whose socket goes ends its sessions and returns; only
/// the holder of the socket's lock binds or removes it. And one process gets only its share of the
/// connections (issue 28). Every deadline here is generous (10 s): the latencies are printed, not
/// asserted, so a loaded machine cannot fail them.
@Suite struct SocketOwnershipTests {
    @Test func aServerWhoseSocketIsRemovedEndsItsSessionsAndReturns() throws {
        let s = try RunningServer()
        let v = try TestVault()
        try s.client().openSession(for: v.vault, idleSeconds: 600, hardLimitSeconds: 600)
        #expect(s.server.handler.sessionCount == 1)
        let removed = MonotonicClock.seconds()
        try FileSystem.remove(s.socketPath)
        #expect(s.outcome.wait(10) != nil, "the server went on without its socket")
        #expect(s.outcome.ending == .socketLost)
        #expect(s.server.handler.sessionCount == 0, "the session (and its key) ended with the socket")
        print("aServerWhoseSocketIsRemovedEndsItsSessionsAndReturns: returned \(Int((s.outcome.endedAt - removed) * 1000)) ms after the removal")
    }

    @Test func aServerWhoseSocketIsReplacedReturnsAndLeavesTheReplacement() throws {
        let s = try RunningServer()
        let v = try TestVault()
        try s.client().openSession(for: v.vault, idleSeconds: 600, hardLimitSeconds: 600)
        // Another server's socket, renamed over the agent's (what a second agent that unlinked
        // it and bound its own would leave).
        let other = s.folder + "/vault/other.sock"
        let replacement = try UnixSocket.listen(path: other)
        let replaced = MonotonicClock.seconds()
        try FileSystem.rename(other, to: s.socketPath)
        let inode = try FileStatus.of(s.socketPath).inode
        #expect(s.outcome.wait(10) != nil, "the server went on with another's socket at its path")
        #expect(s.outcome.ending == .socketLost)
        #expect(s.server.handler.sessionCount == 0)
        // It removed nothing on its way out: the socket at its path is another's.
        #expect((try? FileStatus.of(s.socketPath).inode) == inode)
        #expect((try? UnixSocket.connect(path: s.socketPath)) != nil)
        print("aServerWhoseSocketIsReplacedReturnsAndLeavesTheReplacement: returned \(Int((s.outcome.endedAt - replaced) * 1000)) ms after the rename")
        _ = replacement
    }

    /// The bind-to-listen window of another agent: its lock held and a socket file there that
    /// refuses. Before the lock, a starting agent took such a socket for stale, removed it and
    /// bound its own, and the first agent served on a socket no one could reach.
    @Test func aStartingServerRemovesNoSocketWhileAnotherHoldsTheLock() throws {
        let folder = try SocketFolder()
        let path = folder.socketPath
        let lock = try FileLock(path: AgentPaths.lockPath(of: path))
        #expect(try lock.tryExclusive())
        var refusing = try UnixSocket.listen(path: path)
        try refusing.close()
        let inode = try FileStatus.of(path).inode
        #expect(throws: SystemError.self) { _ = try UnixSocket.connect(path: path) }
        let server = AgentServer(socketPath: path)
        let outcome = server.start()
        usleep(1_000_000)
        #expect(outcome.result == nil, "it waits for the lock's holder")
        #expect((try? FileStatus.of(path).inode) == inode, "the holder's socket was left alone")
        // The holder ends: the server takes the lock, removes the socket nobody answers on, serves.
        // (Its inode number may come back: the closed socket pinned nothing once unlinked.)
        lock.unlock()
        #expect(eventually(10) { (try? UnixSocket.connect(path: path)) != nil })
        server.stop()
        #expect(outcome.wait(10).map { (try? $0.get()) == .stopped } == true)
        #expect(!FileSystem.exists(path), "a stopped server removes its own socket")
    }

    @Test func aStartingServerGivesUpOnAHolderThatNeitherAnswersNorEnds() throws {
        let folder = try SocketFolder()
        let lock = try FileLock(path: AgentPaths.lockPath(of: folder.socketPath))
        #expect(try lock.tryExclusive())
        try lock.record("4242\n")
        do {
            try AgentServer(socketPath: folder.socketPath, startWait: 0.3).run()
            Issue.record("it served beside the lock's holder")
        } catch let e as VaultError {
            #expect(e.message.contains("(pid 4242) holds") && e.hint == "stop it with 'kill 4242', then unlock again", "\(e.message)")
        }
        #expect(!FileSystem.exists(folder.socketPath))
    }

    @Test func aSecondServerOnALiveSocketLeavesItAlone() throws {
        let s = try RunningServer()
        let inode = try FileStatus.of(s.socketPath).inode
        #expect(try AgentServer(socketPath: s.socketPath).run() == .anotherAgentServes)
        #expect((try? FileStatus.of(s.socketPath).inode) == inode)
        guard case .status = try s.client().send(.status) else { Issue.record("the first server stopped answering"); return }
        #expect(s.outcome.result == nil)
    }

    /// Four servers started at once on one socket, ten times: one binds, three leave it to
    /// that one, and nothing else is left running.
    @Test func serversStartedTogetherBindOnce() throws {
        for round in 0..<10 {
            let folder = try SocketFolder()
            let servers = (0..<4).map { _ in AgentServer(socketPath: folder.socketPath) }
            let outcomes = servers.map { $0.start() }
            _ = try UnixSocket.connect(path: folder.socketPath, retryingFor: 10)
            #expect(eventually(10) { outcomes.filter { $0.result != nil }.count == 3 }, "round \(round)")
            #expect(outcomes.compactMap(\.ending) == Array(repeating: .anotherAgentServes, count: 3), "round \(round)")
            let serving = try #require(outcomes.firstIndex { $0.result == nil })
            guard case .status = try #require(AgentClient.connect(socketPath: folder.socketPath)).send(.status) else {
                Issue.record("round \(round): nobody answers"); continue
            }
            servers[serving].stop()
            #expect(outcomes[serving].wait(10).map { (try? $0.get()) == .stopped } == true)
        }
    }

    /// Issue 28: one process holding connections gets 16 of them; the rest are refused at once,
    /// and one it closes makes room for the next.
    @Test func oneProcessGetsItsShareOfTheConnections() throws {
        let s = try RunningServer()
        let me = ProcessIdentity.pid
        #expect(eventually(10) { s.server.connectionCount == 0 })
        var held: [SocketBox] = []
        var admitted = 0
        var refusals: [String] = []
        for _ in 0..<24 {
            let c = try s.raw()
            // A refused connection may be closed before the request is written: only the reply counts.
            _ = c.send(frameBytes(.status))
            switch firstReply(on: c, within: 10) {
            case .status?: admitted += 1
            case .failed(let e)?: refusals.append(e.message)
            default: Issue.record("no reply")
            }
            held.append(c)
        }
        #expect(admitted == AgentLimits.connectionsPerProcess)
        #expect(refusals.count == 24 - AgentLimits.connectionsPerProcess)
        #expect(refusals.allSatisfy { $0 == "refused: one process holds at most 16 connections to the agent" }, "\(refusals.first ?? "")")
        #expect(eventually(10) { s.server.connectionCount(of: me) == AgentLimits.connectionsPerProcess })
        held.removeFirst()
        #expect(eventually(10) { s.server.connectionCount(of: me) == AgentLimits.connectionsPerProcess - 1 })
        let next = try s.raw()
        #expect(next.send(frameBytes(.status)))
        guard case .status? = firstReply(on: next, within: 10) else { Issue.record("a closed connection made no room"); return }
    }
}
