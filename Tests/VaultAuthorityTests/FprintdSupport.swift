import Foundation
import Testing
import VaultKit
import VaultSystem

/// Real fprintd on a private bus that behaves like the system bus (../shared/FPRINTD.md): a
/// dbus-daemon with the shipped test policy, python-dbusmock's polkit stand-in (which logs every
/// CheckAuthorization), and `/usr/libexec/fprintd -t` on one of libfprint's virtual drivers with
/// its state in a folder of the test. Everything runs as root (the test), as fprintd does.
final class PrivateFprintd: @unchecked Sendable {
    static let fprintdBinary = "/usr/libexec/fprintd"
    static let python = "/usr/bin/python3"
    /// Why these tests cannot run here, nil when they can.
    static let unavailable: String? = {
        if !runningAsRoot { return "needs root: starts fprintd, which runs as root, and users with setpriv (CI runs as root)" }
        for (path, package) in [(fprintdBinary, "fprintd"), ("/usr/bin/dbus-daemon", "dbus"), ("/usr/bin/fprintd-enroll", "fprintd"),
                                ("/usr/lib/python3/dist-packages/dbusmock", "python3-dbusmock")]
        where !FileManager.default.fileExists(atPath: path) {
            return "\(path) is missing: apt-get install \(package) (Vault/setup.sh installs it)"
        }
        return nil
    }()

    let base: String
    let address: String
    let state: String
    let socket: String
    let driver: String
    private let bus: ChildProcess
    private let polkit: ChildProcess
    private var fprintd: ChildProcess?

    /// Bus, polkit, fprintd on `driver` (`virtual_device` or `virtual_image`). polkit is the
    /// stand-in allowing `allowed`, or, with `realPolkitRules` (rules files; `[]` for none),
    /// Debian's polkitd with exactly those files in /etc/polkit-1/rules.d (a private mount).
    init(driver: String = "virtual_device", realPolkitRules: [String]? = nil,
         allowed: [String] = ["net.reactivated.fprint.device.verify", "net.reactivated.fprint.device.enroll",
                              "net.reactivated.fprint.device.setusername"]) throws {
        self.driver = driver
        base = "/tmp/fprintd-" + hexString(randomBytes(5))
        state = base + "/fprint-state"
        socket = base + "/reader.sock"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        chmod(base, 0o755)
        let template = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent().path + "/Fixtures/system-bus.conf.in", encoding: .utf8)
        try template.replacingOccurrences(of: "@SOCK@", with: base + "/system_bus_socket")
            .write(toFile: base + "/bus.conf", atomically: true, encoding: .utf8)
        bus = try ChildProcess.spawn(path: "/usr/bin/dbus-daemon",
                                     arguments: ["dbus-daemon", "--config-file=\(base)/bus.conf", "--nofork", "--print-address=3"],
                                     environment: [:],
                                     fileActions: [.open(0, "/dev/null", .readOnly), .open(1, base + "/bus.log", .writeOnly, [.create, .append]),
                                                   .dup2(from: 1, to: 2), .open(3, base + "/address", .writeOnly, [.create, .truncate])])
        var found = ""
        let end = MonotonicClock.seconds() + 10
        while found.isEmpty && MonotonicClock.seconds() < end {
            found = ((try? String(contentsOfFile: base + "/address", encoding: .utf8)) ?? "").split(separator: "\n").first.map(String.init) ?? ""
            if found.isEmpty { MonotonicClock.sleep(seconds: 0.01) }
        }
        address = found
        let output: [FileAction] = [.open(0, "/dev/null", .readOnly), .open(1, base + "/polkit.log", .writeOnly, [.create, .append]),
                                    .dup2(from: 1, to: 2)]
        if let rules = realPolkitRules {
            let copies = rules.map { "cp '\($0)' /etc/polkit-1/rules.d/ && " }.joined()
            polkit = try ChildProcess.spawn(path: "/usr/bin/unshare", arguments: ["unshare", "-m", "/bin/sh", "-c",
                                            "mount -t tmpfs tmpfs /etc/polkit-1/rules.d && \(copies)exec /usr/lib/polkit-1/polkitd --no-debug"],
                                            environment: ["DBUS_SYSTEM_BUS_ADDRESS": address, "PATH": "/usr/bin:/bin"], fileActions: output)
        } else {
            polkit = try ChildProcess.spawn(path: Self.python, arguments: [Self.python, "-m", "dbusmock", "--system", "--template", "polkitd"],
                                            environment: ["DBUS_SYSTEM_BUS_ADDRESS": address, "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"],
                                            fileActions: output)
        }
        guard !address.isEmpty, waitForName("org.freedesktop.PolicyKit1") else {
            throw VaultError.failure("the private bus or polkit did not start: \(log("bus.log")) \(log("polkit.log"))")
        }
        if realPolkitRules == nil { try setAllowed(allowed) }
        try startFprintd()
    }

    deinit {
        stopFprintd()
        for p in [polkit, bus] {
            try? p.send(.terminate)
            _ = try? p.wait()
        }
        try? FileManager.default.removeItem(atPath: base)
    }

    /// The environment that points a program at this bus.
    var environment: [String: String] { ["DBUS_SYSTEM_BUS_ADDRESS": address, "PATH": "/usr/bin:/bin"] }

    /// Starts fprintd (again).
    func startFprintd() throws {
        let variable = driver == "virtual_image" ? "FP_VIRTUAL_IMAGE" : "FP_VIRTUAL_DEVICE"
        fprintd = try ChildProcess.spawn(path: Self.fprintdBinary, arguments: [Self.fprintdBinary, "-t"],
                                         environment: environment.merging(["FP_DRIVERS_WHITELIST": driver, variable: socket,
                                                                           "STATE_DIRECTORY": state]) { $1 },
                                         fileActions: [.open(0, "/dev/null", .readOnly), .open(1, base + "/fprintd.log", .writeOnly, [.create, .append]),
                                                       .dup2(from: 1, to: 2)])
        guard waitForName("net.reactivated.Fprint") else { throw VaultError.failure("fprintd did not start: \(log("fprintd.log"))") }
    }

    /// SIGTERM to fprintd, and waits for it.
    func stopFprintd() {
        guard let f = fprintd else { return }
        try? f.send(.terminate)
        _ = try? f.wait()
        fprintd = nil
    }

    /// The polkit stand-in allows exactly `actions`.
    func setAllowed(_ actions: [String]) throws {
        let list = "[" + actions.map { "'\($0)'" }.joined(separator: ",") + "]"
        let r = try gdbus(["call", "--system", "-d", "org.freedesktop.PolicyKit1", "-o", "/org/freedesktop/PolicyKit1/Authority",
                           "-m", "org.freedesktop.DBus.Mock.SetAllowed", list])
        guard r.code == 0 else { throw VaultError.failure("SetAllowed: \(r.stderr)") }
    }

    /// What the polkit stand-in logged (one line per CheckAuthorization, naming the action).
    var polkitLog: String { log("polkit.log") }

    func log(_ name: String) -> String { (try? String(contentsOfFile: base + "/" + name, encoding: .utf8)) ?? "" }

    func gdbus(_ arguments: [String]) throws -> ProgramResult {
        try runProgram("/usr/bin/gdbus", arguments, environment: environment, timeLimit: 20)
    }

    private func waitForName(_ name: String) -> Bool {
        let end = MonotonicClock.seconds() + 15
        while MonotonicClock.seconds() < end {
            if let r = try? gdbus(["call", "--system", "-d", "org.freedesktop.DBus", "-o", "/org/freedesktop/DBus",
                                   "-m", "org.freedesktop.DBus.NameHasOwner", name]), r.stdout.contains("true") { return true }
            MonotonicClock.sleep(seconds: 0.02)
        }
        return false
    }

    /// One command to the virtual_device reader (`SCAN id`...), waiting up to 15 s for fprintd
    /// to open it (the socket exists while a client has the device claimed).
    func scan(_ command: String) throws {
        let r = try runProgram(readerBinary, ["device", "--wait", "15", socket, command], timeLimit: 20)
        guard r.code == 0 else { throw VaultError.failure("virtual-reader \(command): \(r.stderr)") }
    }

    /// Images (and `--retry N`...) to the virtual_image reader.
    func images(_ items: [String]) throws {
        let r = try runProgram(readerBinary, ["image", "--wait", "15", socket] + items, timeLimit: 60)
        guard r.code == 0 else { throw VaultError.failure("virtual-reader image: \(r.stderr)") }
    }

    /// Runs one of fprintd's own tools (`fprintd-enroll -f left-thumb USER`, `fprintd-verify USER`,
    /// `fprintd-delete USER`) while `feed` plays the reader; returns its exit code.
    /// `feed` starts once the tool printed `ready` (when given).
    func tool(_ name: String, _ arguments: [String], ready: String? = nil, feed: () throws -> Void = {}) throws -> Int32 {
        let out = base + "/\(name).log"
        let child = try ChildProcess.spawn(path: "/usr/bin/" + name, arguments: [name] + arguments, environment: environment,
                                           fileActions: [.open(0, "/dev/null", .readOnly), .open(1, out, .writeOnly, [.create, .append]),
                                                         .dup2(from: 1, to: 2)])
        if let ready {
            let until = MonotonicClock.seconds() + 15
            while !log(name + ".log").contains(ready) && MonotonicClock.seconds() < until { MonotonicClock.sleep(seconds: 0.01) }
        }
        try feed()
        let end = MonotonicClock.seconds() + 30
        while MonotonicClock.seconds() < end {
            if let status = try child.waitNonBlocking() { return status.shellCode }
            MonotonicClock.sleep(seconds: 0.02)
        }
        try? child.send(.kill)
        _ = try? child.wait()
        throw VaultError.failure("\(name) did not end: \(log(name + ".log"))")
    }
}
