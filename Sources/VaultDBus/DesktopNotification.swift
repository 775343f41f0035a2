internal import Foundation

/// The desktop's notifications (`org.freedesktop.Notifications`, the Desktop Notifications
/// Specification 1.2): how a program that waits for a touch tells the person, when a
/// notification server runs. Shared by the Secret Service and the SSH agent.
public enum DesktopNotification {
    /// The well-known name, object path and interface.
    public static let name = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"

    /// The longest summary and body sent: the text comes partly from peers (program names, a
    /// user name, a namespace), so it is bounded before it reaches the desktop.
    public static let textLimit = 512

    /// Shows `summary` and `body` as plain text (control characters replaced; the body's `&`,
    /// `<` and `>` escaped for a server that reads markup in it, `body-markup`) when a
    /// notification server owns its name; nothing otherwise (no activation: the name's owner is
    /// asked first). Each call waits at most `timeoutMilliseconds`. Returns the notification's
    /// id, nil when none was shown.
    @discardableResult
    public static func send(_ connection: DBusConnection, summary: String, body: String, icon: String = "dialog-password",
                            timeoutMilliseconds: Int32 = 2000) -> UInt32? {
        guard (try? connection.owner(of: name)) ?? nil != nil else { return nil }
        var markup = false
        if case .array(_, let caps)? = (try? connection.call(name, path, name, "GetCapabilities", timeoutMilliseconds: timeoutMilliseconds))?.first {
            markup = caps.contains { $0.text == "body-markup" }
        }
        let reply = try? connection.call(name, path, name, "Notify",
                                         [.string("vault"), .uint32(0), .string(icon), .string(plain(summary, markup: false)),
                                          .string(plain(body, markup: markup)),
                                          .array(element: "s", []), .properties([("urgency", .byte(2))]), .int32(-1)],
                                         timeoutMilliseconds: timeoutMilliseconds)
        if case .uint32(let id)? = reply?.first { return id }
        return nil
    }

    /// Takes a notification down (`CloseNotification`), e.g. once the touch it asked for came.
    public static func close(_ connection: DBusConnection, id: UInt32, timeoutMilliseconds: Int32 = 2000) {
        _ = try? connection.call(name, path, name, "CloseNotification", [.uint32(id)], timeoutMilliseconds: timeoutMilliseconds)
    }

    /// A notification on the user's session bus, when `environment` names one
    /// (`DBUS_SESSION_BUS_ADDRESS`, or the `bus` socket in `XDG_RUNTIME_DIR`): never GLib's
    /// autolaunch of a bus. The connection is private and closed once `send` and `close` are done.
    public final class OnSessionBus: @unchecked Sendable {
        private let connection: DBusConnection?
        private let id: UInt32?

        /// Shows `summary` and `body` (see ``DesktopNotification/send(_:summary:body:icon:timeoutMilliseconds:)``).
        public init(summary: String, body: String, environment: [String: String]) {
            var address = environment["DBUS_SESSION_BUS_ADDRESS"].flatMap { $0.isEmpty ? nil : $0 }
            if address == nil, let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty,
               FileManager.default.fileExists(atPath: runtime + "/bus") {
                address = "unix:path=" + runtime + "/bus"
            }
            connection = address.flatMap { try? DBusConnection(address: $0) }
            id = connection.flatMap { DesktopNotification.send($0, summary: summary, body: body) }
        }

        /// Whether a notification server showed it.
        public var shown: Bool { id != nil }

        /// Takes it down and closes the connection.
        public func close() {
            if let connection, let id { DesktopNotification.close(connection, id: id) }
            connection?.close()
        }
    }

    /// `text` as plain text: control characters (C0 but the newline, DEL, C1) as `?`, at most
    /// ``textLimit`` characters; for a server that reads `markup`, `&`, `<` and `>` escaped.
    static func plain(_ text: String, markup: Bool) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(textLimit) {
            switch scalar {
            case "&" where markup: out += "&amp;"
            case "<" where markup: out += "&lt;"
            case ">" where markup: out += "&gt;"
            case "\n": out += "\n"
            default:
                let v = scalar.value
                out.unicodeScalars.append(v < 0x20 || (0x7f...0x9f).contains(v) ? "?" : scalar)
            }
        }
        return out
    }
}
