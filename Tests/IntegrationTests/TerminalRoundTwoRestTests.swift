import Foundation
import Testing

// The person at the terminal, round two, the rest (issue 25, items 9-15): the built `vault` on a
// pseudo-terminal, its screen read back; each test fails on the code before its change.

private let pc = Sandbox.passcode
private let cheapKDF = ["--kdf-memory", "8", "--kdf-ops", "1"]

/// A sandbox with a virtual reader whose vault has 'alice' enrolled (as right-index) and bound, and 'gh'.
private func fingerVault(sourceLocation: SourceLocation = #_sourceLocation) -> Sandbox {
    let box = Sandbox()
    box.useVirtualReader("virtual_device")
    let r = box.vault(["init"] + cheapKDF, passcode: pc, reader: Array(repeating: .device("SCAN alice"), count: 5))
    #expect(r.status == 0, "init: \(r.stderr)", sourceLocation: sourceLocation)
    let a = box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: "gh-pw\n")
    #expect(a.status == 0, "add: \(a.stderr)", sourceLocation: sourceLocation)
    return box
}

@Suite struct TerminalRoundTwoRestTests {
    // MARK: 9. asking only for what can help

    @Test func enrollingAnEnrolledFingerAndRemovingAMissingOneAskNoPasscode() {
        let box = fingerVault()
        // On a terminal, with no passcode given: refused before the passcode is asked for.
        var t = TerminalRun(["enroll", "--finger", "right-index"], env: box.env)
        #expect(t.finish(timeout: 30) == 4, "\(t.screen)")
        #expect(t.screen.contains("right-index is already enrolled") && !t.screen.contains("passcode for vault"), "\(t.screen)")
        #expect(t.screen.contains("vault: hint: remove it first with 'vault unenroll right-index'"), "\(t.screen)")
        t = TerminalRun(["unenroll", "left-thumb"], env: box.env)
        #expect(t.finish(timeout: 30) == 3, "\(t.screen)")
        #expect(t.screen.contains("left-thumb is not enrolled") && !t.screen.contains("passcode for vault"), "\(t.screen)")
        // The same answers to a script that gives the passcode.
        #expect(box.vault(["unenroll", "left-thumb"], passcode: pc).status == 3)
        #expect(box.vault(["enroll", "--finger", "right-index"], passcode: pc).status == 4)
    }

    @Test func aVaultWithoutFingersIsToldToEnrollNotToBind() {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "gh", "--password-stdin"], passcode: pc, stdin: "gh-pw\n")
        // A rotation with no finger enrolled: the way to a fingerprint slot is 'vault enroll'.
        let r = box.vault(["rotate"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("no finger enrolled: enrol one with 'vault enroll'") && !r.stderr.contains("--bind"), "\(r.stderr)")
    }
}
