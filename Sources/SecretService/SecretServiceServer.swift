public import VaultDBus
public import VaultKit
internal import VaultAgent
internal import VaultSystem
internal import Foundation

/// How the service is set up (`vault secret-service`'s options).
public struct SecretServiceOptions: Sendable {
    /// The vaults served as collections, the first one the `default` alias.
    public var vaults: [VaultLocation]
    /// The environment (the agent's socket, `VAULT_HOME`, what `vault unlock` gets).
    public var environment: [String: String]
    /// The `vault` binary a prompt runs `vault unlock` with.
    public var vaultBinary: String
    /// How long a prompt's `vault unlock` waits for a finger.
    public var scanTimeout: Double
    /// The pinentry program for the passcode when no finger unlocked (nil: none).
    public var pinentry: String?

    /// The options.
    public init(vaults: [VaultLocation], environment: [String: String], vaultBinary: String, scanTimeout: Double = 30,
                pinentry: String? = nil) {
        self.vaults = vaults
        self.environment = environment
        self.vaultBinary = vaultBinary
        self.scanTimeout = scanTimeout
        self.pinentry = pinentry
    }
}

/// The service's bounds: what one client, and all of them, may hold.
public enum SecretServiceLimits {
    /// Open sessions of one client (unique name).
    public static let sessionsPerClient = 64
    /// Open sessions of all clients.
    public static let sessions = 4096
    /// Pending prompts of one client.
    public static let promptsPerClient = 16
    /// The largest secret stored (1 MiB, the size of an imported item).
    public static let secretBytes = 1 << 20
    /// Items of the in-memory `session` collection.
    public static let memoryItems = 10_000
    /// Releases of fingerprint-login items one client may have waiting for a touch.
    public static let approvalsPerClient = 4
    /// Unlocks and releases waiting for a touch, of all clients together (each is a thread that
    /// waits its turn at the reader).
    public static let waitingForTouch = 64
    /// Method calls of one client received and not yet answered or handed on (each holds its
    /// message in memory, and all wait on the one queue): a client that floods is answered
    /// `LimitsExceeded` at once, and every other client waits behind at most this many of its calls.
    public static let callsPerClient = 32
    /// Method calls of all clients received and not yet carried out.
    public static let calls = 1024
    /// Aliases set with `SetAlias` (beyond `default` and `session`).
    public static let aliases = 256
    /// Collections made with `CreateCollection` while the service runs.
    public static let createdCollections = 16
}

/// The Secret Service on one bus connection: every call is decoded (`SecretRequest`) on GDBus's
/// worker thread and carried out, in order, on one serial queue; a prompt's unlock runs on a
/// thread of its own and completes on the queue. Vault items are read and written through the
/// vault's unlock session in `vault-agent` (the service never holds a vault key): a collection
/// is unlocked exactly while that session is open.
public final class SecretServiceServer: @unchecked Sendable {
    let connection: DBusConnection
    let options: SecretServiceOptions
    let queue = DispatchQueue(label: "vault.secret-service")
    /// Called (on the queue) when the bus took our name away or the connection closed.
    public var onNameLost: (@Sendable () -> Void)?

    final class Collection: @unchecked Sendable {
        let element: String
        let label: String
        /// nil: the in-memory `session` collection.
        let location: VaultLocation?
        let created: Int64
        var path: String { SecretPaths.collectionPrefix + element }

        init(element: String, label: String, location: VaultLocation?) {
            self.element = element
            self.label = label
            self.location = location
            created = unixNow()
        }
    }

    final class ClientSession {
        let owner: String
        /// nil: `plain`.
        let key: DHSessionKey?
        init(owner: String, key: DHSessionKey?) {
            self.owner = owner
            self.key = key
        }
    }

    /// A collection `CreateCollection` asked for: the vault to make, its label and the alias
    /// to point at it.
    struct NewCollection: Sendable {
        let location: VaultLocation
        let label: String
        let alias: String
    }

    final class Prompt: @unchecked Sendable {
        let id: String
        let owner: String
        let vaults: [Collection]
        let objects: [String]
        /// Set for `CreateCollection`'s prompt (which unlocks nothing: it makes a vault).
        let creating: NewCollection?
        /// The collection made, once made (its path is `Completed`'s result).
        var created: Collection?
        var started = false
        var finished = false
        var child: Process?
        init(id: String, owner: String, vaults: [Collection], objects: [String], creating: NewCollection? = nil) {
            self.id = id
            self.owner = owner
            self.vaults = vaults
            self.objects = objects
            self.creating = creating
        }
    }

    final class MemoryItem {
        let id: String
        var label: String
        var attributes: [SecretRequest.Attribute]
        var contentType: String
        var secret: SecretBytes
        let created: Int64
        var modified: Int64
        init(id: String, label: String, attributes: [SecretRequest.Attribute], contentType: String, secret: consuming SecretBytes) {
            self.id = id
            self.label = label
            self.attributes = attributes
            self.contentType = contentType
            self.secret = secret
            created = unixNow()
            modified = created
        }
    }

    var collections: [Collection] = []
    var aliases: [String: String] = [:]
    var sessions: [String: ClientSession] = [:]
    var prompts: [String: Prompt] = [:]
    var memory: [MemoryItem] = []
    /// The keyed attribute index: per collection, per item id, keyed MACs of its attribute pairs,
    /// so a search of a locked collection still finds its items (as locked). The key never
    /// leaves this process; nothing of it is written anywhere.
    var index: [String: [String: Set<[UInt8]>]] = [:]
    let indexKey: SecretBytes
    var counter = 0
    /// Releases waiting for a touch, per client; and every unlock or release waiting, in all.
    var approvalsWaiting: [String: Int] = [:]
    var touchesWaiting = 0

    /// A server for `options` on `connection` (call `start`).
    public init(connection: DBusConnection, options: SecretServiceOptions) throws {
        self.connection = connection
        self.options = options
        indexKey = try SecretBytes.random(count: 32)
        var used = Set<String>(["session"])
        for location in options.vaults {
            var element = SecretPaths.element(location.name)
            while used.contains(element) { element += "_" }
            used.insert(element)
            collections.append(Collection(element: element, label: location.name, location: location))
        }
        collections.append(Collection(element: "session", label: "session", location: nil))
        aliases["default"] = collections.first!.element
        aliases["session"] = "session"
    }

    /// Method calls received and not yet carried out, per client and in all (GDBus's worker
    /// thread admits, the queue releases: its own lock, not the queue).
    private let admission = NSLock()
    private var callsPending: [String: Int] = [:]
    private var callsPendingTotal = 0

    /// Admits a call of `sender` (false: it holds its share, or all are taken).
    func admit(_ sender: String) -> Bool {
        admission.withLock {
            let mine = callsPending[sender, default: 0]
            guard mine < SecretServiceLimits.callsPerClient, callsPendingTotal < SecretServiceLimits.calls else { return false }
            callsPending[sender] = mine + 1
            callsPendingTotal += 1
            return true
        }
    }

    func carriedOut(_ sender: String) {
        admission.withLock {
            callsPendingTotal -= 1
            let left = callsPending[sender, default: 1] - 1
            callsPending[sender] = left == 0 ? nil : left
        }
    }

    /// Starts serving (before the name is requested, so no call finds nobody home).
    public func start() throws(DBusError) {
        connection.serve { [weak self] message in
            guard let self else { return }
            if message.isSignal {
                // Only the bus daemon's signals mean anything here; any other (a client's, or the
                // service's own scrub) is dropped before it can queue up.
                if message.sender == "org.freedesktop.DBus" { self.queue.async { self.handle(message) } }
                return
            }
            // Refused here, on GDBus's thread, so a flood never reaches the queue.
            guard self.admit(message.sender) else {
                message.fail(.limitsExceeded("too many calls of this client wait to be carried out (at most \(SecretServiceLimits.callsPerClient)): wait for their replies"))
                return
            }
            self.queue.async {
                self.handle(message)
                self.carriedOut(message.sender)
            }
        }
        try connection.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'")
    }

    // MARK: Dispatch

    func handle(_ m: DBusIncoming) {
        if m.isSignal {
            signal(m)
            return
        }
        do {
            let request = try SecretRequest.decode(path: m.path, interface: m.interface, member: m.member, arguments: m.arguments)
            // A secret a client sent stays in GDBus's reader until overwritten: the scrub goes out
            // before the answer, so whatever the client sends next is read after it.
            let carriesSecret = switch request {
            case .createItem, .setSecret: true
            default: false
            }
            let values: [DBusValue]?
            do {
                values = try perform(request, sender: m.sender, incoming: m)
            } catch {
                if carriesSecret { m.scrubReceiveBuffer(interface: "io.github.vault.SecretService", member: "Scrub") }
                throw error
            }
            if carriesSecret { m.scrubReceiveBuffer(interface: "io.github.vault.SecretService", member: "Scrub") }
            if let values { m.reply(values) }
        } catch let e as DBusError {
            m.fail(e)
        } catch let e as VaultError {
            m.fail(Self.dbusError(e))
        } catch {
            m.fail(.failed("\(error)"))
        }
    }

    static func dbusError(_ e: VaultError) -> DBusError {
        if case .sessionInvalid = e { return SecretErrors.isLocked("the vault was locked") }
        return .failed(e.message)
    }

    func signal(_ m: DBusIncoming) {
        // Only the bus daemon's word counts: any client can send us a signal of that name.
        if m.member == "NameLost", m.sender == "org.freedesktop.DBus", m.path == "/org/freedesktop/DBus" {
            if m.arguments.first?.text == SecretServiceMain.busName { onNameLost?() }
            return
        }
        guard m.member == "NameOwnerChanged", m.sender == "org.freedesktop.DBus", m.arguments.count == 3,
              let name = m.arguments[0].text, name.hasPrefix(":"), m.arguments[2].text == "" else { return }
        clientVanished(name)
    }

    /// A client left the bus: its sessions end, its prompts are dismissed (a running unlock is
    /// stopped) and emit `Completed` as every prompt does once.
    func clientVanished(_ name: String) {
        sessions = sessions.filter { $0.value.owner != name }
        if let program = programOf.removeValue(forKey: name), !programOf.values.contains(program) {
            for element in approvals.keys { approvals[element]?[program] = nil }
        }
        for p in prompts.values where p.owner == name { finish(p, dismissed: true) }
    }

    /// The number of sessions (tests).
    public func sessionCount() -> Int { queue.sync { sessions.count } }

    /// Carries out one request; nil when the reply comes later (a release that waits for a touch),
    /// sent through `incoming`.
    func perform(_ r: SecretRequest, sender: String, incoming: DBusIncoming? = nil) throws -> [DBusValue]? {
        switch r {
        case .introspect(let path): return [.string(Introspection.xml(for: SecretObject(path: path), children: children(of: path)))]
        case .ping: return []
        case .machineID:
            let id = (try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            return [.string(id)]
        case .openSession(let algorithm, let input): return try openSession(algorithm, input, sender: sender)
        case .createCollection(let properties, let alias):
            if !alias.isEmpty, let e = aliases[alias], let c = collection(element: e) { return [.objectPath(c.path), .objectPath(SecretPaths.none)] }
            let label = properties.first { $0.key.text == "org.freedesktop.Secret.Collection.Label" }?.value.unboxed.text
            if let label, let c = collections.first(where: { $0.label == label }) { return [.objectPath(c.path), .objectPath(SecretPaths.none)] }
            return try createCollection(label: label ?? "", alias: alias, sender: sender)
        case .searchItems(nil, let attributes):
            var unlocked: [String] = [], locked: [String] = []
            for c in collections {
                let (u, l) = try search(c, attributes)
                unlocked += u
                locked += l
            }
            return [.objectPaths(unlocked), .objectPaths(locked)]
        case .searchItems(let object?, let attributes):
            let c = try collection(object)
            let (u, l) = try search(c, attributes)
            return [.objectPaths(u + l)]
        case .unlock(let objects): return try unlock(objects, sender: sender)
        case .lock(let objects):
            var locked: [String] = []
            var done = Set<String>()
            for path in objects {
                guard let c = try? collection(of: path), let location = c.location else { continue }
                if done.insert(c.element).inserted, let client = AgentClient.connect(options.environment) {
                    _ = try? client.send(.lock(vault: location.databasePath))
                    approvals[c.element] = nil
                    lockChanged(c, locked: true)
                }
                locked.append(path)
            }
            return [.objectPaths(locked), .objectPath(SecretPaths.none)]
        case .getSecrets(let items, let sessionPath):
            let session = try clientSession(sessionPath, sender: sender)
            let waiting = items.compactMap { path -> (Collection, StoredItem)? in
                guard case .item(let ref, let id) = SecretObject(path: path), let c = try? collection(ref) else { return nil }
                return (try? needsApproval(c, id: id, sender: sender)).flatMap { $0.map { (c, $0) } }
            }
            if !waiting.isEmpty, let incoming {
                approve(waiting, sender: sender, incoming: incoming) { server in
                    try server.perform(.getSecrets(items: items, session: sessionPath), sender: sender) ?? []
                }
                return nil
            }
            var entries: [DBusEntry] = []
            for path in items {
                guard case .item(let ref, let id) = SecretObject(path: path), let c = try? collection(ref),
                      let secret = try? secret(c, id: id, session: session, sessionPath: sessionPath, sender: sender) else { continue }
                entries.append(DBusEntry(.objectPath(path), secret.dbus))
            }
            return [.dictionary(key: "o", value: "(oayays)", entries)]
        case .readAlias(let name):
            guard let e = aliases[name], let c = collection(element: e) else { return [.objectPath(SecretPaths.none)] }
            return [.objectPath(c.path)]
        case .setAlias(let name, let path):
            guard name == "default" || name == "session" || name.utf8.count <= 64 else { throw DBusError.invalidArgs("an alias is at most 64 bytes") }
            if path == SecretPaths.none {
                guard name != "default" else { throw SecretErrors.notSupported("the default alias always names a collection") }
                aliases[name] = nil
                return []
            }
            let c = try collection(of: path)
            guard aliases[name] != nil || aliases.count < SecretServiceLimits.aliases + 2 else {
                throw DBusError.limitsExceeded("at most \(SecretServiceLimits.aliases) aliases")
            }
            aliases[name] = c.element
            return []
        case .deleteCollection:
            throw SecretErrors.notSupported("a vault is removed with its own command, not over D-Bus")
        case .createItem(let object, let properties, let wire, let replace):
            return try createItem(try collection(object), properties, wire, replace: replace, sender: sender)
        case .deleteItem(.item(let ref, let id)):
            let c = try collection(ref)
            if c.location == nil {
                guard memory.contains(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
                memory.removeAll { $0.id == id }
            } else {
                let access = try unlockedAccess(c)
                guard let item = try items(c, access).first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
                try access.remove(item.name)
                index[c.element]?[id] = nil
                forgetApprovals(c, id: id)
            }
            emit(c.path, SecretRequest.collection, "ItemDeleted", [.objectPath(c.path + "/" + id)])
            return [.objectPath(SecretPaths.none)]
        case .getSecret(.item(let ref, let id), let sessionPath):
            let session = try clientSession(sessionPath, sender: sender)
            let c = try collection(ref)
            if let item = try needsApproval(c, id: id, sender: sender), let incoming {
                approve([(c, item)], sender: sender, incoming: incoming) { server in
                    try server.perform(.getSecret(item: .item(collection: ref, id: id), session: sessionPath), sender: sender) ?? []
                }
                return nil
            }
            return [try secret(c, id: id, session: session, sessionPath: sessionPath, sender: sender).dbus]
        case .setSecret(.item(let ref, let id), let wire):
            let c = try collection(ref)
            let session = try clientSession(wire.session, sender: sender)
            var plain = try open(wire, session)
            if c.location == nil {
                guard let m = memory.first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
                m.secret = plain
                m.contentType = wire.contentType
                m.modified = unixNow()
            } else {
                let access = try unlockedAccess(c)
                guard let item = try items(c, access).first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
                var change = ItemChange()
                change.password = try Self.text(&plain)
                change.setFields = [CustomField(name: StoredItem.contentTypeField, value: wire.contentType)]
                try access.update(item.name, change)
                forgetApprovals(c, id: id)
            }
            emit(c.path, SecretRequest.collection, "ItemChanged", [.objectPath(c.path + "/" + id)])
            return []
        case .deleteItem, .getSecret, .setSecret:
            throw SecretErrors.noSuchObject("no such item")
        case .closeSession(let id):
            let path = SecretPaths.sessionPrefix + id
            guard let s = sessions[path], s.owner == sender else { throw SecretErrors.noSession("no such session") }
            sessions[path] = nil
            return []
        case .prompt(let id, _):
            guard let p = prompts[id], p.owner == sender else { throw SecretErrors.noSuchObject("no such prompt") }
            if !p.started { if p.creating != nil { runCreation(p) } else { run(p) } }
            return []
        case .dismiss(let id):
            guard let p = prompts[id], p.owner == sender else { throw SecretErrors.noSuchObject("no such prompt") }
            finish(p, dismissed: true)
            return []
        case .getProperty(let object, let interface, let name):
            guard let value = try properties(of: object).first(where: { $0.name == name && (interface.isEmpty || $0.interface == interface) }) else {
                throw DBusError.invalidArgs("no property \(interface).\(name)")
            }
            return [.variant(value.value)]
        case .getAllProperties(let object, let interface):
            let all = try properties(of: object).filter { interface.isEmpty || $0.interface == interface }
            return [.properties(all.map { ($0.name, $0.value) })]
        case .setProperty(let object, _, let name, let value):
            return try setProperty(object, name, value)
        }
    }

    // MARK: Sessions and secrets

    func openSession(_ algorithm: String, _ input: DBusValue, sender: String) throws -> [DBusValue] {
        guard sessions.count < SecretServiceLimits.sessions,
              sessions.values.filter({ $0.owner == sender }).count < SecretServiceLimits.sessionsPerClient else {
            throw DBusError.accessDenied("too many open sessions")
        }
        let session: ClientSession
        let output: DBusValue
        switch algorithm {
        case "plain":
            session = ClientSession(owner: sender, key: nil)
            output = .string("")
        case "dh-ietf1024-sha256-aes128-cbc-pkcs7":
            guard case .bytes(let peer) = input else { throw DBusError.invalidArgs("the input of \(algorithm) is the client's public key (ay)") }
            let key: DHSessionKey
            do { key = try DHSessionKey(peer: peer.array) } catch { throw DBusError.invalidArgs("the client's public key: \(error)") }
            session = ClientSession(owner: sender, key: key)
            output = .bytes(DBusBytes(key.publicKey))
        default:
            throw SecretErrors.notSupported("the algorithm \(algorithm) is not supported")
        }
        counter += 1
        let path = SecretPaths.sessionPrefix + "s\(counter)"
        sessions[path] = session
        return [.variant(output), .objectPath(path)]
    }

    func clientSession(_ path: String, sender: String) throws -> ClientSession {
        guard let s = sessions[path], s.owner == sender else { throw SecretErrors.noSession("no such session: open one with OpenSession") }
        return s
    }

    /// The plaintext of a secret a client sent, in guarded memory.
    func open(_ wire: WireSecret, _ session: ClientSession) throws -> SecretBytes {
        guard wire.value.count <= SecretServiceLimits.secretBytes + 16 else { throw DBusError.invalidArgs("a secret is at most 1 MiB") }
        if let key = session.key {
            do {
                return try wire.value.withUnsafeBytes { try key.decrypt(iv: wire.parameters.array, $0) }
            } catch {
                throw DBusError.invalidArgs("the secret could not be decrypted with the session's key")
            }
        }
        defer { wire.value.wipe() }
        return try wire.value.withUnsafeBytes { try SecretBytes(copying: $0) }
    }

    /// A secret for a client: encrypted under its session's key, or as is for `plain`.
    func seal(_ plain: borrowing SecretBytes, _ session: ClientSession, sessionPath: String, contentType: String) throws -> WireSecret {
        if let key = session.key {
            let (iv, ciphertext) = try plain.withUnsafeBytes { try key.encrypt($0) }
            return WireSecret(session: sessionPath, parameters: DBusBytes(iv), value: DBusBytes(ciphertext), contentType: contentType)
        }
        // Lent from guarded memory, not copied into GLib's: the box goes (wiped) with the reply.
        let box = LentSecret(try plain.duplicate())
        let lent = box.bytes.withUnsafeBytes { DBusBytes(lending: $0, owner: box) }
        return WireSecret(session: sessionPath, parameters: DBusBytes([]), value: lent, contentType: contentType)
    }

    func secret(_ c: Collection, id: String, session: ClientSession, sessionPath: String, sender: String) throws -> WireSecret {
        if c.location == nil {
            guard let m = memory.first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
            return try seal(m.secret, session, sessionPath: sessionPath, contentType: m.contentType)
        }
        let access = try unlockedAccess(c)
        guard let item = try items(c, access).first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
        if item.fingerprintLogin || approvalPerClient(c) {
            guard let client = clientIdentity(sender), let approved = approval(c, id: item.id, client: client) else {
                throw DBusError.accessDenied("\(item.name) needs a fresh finger match for this program")
            }
            return try seal(approved.bytes, session, sessionPath: sessionPath, contentType: item.contentType)
        }
        let plain = try access.releaseSecret(named: item.name, field: .password, command: "secret-service", freshMatch: nil)
        return try seal(plain, session, sessionPath: sessionPath, contentType: item.contentType)
    }

    // MARK: Per-program approval of fingerprint-login items

    /// A secret in guarded memory lent to GLib for one reply.
    final class LentSecret: @unchecked Sendable {
        let bytes: SecretBytes
        init(_ bytes: consuming SecretBytes) { self.bytes = bytes }
    }

    /// A secret in guarded memory, kept for one approved program: stamped with the unlock session
    /// it was released in and the item's overview then, and served only while both are the same.
    final class ApprovedSecret: @unchecked Sendable {
        let bytes: SecretBytes
        let session: SessionMark
        let stamp: ItemOverview
        init(_ bytes: consuming SecretBytes, session: SessionMark, stamp: ItemOverview) {
            self.bytes = bytes
            self.session = session
            self.stamp = stamp
        }
    }

    /// One unlock session of a vault: the agent's pid and the session's random identity
    /// (`SessionStatus.serial`), which a session opened again after a lock or an expiry does not
    /// share, however soon and with whatever timeout it was opened.
    struct SessionMark: Equatable, Sendable {
        var agent: Int32
        var serial: Int64
    }

    /// The unlock session of `location` now (the agent's `status`), nil without one or from an
    /// agent that names no session identity.
    static func sessionMark(_ location: VaultLocation, environment: [String: String]) -> SessionMark? {
        guard let client = AgentClient.connect(environment), let reply = try? client.send(.status),
              case .status(let pid, let sessions) = reply,
              let s = sessions.first(where: { $0.vault == location.databasePath && $0.servesCaller }),
              let serial = s.serial else { return nil }
        return SessionMark(agent: pid, serial: serial)
    }

    /// Per collection, per program (`executable|start time`), per item id: the secrets released to
    /// it after its own fresh match, kept while the collection's unlock session and the item stay
    /// the same (`approval(_:id:client:)`).
    var approvals: [String: [String: [String: ApprovedSecret]]] = [:]
    /// Per collection, per item id: the overview (no secret) the last listing read, what an
    /// approval's stamp is compared with.
    var stamps: [String: [String: ItemOverview]] = [:]

    /// What `client` was released of item `id`, when it still holds: released in the collection's
    /// current unlock session (another session, however it came, drops every approval of the
    /// collection) and of the item as it is now (an item changed anywhere, `vault edit` or a
    /// sync included, drops its approvals). Call after `items(c, _)` refreshed the stamps.
    func approval(_ c: Collection, id: String, client: String) -> ApprovedSecret? {
        guard let approved = approvals[c.element]?[client]?[id] else { return nil }
        guard let location = c.location else { return nil }
        let now = Self.sessionMark(location, environment: options.environment)
        guard now == approved.session else {
            keepApprovals(c, of: now)
            return nil
        }
        guard stamps[c.element]?[id] == approved.stamp else {
            forgetApprovals(c, id: id)
            return nil
        }
        return approved
    }
    /// The program of each unique name that was released something: when the last name of a
    /// program leaves the bus, what it was released is wiped (the process is gone; a new one of
    /// the same executable is another program).
    var programOf: [String: String] = [:]

    /// The program behind a unique name: its executable and its start time (`/proc/PID/stat`,
    /// field 22), so a later process with the same pid is another program. nil when unknown.
    func clientIdentity(_ sender: String) -> String? {
        guard let pid = try? connection.processID(of: sender),
              let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"),
              let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command's closing parenthesis: field 3 is the first, so start time (22) is the 20th.
        guard fields.count > 19 else { return nil }
        return exe + "|" + fields[19]
    }

    /// Whether the vault's setting asks a fresh match per client for every item of its collection
    /// (`vault settings --secret-service-approval per-client`), read at each release so a change
    /// counts at once; a row that cannot be read counts as per-client (the stricter).
    func approvalPerClient(_ c: Collection) -> Bool {
        guard let location = c.location else { return false }
        do { return try VaultStore.open(location).settings().secretServiceApproval == .perClient } catch { return true }
    }

    /// Keeps of the collection's approvals those released in `session` (nil: none, the
    /// collection is locked), wiping the others.
    func keepApprovals(_ c: Collection, of session: SessionMark?) {
        guard let programs = approvals[c.element] else { return }
        var kept: [String: [String: ApprovedSecret]] = [:]
        for (program, items) in programs {
            let still = items.filter { $0.value.session == session }
            if !still.isEmpty { kept[program] = still }
        }
        approvals[c.element] = kept.isEmpty ? nil : kept
    }

    /// Drops what programs were released of item `id` (its secret changed, or it went): the next
    /// read is a new release, with its own match.
    func forgetApprovals(_ c: Collection, id: String) {
        guard var programs = approvals[c.element] else { return }
        for program in programs.keys { programs[program]?[id] = nil }
        approvals[c.element] = programs
    }

    /// The item when it needs a match per program (fingerprint login on, or the collection's
    /// setting) and this program has not had it released yet.
    func needsApproval(_ c: Collection, id: String, sender: String) throws -> StoredItem? {
        guard c.location != nil, let access = try access(c) else {
            approvals[c.element] = nil
            return nil
        }
        guard let item = try items(c, access).first(where: { $0.id == id }), item.fingerprintLogin || approvalPerClient(c) else { return nil }
        if let client = clientIdentity(sender), approval(c, id: item.id, client: client) != nil { return nil }
        return item
    }

    /// Releases `items` to the program behind `sender` after a fresh match of its own (`vault get`
    /// of each, whose key authority asks for the finger and whose agent checks the token), on a
    /// thread of its own, one at a time like prompts; then answers `incoming` with `reply`, or
    /// with `AccessDenied` when no finger came.
    func approve(_ items: [(Collection, StoredItem)], sender: String, incoming: DBusIncoming,
                 reply: @escaping @Sendable (SecretServiceServer) throws -> [DBusValue]) {
        guard let client = clientIdentity(sender) else {
            incoming.fail(.accessDenied("the requesting program cannot be told apart (no process id)"))
            return
        }
        guard approvalsWaiting[sender, default: 0] < SecretServiceLimits.approvalsPerClient,
              touchesWaiting < SecretServiceLimits.waitingForTouch else {
            incoming.fail(.accessDenied("too many requests wait for a touch: try again when they are answered"))
            return
        }
        approvalsWaiting[sender, default: 0] += 1
        touchesWaiting += 1
        let options = self.options, queue = self.queue, connection = self.connection
        let program = ((client.split(separator: "|").first.map(String.init) ?? "a program") as NSString).lastPathComponent
        // The item as it was when the match was asked for: changed meanwhile, the release is
        // dropped at the next read (a new touch), never served as the new value.
        let work = items.map { (c: $0.0, name: $0.1.name, id: $0.1.id, flagged: $0.1.fingerprintLogin, stamp: stamps[$0.0.element]?[$0.1.id]) }
        Thread.detachNewThread { [weak self] in
            Self.unlockGate.lock()
            defer { Self.unlockGate.unlock() }
            var released: [(String, String, ApprovedSecret)] = []
            for w in work {
                guard let location = w.c.location else { continue }
                // The session before the release: one that changes meanwhile leaves this one stale.
                guard let stamp = w.stamp, let mark = Self.sessionMark(location, environment: options.environment) else { break }
                Self.notify(connection, sender: sender) { "\($0) asks for '\(w.name)' from the vault \(location.name): touch the fingerprint reader" }
                let reason = "\(program) asks for '\(w.name)' (Secret Service)"
                guard let secret = FreshRelease(options: options).password(of: w.name, in: location, reason: reason, forceMatch: !w.flagged) else { break }
                released.append((w.c.element, w.id, ApprovedSecret(secret, session: mark, stamp: stamp)))
            }
            let complete = released.count == work.count
            let done = released
            queue.async { [weak self] in
                guard let self else { return }
                self.approvalsWaiting[sender, default: 1] -= 1
                if self.approvalsWaiting[sender] == 0 { self.approvalsWaiting[sender] = nil }
                self.touchesWaiting -= 1
                for (element, id, secret) in done { self.approvals[element, default: [:]][client, default: [:]][id] = secret }
                if !done.isEmpty { self.programOf[sender] = client }
                guard complete else {
                    incoming.fail(.accessDenied("no fresh finger match: the secret was not released"))
                    return
                }
                do { incoming.reply(try reply(self)) } catch let e as DBusError { incoming.fail(e) } catch { incoming.fail(.failed("\(error)")) }
            }
        }
    }

    /// A secret's bytes as the item's password (vault keeps secrets as text); wipes `plain`.
    static func text(_ plain: inout SecretBytes) throws -> String {
        let s: String? = plain.withUnsafeBytes { String(validating: $0.bindMemory(to: UInt8.self), as: UTF8.self) }
        plain.withUnsafeMutableBytes { _ = $0.initializeMemory(as: UInt8.self, repeating: 0) }
        guard let s else { throw SecretErrors.notSupported("vault keeps a secret as UTF-8 text, and this one is not") }
        return s
    }

    // MARK: Collections and items

    func collection(element: String) -> Collection? { collections.first { $0.element == element } }

    func collection(_ object: SecretObject) throws -> Collection {
        switch object {
        case .collection(let e): if let c = collection(element: e) { return c }
        case .alias(let a): if let e = aliases[a], let c = collection(element: e) { return c }
        default: break
        }
        throw SecretErrors.noSuchObject("no such collection")
    }

    func collection(_ ref: SecretObject.CollectionRef) throws -> Collection {
        switch ref {
        case .element(let e): return try collection(SecretObject.collection(e))
        case .alias(let a): return try collection(SecretObject.alias(a))
        }
    }

    func collection(of path: String) throws -> Collection {
        let object = SecretObject(path: path)
        if case .item(let ref, _) = object { return try collection(ref) }
        return try collection(object)
    }

    /// The vault's unlock session, or nil when it has none (the collection is locked). What
    /// programs were released goes as soon as a call sees the session ended or replaced.
    func access(_ c: Collection) throws -> SessionAccess? {
        guard let location = c.location else { return nil }
        let session: SessionAccess?
        do {
            session = try SessionAccess.open(location, environment: options.environment)
        } catch VaultError.sessionInvalid {
            session = nil
        }
        if approvals[c.element] != nil {
            keepApprovals(c, of: session == nil ? nil : Self.sessionMark(location, environment: options.environment))
        }
        return session
    }

    func unlockedAccess(_ c: Collection) throws -> SessionAccess {
        guard let a = try access(c) else {
            approvals[c.element] = nil
            throw SecretErrors.isLocked("the collection \(c.label) is locked: unlock it (vault unlock --vault \(c.label))") }
        return a
    }

    func isLocked(_ c: Collection) -> Bool {
        guard c.location != nil else { return false }
        return ((try? access(c)) ?? nil) == nil
    }

    /// The Secret Service items of an unlocked vault, read from the session's overview index
    /// (no secret opened); refreshes the keyed attribute index.
    func items(_ c: Collection, _ access: SessionAccess) throws -> [StoredItem] {
        var out: [StoredItem] = []
        var overviews: [String: ItemOverview] = [:]
        try access.forEachOverview(matching: nil) { entry in
            if case .item(let o) = entry, let s = StoredItem(o.item) {
                out.append(s)
                overviews[s.id] = o
            }
        }
        stamps[c.element] = overviews
        var fresh: [String: Set<[UInt8]>] = [:]
        for s in out { fresh[s.id] = Set(s.attributes.compactMap { try? mac($0) }) }
        index[c.element] = fresh
        return out
    }

    func mac(_ a: SecretRequest.Attribute) throws -> [UInt8] {
        try KeyedHash.hash(Array(a.name.utf8) + [0] + Array(a.value.utf8), key: indexKey)
    }

    /// The matches of `attributes` in `c`: unlocked ones with their items, locked ones from the index.
    func search(_ c: Collection, _ attributes: [SecretRequest.Attribute]) throws -> (unlocked: [String], locked: [String]) {
        if c.location == nil {
            return (memory.filter { m in attributes.allSatisfy { m.attributes.contains($0) } }.map { c.path + "/" + $0.id }, [])
        }
        if let access = try access(c) {
            return (try items(c, access).filter { $0.matches(attributes) }.map { c.path + "/" + $0.id }, [])
        }
        let wanted = Set(try attributes.map { try mac($0) })
        let found = (index[c.element] ?? [:]).filter { wanted.isSubset(of: $0.value) }.keys.sorted()
        return ([], found.map { c.path + "/" + $0 })
    }

    func createItem(_ c: Collection, _ properties: [DBusEntry], _ wire: WireSecret, replace: Bool, sender: String) throws -> [DBusValue] {
        let session = try clientSession(wire.session, sender: sender)
        var label = "", attributes: [SecretRequest.Attribute] = []
        for p in properties {
            switch p.key.text {
            case "org.freedesktop.Secret.Item.Label":
                guard let l = p.value.unboxed.text, l.utf8.count <= 4096 else { throw DBusError.invalidArgs("Label is a string of at most 4096 bytes") }
                label = l
            case "org.freedesktop.Secret.Item.Attributes":
                attributes = try SecretRequest.attributes(p.value.unboxed)
            default: break
            }
        }
        var plain = try open(wire, session)
        let sortedAttributes = attributes.sorted { $0.name < $1.name }
        if c.location == nil {
            if replace, let m = memory.first(where: { $0.attributes.sorted(by: { $0.name < $1.name }) == sortedAttributes }) {
                m.secret = plain
                m.label = label
                m.contentType = wire.contentType
                m.modified = unixNow()
                emit(c.path, SecretRequest.collection, "ItemChanged", [.objectPath(c.path + "/" + m.id)])
                return [.objectPath(c.path + "/" + m.id), .objectPath(SecretPaths.none)]
            }
            guard memory.count < SecretServiceLimits.memoryItems else { throw DBusError.accessDenied("the session collection is full") }
            let m = MemoryItem(id: StoredItem.hex(randomBytes(8)), label: label, attributes: sortedAttributes, contentType: wire.contentType, secret: plain)
            memory.append(m)
            emit(c.path, SecretRequest.collection, "ItemCreated", [.objectPath(c.path + "/" + m.id)])
            return [.objectPath(c.path + "/" + m.id), .objectPath(SecretPaths.none)]
        }
        let access = try unlockedAccess(c)
        let password = try Self.text(&plain)
        if replace, let existing = try items(c, access).first(where: { $0.attributes == sortedAttributes }) {
            var change = existing.change(label: label)
            change.password = password
            change.setFields.append(CustomField(name: StoredItem.contentTypeField, value: wire.contentType))
            try access.update(existing.name, change)
            forgetApprovals(c, id: existing.id)
            emit(c.path, SecretRequest.collection, "ItemChanged", [.objectPath(c.path + "/" + existing.id)])
            return [.objectPath(c.path + "/" + existing.id), .objectPath(SecretPaths.none)]
        }
        var item = try StoredItem.make(label: label, attributes: sortedAttributes, contentType: wire.contentType)
        item.password = password
        try access.add(item, replace: false)
        guard let stored = StoredItem(item) else { throw DBusError.failed("the item was not stored") }
        index[c.element, default: [:]][stored.id] = Set(sortedAttributes.compactMap { try? mac($0) })
        emit(c.path, SecretRequest.collection, "ItemCreated", [.objectPath(c.path + "/" + stored.id)])
        return [.objectPath(c.path + "/" + stored.id), .objectPath(SecretPaths.none)]
    }

    // MARK: Properties

    struct Property {
        var interface: String
        var name: String
        var value: DBusValue
    }

    func properties(of object: SecretObject) throws -> [Property] {
        switch object {
        case .service:
            return [Property(interface: SecretRequest.service, name: "Collections", value: .objectPaths(collections.map(\.path)))]
        case .collection, .alias:
            let c = try collection(object)
            let locked = isLocked(c)
            var ids: [String] = []
            if c.location == nil { ids = memory.map(\.id) } else if let access = try access(c) {
                ids = try items(c, access).map(\.id)
            } else {
                ids = (index[c.element] ?? [:]).keys.sorted()
            }
            let i = SecretRequest.collection
            return [Property(interface: i, name: "Items", value: .objectPaths(ids.map { c.path + "/" + $0 })),
                    Property(interface: i, name: "Label", value: .string(c.label)),
                    Property(interface: i, name: "Locked", value: .boolean(locked)),
                    Property(interface: i, name: "Created", value: .uint64(UInt64(max(0, c.created)))),
                    Property(interface: i, name: "Modified", value: .uint64(UInt64(max(0, c.created))))]
        case .item(let ref, let id):
            let c = try collection(ref)
            let i = SecretRequest.item
            if c.location == nil {
                guard let m = memory.first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
                return itemProperties(label: m.label, attributes: m.attributes, locked: false, created: m.created, modified: m.modified, i)
            }
            guard let access = try access(c) else {
                guard index[c.element]?[id] != nil else { throw SecretErrors.noSuchObject("no such item") }
                return [Property(interface: i, name: "Locked", value: .boolean(true)),
                        Property(interface: i, name: "Label", value: .string("")),
                        Property(interface: i, name: "Attributes", value: .stringDictionary([])),
                        Property(interface: i, name: "Created", value: .uint64(0)),
                        Property(interface: i, name: "Modified", value: .uint64(0))]
            }
            guard let s = try items(c, access).first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
            return itemProperties(label: s.label, attributes: s.attributes, locked: false, created: s.created, modified: s.modified, i)
        case .session, .prompt:
            return []
        case .unknown:
            throw DBusError.unknownObject("no such object")
        }
    }

    func itemProperties(label: String, attributes: [SecretRequest.Attribute], locked: Bool, created: Int64, modified: Int64,
                        _ i: String) -> [Property] {
        [Property(interface: i, name: "Locked", value: .boolean(locked)),
         Property(interface: i, name: "Label", value: .string(label)),
         Property(interface: i, name: "Attributes", value: .stringDictionary(attributes.map { ($0.name, $0.value) })),
         Property(interface: i, name: "Created", value: .uint64(UInt64(max(0, created)))),
         Property(interface: i, name: "Modified", value: .uint64(UInt64(max(0, modified))))]
    }

    func setProperty(_ object: SecretObject, _ name: String, _ value: DBusValue) throws -> [DBusValue] {
        guard case .item(let ref, let id) = object, name == "Label" || name == "Attributes" else {
            throw DBusError.accessDenied("the property \(name) cannot be set")
        }
        let c = try collection(ref)
        var label: String?, attributes: [SecretRequest.Attribute]?
        if name == "Label" {
            guard let l = value.text, l.utf8.count <= 4096 else { throw DBusError.invalidArgs("Label is a string") }
            label = l
        } else {
            attributes = try SecretRequest.attributes(value).sorted { $0.name < $1.name }
        }
        if c.location == nil {
            guard let m = memory.first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
            if let label { m.label = label }
            if let attributes { m.attributes = attributes }
        } else {
            let access = try unlockedAccess(c)
            guard let s = try items(c, access).first(where: { $0.id == id }) else { throw SecretErrors.noSuchObject("no such item") }
            try access.update(s.name, s.change(label: label, attributes: attributes))
        }
        let path = c.path + "/" + id
        emit(path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
             [.string(SecretRequest.item), .properties([(name, value)]), .array(element: "s", [])])
        emit(c.path, SecretRequest.collection, "ItemChanged", [.objectPath(path)])
        return []
    }

    func children(of path: String) -> [String] {
        switch SecretObject(path: path) {
        case .service: return ["collection", "aliases", "session", "prompt"]
        default:
            if path == SecretPaths.base + "/collection" { return collections.map(\.element) }
            if path == SecretPaths.base + "/aliases" { return aliases.keys.sorted() }
            if path == SecretPaths.base + "/session" { return sessions.keys.sorted().map { String($0.dropFirst(SecretPaths.sessionPrefix.count)) } }
            if path == SecretPaths.base + "/prompt" { return prompts.keys.sorted() }
            return []
        }
    }

    func emit(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue]) {
        try? connection.emit(path, interface, member, arguments)
    }

    // MARK: New collections

    /// Vaults made through `CreateCollection` since the service started.
    var createdCount = 0

    /// `CreateCollection` of a label no collection has: a prompt that makes a new vault named
    /// from the label (its passcode asked twice through pinentry, its recovery key shown there),
    /// unlocks it and serves it; refused at once when no pinentry can ask.
    func createCollection(label: String, alias: String, sender: String) throws -> [DBusValue] {
        guard options.pinentry != nil else {
            throw SecretErrors.notSupported("a new collection is a new vault, whose passcode is asked through pinentry, and this service has none: start it with --pinentry PROGRAM, or make the vault with 'vault init --vault NAME' and serve it with 'vault secret-service --vault NAME'")
        }
        guard label.utf8.count <= 4096, alias.utf8.count <= 64 else { throw DBusError.invalidArgs("a label is at most 4096 bytes, an alias 64") }
        guard alias.isEmpty || aliases.count < SecretServiceLimits.aliases + 2 else { throw DBusError.limitsExceeded("at most \(SecretServiceLimits.aliases) aliases") }
        // Made, and asked for: a prompt counts from CreateCollection on, started or not.
        guard createdCount + prompts.values.filter({ $0.creating != nil && !$0.started }).count < SecretServiceLimits.createdCollections else {
            throw DBusError.limitsExceeded("at most \(SecretServiceLimits.createdCollections) collections are made while the service runs")
        }
        guard prompts.values.filter({ $0.owner == sender }).count < SecretServiceLimits.promptsPerClient else {
            throw DBusError.limitsExceeded("too many pending prompts")
        }
        let location = try newVaultLocation(label)
        counter += 1
        let p = Prompt(id: "p\(counter)", owner: sender, vaults: [], objects: [],
                       creating: NewCollection(location: location, label: label, alias: alias))
        prompts[p.id] = p
        return [.objectPath(SecretPaths.none), .objectPath(SecretPaths.promptPrefix + p.id)]
    }

    /// The vault a label names: its letters, digits, `.`, `_` and `-` (others as `-`, at most
    /// 48), `collection` when none is left, and `-2`, `-3`... while a vault of that name exists
    /// or a prompt is making one: an existing vault is never taken over by a client's label.
    func newVaultLocation(_ label: String) throws -> VaultLocation {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        var base = String(label.prefix(48).map { allowed.contains($0) ? $0 : "-" })
        while base.hasPrefix(".") || base.hasPrefix("-") { base.removeFirst() }
        if base.isEmpty { base = "collection" }
        let taken = Set(collections.map(\.label) + prompts.values.compactMap { $0.creating?.location.name })
        for n in 1...100 {
            let name = n == 1 ? base : "\(base)-\(n)"
            let location = try VaultLocation(name: name, environment: options.environment)
            if !taken.contains(name) && !location.exists { return location }
        }
        throw DBusError.limitsExceeded("no free vault name for the label")
    }

    /// Runs a `CreateCollection` prompt on a thread of its own (one at a time with unlocks: one
    /// person at one pinentry).
    func runCreation(_ p: Prompt) {
        p.started = true
        // Checked again as it runs (this prompt no longer counts as pending).
        guard let new = p.creating, touchesWaiting < SecretServiceLimits.waitingForTouch,
              createdCount < SecretServiceLimits.createdCollections else {
            finish(p, dismissed: true)
            return
        }
        touchesWaiting += 1
        createdCount += 1
        let options = self.options, queue = self.queue
        Thread.detachNewThread { [weak self] in
            Self.unlockGate.lock()
            defer { Self.unlockGate.unlock() }
            let ok = UnlockRunner(options: options, prompt: p, queue: queue).create(new.location)
            queue.async { [weak self] in
                guard let self else { return }
                self.touchesWaiting -= 1
                if ok && !p.finished { p.created = self.added(new) }
                self.finish(p, dismissed: !ok || p.created == nil)
            }
        }
    }

    /// Serves the vault just made as a collection: `CollectionCreated`, and `Collections` changed.
    func added(_ new: NewCollection) -> Collection {
        var element = SecretPaths.element(new.location.name)
        while collection(element: element) != nil { element += "_" }
        let c = Collection(element: element, label: new.location.name, location: new.location)
        collections.insert(c, at: collections.count - 1)
        if !new.alias.isEmpty { aliases[new.alias] = c.element }
        emit(SecretPaths.base, SecretRequest.service, "CollectionCreated", [.objectPath(c.path)])
        emit(SecretPaths.base, "org.freedesktop.DBus.Properties", "PropertiesChanged",
             [.string(SecretRequest.service), .properties([("Collections", .objectPaths(collections.map(\.path)))]), .array(element: "s", [])])
        return c
    }

    // MARK: Unlock and prompts

    func unlock(_ objects: [String], sender: String) throws -> [DBusValue] {
        var unlocked: [String] = [], pending: [String] = []
        var vaults: [Collection] = []
        for path in objects {
            guard let c = try? collection(of: path) else { continue }
            if !isLocked(c) {
                unlocked.append(path)
            } else {
                pending.append(path)
                if !vaults.contains(where: { $0 === c }) { vaults.append(c) }
            }
        }
        guard !pending.isEmpty else { return [.objectPaths(unlocked), .objectPath(SecretPaths.none)] }
        guard prompts.values.filter({ $0.owner == sender }).count < SecretServiceLimits.promptsPerClient else {
            throw DBusError.accessDenied("too many pending prompts")
        }
        counter += 1
        let p = Prompt(id: "p\(counter)", owner: sender, vaults: vaults, objects: pending)
        prompts[p.id] = p
        return [.objectPaths(unlocked), .objectPath(SecretPaths.promptPrefix + p.id)]
    }

    /// Runs the prompt's unlocks on a thread of their own: `vault unlock` of each vault (a finger
    /// through the key authority, with its tries, lockout and rules), then the passcode through
    /// pinentry when no finger did it and a pinentry is set.
    func run(_ p: Prompt) {
        p.started = true
        guard touchesWaiting < SecretServiceLimits.waitingForTouch else {
            finish(p, dismissed: true)
            return
        }
        touchesWaiting += 1
        let options = self.options
        let queue = self.queue
        let connection = self.connection
        Thread.detachNewThread { [weak self] in
            // One unlock at a time (one reader, one person): a prompt that waited finds its vault
            // unlocked by the touch that answered the one before, and asks nothing.
            Self.unlockGate.lock()
            defer { Self.unlockGate.unlock() }
            let runner = UnlockRunner(options: options, prompt: p, queue: queue)
            let waiting = p.vaults.filter { c in c.location.map { !runner.isUnlocked($0) } ?? false }
            if !waiting.isEmpty && !runner.isCancelled {
                Self.notify(connection, sender: p.owner) { "\($0) asks to unlock the vault \(waiting.map(\.label).joined(separator: ", ")): touch the fingerprint reader" }
            }
            let ok = p.vaults.allSatisfy { c in c.location.map { runner.isUnlocked($0) || (!runner.isCancelled && runner.unlock($0)) } ?? true }
            queue.async { [weak self] in
                self?.touchesWaiting -= 1
                self?.finish(p, dismissed: !ok)
            }
        }
    }

    static let unlockGate = NSLock()

    /// Tells the desktop a touch is awaited (`org.freedesktop.Notifications.Notify`), when a
    /// notification server owns its name; nothing otherwise (no activation, at most 2 s).
    static func notify(_ connection: DBusConnection, sender: String, _ text: (String) -> String) {
        guard (try? connection.owner(of: DesktopNotification.name)) ?? nil != nil else { return }
        let who = (try? connection.processID(of: sender)).flatMap { pid in
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        }.map { ($0 as NSString).lastPathComponent } ?? "a program"
        DesktopNotification.send(connection, summary: "Unlock vault", body: text(who))
    }

    /// Ends a prompt: `Completed` once, whatever ended it (success, failure, Dismiss, the client
    /// leaving); a running unlock is stopped.
    func finish(_ p: Prompt, dismissed: Bool) {
        guard !p.finished else { return }
        p.finished = true
        prompts[p.id] = nil
        if let child = p.child, child.isRunning { child.terminate() }
        // CreateCollection's prompt gives the collection (`o`), Unlock's the objects unlocked (`ao`).
        let result: DBusValue = p.creating != nil ? .objectPath(p.created.map(\.path) ?? SecretPaths.none)
            : .objectPaths(dismissed ? [] : p.objects)
        if !dismissed { for c in p.vaults { lockChanged(c, locked: false) } }
        emit(SecretPaths.promptPrefix + p.id, SecretRequest.promptInterface, "Completed", [.boolean(dismissed), .variant(result)])
    }

    /// Tells clients that cache properties (libsecret's proxies) that a collection's `Locked`
    /// changed through the service (a `vault lock` from a terminal is seen at the next call).
    func lockChanged(_ c: Collection, locked: Bool) {
        emit(c.path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
             [.string(SecretRequest.collection), .properties([("Locked", .boolean(locked))]), .array(element: "s", [])])
        emit(SecretPaths.base, SecretRequest.service, "CollectionChanged", [.objectPath(c.path)])
    }
}

/// A release after a fresh match: `vault get NAME --field password` of the vault, whose own
/// paths ask the key authority for the finger, get the agent's nonce and send the token; the
/// password comes back on a pipe, read straight into guarded memory.
struct FreshRelease {
    let options: SecretServiceOptions

    /// `forceMatch`: the item's switch is off and the collection's setting asks the match
    /// (`--fresh-match`).
    func password(of name: String, in location: VaultLocation, reason: String, forceMatch: Bool = false) -> SecretBytes? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: options.vaultBinary)
        process.arguments = ["get", name, "--vault", location.name, "--field", "password", "--no-input",
                             "--scan-timeout", String(options.scanTimeout), "--reason", reason] + (forceMatch ? ["--fresh-match"] : [])
        process.environment = options.environment
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.standardError
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        try? out.fileHandleForWriting.close()
        var input = FileDescriptor(owning: out.fileHandleForReading.fileDescriptor)
        defer { _ = input.take() }
        guard let buffer = try? SecretBytes(zeroed: SecretServiceLimits.secretBytes + 2) else { return nil }
        var used = 0
        while used < buffer.count {
            let n = buffer.withUnsafeMutableBytes { b in (try? input.read(into: UnsafeMutableRawBufferPointer(rebasing: b[used...]))) ?? 0 }
            if n <= 0 { break }
            used += n
        }
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0, used <= SecretServiceLimits.secretBytes + 1 else { return nil }
        // `get --field` ends the value with one newline.
        let length = buffer.withUnsafeBytes { b in used > 0 && b[used - 1] == 0x0a ? used - 1 : used }
        return try? buffer.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<length])) }
    }
}

/// One prompt's unlock of one vault, on the prompt's thread.
struct UnlockRunner {
    let options: SecretServiceOptions
    let prompt: SecretServiceServer.Prompt
    let queue: DispatchQueue?

    /// Whether the vault's unlock session is open now.
    func isUnlocked(_ location: VaultLocation) -> Bool {
        ((try? SessionAccess.open(location, environment: options.environment)) ?? nil) != nil
    }

    /// Whether the prompt ended (dismissed, its client gone) while this one waited.
    var isCancelled: Bool { queue?.sync { prompt.finished } ?? false }

    func unlock(_ location: VaultLocation) -> Bool {
        let reason = "a program asks to unlock the vault \(location.name) (Secret Service)"
        // `--scope user`: the session serves every process of the user (the service and its
        // clients have no terminal of the unlock's), as a session the person opens for them must.
        if run(["unlock", "--vault", location.name, "--scope", "user", "--no-input", "--scan-timeout", String(options.scanTimeout),
                "--reason", reason], passcode: nil) { return true }
        guard let pinentry = options.pinentry, let pin = Pinentry(program: pinentry, environment: options.environment).passcode(description: reason) else { return false }
        return pin.withUnsafeBytes { run(["unlock", "--vault", location.name, "--scope", "user", "--passcode", "--passcode-fd", "0"], passcode: $0) }
    }

    /// Makes the vault of a `CreateCollection`: the new passcode asked twice through pinentry,
    /// `vault init --no-fingerprint --json` with it on standard input, the recovery key it
    /// prints (read into guarded memory) shown through pinentry, then `vault unlock` with it.
    func create(_ location: VaultLocation) -> Bool {
        guard let program = options.pinentry, !isCancelled else { return false }
        let pinentry = Pinentry(program: program, environment: options.environment)
        guard let first = pinentry.passcode(description: "a program asks for a new collection: choose the passcode of the new vault \(location.name)"),
              !isCancelled,
              let second = pinentry.passcode(description: "the passcode of the new vault \(location.name) again"),
              first.isEqual(to: second) else { return false }
        // The folder is this call's to remove only when it did not exist before `vault init`.
        let fresh = !FileManager.default.fileExists(atPath: location.folder)
        guard let key = first.withUnsafeBytes({ initVault(location, passcode: $0) }) else { return false }
        // The recovery key is shown once, as `vault init` shows it on a terminal. Not shown (the
        // pinentry failed, was cancelled, or the prompt was dismissed meanwhile): the vault whose
        // recovery key nobody saw is removed, not served.
        guard pinentry.show(prefix: "The recovery key of the new vault \(location.name) (shown once; write it down and keep it apart from this machine): ", key),
              !isCancelled else {
            if fresh { try? FileManager.default.removeItem(atPath: location.folder) }
            return false
        }
        return first.withUnsafeBytes { run(["unlock", "--vault", location.name, "--scope", "user", "--passcode", "--passcode-fd", "0"], passcode: $0) }
    }

    /// `vault init` of `location` with `passcode` on its standard input; the recovery key from
    /// its JSON, in guarded memory, or nil when it failed.
    func initVault(_ location: VaultLocation, passcode: UnsafeRawBufferPointer) -> SecretBytes? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: options.vaultBinary)
        process.arguments = ["init", "--vault", location.name, "--no-fingerprint", "--json", "--no-input", "--passcode-fd", "0"]
        process.environment = options.environment
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        var cancelled = false
        queue?.sync {
            cancelled = prompt.finished
            if !cancelled { prompt.child = process }
        }
        guard !cancelled else { return nil }
        do { try process.run() } catch { return nil }
        try? output.fileHandleForWriting.close()
        var toChild = FileDescriptor(owning: input.fileHandleForWriting.fileDescriptor)
        try? toChild.writeAll(passcode)
        try? toChild.writeAll([0x0a])
        _ = toChild.take()
        try? input.fileHandleForWriting.close()
        var fromChild = FileDescriptor(owning: output.fileHandleForReading.fileDescriptor)
        defer { _ = fromChild.take() }
        guard let buffer = try? SecretBytes(zeroed: 4096) else { return nil }
        var used = 0
        while used < buffer.count {
            let n = buffer.withUnsafeMutableBytes { b in (try? fromChild.read(into: UnsafeMutableRawBufferPointer(rebasing: b[used...]))) ?? 0 }
            if n <= 0 { break }
            used += n
        }
        process.waitUntilExit()
        queue?.sync { prompt.child = nil }
        guard process.terminationReason == .exit, process.terminationStatus == 0 else { return nil }
        // {"path":...,"recovery_key":"XXXX-...","vault":...}: the key's characters are letters,
        // digits and dashes, so the value ends at the next quote.
        let marker = Array("\"recovery_key\":\"".utf8)
        return buffer.withUnsafeBytes { b -> SecretBytes? in
            guard used >= marker.count else { return nil }
            for start in 0...(used - marker.count) where b[start] == marker[0] && (0..<marker.count).allSatisfy({ b[start + $0] == marker[$0] }) {
                let from = start + marker.count
                guard let end = (from..<used).first(where: { b[$0] == 0x22 }) else { return nil }
                return try? SecretBytes(copying: UnsafeRawBufferPointer(rebasing: b[from..<end]))
            }
            return nil
        }
    }

    /// Runs `vault ARGS` (its stderr is ours, its stdout discarded), the passcode on its standard
    /// input when given (written from guarded memory); true when it succeeded.
    func run(_ arguments: [String], passcode: UnsafeRawBufferPointer?) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: options.vaultBinary)
        process.arguments = arguments
        process.environment = options.environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.standardError
        let pipe = Pipe()
        process.standardInput = passcode == nil ? FileHandle.nullDevice : pipe
        var cancelled = false
        queue?.sync {
            cancelled = prompt.finished
            if !cancelled { prompt.child = process }
        }
        guard !cancelled else { return false }
        do { try process.run() } catch { return false }
        if let passcode {
            var fd = FileDescriptor(owning: pipe.fileHandleForWriting.fileDescriptor)
            try? fd.writeAll(passcode)
            try? fd.writeAll([0x0a])
            _ = fd.take()
            try? pipe.fileHandleForWriting.close()
        }
        process.waitUntilExit()
        queue?.sync { prompt.child = nil }
        return process.terminationReason == .exit && process.terminationStatus == 0
    }
}
