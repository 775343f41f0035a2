public import FoundationEssentials

/// The fingers vault names, in libfprint's `FpFinger` order; the CLI spelling. The same list as
/// FingerprintKit's `Finger` (a test compares them), here so that processes which never touch a
/// reader can parse `--finger` without loading libfprint.
public enum FingerNames {
    /// Every finger, left thumb first.
    public static let all = ["left-thumb", "left-index", "left-middle", "left-ring", "left-little",
                             "right-thumb", "right-index", "right-middle", "right-ring", "right-little"]
}

/// One reader as `vault-reader` describes it (FingerprintKit's `SensorInfo` on the wire).
public struct ReaderInfo: Codable, Equatable, Sendable {
    /// libfprint's device id.
    public var deviceID: String
    /// The driver name.
    public var driver: String
    /// The human-readable name.
    public var name: String
    /// "press" or "swipe".
    public var scanType: String
    /// Whether the reader stores prints itself.
    public var matchOnChip: Bool
    /// Whether one scan can be matched against several prints.
    public var supportsIdentify: Bool
    /// Scans per enrolment.
    public var enrollStages: Int

    /// A description (the reader process fills it from libfprint).
    public init(deviceID: String, driver: String, name: String, scanType: String, matchOnChip: Bool,
                supportsIdentify: Bool, enrollStages: Int) {
        self.deviceID = deviceID
        self.driver = driver
        self.name = name
        self.scanType = scanType
        self.matchOnChip = matchOnChip
        self.supportsIdentify = supportsIdentify
        self.enrollStages = enrollStages
    }
}

/// How a reader operation failed, as `vault-reader` reports it: FingerprintKit's
/// `FingerprintError` reduced to what the CLI maps to exit codes, with its message and hint.
public struct ReaderFault: Error, Codable, Equatable, Sendable {
    /// The kinds the CLI tells apart.
    public enum Kind: String, Codable, Sendable {
        case noReader, busy, permission, removed, cancelled, cancelledByProgram, timedOut, retry,
             duplicate, noEnrolledPrints, other
    }

    /// Which kind.
    public var kind: Kind
    /// The detail the kind carries (libfprint's busy or permission message, the retry advice).
    public var detail: String
    /// The whole message, one lowercase line.
    public var message: String
    /// What the user can do, when something.
    public var hint: String?

    /// A fault.
    public init(kind: Kind, detail: String = "", message: String, hint: String? = nil) {
        self.kind = kind
        self.detail = detail
        self.message = message
        self.hint = hint
    }
}

/// Why a running scan or enrolment is cancelled: Ctrl-C (`user`), or the program (Enter for the
/// passcode, a timeout of ours).
public enum ReaderCancelReason: String, Codable, Sendable {
    case user, program
}

/// A request to `vault-reader`, one per line of JSON. The client sends one at a time and reads
/// its replies; only `cancel` may be sent while a `match` or `enroll` runs.
public enum ReaderRequest: Codable, Equatable, Sendable {
    /// The readers of this machine, without opening them.
    case sensors
    /// Opens the reader `selector` names (device id or driver), else the first usable one.
    case open(selector: String?)
    /// Closes the open reader.
    case close
    /// The identities of the prints stored on a match-on-chip reader.
    case chipPrints
    /// One scan matched against `prints` (serialized); `timeout` seconds.
    case match(prints: [Data], timeout: Double)
    /// Enrols `finger`, recording `username`, waiting `timeout` seconds per touch.
    case enroll(finger: String, username: String, timeout: Double)
    /// Deletes a print from a match-on-chip reader.
    case deletePrint(print: Data)
    /// Cancels the running `match` or `enroll`.
    case cancel(reason: ReaderCancelReason)
}

/// A reply of `vault-reader`. A request ends with exactly one of `done`, `sensors`, `opened`,
/// `prints`, `matched`, `enrolled` or `failed`; `progress` may come before an `enrolled`.
public enum ReaderReply: Codable, Equatable, Sendable {
    case done
    case sensors(readers: [ReaderInfo])
    case opened(reader: ReaderInfo)
    case prints(identities: [String])
    /// The index of the matching print, nil for a clean non-match.
    case matched(index: Int?)
    case enrolled(print: Data)
    /// An enrolment stage passed (or was retried, with advice).
    case progress(completed: Int, total: Int, advice: String?)
    case failed(fault: ReaderFault)
}
