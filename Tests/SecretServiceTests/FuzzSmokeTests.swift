// The fuzz target of the Secret Service's method decoding (docs/fuzzing.md), and its smoke pass.
//
// One source for both runners, as for VaultKit's targets: `Fuzz/run.sh secret-service` compiles
// this file with VAULT_FUZZ_HARNESS defined next to `Fuzz/Targets/secret-service.swift`; the
// suite at the end runs the same function over `Fuzz/corpus/secret-service` and seeded mutations.
import Foundation
import SecretService
import VaultDBus
import VaultKit
#if !VAULT_FUZZ_HARNESS
import Testing
#endif

/// A broken promise of the decoding.
struct ServiceFuzzFinding: Error, CustomStringConvertible {
    let what: String
    var description: String { "secret-service: \(what)" }
}

/// The members a call may name (the input's first byte picks one, modulo the count), each with
/// an interface or none (a caller may leave the interface out).
let serviceFuzzMembers: [(String?, String)] = [
    ("org.freedesktop.Secret.Service", "OpenSession"), ("org.freedesktop.Secret.Service", "CreateCollection"),
    ("org.freedesktop.Secret.Service", "SearchItems"), ("org.freedesktop.Secret.Service", "Unlock"),
    ("org.freedesktop.Secret.Service", "Lock"), ("org.freedesktop.Secret.Service", "GetSecrets"),
    ("org.freedesktop.Secret.Service", "ReadAlias"), ("org.freedesktop.Secret.Service", "SetAlias"),
    ("org.freedesktop.Secret.Collection", "Delete"), ("org.freedesktop.Secret.Collection", "SearchItems"),
    ("org.freedesktop.Secret.Collection", "CreateItem"), ("org.freedesktop.Secret.Item", "Delete"),
    ("org.freedesktop.Secret.Item", "GetSecret"), ("org.freedesktop.Secret.Item", "SetSecret"),
    ("org.freedesktop.Secret.Session", "Close"), ("org.freedesktop.Secret.Prompt", "Prompt"),
    ("org.freedesktop.Secret.Prompt", "Dismiss"), ("org.freedesktop.DBus.Properties", "Get"),
    ("org.freedesktop.DBus.Properties", "GetAll"), ("org.freedesktop.DBus.Properties", "Set"),
    ("org.freedesktop.DBus.Introspectable", "Introspect"), ("org.freedesktop.DBus.Peer", "Ping"),
    (nil, "CreateItem"), (nil, "GetSecret"), (nil, "Get"), ("org.example.Other", "Frob"),
]

/// One input: a selector byte, then `PATH \0 SIGNATURE \0 BODY`, BODY the serialized GVariant of
/// the tuple `(SIGNATURE)` as GLib reads untrusted data. Checks: the arguments GLib read survive
/// serialization unchanged (what a reply is built from); decoding throws only `DBusError` (its
/// typed throws) and never traps; a decoded request's secret has the size GLib read; a client's
/// public key (the body as bytes) makes a session key or a `SessionCryptoError`; decrypting the
/// body under a fresh key gives bytes no longer than the body, or `.badCiphertext`.
func serviceFuzz(_ bytes: [UInt8]) throws(ServiceFuzzFinding) {
    guard let selector = bytes.first else { return }
    let (interface, member) = serviceFuzzMembers[Int(selector) % serviceFuzzMembers.count]
    let parts = bytes.dropFirst().split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
    let path = String(decoding: parts.first ?? [], as: UTF8.self)
    let signature = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : ""
    let body = parts.count > 2 ? Array(parts[2]) : []
    var arguments: [DBusValue] = []
    if let tuple = dbusValue(serialized: body, signature: "(" + signature + ")"), case .structure(let items) = tuple {
        arguments = items
        guard tuple.containsUnsupported || serialized(tuple).flatMap({ dbusValue(serialized: $0, signature: tuple.signature) }) == tuple else {
            throw ServiceFuzzFinding(what: "\(tuple.signature) changed through serialization")
        }
    }
    do {
        let request = try SecretRequest.decode(path: path, interface: interface, member: member, arguments: arguments)
        switch request {
        case .createItem(_, _, let secret, _), .setSecret(_, let secret):
            guard case .structure(let fields) = arguments.first(where: { $0.signature == "(oayays)" }) ?? .structure([]),
                  fields.count == 4, case .bytes(let value) = fields[2], value.count == secret.value.count else {
                throw ServiceFuzzFinding(what: "a decoded secret is not the one sent")
            }
        default: break
        }
    } catch let e as ServiceFuzzFinding {
        throw e
    } catch {
        // DBusError: a D-Bus error reply, as the service sends it.
    }
    // The key exchange costs two 1024-bit exponentiations: one input in eight tries it.
    if selector & 7 == 0, body.count <= 256 {
        do { _ = try DHSessionKey(peer: body) } catch {
            guard error == .badPublicKey else { throw ServiceFuzzFinding(what: "a public key gave \(error)") }
        }
    }
    if let key = serviceFuzzKey {
        let iv = Array(body.prefix(16))
        do {
            let plain = try key.decrypt(iv: iv, body)
            guard plain.count <= body.count else { throw ServiceFuzzFinding(what: "decryption grew the input") }
        } catch let e as ServiceFuzzFinding {
            throw e
        } catch {
            guard let e = error as? SessionCryptoError, e == .badCiphertext else { throw ServiceFuzzFinding(what: "decryption gave \(error)") }
        }
    }
}

/// The session key the target decrypts under (made once).
let serviceFuzzKey = try? DHSessionKey(peer: [2])

#if VAULT_FUZZ_HARNESS
/// The libFuzzer entry: a finding is printed and traps, so libFuzzer saves the input.
func libFuzzerEntry(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    do {
        try serviceFuzz(Array(UnsafeBufferPointer(start: data, count: size)))
    } catch {
        fatalError("fuzz finding: \(error)")
    }
    return 0
}
#else

/// The corpus, as kept in the repository.
func serviceCorpus() throws -> [[UInt8]] {
    let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/corpus/secret-service")
    let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { !$0.hasPrefix(".") }.sorted()
    return try names.map { Array(try Data(contentsOf: folder.appendingPathComponent($0))) }
}

/// SplitMix64 mutations (the same kinds as VaultKit's smoke pass).
struct ServiceMutator {
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
    mutating func mutate(_ bytes: [UInt8], other: [UInt8]) -> [UInt8] {
        var b = bytes
        for _ in 0...below(4) {
            let at = below(b.count + 1)
            switch below(6) {
            case 0 where !b.isEmpty: b[min(at, b.count - 1)] ^= UInt8(1) << UInt8(below(8))
            case 1 where !b.isEmpty: b[min(at, b.count - 1)] = [0, 0xff, 0x7f, 0x80, 0x28, 0x29, 0x61, 0x7b][below(8)]
            case 2: b.insert(UInt8(truncatingIfNeeded: next()), at: at)
            case 3 where !b.isEmpty: b.removeSubrange(min(at, b.count - 1)..<min(b.count, at + 1 + below(8)))
            case 4 where !other.isEmpty:
                let start = below(other.count), end = min(other.count, start + 1 + below(32))
                b.insert(contentsOf: other[start..<end], at: at)
            default: b.append(UInt8(truncatingIfNeeded: next()))
            }
        }
        return b
    }
}

@Suite struct ServiceFuzzSmokeTests {
    /// Every corpus file, then seeded mutations: no finding, no trap.
    @Test func corpusAndMutationsHoldEveryPromise() throws {
        let corpus = try serviceCorpus()
        #expect(corpus.count >= 10, "the corpus is in Fuzz/corpus/secret-service")
        var mutator = ServiceMutator(seed: 0x7373_6563_7265_74)
        var inputs = corpus
        for i in 0..<3000 { inputs.append(mutator.mutate(corpus[i % corpus.count], other: corpus[mutator.below(corpus.count)])) }
        for input in inputs {
            do { try serviceFuzz(input) } catch { Issue.record("\(error) for input \(input)") }
        }
    }
}
#endif
