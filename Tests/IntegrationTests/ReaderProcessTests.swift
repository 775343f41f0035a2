import Foundation
import Testing

/// libfprint and GLib live in `vault-reader`, a child started only when a command needs the
/// reader: `vault get`, `ls` and the credential helpers never load them.
@Suite struct ReaderProcessTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    init() {
        box.initVault()
        box.vault(["add", "db", "--username", "admin", "--password-stdin"], passcode: pc, stdin: "db-secret-9\n")
    }

    /// The shared objects of a C library stack that must not be mapped.
    static let readerLibraries = ["libfprint", "libglib-2.0", "libgobject-2.0", "libgio-2.0", "libgusb"]
    /// What `vault` neither links nor loads unless a command needs it: the reader's libraries
    /// and those opened on demand (OnDemandLibraryTests).
    static let unneeded = readerLibraries + OnDemandLibraryTests.onDemand

    @Test func theVaultBinaryDoesNotNeedLibfprint() {
        let r = spawn("/usr/bin/ldd", [vaultBinary], env: ["PATH": "/usr/bin:/bin"])
        #expect(r.status == 0)
        for lib in Self.unneeded { #expect(!r.stdout.contains(lib), "vault links \(lib):\n\(r.stdout)") }
        let reader = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("vault-reader").path
        #expect(spawn("/usr/bin/ldd", [reader], env: ["PATH": "/usr/bin:/bin"]).stdout.contains("libfprint-2"),
                "vault-reader, next to vault, is the process that loads libfprint")
    }

    /// A running `vault get` (held at the passcode read, after it opened the vault and chose its
    /// authority) maps no libfprint and no GLib; it then prints the secret.
    @Test func aRunningGetMapsNoLibfprint() throws {
        box.useVirtualReader("virtual_device")   // a reader is configured: nothing may load it anyway
        var feed: [Int32] = [0, 0], out: [Int32] = [0, 0]
        #expect(pipe(&feed) == 0 && pipe(&out) == 0)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, out[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, feed[0], 3)
        var attr = childAttributes(newSession: true)
        defer { posix_spawnattr_destroy(&attr) }
        let args = [vaultBinary, "get", "db", "--field", "password", "--no-input", "--passcode-fd", "3"]
        let argv = args.map { strdup($0) } + [nil]
        let envp = box.env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        var pid: pid_t = 0
        #expect(posix_spawn(&pid, vaultBinary, &actions, &attr, argv, envp) == 0)
        argv.forEach { free($0) }
        envp.forEach { free($0) }
        close(feed[0])
        close(out[1])
        defer { _ = reap(pid) }

        // Wait until it blocks in read(3, ...): /proc/PID/syscall starts with "0 0x3".
        let deadline = Date().addingTimeInterval(10)
        var blocked = false
        while Date() < deadline && !blocked {
            let call = (try? String(contentsOfFile: "/proc/\(pid)/syscall", encoding: .utf8)) ?? ""
            blocked = call.hasPrefix("0 0x3 ")
            if !blocked { usleep(5000) }
        }
        #expect(blocked, "vault get never waited for the passcode on fd 3")
        // cat reads the whole file (Foundation stops at the size stat reports for /proc files).
        let maps = spawn("/bin/cat", ["/proc/\(pid)/maps"], env: ["PATH": "/usr/bin:/bin"]).stdout
        #expect(maps.contains("libsodium"), "the maps of the running get were read")
        #expect(maps.contains("libsqlite3"), "without a session, get opened the database (and so loaded SQLite)")
        for lib in Self.unneeded where lib != "libsqlite3" { #expect(!maps.contains(lib), "a running vault get maps \(lib)") }

        _ = (pc + "\n").withCString { write(feed[1], $0, strlen($0)) }
        close(feed[1])
        var got = [UInt8](repeating: 0, count: 256)
        var text = ""
        while true {
            let n = read(out[0], &got, got.count)
            if n <= 0 { break }
            text += String(decoding: got[..<n], as: UTF8.self)
        }
        close(out[0])
        #expect(text == "db-secret-9\n")
    }

    /// Everything the loader loads during `get` and `ls` in a session and a git credential lookup
    /// (LD_DEBUG=libs also reports a dlopen): no libfprint, no GLib, none of the on-demand libraries.
    @Test func getLsAndTheGitHelperLoadNoReaderLibraries() throws {
        #expect(box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc).status == 0)
        defer { box.vault(["lock", "--all"]) }
        let traced = box.env.merging(["LD_DEBUG": "libs"]) { $1 }
        let get = spawn(vaultBinary, ["get", "db", "--field", "password", "--no-input"], env: traced)
        #expect(get.status == 0 && get.stdout == "db-secret-9\n", "\(get.stderr.suffix(400))")
        #expect(get.stderr.contains("libsodium"), "LD_DEBUG=libs reported the loads")
        let ls = spawn(vaultBinary, ["ls", "--no-input"], env: traced)
        #expect(ls.status == 0 && ls.stdout == "db\n")
        let bin = box.home + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/git-credential-vault", withDestinationPath: vaultBinary)
        let helper = spawn(bin + "/git-credential-vault", ["get"], env: traced, stdin: "protocol=https\nhost=example.org\n\n")
        #expect(helper.stderr.contains("libsodium"))
        for run in [get, ls, helper] {
            for lib in Self.unneeded { #expect(!run.stderr.contains(lib), "loaded \(lib)") }
        }
    }

    /// vault killed during a scan: its `vault-reader` sees the link close, cancels the scan and
    /// exits (nothing keeps the reader open behind a dead vault).
    @Test func theReaderProcessEndsWithAVaultKilledMidScan() throws {
        let box = Sandbox()
        box.useVirtualReader("virtual_device")
        let made = box.vault(["init", "--vault", "f", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc,
                             reader: Array(repeating: .device("SCAN alice"), count: 5))
        #expect(made.status == 0, "\(made.stderr)")
        unlink(box.readerSocket)   // a leftover of init's reader; the scan's open makes it anew
        let vault = start(vaultBinary, ["ls", "--vault", "f", "--no-input", "--policy", "biometrics"], env: box.env)
        var reader: Int32?
        let deadline = Date().addingTimeInterval(15)
        while reader == nil && Date() < deadline {
            let kids = (try? String(contentsOfFile: "/proc/\(vault)/task/\(vault)/children", encoding: .utf8)) ?? ""
            reader = kids.split(separator: " ").compactMap { Int32($0) }.first { pid in
                ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) ?? "").hasSuffix("/vault-reader")
            }
            if reader == nil { usleep(10_000) }
        }
        let child = try #require(reader, "vault ls started vault-reader for the scan")
        // Wait until the scan runs (the virtual reader's socket exists while the device is open).
        let open = Date().addingTimeInterval(15)
        while !FileManager.default.fileExists(atPath: box.readerSocket) && Date() < open { usleep(10_000) }
        #expect(FileManager.default.fileExists(atPath: box.readerSocket), "the reader process opened the reader")
        usleep(200_000)
        kill(vault, SIGKILL)
        _ = reap(vault)
        var gone = false
        let end = Date().addingTimeInterval(5)
        while !gone && Date() < end {
            let stat = (try? String(contentsOfFile: "/proc/\(child)/stat", encoding: .utf8)) ?? ""
            gone = stat.isEmpty || stat.contains(") Z ")
            if !gone { usleep(10_000) }
        }
        #expect(gone, "vault-reader \(child) outlived the vault that started it")
    }
}
