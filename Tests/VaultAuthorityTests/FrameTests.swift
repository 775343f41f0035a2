import Foundation
import Testing
import VaultAuthority
import VaultKit

/// The frame codec, the request decoder and the handler behind them, with no socket.
@Suite struct FrameTests {
    static let slot = SlotReference(vaultID: Array(repeating: 7, count: 16), slotID: 3)
    static let proof = AuthorityProof(vaultID: Array(repeating: 7, count: 16), challenge: Array(repeating: 1, count: 32),
                                      mac: Array(repeating: 2, count: 32))
    /// One of every request, with its tail.
    static let samples: [(AuthorityRequest, [UInt8])] = [
        (.ping, []), (.fingers, []), (.reader(prefer: testSensor), []), (.challenge, []),
        (.bind(request: BindRequest(slot: slot, sensor: nil, rules: PasscodeRules(), proof: proof, confirm: ["left-thumb"], label: "work")),
         Array(repeating: 9, count: 32)),
        (.unlock(slot: slot, rules: PasscodeRules(), prompt: "touch", scanTimeout: 30), []),
        (.verify(slot: slot, nonce: Array(repeating: 5, count: 32), reuse: 60, prompt: "touch", scanTimeout: 30), []),
        (.recordPasscodeUnlock(proof: proof), []), (.beginPasscodeAttempt(vaultID: slot.vaultID), []),
        (.enroll(finger: "right-index", sensor: nil, proof: proof, label: nil, scanTimeout: 30), []),
        (.unenroll(finger: "right-index", proof: proof, label: "work"), []), (.resetPrints(proof: nil), []),
        (.status(slot: slot, sensor: testSensor, rules: PasscodeRules()), []),
        (.testSettings(bootID: "b", now: 5), []), (.cancel(reason: .fallback), []),
    ]

    @Test func everyRequestRoundTripsAndTheKeyStaysOutOfTheJSON() throws {
        let decoder = AuthorityFrameDecoder(limit: AuthorityLimits.requestFrame)
        var all: [UInt8] = []
        for (request, tail) in Self.samples { all += try AuthorityCodec.frame(request, tail: tail).encoded() }
        // Byte by byte: whole frames come out, in order.
        var decoded: [AuthorityRequest] = []
        for b in all {
            decoder.append([b])
            while let frame = try decoder.next() {
                decoded.append(try AuthorityCodec.request(frame))
                if case .bind = decoded.last! {
                    #expect(frame.tail == Array(repeating: 9, count: 32))
                    #expect(!String(decoding: frame.json, as: UTF8.self).contains("9,9,9"))
                }
            }
        }
        #expect(decoded == Self.samples.map(\.0))
        #expect(!decoder.hasPartialFrame)
    }

    @Test func theJSONIsOneKeyNamingTheKind() throws {
        let frame = try AuthorityCodec.frame(.cancel(reason: .fallback))
        #expect(String(decoding: frame.json, as: UTF8.self) == #"{"cancel":{"reason":"fallback"}}"#)
        let reply = AuthorityCodec.frame(.event(event: .noMatch(triesLeft: 2)))
        #expect(String(decoding: reply.json, as: UTF8.self) == #"{"event":{"event":{"noMatch":{"triesLeft":2}}}}"#)
        #expect(Array(frame.encoded()[0..<9]) == [0, 0, 0, UInt8(5 + frame.json.count), 2, 0, 0, 0, UInt8(frame.json.count)])
    }

    @Test func framesOverTheLimitOrMalformedAreRefusedFromTheHeader() {
        let cases: [([UInt8], AuthorityFrameError)] = [
            ([0xff, 0xff, 0xff, 0xff], .tooLarge(length: 0xffff_ffff, limit: AuthorityLimits.requestFrame)),
            ([0x00, 0x01, 0x00, 0x01], .tooLarge(length: (64 << 10) + 1, limit: AuthorityLimits.requestFrame)),
            ([0, 0, 0, 1, 9], .tooShort(length: 1)),
            ([0, 0, 0, 0], .tooShort(length: 0)),
            ([0, 0, 0, 9, 1, 0, 0, 0, 4, 1, 2, 3, 4], .unsupportedVersion(1)),
            ([0, 0, 0, 9, 2, 0, 0, 0, 5, 1, 2, 3, 4], .badJSONLength(5, frame: 9)),
        ]
        for (input, expected) in cases {
            let decoder = AuthorityFrameDecoder(limit: AuthorityLimits.requestFrame)
            decoder.append(input)
            #expect(throws: expected) { _ = try decoder.next() }
            #expect(expected.vaultError.exitCode == 2)
        }
    }

    /// Wrong types, missing fields, values out of bounds, keys where none belong: a usage error.
    @Test(arguments: [
        (#"{"bind":{"slot":{"vaultID":[1],"slotID":1},"rules":{"afterReboot":true,"intervalHours":1}}}"#, 0),
        (#"{"bind":{"slot":{"vaultID":[1],"slotID":1},"rules":{"afterReboot":true,"intervalHours":1}}}"#, 31),
        (#"{"fingers":{}}"#, 32),
        (#"{"unlock":{"slot":{"vaultID":[],"slotID":1},"rules":{"afterReboot":true,"intervalHours":1},"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"unlock":{"slot":{"vaultID":[1],"slotID":-1},"rules":{"afterReboot":true,"intervalHours":1},"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"unlock":{"slot":{"vaultID":[256],"slotID":1},"rules":{"afterReboot":true,"intervalHours":1},"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"unlock":{"slot":{"vaultID":[1],"slotID":1},"rules":{"afterReboot":true,"intervalHours":1},"prompt":"p","scanTimeout":"soon"}}"#, 0),
        (#"{"unlock":{"slot":{"vaultID":[1],"slotID":1e30},"rules":{"afterReboot":true,"intervalHours":1},"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"verify":{"slot":{"vaultID":[1],"slotID":1},"nonce":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32],"reuse":-1,"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"verify":{"slot":{"vaultID":[1],"slotID":1},"nonce":[1,2,3],"reuse":0,"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"verify":{"slot":{"vaultID":[1],"slotID":1},"reuse":0,"prompt":"p","scanTimeout":1}}"#, 0),
        (#"{"recordPasscodeUnlock":{"proof":{"vaultID":[1],"challenge":[1],"mac":[2]}}}"#, 0),
        (#"{"cancel":{"reason":"whenever"}}"#, 0),
        (#"{"enroll":{"finger":"","scanTimeout":1}}"#, 0),
        (#"{"uid":{"uid":0}}"#, 0),
        (#"{"ping":{},"fingers":{}}"#, 0),
        (#"[1,2,3]"#, 0), (#"null"#, 0), (#""#, 0),
    ])
    func malformedRequestsAreUsageErrors(json: String, tail: Int) throws {
        let frame = try AuthorityFrame(json: Array(json.utf8), tail: Array(repeating: 1, count: tail))
        #expect(throws: VaultError.self) { _ = try AuthorityCodec.request(frame) }
        do { _ = try AuthorityCodec.request(frame) } catch { #expect(error.exitCode == 2, "\(json): \(error)") }
    }

    @Test func aKeyInTheWrongReplyIsRefusedByTheClient() {
        let missing = AuthorityCodec.frame(.key(next: nil))
        #expect(throws: VaultError.self) { _ = try AuthorityCodec.reply(missing) }
        let extra = AuthorityCodec.frame(.done, tail: [1, 2, 3])
        #expect(throws: VaultError.self) { _ = try AuthorityCodec.reply(extra) }
    }

    @Test func scanTimeoutsAreClamped() {
        #expect(AuthorityLimits.scanTimeout(.nan) == 30)
        #expect(AuthorityLimits.scanTimeout(-1) == 30)
        #expect(AuthorityLimits.scanTimeout(.infinity) == 30)
        #expect(AuthorityLimits.scanTimeout(300) == 30)
        #expect(AuthorityLimits.scanTimeout(30.5) == 30)
        #expect(AuthorityLimits.scanTimeout(0.01) == 1)
        #expect(AuthorityLimits.scanTimeout(12) == 12)
    }

    /// 100,000 random and mutated frames through the decoder, the request decoder and the handler
    /// (as three uids, with a scripted reader): none crashes, none hangs, every one is answered or
    /// refused, and no key comes out without a binding.
    @Test(.timeLimit(.minutes(1))) func aHundredThousandRandomAndMutatedFramesAreRefusedOrAnswered() throws {
        let f = try HandlerFixture(testMode: false, script: [.noMatch])
        var generator = SplitMix(seed: 0x5eed_a07d)
        let valid = try Self.samples.map { try AuthorityCodec.frame($0.0, tail: $0.1).encoded() }
        var refused = 0, answered = 0, handled = 0, partial = 0
        for i in 0..<100_000 {
            var bytes: [UInt8]
            if i % 4 == 0 {
                bytes = (0..<Int(generator.next() % 48)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            } else {
                bytes = valid[Int(generator.next() % UInt64(valid.count))]
                for _ in 0..<(1 + Int(generator.next() % 3)) {
                    let at = Int(generator.next() % UInt64(bytes.count))
                    switch generator.next() % 4 {
                    case 0: bytes[at] = UInt8(truncatingIfNeeded: generator.next())
                    case 1: bytes.removeSubrange(at...)
                    case 2: bytes.insert(UInt8(truncatingIfNeeded: generator.next()), at: at)
                    default: bytes[at] ^= 1 << (generator.next() % 8)
                    }
                    if bytes.isEmpty { break }
                }
            }
            let decoder = AuthorityFrameDecoder(limit: AuthorityLimits.requestFrame)
            decoder.append(bytes)
            do {
                while let frame = try decoder.next() {
                    guard let request = try? AuthorityCodec.request(frame) else { refused += 1; continue }
                    if case .cancel = request { answered += 1; continue }
                    handled += 1
                    let r = f.handler.handle(frame: frame, session: ScanSession(uid: UInt32(1000 + i % 3), hasAccount: true))
                    #expect(r.tail.isEmpty || r.reply.isFinal)
                    if case .key = r.reply { Issue.record("a key without a binding: \(request)") }
                    answered += 1
                }
                // A truncated frame waits for the rest (the server's request deadline ends it).
                if decoder.hasPartialFrame { partial += 1 }
            } catch {
                refused += 1
            }
        }
        #expect(refused + answered + partial >= 100_000)
        #expect(refused > 10_000 && partial > 10_000 && handled > 100, "refused \(refused), partial \(partial), handled \(handled)")
    }
}

/// A small deterministic generator (SplitMix64), so a failing case can be replayed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }
}
