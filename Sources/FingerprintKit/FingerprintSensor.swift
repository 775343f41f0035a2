internal import Dispatch

/// An open fingerprint reader. Obtain one from ``FingerprintService/open(selector:)``.
///
/// Every method blocks the caller while the work runs on the libfprint thread; operations on all
/// sensors of the process run one at a time. Cancel a scan from another thread with its
/// ``FingerprintCancellation``. The reader is closed by ``close()`` or when the last reference goes.
public final class FingerprintSensor: @unchecked Sendable {
    /// The reader, as it was when opened.
    public let info: SensorInfo

    private let thread: FprintThread
    private let fingerStatus = FingerStatusSink()
    /// Touched only on the libfprint thread; nil once closed.
    private var device: FprintDevice?

    /// Called on the libfprint thread whenever the reader's finger status changes. `.needed` appears
    /// when the reader starts waiting for a finger (the moment to prompt), also between enrolment
    /// stages. Keep it short, and do not call this sensor from it: it runs inside the operation.
    public var onFingerStatus: (@Sendable (FingerStatus) -> Void)? {
        get { fingerStatus.handler }
        set { fingerStatus.set(newValue) }
    }

    /// Wraps a device already opened on the libfprint thread.
    init(device: FprintDevice) {
        info = device.info
        thread = device.thread
        self.device = device
        device.watchFingerStatus(fingerStatus)
    }

    deinit {
        let device = DeviceHandoff(device: device)
        thread.async { device.close() }
    }

    /// Enrols one finger and returns the print as `fp_print_serialize` bytes, to keep for matching.
    ///
    /// On a match-on-chip reader the print is also stored on the chip.
    ///
    /// - Parameters:
    ///   - finger: the finger recorded in the print.
    ///   - username: the user name recorded in the print.
    ///   - timeout: seconds to wait for each scan, restarted after every stage; 0 or less waits forever.
    ///   - cancellation: cancels the enrolment from any thread.
    ///   - progress: called on the libfprint thread after each accepted stage and each retry; like
    ///     ``onFingerStatus`` it must not call this sensor.
    /// - Throws: ``FingerprintError/timedOut``, ``FingerprintError/cancelled``,
    ///   ``FingerprintError/cancelledByProgram``, ``FingerprintError/removed``,
    ///   ``FingerprintError/duplicate`` (match-on-chip), or another ``FingerprintError``.
    public func enroll(
        finger: Finger, username: String, timeout: Double, cancellation: FingerprintCancellation,
        progress: @escaping @Sendable (EnrollProgress) -> Void
    ) throws(FingerprintError) -> [UInt8] {
        try withDevice(timeout: timeout, cancellation: cancellation) { (device, deadline) throws(FingerprintError) in
            let print = try device.enroll(finger: finger, username: username, cancellation: cancellation) {
                completed, retry in
                deadline.restart()
                progress(EnrollProgress(completedStages: completed, totalStages: device.enrollStages, retry: retry))
            }
            return try print.serialized()
        }
    }

    /// Scans one finger and matches it against `prints`, serialized prints from
    /// ``enroll(finger:username:timeout:cancellation:progress:)``.
    ///
    /// Prints enrolled on another reader (other driver or device id) are skipped, never matched.
    /// When the reader supports identify, one `fp_device_identify_sync` matches the scan against all
    /// of them.
    ///
    /// A reader without identify (of libfprint's drivers, in practice only the plain `virtual_device`:
    /// image readers and match-on-chip readers identify) can only verify one print per scan. The scan
    /// is verified against the first usable print; when that does not match, the scanned print that
    /// libfprint returns is compared with each remaining print using `fp_print_equal`. That is exactly
    /// how such a driver decides a verify (`virtual_device` compares the identity carried by the scan),
    /// so a single scan is judged against every print. If a driver returns no scanned print, or its
    /// prints only match by a fuzzy comparison, the remaining prints cannot match: the answer is a
    /// non-match (nil), never a false match. Asking for a scan per print instead would have the user
    /// touch the reader several times for one unlock.
    ///
    /// - Parameters:
    ///   - prints: the enrolled prints; the result indexes this array.
    ///   - timeout: seconds to wait for the finger; 0 or less waits forever.
    ///   - cancellation: cancels the scan from any thread.
    /// - Returns: the index of the matching print, or nil when the finger matched none.
    /// - Throws: ``FingerprintError/retry(_:)`` for a bad scan (scan again),
    ///   ``FingerprintError/noEnrolledPrints`` when no print belongs to this reader,
    ///   ``FingerprintError/invalidPrint``, ``FingerprintError/timedOut``, ``FingerprintError/cancelled``,
    ///   ``FingerprintError/cancelledByProgram``, ``FingerprintError/removed``, or another error.
    public func match(
        prints: [[UInt8]], timeout: Double, cancellation: FingerprintCancellation
    ) throws(FingerprintError) -> Int? {
        try withDevice(timeout: timeout, cancellation: cancellation) { (device, _) throws(FingerprintError) in
            var gallery: [FprintPrint] = []
            for print in prints { gallery.append(try FprintPrint(serialized: print, thread: thread)) }
            let usable = gallery.indices.filter { gallery[$0].isCompatible(with: device) }
            guard let first = usable.first else { throw .noEnrolledPrints }

            if device.supportsIdentify {
                let found = try device.identify(usable.map { gallery[$0] }, cancellation: cancellation)
                return found.map { usable[$0] }
            }
            let (matched, scanned) = try device.verify(gallery[first], cancellation: cancellation)
            if matched { return first }
            guard let scanned else { return nil }
            return usable.dropFirst().first { gallery[$0].isEqual(to: scanned) }
        }
    }

    /// The identities (``PrintMetadata/identity``) of the prints stored on a match-on-chip reader,
    /// sorted; `[]` for a reader without storage.
    ///
    /// - Throws: ``FingerprintError/notSupported(_:)`` for a reader that stores prints but cannot list
    ///   them, or the error of listing.
    public func storedPrintIdentities() throws(FingerprintError) -> [String] {
        try withDevice(timeout: nil, cancellation: nil) { (device, _) throws(FingerprintError) in
            guard device.hasStorage else { return [] }
            guard device.canListStorage else {
                throw .notSupported("the reader cannot list its stored prints")
            }
            var identities: [String] = []
            for print in try device.listPrints() {
                identities.append(try FprintPrint.identity(ofSerialized: try print.serialized()))
            }
            return identities.sorted()
        }
    }

    /// Deletes a print from a match-on-chip reader's storage; does nothing on a reader without storage.
    ///
    /// - Throws: ``FingerprintError/dataNotFound`` when the chip does not hold it,
    ///   ``FingerprintError/invalidPrint``, ``FingerprintError/notSupported(_:)``, or another error.
    public func deletePrint(_ print: [UInt8]) throws(FingerprintError) {
        try withDevice(timeout: nil, cancellation: nil) { (device, _) throws(FingerprintError) in
            guard device.hasStorage else { return }
            guard device.canDeleteFromStorage else {
                throw .notSupported("the reader cannot delete its stored prints")
            }
            try device.deletePrint(try FprintPrint(serialized: print, thread: thread))
        }
    }

    /// Closes the reader. Later calls do nothing; operations on a closed sensor fail.
    /// Waits for a running operation to end first, so cancel a scan before closing from another thread.
    public func close() {
        _ = try? thread.run { () -> Void in
            DeviceHandoff(device: device).close()
            device = nil
        }
    }

    /// Runs `body` on the libfprint thread with the open device and a scan deadline that cancels
    /// through `cancellation` with `.timeout`.
    private func withDevice<T>(
        timeout: Double?, cancellation: FingerprintCancellation?,
        _ body: (FprintDevice, ScanDeadline) throws(FingerprintError) -> T
    ) throws(FingerprintError) -> T {
        try thread.run { () throws(FingerprintError) -> T in
            guard let device else { throw .failed("the fingerprint reader is closed") }
            let deadline = ScanDeadline(seconds: timeout ?? 0, cancellation: cancellation)
            defer { deadline.stop() }
            return try body(device, deadline)
        }
    }
}

/// Moves the device into a job that closes it on the libfprint thread.
private struct DeviceHandoff: @unchecked Sendable {
    let device: FprintDevice?

    func close() {
        guard let device, device.isOpen else { return }
        // A reader that was unplugged fails to close; there is nothing left to release then.
        try? device.close()
    }
}

/// Cancels a scan with `.timeout` when it runs longer than `seconds`; 0 or less never fires.
private final class ScanDeadline {
    private let seconds: Double
    private let timer: (any DispatchSourceTimer)?

    init(seconds: Double, cancellation: FingerprintCancellation?) {
        self.seconds = seconds
        guard seconds > 0, seconds.isFinite, let cancellation else {
            timer = nil
            return
        }
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.setEventHandler { cancellation.cancel(.timeout) }
        timer.schedule(deadline: .now() + seconds)
        timer.resume()
        self.timer = timer
    }

    /// Starts the wait over (after an enrolment stage).
    func restart() {
        timer?.schedule(deadline: .now() + seconds)
    }

    func stop() {
        timer?.cancel()
    }
}
