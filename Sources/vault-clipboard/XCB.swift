internal import CXCB
import Foundation
import VaultSystem

/// Why talking to the X server failed: the connection (no display, no authority, the server went
/// away) or one request the server refused.
enum XError: Error, CustomStringConvertible {
    /// The connection could not be made or broke; the text says why (libxcb's error code).
    case connection(String)
    /// A request with a reply failed: its name and the X error code.
    case request(String, code: UInt8)

    var description: String {
        switch self {
        case .connection(let why): why
        case .request(let name, let code): "the X server refused \(name) (X error \(code))"
        }
    }

    /// libxcb's connection error code in words.
    static func connection(code: Int32, display: String) -> XError {
        let why = switch code {
        case XCB_CONN_CLOSED_PARSE_ERR: "the display name '\(display)' is not valid"
        case XCB_CONN_CLOSED_INVALID_SCREEN: "the X server of '\(display)' has no such screen"
        case XCB_CONN_CLOSED_MEM_INSUFFICIENT: "out of memory talking to the X server"
        case XCB_CONN_CLOSED_REQ_LEN_EXCEED: "a request was longer than the X server takes"
        default: "cannot talk to the X server of '\(display)' (not running, or no authority for it)"
        }
        return .connection(why)
    }
}

/// A selection request as the X server passes it on: who wants the selection in which target,
/// into which property of their window.
struct SelectionRequest {
    let time: UInt32
    let requestor: UInt32
    let selection: UInt32
    let target: UInt32
    let property: UInt32
}

/// The events the clipboard owner acts on; the rest arrive as `.other`.
enum XEvent {
    case selectionRequest(SelectionRequest)
    /// Another client took `selection`.
    case selectionClear(selection: UInt32)
    /// The answer to our conversion request: `property` is 0 when the owner refused.
    case selectionNotify(selection: UInt32, target: UInt32, property: UInt32)
    /// A property of `window` changed (`deleted` false: a new value) at server `time`.
    case propertyNotify(window: UInt32, atom: UInt32, time: UInt32, deleted: Bool)
    case other
}

/// A property's value as read: its type atom, its format (8, 16 or 32) and its bytes.
struct PropertyValue {
    let type: UInt32
    let format: UInt8
    var bytes: [UInt8]
}

/// One connection to the X server through libxcb, and the few requests a selection owner needs.
/// This is the only file that touches libxcb; nothing of it leaves here but plain integers.
final class XDisplay {
    private let connection: OpaquePointer
    /// The root window of the connection's screen.
    let root: UInt32

    /// Connects to `DISPLAY` (with `XAUTHORITY` or `~/.Xauthority`, as every X client does).
    /// - Throws: ``XError/connection(_:)`` when there is no server to talk to.
    init(display: String) throws(XError) {
        var screenNumber: Int32 = 0
        guard let c = xcb_connect(nil, &screenNumber) else { throw .connection("cannot talk to the X server of '\(display)'") }
        let code = xcb_connection_has_error(c)
        if code != 0 {
            xcb_disconnect(c)
            throw XError.connection(code: code, display: display)
        }
        var screens = xcb_setup_roots_iterator(xcb_get_setup(c))
        for _ in 0..<max(0, screenNumber) where screens.rem > 0 { xcb_screen_next(&screens) }
        guard screens.rem > 0, let screen = screens.data else {
            xcb_disconnect(c)
            throw XError.connection(code: XCB_CONN_CLOSED_INVALID_SCREEN, display: display)
        }
        connection = c
        root = screen.pointee.root
    }

    deinit { xcb_disconnect(connection) }

    /// The longest request the server takes, in bytes (BIG-REQUESTS is used when the server has it).
    var maximumRequestBytes: Int { Int(xcb_get_maximum_request_length(connection)) * 4 }

    /// The atom named `name`, made when it does not exist yet.
    /// - Throws: ``XError`` when the server refuses or the connection broke.
    func atom(_ name: String) throws(XError) -> UInt32 {
        let cookie = name.withCString { xcb_intern_atom(connection, 0, UInt16(strlen($0)), $0) }
        var error: UnsafeMutablePointer<xcb_generic_error_t>?
        guard let reply = xcb_intern_atom_reply(connection, cookie, &error) else { throw failure("InternAtom \(name)", error) }
        defer { free(reply) }
        return reply.pointee.atom
    }

    /// A 1x1 input-only window that hears about its own property changes: the owner of the
    /// selection, and where converted selections are delivered.
    /// - Throws: ``XError`` when the connection broke.
    func makeWindow() throws(XError) -> UInt32 {
        let window = xcb_generate_id(connection)
        var mask = XCB_EVENT_MASK_PROPERTY_CHANGE.rawValue
        xcb_create_window(connection, 0, window, root, 0, 0, 1, 1, 0, UInt16(XCB_WINDOW_CLASS_INPUT_ONLY.rawValue), 0,
                          XCB_CW_EVENT_MASK.rawValue, &mask)
        try flush()
        return window
    }

    /// The current owner of `selection` (0: none).
    /// - Throws: ``XError`` when the request fails.
    func selectionOwner(_ selection: UInt32) throws(XError) -> UInt32 {
        var error: UnsafeMutablePointer<xcb_generic_error_t>?
        guard let reply = xcb_get_selection_owner_reply(connection, xcb_get_selection_owner(connection, selection), &error) else {
            throw failure("GetSelectionOwner", error)
        }
        defer { free(reply) }
        return reply.pointee.owner
    }

    /// Makes `window` (0: nobody) the owner of `selection` as of server `time`. The server ignores
    /// it when `time` is older than the last change of owner: giving up with the time ownership
    /// was taken therefore never takes the selection from a client that took it since.
    func setSelectionOwner(_ window: UInt32, of selection: UInt32, time: UInt32) throws(XError) {
        xcb_set_selection_owner(connection, window, selection, time)
        try flush()
    }

    /// Asks the owner of `selection` for it in `target`, delivered into `property` of `window`.
    func convertSelection(_ selection: UInt32, to target: UInt32, into property: UInt32, of window: UInt32,
                          time: UInt32) throws(XError) {
        xcb_convert_selection(connection, window, selection, target, property, time)
        try flush()
    }

    /// Reads (and with `delete`, deletes) `property` of `window`; nil when it does not exist.
    /// The reply's memory is wiped before it is freed: it may hold what a password manager copied.
    /// - Throws: ``XError`` when the request fails or the value is longer than `limit` bytes.
    func property(_ property: UInt32, of window: UInt32, delete: Bool, limit: Int) throws(XError) -> PropertyValue? {
        let words = UInt32(min(limit / 4 + 1, Int(UInt32.max / 4)))
        let cookie = xcb_get_property(connection, delete ? 1 : 0, window, property, 0 /* AnyPropertyType */, 0, words)
        var error: UnsafeMutablePointer<xcb_generic_error_t>?
        guard let reply = xcb_get_property_reply(connection, cookie, &error) else { throw failure("GetProperty", error) }
        let total = MemoryLayout<xcb_get_property_reply_t>.size + Int(reply.pointee.length) * 4
        defer {
            memset(reply, 0, total)
            free(reply)
        }
        guard reply.pointee.type != 0 else { return nil }
        let count = Int(xcb_get_property_value_length(reply))
        guard reply.pointee.bytes_after == 0, count <= limit else {
            throw .request("GetProperty (a value over \(limit) bytes)", code: 0)
        }
        let start = xcb_get_property_value(reply)!
        return PropertyValue(type: reply.pointee.type, format: reply.pointee.format,
                             bytes: Array(UnsafeRawBufferPointer(start: start, count: count)))
    }

    /// Replaces `property` of `window` with `bytes`, in `format` 8 or 32 (then a multiple of 4 bytes).
    func changeProperty(_ property: UInt32, of window: UInt32, type: UInt32, format: UInt8,
                        bytes: UnsafeRawBufferPointer) throws(XError) {
        let units = UInt32(bytes.count / (Int(format) / 8))
        xcb_change_property(connection, UInt8(XCB_PROP_MODE_REPLACE.rawValue), window, property, type, format, units,
                            bytes.baseAddress)
        try flush()
    }

    /// Appends nothing to `property` of `window`: the server answers with a PropertyNotify that
    /// carries its current time (a timestamp for SetSelectionOwner, as ICCCM asks).
    func touchProperty(_ property: UInt32, of window: UInt32, type: UInt32) throws(XError) {
        xcb_change_property(connection, UInt8(XCB_PROP_MODE_APPEND.rawValue), window, property, type, 8, 0, nil)
        try flush()
    }

    /// Deletes `property` of `window`.
    func deleteProperty(_ property: UInt32, of window: UInt32) throws(XError) {
        xcb_delete_property(connection, window, property)
        try flush()
    }

    /// Tells `requestor` that its request is answered in `property` (0: refused).
    func notifySelection(_ request: SelectionRequest, property: UInt32) throws(XError) {
        var event = xcb_selection_notify_event_t()
        event.response_type = UInt8(XCB_SELECTION_NOTIFY)
        event.time = request.time
        event.requestor = request.requestor
        event.selection = request.selection
        event.target = request.target
        event.property = property
        // SendEvent copies 32 bytes whatever the event's own size.
        var wire = [UInt8](repeating: 0, count: 32)
        withUnsafeBytes(of: &event) { e in wire.withUnsafeMutableBytes { $0.copyMemory(from: e) } }
        wire.withUnsafeBytes { w in
            _ = xcb_send_event(connection, 0, request.requestor, 0, w.baseAddress!.assumingMemoryBound(to: CChar.self))
        }
        try flush()
    }

    /// The next event, waiting until `deadline` (a `MonotonicClock` time; nil: no limit); nil when
    /// the deadline passed first.
    /// - Throws: ``XError/connection(_:)`` when the connection broke (the server went away).
    func nextEvent(until deadline: Double?) throws(XError) -> XEvent? {
        while true {
            if let raw = xcb_poll_for_event(connection) {
                defer { free(raw) }
                return Self.event(raw)
            }
            if xcb_connection_has_error(connection) != 0 { throw .connection("the X server closed the connection") }
            var wait: Int32 = -1
            if let deadline {
                let left = deadline - MonotonicClock.seconds()
                if left <= 0 { return nil }
                wait = Int32(min(left * 1000 + 1, 60_000))
            }
            _ = try? Poll.wait([PollRequest(fd: xcb_get_file_descriptor(connection), events: .readable)], timeoutMilliseconds: wait)
        }
    }

    /// Sends what is queued.
    /// - Throws: ``XError/connection(_:)`` when the connection broke.
    func flush() throws(XError) {
        if xcb_flush(connection) <= 0 { throw .connection("the X server closed the connection") }
    }

    /// libxcb copies a short request into its 16 KiB output queue before sending it, so the
    /// bytes of a value served stay in this process's memory after the value itself was wiped.
    /// One request that fills the whole empty queue with zeros overwrites them.
    func overwriteOutputQueue(scratch property: UInt32, of window: UInt32, type: UInt32) throws(XError) {
        try flush()
        // 24 bytes of ChangeProperty header + 16360 of data = XCB_QUEUE_BUFFER_SIZE (16384).
        let zeros = UnsafeMutableRawBufferPointer.allocate(byteCount: 16360, alignment: 4)
        defer { zeros.deallocate() }
        zeros.initializeMemory(as: UInt8.self, repeating: 0)
        try changeProperty(property, of: window, type: type, format: 8, bytes: UnsafeRawBufferPointer(zeros))
        try deleteProperty(property, of: window)
    }

    /// Overwrites 64 KiB of stack below the caller: libc and libxcb leave pieces of the bytes
    /// they sent in their frames (copies in vector registers spilled on the way to writev).
    static func overwriteStack() {
        vault_clipboard_overwrite_stack()
    }

    private func failure(_ request: String, _ error: UnsafeMutablePointer<xcb_generic_error_t>?) -> XError {
        guard let error else { return .connection("the X server closed the connection") }
        defer { free(error) }
        return .request(request, code: error.pointee.error_code)
    }

    private static func event(_ raw: UnsafeMutablePointer<xcb_generic_event_t>) -> XEvent {
        let p = UnsafeRawPointer(raw)
        switch Int32(raw.pointee.response_type & 0x7f) {
        case XCB_SELECTION_REQUEST:
            let e = p.load(as: xcb_selection_request_event_t.self)
            return .selectionRequest(SelectionRequest(time: e.time, requestor: e.requestor, selection: e.selection,
                                                      target: e.target, property: e.property))
        case XCB_SELECTION_CLEAR:
            return .selectionClear(selection: p.load(as: xcb_selection_clear_event_t.self).selection)
        case XCB_SELECTION_NOTIFY:
            let e = p.load(as: xcb_selection_notify_event_t.self)
            return .selectionNotify(selection: e.selection, target: e.target, property: e.property)
        case XCB_PROPERTY_NOTIFY:
            let e = p.load(as: xcb_property_notify_event_t.self)
            return .propertyNotify(window: e.window, atom: e.atom, time: e.time,
                                   deleted: UInt32(e.state) == XCB_PROPERTY_DELETE.rawValue)
        default:
            // Errors of requests without replies (response type 0: a requestor window that went
            // away before its answer) and events we did not ask for.
            return .other
        }
    }
}
