// The fuzz target of VaultSSH (docs/fuzzing.md), and its smoke pass.
//
// One source for both runners: `Fuzz/run.sh sshagent` compiles this file, with VAULT_FUZZ_HARNESS
// defined (which leaves the tests out), next to a four-line libFuzzer entry point in
// `Fuzz/Targets/`; the suite at the end runs the same function over the corpus in `Fuzz/corpus/`
// and over seeded mutations of it, in-process, in a few seconds.
import Foundation
import VaultKit
import VaultSSH
import VaultSystem
#if !VAULT_FUZZ_HARNESS
import Testing
#endif

/// A broken promise found by the SSH agent's fuzz target.
struct SSHFuzzFinding: Error, CustomStringConvertible {
    let what: String
    var description: String { "sshagent: \(what)" }
}

/// The SSH agent's fuzz target: what it is fed and what it checks.
enum SSHFuzzTarget {
    /// The most messages of one input (as one connection would send them).
    static let messages = 16
    /// The most unlock attempts of one input: a wrong passphrase waits 0.1 s more after each failure.
    static let unlocks = 1

    /// A byte stream as an SSH agent client sends it on one connection: u32-length messages,
    /// read as `SSHAgentConnection` reads them (a length of 0 or over 256 KiB, or a message cut
    /// short, ends the connection), at most 16, each answered by `AgentHandler.respond` of a fresh
    /// agent (an empty key store, confirmations refused, a fixed clock). Checks: every message
    /// gets a reply of a type the protocol has (failure, success, identities answer, sign
    /// response, extension failure); an identities answer is well formed, with at most
    /// `AgentLimit.identities` keys whose blobs all parse; a locked agent lists nothing; a sign
    /// response carries a signature of the requested data by the requested key, with the
    /// algorithm its flags ask for; afterwards, once unlocked, remove-all leaves no key.
    static func run(_ input: [UInt8]) throws(SSHFuzzFinding) {
        let store = AgentKeyStore()
        let handler = AgentHandler(store: store, confirm: { _ in false }, now: { 1_700_000_000 })
        var state = AgentConnectionState()
        var offset = 0, unlocks = 0
        for _ in 0..<messages {
            guard input.count - offset >= 4 else { break }
            let length = input[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
            offset += 4
            guard length > 0, length <= AgentLimit.message, input.count - offset >= length else { break }
            let message = Array(input[offset..<(offset + length)])
            offset += length
            if message[0] == AgentMessage.unlock {
                unlocks += 1
                if unlocks > Self.unlocks { continue }
            }
            let reply = handler.respond(message, state: &state)
            try check(message, reply, locked: store.isLocked)
        }
        guard !store.isLocked else { return }
        guard handler.respond([AgentMessage.removeAllIdentities], state: &state) == [AgentMessage.success],
              handler.respond([AgentMessage.requestIdentities], state: &state) == [AgentMessage.identitiesAnswer, 0, 0, 0, 0] else {
            throw SSHFuzzFinding(what: "remove-all left keys")
        }
    }

    /// The checks of one reply to `message`.
    static func check(_ message: [UInt8], _ reply: [UInt8], locked: Bool) throws(SSHFuzzFinding) {
        guard let type = reply.first else { throw SSHFuzzFinding(what: "an empty reply") }
        var r = SSHReader(reply)
        _ = try? r.byte()
        switch type {
        case AgentMessage.failure, AgentMessage.extensionFailure:
            guard reply.count == 1 else { throw SSHFuzzFinding(what: "a failure with a body") }
        case AgentMessage.success:
            guard reply.count == 1 || message.first == AgentMessage.extension else { throw SSHFuzzFinding(what: "a success with a body") }
        case AgentMessage.identitiesAnswer:
            guard message.first == AgentMessage.requestIdentities else { throw SSHFuzzFinding(what: "keys listed for message \(message[0])") }
            guard let count = try? r.uint32(), count <= AgentLimit.identities else { throw SSHFuzzFinding(what: "a malformed key count") }
            guard !locked || count == 0 else { throw SSHFuzzFinding(what: "a locked agent listed \(count) keys") }
            for _ in 0..<count {
                guard let blob = try? r.string(), (try? r.text()) != nil else { throw SSHFuzzFinding(what: "a malformed identity") }
                guard (try? SSHPublicKey.parse(blob)) != nil else { throw SSHFuzzFinding(what: "a listed key that does not parse") }
            }
            guard r.isAtEnd else { throw SSHFuzzFinding(what: "bytes after the identities") }
        case AgentMessage.signResponse:
            guard !locked else { throw SSHFuzzFinding(what: "a locked agent signed") }
            try checkSignature(message, reply)
        default:
            throw SSHFuzzFinding(what: "a reply of type \(type)")
        }
    }

    /// A sign response to `message`: the signature is the requested key's over the requested
    /// data, with the algorithm the request's flags ask for.
    static func checkSignature(_ message: [UInt8], _ reply: [UInt8]) throws(SSHFuzzFinding) {
        var q = SSHReader(message)
        var r = SSHReader(reply)
        guard (try? q.byte()) == AgentMessage.signRequest, let blob = try? q.string(), let data = try? q.string(),
              let flags = try? q.uint32(), let key = try? SSHPublicKey.parse(blob) else {
            throw SSHFuzzFinding(what: "a signature for a message that is no sign request")
        }
        guard (try? r.byte()) == AgentMessage.signResponse, let signature = try? r.string(), r.isAtEnd else {
            throw SSHFuzzFinding(what: "a malformed sign response")
        }
        var s = SSHReader(signature)
        guard (try? s.text()) == SSHSignature.algorithm(for: key.kind, flags: flags) else {
            throw SSHFuzzFinding(what: "a signature of another algorithm than the flags ask for")
        }
        guard SSHSignature.verify(signature, of: data, by: key.kind) else {
            throw SSHFuzzFinding(what: "a signature that does not verify")
        }
    }
}

#if VAULT_FUZZ_HARNESS
/// The libFuzzer entry: a finding is printed and traps, so libFuzzer saves the input.
func libFuzzerEntry(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    do {
        try SSHFuzzTarget.run(Array(UnsafeBufferPointer(start: data, count: size)))
    } catch {
        fatalError("fuzz finding: \(error)")
    }
    return 0
}
#else

/// Seeded mutations (SplitMix64): bit flips, interesting bytes, insertions, deletions, splices,
/// and length fields rewritten to fit, so the smoke pass is the same on every run.
struct SSHCorpusMutator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    mutating func below(_ n: Int) -> Int { n <= 1 ? 0 : Int(next() % UInt64(n)) }

    /// One to four mutations of one message of `bytes` (a stream of u32-length messages), the
    /// message's length fixed afterwards half the time, so most mutations reach the handler.
    mutating func mutate(_ bytes: [UInt8], other: [UInt8]) -> [UInt8] {
        var messages: [[UInt8]] = []
        var offset = 0
        while bytes.count - offset >= 4 {
            let length = bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
            guard length > 0, bytes.count - offset - 4 >= length else { break }
            messages.append(Array(bytes[(offset + 4)..<(offset + 4 + length)]))
            offset += 4 + length
        }
        guard !messages.isEmpty else { return bytes + other.prefix(64) }
        let which = below(messages.count)
        var m = messages[which]
        for _ in 0...below(4) {
            let at = below(m.count + 1)
            switch below(6) {
            case 0 where !m.isEmpty: m[min(at, m.count - 1)] ^= UInt8(1) << UInt8(below(8))
            case 1 where !m.isEmpty: m[min(at, m.count - 1)] = [0, 0xff, 0x7f, 0x80, 1, 0x20][below(6)]
            case 2: m.insert(UInt8(truncatingIfNeeded: next()), at: at)
            case 3 where m.count > 1: m.removeSubrange(min(at, m.count - 1)..<min(m.count, at + 1 + below(8)))
            case 4 where !other.isEmpty:
                let start = below(other.count), end = min(other.count, start + 1 + below(32))
                m.insert(contentsOf: other[start..<end], at: at)
            default: m.append(UInt8(truncatingIfNeeded: next()))
            }
        }
        if m.isEmpty { m = [AgentMessage.requestIdentities] }
        messages[which] = m
        if below(4) == 0 { messages.append(messages[below(messages.count)]) }
        var w = SSHWriter()
        for message in messages { w.string(message) }
        if below(2) == 0, !w.bytes.isEmpty { w.bytes[below(w.bytes.count)] ^= UInt8(1) << UInt8(below(8)) }
        return w.bytes
    }
}

@Suite struct SSHFuzzSmokeTests {
    static func corpus() throws -> [[UInt8]] {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz/corpus/sshagent")
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
        return try names.map { Array(try Data(contentsOf: folder.appendingPathComponent($0))) }
    }

    /// Every corpus file, then seeded mutations: no finding, no trap.
    @Test func corpusAndMutationsHoldEveryPromise() throws {
        let corpus = try Self.corpus()
        #expect(corpus.count >= 10, "the corpus of sshagent is in Fuzz/corpus")
        var mutator = SSHCorpusMutator(seed: 0x7373_6861_6765_6e74)
        var inputs = corpus
        for i in 0..<600 { inputs.append(mutator.mutate(corpus[i % corpus.count], other: corpus[mutator.below(corpus.count)])) }
        for input in inputs {
            do { try SSHFuzzTarget.run(input) } catch { Issue.record("\(error) for input \(hexString(input))") }
        }
    }

    /// The corpus reaches what it is for: keys are added, listed and sign (a signature checked).
    @Test func theCorpusSignsAndTheChecksCanFail() throws {
        var signed = 0
        for input in try Self.corpus() {
            let handler = AgentHandler(store: AgentKeyStore(), confirm: { _ in false }, now: { 1_700_000_000 })
            var state = AgentConnectionState()
            var offset = 0
            while input.count - offset >= 4 {
                let length = input[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) }
                guard length > 0, input.count - offset - 4 >= length else { break }
                let message = Array(input[(offset + 4)..<(offset + 4 + length)])
                offset += 4 + length
                let reply = handler.respond(message, state: &state)
                guard reply.first == AgentMessage.signResponse else { continue }
                signed += 1
                try SSHFuzzTarget.checkSignature(message, reply)
                var bad = reply
                bad[bad.count - 1] ^= 1
                #expect(throws: SSHFuzzFinding.self) { try SSHFuzzTarget.checkSignature(message, bad) }
                var other = message
                other[other.count - 5] ^= 1 // the last byte of the data
                #expect(throws: SSHFuzzFinding.self) { try SSHFuzzTarget.checkSignature(other, reply) }
            }
        }
        #expect(signed >= 3, "the corpus has signatures of several key types")
        #expect(throws: SSHFuzzFinding.self) { try SSHFuzzTarget.check([AgentMessage.requestIdentities], [AgentMessage.identitiesAnswer, 0, 0, 0, 1], locked: false) }
        #expect(throws: SSHFuzzFinding.self) { try SSHFuzzTarget.check([AgentMessage.requestIdentities], [99], locked: false) }
    }
}
#endif
