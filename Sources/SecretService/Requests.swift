public import VaultDBus

/// The object paths of the service (Secret Service API 0.2, "Object Paths").
public enum SecretPaths {
    /// The service object.
    public static let base = "/org/freedesktop/secrets"
    /// Collections (and their items below them).
    public static let collectionPrefix = base + "/collection/"
    /// Aliases (`default`, `session`), which name a collection.
    public static let aliasPrefix = base + "/aliases/"
    /// Sessions.
    public static let sessionPrefix = base + "/session/"
    /// Prompts.
    public static let promptPrefix = base + "/prompt/"
    /// "No object" (`/`): no prompt needed, no collection.
    public static let none = "/"

    /// A D-Bus path element for a name: letters and digits kept, every other byte `_XX` (hex).
    public static func element(_ name: String) -> String {
        var out = ""
        for b in name.utf8 {
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                let digits = Array("0123456789abcdef")
                out += "_" + String(digits[Int(b >> 4)]) + String(digits[Int(b & 15)])
            }
        }
        return out.isEmpty ? "_" : out
    }
}

/// What an object path names.
public enum SecretObject: Equatable, Sendable {
    case service
    /// A collection by its path element, or by alias (`aliases/NAME`).
    case collection(String)
    case alias(String)
    /// An item: its collection (element or `alias:NAME`) and its id.
    case item(collection: SecretObject.CollectionRef, id: String)
    case session(String)
    case prompt(String)
    case unknown

    /// A collection named directly or through an alias.
    public enum CollectionRef: Equatable, Sendable {
        case element(String)
        case alias(String)
    }

    /// The object a path names (never fails: an unknown path is `.unknown`).
    public init(path: String) {
        if path == SecretPaths.base { self = .service; return }
        func rest(_ prefix: String) -> [Substring]? {
            guard path.hasPrefix(prefix) else { return nil }
            let parts = path.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
            guard (1...2).contains(parts.count), parts.allSatisfy({ !$0.isEmpty }) else { return nil }
            return parts
        }
        if let p = rest(SecretPaths.collectionPrefix) {
            self = p.count == 1 ? .collection(String(p[0])) : .item(collection: .element(String(p[0])), id: String(p[1]))
        } else if let p = rest(SecretPaths.aliasPrefix) {
            self = p.count == 1 ? .alias(String(p[0])) : .item(collection: .alias(String(p[0])), id: String(p[1]))
        } else if let p = rest(SecretPaths.sessionPrefix), p.count == 1 {
            self = .session(String(p[0]))
        } else if let p = rest(SecretPaths.promptPrefix), p.count == 1 {
            self = .prompt(String(p[0]))
        } else {
            self = .unknown
        }
    }
}

/// A secret as it crosses the bus: `(oayays)`, the session, its parameters (the IV), the value
/// (plain or encrypted) and its content type.
public struct WireSecret: Sendable, Equatable {
    /// The session the value is for.
    public var session: String
    /// The algorithm's parameters: the IV for a DH session, empty for `plain`.
    public var parameters: DBusBytes
    /// The secret, encrypted for a DH session.
    public var value: DBusBytes
    /// The secret's content type (`text/plain`).
    public var contentType: String

    /// The D-Bus value.
    public var dbus: DBusValue {
        .structure([.objectPath(session), .bytes(parameters), .bytes(value), .string(contentType)])
    }

    init?(_ v: DBusValue) {
        guard case .structure(let f) = v, f.count == 4, case .objectPath(let s) = f[0], case .bytes(let p) = f[1],
              case .bytes(let value) = f[2], case .string(let t) = f[3] else { return nil }
        session = s
        parameters = p
        self.value = value
        contentType = t
    }

    /// A secret to send.
    public init(session: String, parameters: DBusBytes, value: DBusBytes, contentType: String) {
        self.session = session
        self.parameters = parameters
        self.value = value
        self.contentType = contentType
    }
}

/// One method call of the Secret Service API, decoded and checked: the interface (or, when
/// the caller named none, the member alone), the object kind and the exact signature. Anything
/// else is a D-Bus error, never a crash (the fuzz target `secret_service_request` feeds it).
public enum SecretRequest: Equatable, Sendable {
    case openSession(algorithm: String, input: DBusValue)
    case createCollection(properties: [DBusEntry], alias: String)
    case searchItems(collection: SecretObject?, attributes: [Attribute])
    case unlock([String])
    case lock([String])
    case getSecrets(items: [String], session: String)
    case readAlias(String)
    case setAlias(String, collection: String)
    case deleteCollection(SecretObject)
    case createItem(collection: SecretObject, properties: [DBusEntry], secret: WireSecret, replace: Bool)
    case deleteItem(SecretObject)
    case getSecret(item: SecretObject, session: String)
    case setSecret(item: SecretObject, secret: WireSecret)
    case closeSession(String)
    case prompt(String, windowID: String)
    case dismiss(String)
    case getProperty(SecretObject, interface: String, name: String)
    case getAllProperties(SecretObject, interface: String)
    case setProperty(SecretObject, interface: String, name: String, value: DBusValue)
    case introspect(String)
    case ping
    case machineID

    /// One attribute pair.
    public struct Attribute: Equatable, Sendable, Hashable {
        /// The attribute's name.
        public var name: String
        /// Its value.
        public var value: String

        /// A pair.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    static let service = "org.freedesktop.Secret.Service"
    static let collection = "org.freedesktop.Secret.Collection"
    static let item = "org.freedesktop.Secret.Item"
    static let session = "org.freedesktop.Secret.Session"
    static let promptInterface = "org.freedesktop.Secret.Prompt"
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let peer = "org.freedesktop.DBus.Peer"

    /// At most this many objects, attributes or properties in one call.
    public static let maximumList = 10_000

    /// Decodes a call to `path` of `interface.member` with `arguments`.
    /// - Throws: `UnknownMethod` for a member the object does not have, `InvalidArgs` for a
    ///   wrong signature or a value out of bounds, `UnknownObject` for a path the service does
    ///   not serve.
    public static func decode(path: String, interface: String?, member: String,
                              arguments a: [DBusValue]) throws(DBusError) -> SecretRequest {
        let object = SecretObject(path: path)
        let signature = a.map(\.signature).joined()
        func want(_ s: String) throws(DBusError) {
            guard signature == s else { throw .invalidArgs("\(member) takes (\(s)), not (\(signature))") }
        }
        func on(_ i: String) -> Bool { interface == nil || interface == i }

        // Interfaces every object has.
        if on(introspectable), member == "Introspect" { try want(""); return .introspect(path) }
        if on(peer), member == "Ping" { try want(""); return .ping }
        if on(peer), member == "GetMachineId" { try want(""); return .machineID }
        if object == .unknown { throw .unknownObject("no object at \(path)") }
        if on(properties), ["Get", "GetAll", "Set"].contains(member) {
            switch member {
            case "Get":
                try want("ss")
                return .getProperty(object, interface: a[0].text!, name: a[1].text!)
            case "GetAll":
                try want("s")
                return .getAllProperties(object, interface: a[0].text!)
            default:
                try want("ssv")
                return .setProperty(object, interface: a[0].text!, name: a[1].text!, value: a[2].unboxed)
            }
        }

        switch object {
        case .service where on(service):
            switch member {
            case "OpenSession":
                try want("sv")
                return .openSession(algorithm: a[0].text!, input: a[1].unboxed)
            case "CreateCollection":
                try want("a{sv}s")
                return .createCollection(properties: try entries(a[0]), alias: a[1].text!)
            case "SearchItems":
                try want("a{ss}")
                return .searchItems(collection: nil, attributes: try attributes(a[0]))
            case "Unlock":
                try want("ao")
                return .unlock(try paths(a[0]))
            case "Lock":
                try want("ao")
                return .lock(try paths(a[0]))
            case "GetSecrets":
                try want("aoo")
                return .getSecrets(items: try paths(a[0]), session: a[1].text!)
            case "ReadAlias":
                try want("s")
                return .readAlias(a[0].text!)
            case "SetAlias":
                try want("so")
                return .setAlias(a[0].text!, collection: a[1].text!)
            default: break
            }
        case .collection, .alias:
            guard on(collection) else { break }
            switch member {
            case "Delete":
                try want("")
                return .deleteCollection(object)
            case "SearchItems":
                try want("a{ss}")
                return .searchItems(collection: object, attributes: try attributes(a[0]))
            case "CreateItem":
                try want("a{sv}(oayays)b")
                guard let secret = WireSecret(a[1]), case .boolean(let replace) = a[2] else { throw .invalidArgs("CreateItem: a malformed secret") }
                return .createItem(collection: object, properties: try entries(a[0]), secret: secret, replace: replace)
            default: break
            }
        case .item where on(item):
            switch member {
            case "Delete":
                try want("")
                return .deleteItem(object)
            case "GetSecret":
                try want("o")
                return .getSecret(item: object, session: a[0].text!)
            case "SetSecret":
                try want("(oayays)")
                guard let secret = WireSecret(a[0]) else { throw .invalidArgs("SetSecret: a malformed secret") }
                return .setSecret(item: object, secret: secret)
            default: break
            }
        case .session(let id) where on(session) && member == "Close":
            try want("")
            return .closeSession(id)
        case .prompt(let id) where on(promptInterface):
            if member == "Prompt" {
                try want("s")
                return .prompt(id, windowID: a[0].text!)
            }
            if member == "Dismiss" {
                try want("")
                return .dismiss(id)
            }
        default: break
        }
        throw .unknownMethod("no method \(interface ?? "").\(member) at \(path)")
    }

    static func entries(_ v: DBusValue) throws(DBusError) -> [DBusEntry] {
        guard case .dictionary(_, _, let e) = v else { throw .invalidArgs("a dictionary was expected") }
        guard e.count <= maximumList else { throw .invalidArgs("at most \(maximumList) entries") }
        return e
    }

    static func attributes(_ v: DBusValue) throws(DBusError) -> [Attribute] {
        var out: [Attribute] = []
        var seen = Set<String>()
        for e in try entries(v) {
            guard let k = e.key.text, let value = e.value.text else { throw .invalidArgs("attributes are strings") }
            guard seen.insert(k).inserted else { throw .invalidArgs("the attribute \(k) is given twice") }
            guard k.utf8.count <= 1024, value.utf8.count <= 65536 else { throw .invalidArgs("an attribute is too long") }
            out.append(Attribute(k, value))
        }
        return out
    }

    static func paths(_ v: DBusValue) throws(DBusError) -> [String] {
        guard case .array(_, let items) = v else { throw .invalidArgs("a list of objects was expected") }
        guard items.count <= maximumList else { throw .invalidArgs("at most \(maximumList) objects") }
        return items.compactMap(\.text)
    }
}

/// The errors of the Secret Service API.
public enum SecretErrors {
    /// The object is locked: unlock it first.
    public static func isLocked(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.Secret.Error.IsLocked", message: detail) }
    /// No such session, or another client's.
    public static func noSession(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.Secret.Error.NoSession", message: detail) }
    /// No such item, collection or prompt.
    public static func noSuchObject(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.Secret.Error.NoSuchObject", message: detail) }
    /// Something the service does not do (an algorithm, a collection made over D-Bus).
    public static func notSupported(_ detail: String) -> DBusError { DBusError(name: "org.freedesktop.DBus.Error.NotSupported", message: detail) }
}
