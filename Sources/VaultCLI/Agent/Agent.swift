import Foundation
import VaultKit

/// prctl(2) is variadic in C, which Swift cannot call; this binds the symbol with a fixed prototype
/// (all integer arguments, valid for the Linux calling conventions Swift runs on).
@_silgen_name("prctl")
private func prctl5(_ option: Int32, _ a2: UInt, _ a3: UInt, _ a4: UInt, _ a5: UInt) -> Int32

/// One vault's unlock session inside the agent.
final class Session {
    let location: VaultLocation
    let vault: UnlockedVault
    let slotSequence: Int64
    let started: Double
    var lastUse: Double
    let idle: Double
    let hardLimit: Double

    init(location: VaultLocation, vault: UnlockedVault, slotSequence: Int64, idle: Double, hardLimit: Double, now: Double) {
        self.location = location
        self.vault = vault
        self.slotSequence = slotSequence
        started = now
        lastUse = now
        self.idle = idle
        self.hardLimit = hardLimit
    }

    /// Why the session is over, or nil while it is valid.
    func endReason(now: Double) -> String? {
        if now - lastUse > idle { return "expired after \(Int(idle)) s idle" }
        if now - started > hardLimit { return "reached its limit of \(Int(hardLimit)) s" }
        if (try? vault.store.keyGeneration()) != vault.generation { return "was invalidated by a key rotation" }
        if (try? vault.store.slotSequence()) != slotSequence { return "was invalidated by a change of the vault's key slots" }
        return nil
    }
}

/// The per-user agent: holds unlocked vaults in guarded memory and answers requests for items
/// over a Unix socket, to the same uid only (SO_PEERCRED). It never sends a vault key out.
final class Agent {
    let socketPath: String
    let exitIdle: Double
    var sessions: [String: Session] = [:]
    /// Ended sessions: the next request for one answers exit 19 with the reason.
    var ended: [String: String] = [:]
    var lastLive: Double = Date().timeIntervalSince1970
    let uid = getuid()

    init(socketPath: String, exitIdle: Double) {
        self.socketPath = socketPath
        self.exitIdle = exitIdle
    }

    static func now() -> Double { Date().timeIntervalSince1970 }

    /// Binds the socket and serves until idle for `exitIdle` seconds with no session (0: forever).
    func run() throws {
        // Whatever descriptors the starting process left open (pipes of its own caller) are not
        // the agent's to keep: holding them would keep those pipes from ever reaching end of file.
        for fd in 3..<Int32(min(getdtablesize(), 65536)) { close(fd) }
        _ = prctl5(4 /* PR_SET_DUMPABLE */, 0, 0, 0, 0)
        var rl = rlimit(rlim_cur: 0, rlim_max: 0)
        setrlimit(Int32(RLIMIT_CORE.rawValue), &rl)
        signal(SIGPIPE, SIG_IGN)
        let folder = (socketPath as NSString).deletingLastPathComponent
        let old = umask(0o077)
        mkdir(folder, 0o700)
        umask(old)
        try checkPrivateFolder(folder)
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw VaultError.io(path: socketPath, String(cString: strerror(errno))) }
        // Another agent already serving this socket: leave it be.
        if AgentClient.connectRaw(socketPath) != nil { close(listener); return }
        unlink(socketPath)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(socketPath.utf8)
        guard pathBytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { throw VaultError.io(path: socketPath, "socket path too long") }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in for (i, b) in pathBytes.enumerated() { p[i] = b } }
        let ok = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        guard ok == 0 else { throw VaultError.io(path: socketPath, String(cString: strerror(errno))) }
        chmod(socketPath, 0o600)
        guard listen(listener, 64) == 0 else { throw VaultError.io(path: socketPath, String(cString: strerror(errno))) }
        defer { close(listener); unlink(socketPath) }
        var clients: [Int32: [UInt8]] = [:]
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)] + clients.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&fds, nfds_t(fds.count), 500)
            sweep()
            if exitIdle > 0, sessions.isEmpty, Agent.now() - lastLive > exitIdle { return }
            for p in fds where p.revents != 0 {
                if p.fd == listener {
                    let c = accept(listener, nil, nil)
                    guard c >= 0 else { continue }
                    _ = fcntl(c, F_SETFD, FD_CLOEXEC)
                    guard let peer = AgentWire.peer(c), peer.uid == uid else {
                        _ = AgentWire.writeAll(c, AgentWire.frame(ItemWire.error(.failure("refused: the agent serves only uid \(uid)"))))
                        Agent.closeGently(c)
                        continue
                    }
                    var tv = timeval(tv_sec: 5, tv_usec: 0)
                    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                    clients[c] = []
                    continue
                }
                var buf = [UInt8](repeating: 0, count: 65536)
                let n = recv(p.fd, &buf, buf.count, 0)
                if n <= 0 { AgentWire.wipe(&clients[p.fd]!); clients[p.fd] = nil; close(p.fd); continue }
                clients[p.fd]! += buf[0..<n]
                AgentWire.wipe(&buf)
                while let pending = clients[p.fd], pending.count >= 4 {
                    let len = AgentWire.u32(pending[0..<4])
                    if len < 4 || len > AgentWire.maxFrame {
                        _ = AgentWire.writeAll(p.fd, AgentWire.frame(ItemWire.error(.usage("malformed or oversized frame (\(len) bytes)"))))
                        AgentWire.wipe(&clients[p.fd]!); clients[p.fd] = nil; Agent.closeGently(p.fd)
                        break
                    }
                    guard pending.count >= 4 + len else { break }
                    var body = Array(pending[4..<(4 + len)])
                    var rest = Array(pending[(4 + len)...])
                    AgentWire.wipe(&clients[p.fd]!)
                    clients[p.fd] = rest
                    AgentWire.wipe(&rest)
                    let peer = AgentWire.peer(p.fd)
                    let response: [String: Any]
                    if let (header, tail) = AgentWire.parse(body: body[...]) {
                        response = handle(header, tail: tail, peerPID: peer?.pid ?? 0)
                    } else {
                        response = ItemWire.error(.usage("malformed request"))
                        _ = AgentWire.writeAll(p.fd, AgentWire.frame(response))
                        AgentWire.wipe(&body)
                        AgentWire.wipe(&clients[p.fd]!); clients[p.fd] = nil; Agent.closeGently(p.fd)
                        break
                    }
                    AgentWire.wipe(&body)
                    if !AgentWire.writeAll(p.fd, AgentWire.frame(response)) {
                        clients[p.fd] = nil; close(p.fd); break
                    }
                    if response["exit"] as? Bool == true { return }
                }
            }
        }
    }

    /// Closes after the reply: stop writing, drop what the peer already sent (closing with unread
    /// input would reset the connection before the peer reads the reply), then close.
    static func closeGently(_ fd: Int32) {
        shutdown(fd, Int32(SHUT_WR))
        var buf = [UInt8](repeating: 0, count: 4096)
        var tv = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        while recv(fd, &buf, buf.count, 0) > 0 {}
        close(fd)
    }

    func checkPrivateFolder(_ folder: String) throws {
        var st = stat()
        guard lstat(folder, &st) == 0 else { throw VaultError.io(path: folder, String(cString: strerror(errno))) }
        guard st.st_uid == uid, st.st_mode & 0o077 == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw VaultError.insecurePermissions(path: folder, isDirectory: true)
        }
    }

    /// Ends sessions past their idle or hard limit, or invalidated: their keys are wiped now.
    func sweep() {
        let now = Agent.now()
        for (key, s) in sessions {
            if let reason = s.endReason(now: now) {
                sessions[key] = nil
                ended[key] = reason
            }
        }
        if !sessions.isEmpty { lastLive = now }
    }

    func session(_ header: [String: Any]) throws -> Session {
        guard let key = header["vault"] as? String else { throw VaultError.usage("request without a vault") }
        if let s = sessions[key] {
            if let reason = s.endReason(now: Agent.now()) {
                sessions[key] = nil
                throw VaultError.sessionInvalid(reason)
            }
            s.lastUse = Agent.now()
            return s
        }
        // An ended session is reported once (exit 19, with why); after that the vault is simply
        // locked and clients authenticate by themselves again.
        if let reason = ended.removeValue(forKey: key) { throw VaultError.sessionInvalid(reason) }
        throw VaultError.relayed(code: 0, message: "no session", hint: nil)
    }

    func handle(_ h: [String: Any], tail: ArraySlice<UInt8>, peerPID: pid_t) -> [String: Any] {
        guard h["v"] as? Int == AgentWire.version else { return ItemWire.error(.usage("unsupported protocol version")) }
        do {
            switch h["op"] as? String ?? "" {
            case "ping":
                return ["ok": true, "pid": Int(getpid())]
            case "unlock":
                guard let root = h["root"] as? String, let name = h["name"] as? String,
                      let generation = h["generation"] as? Int, tail.count == 32 else { throw VaultError.usage("bad unlock request") }
                let loc = try VaultLocation(root: root, name: name)
                let store = try VaultStore.open(loc)
                let key = try SecretBytes(copying: Array(tail))
                let vault = try store.adopt(masterKey: key, generation: Int64(generation))
                let idle = h["idle"] as? Double ?? 120, hard = h["max"] as? Double ?? 43200
                sessions[loc.databasePath] = Session(location: loc, vault: vault, slotSequence: try store.slotSequence(),
                                                     idle: idle, hardLimit: hard, now: Agent.now())
                ended[loc.databasePath] = nil
                lastLive = Agent.now()
                return ["ok": true]
            case "lock":
                // A locked session leaves a marker, so a script asking later learns why (exit 19).
                let keys = (h["vault"] as? String).map { [$0] } ?? Array(sessions.keys)
                var n = 0
                for key in keys where sessions.removeValue(forKey: key) != nil {
                    ended[key] = "was ended by 'vault lock'"
                    n += 1
                }
                return ["ok": true, "locked": n]
            case "status":
                let now = Agent.now()
                var list: [[String: Any]] = []
                for (key, s) in sessions {
                    list.append(["vault": key, "name": s.location.name,
                                 "idle_left": max(0, Int(s.idle - (now - s.lastUse))),
                                 "hard_left": max(0, Int(s.hardLimit - (now - s.started)))])
                }
                return ["ok": true, "sessions": list, "pid": Int(getpid())]
            case "item":
                let s = try session(h)
                return ["ok": true, "item": ItemWire.encode(try s.vault.item(named: h["name"] as? String ?? ""))]
            case "contains":
                let s = try session(h)
                return ["ok": true, "contains": try s.vault.contains(h["name"] as? String ?? "")]
            case "list":
                let s = try session(h)
                var items: [[String: Any]] = [], damaged: [String] = []
                for e in try s.vault.allItems() {
                    switch e {
                    case .item(var i):
                        i.password = nil
                        i.totp = nil
                        items.append(ItemWire.encode(i))
                    case .damaged(let id): damaged.append(id)
                    }
                }
                return ["ok": true, "items": items, "damaged": damaged]
            case "add":
                let s = try session(h)
                try s.vault.add(try ItemWire.decode(h["item"]), replace: h["replace"] as? Bool ?? false)
                return ["ok": true]
            case "put":
                let s = try session(h)
                let item = try ItemWire.decode(h["item"])
                try s.vault.update(h["name"] as? String ?? "") { $0 = item }
                return ["ok": true]
            case "remove":
                let s = try session(h)
                try s.vault.remove(h["name"] as? String ?? "")
                return ["ok": true]
            case "release":
                let s = try session(h)
                try s.vault.appendAudit(AuditRecord(item: h["item"] as? String ?? "", field: h["field"] as? String ?? "",
                                                    command: h["command"] as? String ?? "", uid: uid, pid: peerPID))
                return ["ok": true]
            case "audit":
                let s = try session(h)
                var records: [[String: Any]] = []
                var damaged = 0
                for r in try s.vault.auditRecords(limit: h["limit"] as? Int) {
                    switch r {
                    case .success(let a): records.append((try? JSONSerialization.jsonObject(with: JSONEncoder().encode(a))) as? [String: Any] ?? [:])
                    case .failure: damaged += 1
                    }
                }
                return ["ok": true, "records": records, "damaged": damaged]
            case "shutdown":
                sessions.removeAll()
                return ["ok": true, "exit": true]
            default:
                throw VaultError.usage("unknown request")
            }
        } catch let e as VaultError {
            return ItemWire.error(e)
        } catch {
            return ItemWire.error(.failure("\(error)"))
        }
    }
}
