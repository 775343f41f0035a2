internal import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// The `vault-authd` program: `vault-authd [--socket PATH] [--state DIR] [--test-mode]`.
public enum AuthorityDaemon {
    /// The socket when neither `--socket` nor `RUNTIME_DIRECTORY` names one.
    public static let defaultSocket = "/run/vault-auth/socket"
    /// The state folder when neither `--state` nor `STATE_DIRECTORY` names one.
    public static let defaultState = "/var/lib/vault-auth"

    static let usage = "usage: vault-authd [--socket PATH] [--state DIR] [--tpm auto|none|TCTI] [--tpm-pcr7] [--backend auto|fprintd|libfprint] [--fprintd-state DIR] [--test-mode]"

    static let help = """
        vault-authd: the system key authority of vault

        It holds, for each user that connects (by uid, from SO_PEERCRED), a device secret, the
        enrolled prints, the bindings of that user's vaults and the lockout counter, out of the
        user's reach, owns the fingerprint reader and runs the match itself: a fingerprint slot key
        leaves only after a live match (or for a brand-new binding). Run it as its own system user
        (vault-auth), normally from its systemd unit.

        \(usage)

        options:
          --socket PATH   the socket to serve (default: $RUNTIME_DIRECTORY/socket, else \(defaultSocket));
                          it is made 0666 in a 0755 folder: any local user may connect
          --state DIR     the state folder, made 0700 (default: $STATE_DIRECTORY, else \(defaultState));
                          each user's state is in DIR/uid-N (0700); DIR/reserve keeps 1 MiB back, given
                          back to the state's writes when other users filled the file system
          --tpm T         where each user's device secret rests: `auto` (the default) seals it with the
                          TPM at /dev/tpmrm0 when that device exists and answers (the daemon's user
                          must be root or in group tss; otherwise a warning, and a 0600 file),
                          `none` keeps it in a 0600 file, anything else is a tpm2-tss TCTI string
                          (device:/dev/tpmrm0, swtpm:path=SOCKET) that must answer
          --tpm-pcr7      with a TPM: the secrets open only while PCR 7 (Secure Boot state) holds
                          its present value; after a firmware update the owner gives the passcode
                          and enrols again ('vault enroll')
          --backend B     the reader: fprintd (over the system bus: the fingers the desktop enrolled), libfprint
                          (the reader directly), or auto (default: fprintd when it is on the system bus)
          --fprintd-state DIR
                          fprintd's state folder, whose prints of each user the domain state covers
                          (default \(defaultFprintdState); reading it needs CAP_DAC_READ_SEARCH)
          --test-mode     for tests only: a request may then set the boot id and the clock the daemon
                          uses for its own uid, and libfprint's virtual readers (FP_VIRTUAL_DEVICE,
                          FP_VIRTUAL_DEVICE_STORAGE, FP_VIRTUAL_IMAGE) are served. Without it such
                          requests are refused and the daemon does not start with those variables set
          -h, --help      this help

        environment: RUNTIME_DIRECTORY, STATE_DIRECTORY (set by systemd), DBUS_SYSTEM_BUS_ADDRESS
        (GDBus, for fprintd; the default system bus otherwise); nothing else is read except, with
        --test-mode, libfprint's FP_VIRTUAL_* variables.

        One scan at a time: a request that needs the reader while another has it waits its turn
        (first come, first served; vault says it waits) for at most its scan timeout, then fails
        as busy (vault exits 13). Scan timeouts are at most \(Int(AuthorityLimits.scanSeconds.upperBound)) s. A client that goes away, or
        leaves the daemon's messages unread for \(Int(AuthorityLimits.unreadSeconds)) s (a stopped process), loses its request
        and the reader.

        Uids without an account in the user database (subordinate uids) share \(AuthorityLimits.connectionsWithoutAccount) connections
        and never get state; their leftover state folders are removed when idle (at start, then
        hourly). State is made only by enrolling or binding.
        """

    /// The file in the state folder holding the space kept back for a full file system
    /// (`StateReserve`, 1 MiB).
    static let reserveName = "reserve"

    /// fprintd's state folder when `--fprintd-state` does not name one.
    public static let defaultFprintdState = "/var/lib/fprint"

    /// What the reader source is made from.
    public struct ReaderSettings: Equatable, Sendable {
        /// `--test-mode`: libfprint's virtual readers are allowed.
        public var testMode: Bool
        /// `--backend`: auto, fprintd or libfprint.
        public var backend: String
        /// `--fprintd-state`.
        public var fprintdState: String
    }

    /// The options of one run.
    struct Options: Equatable {
        var socketPath: String
        var stateFolder: String
        var testMode = false
        var backend = "auto"
        var fprintdState = AuthorityDaemon.defaultFprintdState
        /// `auto`, `none` or a TCTI string.
        var tpm = "auto"
        var pcr7 = false
    }

    /// Where the device secrets rest with `options` on this machine.
    /// - Throws: `.tpmUnavailable` when a TPM is asked for (or present) and does not answer.
    static func sealing(_ options: Options) throws -> DeviceSecretSealing {
        let device: TPMDevice
        switch options.tpm {
        case _ where options.tpm == "none" || (options.tpm == "auto" && TPMDevice.fromEnvironment([:]) == nil):
            guard !options.pcr7 else { throw VaultError.usage("--tpm-pcr7 needs a TPM", hint: "give one with --tpm TCTI") }
            return .filePermissions
        case "auto":
            device = TPMDevice(tcti: "device:" + TPMDevice.kernelDevicePath)
        default:
            device = TPMDevice(tcti: options.tpm)
        }
        do { _ = try device.dictionaryAttackState() } catch {
            let why = "vault-authd cannot use the TPM at \(device.tcti): \(error.vaultError("the TPM").message)"
            // `auto` found a device it cannot use (the daemon's user is not in group tss): it says
            // so and keeps working as without a TPM (doctor shows it); a TPM asked for by name must answer.
            guard options.tpm == "auto", !options.pcr7 else { throw VaultError.tpmUnavailable(why) }
            log("warning: \(why); the secrets are protected by file permissions only (add vault-auth to group tss, or pass --tpm none)")
            return .filePermissions
        }
        return .tpm(device, pcr7: options.pcr7)
    }

    /// Parses the arguments (the program name first), hardens the process and serves; returns
    /// the exit code. Help goes to standard output; errors to standard error as
    /// `vault-authd: error: ...` (a usage error adds the usage line and a pointer to the help).
    /// `readers` makes the reader source from `--backend`, `--fprintd-state` and `--test-mode`.
    package static func run(_ arguments: [String], environment: [String: String],
                           readers: (ReaderSettings) -> any ReaderSource) -> Int32 {
        ProcessHardening.closeInheritedDescriptors()
        do {
            guard let options = try parse(Array(arguments.dropFirst()), environment: environment) else {
                write(help + "\n", to: 1)
                return 0
            }
            try harden()
            try checkEnvironment(environment, testMode: options.testMode)
            try prepareState(options.stateFolder)
            let sealing = try sealing(options)
            let reserve = StateReserve(path: options.stateFolder + "/" + reserveName, log: { log($0) })
            if !reserve.replenish() {
                log("warning: no room for the reserve \(reserve.path) (\(reserve.size >> 10) KiB) on the state's file system; it is made at the first request that finds room")
            }
            let handler = try AuthorityRequestHandler(stateFolder: options.stateFolder, testMode: options.testMode,
                                                      readers: readers(ReaderSettings(testMode: options.testMode, backend: options.backend,
                                                                                      fprintdState: options.fprintdState)),
                                                      sealing: sealing, reserve: reserve)
            handler.removeStateWithoutAccount()
            try Threads.detach(name: "vault-authd sweep") {
                while true {
                    MonotonicClock.sleep(seconds: AuthorityLimits.staleStateSweepSeconds)
                    handler.removeStateWithoutAccount()
                }
            }
            let server = AuthorityServer(socketPath: options.socketPath, handler: handler)
            if ProcessIdentity.effectiveUID == 0 {
                log("warning: running as root; run vault-authd as its own user (vault-auth)")
            }
            let where_: String
            if case .tpm(let d, let pcr7) = sealing { where_ = "sealed by the TPM at \(d.tcti)\(pcr7 ? ", bound to PCR 7" : "")" } else {
                where_ = "protected by file permissions only (no TPM)"
            }
            log("serving \(options.socketPath), state in \(options.stateFolder), secrets \(where_), readers: --backend \(options.backend)\(options.testMode ? ", TEST MODE" : "")")
            try server.run()
            return 0
        } catch let e as VaultError {
            var text = "vault-authd: error: \(e.message)\n"
            if e.kind == .usage { text += usage + "\n" }
            if let h = e.hint { text += "vault-authd: hint: \(h)\n" }
            write(text, to: 2)
            return e.exitCode
        } catch {
            write("vault-authd: error: \(error)\n", to: 2)
            return 1
        }
    }

    /// The options, or nil for `--help`.
    /// - Throws: `.usage` for an unknown option (with a suggestion), a missing value, a relative path.
    static func parse(_ args: [String], environment: [String: String]) throws -> Options? {
        func firstPath(_ variable: String) -> String? {
            environment[variable]?.split(separator: ":").first.map(String.init).flatMap { $0.hasPrefix("/") ? $0 : nil }
        }
        var options = Options(socketPath: firstPath("RUNTIME_DIRECTORY").map { $0 + "/socket" } ?? defaultSocket,
                              stateFolder: firstPath("STATE_DIRECTORY") ?? defaultState)
        let known = ["--socket", "--state", "--tpm", "--tpm-pcr7", "--backend", "--fprintd-state", "--test-mode", "--help"]
        var i = 0
        while i < args.count {
            var option = args[i], value: String?
            if let eq = option.firstIndex(of: "="), option.hasPrefix("--") {
                value = String(option[option.index(after: eq)...])
                option = String(option[..<eq])
            }
            i += 1
            switch option {
            case "-h", "--help":
                return nil
            case "--test-mode":
                guard value == nil else { throw VaultError.usage("--test-mode takes no value") }
                options.testMode = true
            case "--tpm-pcr7":
                guard value == nil else { throw VaultError.usage("--tpm-pcr7 takes no value") }
                options.pcr7 = true
            case "--tpm":
                if value == nil {
                    guard i < args.count else { throw VaultError.usage("--tpm needs a value", hint: "see 'vault-authd --help'") }
                    value = args[i]
                    i += 1
                }
                guard let t = value, !t.isEmpty, t.utf8.count <= 512 else { throw VaultError.usage("--tpm expects auto, none or a TCTI string") }
                options.tpm = t
            case "--backend":
                if value == nil {
                    guard i < args.count else { throw VaultError.usage("--backend needs a value", hint: "see 'vault-authd --help'") }
                    value = args[i]
                    i += 1
                }
                guard let b = value, ["auto", "fprintd", "libfprint"].contains(b) else {
                    throw VaultError.usage("--backend expects auto, fprintd or libfprint, not '\(value ?? "")'")
                }
                options.backend = b
            case "--socket", "--state", "--fprintd-state":
                if value == nil {
                    guard i < args.count else { throw VaultError.usage("\(option) needs a value", hint: "see 'vault-authd --help'") }
                    value = args[i]
                    i += 1
                }
                guard let path = value, path.hasPrefix("/"), !path.hasSuffix("/") || path == "/" else {
                    throw VaultError.usage("\(option) expects an absolute path, not '\(value ?? "")'", hint: "see 'vault-authd --help'")
                }
                if option == "--fprintd-state" {
                    options.fprintdState = path
                } else if option == "--socket" {
                    guard path.utf8.count <= maximumSocketPathLength else {
                        throw VaultError.usage("--socket: the path is longer than \(maximumSocketPathLength) bytes")
                    }
                    options.socketPath = path
                } else {
                    options.stateFolder = path
                }
            default:
                let near = suggestion(option, among: known)
                throw VaultError.usage(option.hasPrefix("-") ? "unknown option '\(option)'" : "unexpected argument '\(option)'",
                                       hint: near.map { "did you mean '\($0)'? see 'vault-authd --help'" } ?? "see 'vault-authd --help'")
            }
        }
        return options
    }

    /// Not dumpable, no core file, `SIGPIPE` ignored, files private by default.
    /// - Throws: `.failure` when core dumps cannot be turned off.
    static func harden() throws {
        do { try ProcessHardening.disableCoreDumps() } catch {
            throw VaultError.failure("vault-authd cannot turn off core dumps: \(error.reason)")
        }
        ignoreBrokenPipe()
        ProcessIdentity.restrictFileCreation()
    }

    /// libfprint's virtual readers (and its device emulation) answer whoever writes to their
    /// socket: outside test mode their variables stop the daemon instead of being obeyed.
    /// - Throws: `.failure` naming the variable.
    static func checkEnvironment(_ environment: [String: String], testMode: Bool) throws {
        guard !testMode else { return }
        if let name = environment.keys.sorted().first(where: { $0.hasPrefix("FP_VIRTUAL_") || $0 == "FP_DEVICE_EMULATION" }) {
            throw VaultError.failure("\(name) is set: libfprint's virtual readers are for --test-mode only",
                                   hint: "remove it from the daemon's environment")
        }
    }

    /// The state folder: made 0700 when missing, put back to 0700 when looser; it must be ours.
    /// - Throws: `.io` naming the folder.
    static func prepareState(_ folder: String) throws {
        do {
            try PrivateFiles.makeFolder(folder)
            let status = try FileStatus.of(folder)
            guard status.kind == .directory, status.owner == ProcessIdentity.effectiveUID else {
                throw VaultError.io(path: folder, "the state folder must be a folder of vault-authd's own user")
            }
            if status.permissions & 0o077 != 0 {
                try FileSystem.setPermissions(folder, 0o700)
                log("note: \(folder) was mode \(String(status.permissions, radix: 8)); it is now 700")
            }
        } catch let e as VaultError {
            throw e
        } catch let e as SystemError {
            throw VaultError.io(path: folder, e.reason)
        }
    }

    static func log(_ line: String) {
        write("vault-authd: " + line + "\n", to: 2)
    }

    private static func write(_ text: String, to fd: Int32) {
        try? writeAll(fd: fd, bytes: Array(text.utf8), label: fd == 1 ? "standard output" : "standard error")
    }

    /// The closest known option within a small edit distance.
    static func suggestion(_ word: String, among candidates: [String]) -> String? {
        func distance(_ a: String, _ b: String) -> Int {
            let a = Array(a), b = Array(b)
            guard !a.isEmpty else { return b.count }
            var prev = Array(0...b.count)
            for i in 1...a.count {
                var cur = [i] + Array(repeating: 0, count: b.count)
                for j in stride(from: 1, through: b.count, by: 1) {
                    cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                }
                prev = cur
            }
            return prev[b.count]
        }
        let best = candidates.map { ($0, distance(word, $0)) }.min { $0.1 < $1.1 }
        if let best, best.1 <= max(2, word.count / 3) { return best.0 }
        return candidates.first { $0.hasPrefix(word) && word.count >= 3 }
    }
}
