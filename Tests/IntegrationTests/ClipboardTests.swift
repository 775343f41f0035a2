import Foundation
import Testing

/// `vault get --clip` against a real X server (Xvfb), read back with xclip: through
/// `vault-clipboard`, vault's own selection owner, and through xclip when that is missing.
@Suite struct ClipboardTests {
    static let secret = "clip-secret-5"

    /// A vault with one item whose password is ``secret``.
    static func sandbox() -> Sandbox {
        let box = Sandbox()
        box.initVault()
        box.vault(["add", "site", "--password-stdin"], passcode: Sandbox.passcode, stdin: secret + "\n")
        return box
    }

    @Test func clipCopiesThenClearsTheClipboard() throws {
        let box = Self.sandbox()
        var r = box.vault(["get", "site", "--clip"], passcode: Sandbox.passcode)
        #expect(r.status == 1, "without a display there is no clipboard")
        #expect(r.stderr.contains("no graphical session"), "\(r.stderr)")
        #expect(r.stdout.isEmpty)

        guard let x = XServer(for: box, "clipCopiesThenClearsTheClipboard") else { return }
        r = box.vault(["get", "site", "--clip", "--clear-after", "2s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.isEmpty, "the secret does not go to stdout")
        #expect(r.stderr.contains("cleared in 2s"))
        #expect(x.paste() == Self.secret)
        usleep(3_500_000)
        #expect(!x.paste().contains(Self.secret), "the clipboard was not cleared")
        #expect(x.owners().isEmpty, "vault-clipboard outlived a clipboard it emptied")
        let log = json(box.vault(["log", "--json"], passcode: Sandbox.passcode).stdout)["records"] as? [[String: Any]] ?? []
        #expect(log.contains { $0["command"] as? String == "get --clip" })
    }

    /// The owner offers the hint clipboard managers skip, serves the text targets, keeps the
    /// value out of its argv and environment, and at the deadline gives back what the clipboard
    /// held before, without the hint, with the value gone from its memory.
    @Test func theOwnerOffersThePasswordManagerHintAndGivesBackThePreviousText() throws {
        let box = Self.sandbox()
        // Longer than libxcb's request header and an event: a copy of it in libxcb's output
        // queue or in a stack frame would outlive the wipe.
        let secret = "clip-" + String(repeating: "long-secret-", count: 10) + "end-of-secret"
        box.vault(["add", "long", "--password-stdin"], passcode: Sandbox.passcode, stdin: secret + "\n")
        guard let x = XServer(for: box, "theOwnerOffersThePasswordManagerHint") else { return }
        x.copy("what I copied before")
        #expect(x.paste() == "what I copied before")
        let r = box.vault(["get", "long", "--clip", "--clear-after", "4s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        let targets = x.paste("TARGETS").split(separator: "\n").map(String.init)
        #expect(targets.contains("x-kde-passwordManagerHint"), "\(targets)")
        #expect(targets.contains("UTF8_STRING"), "\(targets)")
        #expect(x.paste("x-kde-passwordManagerHint") == "secret")
        #expect(x.paste("UTF8_STRING") == secret)
        #expect(x.paste("STRING") == secret)
        #expect(x.paste("image/png").isEmpty, "a target not offered is refused")

        let owners = x.owners()
        #expect(owners.count == 1, "one vault-clipboard for this display: \(owners)")
        let owner = try #require(owners.first)
        let argv = procFile("/proc/\(owner)/cmdline") ?? Data()
        let environ = procFile("/proc/\(owner)/environ") ?? Data()
        #expect(!argv.isEmpty)
        #expect(argv.range(of: Data(secret.utf8)) == nil, "the value is in the owner's argv")
        #expect(environ.range(of: Data(secret.utf8)) == nil, "the value is in the owner's environment")
        let names = Set(String(decoding: environ, as: UTF8.self).split(separator: "\0").map { String($0.prefix { $0 != "=" }) })
        #expect(names.isSubset(of: ["DISPLAY", "XAUTHORITY", "HOME"]), "\(names)")
        let seenBefore = processMemory(owner, contains: secret)
        if seenBefore == nil { print("theOwnerOffersThePasswordManagerHint: memory part skipped: /proc/\(owner)/mem needs root") }
        #expect(seenBefore != false, "the value is not in guarded memory where the scan can see it")

        usleep(5_000_000)
        #expect(x.paste() == "what I copied before", "the previous content was not restored")
        #expect(!x.paste("TARGETS").contains("x-kde-passwordManagerHint"), "the previous content is not a secret")
        #expect(x.owners() == [owner], "the owner serves the previous content until someone copies")
        if seenBefore != nil {
            #expect(processMemory(owner, contains: secret) == false, "the value is still in the owner's memory")
            // A copy cut short by later requests counts too.
            #expect(processMemory(owner, contains: "end-of-secret") == false, "a piece of the value is still in the owner's memory")
        }
        x.copy("next")
        usleep(500_000)
        #expect(x.owners().isEmpty, "the owner stays after another client copied")
        #expect(x.paste() == "next")
    }

    /// What another client copies during the delay stays: the owner exits without touching it.
    @Test func aCopyByAnotherClientDuringTheDelayStays() throws {
        let box = Self.sandbox()
        guard let x = XServer(for: box, "aCopyByAnotherClientDuringTheDelayStays") else { return }
        x.copy("what I copied before")
        let r = box.vault(["get", "site", "--clip", "--clear-after", "3s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(x.paste() == Self.secret)
        x.copy("copied meanwhile")
        var gone = false
        for _ in 0..<20 where !gone {
            usleep(100_000)
            gone = x.owners().isEmpty
        }
        #expect(gone, "vault-clipboard did not end when it lost the clipboard")
        usleep(3_500_000)
        #expect(x.paste() == "copied meanwhile")
    }

    /// A secret another owner marked with the hint (an earlier `get --clip`) is not "what the
    /// clipboard held before": the second copy's deadline empties the clipboard.
    @Test func aValueMarkedSecretIsNotGivenBack() throws {
        let box = Self.sandbox()
        box.vault(["add", "other", "--password-stdin"], passcode: Sandbox.passcode, stdin: "other-secret-7\n")
        guard let x = XServer(for: box, "aValueMarkedSecretIsNotGivenBack") else { return }
        var r = box.vault(["get", "other", "--clip", "--clear-after", "30s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(x.paste() == "other-secret-7")
        r = box.vault(["get", "site", "--clip", "--clear-after", "2s"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(x.paste() == Self.secret)
        usleep(3_500_000)
        #expect(x.paste().isEmpty, "a secret came back as the previous content")
        #expect(x.owners().isEmpty)
    }

    /// Without `vault-clipboard` next to vault, xclip copies (no hint) and `vault clipboard-clear`
    /// puts back what the clipboard held before.
    @Test func withoutTheOwnerXclipCopiesWithoutTheHint() throws {
        let box = Self.sandbox()
        guard let x = XServer(for: box, "withoutTheOwnerXclipCopiesWithoutTheHint") else { return }
        let folder = box.home + "/bin"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        // cp, not a copy in this process: a descriptor open for writing that a parallel test's
        // child inherits would make running the copy fail with ETXTBSY.
        #expect(spawn("/bin/cp", [vaultBinary, folder + "/vault"], env: ["PATH": "/usr/bin:/bin"]).status == 0)
        x.copy("what I copied before")
        let r = spawn(folder + "/vault", ["get", "site", "--clip", "--clear-after", "2s", "--passcode-fd", "3"],
                      env: box.env, fds: [3: Sandbox.passcode + "\n"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(x.owners().isEmpty)
        #expect(x.paste() == Self.secret)
        #expect(!x.paste("TARGETS").contains("x-kde-passwordManagerHint"))
        usleep(3_500_000)
        #expect(x.paste() == "what I copied before", "the previous content was not restored")
    }

    /// A display with no X server behind it: the owner says why, vault exits 1, nothing of the
    /// value is printed.
    @Test func aDisplayWithoutAServerIsAnError() {
        let box = Self.sandbox()
        var number = Int.random(in: 901...999)
        while FileManager.default.fileExists(atPath: "/tmp/.X11-unix/X\(number)") { number = Int.random(in: 901...999) }
        box.env["DISPLAY"] = ":\(number)"
        let r = box.vault(["get", "site", "--clip"], passcode: Sandbox.passcode)
        #expect(r.status == 1, "\(r.stderr)")
        #expect(r.stderr.contains("vault: error: cannot copy to the clipboard: cannot talk to the X server of ':\(number)'"), "\(r.stderr)")
        #expect(!r.stderr.contains(Self.secret) && !r.stdout.contains(Self.secret))
    }

    @Test func onlyTheOwnerLinksLibxcb() {
        let env = ["PATH": "/usr/bin:/bin"]
        #expect(!spawn("/usr/bin/ldd", [vaultBinary], env: env).stdout.contains("libxcb"), "vault links libxcb")
        #expect(spawn("/usr/bin/ldd", [ownerBinary], env: env).stdout.contains("libxcb.so"), "vault-clipboard is where libxcb is")
    }
}

/// The built `vault-clipboard`, next to `vault`.
let ownerBinary: String = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent()
    .appendingPathComponent("vault-clipboard").path

/// A private Xvfb for one test on a display of its own (set in the sandbox's environment), with
/// xclip to copy and paste; killed when the value goes.
final class XServer {
    let display: String
    private let pid: pid_t
    private let env: [String: String]

    /// nil (after printing why `test` skips its X part) when Xvfb or xclip is not installed.
    init?(for box: Sandbox, _ test: String) {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/Xvfb"), FileManager.default.isExecutableFile(atPath: "/usr/bin/xclip") else {
            print("\(test): X part skipped: install xvfb and xclip")
            return nil
        }
        var number = Int.random(in: 400...900)
        while FileManager.default.fileExists(atPath: "/tmp/.X11-unix/X\(number)") { number = Int.random(in: 400...900) }
        display = ":\(number)"
        pid = start("/usr/bin/Xvfb", [display, "-nolisten", "tcp"], env: ["PATH": "/usr/bin:/bin"])
        box.env["DISPLAY"] = display
        box.env["PATH"] = "/usr/bin:/bin"
        env = box.env
        var ready = false
        for _ in 0..<50 where !ready {
            usleep(100_000)
            ready = !spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"], env: env, timeLimit: 5).stderr.contains("Can't open display")
        }
        #expect(ready, "Xvfb did not start")
    }

    deinit {
        kill(pid, SIGKILL)
        _ = reap(pid)
    }

    /// The clipboard in `target` (xclip's default, UTF8_STRING, when nil); empty when refused.
    func paste(_ target: String? = nil) -> String {
        spawn("/usr/bin/xclip", ["-selection", "clipboard", "-out"] + (target.map { ["-t", $0] } ?? []), env: env, timeLimit: 5).stdout
    }

    /// Copies `text` as another client would (xclip stays to serve it).
    func copy(_ text: String) {
        _ = reap(start("/usr/bin/xclip", ["-selection", "clipboard", "-in"], env: env, fds: [0: text]))
    }

    /// The pids of the `vault-clipboard` processes on this display.
    func owners() -> [pid_t] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        let program = URL(fileURLWithPath: ownerBinary).resolvingSymlinksInPath().path
        return names.compactMap(pid_t.init).filter { pid in
            guard (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) == program,
                  let environ = procFile("/proc/\(pid)/environ") else { return false }
            return environ.split(separator: 0).contains(Data("DISPLAY=\(display)".utf8))
        }.sorted()
    }
}

/// Whether `text` is anywhere in the readable memory of process `pid` (its maps read through
/// /proc/PID/mem); nil when that cannot be read (not root: the owner is not dumpable).
func processMemory(_ pid: pid_t, contains text: String) -> Bool? {
    guard let mapsBytes = procFile("/proc/\(pid)/maps") else { return nil }
    let maps = String(decoding: mapsBytes, as: UTF8.self)
    let fd = open("/proc/\(pid)/mem", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    let needle = Data(text.utf8)
    var readAny = false
    for line in maps.split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count >= 2, fields[1].hasPrefix("r") else { continue }
        let range = fields[0].split(separator: "-").compactMap { UInt64($0, radix: 16) }
        guard range.count == 2, range[1] > range[0], range[1] - range[0] <= 1 << 30 else { continue }
        var region = Data(count: Int(range[1] - range[0]))
        let n = region.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(range[0])) }
        guard n > 0 else { continue }
        readAny = true
        if region.prefix(n).range(of: needle) != nil { return true }
    }
    return readAny ? false : nil
}

/// A /proc file read to its end with read(2) (its size says 0, and Foundation reads only part).
func procFile(_ path: String) -> Data? {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out = Data(), chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = read(fd, &chunk, chunk.count)
        if n < 0 && errno == EINTR { continue }
        guard n >= 0 else { return nil }
        if n == 0 { return out }
        out.append(contentsOf: chunk[0..<n])
    }
}
