import Foundation
import Testing
import VaultAgent
import VaultKit
import VaultSystem

/// How a server's `run` ended, set by its thread.
final class RunOutcome: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Result<AgentServer.Ending, any Error>?
    private var at: Double = 0
    func set(_ r: Result<AgentServer.Ending, any Error>) { lock.withLock { value = r; at = MonotonicClock.seconds() } }
    var result: Result<AgentServer.Ending, any Error>? { lock.withLock { value } }
    var ending: AgentServer.Ending? { if case .success(let e)? = result { e } else { nil } }
    /// When `run` returned (monotonic seconds), 0 while it runs.
    var endedAt: Double { lock.withLock { at } }

    /// Waits at most `seconds` for `run` to return.
    func wait(_ seconds: Double) -> Result<AgentServer.Ending, any Error>? {
        let end = MonotonicClock.seconds() + seconds
        while result == nil && MonotonicClock.seconds() < end { usleep(2_000) }
        return result
    }
}

extension AgentServer {
    /// Runs on a thread of its own; the outcome says how it ended.
    func start() -> RunOutcome {
        let outcome = RunOutcome()
        Thread { [self] in outcome.set(Result { try run() }) }.start()
        return outcome
    }
}

/// A real agent server on a real socket, on a thread of the test process.
final class RunningServer {
    let folder: String
    let server: AgentServer
    let outcome: RunOutcome
    var socketPath: String { server.socketPath }
    var environment: [String: String] { ["XDG_RUNTIME_DIR": folder] }

    init(requestDeadline: Double = AgentLimits.requestSeconds, replyDeadline: Double = AgentLimits.replySeconds) throws {
        folder = "/tmp/vat-" + hexString(randomBytes(4))
        try PrivateFiles.makeFolder(folder)
        let server = AgentServer(socketPath: folder + "/vault/agent.sock", requestDeadline: requestDeadline, replyDeadline: replyDeadline)
        self.server = server
        outcome = server.start()
        let socketPath = server.socketPath
        _ = try UnixSocket.connect(path: socketPath, retryingFor: 5)
    }

    deinit {
        server.stop()
        try? FileManager.default.removeItem(atPath: folder)
    }

    func client() throws -> AgentClient { try #require(AgentClient.connect(socketPath: socketPath)) }

    /// A raw connection for misbehaving on purpose.
    func raw() throws -> SocketBox { SocketBox(try UnixSocket.connect(path: socketPath)) }
}

final class SocketBox: @unchecked Sendable {
    var socket: UnixSocket
    init(_ s: consuming UnixSocket) { socket = s }

    func send(_ bytes: [UInt8]) -> Bool { (try? socket.sendAll(bytes)) != nil }

    /// Everything until the peer closes (or resets), waiting at most `seconds`; nil on timeout.
    func readToEnd(within seconds: Double) -> [UInt8]? {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        let end = MonotonicClock.seconds() + seconds
        while true {
            let left = end - MonotonicClock.seconds()
            guard left > 0 else { return nil }
            guard (try? Poll.isReadable(socket.rawValue, timeoutMilliseconds: Int32(left * 1000) + 1)) == true else { continue }
            guard let n = try? chunk.withUnsafeMutableBytes({ (b) throws(SystemError) -> Int in try socket.receive(into: b) }), n > 0 else {
                return out
            }
            out += chunk[0..<n]
        }
    }
}

final class StopFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}

/// The replies in a byte stream from the agent.
func replies(_ bytes: [UInt8]) -> [AgentReply] {
    let d = AgentFrameDecoder(limit: AgentLimits.replyFrame)
    d.append(bytes)
    var out: [AgentReply] = []
    while let f = try? d.next(), let r = try? AgentCodec.reply(f) { out.append(r) }
    return out
}

func frameBytes(_ r: AgentRequest, tail: [UInt8] = []) -> [UInt8] {
    (try? AgentCodec.frame(r, tail: tail).encoded()) ?? []
}

/// A small seeded generator, so a failing fuzz run can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite(.serialized) struct ServerTests {
    @Test func sessionAccessServesEveryOperationThroughTheSocket() throws {
        let s = try RunningServer()
        let v = try TestVault()
        try s.client().openSession(for: v.vault, idleSeconds: 60, hardLimitSeconds: 600)
        let access = try #require(try SessionAccess.open(v.location, environment: s.environment))
        #expect(try access.overview(named: "db").item.password == nil)
        #expect(try access.release(named: "db", fields: .fields([.password]), command: "get").password == "db-secret-9")
        #expect(try access.allItems().count == 2)
        #expect(try access.contains("web"))
        try access.add(Item(name: "x", password: "p"), replace: false)
        // An item over 1 MiB is edited through the session: only the change travels.
        try v.vault.add(Item(name: "big", notes: String(repeating: "n", count: 3 << 20)))
        var change = ItemChange()
        change.username = "edited"
        try access.update("big", change)
        #expect(try v.vault.item(named: "big").username == "edited")
        // An import larger than one frame still lands in one transaction.
        let many = (0..<12).map { Item(name: "bulk\($0)", notes: String(repeating: "b", count: 1 << 20)) }
        #expect(try access.add(contentsOf: many, replace: false) == 12)
        #expect(throws: VaultError.alreadyExists("bulk0")) {
            _ = try access.add(contentsOf: [Item(name: "fresh")] + many, replace: false)
        }
        #expect(try !v.vault.contains("fresh"))
        try access.remove("x")
        let records = try access.auditRecords(limit: nil)
        #expect(records.count == 1)
        #expect(try records.first?.get().pid == getpid())
        // A vault without a session, and an ended one reported once.
        let other = try TestVault()
        #expect(try SessionAccess.open(other.location, environment: s.environment) == nil)
        #expect(try s.client().send(.lock(vault: v.path)) == .locked(count: 1))
        // Locked from the terminal session that opened it: no note about its own lock.
        #expect(try SessionAccess.open(v.location, environment: s.environment) == nil)
    }

    /// Two peers trickle a big request, two ask for large listings and never read, one connects
    /// and stays silent: a sixth client is still answered at once.
    @Test func slowAndSilentPeersDoNotStallOthers() throws {
        let s = try RunningServer()
        let v = try TestVault()
        _ = try v.vault.add(contentsOf: (0..<400).map { Item(name: "item\($0)", username: String(repeating: "z", count: 8000)) }, replace: false)
        try s.client().openSession(for: v.vault, idleSeconds: 60, hardLimitSeconds: 600)

        let trickling = try (0..<2).map { _ in try s.raw() }
        // A 3 MiB frame announced, its JSON to follow a byte at a time.
        for t in trickling { #expect(t.send([0x00, 0x30, 0x00, 0x00, AgentFrame.version, 0x00, 0x2f, 0xff, 0xfb])) }
        let hoarders = try (0..<2).map { _ in try s.raw() }
        for h in hoarders {
            for _ in 0..<4 { _ = h.send(frameBytes(.list(vault: v.path))) }   // ~3 MB each, never read
        }
        let silent = try s.raw()
        let stop = StopFlag()
        let trickler = Thread {
            while !stop.isSet {
                for t in trickling { _ = t.send([0x20]) }
                usleep(100_000)
            }
        }
        trickler.start()
        defer { stop.set() }
        usleep(500_000)   // the hoarders' threads are now stuck sending

        let start = MonotonicClock.seconds()
        let c = try s.client()
        #expect(try c.send(.probe(vault: v.path)) == .sessionOpen)
        guard let item = releasedItem(try c.exchange(.release(vault: v.path, name: "db", fields: .fields([.password]), command: "get"))) else {
            Issue.record("no release"); return
        }
        #expect(item.password == "db-secret-9")
        guard case .status = try c.send(.status) else { Issue.record("no status"); return }
        let elapsed = MonotonicClock.seconds() - start
        #expect(elapsed < 1, "the fifth client waited \(elapsed) s")
        print("slowAndSilentPeersDoNotStallOthers: fifth client answered in \(Int(elapsed * 1000)) ms")
        #expect(s.server.connectionCount == 6, "the slow peers are all still connected")
        _ = silent
    }

    @Test func aPeerSendingABadFrameIsClosedPromptly() throws {
        let s = try RunningServer()
        let wrongType = AgentFrame(json: Array(#"{"add":{"vault":"/v/vault.db","item":"a string","replace":false}}"#.utf8)).encoded()
        let badDuration = try AgentFrame(json: Array(#"{"unlock":{"root":"/r","name":"default","generation":1e19,"idleSeconds":1,"hardLimitSeconds":1}}"#.utf8),
                                     tail: [UInt8](repeating: 1, count: 32)).encoded()
        for bad: [UInt8] in [[0xff, 0xff, 0xff, 0xff], [0, 0, 0, 9, 1, 0, 0, 0, 0], Array("GET / HTTP/1.1\r\n\r\n".utf8), wrongType, badDuration] {
            let c = try s.raw()
            let start = MonotonicClock.seconds()
            _ = c.send(bad)
            // It keeps writing; the agent does not read on.
            let writer = Thread { for _ in 0..<200 { if !c.send([UInt8](repeating: 0x41, count: 4096)) { break } } }
            writer.start()
            let reply = try #require(c.readToEnd(within: 2))
            let elapsed = MonotonicClock.seconds() - start
            #expect(elapsed < 1, "closed after \(elapsed) s")
            guard case .failed(let e)? = replies(reply).first else { Issue.record("no refusal"); continue }
            #expect(e.exitCode == 2 && (e.message.hasPrefix("refused") || e.message.hasPrefix("malformed request")), "\(e.message)")
        }
    }

    @Test func anIncompleteRequestIsCutOffAtItsDeadline() throws {
        let s = try RunningServer(requestDeadline: 0.5)
        let c = try s.raw()
        let start = MonotonicClock.seconds()
        #expect(c.send(Array(frameBytes(.status).dropLast(3))))
        let reply = try #require(c.readToEnd(within: 3))
        let elapsed = MonotonicClock.seconds() - start
        #expect(elapsed >= 0.45 && elapsed < 1.5, "\(elapsed)")
        guard case .failed(let e)? = replies(reply).first else { Issue.record("no refusal"); return }
        #expect(e.message.contains("whole within"))
    }

    @Test func aPeerThatDoesNotTakeItsReplyIsCutOff() throws {
        let s = try RunningServer(replyDeadline: 0.3)
        let v = try TestVault()
        _ = try v.vault.add(contentsOf: (0..<300).map { Item(name: "item\($0)", username: String(repeating: "z", count: 8000)) }, replace: false)
        try s.client().openSession(for: v.vault, idleSeconds: 60, hardLimitSeconds: 600)
        let hoarder = try s.raw()
        #expect(hoarder.send(frameBytes(.list(vault: v.path))))
        let start = MonotonicClock.seconds()
        usleep(200_000)
        #expect(s.server.connectionCount == 1)
        while s.server.connectionCount > 0 && MonotonicClock.seconds() - start < 5 { usleep(20_000) }
        let elapsed = MonotonicClock.seconds() - start
        #expect(s.server.connectionCount == 0)
        #expect(elapsed < 2.5, "\(elapsed)")
    }

    @Test func aThousandRandomAndMutatedFramesDoNotCrashIt() throws {
        let s = try RunningServer(requestDeadline: 0.2)
        let v = try TestVault()
        try s.client().openSession(for: v.vault, idleSeconds: 600, hardLimitSeconds: 600)
        var rng = SplitMix64(state: UInt64(ProcessInfo.processInfo.environment["VAULT_FUZZ_SEED"].flatMap(UInt64.init) ?? 20261201))
        let seeds: [[UInt8]] = [
            frameBytes(.release(vault: v.path, name: "db", fields: .fields([.password]), command: "get")),
            frameBytes(.add(vault: v.path, item: Item(name: "fuzz", password: "p", urls: ["u"]), replace: true)),
            frameBytes(.update(vault: v.path, name: "web", change: ItemChange())),
            frameBytes(.importItems(vault: v.path, items: [Item(name: "imp")], replace: true, commit: true)),
            frameBytes(.audit(vault: v.path, limit: 3)),
            frameBytes(.status), frameBytes(.list(vault: v.path)), frameBytes(.lock(vault: "/nowhere")),
            frameBytes(.unlock(root: v.location.root, name: "default", generation: 1, idleSeconds: 1e300, hardLimitSeconds: -5),
                       tail: randomBytes(32)),
        ]
        let tokens = ["{", "}", "[", "]", ":", ",", "\"vault\"", "\"item\"", "\"name\"", "1e400", "-1e19", "null", "true",
                      "\"\(v.path)\"", "\"release\"", "\"add\"", "\"unlock\"", "0", "\"\\u0000\"", "\"fields\"", "[[[[[[", "9999999999999999999"]
        var answered = 0
        for round in 0..<1000 {
            var frame: [UInt8]
            switch round % 4 {
            case 0:   // bit flips and byte changes in a valid frame
                frame = seeds[Int.random(in: 0..<seeds.count, using: &rng)]
                for _ in 0..<Int.random(in: 1...8, using: &rng) {
                    let i = Int.random(in: 0..<frame.count, using: &rng)
                    frame[i] = Bool.random(using: &rng) ? frame[i] ^ (1 << UInt8.random(in: 0...7, using: &rng)) : UInt8.random(in: 0...255, using: &rng)
                }
            case 1:   // valid header, JSON stitched from tokens
                var json = ""
                for _ in 0..<Int.random(in: 1...40, using: &rng) { json += tokens[Int.random(in: 0..<tokens.count, using: &rng)] }
                frame = AgentFrame(json: Array(json.utf8)).encoded()
            case 2:   // a valid frame cut short or with junk after it
                frame = seeds[Int.random(in: 0..<seeds.count, using: &rng)]
                if Bool.random(using: &rng) {
                    frame = Array(frame.prefix(Int.random(in: 0..<frame.count, using: &rng)))
                } else {
                    frame += (0..<Int.random(in: 1...64, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                }
            default:  // random bytes
                frame = (0..<Int.random(in: 1...256, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            }
            let c = try s.raw()
            _ = c.send(frame)
            try? c.socket.shutdown(.writing)
            let reply = try #require(c.readToEnd(within: 5), "round \(round) hung")
            answered += replies(reply).count
        }
        print("aThousandRandomAndMutatedFramesDoNotCrashIt: 1000 frames, \(answered) replies")
        // Still serving (a mutated frame may well have been a valid lock), and every row it wrote opens.
        guard case .status = try s.client().send(.status) else { Issue.record("no status after the fuzz"); return }
        try s.client().openSession(for: v.vault, idleSeconds: 600, hardLimitSeconds: 600)
        #expect(try s.client().send(.probe(vault: v.path)) == .sessionOpen)
        #expect(try v.vault.item(named: "db").password == "db-secret-9")
        #expect(try v.vault.allItems().allSatisfy { if case .item = $0 { true } else { false } })
    }

    /// An agent of the previous vault (protocol version 1) still holds the socket: commands
    /// authenticate by themselves, and `unlock` says which process to stop.
    @Test func anAgentOfAnotherVersionIsNamedNotTrusted() throws {
        let folder = "/tmp/vat-" + hexString(randomBytes(4))
        try PrivateFiles.makeFolder(folder + "/vault")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let listener = SocketBox(try UnixSocket.listen(path: folder + "/vault/agent.sock"))
        let old = Thread {
            // Version 1: length, header length, JSON header. It answers every frame with an error.
            let json = Array(#"{"ok":false,"code":2,"message":"malformed request","v":1}"#.utf8)
            var reply: [UInt8] = []
            for n in [UInt32(4 + json.count), UInt32(json.count)] { reply += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] }
            reply += json
            for _ in 0..<2 {
                guard let c = try? listener.socket.accept() else { return }
                let box = SocketBox(c)
                _ = try? box.socket.receiveExactly(9)
                _ = box.send(reply)
            }
        }
        old.start()
        let v = try TestVault()
        #expect(try SessionAccess.open(v.location, environment: ["XDG_RUNTIME_DIR": folder]) == nil)
        let client = try #require(AgentClient.connect(["XDG_RUNTIME_DIR": folder]))
        do {
            try client.openSession(for: v.vault, idleSeconds: 60, hardLimitSeconds: 60)
            Issue.record("an old agent took the key")
        } catch let e as VaultError {
            #expect(e.message.contains("pid \(getpid())") && e.hint?.contains("kill \(getpid())") == true, "\(e.message) \(e.hint ?? "")")
        }
    }

    @Test func aClientGivesUpOnAnAgentThatDoesNotAnswer() throws {
        // A listener that accepts and never replies stands in for a wedged agent.
        let folder = "/tmp/vat-" + hexString(randomBytes(4))
        try PrivateFiles.makeFolder(folder)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let listener = try UnixSocket.listen(path: folder + "/agent.sock")
        let client = try #require(AgentClient.connect(socketPath: folder + "/agent.sock"))
        _ = listener
        let start = MonotonicClock.seconds()
        #expect(throws: VaultError.self) { _ = try client.send(.status, timeout: 0.5) }
        #expect(MonotonicClock.seconds() - start < 2)
    }
}
