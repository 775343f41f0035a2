import Foundation
import FingerprintKit
import VaultKit
import VaultSystem

/// The reader selector: `--sensor`, else `VAULT_SENSOR`.
func sensorSelector(_ inv: Invocation, _ ctx: CommandContext) -> String? {
    inv.value("--sensor") ?? ctx.environment["VAULT_SENSOR"].flatMap { $0.isEmpty ? nil : $0 }
}

/// `--scan-timeout` in seconds (default 30).
func scanTimeout(_ inv: Invocation) throws -> Double {
    guard let raw = inv.value("--scan-timeout") else { return 30 }
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

/// Maps FingerprintKit's errors to the vault's exit codes.
func vaultError(_ e: FingerprintError) -> VaultError {
    switch e {
    case .noReader: .biometryNotAvailable("none found")
    case .readerBusy(let m): .systemCancel("the fingerprint reader is busy (\(m)); fprintd may hold it")
    case .permissionDenied(let m): .biometryNotAvailable("no permission to open the reader (\(m))")
    case .removed: .biometryNotAvailable("the reader was removed")
    case .cancelled: .userCancel
    case .cancelledByProgram: .appCancel("the scan was cancelled")
    case .timedOut: .appCancel("no finger within the scan timeout")
    case .retry(let r): .failure("the scan did not work: \(r.advice)")
    case .duplicate: .failure("this finger is already enrolled on the reader")
    case .noEnrolledPrints: .biometryNotEnrolled
    default: .biometryNotAvailable(e.message)
    }
}

/// Opens the selected reader.
/// Opens the reader named by `--sensor`/`VAULT_SENSOR`, else the one `prefer` names (the reader a
/// vault is bound to, or the prints were enrolled on), else the first usable one.
func openSensor(_ inv: Invocation, _ ctx: CommandContext, prefer: SensorIdentity? = nil) throws -> FingerprintSensor {
    do {
        return try FingerprintService.shared.open(selector: sensorSelector(inv, ctx) ?? prefer?.driver)
    } catch {
        throw vaultError(error)
    }
}

/// Runs a blocking fingerprint operation on a helper thread while this thread watches for Ctrl-C
/// and, on a terminal, for a line typed (the passcode fallback). Returns the operation's result.
///
/// While it waits the terminal echoes nothing: a passcode typed there out of habit never shows.
/// With `allowFallback` (and a scan that may end in the passcode, `ctx.scanOffersPasscode`), the
/// line typed ends the scan: Enter alone asks for the passcode, text and Enter *is* the passcode
/// (kept in `ctx.typedPasscode`). Where no passcode may be used, the line is dropped with a word.
func watchingKeyboard<T: Sendable>(_ ctx: CommandContext, allowFallback: Bool, cancellation: FingerprintCancellation,
                                   _ body: @escaping @Sendable () throws -> T) throws -> (result: T?, fallback: Bool) {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    let screen = ctx.terminal.inputFD
    let saved = screen >= 0 ? try? TerminalAttributes.get(screen) : nil
    if var quiet = saved {
        quiet.echo = false
        quiet.echoNewline = false
        try? quiet.set(screen, when: .now)
    }
    // Back as it was, unread keys dropped (half a passcode must not reach the shell).
    defer { try? saved?.set(screen, when: .flush) }
    Thread.detachNewThread {
        do { box.set(.success(try body())) } catch { box.set(.failure(error)) }
        done.signal()
    }
    var fallback = false
    let tty = allowFallback ? screen : -1
    let offersPasscode = ctx.scanOffersPasscode
    while done.wait(timeout: .now() + .milliseconds(50)) == .timedOut {
        if ctx.interrupted() { cancellation.cancel(.user) }
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
    private let lock = NSLock()
    func set(_ v: Result<T, any Error>) { lock.lock(); value = v; lock.unlock() }
    func get() -> Result<T, any Error>? { lock.lock(); defer { lock.unlock() }; return value }
}

/// FingerprintKit's sensor as VaultKit's `FingerprintReader`.
final class LibfprintReader: FingerprintReader {
    let sensor: FingerprintSensor
    let identity: SensorIdentity
    let ctx: CommandContext
    let timeout: Double
    let interactive: Bool

    init(sensor: FingerprintSensor, ctx: CommandContext, timeout: Double, interactive: Bool) {
        self.sensor = sensor
        identity = SensorIdentity(driver: sensor.info.driver, deviceID: sensor.info.deviceID)
        self.ctx = ctx
        self.timeout = timeout
        self.interactive = interactive
    }

    deinit { sensor.close() }

    func chipPrints() throws -> [String] {
        do { return try sensor.storedPrintIdentities() } catch { throw vaultError(error) }
    }

    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        ctx.say("vault: " + prompt + (interactive && ctx.scanOffersPasscode ? " (or press Enter for the passcode)" : ""))
        let cancellation = FingerprintCancellation()
        let sensor = self.sensor, timeout = self.timeout
        do {
            let r = try watchingKeyboard(ctx, allowFallback: interactive, cancellation: cancellation) {
                try sensor.match(prints: prints, timeout: timeout, cancellation: cancellation)
            }
            if r.fallback { throw ScanInterruption.fallbackRequested }
            return r.result ?? nil
        } catch let e as FingerprintError {
            throw LibfprintReader.interruption(e)
        } catch VaultError.userCancel {
            throw ScanInterruption.userCancelled
        }
    }

    static func interruption(_ e: FingerprintError) -> ScanInterruption {
        switch e {
        case .retry(let reason): .retry(advice: reason.advice)
        case .timedOut: .timedOut
        case .cancelled: .userCancelled
        case .cancelledByProgram: .programCancelled
        case .removed: .removed
        case .readerBusy(let m): .busy(m)
        default: .failed(e.message)
        }
    }

    /// Enrols with a progress bar on the terminal (narration lines otherwise).
    func enroll(finger: String) throws -> [UInt8] {
        guard let f = Finger(rawValue: finger) else {
            throw VaultError.usage("unknown finger '\(finger)'", hint: "fingers: \(Finger.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let onTerminal = interactive
        let total = sensor.info.enrollStages
        ctx.say("vault: enrolling \(finger) on \(sensor.info.name): touch the reader \(total) times")
        let cancellation = FingerprintCancellation()
        let out = Unchecked(value: (terminal: ctx.terminal, stderr: ctx.stderr))
        let progress: @Sendable (EnrollProgress) -> Void = { p in
            let bar = String(repeating: "#", count: p.completedStages) + String(repeating: "-", count: max(0, p.totalStages - p.completedStages))
            let note = p.retry.map { "\($0.advice)" } ?? (p.completedStages < p.totalStages ? "lift and touch again" : "done")
            let line = "[\(bar)] \(p.completedStages)/\(p.totalStages) - \(note)"
            if onTerminal { out.value.terminal.write("\r\u{1b}[K" + line + (p.completedStages == p.totalStages ? "\n" : "")) }
            else { out.value.stderr.write("vault: enrol " + line + "\n") }
        }
        let sensor = self.sensor, timeout = self.timeout
        do {
            let r = try watchingKeyboard(ctx, allowFallback: false, cancellation: cancellation) {
                try sensor.enroll(finger: f, username: NSUserName(), timeout: timeout, cancellation: cancellation, progress: progress)
            }
            return r.result ?? []
        } catch let e as FingerprintError {
            throw vaultError(e)
        }
    }

    func deletePrint(_ data: [UInt8]) throws {
        do { try sensor.deletePrint(data) } catch { throw vaultError(error) }
    }
}

/// Hands a value to the libfprint thread's callbacks; the sinks it carries write with `write(2)`,
/// which is safe from any thread.
struct Unchecked<T>: @unchecked Sendable {
    let value: T
}
