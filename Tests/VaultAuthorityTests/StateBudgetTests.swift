import Foundation
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

private let carol: UInt32 = 1003
/// A uid far above any account or subordinate range here (the handler is told it has no account).
private let subordinate: UInt32 = 3_000_000_000

/// Who gets state: only a request that makes some (`bind`, `enroll`) makes a uid's folder, and a
/// uid without an account never gets one; everything else is answered as an empty state.
@Suite struct StateBudgetTests {
    /// Every request that does not make state, with its answer over an empty state.
    private static func readOnlyRequests(_ vault: FakeVault) throws -> [AuthorityRequest] {
        let proof = try vault.proof(.passcodeUnlock, challenge: randomBytes(32))
        return [
            .fingers, .reader(prefer: nil), .challenge,
            .unlock(slot: vault.reference, rules: PasscodeRules(), prompt: "p", scanTimeout: 5),
            .verify(slot: vault.reference, nonce: randomBytes(32), reuse: 60, prompt: "p", scanTimeout: 5),
            .recordPasscodeUnlock(proof: proof), .beginPasscodeAttempt(vaultID: vault.id), .recordPasscodeFailure(vaultID: vault.id),
            .unenroll(finger: "right-index", proof: try vault.proof(.unenroll, challenge: randomBytes(32)), label: nil),
            .resetPrints(proof: nil), .status(slot: vault.reference, sensor: nil, rules: PasscodeRules(afterReboot: true, intervalHours: 48)),
        ]
    }

    @Test func requestsThatMakeNoStateCreateNoFolderAndAnswerAsAnEmptyStateDoes() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        let scans = f.readers.scans
        var answers: [AuthorityReply] = []
        for request in try Self.readOnlyRequests(vault) {
            answers.append(f.send(request, as: carol).reply)
            #expect(!FileSystem.exists(f.handler.folder(of: carol)), "\(request) made a folder")
        }
        #expect(f.readers.scans == scans, "never a scan")
        #expect(try FileSystem.contents(of: f.handler.stateFolder).isEmpty)

        // The same requests to EmbeddedKeyAuthority over a new folder of its own: the same answers.
        let own = TempFolder("authd-empty")
        let embedded = try EmbeddedKeyAuthority(folder: own.path + "/state", challenges: ChallengeBook(),
                                                openReader: { _ in ScriptedReaders().makeReader() })
        let rules = PasscodeRules(afterReboot: true, intervalHours: 48)
        #expect(answers[0] == .fingers(fingers: try embedded.fingers()))
        #expect(answers[1] == .reader(sensor: try embedded.reader(prefer: nil)))
        guard case .challenge(let c) = answers[2] else { Issue.record("challenge: \(answers[2])"); return }
        #expect(c.count == 32)
        #expect(throws: VaultError.biometryNotEnrolled) { _ = try embedded.unlock(vault.reference, rules: PasscodeRules(), prompt: "p", events: { _ in }) }
        #expect(throws: VaultError.biometryNotEnrolled) { _ = try embedded.verify(vault.reference, nonce: randomBytes(32), reuse: 60, prompt: "p", events: { _ in }) }
        #expect(answers[3] == .failed(error: .biometryNotEnrolled) && answers[4] == .failed(error: .biometryNotEnrolled))
        #expect(answers[5] == .recorded(record: try embedded.recordPasscodeUnlock(try vault.proof(.passcodeUnlock, challenge: randomBytes(32)))))
        #expect(answers[6] == .passcodeWait(seconds: try embedded.beginPasscodeAttempt(vaultID: vault.id)))
        #expect(answers[7] == .done && answers[9] == .done)
        #expect(answers[8] == .unenrolled(fingers: try embedded.unenroll(finger: "right-index",
                                                                          proof: try vault.proof(.unenroll, challenge: randomBytes(32)), label: nil)))
        guard case .status(let status) = answers[10] else { Issue.record("status: \(answers[10])"); return }
        let expected = try embedded.status(slot: vault.reference, sensor: nil, rules: rules)
        #expect(status.kind == .system)
        #expect(status.fingers == expected.fingers && status.failedMatches == expected.failedMatches && status.threshold == expected.threshold)
        #expect(status.bindingCurrent == expected.bindingCurrent && status.passcodeDue == expected.passcodeDue)
        #expect(status.passcodeAfterRebootDue == expected.passcodeAfterRebootDue && status.printsError == nil)
        #expect(status.sensor == expected.sensor && status.secrets == .filePermissions)

        // Enrolling makes the folder; from then on every request is the authority's.
        guard case .enrolled = f.send(.enroll(finger: nil, sensor: nil, proof: nil, label: nil, scanTimeout: 5), as: carol).reply else {
            Issue.record("enrol"); return
        }
        #expect(FileSystem.exists(f.handler.folder(of: carol) + "/device-secret"))
        guard case .fingers(let fingers) = f.send(.fingers, as: carol).reply else { Issue.record("fingers"); return }
        #expect(fingers.count == 1)
    }

    @Test func aBindWithoutStateMakesTheFolderAndFailsAsOnAnEmptyState() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        let r = f.send(.bind(request: BindRequest(slot: vault.reference, sensor: nil, rules: PasscodeRules())), as: carol, key: vault.proofKey)
        #expect(r.exitCode == 16, "no prints to bind to: \(r.reply)")
        #expect(FileSystem.exists(f.handler.folder(of: carol)))
    }

    @Test func aUidWithoutAnAccountCanNeitherEnrolNorBindAndGetsNoFolder() throws {
        let f = try HandlerFixture(script: [.match])
        let vault = FakeVault()
        let enrol = f.send(.enroll(finger: nil, sensor: nil, proof: nil, label: nil, scanTimeout: 5), as: subordinate, hasAccount: false)
        #expect(enrol.exitCode == 15)
        #expect(enrol.error?.message.contains("uid \(subordinate) has none") == true, "\(String(describing: enrol.error))")
        let bind = f.send(.bind(request: BindRequest(slot: vault.reference, sensor: nil, rules: PasscodeRules())), as: subordinate, hasAccount: false,
                          key: vault.proofKey)
        #expect(bind.exitCode == 15)
        for request in try Self.readOnlyRequests(vault) {
            let r = f.send(request, as: subordinate, hasAccount: false)
            if case .failed(let e) = r.reply { #expect(e == .biometryNotEnrolled, "\(request)") }
        }
        #expect(f.send(.ping, as: subordinate, hasAccount: false).reply == .pong(version: 2, testMode: true))
        #expect(try FileSystem.contents(of: f.handler.stateFolder).isEmpty)

        // A folder left from before (a uid that had an account) is not used for a uid without one.
        _ = try f.enrolAndBind(vault, as: carol)
        guard case .fingers(let none) = f.send(.fingers, as: carol, hasAccount: false).reply else { Issue.record("fingers"); return }
        #expect(none.isEmpty)
        #expect(f.unlock(vault, as: carol, session: ScanSession(uid: carol, hasAccount: false)).exitCode == 16)
    }

    @Test func theStateOfUidsWithoutAnAccountGoesOnceIdleAndNoOtherState() throws {
        let f = try HandlerFixture(script: [.match])
        let me = ProcessIdentity.effectiveUID
        guard case .account = ProcessIdentity.lookUpUser(me), ProcessIdentity.lookUpUser(subordinate) == .noAccount else {
            Issue.record("this test needs an account of uid \(me) and none of \(subordinate)")
            return
        }
        // A login user's (this test's own uid), and two of a uid without an account: one idle, one just used.
        let vault = FakeVault()
        _ = try f.enrolAndBind(vault, as: me)
        let stale = f.handler.folder(of: subordinate), fresh = f.handler.folder(of: subordinate + 1)
        for folder in [stale, fresh] {
            try PrivateFiles.makeFolder(folder)
            try AtomicFile.write(randomBytes(32), to: folder + "/device-secret")
            try AtomicFile.write(randomBytes(100), to: folder + "/prints.sealed")
        }
        let old = Date(timeIntervalSinceNow: -2 * AuthorityLimits.staleStateSeconds)
        for path in [stale + "/device-secret", stale + "/prints.sealed", stale] {
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        }
        // Names that are no uid's folder, and a file where a folder would be, are left alone.
        for odd in ["uid-0\(subordinate + 2)", "uid-x", "notes"] { try PrivateFiles.makeFolder(f.handler.stateFolder + "/" + odd) }
        try AtomicFile.write([1], to: f.handler.folder(of: subordinate + 3))
        for path in ["uid-0\(subordinate + 2)", "uid-x", "notes", "uid-\(subordinate + 3)"].map({ f.handler.stateFolder + "/" + $0 }) {
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
        }

        #expect(f.handler.removeStateWithoutAccount() == [subordinate])
        #expect(!FileSystem.exists(stale))
        #expect(FileSystem.exists(fresh + "/device-secret"), "changed within the idle time: kept")
        #expect(FileSystem.exists(f.handler.folder(of: me) + "/device-secret"))
        #expect(Set(try FileSystem.contents(of: f.handler.stateFolder)) ==
                Set(["uid-\(me)", "uid-\(subordinate + 1)", "uid-0\(subordinate + 2)", "uid-x", "notes", "uid-\(subordinate + 3)"]))
        #expect(f.unlock(vault, as: me).isKey)
        #expect(f.handler.removeStateWithoutAccount(idleSeconds: 0) == [subordinate + 1])
    }
}

extension ScriptedReaders {
    /// A reader of this source outside any request (for an authority of a test's own).
    func makeReader() -> any FingerprintReader {
        Reader(source: self, session: ScanSession(uid: 0, hasAccount: true))
    }
}
