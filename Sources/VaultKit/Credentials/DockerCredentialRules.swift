import FoundationEssentials
internal import VaultSystem

/// The actions of docker's credential helper protocol (docker-credential-helpers).
package enum DockerCredentialAction: String, CaseIterable, Sendable {
    /// Keep the JSON credential on standard input.
    case store
    /// Answer with the credential for the server URL on standard input.
    case get
    /// Forget the credentials for the server URL on standard input.
    case erase
    /// Answer with every server URL and its username.
    case list
    /// Print the helper's version.
    case version
}

/// A failure of docker's helper protocol: the helper prints `message` as one line on standard
/// output (where docker reads a helper's errors) and exits 1.
package enum DockerCredentialError: Error, Equatable, Sendable {
    /// No credentials for the server; docker takes this exact message for "no such entry".
    case notFound
    /// Standard input named no server.
    case missingServerURL
    /// The credential to store has no username.
    case missingUsername
    /// Standard input is not what the action reads.
    case malformed(String)
    /// An action the protocol does not have.
    case unknownAction(String)

    /// The text of the line. For the first three it is the protocol's own wording, from
    /// docker-credential-helpers' `credentials` package (`isProtocolText`); the others are vault's
    /// messages, which the helper prints as `vault: error: ...`.
    package var message: String {
        switch self {
        case .notFound: "credentials not found in native keychain"
        case .missingServerURL: "no credentials server URL"
        case .missingUsername: "no credentials username"
        case .malformed(let m): m
        case .unknownAction(let a):
            "unknown credential action '\(a)' (\(DockerCredentialAction.allCases.map(\.rawValue).joinedText(separator: ", ")))"
        }
    }

    /// Whether `message` is the protocol's wording, printed as is.
    package var isProtocolText: Bool {
        switch self {
        case .notFound, .missingServerURL, .missingUsername: true
        case .malformed, .unknownAction: false
        }
    }
}

/// A credential docker hands to `store`: `{"ServerURL": ..., "Username": ..., "Secret": ...}`.
package struct DockerCredential: Equatable, Sendable {
    /// The server URL as docker wrote it: what the item keeps and `list` gives back.
    package var serverURL: String
    /// The server, normalised for comparing.
    package var server: CredentialTarget
    /// The username (never empty).
    package var username: String
    /// The secret (empty when docker sent none).
    package var secret: String

    /// Parses docker's JSON object. Field names match regardless of case, as Go's encoding/json
    /// reads them; a missing `Secret` is empty.
    /// - Throws: `.malformed` (not a JSON object, a field that is not a string, a server URL
    ///   `DockerCredentialRules.server(_:)` refuses), `.missingServerURL`, `.missingUsername`, in
    ///   that order of checking.
    package init(json bytes: [UInt8]) throws(DockerCredentialError) {
        guard let object = (try? JSONValue.parse(bytes[...], lenient: true))?.plainObject as? [String: Any] else {
            throw .malformed("standard input is not a JSON object with ServerURL, Username and Secret")
        }
        func field(_ name: String) throws(DockerCredentialError) -> String? {
            guard let v = object.first(where: { $0.key.lowercased() == name.lowercased() })?.value else { return nil }
            guard let s = v as? String else { throw .malformed("\(name) must be a string") }
            return s
        }
        guard let raw = try field("ServerURL"), !raw.isEmpty else { throw .missingServerURL }
        guard let username = try field("Username"), !username.isEmpty else { throw .missingUsername }
        let secret = try field("Secret") ?? ""
        server = try DockerCredentialRules.server(raw)
        serverURL = raw
        self.username = username
        self.secret = secret
    }
}

/// Which items are docker's, which serve a server, and what `store`, `get`, `erase` and `list`
/// do (`vault docker-credential`). Only items the docker helper made (origin `docker`) take part:
/// a login a person saved is neither listed, nor given, nor changed.
package enum DockerCredentialRules {
    /// The `origin` of the items the docker helper makes.
    package static let origin = "docker"

    /// The item audit records name as the releasing command.
    package static let auditCommand = "docker-credential"

    /// A server URL as docker writes it (`https://index.docker.io/v1/`, `registry:5000`,
    /// `ghcr.io`), normalised: https when it has no scheme (`host` or `//host`, as
    /// docker-credential-helpers' `registryurl` reads both), the default port and surrounding
    /// slashes dropped, lower case.
    /// - Throws: `.malformed` when it names no host, or a scheme other than https and http (a
    ///   registry speaks no other, and the reference helpers refuse them too).
    package static func server(_ raw: String) throws(DockerCredentialError) -> CredentialTarget {
        guard let t = place(raw) else { throw .malformed("not a server URL: \(raw)") }
        guard t.scheme == "https" || t.scheme == "http" else {
            throw .malformed("not a registry URL: \(raw) (the scheme must be https or http)")
        }
        return t
    }

    /// `raw` read as `server(_:)` reads it, without the scheme check; nil when it names no host.
    /// Also how the URLs of docker's items are read, so a URL stored as docker wrote it
    /// (`//host:5000`) serves the same requests it was stored by.
    static func place(_ raw: String) -> CredentialTarget? {
        let text = raw.trimmed()
        // `//host` is a URL without its scheme; CredentialTarget would take it for a path.
        guard let t = CredentialTarget(url: text.hasPrefix("//") ? "https:" + text : text, defaultScheme: "https"),
              !t.host.isEmpty else { return nil }
        return t
    }

    /// The server URL `get` and `erase` read: all of standard input, surrounding white space
    /// trimmed; returns it as written and normalised.
    /// - Throws: `.missingServerURL` when it is empty, `.malformed` when `server(_:)` refuses it.
    package static func serverURL(input bytes: [UInt8]) throws(DockerCredentialError) -> (text: String, server: CredentialTarget) {
        let raw = String(decoding: bytes, as: UTF8.self).trimmed()
        guard !raw.isEmpty else { throw .missingServerURL }
        return (raw, try server(raw))
    }

    /// The docker items with a URL naming the same place as `server` (scheme, host and path,
    /// as `CredentialTarget` normalises them), in the order of `items`.
    package static func items(serving server: CredentialTarget, in items: [Item]) -> [Item] {
        items.filter { i in
            i.origin == origin && i.urls.contains { server.samePlace(place($0)) }
        }
    }

    /// `store`: the first docker item for the server takes the new username, secret and URL as
    /// docker wrote it; otherwise a new item `docker/LABEL` (a free variant of that name) is added,
    /// tagged and marked `docker`.
    package static func store(_ credential: DockerCredential, items: [Item], now: Int64 = unixNow()) -> CredentialPlan {
        if let mine = self.items(serving: credential.server, in: items).first {
            var change = ItemChange()
            change.username = credential.username
            change.password = credential.secret
            change.urls = [credential.serverURL]
            return .update(mine.name, change)
        }
        let name = Item.freeName("docker/" + credential.server.label, taken: Set(items.map(\.name)))
        return .add(Item(name: name, username: credential.username, password: credential.secret,
                         urls: [credential.serverURL], tags: ["docker"], origin: origin, now: now))
    }

    /// `get`: the most recently modified docker item for the server, `.release(name)`.
    /// - Throws: `.notFound` when there is none.
    package static func get(_ server: CredentialTarget, items: [Item]) throws(DockerCredentialError) -> CredentialPlan {
        guard let newest = self.items(serving: server, in: items).max(by: { $0.modified < $1.modified }) else {
            throw .notFound
        }
        return .release(newest.name)
    }

    /// `erase`: every docker item for the server goes, `.remove(names)`.
    /// - Throws: `.notFound` when there is none.
    package static func erase(_ server: CredentialTarget, items: [Item]) throws(DockerCredentialError) -> CredentialPlan {
        let mine = self.items(serving: server, in: items)
        guard !mine.isEmpty else { throw .notFound }
        return .remove(mine.map(\.name))
    }

    /// `list`: each docker item's first URL (as docker wrote it) with its username (empty for
    /// none); of two items with the same URL, the later in `items` is listed.
    package static func list(_ items: [Item]) -> [String: String] {
        var listing: [String: String] = [:]
        for item in items where item.origin == origin {
            if let url = item.urls.first { listing[url] = item.username ?? "" }
        }
        return listing
    }
}
