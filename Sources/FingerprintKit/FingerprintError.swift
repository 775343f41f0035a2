/// Why a scan has to be repeated: libfprint's `FpDeviceRetry` codes.
///
/// A retry is not a failed match. During enrolment the reader reports it and the enrolment goes on;
/// a verify or identify ends with ``FingerprintError/retry(_:)`` and the caller scans again.
public enum RetryReason: Int, Sendable, CaseIterable {
    /// The scan failed for no particular reason.
    case general = 0
    /// The finger was swiped too fast or too short.
    case tooShort = 1
    /// The finger was not centred on the reader.
    case centerFinger = 2
    /// The finger must be lifted before the next scan.
    case removeFinger = 3

    /// What to tell the person at the reader, lowercase, without a full stop.
    public var advice: String {
        switch self {
        case .general: "try again"
        case .tooShort: "swipe was too short, try again"
        case .centerFinger: "center your finger on the reader"
        case .removeFinger: "remove your finger and try again"
        }
    }
}

/// Everything a fingerprint operation can end with, other than success.
///
/// Every `GError` that libfprint reports passes through one mapping into this type, so callers
/// can switch over the cases exhaustively. No case carries secret material: the strings are
/// libfprint's own messages, lowercased, or explanations written here.
public enum FingerprintError: Error, Sendable, Equatable {
    /// No reader is connected, or none matches the requested selector.
    case noReader
    /// The reader is held by someone else (`FP_DEVICE_ERROR_BUSY`, already open, `EBUSY`); typically fprintd.
    case readerBusy(String)
    /// The reader's device node cannot be opened by this user (udev permissions).
    case permissionDenied(String)
    /// The reader disappeared, e.g. it was unplugged during a scan (`FP_DEVICE_ERROR_REMOVED`).
    case removed
    /// The scan was cancelled through ``FingerprintCancellation/cancel(_:)`` with `.user`.
    case cancelled
    /// The scan was cancelled through ``FingerprintCancellation/cancel(_:)`` with `.program`.
    case cancelledByProgram
    /// No finger was presented before the scan's timeout.
    case timedOut
    /// The scan did not produce a usable image; scan again.
    case retry(RetryReason)
    /// The reader does not hold the requested print (`FP_DEVICE_ERROR_DATA_NOT_FOUND`).
    case dataNotFound
    /// The reader's print storage is full (`FP_DEVICE_ERROR_DATA_FULL`).
    case dataFull
    /// The finger is already enrolled on the reader (`FP_DEVICE_ERROR_DATA_DUPLICATE`).
    case duplicate
    /// None of the prints given to a match was enrolled on this reader (wrong driver or device).
    case noEnrolledPrints
    /// Serialized print data could not be read, or the reader rejected it (`FP_DEVICE_ERROR_DATA_INVALID`).
    case invalidPrint
    /// The reader cannot do what was asked.
    case notSupported(String)
    /// Any other failure, with libfprint's message.
    case failed(String)

    /// One lowercase line for the user, without a program-name prefix or a full stop.
    public var message: String {
        switch self {
        case .noReader: "no fingerprint reader found"
        case .readerBusy(let detail): "the fingerprint reader is busy (\(detail))"
        case .permissionDenied(let detail): "no permission to open the fingerprint reader (\(detail))"
        case .removed: "the fingerprint reader was removed"
        case .cancelled: "the scan was cancelled"
        case .cancelledByProgram: "the scan was cancelled by the program"
        case .timedOut: "no finger was scanned in time"
        case .retry(let reason): "the scan did not work: \(reason.advice)"
        case .dataNotFound: "the print is not stored on the fingerprint reader"
        case .dataFull: "the fingerprint reader's storage is full"
        case .duplicate: "this finger is already enrolled on the fingerprint reader"
        case .noEnrolledPrints: "no prints are enrolled on this fingerprint reader"
        case .invalidPrint: "the stored print data is invalid"
        case .notSupported(let detail): "the fingerprint reader does not support this (\(detail))"
        case .failed(let detail): "fingerprint reader error: \(detail)"
        }
    }

    /// What the user can do about it, when there is something to do; one lowercase line.
    public var hint: String? {
        switch self {
        case .noReader:
            "connect a fingerprint reader that libfprint supports"
        case .readerBusy:
            "fprintd or another program may hold the reader: let it finish, or stop it "
                + "(systemctl stop fprintd) and try again"
        case .permissionDenied:
            "install libfprint's udev rules (package libfprint-2-2) or add a udev rule "
                + "that gives your user access to the reader"
        case .removed:
            "reconnect the reader and try again"
        case .dataFull:
            "remove prints stored on the reader, then enrol again"
        case .noEnrolledPrints:
            "enrol a finger on this reader first"
        case .cancelled, .cancelledByProgram, .timedOut, .retry, .dataNotFound, .duplicate, .invalidPrint,
            .notSupported, .failed:
            nil
        }
    }
}

/// A failure of the virtual-reader socket clients (``VirtualDeviceClient``, ``VirtualImageClient``)
/// or of reading a ``GreyImage``.
public enum VirtualReaderError: Error, Sendable, Equatable {
    /// Nothing listened on the socket within the wait: the device is not open.
    case notListening(path: String)
    /// The driver accepted the command but did not acknowledge it (close the connection) in time.
    case noAcknowledgement(path: String)
    /// The driver closed the connection, e.g. because the device was closed or another client is connected.
    case connectionClosed(path: String)
    /// A socket call failed; the string names the call and the system error.
    case socket(String)
    /// An image file could not be read or is not an 8-bit binary PGM within the driver's limits.
    case invalidImage(String)

    /// One lowercase line for the user, without a program-name prefix.
    public var message: String {
        switch self {
        case .notListening(let path): "no virtual reader is listening on \(path) (is the device open?)"
        case .noAcknowledgement(let path): "the virtual reader on \(path) did not acknowledge the command"
        case .connectionClosed(let path): "the virtual reader on \(path) closed the connection"
        case .socket(let detail): "socket error: \(detail)"
        case .invalidImage(let detail): "invalid image: \(detail)"
        }
    }
}
