/// The entry point to the fingerprint readers of this machine.
///
/// It owns the one dedicated libfprint thread of the process; every libfprint call runs there.
/// There is a single shared instance because libfprint iterates GLib's global default main
/// context, and two threads doing that deadlock.
public final class FingerprintService: Sendable {
    /// The process-wide service.
    public static let shared = FingerprintService()

    let thread = FprintThread()

    private init() {}

    /// Lists the readers, without opening them.
    ///
    /// Each call enumerates afresh in a new `FpContext`, so environment variables set since the last
    /// call (`FP_VIRTUAL_DEVICE`, `FP_DRIVERS_WHITELIST`) take effect.
    public func sensors() throws(FingerprintError) -> [SensorInfo] {
        try thread.run { () throws(FingerprintError) in
            FprintContext(thread: thread).devices().map(\.info)
        }
    }

    /// Opens a reader for enrolment and matching; close it with ``FingerprintSensor/close()``
    /// (releasing the last reference closes it too).
    ///
    /// - Parameter selector: nil for any reader, otherwise a device id or driver name to match.
    ///   Of the matching readers, the first that opens is returned: one that is busy or fails to
    ///   open is skipped.
    /// - Throws: ``FingerprintError/noReader`` when nothing matches; when no matching reader opens,
    ///   the first reader's error: ``FingerprintError/readerBusy(_:)`` when fprintd or another
    ///   program holds it, ``FingerprintError/permissionDenied(_:)``, or another error.
    public func open(selector: String?) throws(FingerprintError) -> FingerprintSensor {
        try thread.run { () throws(FingerprintError) in
            let devices = FprintContext(thread: thread).devices().filter { device in
                guard let selector else { return true }
                let info = device.info
                return info.deviceID == selector || info.driver == selector
            }
            var firstError: FingerprintError?
            for device in devices {
                do throws(FingerprintError) {
                    try device.open()
                    return FingerprintSensor(device: device)
                } catch {
                    firstError = firstError ?? error
                }
            }
            throw firstError ?? .noReader
        }
    }

    /// Reads what a serialized print says about itself: driver, device, finger and its identity.
    ///
    /// - Throws: ``FingerprintError/invalidPrint`` when `print` is not `fp_print_serialize` output.
    public func describe(print: [UInt8]) throws(FingerprintError) -> PrintMetadata {
        try thread.run { () throws(FingerprintError) in
            let parsed = try FprintPrint(serialized: print, thread: thread)
            return parsed.metadata(identity: try FprintPrint.identity(ofSerialized: print))
        }
    }
}
