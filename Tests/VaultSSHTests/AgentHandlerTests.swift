import Testing
import VaultKit
import VaultSystem
@testable import VaultSSH

/// Builds agent messages with real keys (libsodium's Ed25519, libcrypto's ECDSA and RSA).
enum Keys {
    static func message(_ type: UInt8, _ body: (inout SSHWriter) -> Void) -> [UInt8] {
        var w = SSHWriter()
        w.byte(type)
        body(&w)
        return w.bytes
    }

    /// An `ADD_IDENTITY` of a new Ed25519 key; its public key blob.
    static func ed25519(comment: String = "ed", constraints: [UInt8] = [], tamper: Bool = false,
                        tamperSeed: Bool = false) throws -> (add: [UInt8], blob: [UInt8]) {
        let sk = try Ed25519.generate()
        let pk = sk.withUnsafeBytes { Array($0[32..<64]) }
        let secret = sk.withUnsafeBytes { Array($0) }
        let add = message(constraints.isEmpty ? AgentMessage.addIdentity : AgentMessage.addIDConstrained) { w in
            w.text("ssh-ed25519")
            w.string(pk)
            var s = secret
            if tamper { s[40] ^= 1 }
            if tamperSeed { s[3] ^= 1 } // the seed of another key, the public half kept
            w.string(s)
            w.text(comment)
            w.raw(constraints)
        }
        return (add, SSHPublicKey(kind: .ed25519(publicKey: pk)).blob)
    }

    static func ecdsa(_ curve: String) throws -> (add: [UInt8], blob: [UInt8]) {
        let group = ECCurve(name: curve)!.group
        let k = try LibCrypto.generateEC(group: group)
        let add = message(AgentMessage.addIdentity) { w in
            w.text("ecdsa-sha2-\(curve)")
            w.text(curve)
            w.string(k["pub"]!)
            w.mpint(k["priv"]!)
            w.text(curve)
        }
        return (add, SSHPublicKey(kind: .ecdsa(curve: curve, point: k["pub"]!)).blob)
    }

    static func rsa(bits: Int = 2048) throws -> (add: [UInt8], blob: [UInt8]) {
        let k = try LibCrypto.generateRSA(bits: bits)
        let add = message(AgentMessage.addIdentity) { w in
            w.text("ssh-rsa")
            for name in ["n", "e", "d", "rsa-coefficient1", "rsa-factor1", "rsa-factor2"] { w.mpint(k[name]!) }
            w.text("rsa")
        }
        return (add, SSHPublicKey(kind: .rsa(e: k["e"]!, n: k["n"]!)).blob)
    }

    static func sign(_ blob: [UInt8], _ data: [UInt8], flags: UInt32 = 0) -> [UInt8] {
        message(AgentMessage.signRequest) { w in
            w.string(blob)
            w.string(data)
            w.uint32(flags)
        }
    }
}

@Suite struct AgentHandlerTests {
    let handler = AgentHandler(store: AgentKeyStore(), confirm: { _ in false })

    /// The identities a list request returns: (blob, comment).
    func list(_ state: inout AgentConnectionState) throws -> [([UInt8], String)] {
        var r = SSHReader(handler.respond([AgentMessage.requestIdentities], state: &state))
        #expect(try r.byte() == AgentMessage.identitiesAnswer)
        var out: [([UInt8], String)] = []
        for _ in 0..<(try r.uint32()) { out.append((try r.string(), try r.text())) }
        #expect(r.isAtEnd)
        return out
    }

    /// The signature of a sign response, nil for a failure.
    func signature(_ reply: [UInt8]) throws -> [UInt8]? {
        var r = SSHReader(reply)
        guard try r.byte() == AgentMessage.signResponse else { return nil }
        let s = try r.string()
        #expect(r.isAtEnd)
        return s
    }

    @Test func eachKeyTypeIsAddedListedAndSignsWhatItsPublicKeyVerifies() throws {
        var state = AgentConnectionState()
        let keys = [try Keys.ed25519(), try Keys.ecdsa("nistp256"), try Keys.ecdsa("nistp384"), try Keys.ecdsa("nistp521"), try Keys.rsa()]
        for k in keys { #expect(handler.respond(k.add, state: &state) == [AgentMessage.success]) }
        #expect(try list(&state).map(\.0) == keys.map(\.blob))
        let data = Array("a userauth request, or an SSHSIG".utf8)
        for k in keys {
            let key = try SSHPublicKey.parse(k.blob)
            let flagsToTry: [UInt32] = key.typeName == "ssh-rsa" ? [0, 2, 4] : [0]
            for flags in flagsToTry {
                let sig = try #require(try signature(handler.respond(Keys.sign(k.blob, data, flags: flags), state: &state)))
                #expect(SSHSignature.verify(sig, of: data, by: key.kind), "\(key.typeName) flags \(flags)")
                #expect(!SSHSignature.verify(sig, of: data + [0], by: key.kind), "a signature of other data does not verify")
                var r = SSHReader(sig)
                #expect(try r.text() == SSHSignature.algorithm(for: key.kind, flags: flags))
            }
        }
        #expect(SSHSignature.algorithm(for: try SSHPublicKey.parse(keys[4].blob).kind, flags: 0) == "ssh-rsa", "no flag: SHA-1, as OpenSSH")
        // Removing one, then all.
        #expect(handler.respond(Keys.message(AgentMessage.removeIdentity) { $0.string(keys[0].blob) }, state: &state) == [AgentMessage.success])
        #expect(handler.respond(Keys.message(AgentMessage.removeIdentity) { $0.string(keys[0].blob) }, state: &state) == [AgentMessage.failure])
        #expect(try signature(handler.respond(Keys.sign(keys[0].blob, data), state: &state)) == nil, "a removed key no longer signs")
        #expect(handler.respond([AgentMessage.removeAllIdentities], state: &state) == [AgentMessage.success])
        #expect(try list(&state).isEmpty)
    }

    @Test func aPrivateKeyThatIsNotThePublicKeysIsRefused() throws {
        var state = AgentConnectionState()
        #expect(handler.respond(try Keys.ed25519(tamper: true).add, state: &state) == [AgentMessage.failure])
        // Found by the sshagent fuzz target (Fuzz/corpus/sshagent/regression-ed25519-seed-of-another-key):
        // the seed is checked too, not only the public half libsodium's sk_to_pk copies.
        #expect(handler.respond(try Keys.ed25519(tamperSeed: true).add, state: &state) == [AgentMessage.failure])
        var rsa = try Keys.rsa()
        rsa.add[rsa.add.count - 20] ^= 1 // inside q
        #expect(handler.respond(rsa.add, state: &state) == [AgentMessage.failure])
        #expect(try list(&state).isEmpty)
    }

    @Test func aLockedAgentListsNothingSignsNothingAndOpensOnlyWithItsPassphrase() throws {
        var state = AgentConnectionState()
        let k = try Keys.ed25519()
        #expect(handler.respond(k.add, state: &state) == [AgentMessage.success])
        let lock = Keys.message(AgentMessage.lock) { $0.text("hunter2") }
        #expect(handler.respond(lock, state: &state) == [AgentMessage.success])
        #expect(handler.respond(lock, state: &state) == [AgentMessage.failure], "locking twice fails")
        #expect(try list(&state).isEmpty)
        #expect(try signature(handler.respond(Keys.sign(k.blob, [1, 2, 3]), state: &state)) == nil)
        #expect(handler.respond(try Keys.ed25519().add, state: &state) == [AgentMessage.failure], "no key is added while locked")
        #expect(handler.respond(Keys.message(AgentMessage.unlock) { $0.text("hunter3") }, state: &state) == [AgentMessage.failure])
        #expect(handler.respond(Keys.message(AgentMessage.unlock) { $0.text("hunter2") }, state: &state) == [AgentMessage.success])
        #expect(try list(&state).count == 1)
        #expect(handler.respond(Keys.message(AgentMessage.lock) { $0.text("") }, state: &state) == [AgentMessage.failure], "no empty passphrase")
    }

    @Test func aKeyWithALifetimeIsGoneAfterIt() throws {
        var state = AgentConnectionState()
        let k = try Keys.ed25519(constraints: [AgentMessage.constrainLifetime, 0, 0, 0, 5])
        #expect(handler.respond(k.add, state: &state) == [AgentMessage.success])
        let left = try #require(handler.store.reap(now: MonotonicClock.seconds()))
        #expect(left > 0 && left <= 5)
        handler.store.reap(now: MonotonicClock.seconds() + 6)
        #expect(try list(&state).isEmpty)
    }

    @Test func aConfirmedKeySignsOnlyWhenThePersonAllows() throws {
        var state = AgentConnectionState()
        let k = try Keys.ed25519(comment: "work", constraints: [AgentMessage.constrainConfirm])
        #expect(handler.respond(k.add, state: &state) == [AgentMessage.success])
        #expect(try signature(handler.respond(Keys.sign(k.blob, [9]), state: &state)) == nil, "refused by the person")
        let prompts = PromptLog()
        let allowing = AgentHandler(store: handler.store, confirm: { prompts.append($0); return true })
        #expect(try signature(allowing.respond(Keys.sign(k.blob, [9]), state: &state)) != nil)
        #expect(prompts.lines.count == 1 && prompts.lines[0].contains("Allow use of key work?"))
    }

    @Test func aSessionBindNeedsTheHostKeysSignatureAndHidesKeysBoundElsewhere() throws {
        var state = AgentConnectionState()
        let hostSecret = try Ed25519.generate()
        let hostKey = SSHPublicKey(kind: .ed25519(publicKey: hostSecret.withUnsafeBytes { Array($0[32..<64]) }))
        let otherHost = SSHPublicKey(kind: .ed25519(publicKey: try Ed25519.generate().withUnsafeBytes { Array($0[32..<64]) }))
        let sid = randomBytes(32)
        func bind(_ signature: [UInt8]) -> [UInt8] {
            Keys.message(AgentMessage.extension) { w in
                w.text("session-bind@openssh.com")
                w.string(hostKey.blob)
                w.string(sid)
                w.string(signature)
                w.bool(false)
            }
        }
        var sig = SSHWriter()
        sig.text("ssh-ed25519")
        sig.string(try Ed25519.sign(sid, secretKey: hostSecret))
        var forged = sig.bytes
        forged[forged.count - 1] ^= 1
        // A key that may go only to another host.
        var hop = SSHWriter()
        hop.text(""); hop.text(""); hop.string([])
        var to = SSHWriter()
        to.text(""); to.text("elsewhere"); to.string([]); to.string(otherHost.blob); to.bool(false)
        var constraint = SSHWriter()
        constraint.string(hop.bytes); constraint.string(to.bytes); constraint.string([])
        var list1 = SSHWriter()
        list1.string(constraint.bytes)
        var ext = SSHWriter()
        ext.byte(AgentMessage.constrainExtension)
        ext.text("restrict-destination-v00@openssh.com")
        ext.string(list1.bytes)
        let restricted = try Keys.ed25519(comment: "restricted", constraints: ext.bytes)
        let free = try Keys.ed25519(comment: "free")
        #expect(handler.respond(restricted.add, state: &state) == [AgentMessage.success])
        #expect(handler.respond(free.add, state: &state) == [AgentMessage.success])
        #expect(try list(&state).count == 2, "an unbound (local) connection sees every key")
        #expect(handler.respond(bind(forged), state: &state) == [AgentMessage.failure], "a bind the host key did not sign")
        #expect(handler.respond(bind(sig.bytes), state: &state) == [AgentMessage.success])
        #expect(try list(&state).map(\.1) == ["free"], "bound to this host, the key restricted to another is hidden")
        #expect(handler.respond(bind(sig.bytes), state: &state) == [AgentMessage.failure], "a second bind after an authentication bind")
        #expect(try signature(handler.respond(Keys.sign(restricted.blob, [1]), state: &state)) == nil)
    }

    /// Random and mutated messages (every type but lock): every one gets a reply, none crashes,
    /// and the agent still serves afterwards.
    @Test func randomAndMutatedMessagesGetFailuresAndNoCrash() throws {
        var state = AgentConnectionState()
        let k = try Keys.ed25519()
        let seeds: [[UInt8]] = [k.add, Keys.sign(k.blob, [1, 2]), [AgentMessage.requestIdentities],
                                Keys.message(AgentMessage.extension) { $0.text("session-bind@openssh.com"); $0.string(k.blob) },
                                Keys.message(AgentMessage.unlock) { $0.text("x") }]
        for i in 0..<20_000 {
            var m: [UInt8]
            if i % 4 == 0 {
                m = randomBytes(Int(randomUniform(64)))
            } else {
                m = seeds[i % seeds.count]
                for _ in 0...Int(randomUniform(4)) where !m.isEmpty {
                    switch randomUniform(3) {
                    case 0: m[Int(randomUniform(UInt32(m.count)))] = UInt8(randomUniform(256))
                    case 1: m.removeLast(Int(randomUniform(UInt32(m.count))))
                    default: m.insert(UInt8(randomUniform(256)), at: Int(randomUniform(UInt32(m.count))))
                    }
                }
            }
            // A lock would make every later message wait out the failed-unlock delay: the lock
            // itself is tested above.
            if m.first == AgentMessage.lock { m[0] = AgentMessage.requestIdentities }
            #expect(!handler.respond(m, state: &state).isEmpty)
        }
        #expect(handler.respond(k.add, state: &state) == [AgentMessage.success])
        #expect(try signature(handler.respond(Keys.sign(k.blob, [7]), state: &state)) != nil)
    }

    @Test func mpintsAndLengthsAreReadStrictly() throws {
        var r = SSHReader([0, 0, 0, 1, 0x80])
        #expect(throws: SSHWireError.self) { try r.mpint() }
        r = SSHReader([0, 0, 0, 2, 0, 0x7f])
        #expect(throws: SSHWireError.self) { try r.mpint() }
        r = SSHReader([0, 0, 0, 2, 0, 0x80])
        #expect(try r.mpint() == [0x80])
        r = SSHReader([0xff, 0xff, 0xff, 0xff, 1])
        #expect(throws: SSHWireError.self) { try r.string() }
        var w = SSHWriter()
        w.mpint([0, 0, 0x80, 1])
        #expect(w.bytes == [0, 0, 0, 3, 0, 0x80, 1])
    }

    @Test func lifetimesReadAsOpenSSHReadsThem() {
        #expect(SSHAgentMain.parseLifetime("10") == 10)
        #expect(SSHAgentMain.parseLifetime("1h30m") == 5400)
        #expect(SSHAgentMain.parseLifetime("2W") == 1_209_600)
        #expect(SSHAgentMain.parseLifetime("x") == nil)
        #expect(SSHAgentMain.parseLifetime("") == nil)
    }
}

/// Prompts a test's confirm closure saw.
final class PromptLog: @unchecked Sendable {
    private(set) var lines: [String] = []
    func append(_ s: String) { lines.append(s) }
}
