import FoundationEssentials
internal import VaultSystem
import ReaderLink
import VaultAuthority
import VaultAgent
import VaultKit

enum FingerprintCommands {
    static let all: [CommandSpec] = [enroll, unenroll, fingers, doctor, unlock]

    /// The options of `enroll`, declared once: the table lists them and the command reads them.
    enum EnrollOptions {
        static let finger = OptionSpec.value("--finger", "F", "which finger: \(FingerNames.all.joinedText(separator: ", "))")
        static let bind = OptionSpec.flag("--bind", "bind this vault to the enrolled prints (no new finger unless --finger)")
        static let confirm = OptionSpec.value("--confirm", "F[,F...]", "fingers enrolled without a vault's proof (or changed outside vault) that are yours: bind to them")
        static let reregister = OptionSpec.flag("--reregister", "with --bind: register this vault's current key with the key authority after a touch (a vault restored from an older backup)")
        static let scanTimeout = OptionSpec.value("--scan-timeout", "D", "how long to wait for each touch (default 30s)")
    }

    static let enroll = CommandSpec(
        name: "enroll", summary: "enrol a finger (needs the passcode of the vault named), or --bind the vault",
        usage: "vault enroll [--finger F] [--bind [--confirm F[,F...]] [--reregister]] [--scan-timeout D]",
        options: [
            EnrollOptions.finger,
            EnrollOptions.bind,
            EnrollOptions.confirm,
            EnrollOptions.reregister,
            EnrollOptions.scanTimeout,
        ],
        examples: """
        vault enroll --finger right-index
        vault enroll --bind --vault work      # after another vault enrolled a finger
        vault enroll --bind --confirm left-thumb   # a finger you enrolled in the system settings
        vault enroll --bind --reregister      # a vault restored from a backup older than the key authority's state
        """,
        run: { inv, ctx in
            let finger = try inv[EnrollOptions.finger].map(parseFinger)
            let confirm = try confirmedFingers(inv)
            guard confirm.isEmpty || inv.has(EnrollOptions.bind) else { throw VaultError.usage("--confirm goes with --bind") }
            guard !inv.has(EnrollOptions.reregister) || (inv.has(EnrollOptions.bind) && finger == nil) else {
                throw VaultError.usage("--reregister goes with --bind (and no --finger)")
            }
            let store = try VaultStore.open(try location(inv, ctx))
            if let finger, enrolledFingers(store, inv, ctx)?.isEnrolled(finger.rawValue, sensorNamed: sensorNamed(inv, ctx)) == true {
                throw VaultError.fingerEnrolled(finger.rawValue)
            }
            try Auth.unlockWithPasscode(store, inv, ctx, why: "enrolling or binding needs the passcode") { vault, passcode in
                let authority = try Auth.ownerAuthority(vault, inv, ctx)
                if inv.has(EnrollOptions.reregister) { try reregister(vault, authority: authority, ctx) }
                if inv.has(EnrollOptions.bind) && finger == nil {
                    try bind(vault, authority: authority, confirm: confirm, ctx)
                    return
                }
                let done = try vault.enroll(finger: finger?.rawValue, through: authority)
                ctx.say("vault: enrolled \(done.finger)")
                let report = BindingReport()
                // The finger just enrolled here is the owner's own: confirmed for the new binding.
                let result = try vault.rotate(passcode: passcode, kdf: nil, recovery: .keep, authority: authority,
                                              confirm: done.confirmed ? confirm : confirm + [done.finger], report: report,
                                              progress: RotateCommand.progressBar(inv, ctx))
                // The passcode was given in this command: it counts for the new keys too (their proof
                // key replaces the old one at the authority).
                authority.recordUnlock(of: result.vault)
                RotateCommand.report(result, of: vault, ctx)
                say(report, of: vault, ctx)
                sayStaleVaults(except: store.location, ctx)
            }
        })

    /// `enroll --bind --reregister`: the passcode was given; a touch of a confirmed finger makes
    /// the authority take this vault's current key in place of the one it holds (which this
    /// copy of the vault cannot prove), then the passcode unlock is recorded under it.
    static func reregister(_ vault: UnlockedVault, authority: any KeyAuthority, _ ctx: CommandContext) throws {
        let name = vault.store.location.name
        let record = try Auth.quietTerminal(ctx) {
            try authority.reregister(vaultID: vault.store.vaultID, proofKey: try vault.proofKey(), label: name,
                                     prompt: "touch the fingerprint reader to register the current key of vault '\(name)'",
                                     events: { ctx.say("vault: " + $0.message) })
        }
        guard record != .notBound else {
            ctx.say("vault: the key authority does not know vault '\(name)' yet: binding registers it")
            return
        }
        authority.recordUnlock(of: vault)
        ctx.say("vault: the key authority holds the current key of vault '\(name)' again")
    }

    /// After the prints changed: names each other vault with a fingerprint slot (now stale, exit
    /// 20) and the one command that re-binds it.
    static func sayStaleVaults(except here: VaultLocation, _ ctx: CommandContext) {
        let names = vaults(in: here.root).filter { name, store in name != here.name && (try? store.fingerprintSlot()) != nil }.map(\.name)
        for name in names {
            ctx.say("vault: vault '\(name)' now needs its passcode once: \(VaultError.rebindCommand(vault: name))")
        }
    }

    /// The vaults under `root` that open, by name.
    static func vaults(in root: String) -> [(name: String, store: VaultStore)] {
        ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).sorted().compactMap { name in
            guard let loc = try? VaultLocation(name: name, environment: ["VAULT_HOME": root]), loc.exists,
                  let store = try? VaultStore.open(loc) else { return nil }
            return (name, store)
        }
    }

    /// At `init`: with a reader present, enrol a first finger if none is enrolled on it, then bind
    /// the new vault. Without a reader the vault simply opens with the passcode.
    static func setUpAtInit(_ vault: UnlockedVault, _ inv: Invocation, _ ctx: CommandContext) throws {
        let finger = try inv[VaultCommands.InitOptions.finger].map(parseFinger)
        let authority = try Auth.ownerAuthority(vault, inv, ctx)
        let enrolled = try authority.fingers()
        let identity: SensorIdentity
        do {
            identity = try authority.reader(prefer: enrolled.first?.sensor)
        } catch let e as VaultError {
            let v = vault.store.location.name == "default" ? "" : " --vault \(vault.store.location.name)"
            ctx.say("vault: \(e.message); the vault opens with the passcode until you run 'vault enroll\(enrolled.isEmpty ? "" : " --bind")\(v)'")
            return
        }
        var confirm: [String] = []
        if !enrolled.contains(where: { $0.sensor == identity }) {
            let done = try vault.enroll(finger: finger?.rawValue, through: authority)
            ctx.say("vault: enrolled \(done.finger)")
            // Enrolled by this command, with the passcode just chosen: the owner's own finger
            // (its enrolment is not news to the person who just did it).
            if !done.confirmed { confirm.append(done.finger) }
        }
        try bind(vault, authority: authority, confirm: confirm, enrolledHere: confirm, ctx)
    }

    /// A new passcode re-binds the fingerprint slot (a new binding secret): a slot key seen
    /// before the change opens nothing after it. Best effort: without the reader the old
    /// binding stays, and the person is told.
    static func rebindAfterPasscodeChange(_ vault: UnlockedVault, _ inv: Invocation, _ ctx: CommandContext) {
        guard (try? vault.store.slot(.fingerprint)) != nil else { return }
        do {
            try vault.bindFingerprint(authority: try Auth.authority(for: vault.store, inv, ctx), sensor: nil)
        } catch let e as VaultError {
            ctx.say("vault: warning: the fingerprint slot keeps its old key until 'vault enroll --bind' (\(e.message))")
        } catch {
            ctx.say("vault: warning: the fingerprint slot keeps its old key until 'vault enroll --bind' (\(error))")
        }
    }

    /// The fingers enrolled at the authority `enroll` and `unenroll` of `store` would use, read
    /// before the passcode is asked for (the list needs no key): nil when the authority cannot
    /// say now (the command then asks, and the authority decides).
    static func enrolledFingers(_ store: VaultStore, _ inv: Invocation, _ ctx: CommandContext) -> [EnrolledFinger]? {
        try? Auth.enrolmentAuthority(store, inv, ctx).fingers()
    }

    /// Whether `--sensor` or `VAULT_SENSOR` names a reader (an enrolment may then go to another one).
    static func sensorNamed(_ inv: Invocation, _ ctx: CommandContext) -> Bool {
        inv[GlobalOptions.sensor] != nil || !(ctx.environment["VAULT_SENSOR"] ?? "").isEmpty
    }

    /// `--confirm F[,F...]`, each a finger's name.
    static func confirmedFingers(_ inv: Invocation) throws -> [String] {
        guard let list = inv[EnrollOptions.confirm] else { return [] }
        return try list.split(separator: ",").map { try parseFinger(String($0).trimmed(.whitespaces)).rawValue }
    }

    /// What a binding reported: the changes of the prints since the vault was last bound, and
    /// whether the vault manages the fingerprints.
    static func say(_ report: BindingReport, of vault: UnlockedVault, _ ctx: CommandContext) {
        for c in report.changes { ctx.say("vault: since vault '\(vault.store.location.name)' was last bound: \(c.sentence)") }
        if !report.owner {
            ctx.say("vault: note: vault '\(vault.store.location.name)' does not manage your fingerprints (another vault was bound first): "
                    + "adding, removing or confirming a finger and lifting a lockout take the passcode of the first vault you bound")
        }
    }

    /// A finger's CLI name, checked against ``FingerNames/all``.
    struct FingerName {
        let rawValue: String
        init?(rawValue: String) {
            guard FingerNames.all.contains(rawValue) else { return nil }
            self.rawValue = rawValue
        }
    }

    static func parseFinger(_ s: String) throws -> FingerName {
        guard let f = FingerName(rawValue: s) else {
            throw VaultError.usage("unknown finger '\(s)'", hint: "fingers: \(FingerNames.all.joinedText(separator: ", "))")
        }
        return f
    }

    /// Re-binds `vault` to the current prints (`confirm`: fingers no vault vouched for that the
    /// owner confirms), and says what changed since it was last bound.
    static func bind(_ vault: UnlockedVault, authority: any KeyAuthority, confirm: [String] = [], enrolledHere: [String] = [],
                     _ ctx: CommandContext) throws {
        let report = try vault.bindFingerprint(authority: authority, sensor: nil, confirm: confirm)
        report.changes.removeAll { $0.kind == .enrolled && enrolledHere.contains($0.finger) }
        say(report, of: vault, ctx)
        ctx.say("vault: vault '\(vault.store.location.name)' is bound to the enrolled fingerprints")
    }

    static let unenroll = CommandSpec(
        name: "unenroll", summary: "remove an enrolled finger (needs the passcode of the vault named)",
        usage: "vault unenroll FINGER",
        arguments: 1...1,
        examples: "vault unenroll right-index",
        run: { inv, ctx in
            let finger = try parseFinger(inv.arguments[0])
            let store = try VaultStore.open(try location(inv, ctx))
            if let prints = enrolledFingers(store, inv, ctx), !prints.contains(where: { $0.finger == finger.rawValue }) {
                throw VaultError.fingerNotEnrolled(finger.rawValue)
            }
            try Auth.unlockWithPasscode(store, inv, ctx, why: "removing a finger needs the passcode") { vault, passcode in
                let authority = try Auth.ownerAuthority(vault, inv, ctx)
                let result = try vault.unenrollAndRotate(finger: finger.rawValue, through: authority, passcode: passcode,
                                                         progress: RotateCommand.progressBar(inv, ctx))
                ctx.say("vault: removed \(finger.rawValue)")
                RotateCommand.report(result, of: vault, ctx)
            }
        })

    /// The options of `fingers`, declared once: the table lists them and the command reads them.
    enum FingersOptions {
        static let json = OptionSpec.flag("--json", "print JSON")
    }

    static let fingers = CommandSpec(
        name: "fingers", summary: "list the enrolled fingers",
        usage: "vault fingers [--json]",
        options: [FingersOptions.json],
        examples: "vault fingers",
        run: { inv, ctx in
            let authority = try Auth.authority(inv, ctx)
            let prints = try authority.fingers()
            // fprintd's fingers of this user (the system's settings) that vault does not use yet.
            let system = authority.kind == .system
                ? ((try? authority.status(slot: nil, sensor: nil, rules: PasscodeRules(afterReboot: false, intervalHours: 0)))?.backendFingers ?? [])
                    .filter { f in !prints.contains { $0.finger == f && $0.sensor.driver == "fprintd" } }
                : []
            if inv.has(FingersOptions.json) {
                ctx.stdout.write(jsonText(["fingers": prints.map { ["finger": $0.finger, "sensor": $0.sensor.canonical, "enrolled": $0.enrolled] },
                                           "fprintd_fingers": system]))
                return
            }
            if prints.isEmpty && system.isEmpty {
                ctx.say("no fingers enrolled; add one with 'vault enroll'")
            }
            for p in prints { ctx.stdout.write("\(p.finger)\t\(p.sensor.canonical)\n") }
            for f in system { ctx.stdout.write("\(f)\tfprintd (not used by vault yet: 'vault enroll --finger \(f)' takes it without a scan)\n") }
        })

    /// The options of `doctor`, declared once: the table lists them and the command reads them.
    enum DoctorOptions {
        static let json = OptionSpec.flag("--json", "print JSON")
    }

    static let doctor = CommandSpec(
        name: "doctor", summary: "list fingerprint readers and explain what stops one from working",
        usage: "vault doctor [--json]",
        options: [DoctorOptions.json],
        examples: "vault doctor",
        run: { inv, ctx in
            let readers: [ReaderInfo]
            do { readers = try RemoteSensor.sensors(ctx) } catch let e as ReaderFault { throw vaultError(e) }
            var rows: [[String: Any]] = []
            for r in readers {
                var row: [String: Any] = ["driver": r.driver, "device_id": r.deviceID, "name": r.name, "scan_type": r.scanType,
                                          "match_on_chip": r.matchOnChip, "identify": r.supportsIdentify, "enroll_stages": r.enrollStages]
                do {
                    let s = try RemoteSensor.open(selector: r.driver, ctx)
                    s.close()
                    row["status"] = "ok"
                } catch let e as ReaderFault {
                    row["status"] = e.message
                    if let h = e.hint { row["hint"] = h }
                }
                rows.append(row)
            }
            // Whether vault-authd answers, as whom; which authority new bindings go to; which one
            // each vault's binding uses.
            let socket = Auth.systemSocket(ctx)
            var daemon: [String: Any] = ["socket": socket]
            let daemonLine: String
            do {
                let d = try SystemKeyAuthority.describe(socketPath: socket, within: 2)
                let user = ProcessIdentity.userName(of: d.uid) ?? "uid \(d.uid)"
                daemon.merge(["answers": true, "pid": Int(d.pid), "uid": Int(d.uid), "user": user, "version": d.version, "test_mode": d.testMode]) { $1 }
                daemonLine = "answers as \(user) (uid \(d.uid), pid \(d.pid)), protocol \(d.version)" + (d.testMode ? ", TEST MODE" : "")
            } catch let e as VaultError {
                let why: String
                if case .biometryNotAvailable(let m) = e { why = m } else { why = e.message }
                daemon.merge(["answers": false, "error": why]) { $1 }
                daemonLine = "not answering: " + why
            }
            let requested = try Auth.requestedAuthority(inv, ctx)
            let authority = try Auth.authority(inv, ctx)
            let kind = authority.kind
            let reachable = kind == .embedded || daemon["answers"] as? Bool == true
            let bindings = vaults(in: try VaultLocation(name: nil, environment: ctx.environment).root).map { name, store in
                (name, (try? store.fingerprintSlot())??.binding.authorityKind)
            }
            // What protects the authority's secrets at rest: the daemon says (TPM or not); the
            // embedded authority's are in the user's files.
            let secrets: String
            do {
                let s = try authority.status(slot: nil, sensor: nil, rules: PasscodeRules())
                secrets = (s.secrets ?? .filePermissions).rawValue
            } catch let e as VaultError {
                secrets = "unknown: " + e.message
            }
            let secretsLine = SecretProtection(rawValue: secrets)?.description ?? secrets
            // The TPM this process would use for a passcode on the TPM.
            var tpm: [String: Any] = ["present": false]
            var tpmLine = "none found (set VAULT_TPM_TCTI, or the kernel's /dev/tpmrm0 is missing)"
            if let device = TPMDevice.fromEnvironment(ctx.environment) {
                tpm = ["present": true, "tcti": device.tcti]
                do throws(TPMFailure) {
                    let da = try device.dictionaryAttackState()
                    tpm["failed_tries"] = da.failedTries
                    tpm["max_tries"] = da.maxTries
                    tpm["recovery_seconds"] = da.recoverySeconds
                    tpmLine = "\(device.tcti): answers; dictionary-attack counter \(da.failedTries) of \(da.maxTries)"
                        + (da.lockedOut ? " (LOCKED OUT)" : "") + ", one failure forgotten every \(da.recoverySeconds) s"
                } catch {
                    let e = error.vaultError("the TPM")
                    tpm["error"] = e.message
                    tpmLine = "\(device.tcti): \(e.message)"
                }
            }
            // The system authority's own reader: its backend (fprintd or libfprint) and why.
            let backend = kind == .system
                ? (try? authority.status(slot: nil, sensor: nil, rules: PasscodeRules(afterReboot: false, intervalHours: 0)))?.readerBackend
                : "libfprint (vault-reader, in this user's processes)"
            // Whether a finger can unlock anything: the authority answers, a reader opens (the
            // daemon's own, behind vault-authd, is its to report) and fingers are enrolled.
            let fingerUnlock: VaultError?
            if !reachable {
                fingerUnlock = .biometryNotAvailable("the \(kind.rawValue) key authority does not answer")
            } else if kind == .embedded && !rows.contains(where: { $0["status"] as? String == "ok" }) {
                fingerUnlock = .biometryNotAvailable(rows.isEmpty ? "no fingerprint reader found" : "no fingerprint reader opens")
            } else if ((try? authority.fingers()) ?? []).isEmpty {
                fingerUnlock = .biometryNotEnrolled
            } else {
                fingerUnlock = nil
            }
            // Who serves the desktop's keyring (org.freedesktop.secrets), and how to switch.
            let keyring = SecretServiceCommand.owner(ctx.environment)
            let keyringLine: String
            switch keyring.owner {
            case nil: keyringLine = "unknown: \(keyring.detail)"
            case "nobody"?: keyringLine = "nobody: 'vault secret-service' serves your vaults"
            case let o? where o.hasPrefix("vault "): keyringLine = o
            case let o?: keyringLine = "\(o): 'vault secret-service --replace' takes it over"
            }
            // What SSH_AUTH_SOCK reaches: vault's agent, another one, or nothing; how to switch.
            let ssh = SSHAgentCommand.doctorReport(ctx.environment)
            if inv.has(DoctorOptions.json) {
                ctx.stdout.write(jsonText(["finger_unlock": fingerUnlock == nil, "readers": rows, "ssh_agent": ssh.json,
                                           "secret_service": ["owner": keyring.owner.map { $0 as Any } ?? JSONNull(), "detail": keyring.detail] as [String: Any], "authority": ["kind": kind.rawValue, "protects": kind.protection, "secrets": secrets,
                                                                         "reader_backend": backend.map { $0 as Any } ?? JSONNull(),
                                                                         "requested": requested.map { $0.rawValue as Any } ?? JSONNull(),
                                                                         "answers": reachable] as [String: Any],
                                           "daemon": daemon,
                                           "vaults": bindings.map { ["vault": $0.0, "binding_authority": $0.1.map { $0.rawValue as Any } ?? JSONNull()] },
                                           "tpm": tpm]))
                if let fingerUnlock { throw fingerUnlock }
                return
            }
            ctx.stdout.write("vault-authd (\(socket)): \(daemonLine)\n")
            ctx.stdout.write("secret service (org.freedesktop.secrets): \(keyringLine)\n")
            // The socket path, the listener's executable or process name: anybody's text, escaped
            // whether or not stdout is a terminal (a pager, a log shown later).
            let sshLine = "ssh agent (SSH_AUTH_SOCK\(ssh.probe.socket.map { "=" + $0 } ?? "")): \(ssh.line)"
            ctx.stdout.write(terminalSafe(sshLine, onTerminal: true, oneLine: true) + "\n")
            if let hint = ssh.hint { ctx.stdout.write("  hint: \(terminalSafe(hint, onTerminal: true, oneLine: true))\n") }
            let how = requested == nil ? "" : ", as VAULT_AUTHORITY or --authority asks"
            ctx.stdout.write(reachable
                ? "key authority: \(kind.rawValue) (\(kind.protection))\(how)\n"
                : "key authority: \(kind.rawValue)\(how), NOT answering: fingerprints cannot be used; the passcode opens every vault\n")
            for (name, bound) in bindings {
                let line: String
                switch bound {
                case nil: line = "no fingerprint slot"
                case .system?:
                    line = "bound through the system authority (vault-authd)"
                        + (daemon["answers"] as? Bool == true ? "" : ", which does not answer: its passcode opens it meanwhile")
                case .embedded?:
                    line = "bound through the embedded authority (your own files)"
                        + (daemon["answers"] as? Bool == true ? "; " + Auth.moveToSystem(name, inv, ctx) + " to vault-authd" : "")
                }
                ctx.stdout.write("vault '\(name)': \(line)\n")
            }
            if let backend { ctx.stdout.write("reader backend: \(backend)\n") }
            ctx.stdout.write("authority secrets: \(secretsLine)\n")
            ctx.stdout.write("TPM (for --passcode-on-tpm): \(tpmLine)\n")
            if rows.isEmpty {
                ctx.stdout.write("no fingerprint reader found\n")
                ctx.say("vault: hint: check that the reader is plugged in and supported by libfprint (lsusb); vault works with the passcode meanwhile")
            }
            for r in rows {
                ctx.stdout.write("\(r["name"]!) [\(r["driver"]!) \(r["device_id"]!)]: \(r["scan_type"]!), " +
                    "\((r["match_on_chip"] as? Bool) == true ? "match-on-chip" : "matched on this computer"), \(r["enroll_stages"]!) enrol stages: \(r["status"]!)\n")
                if let h = r["hint"] { ctx.stdout.write("  hint: \(h)\n") }
            }
            ctx.stdout.write(fingerUnlock == nil ? "finger unlock: works\n" : "finger unlock: NOT possible (\(fingerUnlock!.message))\n")
            // The report is out; the exit code says whether a finger can unlock (15, 16).
            if let fingerUnlock { throw fingerUnlock }
        })

    /// The options of `unlock`, declared once: the table lists them and the command reads them.
    enum UnlockOptions {
        static let json = OptionSpec.flag("--json", "print the outcome as JSON")
        static let timeout = OptionSpec.value("--timeout", "D", "end the session after D idle (default 120s; 90, 90s, 5m, 12h)")
        static let maxLifetime = OptionSpec.value("--max-lifetime", "D", "end the session after D at most (default 12h)")
        static let rotate = OptionSpec.flag("--rotate", "with --passcode: replace the vault's keys and re-bind it to the current prints")
        static let scope = OptionSpec.value("--scope", "terminal|user", "whom the session serves: this terminal's session (default) or every process of yours (scripts, services)")
    }

    static let unlock = CommandSpec(
        name: "unlock", summary: "authenticate once (finger or passcode) and open an unlock session for scripts",
        usage: "vault unlock [--timeout D] [--max-lifetime D] [--scope terminal|user] [--passcode [--rotate]] [--reason T] [--policy P]",
        options: Auth.options + [UnlockOptions.json,
                                 UnlockOptions.timeout,
                                 UnlockOptions.maxLifetime,
                                 UnlockOptions.scope,
                                 UnlockOptions.rotate],
        examples: "vault unlock --no-input && echo unlocked\nvault unlock --scope user --timeout 10m     # for a script started elsewhere\nvault unlock --passcode --rotate     # after exit 20",
        run: { inv, ctx in
            let store = try VaultStore.open(try location(inv, ctx))
            let idle = try SessionCommands.duration(inv, UnlockOptions.timeout, default: 120)
            let hard = try SessionCommands.duration(inv, UnlockOptions.maxLifetime, default: 12 * 3600)
            let scope = try inv[UnlockOptions.scope].map { raw -> SessionScope in
                guard let s = SessionScope(rawValue: raw) else { throw VaultError.usage("--scope expects terminal or user, not '\(raw)'") }
                return s
            } ?? .terminal
            let name = store.location.name
            // A second unlock with nothing new to say: the session this terminal has stays.
            let changes = [UnlockOptions.timeout, UnlockOptions.maxLifetime, UnlockOptions.scope, UnlockOptions.rotate, AuthOptions.passcode, GlobalOptions.passcodeFD]
            if !changes.contains(where: inv.has), let open = SessionCommands.ownSession(store.location, ctx) {
                if inv.has(UnlockOptions.json) {
                    ctx.stdout.write(jsonText(["vault": name, "unlocked": true, "already": true, "idle_left": open.idleLeft, "scope": open.scope.rawValue]))
                }
                ctx.say("vault: vault '\(name)' is already unlocked (\(open.idleLeft) s idle left)")
                return
            }
            let vault: UnlockedVault
            if inv.has(UnlockOptions.rotate) {
                guard inv.has(AuthOptions.passcode) || inv.has(GlobalOptions.passcodeFD) else {
                    throw VaultError.usage("--rotate needs the passcode", hint: "'vault unlock --passcode --rotate'")
                }
                vault = try Auth.unlockWithPasscode(store, inv, ctx, why: "re-binding needs the passcode") { current, passcode in
                    try RotateCommand.rotate(current, passcode: passcode, kdf: nil, inv, ctx)
                }
            } else {
                vault = try Auth.unlock(store, inv, ctx, purpose: "unlock")
            }
            try SessionCommands.openSession(vault, idle: idle, hardLimit: hard, scope: scope, ctx)
            SyncCommands.afterUnlock(store.location, ctx)
            if inv.has(UnlockOptions.json) {
                ctx.stdout.write(jsonText(["vault": name, "unlocked": true, "idle_timeout": Int(idle), "max_lifetime": Int(hard), "scope": scope.rawValue]))
            }
            // Durations as the person gave them (10m stays 10m).
            let idleText = inv[UnlockOptions.timeout] ?? SessionCommands.describe(idle)
            let hardText = inv[UnlockOptions.maxLifetime] ?? SessionCommands.describe(hard)
            let who = scope == .terminal ? "commands in this terminal" : "every process of yours"
            ctx.say("vault: vault '\(name)' unlocked: \(who) can fetch logins until \(idleText) idle (at most \(hardText)); 'vault lock' ends it")
        })
}

extension [EnrolledFinger] {
    /// Whether `finger` is enrolled where a new enrolment of it would go: on the one reader all
    /// the prints are on (with several readers, or one named, the authority decides after the passcode).
    func isEnrolled(_ finger: String, sensorNamed: Bool) -> Bool {
        !sensorNamed && Set(map(\.sensor.canonical)).count == 1 && contains { $0.finger == finger }
    }
}
