/// One hop of a `restrict-destination-v00@openssh.com` constraint (`ssh-add -h`): a user
/// pattern, a host name, and the host keys (or CAs) that name it.
struct DestinationHop: Equatable {
    var user: String?
    var hostname: String?
    var keys: [(blob: [UInt8], isCA: Bool)]

    static func == (a: DestinationHop, b: DestinationHop) -> Bool {
        a.user == b.user && a.hostname == b.hostname && a.keys.map(\.blob) == b.keys.map(\.blob) && a.keys.map(\.isCA) == b.keys.map(\.isCA)
    }

    static func read(_ bytes: [UInt8]) throws(SSHWireError) -> DestinationHop {
        var r = SSHReader(bytes)
        let user = try r.text(), hostname = try r.text()
        guard try r.string().isEmpty else { throw .unsupported("destination hop extensions") }
        var keys: [(blob: [UInt8], isCA: Bool)] = []
        while !r.isAtEnd {
            let blob = try r.string()
            _ = try SSHPublicKey.parse(blob)
            keys.append((blob, try r.bool()))
            guard keys.count <= 1024 else { throw .invalid("too many keys in a destination hop") }
        }
        return DestinationHop(user: user.isEmpty ? nil : user, hostname: hostname.isEmpty ? nil : hostname, keys: keys)
    }

    /// Whether `key` (a host key, or a host certificate) is one of this hop's, as OpenSSH's
    /// `match_key_hop`: a plain key by equality with a non-CA key; a certificate by its CA, as a
    /// host certificate naming this hop's host name, valid `now`.
    func matches(_ key: SSHPublicKey, now: UInt64) -> Bool {
        for k in keys {
            guard let cert = key.certificate else {
                if !k.isCA, k.blob == key.blob { return true }
                continue
            }
            guard k.isCA, cert.signatureKey == k.blob, let hostname else { continue }
            guard cert.certType == 2, cert.principals.contains(hostname), now >= cert.validAfter, now < cert.validBefore else { continue }
            return true
        }
        return false
    }
}

/// A `from > to` constraint on where a key may be used (PROTOCOL.agent, "restrict-destination").
struct DestinationConstraint: Equatable {
    var from: DestinationHop
    var to: DestinationHop

    /// Reads one constraint (a string holding from, to and extensions), checked as OpenSSH
    /// checks it: `from` names a host exactly when it has keys and no user; `to` is complete.
    static func read(from r: inout SSHReader) throws(SSHWireError) -> DestinationConstraint {
        var inner = SSHReader(try r.string())
        let from = try DestinationHop.read(try inner.string())
        let to = try DestinationHop.read(try inner.string())
        guard try inner.string().isEmpty, inner.isAtEnd else { throw .unsupported("destination constraint extensions") }
        guard (from.hostname == nil) == from.keys.isEmpty, from.user == nil else { throw .invalid("an inconsistent \"from\" of a destination constraint") }
        guard to.hostname != nil, !to.keys.isEmpty else { throw .invalid("an incomplete \"to\" of a destination constraint") }
        return DestinationConstraint(from: from, to: to)
    }
}

/// One `session-bind@openssh.com` of a connection: the host key, the session id it signed,
/// and whether the connection is being forwarded past that host.
struct SessionBind {
    let hostKey: SSHPublicKey
    let sessionID: [UInt8]
    let forwarded: Bool
}

/// OpenSSH's rules for a destination-constrained key (ssh-agent.c `identity_permitted`).
enum DestinationRules {
    /// Whether some constraint allows the hop `fromKey > toKey` for `user` (nil: any).
    static func permitted(_ constraints: [DestinationConstraint], from fromKey: SSHPublicKey?, to toKey: SSHPublicKey?,
                          user: String?, now: UInt64) -> Bool {
        for c in constraints {
            if let fromKey {
                guard c.from.matches(fromKey, now: now) else { continue }
            } else if c.from.hostname != nil || !c.from.keys.isEmpty {
                continue
            }
            if let toKey, !c.to.matches(toKey, now: now) { continue }
            if let pattern = c.to.user, let user, !Glob.matches(user, pattern) { continue }
            return true
        }
        return false
    }

    /// Whether a key with `constraints` may be seen or used on a connection bound as `binds`;
    /// `user` is given for a signature (the user of the userauth request).
    static func identityPermitted(_ constraints: [DestinationConstraint], binds: [SessionBind], user: String?, now: UInt64) -> Bool {
        if constraints.isEmpty || binds.isEmpty { return true }
        var fromKey: SSHPublicKey?
        for (i, bind) in binds.enumerated() {
            var testUser: String?
            if i == binds.count - 1 {
                testUser = user
                if bind.forwarded, user != nil { return false }
            } else if !bind.forwarded {
                return false
            }
            guard permitted(constraints, from: fromKey, to: bind.hostKey, user: testUser, now: now) else { return false }
            fromKey = bind.hostKey
        }
        if let last = binds.last, last.forwarded, user == nil,
           !permitted(constraints, from: last.hostKey, to: nil, user: nil, now: now) {
            return false
        }
        return true
    }
}

/// A userauth request as a client asks an agent to sign it (RFC 4252 7, and OpenSSH's
/// `publickey-hostbound-v00@openssh.com`): what a destination-constrained key checks.
struct UserauthRequest {
    let sessionID: [UInt8]
    let user: String
    let hostKey: SSHPublicKey?

    /// Parses `data` as the request `key` signs, nil when it is not one (OpenSSH's
    /// `parse_userauth_request`).
    static func parse(_ data: [UInt8], signedBy key: SSHPublicKey) -> UserauthRequest? {
        var r = SSHReader(data)
        guard let sid = try? r.string(), !sid.isEmpty,
              (try? r.byte()) == 50,
              let user = try? r.text(),
              (try? r.text()) == "ssh-connection",
              let method = try? r.text(),
              (try? r.byte()) == 1,
              let algorithm = try? r.text(),
              let blob = try? r.string(), blob == key.blob,
              SSHSignature.algorithmFits(algorithm, key: key) else { return nil }
        var hostKey: SSHPublicKey?
        if method == "publickey-hostbound-v00@openssh.com" {
            guard let hk = try? r.string(), let parsed = try? SSHPublicKey.parse(hk) else { return nil }
            hostKey = parsed
        } else if method != "publickey" {
            return nil
        }
        guard r.isAtEnd else { return nil }
        return UserauthRequest(sessionID: sid, user: user, hostKey: hostKey)
    }
}

/// OpenSSH's `match_pattern`: `*` and `?` wildcards, the whole string.
enum Glob {
    static func matches(_ text: String, _ pattern: String) -> Bool {
        let t = Array(text.utf8), p = Array(pattern.utf8)
        var ti = 0, pi = 0, star = -1, mark = 0
        while ti < t.count {
            if pi < p.count, p[pi] == UInt8(ascii: "?") || p[pi] == t[ti] {
                ti += 1; pi += 1
            } else if pi < p.count, p[pi] == UInt8(ascii: "*") {
                star = pi; mark = ti; pi += 1
            } else if star >= 0 {
                pi = star + 1; mark += 1; ti = mark
            } else {
                return false
            }
        }
        while pi < p.count, p[pi] == UInt8(ascii: "*") { pi += 1 }
        return pi == p.count
    }
}
