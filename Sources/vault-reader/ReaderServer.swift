import FingerprintKit
import Foundation
import ReaderLink
import VaultSystem

/// The serving side of the reader link: requests from vault on standard input (a socketpair),
/// replies on the same socket. At most one reader is open; a `match` or `enroll` runs on a thread
/// of its own so that a `cancel` can reach it. End of input cancels what runs and ends the process.
final class ReaderServer: @unchecked Sendable {
    /// The link to vault: the socketpair on standard input (and output).
    private let wire = ReaderWire(UnixSocket(owning: 0, path: "the reader link"))
    private var sensor: FingerprintSensor?
    private let lock = NSLock()
    private var running: FingerprintCancellation?
    private let finished = DispatchSemaphore(value: 0)

    /// Serves until end of input; returns the exit code.
    func run() -> Int32 {
        while true {
            let request: ReaderRequest?
            do { request = try wire.receive(ReaderRequest.self) } catch {
                stopRunning()
                return 1
            }
            guard let request else {
                stopRunning()
                sensor?.close()
                return 0
            }
            if case .cancel(let reason) = request {
                lock.withLock { running }?.cancel(reason == .user ? .user : .program)
                continue
            }
            guard lock.withLock({ running }) == nil else {
                reply(.failed(fault: ReaderFault(kind: .busy, detail: "a scan is running", message: "a scan is already running")))
                continue
            }
            handle(request)
        }
    }

    private func handle(_ request: ReaderRequest) {
        switch request {
        case .sensors:
            answer { .sensors(readers: try FingerprintService.shared.sensors().map(Self.info)) }
        case .open(let selector):
            answer {
                sensor?.close()
                sensor = nil
                let opened = try FingerprintService.shared.open(selector: selector)
                sensor = opened
                return .opened(reader: Self.info(opened.info))
            }
        case .close:
            sensor?.close()
            sensor = nil
            reply(.done)
        case .chipPrints:
            answer { .prints(identities: try openSensor().storedPrintIdentities()) }
        case .deletePrint(let print):
            answer {
                try openSensor().deletePrint(Array(print))
                return .done
            }
        case .match(let prints, let timeout):
            background { sensor, cancellation in
                .matched(index: try sensor.match(prints: prints.map { Array($0) }, timeout: timeout, cancellation: cancellation))
            }
        case .enroll(let name, let username, let timeout):
            guard let finger = Finger(rawValue: name) else {
                reply(.failed(fault: ReaderFault(kind: .other, message: "unknown finger '\(name)'")))
                return
            }
            background { [self] sensor, cancellation in
                let print = try sensor.enroll(finger: finger, username: username, timeout: timeout, cancellation: cancellation) { p in
                    self.reply(.progress(completed: p.completedStages, total: p.totalStages, advice: p.retry?.advice))
                }
                return .enrolled(print: Data(print))
            }
        case .cancel:
            break
        }
    }

    private func openSensor() throws -> FingerprintSensor {
        guard let sensor else { throw FingerprintError.failed("no reader is open") }
        return sensor
    }

    private func answer(_ body: () throws -> ReaderReply) {
        do { reply(try body()) } catch { reply(.failed(fault: Self.fault(error))) }
    }

    /// Runs a scan on its own thread; the main loop keeps reading (for `cancel`).
    private func background(_ body: @escaping @Sendable (FingerprintSensor, FingerprintCancellation) throws -> ReaderReply) {
        guard let sensor else {
            reply(.failed(fault: Self.fault(FingerprintError.failed("no reader is open"))))
            return
        }
        let cancellation = FingerprintCancellation()
        lock.withLock { running = cancellation }
        let box = Unchecked(value: sensor)
        Thread.detachNewThread { [self] in
            let result: ReaderReply
            do { result = try body(box.value, cancellation) } catch { result = .failed(fault: Self.fault(error)) }
            lock.withLock { running = nil }
            reply(result)
            finished.signal()
        }
    }

    /// Cancels a running scan and waits for it to end (so the reader closes cleanly).
    private func stopRunning() {
        guard let cancellation = lock.withLock({ running }) else { return }
        cancellation.cancel(.program)
        finished.wait()
    }

    private func reply(_ message: ReaderReply) {
        try? wire.send(message)
    }

    static func info(_ s: SensorInfo) -> ReaderInfo {
        ReaderInfo(deviceID: s.deviceID, driver: s.driver, name: s.name, scanType: s.scanType, matchOnChip: s.matchOnChip,
                   supportsIdentify: s.supportsIdentify, enrollStages: s.enrollStages)
    }

    /// FingerprintKit's error as the CLI's kinds (the CLI maps them to exit codes).
    static func fault(_ error: any Error) -> ReaderFault {
        guard let e = error as? FingerprintError else { return ReaderFault(kind: .other, message: "\(error)") }
        let kind: ReaderFault.Kind
        var detail = ""
        switch e {
        case .noReader: kind = .noReader
        case .readerBusy(let m): kind = .busy; detail = m
        case .permissionDenied(let m): kind = .permission; detail = m
        case .removed: kind = .removed
        case .cancelled: kind = .cancelled
        case .cancelledByProgram: kind = .cancelledByProgram
        case .timedOut: kind = .timedOut
        case .retry(let r): kind = .retry; detail = r.advice
        case .duplicate: kind = .duplicate
        case .noEnrolledPrints: kind = .noEnrolledPrints
        default: kind = .other
        }
        return ReaderFault(kind: kind, detail: detail, message: e.message, hint: e.hint)
    }
}

/// A value handed to the scan thread (the sensor serialises its own calls on libfprint's thread).
struct Unchecked<T>: @unchecked Sendable {
    let value: T
}
