internal import VaultDBus
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
/// sent. The D-Bus layer is VaultDBus's (the one the Secret Service shares).
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

    private let connection: DBusConnection
    private let owner: String
    private let inbox = SignalInbox()
    private var signals: DBusSignalContext?
    private var claimed = false

    static let service = "net.reactivated.Fprint"
    static let deviceInterface = "net.reactivated.Fprint.Device"
    /// How long one D-Bus call may take before it counts as "not answering".
    static let callTimeoutMilliseconds: Int32 = 10_000

    /// Whether fprintd owns its name on the system bus now.
    public static func isRunning() -> Bool {
        guard let bus = try? FprintdBus.connect() else { return false }
        defer { bus.close() }
        return (try? FprintdBus.owner(on: bus)) != nil
    }

    /// fprintd's names of `user`'s enrolled fingers on the default device, without claiming it
    /// (`vault fingers`, `vault status`).
    /// - Throws: `.notRunning`, `.permissionDenied`, `.failed`.
    public static func enrolledFingers(of user: String) throws(FprintdError) -> [String] {
        let connection = try FprintdBus.connect()
        defer { connection.close() }
        let owner = try FprintdBus.owner(on: connection)
        let path = try string(call(connection, owner, "/net/reactivated/Fprint/Manager", "net.reactivated.Fprint.Manager", "GetDefaultDevice", []).first)
        do {
            return try strings(call(connection, owner, path, deviceInterface, "ListEnrolledFingers", [.string(user)]).first)
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
        connection = try FprintdBus.connect()
        do {
            owner = try FprintdBus.owner(on: connection)
            let path = try Self.string(Self.call(connection, owner, "/net/reactivated/Fprint/Manager", "net.reactivated.Fprint.Manager",
                                                 "GetDefaultDevice", []).first)
            devicePath = path
            deviceName = (try? Self.string(Self.property(connection, owner, path, "name"))) ?? "fprintd device"
            if case .int32(let n)? = try? Self.property(connection, owner, path, "num-enroll-stages") { enrollStages = Int(n) } else { enrollStages = 5 }
        } catch {
            connection.close()
            throw error
        }
        subscribe()
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
        connection.close()
        signals?.drain()
        signals = nil
    }

    /// fprintd's names of `user`'s enrolled fingers (empty when none).
    public func enrolledFingers() throws(FprintdError) -> [String] {
        do {
            return try Self.strings(Self.call(connection, owner, devicePath, Self.deviceInterface, "ListEnrolledFingers", [.string(user)]).first)
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
            if inbox.ownerGone || connection.isClosed { throw .vanished }
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
        signals?.drain()
    }

    private func subscribe() {
        let signals = DBusSignalContext()
        let inbox = self.inbox
        for member in ["VerifyStatus", "EnrollStatus"] {
            signals.subscribe(connection, sender: owner, interface: Self.deviceInterface, member: member, path: devicePath) { signal, values in
                guard values.count == 2, case .string(let result) = values[0], case .boolean(let done) = values[1] else { return }
                inbox.put(signal, result: result, done: done)
            }
        }
        signals.subscribe(connection, sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                          path: "/org/freedesktop/DBus", arg0: Self.service) { _, values in
            if values.count == 3, values[2].text == "" { inbox.ownerGone = true }
        }
        self.signals = signals
    }

    private func call(_ method: String, _ arguments: [DBusValue]) throws(FprintdError) -> Void {
        _ = try Self.call(connection, owner, devicePath, Self.deviceInterface, method, arguments)
    }

    /// One method call to fprintd's unique name.
    static func call(_ connection: DBusConnection, _ owner: String, _ path: String, _ interface: String,
                     _ method: String, _ arguments: [DBusValue]) throws(FprintdError) -> [DBusValue] {
        do {
            return try connection.call(owner, path, interface, method, arguments, timeoutMilliseconds: callTimeoutMilliseconds)
        } catch {
            throw fprintdError(error)
        }
    }

    static func property(_ connection: DBusConnection, _ owner: String, _ path: String, _ name: String) throws(FprintdError) -> DBusValue {
        do {
            return try connection.property(owner, path, deviceInterface, name, timeoutMilliseconds: callTimeoutMilliseconds)
        } catch {
            throw fprintdError(error)
        }
    }

    static func string(_ v: DBusValue?) throws(FprintdError) -> String {
        guard let v, case .string(let s) = v.unboxed.asPathOrString else {
            throw .failed("fprintd sent \(v?.signature ?? "nothing") where a string was expected")
        }
        return s
    }

    static func strings(_ v: DBusValue?) throws(FprintdError) -> [String] {
        guard case .array("s", let items)? = v else {
            throw .failed("fprintd sent \(v?.signature ?? "nothing") where a list of strings was expected")
        }
        return items.compactMap(\.text)
    }

    /// The one mapping of a D-Bus error (a remote one or a local one) to `FprintdError`.
    static func fprintdError(_ error: DBusError) -> FprintdError {
        let message = error.message
        switch error.name {
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
            return .notRunning(message)
        default:
            return .failed("\(error.name): \(message)")
        }
    }
}

/// A connection of its own to the system bus.
enum FprintdBus {
    static func connect() throws(FprintdError) -> DBusConnection {
        do {
            return try DBusConnection.system()
        } catch {
            throw .notRunning("the system bus: \(error.message)")
        }
    }

    /// fprintd's unique name now.
    static func owner(on connection: DBusConnection) throws(FprintdError) -> String {
        do {
            guard let owner = try connection.owner(of: FprintdSession.service) else {
                throw FprintdError.notRunning("\(FprintdSession.service) has no owner on the system bus")
            }
            return owner
        } catch let e as FprintdError {
            throw e
        } catch let e as DBusError {
            throw FprintdSession.fprintdError(e)
        } catch {
            throw .failed("\(error)")
        }
    }
}

extension DBusValue {
    /// A string, an object path read as a string.
    var asPathOrString: DBusValue {
        if case .objectPath(let p) = self { return .string(p) }
        return self
    }
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
