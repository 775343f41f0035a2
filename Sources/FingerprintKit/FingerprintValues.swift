/// A finger, named as libfprint's `FpFinger` names it; the raw value is the CLI spelling.
public enum Finger: String, CaseIterable, Sendable {
    /// The left thumb.
    case leftThumb = "left-thumb"
    /// The left index finger.
    case leftIndex = "left-index"
    /// The left middle finger.
    case leftMiddle = "left-middle"
    /// The left ring finger.
    case leftRing = "left-ring"
    /// The left little finger.
    case leftLittle = "left-little"
    /// The right thumb.
    case rightThumb = "right-thumb"
    /// The right index finger.
    case rightIndex = "right-index"
    /// The right middle finger.
    case rightMiddle = "right-middle"
    /// The right ring finger.
    case rightRing = "right-ring"
    /// The right little finger.
    case rightLittle = "right-little"
}

/// A description of one fingerprint reader, read without opening it.
public struct SensorInfo: Sendable, Equatable {
    /// libfprint's device id (`fp_device_get_device_id`); the virtual readers all report "0".
    public var deviceID: String
    /// The driver name (`fp_device_get_driver`), e.g. "synaptics" or "virtual_device".
    public var driver: String
    /// The human-readable reader name (`fp_device_get_name`).
    public var name: String
    /// How the finger is presented: "press" or "swipe".
    public var scanType: String
    /// Whether the reader stores prints itself (`FP_DEVICE_FEATURE_STORAGE`): match-on-chip.
    public var matchOnChip: Bool
    /// Whether the reader can match one scan against several prints (`FP_DEVICE_FEATURE_IDENTIFY`).
    public var supportsIdentify: Bool
    /// How many scans an enrolment takes.
    public var enrollStages: Int

    /// Creates a description; FingerprintKit fills these from libfprint.
    public init(
        deviceID: String, driver: String, name: String, scanType: String, matchOnChip: Bool,
        supportsIdentify: Bool, enrollStages: Int
    ) {
        self.deviceID = deviceID
        self.driver = driver
        self.name = name
        self.scanType = scanType
        self.matchOnChip = matchOnChip
        self.supportsIdentify = supportsIdentify
        self.enrollStages = enrollStages
    }
}

/// Where an enrolment stands, reported after every stage and every retry.
public struct EnrollProgress: Sendable, Equatable {
    /// Scans accepted so far.
    public var completedStages: Int
    /// Scans the enrolment needs in all.
    public var totalStages: Int
    /// Set when this report is a failed scan that must be repeated; `completedStages` did not advance.
    public var retry: RetryReason?

    /// Creates a progress report.
    public init(completedStages: Int, totalStages: Int, retry: RetryReason? = nil) {
        self.completedStages = completedStages
        self.totalStages = totalStages
        self.retry = retry
    }
}

/// What the reader says about the finger, as libfprint's `FpFingerStatusFlags`.
///
/// `needed` means the reader is waiting for a finger right now: the moment to say "touch the reader".
public struct FingerStatus: OptionSet, Sendable, Hashable {
    /// The raw `FpFingerStatusFlags` bits.
    public let rawValue: Int

    /// Creates a status from raw `FpFingerStatusFlags` bits.
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The reader is waiting for a finger.
    public static let needed = FingerStatus(rawValue: 1 << 0)
    /// A finger is on the reader.
    public static let present = FingerStatus(rawValue: 1 << 1)
}

/// What a serialized print says about itself, without scanning.
public struct PrintMetadata: Sendable, Equatable {
    /// The driver the print was enrolled with.
    public var driver: String
    /// The device id the print was enrolled with.
    public var deviceID: String
    /// The finger recorded at enrolment, if any.
    public var finger: Finger?
    /// The user name recorded at enrolment, if any.
    public var username: String?
    /// Whether the print lives on the reader's chip (match-on-chip).
    public var deviceStored: Bool
    /// A stable identity of the print's template: lowercase hex SHA-256 over the print type, driver,
    /// device id and template data, the fields libfprint's `fp_print_equal` compares; metadata
    /// (finger, user name, date) is left out. A print listed from a chip therefore has the identity
    /// of the enrolled print it is, which is what ``FingerprintSensor/storedPrintIdentities()`` reports.
    public var identity: String

    /// Creates metadata; FingerprintKit fills it from libfprint.
    public init(
        driver: String, deviceID: String, finger: Finger?, username: String?, deviceStored: Bool,
        identity: String
    ) {
        self.driver = driver
        self.deviceID = deviceID
        self.finger = finger
        self.username = username
        self.deviceStored = deviceStored
        self.identity = identity
    }
}
