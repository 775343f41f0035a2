/// One D-Bus value, as the wire types it (the D-Bus specification's type system). Byte arrays
/// (`ay`) are `DBusBytes`, which hold the bytes in the message's own memory instead of an array
/// of values; everything else is plain Swift. Unix descriptors (and GVariant's types that D-Bus
/// has not: maybe, a lone dict entry) are read as `unsupported`.
public indirect enum DBusValue: Sendable, Equatable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    case variant(DBusValue)
    /// An array whose elements have the signature `element` (given, so an empty array is typed).
    case array(element: String, [DBusValue])
    /// `a{KV}`: the key and value signatures, then the entries in order.
    case dictionary(key: String, value: String, [DBusEntry])
    case structure([DBusValue])
    case bytes(DBusBytes)
    /// A value of a type this layer does not take apart (its signature).
    case unsupported(String)

    /// The value's D-Bus signature.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .variant: "v"
        case .array(let e, _): "a" + e
        case .dictionary(let k, let v, _): "a{" + k + v + "}"
        case .structure(let items): "(" + items.map(\.signature).joined() + ")"
        case .bytes: "ay"
        case .unsupported(let s): s
        }
    }

    /// A string dictionary (`a{ss}`).
    public static func stringDictionary(_ entries: [(String, String)]) -> DBusValue {
        .dictionary(key: "s", value: "s", entries.map { DBusEntry(.string($0.0), .string($0.1)) })
    }

    /// A property dictionary (`a{sv}`).
    public static func properties(_ entries: [(String, DBusValue)]) -> DBusValue {
        .dictionary(key: "s", value: "v", entries.map { DBusEntry(.string($0.0), .variant($0.1)) })
    }

    /// An array of object paths (`ao`).
    public static func objectPaths(_ paths: [String]) -> DBusValue { .array(element: "o", paths.map { .objectPath($0) }) }

    /// The string of `s`, `o` or `g`.
    public var text: String? {
        switch self {
        case .string(let s), .objectPath(let s), .signature(let s): s
        default: nil
        }
    }

    /// Whether the value or one inside it is `unsupported` (it cannot be sent).
    public var containsUnsupported: Bool {
        switch self {
        case .unsupported: true
        case .variant(let v): v.containsUnsupported
        case .array(_, let items), .structure(let items): items.contains { $0.containsUnsupported }
        case .dictionary(_, _, let entries): entries.contains { $0.key.containsUnsupported || $0.value.containsUnsupported }
        default: false
        }
    }

    /// What a variant holds (itself when it is no variant).
    public var unboxed: DBusValue {
        if case .variant(let inner) = self { return inner.unboxed }
        return self
    }
}

/// One entry of a `DBusValue.dictionary`.
public struct DBusEntry: Sendable, Equatable {
    /// The entry's key (a basic type).
    public var key: DBusValue
    /// The entry's value.
    public var value: DBusValue

    /// An entry.
    public init(_ key: DBusValue, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// A D-Bus error: a remote one (`name` is the error name the peer sent) or a local one of the
/// connection (`name` empty: the bus is gone, a timeout, a closed connection).
public struct DBusError: Error, Sendable, Equatable {
    /// The D-Bus error name (`org.freedesktop.DBus.Error.ServiceUnknown`), empty for a local error.
    public var name: String
    /// The peer's or GLib's words.
    public var message: String

    /// An error.
    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    /// No such method on the object (the standard errors a server answers with follow).
    public static func unknownMethod(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: detail) }
    /// Arguments of the wrong signature or out of bounds.
    public static func invalidArgs(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: detail) }
    /// No object at the path.
    public static func unknownObject(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: detail) }
    /// Anything else.
    public static func failed(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.Failed", message: detail) }
    /// Refused: the caller holds its share of a bound (calls waiting, sessions, prompts).
    public static func limitsExceeded(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.LimitsExceeded", message: detail) }
    /// Refused: a limit reached, or no approval.
    public static func accessDenied(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.AccessDenied", message: detail) }
}

/// The bus daemon's `RequestName` flags and answers (D-Bus specification, "Message Bus Messages").
public enum DBusNameRequest {
    /// Let a later `replaceExisting` take the name.
    public static let allowReplacement: UInt32 = 1
    /// Take the name from an owner that allows replacement.
    public static let replaceExisting: UInt32 = 2
    /// Fail at once instead of waiting in the queue for the name.
    public static let doNotQueue: UInt32 = 4
    /// Answer: the name is ours.
    public static let primaryOwner: UInt32 = 1
    /// Answer: queued behind the owner.
    public static let inQueue: UInt32 = 2
    /// Answer: another owns it (with `doNotQueue`).
    public static let exists: UInt32 = 3
    /// Answer: it was ours already.
    public static let alreadyOwner: UInt32 = 4
}
