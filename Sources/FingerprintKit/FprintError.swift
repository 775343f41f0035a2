internal import CFprint

/// Calls a libfprint function that reports failure through a `GError**` out-parameter, and throws the
/// mapped ``FingerprintError`` when it sets one. This is the only place a `GError` is looked at.
///
/// `cancellation` decides what a `G_IO_ERROR_CANCELLED` becomes (user, program or timeout).
func fprintCall<T>(
    cancellation: FingerprintCancellation? = nil,
    _ call: (UnsafeMutablePointer<UnsafeMutablePointer<GError>?>) -> T
) throws(FingerprintError) -> T {
    var error: UnsafeMutablePointer<GError>?
    let result = call(&error)
    if let error {
        defer { g_error_free(error) }
        throw FingerprintError(error.pointee, cancellation: cancellation)
    }
    return result
}

/// Maps a `GError` that libfprint lends to a callback (transfer none), such as an enrolment retry.
func fingerprintError(borrowing error: UnsafeMutablePointer<GError>) -> FingerprintError {
    FingerprintError(error.pointee, cancellation: nil)
}

extension FingerprintError {
    /// Maps a `GError` by domain and code.
    fileprivate init(_ error: GError, cancellation: FingerprintCancellation?) {
        let code = error.code
        let detail = Self.detail(error.message)
        switch error.domain {
        case fp_device_retry_quark():
            self = .retry(RetryReason(rawValue: Int(code)) ?? .general)
        case fp_device_error_quark():
            self = Self.deviceError(code, detail)
        case g_io_error_quark():
            self = Self.ioError(code, detail, cancellation)
        case g_quark_from_static_string("g-usb-device-error-quark"):
            self = Self.usbError(code, detail, cancellation)
        default:
            self = .failed(detail)
        }
    }

    private static func deviceError(_ code: Int32, _ detail: String) -> FingerprintError {
        switch UInt32(bitPattern: code) {
        case FP_DEVICE_ERROR_NOT_SUPPORTED.rawValue: .notSupported(detail)
        case FP_DEVICE_ERROR_ALREADY_OPEN.rawValue, FP_DEVICE_ERROR_BUSY.rawValue: .readerBusy(detail)
        case FP_DEVICE_ERROR_DATA_INVALID.rawValue: .invalidPrint
        case FP_DEVICE_ERROR_DATA_NOT_FOUND.rawValue: .dataNotFound
        case FP_DEVICE_ERROR_DATA_FULL.rawValue: .dataFull
        case FP_DEVICE_ERROR_DATA_DUPLICATE.rawValue: .duplicate
        case FP_DEVICE_ERROR_REMOVED.rawValue: .removed
        default: .failed(detail)
        }
    }

    private static func ioError(
        _ code: Int32, _ detail: String, _ cancellation: FingerprintCancellation?
    ) -> FingerprintError {
        switch UInt32(bitPattern: code) {
        case G_IO_ERROR_CANCELLED.rawValue: cancellation?.error ?? .cancelled
        case G_IO_ERROR_PERMISSION_DENIED.rawValue: .permissionDenied(detail)
        case G_IO_ERROR_BUSY.rawValue: .readerBusy(detail)
        case G_IO_ERROR_NOT_SUPPORTED.rawValue: .notSupported(detail)
        case G_IO_ERROR_INVALID_DATA.rawValue: .invalidPrint
        default: .failed(detail)
        }
    }

    /// gusb's `GUsbDeviceError`: what opening a USB reader held by fprintd, or without udev access, fails with.
    private static func usbError(
        _ code: Int32, _ detail: String, _ cancellation: FingerprintCancellation?
    ) -> FingerprintError {
        // gusb 0.3 reports LIBUSB_ERROR_BUSY (-6) as NO_DEVICE, so the message is checked too.
        let busy = detail.contains("busy") || detail.contains("[-6]")
        switch code {
        case 9: return .permissionDenied(detail)  // G_USB_DEVICE_ERROR_PERMISSION_DENIED
        case 10, 6: return .readerBusy(detail)  // BUSY, ALREADY_OPEN
        case 7: return cancellation?.error ?? .cancelled  // CANCELLED
        case 4: return busy ? .readerBusy(detail) : .removed  // NO_DEVICE
        default: return busy ? .readerBusy(detail) : .failed(detail)
        }
    }

    /// libfprint's message as one lowercase line without a final full stop or exclamation mark.
    private static func detail(_ message: UnsafeMutablePointer<gchar>?) -> String {
        var text = message.map { String(cString: $0) } ?? "unknown error"
        text = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        while let last = text.last, last == "." || last == "!" || last == " " { text.removeLast() }
        let characters = Array(text)
        if characters.count > 1, characters[0].isUppercase, !characters[1].isUppercase {
            text = characters[0].lowercased() + String(characters[1...])
        }
        return text.isEmpty ? "unknown error" : text
    }
}
