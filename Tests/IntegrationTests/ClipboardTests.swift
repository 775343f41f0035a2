import Foundation
import Testing

/// `vault get --clip` against a real X server (Xvfb) and xclip.
@Suite struct ClipboardTests {
    @Test func clipCopiesThenClearsTheClipboard() throws {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "site", "--password-stdin"], passcode: Sandbox.passcode, stdin: "clip-secret-5\n")
        var r = box.vault(["get", "site", "--clip"], passcode: Sandbox.passcode)
        #expect(r.status == 1, "without a display there is no clipboard")
        #expect(r.stderr.contains("no graphical session"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)

        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/Xvfb"), FileManager.default.isExecutableFile(atPath: "/usr/bin/xclip") else {
            print("clipCopiesThenClearsTheClipboard: X part skipped: install xvfb and xclip")
            return
        }
        let display = ":\(Int.random(in: 400...900))"
        let xvfb = start("/usr/bin/Xvfb", [display, "-nolisten", "tcp"], env: ["PATH": "/usr/bin:/bin"])
        defer { kill(xvfb, SIGKILL); _ = reap(xvfb) }
        box.env["DISPLAY"] = display
        box.env["PATH"] = "/usr/bin:/bin"
        var ready = false
        for _ in 0..<50 where !ready {
            usleep(100_000)
            ready = spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: box.env, timeLimit: 5).stderr.contains("Can't open display") == false
        }
        #expect(ready, "Xvfb did not start")
        r = box.vault(["get", "site", "--clip", "--clear-after", "2s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.isEmpty, "the secret does not go to stdout")
        #expect(r.stderr.contains("cleared in 2s"))
        let pasted = spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: box.env, timeLimit: 5)
        #expect(pasted.stdout == "clip-secret-5")
        usleep(3_500_000)
        let after = spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: box.env, timeLimit: 5)
        #expect(!after.stdout.contains("clip-secret-5"), "the clipboard was not cleared")
        let log = json(box.vault(["log", "--json"], passcode: Sandbox.passcode).stdout)["records"] as? [[String: Any]] ?? []
        #expect(log.contains { $0["command"] as? String == "get --clip" })

        // What the clipboard held before comes back when the value is cleared (as pass does).
        let owner = start("/usr/bin/xclip", ["-selection", "clipboard", "-in"], env: box.env, fds: [0: "what I copied before"])
        _ = reap(owner)
        #expect(spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: box.env, timeLimit: 5).stdout == "what I copied before")
        r = box.vault(["get", "site", "--clip", "--clear-after", "2s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: box.env, timeLimit: 5).stdout == "clip-secret-5")
        usleep(3_500_000)
        let restored = spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: box.env, timeLimit: 5)
        #expect(restored.stdout == "what I copied before", "the previous content was not restored: \(restored.stdout.debugDescription)")
    }
}
