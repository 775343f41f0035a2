import VaultKit
internal import VaultAgent
internal import VaultSystem
internal import FoundationEssentials

/// The program on the other end of a connection, from `SO_PEERCRED`'s pid and `/proc`: its
/// executable, its terminal session, its start time (so a pid used again by another process is
/// told apart) and the names of it and its parents (`ssh <- git <- bash`).
public struct RequestingProgram: Sendable, Equatable {
    /// The pid at connection time.
    public var pid: Int32
    /// `/proc/PID/stat`'s start time (clock ticks since boot).
    public var startTime: UInt64
    /// `/proc/PID/exe`.
    public var executable: String
    /// The session id and controlling terminal.
    public var session: Int32, terminal: Int32
    /// The program and its parents, nearest first (at most four).
    public var chain: [String]
    /// The terminal a touch prompt is written to: the program's controlling terminal, else its
    /// nearest parent's (`tty_nr`); nil when none of the chain has one.
    public var promptTerminal: Int32?

    /// What `session` policy keys a match by: the executable in its terminal session.
    var sessionKey: String { "\(executable)\u{0}\(session)\u{0}\(terminal)" }

    /// The program of `pid` now, nil when `/proc` cannot tell (gone, another user's).
    public static func of(pid: Int32) -> RequestingProgram? {
        guard let stat = stat(pid), let exe = try? ProcessIdentity.executable(of: pid) else { return nil }
        var chain = [stat.comm]
        var terminal: Int32? = stat.tty != 0 ? stat.tty : nil
        var parent = stat.ppid
        while chain.count < 4, parent > 1, let s = Self.stat(parent) {
            chain.append(s.comm)
            if terminal == nil, s.tty != 0 { terminal = s.tty }
            parent = s.ppid
        }
        return RequestingProgram(pid: pid, startTime: stat.start, executable: exe, session: stat.session, terminal: stat.tty, chain: chain,
                                 promptTerminal: terminal)
    }

    /// Whether `pid` is still this program (the same start time).
    var isAlive: Bool { Self.stat(pid)?.start == startTime }

    /// `ssh <- git <- bash`.
    public var chainText: String { chain.joinedText(separator: " <- ") }

    private static func stat(_ pid: Int32) -> (comm: String, ppid: Int32, session: Int32, tty: Int32, start: UInt64)? {
        guard let bytes = try? FileDescriptor.open("/proc/\(pid)/stat", .readOnly).readAll(limit: 4096),
              let open = bytes.firstIndex(of: UInt8(ascii: "(")), let close = bytes.lastIndex(of: UInt8(ascii: ")")), open < close else { return nil }
        let comm = String(decoding: bytes[(open + 1)..<close], as: UTF8.self)
        // After the name: state(3) ppid(4) pgrp(5) session(6) tty_nr(7) ... starttime(22).
        let fields = String(decoding: bytes[(close + 1)...], as: UTF8.self).split(separator: " ")
        guard fields.count >= 20, let ppid = Int32(fields[1]), let session = Int32(fields[3]), let tty = Int32(fields[4]),
              let start = UInt64(fields[19]) else { return nil }
        return (comm, ppid, session, tty, start)
    }
}

/// The `ssh-key` items of the vaults an agent serves (`--vault`): listed from each vault's
/// unlock session (overviews only, no secret), signed with after the private key is released by
/// `vault get NAME --field private-key --reveal` run as a child, so the fresh match goes through
/// the key authority exactly as any release of a fingerprint-login item does. Keys released are
/// kept in guarded memory per policy (docs/threat-model.md): `sign` never; `session` for one
/// requesting program; `none` for all; both only while the unlock session they were released in
/// lasts.
public final class VaultKeys: @unchecked Sendable {
    /// The vault names (nil: the default vault).
    let vaults: [String?]
    let environment: [String: String]
    /// The `vault` program.
    let program: String
    let log: (@Sendable (String) -> Void)?
    /// Shows the person that a touch is awaited.
    let touch: TouchPrompt
    private let lock = ThreadLock()
    /// The keys each vault listed last (offered while it is locked too: signing then unlocks).
    private var seen: [String: [SSHKeyItem.Listed]] = [:]
    /// Released keys: by vault, item, and (for `session`) the program.
    private var released: [String: Held] = [:]

    private final class Held: @unchecked Sendable {
        let key: SSHPrivateKey
        /// The unlock session it belongs to: the agent's pid and the session's hard deadline.
        let session: SessionMark
        init(key: SSHPrivateKey, session: SessionMark) { (self.key, self.session) = (key, session) }
    }

    struct SessionMark: Equatable {
        var agent: Int32
        var deadline: Double
        func same(_ o: SessionMark) -> Bool { agent == o.agent && abs(deadline - o.deadline) <= 2 }
    }

    /// Keys of `vaults` (empty: the default vault), released by running `program`; `notifier`
    /// shows a touch prompt on the desktop (nil: the requester's terminal alone).
    public init(vaults: [String], environment: [String: String], program: String, log: (@Sendable (String) -> Void)? = nil,
                notifier: TouchPrompt.Notifier? = nil) {
        self.vaults = vaults.isEmpty ? [nil] : vaults.map { $0 }
        self.environment = environment
        self.program = program
        self.log = log
        touch = TouchPrompt(notifier: notifier, environment: environment)
    }

    /// One offered key: its vault's name and the item.
    struct Offered {
        var vault: String
        var listed: SSHKeyItem.Listed
    }

    /// The vaults' keys, read again from each vault's unlock session when it has one.
    func all() -> [Offered] {
        var out: [Offered] = []
        for v in vaults {
            guard let location = try? VaultLocation(name: v, environment: environment) else { continue }
            let name = location.name
            if let session = try? SessionAccess.open(location, environment: environment) {
                var keys: [SSHKeyItem.Listed] = []
                try? session.forEachOverview(matching: nil) { e in
                    if case .item(let o) = e, let l = SSHKeyItem.listed(o.item) { keys.append(l) }
                }
                keys.sort { $0.name < $1.name }
                lock.withLock { seen[name] = keys }
            }
            out += (lock.withLock { seen[name] } ?? []).map { Offered(vault: name, listed: $0) }
        }
        return out
    }

    /// The offered key of `blob`.
    func find(_ blob: [UInt8]) -> Offered? {
        all().first { $0.listed.publicKey.blob == blob }
    }

    /// The unlock session of `vault` now, nil without one.
    private func sessionMark(_ vault: String) -> SessionMark? {
        guard let client = AgentClient.connect(environment), let reply = try? client.send(.status),
              case .status(let pid, let sessions) = reply,
              let location = try? VaultLocation(name: vault, environment: environment),
              let s = sessions.first(where: { $0.vault == location.databasePath && $0.servesCaller }) else { return nil }
        return SessionMark(agent: pid, deadline: MonotonicClock.seconds() + Double(s.hardLeft))
    }

    /// The signature of `data` by `offered`'s key for `requester`, asking for a finger as its
    /// policy says; `prompt` names the key, the requester and the destination (bounded), `batch`
    /// stands for its whole untruncated text. Requests for one key from one requester (the same
    /// executable in the same session and terminal) that arrive while its match is under way join
    /// that match: one touch answers all of them (for `sign` only requests whose `batch` is the
    /// same, so the person approved what each one says, not merely what its prompt shows; the key
    /// is not kept once the match is over). nil when the match or the release failed, or
    /// `client` (the requester's socket) closed meanwhile: the last waiter to go cancels the scan.
    func sign(_ offered: Offered, data: [UInt8], flags: UInt32, requester: RequestingProgram?, prompt: String, batch: String, client: Int32?) -> [UInt8]? {
        let policy = offered.listed.confirm
        guard let requester, requester.isAlive else {
            log?("refused a signature: the requesting program is gone or unknown")
            return nil
        }
        let item = "\(offered.vault)\u{0}\(offered.listed.name)"
        let holdKey = item + (policy == .session ? "\u{0}" + requester.sessionKey : "")
        let mark = sessionMark(offered.vault)
        if policy != .sign, let mark {
            let held: Held? = lock.withLock {
                guard let h = released[holdKey] else { return nil }
                if h.session.same(mark) { return h }
                released[holdKey] = nil
                return nil
            }
            if let held { return try? held.key.sign(data, flags: flags) }
        }
        let batchKey = item + "\u{0}" + requester.sessionKey + (policy == .sign ? "\u{0}" + batch : "")
        let joined: (Pending, Bool)? = lock.withLock {
            if let p = pending[batchKey], !p.over {
                p.waiters += 1
                return (p, false)
            }
            guard pending.count < Self.pendingLimit, let p = try? Pending() else { return nil }
            pending[batchKey] = p
            return (p, true)
        }
        guard let (match, leads) = joined else {
            log?("refused a signature: too many matches under way")
            return nil
        }
        if leads {
            let keep = policy != .sign ? mark.map { (holdKey, $0) } : nil
            do {
                try Threads.detach { [self] in
                    run(match, batchKey: batchKey, offered, prompt: prompt, requester: requester, keep: keep)
                }
            } catch {
                // No thread to spare (the thread limit): this request runs the match itself.
                run(match, batchKey: batchKey, offered, prompt: prompt, requester: requester, keep: keep)
            }
        } else {
            log?("joined the match under way for '\(offered.listed.name)' (\(lock.withLock { match.waiters }) waiting)")
        }
        guard let key = wait(match, client: client) else { return nil }
        return try? key.sign(data, flags: flags)
    }

    /// The most matches under way at once (one per key and requester).
    static let pendingLimit = 64

    /// One match under way for a key and a requester, which requests arriving meanwhile join.
    private final class Pending: @unchecked Sendable {
        /// The requests waiting for it (under `VaultKeys.lock`).
        var waiters = 1
        /// Over: answered or cancelled; nobody joins it any more.
        var over = false
        /// The released key, once over (nil: no release).
        var key: SSHPrivateKey?
        /// A waiter that goes away writes a byte to `leftWriter`: the release, polling
        /// `leftReader`, looks whether any remain.
        let leftReader: FileDescriptor, leftWriter: FileDescriptor
        /// `doneWriter` is closed (under `VaultKeys.lock`) when the match is over, which wakes
        /// every waiter's poll of `doneReader`.
        let doneReader: FileDescriptor
        var doneWriter: FileDescriptor
        init() throws(SystemError) {
            var left = try UnixPipe(), done = try UnixPipe()
            leftReader = FileDescriptor(owning: left.readEnd.take(), label: "pipe")
            leftWriter = FileDescriptor(owning: left.writeEnd.take(), label: "pipe")
            doneReader = FileDescriptor(owning: done.readEnd.take(), label: "pipe")
            doneWriter = FileDescriptor(owning: done.writeEnd.take(), label: "pipe")
        }
    }
    private var pending: [String: Pending] = [:]

    /// Waits until `match` is over or `client` hangs up (then it leaves the match); its key.
    private func wait(_ match: Pending, client: Int32?) -> SSHPrivateKey? {
        while true {
            var watch = [PollRequest(fd: match.doneReader.rawValue, events: .readable)]
            if let client { watch.append(PollRequest(fd: client, events: .hangUp)) }
            guard let ready = try? Poll.wait(watch, timeoutMilliseconds: -1) else { break }
            if !ready[0].isEmpty { return lock.withLock { match.key } }
            if ready.count > 1, !ready[1].isEmpty { break }
        }
        lock.withLock { match.waiters -= 1 }
        log?("a client went away while its match was under way")
        try? match.leftWriter.writeAll([1])
        return nil
    }

    /// Runs `match`: shows the prompt to the person (the requester's terminal, the desktop),
    /// releases the key, keeps it when `keep` says where (its hold key and unlock session), and
    /// wakes the waiters.
    private func run(_ match: Pending, batchKey: String, _ offered: Offered, prompt: String, requester: RequestingProgram,
                     keep: (String, SessionMark)?) {
        let notice = touch.show(prompt, requester: requester, log: log)
        let key = release(offered, prompt: prompt, match: match, batchKey: batchKey)
        lock.withLock {
            if let key, let (holdKey, mark) = keep { released[holdKey] = Held(key: key, session: mark) }
            match.key = key
            match.over = true
            if pending[batchKey] === match { pending[batchKey] = nil }
            try? match.doneWriter.close()
        }
        // After the waiters woke: taking the notification down is a bus call (up to 2 s).
        notice()
    }

    /// Drops every released key whose unlock session ended.
    func reap() {
        let marks = Dictionary(uniqueKeysWithValues: Set(vaults.compactMap { v in try? VaultLocation(name: v, environment: environment).name })
            .map { ($0, sessionMark($0)) })
        lock.withLock {
            released = released.filter { k, h in
                let vault = String(k.prefix { $0 != "\u{0}" })
                return marks[vault].flatMap { $0 }.map { h.session.same($0) } ?? false
            }
        }
    }

    /// Runs `vault get NAME --field private-key --reveal --no-input --reason PROMPT` and reads
    /// the key from its standard output; its standard error (the fingerprint prompt) goes to the
    /// log. The child is ended (SIGTERM: the scan is cancelled) when the last request waiting
    /// for `match` went away.
    private func release(_ offered: Offered, prompt: String, match: Pending, batchKey: String) -> SSHPrivateKey? {
        guard var out = try? UnixPipe(), var err = try? UnixPipe() else { return nil }
        let args = [program, "get", offered.listed.name, "--field", SSHKeyFields.privateKey, "--reveal", "--no-input",
                    "--vault", offered.vault, "--reason", prompt]
        let request = SpawnRequest(path: program, arguments: args, environment: environment,
                                   fileActions: [.open(0, "/dev/null", .readOnly), .dup2(from: out.writeEnd.rawValue, to: 1),
                                                 .dup2(from: err.writeEnd.rawValue, to: 2)])
        guard let child = try? ChildProcess.spawn(request) else {
            log?("cannot run \(program)")
            return nil
        }
        try? out.writeEnd.close()
        try? err.writeEnd.close()
        var key: [UInt8] = [], errText: [UInt8] = []
        defer { wipe(&key) }
        var open = (out: true, err: true)
        var cancelled = false
        var buffer = [UInt8](repeating: 0, count: 4096)
        defer { wipe(&buffer) }
        while open.out || open.err {
            var watch = [PollRequest(fd: open.out ? out.readEnd.rawValue : -1, events: .readable),
                         PollRequest(fd: open.err ? err.readEnd.rawValue : -1, events: .readable)]
            if !cancelled { watch.append(PollRequest(fd: match.leftReader.rawValue, events: .readable)) }
            guard let ready = try? Poll.wait(watch, timeoutMilliseconds: 1000) else { break }
            if ready.count > 2, !ready[2].isEmpty {
                _ = buffer.withUnsafeMutableBytes { try? match.leftReader.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[..<1])) }
                let nobody: Bool = lock.withLock {
                    guard match.waiters <= 0 else { return false }
                    // Nobody joins a cancelled match: a request from now on starts its own.
                    match.over = true
                    if pending[batchKey] === match { pending[batchKey] = nil }
                    return true
                }
                if nobody {
                    log?("every client waiting went away: cancelling the match")
                    try? child.send(.terminate)
                    cancelled = true
                }
            }
            if !ready[0].isEmpty {
                let n: Int = buffer.withUnsafeMutableBytes { (try? out.readEnd.read(into: $0)) ?? 0 }
                if n == 0 { open.out = false } else if key.count + n > 1 << 16 { try? child.send(.terminate); open.out = false } else { key += buffer[..<n] }
            }
            if !ready[1].isEmpty {
                let n: Int = buffer.withUnsafeMutableBytes { (try? err.readEnd.read(into: $0)) ?? 0 }
                if n == 0 { open.err = false } else {
                    errText += buffer[..<n]
                    while let nl = errText.firstIndex(of: 10) {
                        log?("vault: " + String(decoding: errText[..<nl], as: UTF8.self))
                        errText.removeSubrange(...nl)
                    }
                }
            }
        }
        let status = try? child.wait()
        guard status == .exited(0), !cancelled else {
            log?("the release of '\(offered.listed.name)' failed (\(status.map { "\($0)" } ?? "unknown"))")
            return nil
        }
        guard let secret = try? SecretBytes(copying: key) else { return nil }
        do { return try SSHKeyItem.privateKey(secret, expecting: offered.listed) } catch {
            log?("the private key of '\(offered.listed.name)' cannot be read: \(error)")
            return nil
        }
    }
}
