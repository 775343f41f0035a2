internal import CGio
internal import Foundation

// The one file of VaultDBus that touches GLib: GVariants to and from `DBusValue`, GDBus
// connections, calls, signals, the message filter a server is built on, and the GError mapping.

/// A byte array (`ay`) held in GLib's memory: a message's own bytes when read from one, a copy
/// made once when built. A secret that must cross the bus (the ciphertext of a session's
/// encryption, or the plain secret a client asked for with the `plain` algorithm) goes in here
/// straight from guarded memory, with no Swift array in between.
public final class DBusBytes: @unchecked Sendable, Equatable {
    let variant: OpaquePointer

    /// Takes a reference the caller owns (not floating) to a GVariant of type `ay`.
    init(owning variant: OpaquePointer) { self.variant = variant }

    /// A copy of `bytes` in GLib's memory.
    public init(copying bytes: UnsafeRawBufferPointer) {
        let data = g_bytes_new(bytes.baseAddress, gsize(bytes.count))
        variant = "ay".withCString { g_variant_ref_sink(g_variant_new_from_bytes(vault_variant_type($0), data, 1)) }
        g_bytes_unref(data)
    }

    /// A copy of `bytes`.
    public convenience init(_ bytes: [UInt8]) {
        self.init(copying: bytes.withUnsafeBytes { $0 })
    }

    /// `bytes` lent to GLib with no copy: they stay `owner`'s (guarded memory, for a secret sent
    /// as is), which GLib keeps alive until the value is dropped (the reply sent) and then
    /// releases, so the owner's deinit wipes them. GLib's own copy (the message it serialises) is
    /// freed memory the service's allocator wipes (SecretServiceMain's heap settings).
    public init(lending bytes: UnsafeRawBufferPointer, owner: AnyObject) {
        let retained = Unmanaged.passRetained(owner).toOpaque()
        let data = bytes.count > 0 ? bytes.baseAddress : nil
        variant = "ay".withCString {
            g_variant_ref_sink(g_variant_new_from_data(vault_variant_type($0), data, gsize(bytes.count), 1,
                                                       { if let p = $0 { Unmanaged<AnyObject>.fromOpaque(p).release() } }, retained))
        }
    }

    deinit { g_variant_unref(variant) }

    /// How many bytes.
    public var count: Int { Int(g_variant_get_size(variant)) }

    /// Lends the bytes (valid only inside `body`).
    public func withUnsafeBytes<R: ~Copyable>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let n = count
        guard n > 0, let p = g_variant_get_data(variant) else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeRawBufferPointer(start: p, count: n))
    }

    /// Overwrites the bytes with zeros where GLib keeps them (a secret a client sent with the
    /// `plain` algorithm, once it is in guarded memory): the message and every value that shares
    /// them see zeros from then on.
    public func wipe() {
        let n = count
        guard n > 0, let p = g_variant_get_data(variant) else { return }
        explicit_bzero(UnsafeMutableRawPointer(mutating: p), n)
    }

    /// The bytes as an array (for public values only: keys of a key exchange, IVs).
    public var array: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Equal bytes (tests, the fuzz target's round trip).
    public static func == (a: DBusBytes, b: DBusBytes) -> Bool { a.array == b.array }
}

/// GVariants built from and read into `DBusValue`.
enum GVariantCoding {
    /// Whether `type` is a valid, definite GVariant type string (GLib asserts on an indefinite
    /// one such as `*`, `?` or `r` where a value's type is needed).
    static func isDefinite(_ type: String) -> Bool {
        type.withCString { t in g_variant_type_string_is_valid(t) != 0 && g_variant_type_is_definite(vault_variant_type(t)) != 0 }
    }

    /// A new floating GVariant of `value`; nil when the value is not valid D-Bus (an object path
    /// or signature that is not one, an array element of another type).
    static func make(_ value: DBusValue) -> OpaquePointer? {
        switch value {
        case .byte(let b): return g_variant_new_byte(b)
        case .boolean(let b): return g_variant_new_boolean(b ? 1 : 0)
        case .int16(let i): return g_variant_new_int16(i)
        case .uint16(let u): return g_variant_new_uint16(u)
        case .int32(let i): return g_variant_new_int32(i)
        case .uint32(let u): return g_variant_new_uint32(u)
        case .int64(let i): return g_variant_new_int64(gint64(i))
        case .uint64(let u): return g_variant_new_uint64(guint64(u))
        case .double(let d): return g_variant_new_double(d)
        case .string(let s): return g_variant_new_string(s)
        case .objectPath(let s):
            guard g_variant_is_object_path(s) != 0 else { return nil }
            return g_variant_new_object_path(s)
        case .signature(let s):
            guard g_variant_is_signature(s) != 0 else { return nil }
            return g_variant_new_signature(s)
        case .variant(let inner):
            guard let v = make(inner) else { return nil }
            return g_variant_new_variant(v)
        case .array(let element, let items):
            guard items.allSatisfy({ $0.signature == element }) else { return nil }
            // The type string must outlive the call: withCString, not the temporary a String
            // argument would make for vault_variant_type alone (libFuzzer and ASan found that
            // use after free: Fuzz/corpus/secret-service/regression-array-type-lifetime).
            return container(items, type: element) { children, n in
                element.withCString { g_variant_new_array(vault_variant_type($0), children, n) }
            }
        case .dictionary(let k, let v, let entries):
            let element = "{" + k + v + "}"
            guard isDefinite("a" + element), entries.allSatisfy({ $0.key.signature == k && $0.value.signature == v }) else { return nil }
            var children: [OpaquePointer?] = []
            for e in entries {
                guard let key = make(e.key), let value = make(e.value) else {
                    children.forEach { if let c = $0 { g_variant_unref(g_variant_ref_sink(c)) } }
                    return nil
                }
                children.append(g_variant_new_dict_entry(key, value))
            }
            return element.withCString { type in
                children.withUnsafeMutableBufferPointer { g_variant_new_array(vault_variant_type(type), $0.baseAddress, gsize($0.count)) }
            }
        case .structure(let items):
            return container(items, type: nil) { children, n in g_variant_new_tuple(children, n) }
        case .bytes(let b):
            return b.variant
        case .unsupported:
            return nil
        }
    }

    private static func container(_ items: [DBusValue], type: String?,
                                  _ build: (UnsafePointer<OpaquePointer?>?, gsize) -> OpaquePointer?) -> OpaquePointer? {
        var children: [OpaquePointer?] = []
        for item in items {
            guard let c = make(item) else {
                // Sink and drop what was made (a floating child would leak).
                children.forEach { if let c = $0 { g_variant_unref(g_variant_ref_sink(c)) } }
                return nil
            }
            children.append(c)
        }
        if let type, !isDefinite(type) { return nil }
        return children.withUnsafeBufferPointer { build($0.baseAddress, gsize($0.count)) }
    }

    /// A tuple of `values` (a message body), floating.
    static func tuple(_ values: [DBusValue]) -> OpaquePointer? { make(.structure(values)) }

    /// The value of a GVariant (borrowed).
    static func read(_ v: OpaquePointer) -> DBusValue {
        let type = String(cString: g_variant_get_type_string(v))
        switch type.utf8.first {
        case UInt8(ascii: "y"): return .byte(g_variant_get_byte(v))
        case UInt8(ascii: "b"): return .boolean(g_variant_get_boolean(v) != 0)
        case UInt8(ascii: "n"): return .int16(g_variant_get_int16(v))
        case UInt8(ascii: "q"): return .uint16(g_variant_get_uint16(v))
        case UInt8(ascii: "i"): return .int32(g_variant_get_int32(v))
        case UInt8(ascii: "u"): return .uint32(g_variant_get_uint32(v))
        case UInt8(ascii: "x"): return .int64(Int64(g_variant_get_int64(v)))
        case UInt8(ascii: "t"): return .uint64(UInt64(g_variant_get_uint64(v)))
        case UInt8(ascii: "d"): return .double(g_variant_get_double(v))
        case UInt8(ascii: "s"): return .string(String(cString: g_variant_get_string(v, nil)))
        case UInt8(ascii: "o"): return .objectPath(String(cString: g_variant_get_string(v, nil)))
        case UInt8(ascii: "g"): return .signature(String(cString: g_variant_get_string(v, nil)))
        case UInt8(ascii: "v"):
            let inner = g_variant_get_variant(v)!
            defer { g_variant_unref(inner) }
            return .variant(read(inner))
        case UInt8(ascii: "a"):
            if type == "ay" { return .bytes(DBusBytes(owning: g_variant_ref(v))) }
            let n = Int(g_variant_n_children(v))
            if type.hasPrefix("a{") {
                let inner = type.dropFirst(2).dropLast()
                let keyType = String(inner.prefix(1))
                var entries: [DBusEntry] = []
                entries.reserveCapacity(n)
                for i in 0..<n {
                    let e = g_variant_get_child_value(v, gsize(i))!
                    let k = g_variant_get_child_value(e, 0)!, val = g_variant_get_child_value(e, 1)!
                    entries.append(DBusEntry(read(k), read(val)))
                    g_variant_unref(k); g_variant_unref(val); g_variant_unref(e)
                }
                return .dictionary(key: keyType, value: String(inner.dropFirst()), entries)
            }
            return .array(element: String(type.dropFirst()), children(v, n))
        case UInt8(ascii: "("):
            return .structure(children(v, Int(g_variant_n_children(v))))
        default:
            return .unsupported(type)
        }
    }

    private static func children(_ v: OpaquePointer, _ n: Int) -> [DBusValue] {
        var out: [DBusValue] = []
        out.reserveCapacity(n)
        for i in 0..<n {
            let c = g_variant_get_child_value(v, gsize(i))!
            out.append(read(c))
            g_variant_unref(c)
        }
        return out
    }

    /// The values of a message body (a tuple; nil is no values).
    static func body(_ v: OpaquePointer?) -> [DBusValue] {
        guard let v else { return [] }
        if case .structure(let items) = read(v) { return items }
        return []
    }
}

/// The value of `bytes` read as a serialized GVariant of `signature` from an untrusted source
/// (GLib checks it as it reads; a malformed one reads as its type's default): what the fuzz
/// target and the tests decode method calls from.
public func dbusValue(serialized bytes: [UInt8], signature: String) -> DBusValue? {
    guard GVariantCoding.isDefinite(signature) else { return nil }
    return bytes.withUnsafeBytes { raw -> DBusValue? in
        let data = g_bytes_new(raw.baseAddress, gsize(raw.count))
        defer { g_bytes_unref(data) }
        guard let v = signature.withCString({ g_variant_new_from_bytes(vault_variant_type($0), data, 0) }) else { return nil }
        let sunk = g_variant_ref_sink(v)!
        defer { g_variant_unref(sunk) }
        return GVariantCoding.read(sunk)
    }
}

/// The bytes of `value` serialized as GVariant (tests and the fuzz corpus).
public func serialized(_ value: DBusValue) -> [UInt8]? {
    guard let v = GVariantCoding.make(value) else { return nil }
    let sunk = g_variant_ref_sink(v)!
    defer { g_variant_unref(sunk) }
    let n = Int(g_variant_get_size(sunk))
    guard n > 0, let p = g_variant_get_data(sunk) else { return [] }
    return Array(UnsafeRawBufferPointer(start: p, count: n))
}

/// The one mapping of a GError from GDBus to `DBusError` (frees nothing: the caller owns it).
func dbusError(_ error: UnsafeMutablePointer<GError>) -> DBusError {
    let message = error.pointee.message.map { String(cString: $0) } ?? "unknown error"
    var remote = ""
    if let name = g_dbus_error_get_remote_error(error) {
        remote = String(cString: name)
        g_free(name)
        g_dbus_error_strip_remote_error(error)
        return DBusError(name: remote, message: error.pointee.message.map { String(cString: $0) } ?? message)
    }
    return DBusError(name: "", message: message)
}

/// Throws the GError in `error` as a `DBusError` and frees it.
func check(_ error: UnsafeMutablePointer<GError>?) throws(DBusError) {
    guard let error else { return }
    defer { g_error_free(error) }
    throw dbusError(error)
}

/// One connection to a message bus (session, system, or an address), closed in deinit. Calls
/// may come from any thread (GDBus serialises them); a server's handler runs on GDBus's worker
/// thread and must hand its work elsewhere at once.
public final class DBusConnection: @unchecked Sendable {
    let raw: OpaquePointer
    private var filterID: UInt32 = 0
    private var server: Unmanaged<ServerBox>?

    /// The user's session bus (`DBUS_SESSION_BUS_ADDRESS`).
    /// - Throws: a local `DBusError` when there is none or it refuses us.
    public static func session() throws(DBusError) -> DBusConnection { try DBusConnection(bus: G_BUS_TYPE_SESSION) }

    /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS` moves it).
    public static func system() throws(DBusError) -> DBusConnection { try DBusConnection(bus: G_BUS_TYPE_SYSTEM) }

    private convenience init(bus: GBusType) throws(DBusError) {
        var error: UnsafeMutablePointer<GError>?
        guard let address = g_dbus_address_get_for_bus_sync(bus, nil, &error) else {
            try check(error)
            throw DBusError(name: "", message: "no bus address")
        }
        defer { g_free(address) }
        try self.init(address: String(cString: address))
    }

    /// A new private connection to the message bus at `address` (never GLib's shared singleton,
    /// so closing it affects nobody else).
    public init(address: String) throws(DBusError) {
        var error: UnsafeMutablePointer<GError>?
        let flags = GDBusConnectionFlags(rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue
                                         | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
        guard let c = g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &error) else {
            try check(error)
            throw DBusError(name: "", message: "cannot connect to \(address)")
        }
        g_dbus_connection_set_exit_on_close(c, 0)
        raw = c
    }

    deinit {
        close()
        if let server { server.release() }
        g_object_unref(UnsafeMutableRawPointer(raw))
    }

    /// Closes the connection (the bus then drops every name and match it held).
    public func close() {
        if filterID != 0 {
            g_dbus_connection_remove_filter(raw, UInt32(filterID))
            filterID = 0
        }
        if g_dbus_connection_is_closed(raw) == 0 { g_dbus_connection_close_sync(raw, nil, nil) }
    }

    /// Whether the connection is closed (by us, the bus or the peer).
    public var isClosed: Bool { g_dbus_connection_is_closed(raw) != 0 }

    /// Our unique name on the bus (`:1.42`).
    public var uniqueName: String { g_dbus_connection_get_unique_name(raw).map { String(cString: $0) } ?? "" }

    /// One method call, waiting at most `timeoutMilliseconds` for the reply's values.
    /// - Throws: the remote error, or a local one (no reply, closed connection, a value that is
    ///   not valid D-Bus).
    public func call(_ destination: String?, _ path: String, _ interface: String, _ member: String,
                     _ arguments: [DBusValue] = [], timeoutMilliseconds: Int32 = 25_000) throws(DBusError) -> [DBusValue] {
        guard let parameters = GVariantCoding.tuple(arguments) else {
            throw DBusError(name: "", message: "\(member): an argument is not valid D-Bus")
        }
        var error: UnsafeMutablePointer<GError>?
        let reply = g_dbus_connection_call_sync(raw, destination, path, interface, member, parameters, nil,
                                                G_DBUS_CALL_FLAGS_NONE, timeoutMilliseconds, nil, &error)
        try check(error)
        guard let reply else { throw DBusError(name: "", message: "\(member) gave no reply") }
        defer { g_variant_unref(reply) }
        return GVariantCoding.body(reply)
    }

    /// A property of an object (`org.freedesktop.DBus.Properties.Get`), unboxed.
    public func property(_ destination: String?, _ path: String, _ interface: String, _ name: String,
                         timeoutMilliseconds: Int32 = 25_000) throws(DBusError) -> DBusValue {
        let reply = try call(destination, path, "org.freedesktop.DBus.Properties", "Get", [.string(interface), .string(name)],
                             timeoutMilliseconds: timeoutMilliseconds)
        guard let first = reply.first else { throw DBusError(name: "", message: "no property \(name)") }
        return first.unboxed
    }

    /// Sends a signal (to everyone whose match rules take it, or to `destination` only).
    /// - Throws: a local error (closed connection, a value that is not valid D-Bus).
    public func emit(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue],
                     destination: String? = nil) throws(DBusError) {
        guard let parameters = GVariantCoding.tuple(arguments) else {
            throw DBusError(name: "", message: "\(member): an argument is not valid D-Bus")
        }
        var error: UnsafeMutablePointer<GError>?
        g_dbus_connection_emit_signal(raw, destination, path, interface, member, parameters, &error)
        try check(error)
    }

    /// Asks the bus for `name` (`RequestName` with `flags`, `DBusNameRequest`); returns its answer.
    public func requestName(_ name: String, flags: UInt32) throws(DBusError) -> UInt32 {
        let r = try call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
                         [.string(name), .uint32(flags)])
        guard case .uint32(let answer)? = r.first else { throw DBusError(name: "", message: "RequestName gave no answer") }
        return answer
    }

    /// The unique name owning `name`, or nil when nobody does.
    public func owner(of name: String) throws(DBusError) -> String? {
        do {
            return try call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetNameOwner",
                            [.string(name)]).first?.text
        } catch where error.name == "org.freedesktop.DBus.Error.NameHasNoOwner" {
            return nil
        }
    }

    /// The process id behind a unique name, as the bus daemon read it when the peer connected
    /// (`GetConnectionCredentials`' `ProcessID`).
    public func processID(of name: String) throws(DBusError) -> UInt32 {
        guard let pid = try credentials(of: name).pid else { throw DBusError(name: "", message: "no process id for \(name)") }
        return pid
    }

    /// What the bus daemon knows of a connection's peer (`GetConnectionCredentials`): its process
    /// and user ids, when it has them.
    public func credentials(of name: String) throws(DBusError) -> (pid: UInt32?, uid: UInt32?) {
        let r = try call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetConnectionCredentials",
                         [.string(name)])
        guard case .dictionary(_, _, let entries)? = r.first else { throw DBusError(name: "", message: "no credentials for \(name)") }
        var pid: UInt32?, uid: UInt32?
        for e in entries {
            if case .uint32(let v) = e.value.unboxed {
                if e.key.text == "ProcessID" { pid = v }
                if e.key.text == "UnixUserID" { uid = v }
            }
        }
        return (pid, uid)
    }

    /// Adds a match rule on the bus, so the signals it names reach `serve`'s handler.
    public func addMatch(_ rule: String) throws(DBusError) {
        _ = try call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch", [.string(rule)])
    }

    /// Serves this connection: every incoming method call and signal goes to `handler` (on
    /// GDBus's worker thread, in the order received); replies and the bus's own traffic pass on.
    /// GDBus answers none of the method calls itself: `handler` replies to each one (Peer and
    /// Introspectable included) through the `DBusIncoming`.
    public func serve(_ handler: @escaping @Sendable (DBusIncoming) -> Void) {
        let box = Unmanaged.passRetained(ServerBox(connection: self, handler: handler))
        server = box
        filterID = UInt32(g_dbus_connection_add_filter(raw, { _, message, incoming, data in
            guard let message, let data else { return message }
            let type = g_dbus_message_get_message_type(message)
            guard incoming != 0, type == G_DBUS_MESSAGE_TYPE_METHOD_CALL || type == G_DBUS_MESSAGE_TYPE_SIGNAL else { return message }
            let box = Unmanaged<ServerBox>.fromOpaque(data).takeUnretainedValue()
            // A signal also goes on to GDBus (its own subscriptions); a method call is ours.
            if type == G_DBUS_MESSAGE_TYPE_SIGNAL {
                g_object_ref(UnsafeMutableRawPointer(message))
                box.handler(DBusIncoming(connection: box.connection, message: message))
                return message
            }
            box.handler(DBusIncoming(connection: box.connection, message: message))
            return nil
        }, box.toOpaque(), nil))
    }

    /// Sends `message` (a reply or an error).
    fileprivate func send(_ message: OpaquePointer) {
        g_dbus_connection_send_message(raw, message, G_DBUS_SEND_MESSAGE_FLAGS_NONE, nil, nil)
    }
}

/// What a server's filter keeps: the connection (unretained: it owns the box) and the handler.
private final class ServerBox: @unchecked Sendable {
    unowned let connection: DBusConnection
    let handler: @Sendable (DBusIncoming) -> Void

    init(connection: DBusConnection, handler: @escaping @Sendable (DBusIncoming) -> Void) {
        self.connection = connection
        self.handler = handler
    }
}

/// One incoming method call or signal, with its arguments read; a method call is answered once,
/// from any thread, with `reply` or `fail` (a second answer is ignored).
public final class DBusIncoming: @unchecked Sendable {
    /// Method call or signal.
    public let isSignal: Bool
    /// The sender's unique name (the bus stamps it: a client cannot forge it).
    public let sender: String
    /// The object path.
    public let path: String
    /// The interface, when the caller named one.
    public let interface: String?
    /// The method or signal name.
    public let member: String
    /// The body's signature (`""` when none).
    public let signature: String
    /// The body's values.
    public let arguments: [DBusValue]
    /// Whether the caller wants no reply.
    public let noReplyExpected: Bool

    private let message: OpaquePointer
    private weak var connection: DBusConnection?
    private let lock = NSLock()
    private var answered = false

    init(connection: DBusConnection, message: OpaquePointer) {
        self.connection = connection
        self.message = message
        isSignal = g_dbus_message_get_message_type(message) == G_DBUS_MESSAGE_TYPE_SIGNAL
        sender = g_dbus_message_get_sender(message).map { String(cString: $0) } ?? ""
        path = g_dbus_message_get_path(message).map { String(cString: $0) } ?? "/"
        interface = g_dbus_message_get_interface(message).map { String(cString: $0) }
        member = g_dbus_message_get_member(message).map { String(cString: $0) } ?? ""
        signature = g_dbus_message_get_signature(message).map { String(cString: $0) } ?? ""
        arguments = GVariantCoding.body(g_dbus_message_get_body(message))
        noReplyExpected = (g_dbus_message_get_flags(message).rawValue & G_DBUS_MESSAGE_FLAGS_NO_REPLY_EXPECTED.rawValue) != 0
    }

    deinit { g_object_unref(UnsafeMutableRawPointer(message)) }

    private func claim() -> Bool {
        lock.withLock {
            if answered || isSignal { return false }
            answered = true
            return true
        }
    }

    /// Answers with `values`; a value that is not valid D-Bus becomes a `Failed` error.
    public func reply(_ values: [DBusValue]) {
        guard claim(), let connection else { return }
        guard let body = GVariantCoding.tuple(values) else {
            answered = false
            fail(.failed("the reply could not be built"))
            return
        }
        let reply = g_dbus_message_new_method_reply(message)!
        g_dbus_message_set_body(reply, body)
        if !noReplyExpected { connection.send(reply) }
        g_object_unref(UnsafeMutableRawPointer(reply))
    }

    /// Overwrites what GDBus's reader keeps of this message: it reads every message into one
    /// buffer it reuses, so a secret a client sent stays there until a longer message overwrites
    /// it. This sends ourselves (a unicast signal the service ignores, `member` of `interface`)
    /// one at least as long, of zeros; the reader's copy is then gone, or freed to an allocator
    /// that wipes it.
    public func scrubReceiveBuffer(interface: String, member: String) {
        guard let connection, !connection.isClosed else { return }
        var size: gsize = 0
        guard let blob = g_dbus_message_to_blob(message, &size, G_DBUS_CAPABILITY_FLAGS_NONE, nil) else { return }
        explicit_bzero(blob, Int(size))
        g_free(blob)
        let zeros = [UInt8](repeating: 0, count: Int(size))
        try? connection.emit("/", interface, member, [.bytes(DBusBytes(zeros))], destination: connection.uniqueName)
    }

    /// Answers with an error.
    public func fail(_ error: DBusError) {
        guard claim(), let connection else { return }
        let reply = g_dbus_message_new_method_error_literal(message, error.name, error.message)!
        if !noReplyExpected { connection.send(reply) }
        g_object_unref(UnsafeMutableRawPointer(reply))
    }
}

/// A private GLib main context on which signal subscriptions deliver: the subscriber drains it
/// from its own thread (`drain`), so callbacks never run on a thread it does not control.
public final class DBusSignalContext: @unchecked Sendable {
    let context: OpaquePointer
    private var subscriptions: [(DBusConnection, UInt32)] = []
    private var boxes: [Unmanaged<SignalBox>] = []

    /// A new context.
    public init() { context = g_main_context_new() }

    deinit {
        for (connection, id) in subscriptions { g_dbus_connection_signal_unsubscribe(connection.raw, UInt32(id)) }
        drain()
        for b in boxes { b.release() }
        g_main_context_unref(context)
    }

    /// Subscribes to the signals that match (nil: any); `handler` gets the member and arguments
    /// when this context is drained. The bus stamps `sender`: a subscription to a unique name
    /// hears no one else.
    public func subscribe(_ connection: DBusConnection, sender: String?, interface: String?, member: String?,
                          path: String?, arg0: String? = nil, _ handler: @escaping (String, [DBusValue]) -> Void) {
        let box = Unmanaged.passRetained(SignalBox(handler))
        boxes.append(box)
        g_main_context_push_thread_default(context)
        let id = g_dbus_connection_signal_subscribe(
            connection.raw, sender, interface, member, path, arg0, G_DBUS_SIGNAL_FLAGS_NONE,
            { _, _, _, _, signal, parameters, data in
                guard let data, let signal else { return }
                let box = Unmanaged<SignalBox>.fromOpaque(data).takeUnretainedValue()
                box.handler(String(cString: signal), GVariantCoding.body(parameters))
            }, box.toOpaque(), nil)
        g_main_context_pop_thread_default(context)
        subscriptions.append((connection, UInt32(id)))
    }

    /// Runs every callback queued on the context.
    public func drain() {
        while g_main_context_iteration(context, 0) != 0 {}
    }
}

private final class SignalBox {
    let handler: (String, [DBusValue]) -> Void
    init(_ handler: @escaping (String, [DBusValue]) -> Void) { self.handler = handler }
}
