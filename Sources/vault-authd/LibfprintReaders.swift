import FingerprintKit
import Foundation
import VaultAuthority
import VaultKit

/// The daemon's readers, through FingerprintKit (only this executable links libfprint, not the
/// VaultAuthority module that vault's client side shares): a reader is opened when a request first needs
/// it, shared by the requests running at that moment, and closed when the last of them ends (so
/// the daemon does not hold the reader between requests, and a request that was cancelled or
/// whose client went away frees it). libfprint's virtual readers are refused unless
/// `allowVirtual` (`--test-mode`).
final class LibfprintReaders: ReaderSource, @unchecked Sendable {
    /// Whether libfprint's `virtual_*` drivers may be used.
    let allowVirtual: Bool
    private let lock = NSLock()
    private let opening = NSLock()
    private var pool: [PooledSensor] = []

    /// The readers of this machine.
    init(allowVirtual: Bool) {
        self.allowVirtual = allowVirtual
    }

    /// One open sensor and how many requests use it.
    final class PooledSensor: @unchecked Sendable {
        let sensor: FingerprintSensor
        var users = 1
        init(_ sensor: FingerprintSensor) { self.sensor = sensor }
    }

    /// Opens (or shares) the reader `prefer` names by driver, else the first usable one.
    func open(prefer: SensorIdentity?, session: ScanSession) throws -> any SessionReader {
        let pooled = try acquire(prefer)
        session.onEnd { [self] in release(pooled) }
        return SensorSessionReader(pooled.sensor, session: session)
    }

    private func acquire(_ prefer: SensorIdentity?) throws -> PooledSensor {
        opening.lock()
        defer { opening.unlock() }
        let shared: PooledSensor? = lock.withLock {
            guard let p = pool.first(where: { prefer == nil || $0.sensor.info.driver == prefer?.driver }) else { return nil }
            p.users += 1
            return p
        }
        if let shared { return shared }
        let sensor: FingerprintSensor
        do {
            sensor = try FingerprintService.shared.open(selector: prefer?.driver)
        } catch {
            throw readerError(error)
        }
        guard allowVirtual || !sensor.info.driver.hasPrefix("virtual_") else {
            sensor.close()
            throw VaultError.biometryNotAvailable("libfprint's virtual readers are served only by a vault-authd in --test-mode")
        }
        let p = PooledSensor(sensor)
        lock.withLock { pool.append(p) }
        return p
    }

    /// Closes the sensor when its last request ends; an open waits for that close to finish
    /// (libfprint refuses to open a device that is still open).
    private func release(_ pooled: PooledSensor) {
        opening.lock()
        defer { opening.unlock() }
        let close: Bool = lock.withLock {
            pooled.users -= 1
            guard pooled.users == 0 else { return false }
            pool.removeAll { $0 === pooled }
            return true
        }
        if close { pooled.sensor.close() }
    }

    /// Whether any reader is open (tests, status).
    var openReaders: Int { lock.withLock { pool.count } }
}

/// Maps FingerprintKit's errors to the vault's exit codes (as the CLI does for the embedded authority).
func readerError(_ e: FingerprintError) -> VaultError {
    switch e {
    case .noReader: .biometryNotAvailable("no fingerprint reader found")
    case .readerBusy(let m): .systemCancel("the fingerprint reader is busy (\(m)); fprintd may hold it")
    case .permissionDenied(let m): .biometryNotAvailable("vault-authd has no permission to open the reader (\(m))")
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

/// A FingerprintKit sensor as the hosted authority's reader, for one request: scans wait the
/// request's scan timeout, a cancel from the client cancels the libfprint operation, enrolment
/// progress is streamed to the client. No keyboard here: cancellation comes from the client.
final class SensorSessionReader: SessionReader {
    let sensor: FingerprintSensor
    let session: ScanSession
    let identity: SensorIdentity

    init(_ sensor: FingerprintSensor, session: ScanSession) {
        self.sensor = sensor
        self.session = session
        identity = SensorIdentity(driver: sensor.info.driver, deviceID: sensor.info.deviceID)
    }

    var storesPrints: Bool { sensor.info.matchOnChip }

    func chipPrints() throws -> [String] {
        guard storesPrints else { return [] }
        do { return try sensor.storedPrintIdentities() } catch { throw readerError(error) }
    }

    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        let cancellation = FingerprintCancellation()
        let sensor = self.sensor, timeout = session.scanTimeout
        do {
            return try session.whileCancellable(onCancel: { cancellation.cancel($0 == .user ? .user : .program) }) {
                try sensor.match(prints: prints, timeout: timeout, cancellation: cancellation)
            }
        } catch let e as FingerprintError {
            if e == .cancelled || e == .cancelledByProgram, let reason = session.cancelReason { throw reason.interruption }
            throw Self.interruption(e)
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

    func enroll(finger: String) throws -> [UInt8] {
        guard let f = Finger(rawValue: finger) else {
            throw VaultError.usage("unknown finger '\(finger)'", hint: "fingers: \(Finger.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let session = self.session, sensor = self.sensor, timeout = session.scanTimeout
        session.notify(.notice(notice: .enrolling(finger: finger, reader: sensor.info.name, stages: sensor.info.enrollStages)))
        let cancellation = FingerprintCancellation()
        do {
            return try session.whileCancellable(onCancel: { cancellation.cancel($0 == .user ? .user : .program) }) {
                try sensor.enroll(finger: f, username: "uid-\(session.uid)", timeout: timeout, cancellation: cancellation) { p in
                    session.notify(.notice(notice: .enrollProgress(completed: p.completedStages, total: p.totalStages, advice: p.retry?.advice)))
                }
            }
        } catch let e as FingerprintError {
            if e == .cancelled || e == .cancelledByProgram, let reason = session.cancelReason { throw reason.interruption.vaultError }
            throw readerError(e)
        }
    }

    func deletePrint(_ data: [UInt8]) throws {
        do { try sensor.deletePrint(data) } catch { throw readerError(error) }
    }
}
