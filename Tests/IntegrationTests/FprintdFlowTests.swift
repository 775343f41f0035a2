import Foundation
import Testing

/// The person of issue 15: a finger enrolled in the system's settings (here `fprintd-enroll`, as
/// GNOME Settings does over the same D-Bus API) unlocks `vault` through vault-authd's fprintd
/// backend, and a change of the enrolled fingers outside vault invalidates the fingerprint access
/// until the passcode re-binds it (as the user vault-fp: SystemAuthorityTests, run at the same time, has vault-it). Real fprintd on a private bus (polkit stand-in from
/// python3-dbusmock), vault-authd as vault-auth with CAP_DAC_READ_SEARCH, vault as an ordinary
/// user. Needs root and Debian's fprintd, dbus and python3-dbusmock (Vault/setup.sh).
@Suite(.serialized, .enabled(if: getuid() == 0 && FileManager.default.fileExists(atPath: "/usr/libexec/fprintd")
                             && FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/dbusmock"),
                             "needs root and fprintd, dbus, python3-dbusmock (apt-get install fprintd dbus python3-dbusmock)"))
struct FprintdFlowTests {
    static let daemonUser = "vault-auth", person = "vault-fp"
    let base: String
    let socket: String
    let busAddress: String
    let daemon: pid_t
    /// The person's home, this test's own (two runs never share a vault).
    var home: String { base + "/home" }

    static func sh(_ command: String, env: [String: String] = [:]) -> RunResult {
        spawn("/bin/bash", ["-c", command], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"].merging(env) { $1 }, timeLimit: 60)
    }

    init() throws {
        // As the package declares it (the Debian package test expects its comment).
        _ = try? ensureDaemonUser()
        _ = Self.sh("id -u \(Self.person) >/dev/null 2>&1 || useradd -m -s /bin/sh \(Self.person)")
        base = "/tmp/vault-fprintd-it-" + UUID().uuidString.prefix(8)
        socket = base + "/run/socket"
        let conf = packageRoot + "/Tests/VaultAuthorityTests/Fixtures/system-bus.conf.in"
        // Bus, polkit stand-in (allowing what vault-authd needs), fprintd on virtual_device.
        let up = Self.sh("""
            set -e
            b=\(base); install -d -m 0755 $b $b/fp-state
            install -d -o \(Self.daemonUser) -g \(Self.daemonUser) -m 0755 $b/run
            install -d -o \(Self.daemonUser) -g \(Self.daemonUser) -m 0700 $b/state
            install -d -o \(Self.person) -g \(Self.person) -m 0700 $b/home
            sed "s|@SOCK@|$b/system_bus_socket|" \(conf) > $b/bus.conf
            setsid dbus-daemon --config-file=$b/bus.conf --nofork --print-address=3 3>$b/address >$b/bus.log 2>&1 </dev/null & echo $! > $b/bus.pid
            for i in $(seq 200); do [ -s $b/address ] && break; sleep 0.02; done
            export DBUS_SYSTEM_BUS_ADDRESS=$(head -1 $b/address)
            has() { gdbus call --system -d org.freedesktop.DBus -o /org/freedesktop/DBus -m org.freedesktop.DBus.NameHasOwner $1 2>/dev/null | grep -q true; }
            PYTHONUNBUFFERED=1 setsid /usr/bin/python3 -m dbusmock --system --template polkitd >$b/polkit.log 2>&1 </dev/null & echo $! > $b/polkit.pid
            for i in $(seq 300); do has org.freedesktop.PolicyKit1 && break; sleep 0.02; done
            gdbus call --system -d org.freedesktop.PolicyKit1 -o /org/freedesktop/PolicyKit1/Authority -m org.freedesktop.DBus.Mock.SetAllowed \
              "['net.reactivated.fprint.device.verify','net.reactivated.fprint.device.enroll','net.reactivated.fprint.device.setusername']" >/dev/null
            FP_DRIVERS_WHITELIST=virtual_device FP_VIRTUAL_DEVICE=$b/reader.sock STATE_DIRECTORY=$b/fp-state setsid /usr/libexec/fprintd -t \
              >$b/fprintd.log 2>&1 </dev/null & echo $! > $b/fprintd.pid
            for i in $(seq 300); do has net.reactivated.Fprint && break; sleep 0.02; done
            has net.reactivated.Fprint
            head -1 $b/address
            """)
        #expect(up.status == 0, "bus, polkit, fprintd: \(up.stderr)")
        busAddress = up.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let authd = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("vault-authd").path
        daemon = start("/usr/bin/setpriv", ["--reuid=\(Self.daemonUser)", "--regid=\(Self.daemonUser)", "--init-groups",
                                            "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search",
                                            "env", "-i", "PATH=/usr/bin:/bin", "DBUS_SYSTEM_BUS_ADDRESS=\(busAddress)",
                                            authd, "--socket", socket, "--state", base + "/state",
                                            "--backend", "auto", "--fprintd-state", base + "/fp-state"], env: [:])
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: socket) { usleep(20_000) }
    }

    func stop() {
        kill(daemon, SIGTERM)
        _ = reap(daemon)
        _ = Self.sh("for p in fprintd polkit bus; do kill $(cat \(base)/$p.pid) 2>/dev/null; done; sleep 0.2; rm -rf \(base)")
    }

    /// `vault ARGS` as the ordinary user through the system authority, while the reader plays `steps`.
    func vault(_ args: [String], passcode: String? = nil, steps: [ReaderStep] = []) -> RunResult {
        var all = args
        var shellFD = ""
        if let passcode {
            let file = base + "/pc-" + UUID().uuidString.prefix(8)
            _ = FileManager.default.createFile(atPath: file, contents: Data((passcode + "\n").utf8), attributes: [.posixPermissions: 0o644])
            all += ["--passcode-fd", "3"]
            shellFD = " 3<" + file
        }
        let quoted = ([vaultBinary] + all).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let env = "env -i HOME=\(home) PATH=/usr/bin:/bin VAULT_AUTHORITY=system VAULT_AUTHD_SOCKET=\(socket) LANG=C.UTF-8"
        let line = "exec setpriv --reuid=\(Self.person) --regid=\(Self.person) --init-groups \(env) \(quoted)\(shellFD)"
        let feed = ReaderFeed(socket: base + "/reader.sock", env: ["PATH": "/usr/bin:/bin"], steps: steps, log: base + "/feed.log")
        var r = spawn("/bin/sh", ["-c", line], env: ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"], timeLimit: 60, onStderr: { feed.stderrChanged($0) })
        r.reader = feed.finish(grace: steps.isEmpty ? 0 : 5)
        return r
    }

    /// `fprintd-enroll -f FINGER vault-it`, as the desktop's settings would, with five touches of `print`.
    func systemEnroll(_ finger: String, _ print: String) -> Int32 {
        let reader = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("virtual-reader").path
        return Self.sh("""
            export DBUS_SYSTEM_BUS_ADDRESS='\(busAddress)'
            fprintd-enroll -f \(finger) \(Self.person) >>\(base)/enroll.log 2>&1 & e=$!
            for i in 1 2 3 4 5; do \(reader) device --wait 15 \(base)/reader.sock 'SCAN \(print)' || exit 9; done
            wait $e
            """).status
    }

    @Test func aFingerEnrolledInTheSystemSettingsUnlocksAndAChangeThereNeedsThePasscode() throws {
        defer { stop() }
        let pc = "fprintd flow pass"
        #expect(systemEnroll("right-index-finger", "person-1") == 0, "fprintd-enroll")
        // init finds the reader through vault-authd (fprintd), takes the finger fprintd has and binds.
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("enrolled right-index"), "init: \(r.stderr)")
        r = vault(["add", "gh", "--username", "me"], passcode: pc)
        #expect(r.status == 0, "add: \(r.stderr)")
        r = vault(["doctor"])
        #expect(r.stdout.contains("reader backend: fprintd (it owns net.reactivated.Fprint on the system bus)"), "\(r.stdout)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN person-1")])
        #expect(r.status == 0 && r.stdout.contains("gh"), "the system's finger opens the vault: \(r.stderr)")
        // Another finger added in the settings: 20, with the way out.
        #expect(systemEnroll("left-thumb", "person-2") == 0)
        r = vault(["fingers"])
        #expect(r.stdout.contains("right-index\tfprintd") && r.stdout.contains("left-thumb\tfprintd (not used by vault yet"), "\(r.stdout)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN person-1")])
        #expect(r.status == 20 && r.stderr.contains("vault: hint:"), "\(r.status) \(r.stderr)")
        // The passcode re-binds, but not to a finger enrolled outside vault that no one confirmed:
        // it is named, with when, and the command says how to confirm or remove it.
        r = vault(["enroll", "--bind"], passcode: pc)
        #expect(r.status == 20, "\(r.stderr)")
        #expect(r.stderr.contains("left-thumb was enrolled or changed on ") && r.stderr.contains("outside vault"), "\(r.stderr)")
        #expect(r.stderr.contains("vault enroll --bind --confirm left-thumb"), "\(r.stderr)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN person-2")])
        #expect(r.status == 20, "nothing was bound: \(r.stderr)")
        // Confirmed explicitly, with the passcode: bound, and the new finger opens it.
        r = vault(["enroll", "--bind", "--confirm", "left-thumb"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("since vault 'default' was last bound: left-thumb was enrolled or changed on "), "\(r.stderr)")
        r = vault(["ls", "--no-input"], steps: [.device("SCAN person-2")])
        #expect(r.status == 0 && r.stdout.contains("gh"), "\(r.stderr)")
    }
}
