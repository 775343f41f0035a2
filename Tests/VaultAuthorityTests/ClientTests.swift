import Foundation
import Synchronization
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// An `AuthorityServer` in this process, on a temporary socket, over a scripted reader: the
/// real socket code and the real client, as this test's own uid.
final class InProcessDaemon: @unchecked Sendable {
    let fixture: HandlerFixture
    let server: AuthorityServer
    let socketPath: String
    private let ended = DispatchSemaphore(value: 0)

    init(script: [ScanScript] = [.match]) throws {
        fixture = try HandlerFixture(testMode: true, script: script)
        socketPath = fixture.folder.path + "/run/socket"
        server = AuthorityServer(socketPath: socketPath, handler: fixture.handler)
        let server = self.server, ended = self.ended
        Thread.detachNewThread {
            try? server.run()
            ended.signal()
        }
        let end = MonotonicClock.seconds() + 10
        while !rawPing(socketPath) && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.01) }
    }

    deinit {
        server.stop()
        ended.wait()
    }

    var readers: ScriptedReaders { fixture.readers }

    func client(scanTimeout: Double = 5, control: ScanControl = ScanControl(), notices: @escaping (ScanNotice) -> Void = { _ in }) -> SystemKeyAuthority {
        SystemKeyAuthority(socketPath: socketPath, daemon: .uid(ProcessIdentity.effectiveUID), scanTimeout: scanTimeout, control: control, notices: notices)
    }
}

/// Collects notices from a client's callback.
final class Notices: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [ScanNotice] = []
    func add(_ n: ScanNotice) { lock.withLock { items.append(n) } }
    var all: [ScanNotice] { lock.withLock { items } }
}

private let relaxed = PasscodeRules(afterReboot: false, intervalHours: 0)

/// Binds `vault` through `authority` with a proof of its key (`confirm`: fingers confirmed).
func bindFake(_ authority: any KeyAuthority, _ vault: FakeVault, confirm: [String] = [], rules: PasscodeRules = relaxed) throws -> BindingGrant {
    let grant = try authority.bind(try vault.bindRequest(challenge: try authority.challenge(), rules: rules, confirm: confirm),
                                   proofKey: try SecretBytes(copying: vault.proofKey))
    vault.key.current = grant.binding.keyID
    return grant
}

/// `SystemKeyAuthority` against the server over a real socket.
@Suite struct ClientTests {
    @Test func aVaultBindsAndOpensThroughTheSocketWithTheUnchangedAuthContext() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let notices = Notices()
        let authority = daemon.client(notices: { notices.add($0) })
        #expect(authority.kind == .system)
        let root = TempFolder("authd-vault")
        let location = try VaultLocation(name: "default", environment: ["VAULT_HOME": root.path])
        let created = try VaultStore.create(at: location, passcode: try SecretBytes(copying: Array("pass".utf8)),
                                            kdf: KDFParameters(memoryMiB: 8, operations: 1))
        try created.vault.add(Item(name: "gh", password: "pw"))
        _ = try authority.enroll(finger: "right-index", sensor: nil, proof: nil, label: nil)
        try created.vault.bindFingerprint(authority: authority, sensor: nil, confirm: ["right-index"])
        authority.recordUnlock(of: created.vault)

        let store = try VaultStore.open(location)
        let said = Notices()
        let context = AuthContext(authority: authority, policy: .biometricsOrPasscode, readPasscode: { _ in nil },
                                  say: { said.add(.touchReader(prompt: $0)) })
        let vault = try context.unlock(store)
        #expect(try vault.item(named: "gh").password == "pw")
        #expect(notices.all.contains(.touchReader(prompt: "touch the fingerprint reader to unlock vault 'default'")))
        guard case .status(let s) = daemon.fixture.send(.status(slot: nil, sensor: nil, rules: relaxed), as: ProcessIdentity.effectiveUID).reply else {
            Issue.record("status"); return
        }
        #expect(s.kind == .system && s.fingers.count == 1)
        #expect(try authority.status(slot: nil, sensor: nil, rules: relaxed).kind == .system)

        // Three non-matches: the retry limit, with the narration forwarded; the passcode follows.
        daemon.readers.set([.noMatch])
        let events = Notices()
        let fallback = AuthContext(authority: authority, policy: .biometricsOrPasscode,
                                   readPasscode: { _ in try SecretBytes(copying: Array("pass".utf8)) },
                                   say: { events.add(.touchReader(prompt: $0)) })
        let opened = try fallback.unlock(store)
        #expect(opened.authentication == .passcode)
        #expect(events.all.contains(.touchReader(prompt: "vault: no match, 2 tries left")))
        #expect(try authority.status(slot: nil, sensor: nil, rules: relaxed).failedMatches == 0, "the passcode unlock was recorded")
    }

    @Test func noKeyWithoutAMatchAndTheRetryLimitIsThrownAsSuch() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let authority = daemon.client()
        let vault = FakeVault()
        _ = try authority.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        let grant = try bindFake(authority, vault, confirm: ["right-index"])
        let again = try bindFake(authority, vault)
        let same = grant.kek.isEqual(to: again.kek)
        #expect(!same)
        daemon.readers.set([.noMatch])
        var seen: [AuthorityEvent] = []
        #expect(throws: RetryLimitExceeded.self) {
            _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { seen.append($0) })
        }
        #expect(seen == [.noMatch(triesLeft: 2), .noMatch(triesLeft: 1), .noMatch(triesLeft: 0)])
        #expect(throws: VaultError.biometryLockout) {
            _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in })
        }
    }

    @Test(arguments: [(ScanCancelReason.fallback, Int32(12)), (.user, 11), (.program, 18)])
    func aCancelFromAnotherThreadEndsTheScanLikeOnTheEmbeddedPath(reason: ScanCancelReason, code: Int32) throws {
        let daemon = try InProcessDaemon(script: [.match])
        let notices = Notices()
        let control = ScanControl()
        let authority = daemon.client(control: control, notices: { n in
            notices.add(n)
            // The keyboard watch of the CLI runs on its own thread and cancels when told.
            if case .touchReader = n { DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { control.cancel(reason) } }
        })
        let vault = FakeVault()
        _ = try authority.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(authority, vault, confirm: ["right-index"])
        daemon.readers.set([.waitForCancel])
        let error = #expect(throws: VaultError.self) { _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) }
        #expect(error?.exitCode == code)
        if reason == .fallback { #expect(error == .passcodeNeeded("you chose the passcode")) }
        #expect(try authority.status(slot: nil, sensor: nil, rules: relaxed).failedMatches == 0)
        // A cancel when nothing scans is dropped: the next scan is not cancelled by it.
        control.cancel(.user)
        daemon.readers.set([.match])
        #expect(throws: Never.self) { _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) }
    }

    @Test func theWatchClosureIsPolledWhileTheDaemonScans() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let started = Mutex<Double?>(nil)
        let purposes = Mutex<Set<String>>([])
        let control = ScanControl(watch: { purpose in
            purposes.withLock { _ = $0.insert("\(purpose)") }
            guard purpose == .match else { return nil }
            let now = MonotonicClock.seconds()
            let first = started.withLock { s in s ?? { s = now; return now }() }
            return now - first > 0.3 ? .fallback : nil
        })
        let authority = daemon.client(control: control)
        let vault = FakeVault()
        _ = try authority.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(authority, vault, confirm: ["right-index"])
        daemon.readers.set([.waitForCancel])
        #expect(throws: VaultError.passcodeNeeded("you chose the passcode")) {
            _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in })
        }
        #expect(purposes.withLock { $0 } == ["enrolment", "match"], "asked during the enrolment and the unlock, told which")
    }

    @Test func aClientThatGoesAwayMidScanFreesTheReaderForTheNext() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let authority = daemon.client()
        let vault = FakeVault()
        _ = try authority.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(authority, vault, confirm: ["right-index"])
        daemon.readers.set([.waitForCancel, .match])
        do {
            let socket = try UnixSocket.connect(path: daemon.socketPath)
            try socket.sendAll(try AuthorityCodec.frame(.unlock(slot: vault.reference, rules: relaxed, prompt: "p", scanTimeout: 30)).encoded())
            let first = try rawReplies(socket, within: 0.5)
            #expect(first.first?.0 == .notice(notice: .touchReader(prompt: "p")))
            // The socket closes here, mid-scan.
        }
        let start = MonotonicClock.seconds()
        #expect(throws: Never.self) { _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) }
        #expect(MonotonicClock.seconds() - start < 2)
        #expect(try authority.status(slot: nil, sensor: nil, rules: relaxed).failedMatches == 0)
    }

    @Test func aSecondScanWaitsItsTurnSaysSoAndIsBusyOnlyAfterItsScanTimeout() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let control = ScanControl()
        let first = daemon.client(control: control)
        let impatient = Notices(), patient = Notices()
        let second = daemon.client(scanTimeout: 1, notices: { impatient.add($0) })
        let third = daemon.client(scanTimeout: 20, notices: { patient.add($0) })
        let vault = FakeVault()
        _ = try first.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(first, vault, confirm: ["right-index"])
        daemon.readers.set([.waitForCancel, .match])
        let done = DispatchSemaphore(value: 0)
        let box = Mutex<Int32?>(nil)
        let before = daemon.readers.scans
        let moved = Unchecked(first)
        Thread.detachNewThread {
            do { _ = try moved.value.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) } catch let e as VaultError {
                box.withLock { $0 = e.exitCode }
            } catch {}
            done.signal()
        }
        while daemon.readers.scans == before { MonotonicClock.sleep(seconds: 0.01) }
        let start = MonotonicClock.seconds()
        let busy = #expect(throws: VaultError.self) { _ = try second.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) }
        #expect(busy?.exitCode == 13)
        #expect(MonotonicClock.seconds() - start >= 0.9, "it waited its scan timeout")
        #expect(impatient.all == [.waitingForReader])
        #expect(try second.fingers().count == 1, "a request that needs no reader is served meanwhile")

        // One with time to wait gets the reader when the first request ends.
        let opened = DispatchSemaphore(value: 0)
        let movedThird = Unchecked(third)
        Thread.detachNewThread {
            if (try? movedThird.value.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in })) != nil { opened.signal() }
        }
        while patient.all.isEmpty { MonotonicClock.sleep(seconds: 0.01) }
        control.cancel(.user)
        done.wait()
        #expect(box.withLock { $0 } == 11)
        #expect(opened.wait(timeout: .now() + 10) == .success)
        #expect(patient.all == [.waitingForReader, .touchReader(prompt: "p")])
    }

    @Test func aClientThatStopsReadingLosesItsScanWithinSecondsAndTheNextGetsTheReader() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let authority = daemon.client(scanTimeout: 20)
        let vault = FakeVault()
        _ = try authority.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(authority, vault, confirm: ["right-index"])
        daemon.readers.set([.waitForCancel, .match])
        // A client that asks for a scan of 30 s, reads the first notice, then reads nothing more
        // (what a stopped process does): its socket buffer has room for hundreds of frames.
        let socket = try UnixSocket.connect(path: daemon.socketPath)
        try socket.sendAll(try AuthorityCodec.frame(.unlock(slot: vault.reference, rules: relaxed, prompt: "p", scanTimeout: 30)).encoded())
        let first = try rawReplies(socket, within: 0.5)
        #expect(first.first?.0 == .notice(notice: .touchReader(prompt: "p")))
        let start = MonotonicClock.seconds()
        #expect(throws: Never.self) { _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) }
        let waited = MonotonicClock.seconds() - start
        #expect(waited < 15, "the reader came back after \(waited) s")
        print("in-process: a client that stopped reading held the reader \(String(format: "%.1f", waited)) s")
        // When it reads again: the keep-alives it left, then why its request ended, then the end.
        let rest = try rawReplies(socket, within: 5)
        #expect(rest.contains { $0.0 == .keepAlive })
        guard case .failed(let why)? = rest.last?.0 else { Issue.record("no answer: \(rest)"); return }
        #expect(why.exitCode == 18 && why.message.contains("did not read"), "\(why)")
        var byte = [UInt8](repeating: 0, count: 1)
        #expect(try byte.withUnsafeMutableBytes { try socket.receive(into: $0) } == 0, "the connection closed")
        #expect(try authority.status(slot: nil, sensor: nil, rules: relaxed).failedMatches == 0)
    }

    @Test func aClientThatReadsKeepsALongScanPastTheUnreadLimit() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let control = ScanControl()
        let authority = daemon.client(scanTimeout: 20, control: control, notices: { n in
            if case .touchReader = n {
                DispatchQueue.global().asyncAfter(deadline: .now() + AuthorityLimits.unreadSeconds + 2) { control.cancel(.user) }
            }
        })
        let vault = FakeVault()
        _ = try authority.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(authority, vault, confirm: ["right-index"])
        daemon.readers.set([.waitForCancel])
        // Seven seconds of scan with nothing streamed but keep-alives: ended by the person (11),
        // not by the daemon (18).
        let error = #expect(throws: VaultError.self) { _ = try authority.unlock(vault.reference, rules: relaxed, prompt: "p", events: { _ in }) }
        #expect(error == .userCancel, "\(String(describing: error))")
    }

    @Test func twentyConcurrentClientsAreServed() throws {
        let daemon = try InProcessDaemon(script: [.match])
        let vault = FakeVault()
        let setup = daemon.client()
        _ = try setup.enroll(finger: nil, sensor: nil, proof: nil, label: nil)
        _ = try bindFake(setup, vault, confirm: ["right-index"])
        let served = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 20) { i in
            let c = daemon.client()
            do {
                for _ in 0..<5 {
                    #expect(try c.fingers().count == 1)
                    let challenge = try c.challenge()
                    #expect(try c.recordPasscodeUnlock(try vault.proof(.passcodeUnlock, challenge: challenge)) == .owner)
                    #expect(try c.status(slot: vault.reference, sensor: nil, rules: relaxed).bindingCurrent == true)
                }
                served.withLock { $0 += 1 }
            } catch {
                Issue.record("client \(i): \(error)")
            }
        }
        #expect(served.withLock { $0 } == 20)
    }

    /// The requests of one client go on one connection (a passcode `get` asks four times), and
    /// one the daemon closed since (it stopped, or restarted) is not used: the next request
    /// connects again and is answered.
    @Test func oneClientAsksOnOneConnectionAndReconnectsToARestartedDaemon() throws {
        let daemon = try InProcessDaemon()
        let client = daemon.client()
        for _ in 0..<4 { _ = try client.challenge() }
        #expect(daemon.server.connectionCount == 1, "\(daemon.server.connectionCount) connections for one client")
        let other = daemon.client()
        _ = try other.challenge()
        #expect(daemon.server.connectionCount == 2)

        // The daemon stops: its connections end (as they do when its process exits).
        daemon.server.stop()
        let end = MonotonicClock.seconds() + 10
        while (daemon.server.connectionCount > 0 || rawPing(daemon.socketPath)) && MonotonicClock.seconds() < end {
            MonotonicClock.sleep(seconds: 0.01)
        }
        #expect(daemon.server.connectionCount == 0)
        let again = AuthorityServer(socketPath: daemon.socketPath, handler: daemon.fixture.handler)
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? again.run()
            stopped.signal()
        }
        defer { again.stop(); stopped.wait() }
        while !rawPing(daemon.socketPath) && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.01) }
        _ = try client.challenge()
        _ = try client.fingers()
        #expect(again.connectionCount == 1)
    }

    @Test func theClientRefusesASocketOfAnotherUserAndProbeSaysSo() throws {
        let daemon = try InProcessDaemon()
        let me = ProcessIdentity.effectiveUID
        #expect(SystemKeyAuthority.probe(socketPath: daemon.socketPath, daemon: .uid(me)))
        #expect(SystemKeyAuthority.probe(socketPath: daemon.socketPath, daemon: .user(NSUserName())))
        let info = try SystemKeyAuthority.describe(socketPath: daemon.socketPath, daemon: .uid(me))
        #expect(info.uid == me && info.pid == ProcessIdentity.pid && info.testMode && info.version == 2)
        #expect(!SystemKeyAuthority.probe(socketPath: daemon.socketPath, daemon: .uid(me &+ 1)))
        #expect(!SystemKeyAuthority.probe(socketPath: daemon.socketPath, daemon: .user("no-such-user-\(me)")))
        #expect(!SystemKeyAuthority.probe(socketPath: daemon.fixture.folder.path + "/nothing", daemon: .uid(me)))
        let nobody = #expect(throws: VaultError.self) {
            _ = try SystemKeyAuthority(socketPath: daemon.fixture.folder.path + "/nothing", daemon: .uid(me)).fingers()
        }
        #expect(nobody?.exitCode == 15, "the policy falls back to the passcode")
        let refused = #expect(throws: VaultError.self) {
            _ = try SystemKeyAuthority(socketPath: daemon.socketPath, daemon: .uid(me &+ 1)).fingers()
        }
        #expect(refused?.exitCode == 15)
        #expect(refused?.message.contains("belongs to uid \(me)") == true)
        // A socket in a folder others may write to is not trusted, even as the right uid.
        try FileSystem.setPermissions(daemon.fixture.folder.path + "/run", 0o777)
        defer { try? FileSystem.setPermissions(daemon.fixture.folder.path + "/run", 0o755) }
        #expect(!SystemKeyAuthority.probe(socketPath: daemon.socketPath, daemon: .uid(me)))
    }
}
