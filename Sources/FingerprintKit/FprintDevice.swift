internal import CFprint
internal import Glibc
internal import Synchronization

/// Owns one `FpContext`. Use on the libfprint thread only.
final class FprintContext {
    let pointer: UnsafeMutablePointer<FpContext>
    let thread: FprintThread

    init(thread: FprintThread) {
        pointer = fp_context_new()
        self.thread = thread
    }

    deinit {
        let pointer = Pointer(value: UnsafeMutableRawPointer(pointer))
        thread.async { g_object_unref(pointer.value) }
    }

    /// The readers; the first call enumerates them (reading `FP_VIRTUAL_*` and `FP_DRIVERS_WHITELIST`).
    func devices() -> [FprintDevice] {
        guard let array = fp_context_get_devices(pointer) else { return [] }
        return (0..<Int(array.pointee.len)).compactMap { index in
            array.pointee.pdata[index].map {
                FprintDevice(retaining: $0.assumingMemoryBound(to: FpDevice.self), context: self)
            }
        }
    }
}

/// Owns one reference to an `FpDevice` (and keeps its context alive). Use on the libfprint thread only.
final class FprintDevice {
    let pointer: UnsafeMutablePointer<FpDevice>
    let context: FprintContext
    private var fingerStatusConnection: gulong = 0

    var thread: FprintThread { context.thread }

    init(retaining pointer: UnsafeMutablePointer<FpDevice>, context: FprintContext) {
        g_object_ref(gpointer(pointer))
        self.pointer = pointer
        self.context = context
    }

    deinit {
        let pointer = Pointer(value: UnsafeMutableRawPointer(pointer))
        let connection = fingerStatusConnection
        thread.async {
            if connection != 0 { g_signal_handler_disconnect(pointer.value, connection) }
            g_object_unref(pointer.value)
        }
    }

    var info: SensorInfo {
        SensorInfo(
            deviceID: string(fp_device_get_device_id(pointer)) ?? "",
            driver: string(fp_device_get_driver(pointer)) ?? "",
            name: string(fp_device_get_name(pointer)) ?? "",
            scanType: fp_device_get_scan_type(pointer) == FP_SCAN_TYPE_SWIPE ? "swipe" : "press",
            matchOnChip: hasStorage,
            supportsIdentify: supportsIdentify,
            enrollStages: Int(fp_device_get_nr_enroll_stages(pointer)))
    }

    private func has(_ feature: FpDeviceFeature) -> Bool {
        fp_device_has_feature(pointer, feature) != 0
    }

    var supportsIdentify: Bool { has(FP_DEVICE_FEATURE_IDENTIFY) }
    var hasStorage: Bool { has(FP_DEVICE_FEATURE_STORAGE) }
    var canListStorage: Bool { has(FP_DEVICE_FEATURE_STORAGE_LIST) }
    var canDeleteFromStorage: Bool { has(FP_DEVICE_FEATURE_STORAGE_DELETE) }

    var isOpen: Bool { fp_device_is_open(pointer) != 0 }

    var enrollStages: Int { Int(fp_device_get_nr_enroll_stages(pointer)) }

    func open() throws(FingerprintError) {
        _ = try fprintCall { fp_device_open_sync(pointer, nil, $0) }
    }

    func close() throws(FingerprintError) {
        _ = try fprintCall { fp_device_close_sync(pointer, nil, $0) }
    }

    /// `fp_device_enroll_sync` with a template carrying finger, user name and today's date.
    func enroll(
        finger: Finger, username: String, cancellation: FingerprintCancellation,
        progress: (Int, RetryReason?) -> Void
    ) throws(FingerprintError) -> FprintPrint {
        let template = FprintPrint(adopting: fp_print_new(pointer), thread: thread)
        fp_print_set_finger(template.pointer, finger.fpFinger)
        fp_print_set_username(template.pointer, username)
        let date = g_date_new()
        g_date_set_time_t(date, time(nil))
        fp_print_set_enroll_date(template.pointer, date)
        g_date_free(date)

        let enrolled = try withoutActuallyEscaping(progress) { (progress) throws(FingerprintError) in
            let sink = ProgressSink(progress)
            return try withExtendedLifetime(sink) { () throws(FingerprintError) in
                try fprintCall(cancellation: cancellation) {
                    fp_device_enroll_sync(
                        pointer, template.pointer, cancellation.cancellable.pointer,
                        { _, completed, _, data, error in
                            let sink = Unmanaged<ProgressSink>.fromOpaque(data!).takeUnretainedValue()
                            var retry: RetryReason?
                            if let error, case .retry(let reason) = fingerprintError(borrowing: error) {
                                retry = reason
                            } else if error != nil {
                                retry = .general
                            }
                            sink.report(Int(completed), retry)
                        },
                        Unmanaged.passUnretained(sink).toOpaque(), $0)
                }
            }
        }
        guard let enrolled else { throw .failed("libfprint returned no enrolled print") }
        return FprintPrint(adopting: enrolled, thread: thread)
    }

    /// `fp_device_verify_sync`: whether the scan matched `print`, and the scanned print when the driver
    /// returns one (`virtual_device` does, on a match and on a non-match).
    func verify(
        _ print: FprintPrint, cancellation: FingerprintCancellation
    ) throws(FingerprintError) -> (matched: Bool, scanned: FprintPrint?) {
        var matched: gboolean = 0
        var scanned: OpaquePointer?
        let outcome = Result { () throws(FingerprintError) in
            try fprintCall(cancellation: cancellation) {
                fp_device_verify_sync(
                    pointer, print.pointer, cancellation.cancellable.pointer, nil, nil, &matched, &scanned, $0)
            }
        }
        // Owned even when the call failed after reporting a scan.
        let scannedPrint = scanned.map { FprintPrint(adopting: $0, thread: thread) }
        _ = try outcome.get()
        return (matched != 0, scannedPrint)
    }

    /// `fp_device_identify_sync`: the index in `prints` of the print the scan matched, or nil.
    func identify(
        _ prints: [FprintPrint], cancellation: FingerprintCancellation
    ) throws(FingerprintError) -> Int? {
        let gallery = g_ptr_array_sized_new(guint(prints.count))!
        defer { g_ptr_array_unref(gallery) }
        for print in prints { g_ptr_array_add(gallery, gpointer(print.pointer)) }
        var match: OpaquePointer?
        var scanned: OpaquePointer?
        let outcome = Result { () throws(FingerprintError) in
            try fprintCall(cancellation: cancellation) {
                fp_device_identify_sync(
                    pointer, gallery, cancellation.cancellable.pointer, nil, nil, &match, &scanned, $0)
            }
        }
        // Owned even when the call failed after reporting a scan.
        _ = scanned.map { FprintPrint(adopting: $0, thread: thread) }
        let matchedPrint = match.map { FprintPrint(adopting: $0, thread: thread) }
        _ = try outcome.get()
        guard let matched = matchedPrint else { return nil }
        // libfprint hands back one of the gallery's own objects; equality is the fallback.
        return prints.firstIndex { $0.pointer == matched.pointer }
            ?? prints.firstIndex { $0.isEqual(to: matched) }
    }

    /// `fp_device_list_prints_sync`: the prints stored on the reader.
    func listPrints() throws(FingerprintError) -> [FprintPrint] {
        let array = try fprintCall { fp_device_list_prints_sync(pointer, nil, $0) }
        guard let array else { return [] }
        defer { g_ptr_array_unref(array) }
        return (0..<Int(array.pointee.len)).compactMap { index in
            array.pointee.pdata[index].map { FprintPrint(retaining: OpaquePointer($0), thread: thread) }
        }
    }

    /// `fp_device_delete_print_sync`.
    func deletePrint(_ print: FprintPrint) throws(FingerprintError) {
        _ = try fprintCall { fp_device_delete_print_sync(pointer, print.pointer, nil, $0) }
    }

    /// Reports `finger-status` changes to `sink` until this device is released.
    func watchFingerStatus(_ sink: FingerStatusSink) {
        guard fingerStatusConnection == 0 else { return }
        let callback: @convention(c) (gpointer?, gpointer?, gpointer?) -> Void = { device, _, data in
            guard let device, let data else { return }
            let status = fp_device_get_finger_status(device.assumingMemoryBound(to: FpDevice.self))
            Unmanaged<FingerStatusSink>.fromOpaque(data).takeUnretainedValue()
                .report(FingerStatus(rawValue: Int(status.rawValue)))
        }
        fingerStatusConnection = g_signal_connect_data(
            gpointer(pointer), "notify::finger-status", unsafeBitCast(callback, to: GCallback.self),
            Unmanaged.passRetained(sink).toOpaque(),
            { data, _ in data.map { Unmanaged<FingerStatusSink>.fromOpaque($0).release() } },
            GConnectFlags(0))
    }
}

/// Carries the enrolment progress closure through libfprint's `user_data`.
private final class ProgressSink {
    let report: (Int, RetryReason?) -> Void
    init(_ report: @escaping (Int, RetryReason?) -> Void) { self.report = report }
}

/// Holds the current finger-status handler; libfprint calls it on the libfprint thread.
final class FingerStatusSink: Sendable {
    private let handlerStorage = Mutex<(@Sendable (FingerStatus) -> Void)?>(nil)

    var handler: (@Sendable (FingerStatus) -> Void)? {
        handlerStorage.withLock { $0 }
    }

    func set(_ handler: (@Sendable (FingerStatus) -> Void)?) {
        handlerStorage.withLock { $0 = handler }
    }

    func report(_ status: FingerStatus) {
        handler?(status)
    }
}
