import Foundation
import Testing
@testable import VaultAgent
import VaultKit
import VaultWire

/// `WireJSON`, the coder of the agent's, the authority's and the reader link's frames, against
/// Foundation's: each reads what the other writes, to equal values, for every kind of message.
@Suite struct WireJSONTests {
    static let item: Item = {
        var i = Item(name: "git/example.org", type: .login, username: "me", password: "p\"w\\é\n\u{1}", urls: ["https://x/y"],
                     notes: "two\nlines", tags: ["a", "b"], totp: nil, fields: [CustomField(name: "pin", kind: .hidden, value: "12")],
                     passwordHistory: [PasswordChange(password: "old", replaced: 5)], fingerprintLogin: true, origin: "bitwarden", now: 7)
        i.userPrompt = "User:"
        return i
    }()

    static let change: ItemChange = {
        var c = ItemChange()
        c.rename = "y"
        c.username = "u"
        c.clear = [.notes, .userPrompt]
        return c
    }()

    static let token = FreshMatchToken(vaultID: Array(repeating: 7, count: 16), nonce: Array(repeating: 1, count: 32), reusedAge: 12,
                                       macs: [Array(repeating: 2, count: 32), Array(repeating: 3, count: 32)])

    static let requests: [AgentRequest] = [
        .unlock(root: "/r", name: "n", generation: -3, idleSeconds: 120.5, hardLimitSeconds: 43200),
        .lock(vault: nil), .lock(vault: "/v"), .status, .probe(vault: "/v"), .overview(vault: "/v", name: "x"),
        .freshMatchNonce(vault: "/v", name: "x", purpose: .release), .freshMatchNonce(vault: "/v", name: nil, purpose: .releaseAll),
        .freshMatchNonce(vault: "/v", name: "x", purpose: .fingerprintLoginSwitch),
        .release(vault: "/v", name: "x", fields: .all, command: "get", freshMatch: nil),
        .release(vault: "/v", name: "x", fields: .fields([.password, .custom("pin"), .history, .custom("password")]), command: "get", freshMatch: nil),
        .releaseSecret(vault: "/v", name: "x", field: .custom("pin"), command: "get", freshMatch: nil),
        .release(vault: "/v", name: "x", fields: .fields([.password, .notes]), command: "get", freshMatch: token),
        .releaseSecret(vault: "/v", name: "x", field: .password, command: "get", freshMatch: nil),
        .releaseSecret(vault: "/v", name: "x", field: .password, command: "get",
                       freshMatch: FreshMatchToken(vaultID: [1], nonce: Array(repeating: 4, count: 32), reusedAge: nil, macs: [])),
        .releaseAll(vault: "/v", command: "export", freshMatch: token),
        .list(vault: "/v", term: nil, from: nil), .list(vault: "/v", term: "é", from: 1 << 40), .releaseAll(vault: "/v", command: "export"),
        .contains(vault: "/v", name: "x"), .add(vault: "/v", item: item, replace: true),
        .importItems(vault: "/v", items: [item, Item(name: "b", now: 1)], replace: false, commit: true),
        .update(vault: "/v", name: "x", change: change), .update(vault: "/v", name: "x", change: change, freshMatch: token),
        .remove(vault: "/v", name: "x"),
        .audit(vault: "/v", limit: nil), .audit(vault: "/v", limit: 10), .sync(vault: "/v"), .syncConflicts(vault: "/v"),
    ]

    static let replies: [AgentReply] = [
        .sessionOpen, .noSession, .locked(count: 2), .status(pid: 42, sessions: []), .overview(overview: ItemOverview(item)),
        .freshMatchNonce(nonce: Array(repeating: 9, count: 32)),
        .released(overview: ItemOverview(item)), .releasedSecret, .listingPage(next: nil, damaged: ["ab"], version: Int64.max),
        .releasedAll(damaged: []), .contains(exists: false), .done, .imported(count: 3, committed: true),
        .synced(sent: 1, received: 2, deleted: 0, merged: true, retries: 1, conflicts: ["'a' was added on two machines"], head: "ab12"),
        .syncConflicts(records: []),
        .syncConflicts(records: [SyncConflict(kind: "field", name: "mail", field: "username", kept: "a", lost: "b", secret: false, time: 9, text: "t"),
                                 SyncConflict(kind: "renamed", name: "x (2)", field: nil, kept: nil, lost: nil, secret: false, time: 1, text: "u"),
                                 SyncConflict(kind: "field", name: "bank", field: "password", kept: "", lost: "", secret: true, time: 2, text: "v")]),
        .failed(error: .usage("bad", hint: "a hint")), .failed(error: .itemNotFound("x")),
        .audit(records: [AuditRecord(item: "x", field: "password", command: "get", uid: 1000, pid: 42),
                         AuditRecord(item: "x", field: "password", command: "get", uid: 1000, pid: 43, executable: "/usr/bin/vault (deleted)")],
               damaged: 1),
        .status(pid: 7, sessions: [SessionStatus(vault: "/v", name: "n", idleLeft: 3, hardLeft: 9)]),
    ]

    @Test(arguments: requests)
    func requestsReadTheSameEitherWay(request: AgentRequest) throws {
        #expect(try JSONDecoder().decode(AgentRequest.self, from: Data(WireJSON.encode(request))) == request)
        #expect(try WireJSON.decode(AgentRequest.self, from: Array(JSONEncoder().encode(request))) == request)
        #expect(try WireJSON.decode(AgentRequest.self, from: WireJSON.encode(request)) == request)
    }

    @Test(arguments: replies)
    func repliesReadTheSameEitherWay(reply: AgentReply) throws {
        #expect(try JSONDecoder().decode(AgentReply.self, from: Data(WireJSON.encode(reply))) == reply)
        #expect(try WireJSON.decode(AgentReply.self, from: Array(JSONEncoder().encode(reply))) == reply)
    }

    /// A conflicts reply holds at most `AgentLimits.syncConflicts` records.
    @Test func aConflictsReplyIsBounded() throws {
        let one = SyncConflict(kind: "renamed", name: "x", field: nil, kept: nil, lost: nil, secret: false, time: 1, text: "t")
        let full = AgentReply.syncConflicts(records: Array(repeating: one, count: AgentLimits.syncConflicts))
        #expect(try WireJSON.decode(AgentReply.self, from: WireJSON.encode(full)) == full)
        let over = AgentReply.syncConflicts(records: Array(repeating: one, count: AgentLimits.syncConflicts + 1))
        #expect(throws: (any Error).self) { try WireJSON.decode(AgentReply.self, from: WireJSON.encode(over)) }
    }

    /// Data (prints on the reader link) is base64, as Foundation writes it.
    @Test func dataIsBase64() throws {
        struct M: Codable, Equatable { var print: Data; var prints: [Data] }
        let m = M(print: Data([0, 1, 2, 255]), prints: [Data(), Data("x".utf8)])
        let text = String(decoding: try WireJSON.encode(m), as: UTF8.self)
        #expect(text.contains(#""AAEC/w==""#), "\(text)")
        #expect(try JSONDecoder().decode(M.self, from: Data(text.utf8)) == m)
        #expect(try WireJSON.decode(M.self, from: Array(JSONEncoder().encode(m))) == m)
    }

    /// A message is an object of exactly one key, the kind: none, two (the same one twice too), or
    /// not an object at all is refused by this coder, which reads the key without `allKeys`.
    @Test func aMessageHasExactlyOneKey() {
        for json in [#"{}"#, #"{"probe":{"vault":"v"},"status":{}}"#, #"{"status":{},"status":{}}"#, #"[]"#, #""status""#, #"{"nope":{}}"#] {
            #expect(throws: (any Error).self, "\(json)") { try WireJSON.decode(AgentRequest.self, from: Array(json.utf8)) }
            #expect(throws: (any Error).self, "\(json)") { try WireJSON.decode(AgentReply.self, from: Array(json.utf8)) }
            // Foundation's decoder keeps the last of a key given twice, so it reads that one.
            if json != #"{"status":{},"status":{}}"# {
                #expect(throws: (any Error).self, "\(json) (Foundation)") { try JSONDecoder().decode(AgentRequest.self, from: Data(json.utf8)) }
            }
        }
        #expect((try? WireJSON.decode(AgentRequest.self, from: Array(#"{"status":{}}"#.utf8))) != nil)
        #expect((try? JSONDecoder().decode(AgentReply.self, from: Data(#"{"sessionOpen":{}}"#.utf8))) != nil)
    }

    /// Errors carry the coding path (never the value), as the frame checks report them.
    @Test func errorsNameThePath() {
        func path(_ json: String) -> String? {
            do {
                _ = try WireJSON.decode(AgentRequest.self, from: Array(json.utf8))
                return nil
            } catch let e as DecodingError {
                return describeDecodingError(e)
            } catch { return "\(error)" }
        }
        #expect(path(#"{"probe":{"vault":7}}"#) == "'probe.vault' has the wrong type")
        #expect(path(#"{"probe":{}}"#) == "'probe.vault' is missing")
        #expect(path(#"{"probe":{"vault":null}}"#) == "'probe.vault' is null")
        #expect(path(#"{"probe":"#) == "not a JSON request")
        #expect(path(#"{"audit":{"vault":"v","limit":1.5}}"#) == "'audit.limit' is invalid")
        #expect(throws: EncodingError.self) { _ = try WireJSON.encode(AgentRequest.unlock(root: "r", name: "n", generation: 0, idleSeconds: .nan, hardLimitSeconds: 1)) }
    }

    /// Fields travel as names (a custom one as `{"custom": NAME}`, so a custom field named like
    /// a built-in one stays custom); a selection of every secret as "all". These are the bytes
    /// of docs/format.md; a name that is no field is refused at decoding.
    @Test func fieldsTravelAsNamesAndAnUnknownNameIsRefused() throws {
        let release = AgentRequest.release(vault: "/v", name: "db", fields: .fields([.password, .custom("password"), .userPrompt]), command: "get")
        #expect(String(decoding: try WireJSON.encode(release), as: UTF8.self)
            == #"{"release":{"vault":"/v","name":"db","fields":["password",{"custom":"password"},"user-prompt"],"command":"get"}}"#)
        let all = AgentRequest.release(vault: "/v", name: "db", fields: .all, command: "get")
        #expect(String(decoding: try WireJSON.encode(all), as: UTF8.self) == #"{"release":{"vault":"/v","name":"db","fields":"all","command":"get"}}"#)
        let old = #"{"releaseSecret":{"vault":"/v","name":"db","field":"password","command":"get"}}"#
        #expect(try WireJSON.decode(AgentRequest.self, from: Array(old.utf8)) == .releaseSecret(vault: "/v", name: "db", field: .password, command: "get"))
        for bad in [#"{"release":{"vault":"/v","name":"db","fields":["pin"],"command":"get"}}"#,
                    #"{"release":{"vault":"/v","name":"db","fields":["all"],"command":"get"}}"#,
                    #"{"release":{"vault":"/v","name":"db","fields":"every","command":"get"}}"#,
                    #"{"release":{"vault":"/v","name":"db","fields":["Password"],"command":"get"}}"#,
                    #"{"releaseSecret":{"vault":"/v","name":"db","field":{"other":"pin"},"command":"get"}}"#,
                    #"{"update":{"vault":"/v","name":"db","change":{"clear":["everything"],"setFields":[],"removeFields":[]}}}"#] {
            #expect(throws: DecodingError.self, "\(bad)") { _ = try WireJSON.decode(AgentRequest.self, from: Array(bad.utf8)) }
            #expect(throws: DecodingError.self, "\(bad)") { _ = try JSONDecoder().decode(AgentRequest.self, from: Data(bad.utf8)) }
        }
    }
}
