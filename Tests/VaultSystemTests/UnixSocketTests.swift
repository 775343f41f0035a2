import Foundation
import Testing
import VaultSystem

@Suite struct UnixSocketTests {
    @Test func listenConnectAndPeerCredentials() throws {
        let scratch = Scratch()
        let path = scratch.file("s.sock")
        let listener = try UnixSocket.listen(path: path)
        #expect(scratch.mode(path) == 0o600)
        let client = try UnixSocket.connect(path: path)
        let server = try listener.accept()
        let peer = try server.peerCredentials()
        #expect(peer.uid == ProcessIdentity.uid)
        #expect(peer.pid == ProcessIdentity.pid)
        let clientSide = try client.peerCredentials()
        #expect(clientSide.pid == ProcessIdentity.pid)
        try client.sendAll(Array("hello".utf8))
        try client.shutdown(.writing)
        let head = try server.receiveExactly(3), tail = try server.receiveAll(limit: 100)
        #expect(head == Array("hel".utf8))
        #expect(tail == Array("lo".utf8))
    }

    @Test func aLiveListenerIsNotReplacedButAStaleOneIs() throws {
        let scratch = Scratch()
        let path = scratch.file("s.sock")
        do {
            let first = try UnixSocket.listen(path: path)
            let error = systemError { _ = try UnixSocket.listen(path: path) }
            #expect(error?.call == "bind" && error?.path == path)
            _ = first
        }
        // The first listener is closed; its file remains, and nothing answers there.
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(systemError { _ = try UnixSocket.connect(path: path) }?.isConnectionRefused == true)
        let second = try UnixSocket.listen(path: path)
        _ = try UnixSocket.connect(path: path)
        _ = try second.accept()
    }

    @Test func aSilentPeerTimesOut() throws {
        let pair = try UnixSocket.pair()
        try pair.first.setReceiveTimeout(seconds: 0.2)
        let start = MonotonicClock.seconds()
        let error = systemError { _ = try pair.first.receiveExactly(1) }
        #expect(error?.isTimedOut == true)
        #expect(MonotonicClock.seconds() - start >= 0.15)
    }

    @Test func sendingToAClosedPeerIsBrokenPipeNotASignal() throws {
        var pair = try UnixSocket.pair()
        try pair.second.close()
        let error = systemError { try pair.first.sendAll(Array(repeating: 1, count: 100_000)) }
        #expect(error?.isBrokenPipe == true || error?.isConnectionReset == true)
    }

    @Test func socketPathLengthIsChecked() {
        let long = "/tmp/" + String(repeating: "x", count: maximumSocketPathLength)
        let error = systemError { _ = try UnixSocket.connect(path: long) }
        #expect(error?.code == Errno.nameTooLong)
        #expect(systemError { _ = try UnixSocket.connect(path: "/tmp/no-such-vault-socket") }?.isNotFound == true)
    }

    @Test func pollReportsReadiness() throws {
        let pair = try UnixSocket.pair()
        let a = pair.first.rawValue, b = pair.second.rawValue
        #expect(try !Poll.isReadable(b, timeoutMilliseconds: 0))
        try pair.first.sendAll([1])
        let events = try Poll.wait([PollRequest(fd: a, events: .readable),
                                    PollRequest(fd: b, events: [.readable, .writable])],
                                   timeoutMilliseconds: 1000)
        #expect(events[0].isEmpty)
        #expect(events[1].contains(.readable) && events[1].contains(.writable))
    }

    @Test func unreadOutputCountsWhatThePeerHasNotReadYet() throws {
        let pair = try UnixSocket.pair()
        #expect(try pair.first.unreadOutput() == 0)
        // A small frame, as a stopped peer would leave it: far below the buffer's size, yet seen.
        try pair.first.sendAll(Array(repeating: 7, count: 60))
        #expect(try pair.first.unreadOutput() > 0)
        _ = try pair.second.receiveExactly(30)
        #expect(try pair.first.unreadOutput() > 0, "a message half read is still unread")
        _ = try pair.second.receiveExactly(30)
        #expect(try pair.first.unreadOutput() == 0)
    }
}
