import Foundation
import VaultKit

/// Thrown by a command that has already told its caller what went wrong, in the form the caller's
/// protocol wants (the docker helper: one line on stdout; the git helper: one `vault: error:` line),
/// so the one exit path only has to return `exitCode`.
struct ReportedFailure: Error {
    /// The process exit code.
    let exitCode: Int32
}

/// The credential helpers for git and docker: the `vault` binary run as `git-credential-vault` or
/// `docker-credential-vault` (argv[0]), or the verbs `vault git-credential ACTION` and
/// `vault docker-credential ACTION`. Both store ordinary vault items marked with an `origin`, read
/// the vault through `openAccess` (the unlock session when one is open) and never prompt.
enum CredentialHelpers {
    /// The program a credential helper is started as, recognised by argv[0]'s last path component.
    enum Program: Equatable {
        case git, docker

        /// The helper that `argv0` names, or nil for plain `vault`.
        init?(argv0: String) {
            switch argv0.split(separator: "/").last.map(String.init) ?? argv0 {
            case "git-credential-vault": self = .git
            case "docker-credential-vault": self = .docker
            default: return nil
            }
        }
    }

    /// The verbs, for the command table.
    static var commands: [CommandSpec] { [git, docker] }

    /// Verb names that `vault help` leaves out of its overview: programs call them, people rarely do.
    static let unlistedNames: Set<String> = ["git-credential", "docker-credential", "clipboard-clear"]

    /// Runs the helper `program` with the arguments after argv[0]; returns the exit code.
    static func main(_ program: Program, _ arguments: [String], context ctx: CommandContext) -> Int32 {
        switch program {
        case .git:
            return VaultCLI.run(["git-credential"] + arguments, context: ctx)
        case .docker:
            // Docker reads a helper's errors from stdout, usage errors included.
            do {
                guard let inv = try Parser.parse(["docker-credential"] + arguments, table: [docker]) else { return 0 }
                if inv.flags.contains("--help") {
                    ctx.stdout.write(Help.command(inv.command))
                    return 0
                }
                try runDocker(inv, ctx)
                return 0
            } catch let e as ReportedFailure {
                return e.exitCode
            } catch {
                ctx.stdout.write(dockerMessage(error) + "\n")
                return 1
            }
        }
    }

    /// The item list a helper reads, damaged rows left out. Through the unlock session the list
    /// carries no passwords: read an item itself with `item(named:)` for its secret.
    static func readableItems(_ vault: any VaultAccess) throws -> [Item] {
        try vault.allItems().compactMap { if case .item(let i) = $0 { i } else { nil } }
    }

    /// The invocation with `--no-input` set: a helper runs under another program, with no one to
    /// answer a prompt (a finger on the reader, the session or `--passcode-fd` still unlock).
    static func withoutPrompts(_ inv: Invocation) -> Invocation {
        var inv = inv
        inv.flags.insert("--no-input")
        return inv
    }

    /// An error's message with its hint in parentheses: the helpers' callers show one line.
    static func oneLine(_ e: VaultError) -> String {
        e.hint.map { "\(e.message) (\($0))" } ?? e.message
    }

    /// A name for a new helper-made item: `base`, or `base 2`, `base 3`, ... when taken.
    static func freeName(_ base: String, taken: Set<String>) -> String {
        if !taken.contains(base) { return base }
        var n = 2
        while taken.contains("\(base) \(n)") { n += 1 }
        return "\(base) \(n)"
    }

    /// Everything on standard input up to end of file, or up to a blank line when `untilBlankLine`
    /// (git's format); at most 1 MiB.
    static func readInput(_ ctx: CommandContext, untilBlankLine: Bool) throws -> [UInt8] {
        let limit = 1 << 20
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = Glibc.read(ctx.stdinFD, &byte, 1)
            if n < 0 {
                if errno == EINTR { continue }
                throw VaultError.io(path: "standard input", String(cString: strerror(errno)))
            }
            if n == 0 { break }
            if untilBlankLine && byte == 10 && (bytes.isEmpty || bytes.last == 10) { break }
            guard bytes.count < limit else { throw VaultError.usage("standard input is longer than 1 MiB") }
            bytes.append(byte)
        }
        byte = 0
        return bytes
    }

    /// Overwrites a buffer that held a secret.
    static func wipe(_ bytes: inout [UInt8]) {
        for i in bytes.indices { bytes[i] = 0 }
        bytes.removeAll()
    }
}

/// A credential's place reduced to what the helpers compare: the scheme, `host[:port]` in lower case
/// without the scheme's default port, and the path without surrounding slashes.
struct CredentialTarget {
    var scheme: String
    var host: String
    var path: String
    /// The user named in the URL (`https://me@host`), percent-decoded.
    var username: String?
    /// The password named in the URL, percent-decoded (git's `url=` may carry one).
    var password: String?

    init(scheme: String, host: String, path: String) {
        self.scheme = scheme.lowercased()
        self.host = CredentialTarget.normalize(host: host, scheme: self.scheme)
        self.path = CredentialTarget.trimSlashes(path)
    }

    /// Parses `scheme://[user[:password]@]host[:port][/path][?query][#fragment]`; a URL without
    /// `scheme://` takes `defaultScheme` (nil: such a URL is refused).
    init?(url raw: String, defaultScheme: String?) {
        var rest = Substring(raw.trimmingCharacters(in: .whitespacesAndNewlines))
        let scheme: String
        if let r = rest.range(of: "://") {
            scheme = String(rest[..<r.lowerBound])
            rest = rest[r.upperBound...]
        } else if let d = defaultScheme, !rest.isEmpty {
            scheme = d
        } else {
            return nil
        }
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }) else { return nil }
        if let cut = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<cut] }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        var authority = rest[..<slash]
        let path = rest[slash...]
        var user: String?, password: String?
        if let at = authority.lastIndex(of: "@") {
            let info = authority[..<at]
            authority = authority[authority.index(after: at)...]
            if let colon = info.firstIndex(of: ":") {
                user = CredentialTarget.decode(info[..<colon])
                password = CredentialTarget.decode(info[info.index(after: colon)...])
            } else {
                user = CredentialTarget.decode(info)
            }
        }
        self.init(scheme: scheme, host: CredentialTarget.decode(authority), path: CredentialTarget.decode(path))
        username = user
        self.password = password
    }

    /// Whether both name the same place (scheme, host and path; the user in the URL does not count).
    func samePlace(_ other: CredentialTarget?) -> Bool {
        guard let other else { return false }
        return scheme == other.scheme && host == other.host && path == other.path
    }

    /// `scheme://host[/path]`: the URL a helper-made item keeps.
    var url: String { scheme + "://" + host + (path.isEmpty ? "" : "/" + path) }

    /// A readable item name part: `host[/path]`, with `scheme:` in front when it is not https.
    var label: String {
        let raw = (scheme == "https" ? "" : scheme + ":") + host + (path.isEmpty ? "" : "/" + path)
        let parts = raw.split(separator: "/", omittingEmptySubsequences: false).map { $0 == "." || $0 == ".." ? "_" : String($0) }
        let clean = String(parts.joined(separator: "/").unicodeScalars.filter { $0.properties.generalCategory != .control })
        return String(clean.prefix(200))
    }

    static func decode(_ s: Substring) -> String { String(s).removingPercentEncoding ?? String(s) }

    static func trimSlashes(_ s: String) -> String { s.trimmingCharacters(in: CharacterSet(charactersIn: "/")) }

    static func normalize(host: String, scheme: String) -> String {
        let h = host.lowercased()
        for (s, port) in [("https", ":443"), ("http", ":80")] where scheme == s && h.hasSuffix(port) {
            return String(h.dropLast(port.count))
        }
        return h
    }
}

// MARK: - git

/// One credential description as git writes it (gitcredentials(7), git-credential(1)): `key=value`
/// lines up to a blank line or end of input. Unknown keys (`capability[]`, `wwwauth[]`, ...) are ignored.
struct GitCredentialRequest {
    var scheme: String?
    var host: String?
    var path: String?
    var username: String?
    var password: String?

    /// Parses git's format; `url=` stands for its parts and, as in git, clears what came before it.
    init(parsing bytes: [UInt8]) {
        for line in bytes.split(separator: 10, omittingEmptySubsequences: true) {
            guard let eq = line.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = String(decoding: line[line.startIndex..<eq], as: UTF8.self)
            let value = String(decoding: line[(eq + 1)...], as: UTF8.self)
            switch key {
            case "protocol": scheme = value
            case "host": host = value
            case "path": path = value
            case "username": username = value
            case "password": password = value
            case "url":
                self = GitCredentialRequest(parsing: [])
                if let t = CredentialTarget(url: value, defaultScheme: nil) {
                    scheme = t.scheme
                    host = t.host
                    if !t.path.isEmpty { path = t.path }
                    username = t.username
                    password = t.password
                }
            default: continue
            }
        }
    }

    /// Where the credential is used; nil without a protocol (nothing can match then).
    var target: CredentialTarget? {
        guard let scheme, !scheme.isEmpty else { return nil }
        return CredentialTarget(scheme: scheme, host: host ?? "", path: path ?? "")
    }
}

extension CredentialHelpers {
    /// The `origin` of items the git helper stores.
    static let gitOrigin = "git"

    static let git = CommandSpec(
        name: "git-credential", summary: "git's credential helper: get, store, erase (git runs it)",
        usage: "vault [--vault NAME] [--passcode-fd N] git-credential get|store|erase",
        options: Auth.options,
        arguments: 1...1,
        examples: """
        ln -s "$(command -v vault)" ~/.local/bin/git-credential-vault
        git config --global credential.helper vault
        git config --global credential.helper 'vault --vault work'
        git config --global credential.helper '!vault --vault work git-credential'
        printf 'protocol=https\\nhost=example.com\\n\\n' | vault git-credential get
        """,
        run: { inv, ctx in
            do {
                try runGit(withoutPrompts(inv), ctx)
            } catch let e as VaultError {
                // One line: git shows a helper's stderr to the person and carries on without it.
                ctx.stderr.write("vault: error: \(oneLine(e))\n")
                throw ReportedFailure(exitCode: e.exitCode)
            }
        })

    /// Whether the item URL `item` serves the request `request`: same scheme and host, and the same
    /// path when the item names one (a trailing `.git` is not significant).
    static func gitMatches(_ item: CredentialTarget, _ request: CredentialTarget) -> Bool {
        func bare(_ p: String) -> String { p.hasSuffix(".git") ? String(p.dropLast(4)) : p }
        return item.scheme == request.scheme && item.host == request.host
            && (item.path.isEmpty || bare(item.path) == bare(request.path))
    }

    /// The item URL of `item` that serves `request` best (one with a path first), or nil.
    static func gitMatch(_ item: Item, _ request: CredentialTarget) -> CredentialTarget? {
        let serving = item.urls.compactMap { CredentialTarget(url: $0, defaultScheme: "https") }.filter { gitMatches($0, request) }
        return serving.first { !$0.path.isEmpty } ?? serving.first
    }

    /// The items of `origins` (nil: made by a person) that serve `request`, with the URL that does.
    /// Only names, URLs and usernames are read here: a listing through the session has no secrets,
    /// so a caller reads the one item it settles on with `item(named:)`.
    static func gitCandidates(_ vault: any VaultAccess, _ request: GitCredentialRequest, _ target: CredentialTarget,
                              origins: Set<String?>, items: [Item]? = nil) throws -> [(Item, CredentialTarget)] {
        try (items ?? readableItems(vault)).compactMap { item in
            guard origins.contains(item.origin), request.username == nil || item.username == request.username,
                  let url = gitMatch(item, target) else { return nil }
            return (item, url)
        }
    }

    /// A value git's line format can carry.
    static func gitSafe(_ s: String) -> Bool { !s.contains("\n") && !s.contains("\0") }

    static func runGit(_ inv: Invocation, _ ctx: CommandContext) throws {
        var input = try readInput(ctx, untilBlankLine: true)
        let request = GitCredentialRequest(parsing: input)
        wipe(&input)
        let action = inv.arguments[0]
        // gitcredentials(7): an action a helper does not know is ignored, silently.
        guard ["get", "store", "erase"].contains(action), let target = request.target else { return }
        switch action {
        case "get":
            let vault = try openAccess(inv, ctx, purpose: "git credentials for \(target.host)")
            // Items people made count too; logins other helpers made (docker) do not.
            let found = try gitCandidates(vault, request, target, origins: [nil, gitOrigin]).sorted { a, b in
                let pa = a.1.path.isEmpty ? 0 : 1, pb = b.1.path.isEmpty ? 0 : 1
                return pa != pb ? pa > pb : a.0.modified > b.0.modified
            }
            for (listed, _) in found {
                guard try vault.overview(named: listed.name).hasPassword else { continue }
                let item = try vault.release(named: listed.name, fields: ["password"], command: "git-credential")
                guard let password = item.password, gitSafe(password), gitSafe(item.username ?? "") else { continue }
                var out = ""
                if let u = item.username { out += "username=\(u)\n" }
                out += "password=\(password)\n"
                ctx.stdout.write(out)
                return
            }

        case "store":
            guard let password = request.password, gitSafe(password) else { return }
            let vault = try openAccess(inv, ctx, purpose: "save git credentials for \(target.host)")
            let items = try readableItems(vault)
            // git stores after every successful use: a login the vault already gives is left alone.
            for (listed, _) in try gitCandidates(vault, request, target, origins: [nil, gitOrigin], items: items)
            where listed.username == request.username {
                if try vault.release(named: listed.name, fields: ["password"], command: "git-credential store").password == password { return }
            }
            if let mine = items.first(where: { i in
                i.origin == gitOrigin && i.username == request.username
                    && i.urls.contains { target.samePlace(CredentialTarget(url: $0, defaultScheme: "https")) }
            }) {
                var change = ItemChange()
                change.password = password
                try vault.update(mine.name, change)
                return
            }
            let base = "git/" + target.label + (request.username.map { " (\($0))" } ?? "")
            let name = freeName(base, taken: Set(items.map(\.name)))
            try vault.add(Item(name: name, username: request.username, password: password, urls: [target.url],
                               tags: ["git"], origin: gitOrigin), replace: false)

        default:
            let vault = try openAccess(inv, ctx, purpose: "erase git credentials for \(target.host)")
            for (listed, _) in try gitCandidates(vault, request, target, origins: [gitOrigin]) {
                if let password = request.password,
                   try vault.release(named: listed.name, fields: ["password"], command: "git-credential erase").password != password { continue }
                try vault.remove(listed.name)
            }
        }
    }
}

// MARK: - docker

/// A failure of the docker helper protocol, printed on stdout with exit 1.
enum DockerHelperError: Error {
    /// The message docker recognises as "no such entry" (docker-credential-helpers' credentials package).
    case notFound
    case missingServerURL
    case missingUsername
    case malformed(String)
    case unknownAction(String)

    var message: String {
        switch self {
        case .notFound: "credentials not found in native keychain"
        case .missingServerURL: "no credentials server URL"
        case .missingUsername: "no credentials username"
        case .malformed(let m): "vault: error: \(m)"
        case .unknownAction(let a): "vault: error: unknown credential action '\(a)' (store, get, erase, list, version)"
        }
    }
}

extension CredentialHelpers {
    /// The `origin` of items the docker helper stores.
    static let dockerOrigin = "docker"

    static let docker = CommandSpec(
        name: "docker-credential", summary: "docker's credential helper: store, get, erase, list, version",
        usage: "vault [--vault NAME] [--passcode-fd N] docker-credential store|get|erase|list|version",
        options: Auth.options,
        arguments: 1...1,
        examples: """
        ln -s "$(command -v vault)" ~/.local/bin/docker-credential-vault
        echo '{ "credsStore": "vault" }' > ~/.docker/config.json     # merge with what is there
        vault unlock                      # docker passes no options: the helper uses the unlock session
        echo https://index.docker.io/v1/ | docker-credential-vault get
        """,
        run: { inv, ctx in
            do {
                try runDocker(inv, ctx)
            } catch {
                ctx.stdout.write(dockerMessage(error) + "\n")
                throw ReportedFailure(exitCode: 1)
            }
        })

    /// The one line docker reads on failure.
    static func dockerMessage(_ error: any Error) -> String {
        switch error {
        case let e as DockerHelperError: e.message
        case let e as VaultError: "vault: error: \(oneLine(e))"
        default: "vault: error: \(error)"
        }
    }

    /// The docker items serving `server`, compared as scheme (https when none), host and path.
    static func dockerItems(_ items: [Item], server: CredentialTarget) -> [Item] {
        items.filter { i in
            i.origin == dockerOrigin && i.urls.contains { server.samePlace(CredentialTarget(url: $0, defaultScheme: "https")) }
        }
    }

    /// The server URL read by get and erase: all of standard input, trimmed.
    static func serverURL(_ ctx: CommandContext) throws -> (String, CredentialTarget) {
        let raw = String(decoding: try readInput(ctx, untilBlankLine: false), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard !raw.isEmpty else { throw DockerHelperError.missingServerURL }
        guard let t = CredentialTarget(url: raw, defaultScheme: "https"), !t.host.isEmpty else {
            throw DockerHelperError.malformed("not a server URL: \(raw)")
        }
        return (raw, t)
    }

    static func runDocker(_ inv: Invocation, _ ctx: CommandContext) throws {
        let inv = withoutPrompts(inv)
        let action = inv.arguments[0]
        switch action {
        case "version":
            ctx.stdout.write("docker-credential-vault (vault) \(VaultCLI.version)\n")

        case "store":
            var input = try readInput(ctx, untilBlankLine: false)
            defer { wipe(&input) }
            guard let object = try? JSONSerialization.jsonObject(with: Data(input)) as? [String: Any] else {
                throw DockerHelperError.malformed("standard input is not a JSON object with ServerURL, Username and Secret")
            }
            // Field names as Go's encoding/json reads them: case does not matter.
            func field(_ name: String) throws -> String? {
                guard let v = object.first(where: { $0.key.lowercased() == name.lowercased() })?.value else { return nil }
                guard let s = v as? String else { throw DockerHelperError.malformed("\(name) must be a string") }
                return s
            }
            guard let raw = try field("ServerURL"), !raw.isEmpty else { throw DockerHelperError.missingServerURL }
            guard let username = try field("Username"), !username.isEmpty else { throw DockerHelperError.missingUsername }
            let secret = try field("Secret") ?? ""
            guard let server = CredentialTarget(url: raw, defaultScheme: "https"), !server.host.isEmpty else {
                throw DockerHelperError.malformed("not a server URL: \(raw)")
            }
            let vault = try openAccess(inv, ctx, purpose: "save docker credentials for \(server.host)")
            let items = try readableItems(vault)
            if let mine = dockerItems(items, server: server).first {
                var change = ItemChange()
                change.username = username
                change.password = secret
                change.urls = [raw]
                try vault.update(mine.name, change)
                return
            }
            let name = freeName("docker/" + server.label, taken: Set(items.map(\.name)))
            try vault.add(Item(name: name, username: username, password: secret, urls: [raw],
                               tags: ["docker"], origin: dockerOrigin), replace: false)

        case "get":
            let (raw, server) = try serverURL(ctx)
            let vault = try openAccess(inv, ctx, purpose: "docker credentials for \(server.host)")
            guard let listed = dockerItems(try readableItems(vault), server: server).max(by: { $0.modified < $1.modified }) else {
                throw DockerHelperError.notFound
            }
            let item = try vault.release(named: listed.name, fields: ["password"], command: "docker-credential")
            ctx.stdout.write(jsonText(["ServerURL": raw, "Username": item.username ?? "", "Secret": item.password ?? ""]))

        case "erase":
            let (_, server) = try serverURL(ctx)
            let vault = try openAccess(inv, ctx, purpose: "erase docker credentials for \(server.host)")
            let mine = dockerItems(try readableItems(vault), server: server)
            guard !mine.isEmpty else { throw DockerHelperError.notFound }
            for item in mine { try vault.remove(item.name) }

        case "list":
            let vault = try openAccess(inv, ctx, purpose: "list docker credentials")
            var listing: [String: String] = [:]
            for item in try readableItems(vault) where item.origin == dockerOrigin {
                if let url = item.urls.first { listing[url] = item.username ?? "" }
            }
            ctx.stdout.write(jsonText(listing))

        default:
            throw DockerHelperError.unknownAction(action)
        }
    }
}
