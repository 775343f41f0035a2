import Foundation
import Testing
import VaultAgent
import VaultKit

/// A throw-away vault root, removed when the test ends.
final class TempRoot {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "vault-agent-test-" + hexString(randomBytes(6))
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
    func location(_ name: String = "default") throws -> VaultLocation {
        try VaultLocation(name: name, environment: ["VAULT_HOME": path])
    }
}

/// A clock the test moves by hand.
final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var seconds: Double = 1000
    var now: Double { lock.withLock { seconds } }
    func advance(_ d: Double) { lock.withLock { seconds += d } }
    var read: AgentClock { { self.now } }
}

let fastKDF = KDFParameters(memoryMiB: 8, operations: 1)
let passcode = "correct horse battery"
/// The terminal session the test's peers are in (unlock sessions serve their opener's by default).
let testTerminal = TerminalSession(sessionID: 4242, terminal: 34816)
/// The test's own peer credentials (the agent serves this uid only).
let me = Requester(uid: UInt32(getuid()), pid: 4242, terminal: testTerminal)

/// A fresh vault with two items, and its master key as handed over by `vault unlock`.
struct TestVault {
    let root = TempRoot()
    let location: VaultLocation
    let vault: UnlockedVault
    var path: String { location.databasePath }

    init(name: String = "default", items: Bool = true) throws {
        location = try root.location(name)
        vault = try VaultStore.create(at: location, passcode: try SecretBytes(copying: Array(passcode.utf8)), kdf: fastKDF).vault
        if items {
            try vault.add(Item(name: "db", username: "admin", password: "db-secret-9", totp: "otpauth://totp/x?secret=JBSWY3DPEHPK3PXP"))
            try vault.add(Item(name: "web", password: "web-secret-3", urls: ["https://example.com"]))
        }
    }

    var key: [UInt8] { vault.withMasterKey { $0.exposedBytes() } }

    func unlockRequest(idle: Double = 120, hard: Double = 3600) -> AgentRequest {
        .unlock(root: location.root, name: location.name, generation: vault.generation, idleSeconds: idle, hardLimitSeconds: hard)
    }

    /// Opens a session in `handler`.
    func open(in handler: AgentRequestHandler, idle: Double = 120, hard: Double = 3600) {
        let reply = handler.handle(unlockRequest(idle: idle, hard: hard), key: key, from: me)
        #expect(reply == .sessionOpen, "\(reply)")
    }
}

/// The exit code of a failed reply, or nil.
func failureCode(_ reply: AgentReply) -> Int32? {
    if case .failed(let e) = reply { return e.exitCode }
    return nil
}

/// A request frame from raw JSON text.
func rawFrame(_ json: String, tail: [UInt8] = []) -> AgentFrame {
    try! AgentFrame(json: Array(json.utf8), tail: tail)
}

/// The item a `release` reply hands out: its overview with the secrets of the reply's tail.
func releasedItem(_ answer: (reply: AgentReply, tail: [UInt8])) -> Item? {
    guard case .released(let overview) = answer.reply else { return nil }
    return try? answer.tail.withUnsafeBytes { try ReleasedItem(overview: overview, secretsRecord: $0).item() }
}

/// The items a `releaseAll` reply hands out, decoded from its tail.
func releasedItems(_ answer: (reply: AgentReply, tail: [UInt8])) -> [Item]? {
    guard case .releasedAll = answer.reply else { return nil }
    var items: [Item] = []
    do {
        try answer.tail.withUnsafeBytes { tail in
            try AgentCodec.forEachReleased(inExport: tail) { overview, secrets in
                var item = overview.item
                try secrets.decode(into: &item)
                items.append(item)
            }
        }
    } catch { return nil }
    return items
}

extension AgentRequestHandler {
    /// Answers one request without import staging, with the reply's tail.
    func respond(_ request: AgentRequest, from peer: Requester) -> (reply: AgentReply, tail: [UInt8]) {
        var staging = ImportStaging()
        return respond(request, from: peer, staging: &staging)
    }
}
