internal import CFprint
internal import Foundation

/// How an fprintd operation ended, other than success. Every D-Bus error and every signal of
/// fprintd passes through this file's mapping; no case carries secret material.
public enum FprintdError: Error, Sendable, Equatable {
    /// fprintd is not on the system bus, or the bus is not there, or it does not answer.
    case notRunning(String)
    /// Another client holds the device (`net.reactivated.Fprint.Error.AlreadyInUse`).
    case busy
    /// polkit refused `action` (`net.reactivated.Fprint.Error.PermissionDenied`).
    case permissionDenied(action: String)
    /// The user has no enrolled fingers (`NoEnrolledPrints`).
    case noEnrolledPrints
    /// fprintd left the bus (or the bus closed) while this session used it.
    case vanished
    /// No finger within the timeout.
    case timedOut
    /// Cancelled by the user (Ctrl-C).
    case cancelled
    /// Cancelled by the program (Enter for the passcode, a client that went away).
    case cancelledByProgram
    /// A scan to repeat; `advice` says how.
    case retry(advice: String)
    /// The reader was disconnected.
    case removed
    /// The finger is already enrolled (fprintd's `enroll-duplicate`).
    case duplicate
    /// Anything else, with fprintd's words.
    case failed(String)

    /// One lowercase line.
    public var message: String {
        switch self {
        case .notRunning(let d): "fprintd does not answer on the system bus (\(d))"
        case .busy: "another program is using the reader"
        case .permissionDenied(let a): "polkit refused \(a)"
        case .noEnrolledPrints: "no fingers are enrolled in fprintd"
        case .vanished: "fprintd went away during the scan"
        case .timedOut: "no finger was scanned in time"
        case .cancelled: "the scan was cancelled"
        case .cancelledByProgram: "the scan was cancelled by the program"
        case .retry(let a): "the scan did not work: \(a)"
        case .removed: "the fingerprint reader was removed"
        case .duplicate: "this finger is already enrolled"
        case .failed(let d): "fprintd: \(d)"
        }
    }
}

/// fprintd's names of the fingers: vault's `right-index` is fprintd's `right-index-finger`.
public enum FprintdFinger {
    /// fprintd's name of a vault finger name.
    public static func fprintdName(_ finger: String) -> String {
        finger.hasSuffix("-thumb") ? finger : finger + "-finger"
    }

    /// vault's name of an fprintd finger name.
    public static func vaultName(_ fprintd: String) -> String {
        fprintd.hasSuffix("-finger") ? String(fprintd.dropLast("-finger".count)) : fprintd
    }
}

/// One claim of fprintd's default device, over a D-Bus connection of its own to the system bus
/// (`DBUS_SYSTEM_BUS_ADDRESS` moves it): fprintd ties a claim to the connection, so Claim, the
/// scans and Release all go over this one, and closing it ends the claim even if Release was never
/// sent.
///
/// **Only this connection's device counts.** fprintd broadcasts VerifyStatus and EnrollStatus;
/// any process may emit a signal of that name. The session subscribes with the sender set to the
/// unique bus name that owned `net.reactivated.Fprint` when it connected (the bus daemon stamps the
/// sender, a client cannot forge it) and the path set to the claimed device, and it sends every
/// call to that unique name. A signal from anyone else is never delivered to it.
///
/// Not for concurrent use: one operation at a time (it drains a main context of its own while it
/// waits for signals). Every wait has a deadline; fprintd leaving the bus ends a wait at once.
public final class FprintdSession {
    /// The device's object path.
    public let devicePath: String
    /// The device's name (fprintd's `name` property).
    public let deviceName: String
    /// Touches per enrolment (`num-enroll-stages`).
    public let enrollStages: Int
    /// The user the device was claimed for.
    public let user: String

    private let context: OpaquePointer
    private let connection: OpaquePointer
    private let owner: String
    private let inbox = SignalInbox()
    private var subscriptions: [UInt32] = []
    private var claimed = false

    static let service = "net.reactivated.Fprint"
    static let deviceInterface = "net.reactivated.Fprint.Device"
    /// How long one D-Bus call may take before it counts as "not answering".
    static let callTimeoutMilliseconds: Int32 = 10_000

    /// Whether fprintd owns its name on the system bus now.
    public static func isRunning() -> Bool {
        guard let probe = try? FprintdBus() else { return false }
        return (try? probe.owner()) != nil
    }

    /// fprintd's names of `user`'s enrolled fingers on the default device, without claiming it
    /// (`vault fingers`, `vault status`).
    /// - Throws: `.notRunning`, `.permissionDenied`, `.failed`.
    public static func enrolledFingers(of user: String) throws(FprintdError) -> [String] {
        let bus = try FprintdBus()
        let connection = bus.take()
        defer {
            g_dbus_connection_close_sync(connection, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
        let owner = try FprintdBus.owner(on: connection)
        let path = try call(connection, owner, "/net/reactivated/Fprint/Manager", "net.reactivated.Fprint.Manager",
                            "GetDefaultDevice", []) { (v: GVariantRef) throws(FprintdError) in try v.child(0).string() }
        do {
            return try call(connection, owner, path, deviceInterface, "ListEnrolledFingers", [.string(user)]) {
                (v: GVariantRef) throws(FprintdError) in try v.child(0).strings()
            }
        } catch {
            if error == .noEnrolledPrints { return [] }
            throw error
        }
    }

    /// Connects, finds the default device and claims it for `user` (`""`: the caller's own name;
    /// another name needs polkit's `net.reactivated.fprint.device.setusername`).
    /// - Throws: `.notRunning`, `.busy`, `.permissionDenied`, `.failed`.
    public init(claimFor user: String) throws(FprintdError) {
        self.user = user
        context = g_main_context_new()
        let bus: FprintdBus
        do { bus = try FprintdBus() } catch {
            g_main_context_unref(context)
            throw error
        }
        connection = bus.take()
        do {
            owner = try FprintdBus.owner(on: connection)
            let path = try Self.call(connection, owner, "/net/reactivated/Fprint/Manager", "net.reactivated.Fprint.Manager",
                                     "GetDefaultDevice", []) { (v: GVariantRef) throws(FprintdError) in try v.child(0).string() }
            devicePath = path
            deviceName = (try? Self.property(connection, owner, path, "name") { (v: GVariantRef) throws(FprintdError) in try v.string() }) ?? "fprintd device"
            enrollStages = (try? Self.property(connection, owner, path, "num-enroll-stages") { $0.int32() }).map(Int.init) ?? 5
        } catch {
            g_dbus_connection_close_sync(connection, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(connection))
            g_main_context_unref(context)
            throw error
        }
        // Signal callbacks go to the context that is the thread default at subscription: ours,
        // pushed only for that moment, then drained by whichever thread waits for a signal.
        g_main_context_push_thread_default(context)
        subscribe()
        g_main_context_pop_thread_default(context)
        do {
            try call("Claim", [.string(user)])
            claimed = true
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    private var closed = false

    /// Releases the device and closes the connection (deinit does it too).
    public func close() {
        guard !closed else { return }
        closed = true
        if claimed { _ = try? call("Release", []) }
        claimed = false
        for id in subscriptions { g_dbus_connection_signal_unsubscribe(connection, UInt32(id)) }
        g_dbus_connection_close_sync(connection, nil, nil)
        g_object_unref(UnsafeMutableRawPointer(connection))
        drain()
        g_main_context_unref(context)
    }

    /// fprintd's names of `user`'s enrolled fingers (empty when none).
    public func enrolledFingers() throws(FprintdError) -> [String] {
        do {
            return try Self.call(connection, owner, devicePath, Self.deviceInterface, "ListEnrolledFingers", [.string(user)]) { (v: GVariantRef) throws(FprintdError) in
                try v.child(0).strings()
            }
        } catch {
            if error == .noEnrolledPrints { return [] }
            throw error
        }
    }

    /// One verify of the claimed user's fingers: true for a match, false for a clean non-match.
    /// - Throws: `.retry`, `.timedOut`, `.cancelled`, `.cancelledByProgram`, `.vanished`,
    ///   `.noEnrolledPrints`, `.removed`, `.failed`.
    public func verify(timeout: Double, cancellation: FingerprintCancellation) throws(FprintdError) -> Bool {
        drain()
        inbox.clear()
        try call("VerifyStart", [.string("any")])
        defer { _ = try? call("VerifyStop", []) }
        while true {
            let (name, result, done) = try next(timeout: timeout, cancellation: cancellation, signal: "VerifyStatus")
            _ = name
            switch result {
            case "verify-match": return true
            case "verify-no-match": return false
            case "verify-retry-scan": throw .retry(advice: "try again")
            case "verify-swipe-too-short": throw .retry(advice: "swipe was too short, try again")
            case "verify-finger-not-centered": throw .retry(advice: "center your finger on the reader")
            case "verify-remove-and-retry": throw .retry(advice: "remove your finger and try again")
            case "verify-disconnected": throw .removed
            default:
                if done { throw .failed(result) }
            }
        }
    }

    /// Enrols `finger` (fprintd's name) for the claimed user; `progress(completed, total, advice)`
    /// after each stage or retry.
    /// - Throws: `.duplicate`, `.timedOut` (per touch), `.cancelled`, `.cancelledByProgram`,
    ///   `.vanished`, `.removed`, `.failed`.
    public func enroll(finger: String, timeout: Double, cancellation: FingerprintCancellation,
                       progress: (Int, Int, String?) -> Void) throws(FprintdError) {
        drain()
        inbox.clear()
        try call("EnrollStart", [.string(finger)])
        defer { _ = try? call("EnrollStop", []) }
        var completed = 0
        while true {
            let (_, result, done) = try next(timeout: timeout, cancellation: cancellation, signal: "EnrollStatus")
            switch result {
            case "enroll-completed":
                progress(enrollStages, enrollStages, nil)
                return
            case "enroll-stage-passed":
                completed = min(completed + 1, enrollStages)
                progress(completed, enrollStages, nil)
            case "enroll-retry-scan", "enroll-swipe-too-short", "enroll-finger-not-centered", "enroll-remove-and-retry":
                progress(completed, enrollStages, result.dropFirst("enroll-".count).replacingOccurrences(of: "-", with: " "))
            case "enroll-duplicate": throw .duplicate
            case "enroll-disconnected": throw .removed
            default:
                if done { throw .failed(result) }
            }
        }
    }

    /// Waits for the next `signal` of the claimed device (the only ones delivered), ending on
    /// the deadline, a cancel, or fprintd leaving the bus.
    private func next(timeout: Double, cancellation: FingerprintCancellation,
                      signal: String) throws(FprintdError) -> (String, String, Bool) {
        let deadline = timeout > 0 ? Date(timeIntervalSinceNow: timeout) : Date.distantFuture
        while true {
            drain()
            if let event = inbox.take(signal) { return (signal, event.result, event.done) }
            if inbox.ownerGone || g_dbus_connection_is_closed(connection) != 0 { throw .vanished }
            switch cancellation.reason {
            case .user: throw .cancelled
            case .program, .timeout: throw .cancelledByProgram
            case nil: break
            }
            if Date() >= deadline { throw .timedOut }
            usleep(10_000)
        }
    }

    /// Runs whatever the connection's worker thread queued on this session's context.
    private func drain() {
        while g_main_context_iteration(context, 0) != 0 {}
    }

    private func subscribe() {
        let box = Unmanaged.passUnretained(inbox).toOpaque()
        for member in ["VerifyStatus", "EnrollStatus"] {
            subscriptions.append(UInt32(g_dbus_connection_signal_subscribe(
                connection, owner, Self.deviceInterface, member, devicePath, nil, G_DBUS_SIGNAL_FLAGS_NONE,
                { _, _, _, _, signal, parameters, data in
                    guard let data, let signal, let parameters else { return }
                    let inbox = Unmanaged<SignalInbox>.fromOpaque(data).takeUnretainedValue()
                    let v = GVariantRef(borrowing: parameters)
                    guard v.typeString == "(sb)", let result = try? v.child(0).string() else { return }
                    inbox.put(String(cString: signal), result: result, done: v.child(1).boolean())
                }, box, nil)))
        }
        subscriptions.append(UInt32(g_dbus_connection_signal_subscribe(
            connection, "org.freedesktop.DBus", "org.freedesktop.DBus", "NameOwnerChanged", "/org/freedesktop/DBus",
            Self.service, G_DBUS_SIGNAL_FLAGS_NONE,
            { _, _, _, _, _, parameters, data in
                guard let data, let parameters else { return }
                let inbox = Unmanaged<SignalInbox>.fromOpaque(data).takeUnretainedValue()
                let v = GVariantRef(borrowing: parameters)
                if v.typeString == "(sss)", (try? v.child(2).string()) == "" { inbox.ownerGone = true }
            }, box, nil)))
    }

    private func call(_ method: String, _ arguments: [GVariantArgument]) throws(FprintdError) -> Void {
        try Self.call(connection, owner, devicePath, Self.deviceInterface, method, arguments) { _ in () }
    }

    /// One method call to fprintd's unique name; `read` takes the reply apart.
    static func call<T>(_ connection: OpaquePointer, _ owner: String, _ path: String, _ interface: String,
                        _ method: String, _ arguments: [GVariantArgument],
                        read: (GVariantRef) throws(FprintdError) -> T) throws(FprintdError) -> T {
        var children: [OpaquePointer?] = arguments.map { arg in
            switch arg { case .string(let s): g_variant_new_string(s) }
        }
        let parameters = children.withUnsafeMutableBufferPointer { g_variant_new_tuple($0.baseAddress, gsize($0.count)) }
        var error: UnsafeMutablePointer<GError>?
        let reply = g_dbus_connection_call_sync(connection, owner, path, interface, method, parameters, nil,
                                                G_DBUS_CALL_FLAGS_NONE, callTimeoutMilliseconds, nil, &error)
        if let error {
            defer { g_error_free(error) }
            throw fprintdError(error)
        }
        guard let reply else { throw .failed("\(method) gave no reply") }
        return try read(GVariantRef(owning: reply))
    }

    static func property<T>(_ connection: OpaquePointer, _ owner: String, _ path: String, _ name: String,
                            read: (GVariantRef) throws(FprintdError) -> T) throws(FprintdError) -> T {
        var children: [OpaquePointer?] = [g_variant_new_string(deviceInterface), g_variant_new_string(name)]
        let parameters = children.withUnsafeMutableBufferPointer { g_variant_new_tuple($0.baseAddress, gsize($0.count)) }
        var error: UnsafeMutablePointer<GError>?
        let reply = g_dbus_connection_call_sync(connection, owner, path, "org.freedesktop.DBus.Properties", "Get", parameters, nil,
                                                G_DBUS_CALL_FLAGS_NONE, callTimeoutMilliseconds, nil, &error)
        if let error {
            defer { g_error_free(error) }
            throw fprintdError(error)
        }
        guard let reply else { throw .failed("no property \(name)") }
        return try read(GVariantRef(owning: reply).child(0).unboxed())
    }

    /// The one mapping of a GDBus `GError` (a remote D-Bus error or a local one) to `FprintdError`.
    static func fprintdError(_ error: UnsafeMutablePointer<GError>) -> FprintdError {
        let message = error.pointee.message.map { String(cString: $0) } ?? "unknown error"
        var remote = ""
        if let name = g_dbus_error_get_remote_error(error) {
            remote = String(cString: name)
            g_free(name)
        }
        switch remote {
        case "net.reactivated.Fprint.Error.AlreadyInUse": return .busy
        case "net.reactivated.Fprint.Error.PermissionDenied":
            let action = message.split(separator: " ").map(String.init).first { $0.hasPrefix("net.reactivated.fprint.") }
            return .permissionDenied(action: action.map { $0.trimmingCharacters(in: .punctuationCharacters) } ?? message)
        case "net.reactivated.Fprint.Error.NoEnrolledPrints": return .noEnrolledPrints
        case "net.reactivated.Fprint.Error.NoSuchDevice": return .notRunning("no fingerprint device")
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
             "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Disconnected":
            return .notRunning(message)
        case "":
            // A local error: the bus or the connection itself (closed, timed out).
            if error.pointee.domain == g_io_error_quark() { return .notRunning(message) }
            return .failed(message)
        default:
            return .failed("\(remote): \(message)")
        }
    }
}

/// A connection of its own to the system bus.
final class FprintdBus {
    private var connection: OpaquePointer?

    init() throws(FprintdError) {
        var error: UnsafeMutablePointer<GError>?
        guard let address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SYSTEM, nil, &error) else {
            defer { if let error { g_error_free(error) } }
            throw .notRunning(error.map { FprintdSession.fprintdError($0).message } ?? "no system bus address")
        }
        defer { g_free(address) }
        let flags = GDBusConnectionFlags(rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
                                         | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        guard let c = g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &error) else {
            let detail = error?.pointee.message.map { String(cString: $0) } ?? "cannot connect"
            if let error { g_error_free(error) }
            throw .notRunning("the system bus: \(detail)")
        }
        g_dbus_connection_set_exit_on_close(c, 0)
        connection = c
    }

    deinit {
        if let connection {
            g_dbus_connection_close_sync(connection, nil, nil)
            g_object_unref(UnsafeMutableRawPointer(connection))
        }
    }

    /// Gives the connection away (the caller closes and unrefs it).
    func take() -> OpaquePointer {
        defer { connection = nil }
        return connection!
    }

    /// fprintd's unique name now.
    func owner() throws(FprintdError) -> String { try Self.owner(on: connection!) }

    static func owner(on connection: OpaquePointer) throws(FprintdError) -> String {
        try FprintdSession.call(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                "GetNameOwner", [.string(FprintdSession.service)]) { (v: GVariantRef) throws(FprintdError) in try v.child(0).string() }
    }
}

/// A call argument.
enum GVariantArgument {
    case string(String)
}

/// A GVariant owned (unref in deinit) or borrowed.
final class GVariantRef {
    let raw: OpaquePointer
    private let owned: Bool

    init(owning raw: OpaquePointer) {
        self.raw = raw
        owned = true
    }

    init(borrowing raw: OpaquePointer) {
        self.raw = raw
        owned = false
    }

    deinit { if owned { g_variant_unref(raw) } }

    var typeString: String { String(cString: g_variant_get_type_string(raw)) }

    func child(_ i: Int) -> GVariantRef { GVariantRef(owning: g_variant_get_child_value(raw, gsize(i))) }

    func unboxed() -> GVariantRef { GVariantRef(owning: g_variant_get_variant(raw)) }

    func string() throws(FprintdError) -> String {
        let t = typeString
        guard t == "s" || t == "o" else { throw .failed("fprintd sent \(t) where a string was expected") }
        return String(cString: g_variant_get_string(raw, nil))
    }

    func strings() throws(FprintdError) -> [String] {
        guard typeString == "as" else { throw .failed("fprintd sent \(typeString) where a list of strings was expected") }
        var out: [String] = []
        for i in 0..<Int(g_variant_n_children(raw)) { out.append(try child(i).string()) }
        return out
    }

    func boolean() -> Bool { typeString == "b" && g_variant_get_boolean(raw) != 0 }

    func int32() -> Int32 { typeString == "i" ? g_variant_get_int32(raw) : 0 }
}

/// The signals delivered to a session (on its own thread, while it drains its context).
final class SignalInbox: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [(signal: String, result: String, done: Bool)] = []
    private var gone = false

    func put(_ signal: String, result: String, done: Bool) { lock.withLock { events.append((signal, result, done)) } }

    func take(_ signal: String) -> (result: String, done: Bool)? {
        lock.withLock {
            guard let i = events.firstIndex(where: { $0.signal == signal }) else { return nil }
            let e = events.remove(at: i)
            return (e.result, e.done)
        }
    }

    func clear() { lock.withLock { events.removeAll() } }

    var ownerGone: Bool {
        get { lock.withLock { gone } }
        set { lock.withLock { gone = newValue } }
    }
}
