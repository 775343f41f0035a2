import VaultKit
internal import VaultSystem
internal import FoundationEssentials

/// What one connection has told the agent: its session bindings.
public struct AgentConnectionState {
    var binds: [SessionBind] = []
    /// The program on the other end (from `SO_PEERCRED` at connection time).
    public var program: RequestingProgram?
    /// The connection's socket, watched for a hang-up while a finger is awaited.
    public var client: Int32?
    /// A new connection's state.
    public init(program: RequestingProgram? = nil, client: Int32? = nil) {
        self.program = program
        self.client = client
    }
}

/// Answers one agent message at a time (draft-miller-ssh-agent, OpenSSH's PROTOCOL.agent), as
/// OpenSSH's agent does: the same replies, constraints, lock and destination rules. Tests drive
/// it in-process; the server calls it from each connection's thread.
public final class AgentHandler: @unchecked Sendable {
    /// The keys.
    public let store: AgentKeyStore
    /// Asks the person whether a key may be used (`ssh-add -c`): the prompt; true to allow.
    let confirm: @Sendable (String) -> Bool
    /// The fingerprint hash of prompts (`-E`).
    let fingerprintHash: String
    /// The wall clock, for certificate validity.
    let now: @Sendable () -> UInt64
    /// Debug lines (`-d`): why a request failed, never a secret.
    let log: (@Sendable (String) -> Void)?
    /// The vaults' keys (`--vault`), offered after the keys added with ssh-add; nil for none.
    public let vaultKeys: VaultKeys?

    /// A handler over `store`; `confirm` asks the person (SSH_ASKPASS by default).
    public init(store: AgentKeyStore, fingerprintHash: String = "sha256",
                confirm: @escaping @Sendable (String) -> Bool = Askpass.confirm,
                now: (@Sendable () -> UInt64)? = nil, log: (@Sendable (String) -> Void)? = nil, vaultKeys: VaultKeys? = nil) {
        self.log = log
        self.vaultKeys = vaultKeys
        self.store = store
        self.fingerprintHash = fingerprintHash
        self.confirm = confirm
        self.now = now ?? { UInt64(max(0, Date().timeIntervalSince1970)) }
    }

    private static let failure: [UInt8] = [AgentMessage.failure]
    private static let success: [UInt8] = [AgentMessage.success]
    private static func status(_ ok: Bool) -> [UInt8] { ok ? success : failure }

    /// The reply to one message (its payload: the type byte first), for a connection in
    /// `state`. Every malformed message gets `SSH_AGENT_FAILURE`, never a crash.
    public func respond(_ message: [UInt8], state: inout AgentConnectionState) -> [UInt8] {
        var r = SSHReader(message)
        guard let type = try? r.byte() else { return Self.failure }
        if store.isLocked, type != AgentMessage.unlock {
            return type == AgentMessage.requestIdentities ? [AgentMessage.identitiesAnswer, 0, 0, 0, 0] : Self.failure
        }
        switch type {
        case AgentMessage.requestIdentities:
            return identities(state)
        case AgentMessage.signRequest:
            do { return try sign(&r, state) } catch {
                log?("sign failed: \(error)")
                return Self.failure
            }
        case AgentMessage.addIdentity, AgentMessage.addIDConstrained:
            do { return Self.status(try add(&r, state)) } catch {
                log?("add identity failed: \(error)")
                return Self.failure
            }
        case AgentMessage.removeIdentity:
            guard let blob = try? r.string(), r.isAtEnd, let id = store.find(blob),
                  DestinationRules.identityPermitted(id.destinations, binds: state.binds, user: nil, now: now()) else { return Self.failure }
            return Self.status(store.remove(blob))
        case AgentMessage.removeAllIdentities, AgentMessage.removeAllRSAIdentities:
            store.removeAll()
            return Self.success
        case AgentMessage.lock, AgentMessage.unlock:
            guard var passphrase = try? r.string() else { return Self.failure }
            defer { wipe(&passphrase) }
            return Self.status(type == AgentMessage.lock ? store.lock(passphrase: passphrase) : store.unlock(passphrase: passphrase))
        case AgentMessage.extension:
            return (try? `extension`(&r, &state)) ?? Self.failure
        default:
            // Smartcard keys (20, 21, 26) and every unknown message.
            return Self.failure
        }
    }

    private func identities(_ state: AgentConnectionState) -> [UInt8] {
        var w = SSHWriter()
        var n: UInt32 = 0
        let time = now()
        for id in store.all() where DestinationRules.identityPermitted(id.destinations, binds: state.binds, user: nil, now: time) {
            w.string(id.key.publicKey.blob)
            w.text(id.comment)
            n += 1
        }
        for offered in vaultKeys?.all() ?? [] where store.find(offered.listed.publicKey.blob) == nil && n < AgentLimit.identities {
            w.string(offered.listed.publicKey.blob)
            w.text(offered.listed.comment)
            n += 1
        }
        var out = SSHWriter()
        out.byte(AgentMessage.identitiesAnswer)
        out.uint32(n)
        out.raw(w.bytes)
        return out.bytes
    }

    private func sign(_ r: inout SSHReader, _ state: AgentConnectionState) throws -> [UInt8] {
        let blob = try r.string(), data = try r.string(), flags = try r.uint32()
        guard r.isAtEnd else { return Self.failure }
        guard let id = store.find(blob) else { return signWithVaultKey(blob, data: data, flags: flags, state) }
        var destination: String?
        if !id.destinations.isEmpty {
            guard !state.binds.isEmpty, let request = UserauthRequest.parse(data, signedBy: id.key.publicKey),
                  DestinationRules.identityPermitted(id.destinations, binds: state.binds, user: request.user, now: now()),
                  let last = state.binds.last, constantTimeEqual(request.sessionID, last.sessionID) else { return Self.failure }
            if state.binds.count > 1, request.hostKey == nil { return Self.failure }
            if let hk = request.hostKey, hk.blob != last.hostKey.blob { return Self.failure }
            destination = "public key authentication request for user \"\(request.user)\" to listed host"
        }
        if id.confirm {
            var prompt = "Allow use of key \(id.comment)?\nKey fingerprint \(id.key.publicKey.fingerprint(hash: fingerprintHash))."
            if let destination { prompt += "\n" + destination }
            guard confirm(prompt) else { return Self.failure }
        }
        var out = SSHWriter()
        out.byte(AgentMessage.signResponse)
        out.string(try id.key.sign(data, flags: flags))
        return out.bytes
    }

    /// A signature by a vault key: after the finger its policy asks for. The prompt names the
    /// key, the requesting program chain and the destination (the user and the host key of a
    /// verified session binding, or an SSHSIG namespace).
    private func signWithVaultKey(_ blob: [UInt8], data: [UInt8], flags: UInt32, _ state: AgentConnectionState) -> [UInt8] {
        guard let vaultKeys, let offered = vaultKeys.find(blob) else { return Self.failure }
        var namespace: String?, user: String?, host: String?
        if let n = SSHSig.namespace(of: data) {
            namespace = n
        } else if let request = UserauthRequest.parse(data, signedBy: offered.listed.publicKey) {
            // The host of the verified binding of this very session (its id), else none.
            let bound = state.binds.last.flatMap { constantTimeEqual($0.sessionID, request.sessionID) ? $0 : nil }
            user = request.user
            host = bound.map { $0.hostKey.fingerprint } ?? "an unbound host"
        }
        let (prompt, batch) = Self.touchPrompt(key: offered.listed.name, fingerprint: offered.listed.publicKey.fingerprint,
                                               program: state.program?.chainText, namespace: namespace, user: user, host: host)
        log?(prompt)
        guard let signature = vaultKeys.sign(offered, data: data, flags: flags, requester: state.program, prompt: prompt, batch: batch, client: state.client) else {
            return Self.failure
        }
        var out = SSHWriter()
        out.byte(AgentMessage.signResponse)
        out.string(signature)
        return out.bytes
    }

    /// The longest program chain, SSHSIG namespace and user name a touch prompt shows: each
    /// part is bounded on its own, so the key and the destination host always stay in the
    /// prompt (at most ``TouchPrompt/limit`` in all).
    static let promptPartLimits = (key: 128, program: 160, namespace: 64, user: 64)

    /// The touch prompt of a vault key's signature: the key, the requesting program chain and
    /// the destination (an SSHSIG namespace, or a user at a host), the peer's parts as plain
    /// text each bounded on its own; and `batch`, a BLAKE2b of the whole untruncated text, so
    /// requests join one match only when they ask for the very same thing, not merely for what
    /// the bounded prompt shows alike.
    static func touchPrompt(key: String, fingerprint: String, program: String?, namespace: String?, user: String?,
                            host: String?) -> (prompt: String, batch: String) {
        let limits = promptPartLimits
        func text(_ part: (String, Int) -> String) -> String {
            var t = "sign with SSH key '\(part(key, limits.key))' (\(fingerprint))"
            if let program { t += " for " + part(program, limits.program) }
            if let namespace { t += ", SSHSIG namespace '\(part(namespace, limits.namespace))'" }
            if let user, let host { t += " to \(part(user, limits.user))@\(host)" }
            return t
        }
        let prompt = TouchPrompt.plain(text { TouchPrompt.plain($0, limit: $1) })
        let exact = text { p, _ in p }
        let digest = (try? KeyedHash.hash(Array(exact.utf8), key: [])) ?? Array(exact.utf8)
        return (prompt, hexString(digest))
    }

    private func add(_ r: inout SSHReader, _ state: AgentConnectionState) throws -> Bool {
        let key = try SSHPrivateKey.readAgentEncoding(from: &r)
        let comment = try r.text()
        var lifetime: UInt32?, confirm = false, destinations: [DestinationConstraint]?
        while !r.isAtEnd {
            switch try r.byte() {
            case AgentMessage.constrainLifetime:
                guard lifetime == nil else { return false }
                lifetime = try r.uint32()
            case AgentMessage.constrainConfirm:
                guard !confirm else { return false }
                confirm = true
            case AgentMessage.constrainExtension:
                let name = try r.text()
                guard name == "restrict-destination-v00@openssh.com", destinations == nil else { return false }
                var inner = SSHReader(try r.string())
                var list: [DestinationConstraint] = []
                while !inner.isAtEnd {
                    guard list.count < AgentLimit.destinationConstraints else { return false }
                    list.append(try DestinationConstraint.read(from: &inner))
                }
                destinations = list
            default:
                // maxsign is XMSS's, which vault does not hold; anything else is unknown.
                return false
            }
        }
        if let old = store.find(key.publicKey.blob),
           !DestinationRules.identityPermitted(old.destinations, binds: state.binds, user: nil, now: now()) { return false }
        let life = lifetime ?? store.defaultLifetime
        let identity = AgentIdentity(key: key, comment: comment, death: life.map { MonotonicClock.seconds() + Double($0) },
                                     confirm: confirm, destinations: destinations ?? [])
        return store.add(identity)
    }

    /// The extensions: `session-bind@openssh.com` and `query`.
    private func `extension`(_ r: inout SSHReader, _ state: inout AgentConnectionState) throws -> [UInt8] {
        let name = try r.text()
        switch name {
        case "session-bind@openssh.com":
            return Self.status(try bind(&r, &state))
        case "query":
            var w = SSHWriter()
            w.byte(AgentMessage.success)
            w.text("query")
            w.text("session-bind@openssh.com")
            return w.bytes
        default:
            return Self.failure
        }
    }

    /// Records a binding after checking the host key's signature over the session id (OpenSSH's
    /// `process_ext_session_bind`).
    private func bind(_ r: inout SSHReader, _ state: inout AgentConnectionState) throws -> Bool {
        let hostKey = try SSHPublicKey.parse(try r.string())
        let sid = try r.string(), signature = try r.string()
        let forwarded = try r.bool()
        guard r.isAtEnd, !sid.isEmpty, sid.count <= AgentLimit.sessionIDBytes else { return false }
        guard SSHSignature.verify(signature, of: sid, by: hostKey.kind) else { return false }
        for b in state.binds {
            guard b.forwarded else { return false }
            let sameSID = constantTimeEqual(b.sessionID, sid)
            if sameSID { return b.hostKey.blob == hostKey.blob }
        }
        guard state.binds.count < AgentLimit.sessionBinds else { return false }
        state.binds.append(SessionBind(hostKey: hostKey, sessionID: sid, forwarded: forwarded))
        return true
    }
}

/// OpenSSH's signature format (PROTOCOL.sshsig): what a signed blob says it is for.
enum SSHSig {
    /// The namespace of an SSHSIG signed-data blob (`"SSHSIG"`, namespace, reserved, hash,
    /// digest), nil for other data.
    static func namespace(of data: [UInt8]) -> String? {
        let magic = Array("SSHSIG".utf8)
        guard data.starts(with: magic) else { return nil }
        var r = SSHReader(Array(data[magic.count...]))
        guard let namespace = try? r.text(), (try? r.string()) != nil, (try? r.text()) != nil, (try? r.string()) != nil, r.isAtEnd else { return nil }
        return namespace.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7f }) ? namespace : nil
    }
}

/// Asking the person through `SSH_ASKPASS` (OpenSSH's `ask_permission`): the program gets the
/// prompt as its argument and `SSH_ASKPASS_PROMPT=confirm`; it allows by exiting 0 with an
/// empty answer or "yes".
public enum Askpass {
    /// Runs the askpass program; false when there is none, it fails, or it says no.
    @Sendable public static func confirm(_ prompt: String) -> Bool {
        var env = ProcessInfo.processInfo.environment
        let program = env["SSH_ASKPASS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/bin/ssh-askpass"
        env["SSH_ASKPASS_PROMPT"] = "confirm"
        guard FileSystem.exists(program), var pipe = try? UnixPipe() else { return false }
        let request = SpawnRequest(path: program, arguments: [program, prompt], environment: env,
                                   fileActions: [.open(0, "/dev/null", .readOnly), .dup2(from: pipe.writeEnd.rawValue, to: 1)])
        guard let child = try? ChildProcess.spawn(request) else { return false }
        try? pipe.writeEnd.close()
        var answer = (try? pipe.readEnd.readAll(limit: 1024)) ?? []
        defer { wipe(&answer) }
        guard (try? child.wait()) == .exited(0) else { return false }
        while let last = answer.last, last == 10 || last == 13 { answer.removeLast() }
        return answer.isEmpty || String(decoding: answer, as: UTF8.self).lowercased() == "yes"
    }
}
