import FoundationEssentials
import ReaderLink
import VaultKit
import VaultSystem

/// The reader selector: `--sensor`, else `VAULT_SENSOR`.
func sensorSelector(_ inv: Invocation, _ ctx: CommandContext) -> String? {
    inv[GlobalOptions.sensor] ?? ctx.environment["VAULT_SENSOR"].flatMap { $0.isEmpty ? nil : $0 }
}

/// `--scan-timeout` in seconds (default 30, also for a command that takes no such option).
func scanTimeout(_ inv: Invocation) throws -> Double {
    guard let raw = inv[ifDeclared: AuthOptions.scanTimeout] else { return 30 }
    guard let d = Duration.seconds(raw), d > 0 else { throw VaultError.usage("--scan-timeout expects a duration like 30, 30s or 2m") }
    return d
}

/// Durations: plain seconds or with a unit (`90`, `90s`, `5m`, `12h`).
enum Duration {
    static func seconds(_ text: String) -> Double? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        if let last = text.last, let mult = units[last] { return Double(text.dropLast()).map { $0 * mult } }
        return Double(text)
    }
}

/// Maps the reader process's faults (FingerprintKit's errors) to the vault's exit codes.
func vaultError(_ e: ReaderFault) -> VaultError {
    switch e.kind {
    case .noReader: .biometryNotAvailable("none found")
    case .busy: .systemCancel("the fingerprint reader is busy (\(e.detail)); fprintd may hold it")
    case .permission: .biometryNotAvailable("no permission to open the reader (\(e.detail))")
    case .removed: .biometryNotAvailable("the reader was removed")
    case .cancelled: .userCancel
    case .cancelledByProgram: .appCancel("the scan was cancelled")
    case .timedOut: .appCancel("no finger within the scan timeout")
    case .retry: .failure("the scan did not work: \(e.detail)")
    case .duplicate: .failure("this finger is already enrolled on the reader")
    case .noEnrolledPrints: .biometryNotEnrolled
    case .other: .biometryNotAvailable(e.message)
    }
}

/// One reader opened in a `vault-reader` process of this command (libfprint is loaded there,
/// never in vault itself); the process ends when this value goes.
final class RemoteSensor: @unchecked Sendable {
    let process: ReaderProcess
    let info: ReaderInfo

    init(process: ReaderProcess, info: ReaderInfo) {
        self.process = process
        self.info = info
    }

    /// Starts a reader process and lists the readers, without opening them.
    static func sensors(_ ctx: CommandContext) throws -> [ReaderInfo] {
        let process = try ReaderProcess(environment: ctx.environment)
        guard case .sensors(let readers) = try call(process, .sensors) else { throw unexpected }
        return readers
    }

    /// Starts a reader process and opens the reader `selector` names (else the first usable one).
    static func open(selector: String?, _ ctx: CommandContext) throws -> RemoteSensor {
        let process = try ReaderProcess(environment: ctx.environment)
        guard case .opened(let info) = try call(process, .open(selector: selector)) else { throw unexpected }
        return RemoteSensor(process: process, info: info)
    }

    /// One request, its fault as a `ReaderFault`.
    static func call(_ process: ReaderProcess, _ request: ReaderRequest,
                     progress: (Int, Int, String?) -> Void = { _, _, _ in }) throws -> ReaderReply {
        try process.call(request, progress: progress)
    }

    static let unexpected = VaultError.biometryNotAvailable("the fingerprint reader program sent an unexpected reply")

    func close() {
        _ = try? process.call(.close)
    }
}

/// Opens the reader named by `--sensor`/`VAULT_SENSOR`, else the one `prefer` names (the reader a
/// vault is bound to, or the prints were enrolled on), else the first usable one.
func openSensor(_ inv: Invocation, _ ctx: CommandContext, prefer: SensorIdentity? = nil) throws -> RemoteSensor {
    do {
        return try RemoteSensor.open(selector: sensorSelector(inv, ctx) ?? prefer?.driver, ctx)
    } catch let e as ReaderFault {
        throw vaultError(e)
    }
}

/// Cancels the reader process's running scan: Ctrl-C (`user`), Enter for the passcode (`program`).
/// The first reason is sent, once.
final class FingerprintCancellation: @unchecked Sendable {
    enum Reason { case user, program }
    private let process: ReaderProcess
    private let lock = ThreadLock()
    private var sent = false

    init(_ process: ReaderProcess) { self.process = process }

    func cancel(_ reason: Reason) {
        guard lock.withLock({ defer { sent = true }; return !sent }) else { return }
        process.cancel(reason == .user ? .user : .program)
    }
}

/// Runs a blocking fingerprint operation on a helper thread while this thread watches for Ctrl-C
/// and, on a terminal, for a line typed (the passcode fallback). Returns the operation's result.
///
/// While it waits the terminal echoes nothing: a passcode typed there out of habit never shows.
/// With `allowFallback` (and a scan that may end in the passcode, `ctx.scanOffersPasscode`), the
/// line typed ends the scan: Enter alone asks for the passcode, text and Enter *is* the passcode
/// (kept in `ctx.typedPasscode`). Where no passcode may be used, the line is dropped with a word.
/// Ctrl-Z and `fg` meanwhile keep echo off, and `prompt` (the line that asked for the finger) is
/// shown again after `fg`.
func watchingKeyboard<T: Sendable>(_ ctx: CommandContext, allowFallback: Bool, cancellation: FingerprintCancellation,
                                   prompt: String? = nil, promptShown: Int? = nil,
                                   _ body: @escaping @Sendable () throws -> T) throws -> (result: T?, fallback: Bool) {
    let screen = ctx.terminal.inputFD
    let shown = promptShown ?? TerminalSuspension.continuations
    // Back as it was afterwards, unread keys dropped (half a passcode must not reach the shell).
    return try TerminalMode.withSilence(screen) {
        try watchingKeyboardQuietly(ctx, screen: screen, allowFallback: allowFallback, cancellation: cancellation, prompt: prompt, shown: shown, body)
    }
}

private func watchingKeyboardQuietly<T: Sendable>(_ ctx: CommandContext, screen: Int32, allowFallback: Bool,
                                                  cancellation: FingerprintCancellation, prompt: String?, shown: Int,
                                                  _ body: @escaping @Sendable () throws -> T) throws -> (result: T?, fallback: Bool) {
    let box = ResultBox<T>()
    let done = ThreadSignal()
    do {
        try Threads.detach {
            do { box.set(.success(try body())) } catch { box.set(.failure(error)) }
            done.fire()
        }
    } catch {
        throw VaultError.failure("cannot start the fingerprint thread: \(error)")
    }
    var fallback = false
    let tty = allowFallback ? screen : -1
    let offersPasscode = ctx.scanOffersPasscode
    var continued = shown
    while !done.wait(seconds: 0.05) {
        if ctx.interrupted() { cancellation.cancel(.user) }
        if TerminalSuspension.continuations != continued {
            continued = TerminalSuspension.continuations
            if let prompt { ctx.say(prompt) }
        }
        if tty >= 0 && !fallback && (try? Poll.isReadable(tty, timeoutMilliseconds: 0)) == true {
            guard let line = try? SecretLine.read(fd: tty) else { continue }
            if offersPasscode {
                if line.count > 0 { ctx.typedPasscode.keep(line) }
                fallback = true
                cancellation.cancel(.program)
            } else {
                ctx.say("vault: only a finger is accepted here: touch the reader (Ctrl-C cancels)")
            }
        }
    }
    switch box.get()! {
    case .success(let v): return (v, fallback)
    case .failure(let e):
        if fallback { return (nil, true) }
        if ctx.interrupted() { throw VaultError.userCancel }
        throw e
    }
}

final class ResultBox<T: Sendable>: @unchecked Sendable {
    private var value: Result<T, any Error>?
    private let lock = ThreadLock()
    func set(_ v: Result<T, any Error>) { lock.lock(); value = v; lock.unlock() }
    func get() -> Result<T, any Error>? { lock.lock(); defer { lock.unlock() }; return value }
}

/// The reader in `vault-reader` as VaultKit's `FingerprintReader`: prompts and the progress bar
/// here, on the terminal; libfprint in the child.
final class LibfprintReader: FingerprintReader {
    let sensor: RemoteSensor
    let identity: SensorIdentity
    let ctx: CommandContext
    let timeout: Double
    let interactive: Bool

    init(sensor: RemoteSensor, ctx: CommandContext, timeout: Double, interactive: Bool) {
        self.sensor = sensor
        identity = SensorIdentity(driver: sensor.info.driver, deviceID: sensor.info.deviceID)
        self.ctx = ctx
        self.timeout = timeout
        self.interactive = interactive
    }

    deinit { sensor.close() }

    func chipPrints() throws -> [String] {
        do {
            guard case .prints(let ids) = try sensor.process.call(.chipPrints) else { throw RemoteSensor.unexpected }
            return ids
        } catch let e as ReaderFault {
            throw vaultError(e)
        }
    }

    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        let line = "vault: " + prompt + (interactive && ctx.scanOffersPasscode ? " (or press Enter for the passcode)" : "")
        let shown = TerminalSuspension.continuations
        ctx.say(line)
        let process = sensor.process
        let cancellation = FingerprintCancellation(process)
        let request = ReaderRequest.match(prints: prints.map { Data($0) }, timeout: timeout)
        do {
            let r = try watchingKeyboard(ctx, allowFallback: interactive, cancellation: cancellation, prompt: line, promptShown: shown) { () throws -> Int? in
                guard case .matched(let index) = try process.call(request) else { throw RemoteSensor.unexpected }
                return index
            }
            if r.fallback { throw ScanInterruption.fallbackRequested }
            return r.result ?? nil
        } catch let e as ReaderFault {
            throw LibfprintReader.interruption(e)
        } catch VaultError.userCancel {
            throw ScanInterruption.userCancelled
        }
    }

    static func interruption(_ e: ReaderFault) -> ScanInterruption {
        switch e.kind {
        case .retry: .retry(advice: e.detail)
        case .timedOut: .timedOut
        case .cancelled: .userCancelled
        case .cancelledByProgram: .programCancelled
        case .removed: .removed
        case .busy: .busy(e.message)
        default: .failed(e.message)
        }
    }

    /// Enrols with a progress bar on the terminal (narration lines otherwise).
    func enroll(finger: String) throws -> [UInt8] {
        guard FingerNames.all.contains(finger) else {
            throw VaultError.usage("unknown finger '\(finger)'", hint: "fingers: \(FingerNames.all.joinedText(separator: ", "))")
        }
        let onTerminal = interactive
        let total = sensor.info.enrollStages
        ctx.say("vault: enrolling \(finger) on \(sensor.info.name): touch the reader \(total) times")
        let process = sensor.process
        let cancellation = FingerprintCancellation(process)
        let out = Unchecked(value: (terminal: ctx.terminal, stderr: ctx.stderr))
        let line = ProgressLine(ctx, everyStep: true)
        let progress: @Sendable (Int, Int, String?) -> Void = { completed, total, advice in
            let note = "- " + (advice ?? (completed < total ? "lift and touch again" : "done"))
            if onTerminal { line.draw(completed, of: total, note) }
            else { out.value.stderr.write("vault: enrol " + Style.plain.progress(completed, of: total, note) + "\n") }
        }
        let request = ReaderRequest.enroll(finger: finger, username: ProcessIdentity.userName(of: ProcessIdentity.uid) ?? "uid \(ProcessIdentity.uid)", timeout: timeout)
        do {
            let r = try watchingKeyboard(ctx, allowFallback: false, cancellation: cancellation) { () throws -> [UInt8] in
                guard case .enrolled(let print) = try process.call(request, progress: progress) else { throw RemoteSensor.unexpected }
                return Array(print)
            }
            return r.result ?? []
        } catch let e as ReaderFault {
            throw vaultError(e)
        }
    }

    func deletePrint(_ data: [UInt8]) throws {
        do { _ = try sensor.process.call(.deletePrint(print: Data(data))) } catch let e as ReaderFault { throw vaultError(e) }
    }
}

/// Hands a value to the reader's progress callback; the sinks it carries write with `write(2)`,
/// which is safe from any thread.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
}
