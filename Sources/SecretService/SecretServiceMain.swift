public import VaultDBus
internal import VaultKit
internal import VaultSystem
internal import Foundation

/// The `vault-secret-service` program: `vault-secret-service [--replace] [--vault NAME]...
/// [--scan-timeout SECONDS] [--pinentry PROGRAM]`, or `--owner` (who owns the name now).
public enum SecretServiceMain {
    /// The Secret Service's well-known name.
    public static let busName = "org.freedesktop.secrets"
    static let usage = "usage: vault-secret-service [--replace] [--vault NAME]... [--scan-timeout SECONDS] [--pinentry PROGRAM] | --owner"

    struct Arguments {
        var replace = false
        var vaults: [String] = []
        var scanTimeout: Double = 30
        var pinentry: String?
        var owner = false
    }

    /// Parses the arguments (the program name first), serves until the name is lost or the bus
    /// goes; returns the exit code. Errors go to standard error as `vault-secret-service: error: ...`.
    public static func run(_ arguments: [String]) -> Int32 {
        let environment = ProcessInfo.processInfo.environment
        do {
            let a = try parse(Array(arguments.dropFirst()))
            if a.owner {
                let connection = try bus()
                print(try ownerDescription(connection))
                return 0
            }
            wipeFreedHeap(arguments, environment)
            try serve(a, environment: environment, program: arguments.first ?? "vault-secret-service")
            return 0
        } catch let e as VaultError {
            var text = "vault-secret-service: error: \(e.message)\n"
            if e.exitCode == 2 { text += usage + "\n" }
            if let h = e.hint { text += "vault-secret-service: hint: \(h)\n" }
            try? writeAll(fd: 2, bytes: Array(text.utf8), label: "standard error")
            return e.exitCode
        } catch {
            try? writeAll(fd: 2, bytes: Array("vault-secret-service: error: \(error)\n".utf8), label: "standard error")
            return 1
        }
    }

    /// The allocator settings the service runs with (glibc's tunables, read only at a program's
    /// start): every block freed is overwritten (`perturb`), and no block waits unwiped in a
    /// thread's cache (`tcache_count=0`), so the copies GLib makes of a message (the blob it
    /// serialises, the values it parses, their reallocations) and Swift's copies do not keep a
    /// secret once freed. GSlice hands its blocks to malloc too.
    static let heapTunables = "glibc.malloc.perturb=165:glibc.malloc.tcache_count=0"

    /// Runs this program again (same pid, arguments and environment) with `heapTunables` added,
    /// unless it already has them; goes on as it is when that cannot be done.
    static func wipeFreedHeap(_ arguments: [String], _ environment: [String: String]) {
        let current = environment["GLIBC_TUNABLES"] ?? ""
        guard !current.contains("glibc.malloc.perturb=") else { return }
        var next = environment
        next["GLIBC_TUNABLES"] = current.isEmpty ? heapTunables : current + ":" + heapTunables
        next["G_SLICE"] = "always-malloc"
        try? ProcessReplacement.exec("/proc/self/exe", arguments: arguments, environment: next)
    }

    static func parse(_ args: [String]) throws -> Arguments {
        var a = Arguments()
        var i = 0
        func value() throws -> String {
            i += 1
            guard i < args.count else { throw VaultError.usage("\(args[i - 1]) needs a value") }
            return args[i]
        }
        while i < args.count {
            switch args[i] {
            case "--replace": a.replace = true
            case "--vault": a.vaults.append(try value())
            case "--scan-timeout":
                let v = try value()
                guard let d = Double(v.hasSuffix("s") ? String(v.dropLast()) : v), d > 0, d <= 600 else {
                    throw VaultError.usage("--scan-timeout takes 1 to 600 seconds")
                }
                a.scanTimeout = d
            case "--pinentry": a.pinentry = try value()
            case "--owner": a.owner = true
            default: throw VaultError.usage("unknown argument \(args[i])")
            }
            i += 1
        }
        return a
    }

    static func bus() throws -> DBusConnection {
        do { return try DBusConnection.session() } catch {
            throw VaultError.failure("cannot connect to the session bus: \(error.message)",
                                     hint: "run it inside a desktop session (or dbus-run-session)")
        }
    }

    /// Who owns `org.freedesktop.secrets`: `vault (pid N)`, `gnome-keyring (pid N)`, another
    /// program's path, or `nobody`.
    public static func ownerDescription(_ connection: DBusConnection) throws -> String {
        let owner: String?
        do { owner = try connection.owner(of: busName) } catch { throw VaultError.failure("the session bus: \(error.message)") }
        guard let owner else { return "nobody" }
        guard let pid = try? connection.processID(of: owner) else { return "unknown (\(owner))" }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")) ?? "unknown"
        let base = (exe as NSString).lastPathComponent
        switch base {
        case "vault-secret-service": return "vault (pid \(pid))"
        case "gnome-keyring-daemon": return "gnome-keyring (pid \(pid))"
        default: return "\(exe) (pid \(pid))"
        }
    }

    static func serve(_ a: Arguments, environment: [String: String], program: String) throws {
        try ProcessHardening.disableCoreDumps()
        ProcessIdentity.restrictFileCreation()
        let names = a.vaults.isEmpty ? [environment["VAULT_NAME"] ?? "default"] : a.vaults
        var locations: [VaultLocation] = []
        for n in names {
            let l = try VaultLocation(name: n, environment: environment)
            guard l.exists else { throw VaultError.vaultNotFound(name: l.name, path: l.databasePath) }
            locations.append(l)
        }
        let here = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? program
        let vault = environment["VAULT_BINARY"] ?? ((here as NSString).deletingLastPathComponent + "/vault")
        let connection = try bus()
        let server = try SecretServiceServer(connection: connection, options: SecretServiceOptions(
            vaults: locations, environment: environment, vaultBinary: vault, scanTimeout: a.scanTimeout, pinentry: a.pinentry))
        let ended = DispatchSemaphore(value: 0)
        server.onNameLost = { ended.signal() }
        do { try server.start() } catch { throw VaultError.failure("cannot serve on the session bus: \(error.message)") }
        var flags = DBusNameRequest.allowReplacement | DBusNameRequest.doNotQueue
        if a.replace { flags |= DBusNameRequest.replaceExisting }
        let answer: UInt32
        do { answer = try connection.requestName(busName, flags: flags) } catch {
            throw VaultError.failure("cannot own \(busName): \(error.message)")
        }
        guard answer == DBusNameRequest.primaryOwner || answer == DBusNameRequest.alreadyOwner else {
            let owner = (try? ownerDescription(connection)) ?? "another program"
            throw VaultError.failure("\(busName) is already owned by \(owner)",
                                     hint: "pass --replace to take it over (the owner must allow replacement, as gnome-keyring does)")
        }
        try? writeAll(fd: 2, bytes: Array("vault-secret-service: serving \(busName) (\(locations.map(\.name).joined(separator: ", ")))\n".utf8),
                      label: "standard error")
        while ended.wait(timeout: .now() + 0.5) == .timedOut {
            if connection.isClosed { break }
        }
    }
}
