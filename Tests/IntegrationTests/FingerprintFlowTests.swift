import Foundation
import Testing

// The fingerprint gate end to end: the built `vault` binary on libfprint's own virtual readers
// (real enrol and match code, only the finger is simulated), driven by the built `virtual-reader`
// from another thread while each `vault` run waits at the reader. Every test has its own sandbox
// (VAULT_HOME, XDG_STATE_HOME, reader socket), so they run in parallel with everything else.

private let pc = Sandbox.passcode
private let cheapKDF = ["--kdf-memory", "8", "--kdf-ops", "1"]
/// What the vault prints (stderr) when it waits for a finger.
private let scanPrompt = "touch the fingerprint reader"
private let password = "gh-Secret-0451"
private let getPassword = ["get", "gh", "--field", "password", "--no-input"]
private let fixtures = packageRoot + "/Tests/FingerprintKitTests/Fixtures/"

/// `count` touches of the finger whose virtual identity is `id`.
private func scans(_ id: String, _ count: Int = 1) -> [ReaderStep] {
    Array(repeating: .device("SCAN \(id)"), count: count)
}

/// Reader commands for the scans of one unlock, each sent once the vault has asked for that
/// touch. Sent back to back instead, libfprint's virtual_device can hand the next command to the
/// verify that just reported ("fpi_device_verify_report: assertion 'data->result_reported ==
/// FALSE'"), and the next scan then waits for a touch that was used up.
private func touches(_ commands: [String]) -> [ReaderStep] {
    commands.enumerated().flatMap { i, c in [ReaderStep.awaitStderrCount(scanPrompt, i + 1), .device(c)] }
}

private func touches(_ id: String, _ count: Int) -> [ReaderStep] {
    touches(Array(repeating: "SCAN \(id)", count: count))
}

/// What `RunResult.reader` holds when the vault took each of `count` reader commands.
private func took(_ count: Int) -> [Int32] { Array(repeating: 0, count: count) }

/// A sandbox on one virtual reader of `driver` whose vault `name` was created by `vault init`
/// (enrolling with `enrolment`, then bound) and holds the login 'gh'.
private func enrolledVault(_ driver: String = "virtual_device", name: String = "default",
                           enrolment: [ReaderStep] = scans("alice", 5),
                           sourceLocation: SourceLocation = #_sourceLocation) -> Sandbox {
    let box = Sandbox()
    box.useVirtualReader(driver)
    let r = box.vault(["init", "--vault", name] + cheapKDF, passcode: pc, reader: enrolment)
    #expect(r.status == 0, "init: \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.reader == took(enrolment.count), "init: \(r.stderr)", sourceLocation: sourceLocation)
    #expect(r.stderr.contains("enrolled right-index"), sourceLocation: sourceLocation)
    let a = box.vault(["add", "gh", "--vault", name, "--password-stdin"], passcode: pc, stdin: password + "\n")
    #expect(a.status == 0, "add: \(a.stderr)", sourceLocation: sourceLocation)
    return box
}

/// `vault status --json`, optionally while the reader plays `reader`.
private func status(_ box: Sandbox, vault: String = "default", reader: [ReaderStep]? = nil,
                    sourceLocation: SourceLocation = #_sourceLocation) -> [String: Any] {
    let args = ["status", "--json", "--vault", vault]
    let r = reader.map { box.vault(args, reader: $0) } ?? box.vault(args)
    #expect(r.status == 0, "status: \(r.stderr)", sourceLocation: sourceLocation)
    return json(r.stdout)
}

private func lockout(_ s: [String: Any]) -> (failures: Int?, locked: Bool?) {
    let l = s["lockout"] as? [String: Any]
    return (l?["failures"] as? Int, l?["locked"] as? Bool)
}

private func fingers(_ box: Sandbox) -> [String] {
    let r = box.vault(["fingers", "--json"])
    #expect(r.status == 0, "fingers: \(r.stderr)")
    return ((json(r.stdout)["fingers"] as? [[String: Any]]) ?? []).compactMap { $0["finger"] as? String }.sorted()
}

private func isHex64(_ s: String?) -> Bool {
    guard let s else { return false }
    return s.range(of: "^[0-9a-f]{64}$", options: .regularExpression) != nil
}

@Suite struct FingerprintFlowTests {
    // MARK: virtual_device

    @Test func initEnrolsThroughARetryAndBindsTheVault() {
        let box = Sandbox()
        box.useVirtualReader("virtual_device")
        let steps = scans("alice", 2) + [.device("RETRY 2")] + scans("alice", 3)
        let r = box.vault(["init"] + cheapKDF, passcode: pc, reader: steps)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.reader == took(6))
        // The retry is advice during the enrolment, not its end: it goes on to 5 of 5.
        #expect(r.stderr.contains("center your finger"), "\(r.stderr)")
        #expect(r.stderr.contains("5/5"))
        #expect(r.stderr.contains("enrolled right-index"))
        // The recovery key alone on stdout.
        #expect(r.stdout.range(of: #"^([A-Z2-7]{4}-){13}[A-Z2-7]{4}\n$"#, options: .regularExpression) != nil, "\(r.stdout)")

        let s = status(box)
        #expect(s["fingerprint_bound"] as? Bool == true)
        let enrolled = s["enrolled_fingers"] as? [[String: Any]] ?? []
        #expect(enrolled.count == 1)
        #expect(enrolled.first?["finger"] as? String == "right-index")
        #expect(enrolled.first?["sensor"] as? String == "virtual_device/0")
        let state = s["domain_state"] as? String
        #expect(isHex64(state), "\(String(describing: state))")
        let slot = s["fingerprint_slot"] as? [String: Any]
        #expect(slot?["domain_state"] as? String == state)
        #expect(slot?["sensor"] as? String == "virtual_device/0")
        #expect((s["slots"] as? [String])?.contains("fingerprint") == true)
        #expect(lockout(s).failures == 0)
        #expect(fingers(box) == ["right-index"])
    }

    @Test func theEnrolledFingerUnlocksAndAnotherIsRefusedAfterThreeTries() {
        let box = enrolledVault()
        var r = box.vault(getPassword, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        #expect(r.reader == took(1))
        #expect(r.stderr.contains(scanPrompt))

        r = box.vault(getPassword, reader: touches("mallory", 3))
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(3))
        #expect(r.stderr.contains("no match, 2 tries left"), "\(r.stderr)")
        #expect(r.stderr.contains("no match, 1 try left"))
        #expect(lockout(status(box)).failures == 3)
    }

    @Test func aRetryAtTheUnlockPromptIsAdviceNotAFailedMatch() {
        let box = enrolledVault()
        var r = box.vault(getPassword, reader: touches(["RETRY 3", "SCAN alice"]))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        #expect(r.reader == took(2))
        #expect(r.stderr.contains("remove your finger"), "\(r.stderr)")
        #expect(!r.stderr.contains("no match"))

        // A retry uses up one of the three tries but is not a failed match: two strangers after
        // it leave two failures, not three.
        r = box.vault(getPassword, reader: touches(["RETRY 3", "SCAN mallory", "SCAN mallory"]))
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(3))
        #expect(lockout(status(box)).failures == 2)
    }

    @Test func aBusyReaderIsASystemCancel() {
        let box = enrolledVault()
        // FP_DEVICE_ERROR_BUSY (4) = what fprintd holding the reader looks like: DESIGN's 13.
        let r = box.vault(getPassword, reader: [.device("ERROR 4")])
        #expect(r.status == 13, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(1))
        #expect(r.stderr.contains("busy"), "\(r.stderr)")
        #expect(lockout(status(box)).failures == 0)
    }

    @Test func aReaderUnpluggedDuringTheScanIsNotAvailable() {
        let box = enrolledVault()
        let r = box.vault(getPassword + ["--policy", "biometrics"], reader: [.awaitStderr(scanPrompt), .device("UNPLUG")])
        #expect(r.status == 15, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(1))
        #expect(r.stderr.contains("removed"), "\(r.stderr)")
        #expect(lockout(status(box)).failures == 0)
    }

    @Test func ctrlCAtThePromptIsAUserCancel() {
        let box = enrolledVault()
        let r = spawn("/usr/bin/timeout", ["--preserve-status", "-s", "INT", "2", vaultBinary] + getPassword,
                      env: box.env, timeLimit: 30)
        #expect(r.status == 11, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains(scanPrompt), "it was waiting for the finger: \(r.stderr)")
        #expect(r.stderr.contains("cancelled"))
        #expect(lockout(status(box)).failures == 0)
    }

    @Test func noFingerWithinTheScanTimeoutIsAnAppCancel() {
        let box = enrolledVault()
        let start = Date()
        let r = box.vault(getPassword + ["--scan-timeout", "1"], reader: [], timeLimit: 30)
        let elapsed = Date().timeIntervalSince(start)
        #expect(r.status == 18, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains(scanPrompt))
        #expect(elapsed >= 1 && elapsed < 15, "took \(elapsed) s")
    }

    @Test func fiveFailedMatchesLockFingerprintOutUntilThePasscode() {
        let box = enrolledVault()
        var r = box.vault(getPassword, reader: touches("mallory", 3))
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.reader == took(3))
        r = box.vault(getPassword + ["--policy", "biometrics"], reader: touches("mallory", 2))
        #expect(r.status == 17, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(2))
        #expect(r.stderr.contains("locked out"))
        var s = status(box)
        #expect(lockout(s).locked == true)
        #expect(lockout(s).failures == 5)

        // Locked out: the right finger is not even asked for (the reader never takes the touch).
        for policy in ["biometrics-or-passcode", "biometrics"] {
            r = box.vault(getPassword + ["--policy", policy], reader: scans("alice"), grace: 0.5)
            #expect(r.status == 17, "\(policy): \(r.stderr)")
            #expect(r.stdout.isEmpty)
            #expect(!r.stderr.contains(scanPrompt), "\(policy): \(r.stderr)")
            #expect(r.reader != took(1), "\(policy): the reader took a touch during a lockout")
        }

        // The passcode opens it and lifts the lockout; then the finger works again.
        r = box.vault(["get", "gh", "--field", "password"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        s = status(box)
        #expect(lockout(s).locked == false)
        #expect(lockout(s).failures == 0)
        r = box.vault(getPassword, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
    }

    @Test func noPasscodeToReadEndsAtTheRetryLimitInsteadOfPrompting() {
        let box = enrolledVault()
        // --no-input, and the fallback policy: the passcode would be next, but none can be read.
        var r = box.vault(getPassword + ["--policy", "biometrics-or-passcode"], reader: touches("mallory", 3), timeLimit: 30)
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(3))
        #expect(r.stderr.contains("3 fingers did not match"), "\(r.stderr)")
        r = box.vault(["get", "gh", "--field", "password"], passcode: pc)  // resets the count
        #expect(r.status == 0)
        // Without --no-input but with no terminal (the runs have no controlling terminal): the same.
        r = box.vault(["get", "gh", "--field", "password", "--policy", "biometrics-or-passcode"],
                      reader: touches("mallory", 3), timeLimit: 30)
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(3))
    }

    @Test func enrollingThroughOneVaultInvalidatesTheOthersUntilRebound() {
        let box = enrolledVault(name: "A")
        let pcB = "passcode of vault b"
        var r = box.vault(["init", "--vault", "B"] + cheapKDF, passcode: pcB)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!r.stderr.contains("enrolling"), "B binds to the enrolled finger, no new enrolment")
        r = box.vault(["add", "jira", "--vault", "B", "--password-stdin"], passcode: pcB, stdin: "jira-pw\n")
        #expect(r.status == 0)
        let getB = ["get", "jira", "--vault", "B", "--field", "password", "--no-input"]
        let getA = getPassword + ["--vault", "A"]
        r = box.vault(getB, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "jira-pw\n")
        // A third vault, restored later the way the exit-20 hint says.
        let pcC = "passcode of vault c"
        r = box.vault(["init", "--vault", "C"] + cheapKDF, passcode: pcC)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "mail", "--vault", "C", "--password-stdin"], passcode: pcC, stdin: "mail-pw\n")
        #expect(r.status == 0)
        let getC = ["get", "mail", "--vault", "C", "--field", "password", "--no-input"]

        // A second finger, enrolled through A.
        r = box.vault(["enroll", "--vault", "A", "--finger", "left-index"], passcode: pc, reader: scans("bob", 5))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.reader == took(5))
        #expect(fingers(box) == ["left-index", "right-index"])

        // B was bound to the old set: even the right finger no longer opens it.
        r = box.vault(getB, reader: scans("alice"), grace: 0.5)
        #expect(r.status == 20, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("bound"), "names the binding: \(r.stderr)")
        #expect(r.stderr.contains("--passcode") || r.stderr.contains("enroll --bind"), "says how to re-bind: \(r.stderr)")
        #expect(status(box, vault: "B")["fingerprint_bound"] as? Bool == false)

        // A was re-bound: both fingers open it.
        r = box.vault(getA, reader: scans("bob"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        r = box.vault(getA, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")

        // B's passcode re-binds B.
        r = box.vault(["enroll", "--bind", "--vault", "B"], passcode: pcB)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(status(box, vault: "B")["fingerprint_bound"] as? Bool == true)
        r = box.vault(getB, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "jira-pw\n")

        // C is restored by rotating its keys with its passcode (what the exit-20 hint's
        // 'vault unlock --passcode --rotate' does, without opening an unlock session).
        r = box.vault(getC, reader: scans("alice"), grace: 0.5)
        #expect(r.status == 20, "\(r.stderr)")
        r = box.vault(["rotate", "--vault", "C"], passcode: pcC)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("fingerprint slot bound"), "\(r.stderr)")
        r = box.vault(getC, reader: scans("bob"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "mail-pw\n")
    }

    @Test func aTamperedOrOlderPrintsFileNeverUnlocks() throws {
        let box = enrolledVault()
        let prints = box.home + "/state/vault/prints.sealed"
        func put(_ data: Data) throws {
            try data.write(to: URL(fileURLWithPath: prints))
            chmod(prints, 0o600)
        }
        let older = try Data(contentsOf: URL(fileURLWithPath: prints))
        var r = box.vault(["enroll", "--finger", "left-index"], passcode: pc, reader: scans("bob", 5))
        #expect(r.status == 0, "\(r.stderr)")
        let current = try Data(contentsOf: URL(fileURLWithPath: prints))
        #expect(current != older)

        // One bit flipped: the sealed file fails authentication (5), whatever the finger and policy.
        var flipped = current
        flipped[flipped.count / 2] ^= 0x01
        try put(flipped)
        for (finger, policy) in [("alice", "biometrics-or-passcode"), ("alice", "biometrics"), ("bob", "biometrics")] {
            r = box.vault(getPassword + ["--policy", policy], reader: scans(finger), grace: 0.5)
            #expect(r.status != 0, "\(finger) \(policy): unlocked with a tampered prints file")
            #expect(r.status == 5, "\(finger) \(policy): \(r.stderr)")
            #expect(r.stdout.isEmpty)
            #expect(!r.stdout.contains(password))
        }
        #expect(status(box)["fingerprint_bound"] as? Bool != true)

        // The older, authentic file (one finger): its domain state is not the one bound: 20.
        try put(older)
        for finger in ["alice", "bob"] {
            r = box.vault(getPassword, reader: scans(finger), grace: 0.5)
            #expect(r.status == 20, "\(finger): \(r.stderr)")
            #expect(r.stdout.isEmpty)
        }

        // Control: the current file back, and the finger opens the vault.
        try put(current)
        r = box.vault(getPassword, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
    }

    @Test func aDamagedPrintsFileCanBeReplacedWithThePasscode() throws {
        let box = enrolledVault()
        let prints = box.home + "/state/vault/prints.sealed"
        var data = try Data(contentsOf: URL(fileURLWithPath: prints))
        data[data.count / 2] ^= 0x01
        try data.write(to: URL(fileURLWithPath: prints))
        chmod(prints, 0o600)

        var r = box.vault(getPassword, reader: scans("alice"), grace: 0.5)
        #expect(r.status == 5, "\(r.stderr)")
        #expect(r.stderr.contains("prints.sealed"), "names the damaged file: \(r.stderr)")
        // The passcode does not depend on the prints.
        r = box.vault(["get", "gh", "--field", "password"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")

        // With a passcode, enrolling again resets the damaged file and brings fingerprint unlock back.
        r = box.vault(["enroll", "--finger", "right-index"], passcode: pc, reader: scans("alice", 5), grace: 0.5)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("was reset"))
        r = box.vault(getPassword, reader: scans("alice"), grace: 0.5)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
    }

    @Test func anotherReaderIsNotAChangeOfTheEnrolledPrints() {
        let box = enrolledVault()
        let bound = box.env
        // A second reader, without prints, plugged in next to the bound one (libfprint lists
        // virtual_image before virtual_device).
        box.env["FP_VIRTUAL_IMAGE"] = (box.readerSocket as NSString).deletingLastPathComponent + "/i.sock"
        box.env["FP_DRIVERS_WHITELIST"] = "virtual_device:virtual_image"
        var r = box.vault(getPassword + ["--sensor", "virtual_device"], reader: scans("alice"))
        #expect(r.status == 0, "the binding is fine when the bound reader is chosen: \(r.stderr)")
        #expect(r.stdout == password + "\n")
        r = box.vault(getPassword + ["--scan-timeout", "3"], reader: scans("alice"), grace: 0.5, timeLimit: 30)
        // Nothing was enrolled or removed: the vault uses the reader it is bound to.
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")

        // Only the other reader: the bound one is not available (15), or this one has no prints (16).
        box.useVirtualReader("virtual_image")
        r = box.vault(getPassword + ["--scan-timeout", "2"], reader: [], timeLimit: 30)
        #expect(r.status != 0)
        #expect(r.stdout.isEmpty)
        #expect(r.status == 15, "\(r.stderr)")

        // The bound reader alone: the binding is intact.
        box.env = bound
        r = box.vault(getPassword, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
    }

    @Test func unenrollRemovesTheFinger() {
        let box = enrolledVault()
        var r = box.vault(["enroll", "--finger", "left-index"], passcode: pc, reader: scans("bob", 5))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fingers(box) == ["left-index", "right-index"])

        // Without the passcode nothing is removed.
        r = box.vault(["unenroll", "right-index", "--no-input"])
        #expect(r.status == 12, "\(r.stderr)")
        #expect(fingers(box) == ["left-index", "right-index"])

        r = box.vault(["unenroll", "right-index"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fingers(box) == ["left-index"])
        r = box.vault(["unenroll", "right-index"], passcode: pc)
        #expect(r.status != 0, "removing it twice")

        // The vault follows: the remaining finger opens it, the removed one no longer does.
        r = box.vault(getPassword, reader: scans("bob"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        r = box.vault(getPassword, reader: touches("alice", 3))
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
    }

    // MARK: virtual_device_storage (match-on-chip)
    //
    // The driver keeps its "chip" in the reader object of each process: every `vault` run starts
    // with an empty chip. A persistent chip is simulated by INSERTing the enrolled id before the
    // vault lists the chip. The SCAN must come after the list (after the prompt): while the driver
    // lists, it drops any SCAN it receives ("Could not process command").

    @Test func matchOnChipReaderIdentifiesTheEnrolledPrint() {
        let box = enrolledVault("virtual_device_storage")
        let bound = status(box)["fingerprint_slot"] as? [String: Any]
        let boundState = bound?["domain_state"] as? String
        #expect(isHex64(boundState))
        #expect(bound?["sensor"] as? String == "virtual_device_storage/0")

        // An INSERTed id has the identity of the print enrolled under that id: same domain state.
        var s = status(box, reader: [.device("INSERT alice")])
        #expect(s["fingerprint_bound"] as? Bool == true)
        #expect(s["domain_state"] as? String == boundState)
        // An empty chip, or another print on it, is another state.
        s = status(box)
        #expect(s["fingerprint_bound"] as? Bool == false)
        #expect(s["domain_state"] as? String != boundState)
        s = status(box, reader: [.device("INSERT bob")])
        #expect(s["fingerprint_bound"] as? Bool == false)

        let r = box.vault(getPassword, reader: [.device("INSERT alice"), .awaitStderr(scanPrompt)] + scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        #expect(r.reader == took(2))
    }

    @Test func aPrintPlantedOnTheChipInvalidatesTheBinding() {
        let box = enrolledVault("virtual_device_storage")
        for policy in ["biometrics-or-passcode", "biometrics"] {
            let r = box.vault(getPassword + ["--policy", policy],
                              reader: [.device("INSERT alice"), .device("INSERT mallory")], grace: 1)
            #expect(r.status == 20, "\(policy): \(r.stderr)")
            #expect(r.stdout.isEmpty)
            #expect(r.reader == took(2))
            #expect(!r.stderr.contains(scanPrompt), "no scan once the chip changed: \(r.stderr)")
        }
        #expect(status(box, reader: [.device("INSERT alice"), .device("INSERT mallory")])["fingerprint_bound"] as? Bool == false)
        // Control: the chip as enrolled opens the vault.
        let r = box.vault(getPassword, reader: [.device("INSERT alice"), .awaitStderr(scanPrompt)] + scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
    }

    // MARK: virtual_image (NBIS minutiae matching)

    @Test func imageReaderMatchesByMinutiae() {
        let box = enrolledVault("virtual_image", enrolment: [.image(Array(repeating: fixtures + "probe.pgm", count: 5))])
        #expect(status(box)["fingerprint_bound"] as? Bool == true)

        var r = box.vault(getPassword, reader: [.image([fixtures + "matching.pgm"])])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        #expect(r.reader == took(1))

        r = box.vault(getPassword + ["--policy", "biometrics"],
                      reader: [.image([fixtures + "nonmatching.pgm", fixtures + "whorl.pgm", fixtures + "nonmatching.pgm"])])
        #expect(r.status == 10, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
        #expect(r.reader == took(1))
        #expect(r.stderr.contains("no match, 2 tries left"), "\(r.stderr)")
        #expect(r.stderr.contains("no match, 1 try left"))
        #expect(lockout(status(box)).failures == 3)

        // The whorl alone, as the first try of a run (then the matching impression).
        r = box.vault(getPassword, reader: [.image([fixtures + "whorl.pgm", fixtures + "matching.pgm"])])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("no match, 2 tries left"), "the whorl was refused: \(r.stderr)")
        #expect(r.stdout == password + "\n")
        #expect(lockout(status(box)).failures == 0)
    }

    @Test func changingThePasscodeResetsTheLockoutLikeEveryPasscodeUnlock() {
        let box = enrolledVault()
        var r = box.vault(getPassword + ["--policy", "biometrics"], reader: touches("mallory", 3))
        #expect(r.status == 10, "\(r.stderr)")
        r = box.vault(getPassword + ["--policy", "biometrics"], reader: touches("mallory", 2))
        #expect(r.status == 17, "\(r.stderr)")
        #expect(lockout(status(box)).failures == 5)
        func keyID() -> String? { (status(box)["fingerprint_slot"] as? [String: Any])?["key_id"] as? String }
        let before = keyID()
        r = box.vault(["passcode", "--new-passcode-fd", "4"], passcode: pc, fds: [4: "a new passcode\n"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(lockout(status(box)).failures == 0, "vault passcode is a passcode unlock too")
        let rebound = keyID()
        #expect(rebound != nil && rebound != before, "a new passcode re-binds the fingerprint slot")
        r = box.vault(getPassword, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == password + "\n")
        // Each fingerprint unlock re-seals the slot with a key of its own.
        let rolled = keyID()
        #expect(rolled != nil && rolled != rebound, "\(String(describing: rolled))")
        r = box.vault(getPassword, reader: scans("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(keyID() != rolled)
    }

    @Test func onlyTheVaultThatManagesTheFingerprintsLiftsALockoutAndEnrols() {
        let box = enrolledVault(name: "A")
        let pcB = "passcode of vault b"
        var r = box.vault(["init", "--vault", "B"] + cheapKDF, passcode: pcB)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("vault 'B' does not manage your fingerprints"), "\(r.stderr)")
        r = box.vault(["add", "jira", "--vault", "B", "--password-stdin"], passcode: pcB, stdin: "jira-pw\n")
        #expect(r.status == 0)
        let getB = ["get", "jira", "--vault", "B", "--field", "password", "--no-input", "--policy", "biometrics"]
        _ = box.vault(getB, reader: touches("mallory", 3))
        r = box.vault(getB, reader: touches("mallory", 2))
        #expect(r.status == 17, "\(r.stderr)")
        // B's passcode opens B, says the lockout stays, and it does.
        r = box.vault(["get", "jira", "--vault", "B", "--field", "password"], passcode: pcB)
        #expect(r.status == 0 && r.stdout == "jira-pw\n", "\(r.stderr)")
        #expect(r.stderr.contains("fingerprint stays locked out: vault 'B' does not manage your fingerprints"), "\(r.stderr)")
        #expect(lockout(status(box, vault: "B")).locked == true)
        // B cannot enrol a finger.
        r = box.vault(["enroll", "--vault", "B", "--finger", "left-index"], passcode: pcB, reader: scans("bob", 5))
        #expect(r.status == 10 && r.stderr.contains("manages your fingerprints"), "\(r.stderr)")
        #expect(fingers(box) == ["right-index"])
        // A's passcode lifts it: the finger opens B again.
        r = box.vault(getPassword + ["--vault", "A"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(lockout(status(box, vault: "B")).failures == 0)
        r = box.vault(getB, reader: scans("alice"))
        #expect(r.status == 0 && r.stdout == "jira-pw\n", "\(r.stderr)")
    }

    @Test func deletingTheAuthorityRecordOrForgingItDoesNotLiftALockout() throws {
        let box = enrolledVault()
        _ = box.vault(getPassword + ["--policy", "biometrics"], reader: touches("mallory", 3))
        _ = box.vault(getPassword + ["--policy", "biometrics"], reader: touches("mallory", 2))
        #expect(lockout(status(box)).locked == true)
        let auth = box.home + "/state/vault/auth.sealed"
        // Garbage in place of the record reads as locked out.
        try Data(repeating: 7, count: 200).write(to: URL(fileURLWithPath: auth))
        chmod(auth, 0o600)
        #expect(lockout(status(box)).locked == true)
        let r = box.vault(getPassword, reader: scans("alice"), grace: 0.5)
        #expect(r.status == 17, "\(r.stderr)")
        #expect(r.stdout.isEmpty)
    }

}
