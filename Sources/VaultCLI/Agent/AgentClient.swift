import Foundation
import VaultKit

/// A connection to the agent. Refuses an agent whose socket folder is not private or that runs
/// as another uid.
final class AgentClient {
    let fd: Int32

    private init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    /// Connects to the socket, or nil when nothing listens there.
    static func connectRaw(_ path: String) -> Int32? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { close(fd); return nil }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in for (i, b) in bytes.enumerated() { p[i] = b } }
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        if rc != 0 { close(fd); return nil }
        return fd
    }

    /// The running agent of this user, or nil.
    static func connect(_ env: [String: String]) -> AgentClient? {
        let path = AgentWire.socketPath(env)
        var st = stat()
        let folder = AgentWire.folder(env)
        guard lstat(folder, &st) == 0, st.st_uid == getuid(), st.st_mode & 0o077 == 0 else { return nil }
        guard let fd = connectRaw(path) else { return nil }
        guard let peer = AgentWire.peer(fd), peer.uid == getuid() else { close(fd); return nil }
        return AgentClient(fd: fd)
    }

    /// Sends a request and returns the response; a failed response becomes a thrown `VaultError`
    /// (code 0 -- "no session" -- included, for the caller to handle).
    func request(_ header: [String: Any], tail: [UInt8] = []) throws -> [String: Any] {
        var frame = AgentWire.frame(header, tail: tail)
        defer { AgentWire.wipe(&frame) }
        guard AgentWire.writeAll(fd, frame), let body = AgentWire.readFrame(fd, limit: AgentWire.maxResponse),
              let (response, _) = AgentWire.parse(body: body[...]) else {
            throw VaultError.sessionInvalid("agent stopped answering")
        }
        if response["ok"] as? Bool == true { return response }
        let code = Int32(response["code"] as? Int ?? 1)
        throw VaultError.relayed(code: code, message: response["message"] as? String ?? "agent error", hint: response["hint"] as? String)
    }

    /// Starts a detached agent (`vault agent`) with an empty environment and waits for it.
    static func ensureRunning(_ env: [String: String]) throws -> AgentClient {
        if let c = connect(env) { return c }
        let folder = AgentWire.folder(env)
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        var st = stat()
        guard lstat(folder, &st) == 0, st.st_uid == getuid(), st.st_mode & 0o077 == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw VaultError.insecurePermissions(path: folder, isDirectory: true)
        }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setflags(&attr, Int16(0x80)) // POSIX_SPAWN_SETSID: no controlling terminal
        let args = [exe, "agent", "--socket", AgentWire.socketPath(env), "--exit-idle", "600"]
        let argv = args.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = [nil]
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, exe, &actions, &attr, argv, envp)
        argv.forEach { free($0) }
        guard rc == 0 else { throw VaultError.failure("could not start the agent: \(String(cString: strerror(rc)))") }
        // The agent is not our child to wait for: a reaper thread would outlive us anyway, so let
        // init adopt it once we exit.
        for _ in 0..<300 {
            if let c = connect(env) { return c }
            usleep(10_000)
        }
        throw VaultError.failure("the agent did not start", hint: "run 'vault agent' in the foreground to see why")
    }
}

/// The vault as served by the unlock session's agent.
final class SessionAccess: VaultAccess {
    let client: AgentClient
    let location: VaultLocation
    var vaultName: String { location.name }
    private var key: String { location.databasePath }

    init(client: AgentClient, location: VaultLocation) {
        self.client = client
        self.location = location
    }

    /// The session of `location`, or nil when none is open. An ended session answers 19 to a
    /// script (`--no-input` or no terminal); a person at a terminal authenticates again instead.
    static func connect(_ location: VaultLocation, _ inv: Invocation, _ ctx: CommandContext) throws -> (any VaultAccess)? {
        if inv.has("--passcode") || inv.has("--passcode-fd") { return nil }
        guard let client = AgentClient.connect(ctx.environment) else { return nil }
        let access = SessionAccess(client: client, location: location)
        do {
            _ = try client.request(["op": "contains", "vault": location.databasePath, "name": "-"])
            return access
        } catch VaultError.relayed(code: 0, _, _) {
            return nil
        } catch let e as VaultError where e.exitCode == 19 {
            if !inv.noInput && ctx.terminal.isAvailable {
                ctx.say("vault: the unlock session \(e.message); authenticating again")
                return nil
            }
            throw VaultError.sessionInvalid(e.message.hasPrefix("the unlock session ") ? String(e.message.dropFirst(19)) : e.message)
        }
    }

    func call(_ header: [String: Any]) throws -> [String: Any] {
        var h = header
        h["vault"] = key
        do {
            return try client.request(h)
        } catch VaultError.relayed(code: 0, _, _) {
            throw VaultError.sessionInvalid("was closed")
        }
    }

    func overview(named name: String) throws -> ItemOverview { ItemOverview(try ItemWire.decode(try call(["op": "item", "name": name])["item"])) }

    func release(named name: String, fields: [String], command: String) throws -> Item {
        let item = try ItemWire.decode(try call(["op": "item", "name": name])["item"])
        for field in fields { _ = try call(["op": "release", "item": item.name, "field": field, "command": command]) }
        return item
    }

    func allItems() throws -> [ItemEntry] {
        let r = try call(["op": "list"])
        let items = try (r["items"] as? [Any] ?? []).map { ItemEntry.item(try ItemWire.decode($0)) }
        return items + (r["damaged"] as? [String] ?? []).map { ItemEntry.damaged(rowID: $0) }
    }

    func releaseAll(command: String) throws -> [ItemEntry] {
        let entries = try allItems().map { e -> ItemEntry in
            guard case .item(let i) = e else { return e }
            return .item(try ItemWire.decode(try call(["op": "item", "name": i.name])["item"]))
        }
        _ = try call(["op": "release", "item": "*", "field": "all", "command": command])
        return entries
    }

    func contains(_ name: String) throws -> Bool { try call(["op": "contains", "name": name])["contains"] as? Bool ?? false }

    func add(_ item: Item, replace: Bool) throws { _ = try call(["op": "add", "item": ItemWire.encode(item), "replace": replace]) }

    func add(contentsOf items: [Item], replace: Bool) throws -> Int {
        for i in items { try add(i, replace: replace) }
        return items.count
    }

    func update(_ name: String, _ change: ItemChange) throws {
        var item = try ItemWire.decode(try call(["op": "item", "name": name])["item"])
        change.apply(to: &item)
        item.modified = unixNow()
        _ = try call(["op": "put", "item": ItemWire.encode(item), "name": name])
    }

    func remove(_ name: String) throws { _ = try call(["op": "remove", "name": name]) }

    func auditRecords(limit: Int?) throws -> [Result<AuditRecord, VaultError>] {
        var h: [String: Any] = ["op": "audit"]
        if let limit { h["limit"] = limit }
        let r = try call(h)
        var out: [Result<AuditRecord, VaultError>] = try (r["records"] as? [Any] ?? []).map {
            let data = try JSONSerialization.data(withJSONObject: $0)
            return .success(try JSONDecoder().decode(AuditRecord.self, from: data))
        }
        for _ in 0..<(r["damaged"] as? Int ?? 0) { out.append(.failure(.corrupt("audit record failed authentication"))) }
        return out
    }
}
