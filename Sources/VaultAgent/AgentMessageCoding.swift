internal import VaultKit

// The agent's messages, coded by hand (see `WireKey`), in the JSON Swift's synthesized coding
// wrote before (docs/format.md). A case missing from an `encode(to:)` fails to compile; every case
// goes through both coders, Foundation's and WireJSON, in WireJSONTests.

extension AgentRequest {
    /// Encoded by hand with one key type (`WireKey`), in the shape Swift would synthesize
    /// (`{"case":{"label":value}}`): each synthesized case has its own `CodingKeys`, and in a
    /// statically linked vault the runtime scans every conformance record of the binary the first
    /// time it meets each of them (docs/performance.md).
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: WireKey.self)
        switch self {
        case .unlock(let root, let name, let generation, let idleSeconds, let hardLimitSeconds, let scope):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "unlock")
            try n.encode(root, forKey: "root")
            try n.encode(name, forKey: "name")
            try n.encode(generation, forKey: "generation")
            try n.encode(idleSeconds, forKey: "idleSeconds")
            try n.encode(hardLimitSeconds, forKey: "hardLimitSeconds")
            try n.encode(scope.rawValue, forKey: "scope")
        case .lock(let vault):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "lock")
            try n.encodeIfPresent(vault, forKey: "vault")
        case .status:
            _ = c.nestedContainer(keyedBy: WireKey.self, forKey: "status")
        case .probe(let vault):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "probe")
            try n.encode(vault, forKey: "vault")
        case .overview(let vault, let name):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "overview")
            try n.encode(vault, forKey: "vault")
            try n.encode(name, forKey: "name")
        case .freshMatchNonce(let vault, let name, let purpose):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "freshMatchNonce")
            try n.encode(vault, forKey: "vault")
            try n.encodeIfPresent(name, forKey: "name")
            try n.encode(purpose, forKey: "purpose")
        case .release(let vault, let name, let fields, let command, let freshMatch):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "release")
            try n.encode(vault, forKey: "vault")
            try n.encode(name, forKey: "name")
            try n.encode(fields, forKey: "fields")
            try n.encode(command, forKey: "command")
            try n.encodeIfPresent(freshMatch, forKey: "freshMatch")
        case .releaseSecret(let vault, let name, let field, let command, let freshMatch):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "releaseSecret")
            try n.encode(vault, forKey: "vault")
            try n.encode(name, forKey: "name")
            try n.encode(field, forKey: "field")
            try n.encode(command, forKey: "command")
            try n.encodeIfPresent(freshMatch, forKey: "freshMatch")
        case .list(let vault, let term, let from):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "list")
            try n.encode(vault, forKey: "vault")
            try n.encodeIfPresent(term, forKey: "term")
            try n.encodeIfPresent(from, forKey: "from")
        case .releaseAll(let vault, let command, let freshMatch):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "releaseAll")
            try n.encode(vault, forKey: "vault")
            try n.encode(command, forKey: "command")
            try n.encodeIfPresent(freshMatch, forKey: "freshMatch")
        case .contains(let vault, let name):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "contains")
            try n.encode(vault, forKey: "vault")
            try n.encode(name, forKey: "name")
        case .add(let vault, let item, let replace):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "add")
            try n.encode(vault, forKey: "vault")
            try n.encode(item, forKey: "item")
            try n.encode(replace, forKey: "replace")
        case .importItems(let vault, let items, let replace, let commit):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "importItems")
            try n.encode(vault, forKey: "vault")
            try n.encode(items, forKey: "items")
            try n.encode(replace, forKey: "replace")
            try n.encode(commit, forKey: "commit")
        case .update(let vault, let name, let change, let freshMatch):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "update")
            try n.encode(vault, forKey: "vault")
            try n.encode(name, forKey: "name")
            try n.encode(change, forKey: "change")
            try n.encodeIfPresent(freshMatch, forKey: "freshMatch")
        case .remove(let vault, let name):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "remove")
            try n.encode(vault, forKey: "vault")
            try n.encode(name, forKey: "name")
        case .audit(let vault, let limit):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "audit")
            try n.encode(vault, forKey: "vault")
            try n.encodeIfPresent(limit, forKey: "limit")
        case .sync(let vault):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "sync")
            try n.encode(vault, forKey: "vault")
        case .syncConflicts(let vault):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "syncConflicts")
            try n.encode(vault, forKey: "vault")
        }
    }

    /// Decodes the shape `encode(to:)` writes: exactly one key, the case.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: WireKey.self)
        guard let key = WireJSON.onlyKey(of: decoder, c) else {
            throw DecodingError.typeMismatch(AgentRequest.self, .init(codingPath: c.codingPath, debugDescription: "one key, the kind of message, expected"))
        }
        switch key.stringValue {
        case "unlock":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .unlock(root: try n.decode(String.self, forKey: "root"), name: try n.decode(String.self, forKey: "name"), generation: try n.decode(Int64.self, forKey: "generation"), idleSeconds: try n.decode(Double.self, forKey: "idleSeconds"), hardLimitSeconds: try n.decode(Double.self, forKey: "hardLimitSeconds"),
                           scope: try Self.scope(n.decodeIfPresent(String.self, forKey: "scope")))
        case "lock":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .lock(vault: try n.decodeIfPresent(String.self, forKey: "vault"))
        case "status":
            _ = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .status
        case "probe":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .probe(vault: try n.decode(String.self, forKey: "vault"))
        case "overview":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .overview(vault: try n.decode(String.self, forKey: "vault"), name: try n.decode(String.self, forKey: "name"))
        case "freshMatchNonce":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .freshMatchNonce(vault: try n.decode(String.self, forKey: "vault"), name: try n.decodeIfPresent(String.self, forKey: "name"), purpose: try n.decode(FreshMatchPurpose.Kind.self, forKey: "purpose"))
        case "release":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .release(vault: try n.decode(String.self, forKey: "vault"), name: try n.decode(String.self, forKey: "name"), fields: try n.decode(FieldSelection.self, forKey: "fields"), command: try n.decode(String.self, forKey: "command"), freshMatch: try n.decodeIfPresent(FreshMatchToken.self, forKey: "freshMatch"))
        case "releaseSecret":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .releaseSecret(vault: try n.decode(String.self, forKey: "vault"), name: try n.decode(String.self, forKey: "name"), field: try n.decode(ItemField.self, forKey: "field"), command: try n.decode(String.self, forKey: "command"), freshMatch: try n.decodeIfPresent(FreshMatchToken.self, forKey: "freshMatch"))
        case "list":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .list(vault: try n.decode(String.self, forKey: "vault"), term: try n.decodeIfPresent(String.self, forKey: "term"), from: try n.decodeIfPresent(Int.self, forKey: "from"))
        case "releaseAll":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .releaseAll(vault: try n.decode(String.self, forKey: "vault"), command: try n.decode(String.self, forKey: "command"), freshMatch: try n.decodeIfPresent(FreshMatchToken.self, forKey: "freshMatch"))
        case "contains":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .contains(vault: try n.decode(String.self, forKey: "vault"), name: try n.decode(String.self, forKey: "name"))
        case "add":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .add(vault: try n.decode(String.self, forKey: "vault"), item: try n.decode(Item.self, forKey: "item"), replace: try n.decode(Bool.self, forKey: "replace"))
        case "importItems":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .importItems(vault: try n.decode(String.self, forKey: "vault"), items: try n.decode([Item].self, forKey: "items"), replace: try n.decode(Bool.self, forKey: "replace"), commit: try n.decode(Bool.self, forKey: "commit"))
        case "update":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .update(vault: try n.decode(String.self, forKey: "vault"), name: try n.decode(String.self, forKey: "name"), change: try n.decode(ItemChange.self, forKey: "change"), freshMatch: try n.decodeIfPresent(FreshMatchToken.self, forKey: "freshMatch"))
        case "remove":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .remove(vault: try n.decode(String.self, forKey: "vault"), name: try n.decode(String.self, forKey: "name"))
        case "audit":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .audit(vault: try n.decode(String.self, forKey: "vault"), limit: try n.decodeIfPresent(Int.self, forKey: "limit"))
        case "sync":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .sync(vault: try n.decode(String.self, forKey: "vault"))
        case "syncConflicts":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .syncConflicts(vault: try n.decode(String.self, forKey: "vault"))
        default:
            throw DecodingError.dataCorrupted(.init(codingPath: c.codingPath + [key], debugDescription: "an unknown kind of message"))
        }
    }

    /// An unlock's scope; absent (an older client) is the default, the terminal.
    static func scope(_ raw: String?) throws -> SessionScope {
        guard let raw else { return .terminal }
        guard let scope = SessionScope(rawValue: raw) else {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "unknown session scope"))
        }
        return scope
    }
}

extension AgentReply {
    /// Encoded by hand with one key type (`WireKey`), in the shape Swift would synthesize
    /// (`{"case":{"label":value}}`): each synthesized case has its own `CodingKeys`, and in a
    /// statically linked vault the runtime scans every conformance record of the binary the first
    /// time it meets each of them (docs/performance.md).
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: WireKey.self)
        switch self {
        case .sessionOpen:
            _ = c.nestedContainer(keyedBy: WireKey.self, forKey: "sessionOpen")
        case .noSession:
            _ = c.nestedContainer(keyedBy: WireKey.self, forKey: "noSession")
        case .locked(let count):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "locked")
            try n.encode(count, forKey: "count")
        case .status(let pid, let sessions):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "status")
            try n.encode(pid, forKey: "pid")
            try n.encode(sessions, forKey: "sessions")
        case .overview(let overview):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "overview")
            try n.encode(overview, forKey: "overview")
        case .freshMatchNonce(let nonce):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "freshMatchNonce")
            try n.encode(nonce, forKey: "nonce")
        case .released(let overview):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "released")
            try n.encode(overview, forKey: "overview")
        case .releasedSecret:
            _ = c.nestedContainer(keyedBy: WireKey.self, forKey: "releasedSecret")
        case .listingPage(let next, let damaged, let version):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "listingPage")
            try n.encodeIfPresent(next, forKey: "next")
            try n.encode(damaged, forKey: "damaged")
            try n.encode(version, forKey: "version")
        case .releasedAll(let damaged):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "releasedAll")
            try n.encode(damaged, forKey: "damaged")
        case .contains(let exists):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "contains")
            try n.encode(exists, forKey: "exists")
        case .done:
            _ = c.nestedContainer(keyedBy: WireKey.self, forKey: "done")
        case .imported(let count, let committed):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "imported")
            try n.encode(count, forKey: "count")
            try n.encode(committed, forKey: "committed")
        case .synced(let sent, let received, let deleted, let merged, let retries, let conflicts, let head):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "synced")
            try n.encode(sent, forKey: "sent")
            try n.encode(received, forKey: "received")
            try n.encode(deleted, forKey: "deleted")
            try n.encode(merged, forKey: "merged")
            try n.encode(retries, forKey: "retries")
            try n.encode(conflicts, forKey: "conflicts")
            try n.encode(head, forKey: "head")
        case .syncConflicts(let records):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "syncConflicts")
            try n.encode(records, forKey: "records")
        case .audit(let records, let damaged):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "audit")
            try n.encode(records, forKey: "records")
            try n.encode(damaged, forKey: "damaged")
        case .failed(let error):
            var n = c.nestedContainer(keyedBy: WireKey.self, forKey: "failed")
            try n.encode(error, forKey: "error")
        }
    }

    /// Decodes the shape `encode(to:)` writes: exactly one key, the case.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: WireKey.self)
        guard let key = WireJSON.onlyKey(of: decoder, c) else {
            throw DecodingError.typeMismatch(AgentReply.self, .init(codingPath: c.codingPath, debugDescription: "one key, the kind of message, expected"))
        }
        switch key.stringValue {
        case "sessionOpen":
            _ = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .sessionOpen
        case "noSession":
            _ = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .noSession
        case "locked":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .locked(count: try n.decode(Int.self, forKey: "count"))
        case "status":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .status(pid: try n.decode(Int32.self, forKey: "pid"), sessions: try n.decode([SessionStatus].self, forKey: "sessions"))
        case "overview":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .overview(overview: try n.decode(ItemOverview.self, forKey: "overview"))
        case "freshMatchNonce":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .freshMatchNonce(nonce: try n.decode([UInt8].self, forKey: "nonce"))
        case "released":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .released(overview: try n.decode(ItemOverview.self, forKey: "overview"))
        case "releasedSecret":
            _ = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .releasedSecret
        case "listingPage":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .listingPage(next: try n.decodeIfPresent(Int.self, forKey: "next"), damaged: try n.decode([String].self, forKey: "damaged"), version: try n.decode(Int64.self, forKey: "version"))
        case "releasedAll":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .releasedAll(damaged: try n.decode([String].self, forKey: "damaged"))
        case "contains":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .contains(exists: try n.decode(Bool.self, forKey: "exists"))
        case "done":
            _ = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .done
        case "imported":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .imported(count: try n.decode(Int.self, forKey: "count"), committed: try n.decode(Bool.self, forKey: "committed"))
        case "synced":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .synced(sent: try n.decode(Int.self, forKey: "sent"), received: try n.decode(Int.self, forKey: "received"),
                           deleted: try n.decode(Int.self, forKey: "deleted"), merged: try n.decode(Bool.self, forKey: "merged"),
                           retries: try n.decode(Int.self, forKey: "retries"), conflicts: try n.decode([String].self, forKey: "conflicts"),
                           head: try n.decode(String.self, forKey: "head"))
        case "syncConflicts":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            let records = try n.decode([SyncConflict].self, forKey: "records")
            guard records.count <= AgentLimits.syncConflicts else {
                throw DecodingError.dataCorrupted(.init(codingPath: n.codingPath, debugDescription: "more than \(AgentLimits.syncConflicts) conflicts"))
            }
            self = .syncConflicts(records: records)
        case "audit":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .audit(records: try n.decode([AuditRecord].self, forKey: "records"), damaged: try n.decode(Int.self, forKey: "damaged"))
        case "failed":
            let n = try c.nestedContainer(keyedBy: WireKey.self, forKey: key)
            self = .failed(error: try n.decode(VaultError.self, forKey: "error"))
        default:
            throw DecodingError.dataCorrupted(.init(codingPath: c.codingPath + [key], debugDescription: "an unknown kind of message"))
        }
    }
}
