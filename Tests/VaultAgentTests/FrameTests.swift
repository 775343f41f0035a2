import Foundation
import Testing
import VaultAgent
import VaultKit

/// The frame codec and the request decoder, with no socket.
@Suite struct FrameTests {
    func bytes(_ request: AgentRequest, tail: [UInt8] = []) throws -> [UInt8] {
        try AgentCodec.frame(request, tail: tail).encoded()
    }

    @Test func aFrameArrivingByteByByteComesOutWhole() throws {
        let encoded = try bytes(.release(vault: "/v/vault.db", name: "db", fields: .fields([.password]), command: "get"))
        let decoder = AgentFrameDecoder(limit: AgentLimits.requestFrame)
        for (i, b) in encoded.enumerated() {
            decoder.append([b])
            let frame = try decoder.next()
            #expect((frame == nil) == (i < encoded.count - 1))
            if let frame {
                #expect(try AgentCodec.request(frame) == .release(vault: "/v/vault.db", name: "db", fields: .fields([.password]), command: "get"))
            }
        }
        #expect(!decoder.hasPartialFrame)
    }

    @Test func twoFramesInOneReadAndTheKeyTail() throws {
        let key = [UInt8](repeating: 7, count: 32)
        let unlock = AgentRequest.unlock(root: "/r", name: "default", generation: 1, idleSeconds: 120, hardLimitSeconds: 3600)
        let decoder = AgentFrameDecoder(limit: AgentLimits.requestFrame)
        decoder.append(try bytes(unlock, tail: key) + bytes(.status))
        let first = try #require(try decoder.next())
        #expect(first.tail == key)
        #expect(!String(decoding: first.json, as: UTF8.self).contains("\u{7}"))
        #expect(try AgentCodec.request(first) == unlock)
        #expect(try AgentCodec.request(try #require(try decoder.next())) == .status)
        #expect(try decoder.next() == nil)
    }

    @Test func framesOverTheLimitOrMalformedAreRefusedFromTheHeader() {
        let cases: [([UInt8], AgentFrameError)] = [
            ([0xff, 0xff, 0xff, 0xff], .tooLarge(length: 0xffff_ffff, limit: AgentLimits.requestFrame)),
            ([0x00, 0x40, 0x00, 0x01], .tooLarge(length: (4 << 20) + 1, limit: AgentLimits.requestFrame)),
            ([0, 0, 0, 1, 9], .tooShort(length: 1)),
            ([0, 0, 0, 0], .tooShort(length: 0)),
            // A version 1 frame: its body starts with the header length's high byte, 0.
            ([0, 0, 0, 8, 0, 0, 0, 4] + Array("nope".utf8), .unsupportedVersion(0)),
            ([0, 0, 0, 9, AgentFrame.version, 0, 0, 0, 5, 1, 2, 3, 4], .badJSONLength(5, frame: 9)),
        ]
        for (input, expected) in cases {
            let decoder = AgentFrameDecoder(limit: AgentLimits.requestFrame)
            decoder.append(input)
            #expect(throws: expected) { _ = try decoder.next() }
            #expect(expected.vaultError.exitCode == 2)
        }
    }

    @Test func anOversizedRequestIsRefusedBeforeItIsSent() {
        let big = Item(name: "big", notes: String(repeating: "x", count: AgentLimits.requestFrame))
        #expect(throws: VaultError.self) { _ = try AgentCodec.frame(.add(vault: "/v", item: big, replace: false)) }
        let fits = Item(name: "big", notes: String(repeating: "x", count: 3 << 20))
        #expect(throws: Never.self) { _ = try AgentCodec.frame(.add(vault: "/v", item: fits, replace: false)) }
    }

    /// Wrong JSON types, missing fields, values out of bounds: a usage error, never a crash.
    @Test(arguments: [
        #"{"add":{"vault":"/v/vault.db","item":"a string","replace":false}}"#,
        #"{"add":{"vault":"/v/vault.db","item":12345,"replace":false}}"#,
        #"{"add":{"vault":"/v/vault.db","item":[1,2],"replace":false}}"#,
        #"{"add":{"vault":"/v/vault.db","item":{"name":"x"},"replace":false}}"#,
        #"{"add":{"vault":"/v/vault.db","replace":false}}"#,
        #"{"update":{"vault":"/v/vault.db","name":"x","change":"everything"}}"#,
        #"{"release":{"vault":"/v/vault.db","name":3,"fields":["password"],"command":"get"}}"#,
        #"{"release":{"vault":"/v/vault.db","name":"db","fields":"password","command":"get"}}"#,
        #"{"release":{"vault":"/v/vault.db","name":"db","fields":[],"command":"get"}}"#,
        #"{"release":{"vault":"/v/vault.db","name":"db","command":"get"}}"#,
        #"{"release":{"vault":"relative.db","name":"db","fields":["password"],"command":"get"}}"#,
        #"{"unlock":{"root":"/r","name":"default","generation":1e19,"idleSeconds":1,"hardLimitSeconds":1}}"#,
        #"{"unlock":{"root":"/r","name":"default","generation":"1","idleSeconds":1,"hardLimitSeconds":1}}"#,
        #"{"unlock":{"root":"/r","name":"default","generation":1,"idleSeconds":"soon","hardLimitSeconds":1}}"#,
        #"{"unlock":{"root":"/r","name":"default","generation":1,"idleSeconds":null,"hardLimitSeconds":1}}"#,
        #"{"audit":{"vault":"/v/vault.db","limit":-1}}"#,
        #"{"audit":{"vault":"/v/vault.db","limit":1e300}}"#,
        #"{"lock":{"vault":7}}"#,
        #"{"status":{},"lock":{}}"#,
        #"{"shutdown":{}}"#,
        #"{"op":"item","vault":"/v/vault.db","name":"db"}"#,
        #"["status"]"#, #""status""#, "null", "42", "", "{", "{\"status\":", "\u{0}\u{1}",
        #"{"probe":{"vault":"/\#(String(repeating: "a", count: 5000))"}}"#,
        #"{"overview":{"vault":"/v/vault.db","name":"\#(String(repeating: "n", count: 1025))"}}"#,
        #"{"contains":{"vault":"/v/vault.db","name":""}}"#,
        String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000),
    ])
    func malformedRequestsAreUsageErrors(_ json: String) {
        do {
            let r = try AgentCodec.request(rawFrame(json))
            Issue.record("accepted \(r)")
        } catch {
            #expect(error.exitCode == 2, "\(error.message)")
            #expect(error.message.hasPrefix("malformed request") || error.message.contains("must be") || error.message.contains("negative")
                    || error.message.contains("release names"), "\(error.message)")
        }
    }

    @Test func extremeDurationsDecodeWithoutTrapping() throws {
        for text in ["1e19", "-1e300", "1e308", "0", "-0", "1e-300", "1e400", "-1e400"] {
            let json = #"{"unlock":{"root":"/r","name":"default","generation":1,"idleSeconds":\#(text),"hardLimitSeconds":\#(text)}}"#
            // Either decoded (the handler clamps) or refused as malformed: never a trap.
            if let r = try? AgentCodec.request(rawFrame(json, tail: [UInt8](repeating: 0, count: 32))) {
                guard case .unlock = r else { Issue.record("decoded as \(r)"); continue }
            }
        }
        #expect(AgentLimits.clamp(1e19, fallback: 120) == 7 * 86400)
        #expect(AgentLimits.clamp(.infinity, fallback: 120) == 7 * 86400)
        #expect(AgentLimits.clamp(-.infinity, fallback: 120) == 1)
        #expect(AgentLimits.clamp(.nan, fallback: 120) == 120)
        #expect(AgentLimits.clamp(-1e300, fallback: 120) == 1)
        #expect(AgentLimits.wholeSeconds(.nan) == 0)
        #expect(AgentLimits.wholeSeconds(1e19) == Int(Int32.max))
        #expect(AgentLimits.wholeSeconds(-.infinity) == Int(Int32.min))
    }

    @Test func aTailOnlyRidesOnUnlock() {
        #expect(throws: VaultError.self) { _ = try AgentCodec.request(rawFrame(#"{"status":{}}"#, tail: [1, 2, 3])) }
    }

    @Test func repliesRoundTripAndCarryErrorsAsVaultErrors() throws {
        let replies: [AgentReply] = [
            .noSession, .sessionOpen, .done, .locked(count: 2),
            .failed(error: .sessionInvalid("expired after 120 s idle")),
            .failed(error: .itemNotFound("db")),
            .status(pid: 9, sessions: [SessionStatus(vault: "/v/vault.db", name: "default", idleLeft: 5, hardLeft: 60)]),
        ]
        for r in replies {
            #expect(try AgentCodec.reply(AgentCodec.frame(r)) == r)
        }
        #expect(throws: VaultError.self) { _ = try AgentCodec.reply(rawFrame(#"{"ok":true}"#)) }
    }
}
