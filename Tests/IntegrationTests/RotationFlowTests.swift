import Foundation
import Testing

/// Issue 5's flow on libfprint's virtual_device, through the binary: a finger enrolled through
/// vault A invalidates B's fingerprint slot; B's passcode and a rotation bring the finger back,
/// and a session of B opened before its rotation ends with exit 19.
@Suite struct RotationFlowTests {
    let pcA = "passcode of vault a", pcB = "passcode of vault b"
    let cheap = ["--kdf-memory", "8", "--kdf-ops", "1"]

    func touches(_ id: String, _ n: Int = 1) -> [ReaderStep] { Array(repeating: .device("SCAN \(id)"), count: n) }

    @Test func enrolThroughAThenRotateBWithItsPasscode() {
        let box = Sandbox()
        box.useVirtualReader("virtual_device")
        var r = box.vault(["init", "--vault", "A"] + cheap, passcode: pcA, reader: touches("alice", 5))
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["init", "--vault", "B"] + cheap, passcode: pcB)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "jira", "--vault", "B", "--password-stdin"], passcode: pcB, stdin: "jira-pw\n")
        #expect(r.status == 0)
        let getB = ["get", "jira", "--vault", "B", "--field", "password", "--no-input"]

        // A session of B, opened by a finger.
        r = box.vault(["unlock", "--scope", "user", "--vault", "B", "--no-input", "--timeout", "5m"], reader: touches("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(box.vault(getB).stdout == "jira-pw\n")

        // A second finger, enrolled through A (with A's passcode): A is rotated and re-bound.
        r = box.vault(["enroll", "--vault", "A", "--finger", "left-index"], passcode: pcA, reader: touches("bob", 5))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("re-sealed 0 items"))

        // B's fingerprint slot is bound to the old prints: a finger unlock of B exits 20 with the hint.
        r = box.vault(["unlock", "--scope", "user", "--vault", "B", "--no-input"], reader: touches("alice"), grace: 0.5)
        #expect(r.status == 20, "\(r.stderr)")
        #expect(r.stderr.contains("vault unlock --passcode --rotate"))

        // The hint: B's passcode, new keys, bound to the current prints, and a new session.
        let generation = json(box.vault(["status", "--vault", "B", "--json"]).stdout)["key_generation"] as? Int
        r = box.vault(["unlock", "--scope", "user", "--vault", "B", "--passcode", "--rotate"], passcode: pcB)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("re-sealed 1 item of"))
        let status = json(box.vault(["status", "--vault", "B", "--json"]).stdout)
        #expect(status["key_generation"] as? Int == (generation ?? 0) + 1)
        #expect(status["fingerprint_bound"] as? Bool == true)
        #expect(box.vault(getB).stdout == "jira-pw\n")

        // Another rotation while that session is open: the session ends, exit 19 (once).
        r = box.vault(["rotate", "--vault", "B"], passcode: pcB)
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(getB)
        #expect(r.status == 19, "\(r.stderr)")
        #expect(r.stdout.isEmpty)

        // And B opens by finger again, either finger.
        r = box.vault(getB, reader: touches("alice"))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "jira-pw\n")
        r = box.vault(getB, reader: touches("bob"))
        #expect(r.stdout == "jira-pw\n")
    }
}
