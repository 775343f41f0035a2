/// Which items answer git, and what `store` and `erase` change (`vault git-credential`).
///
/// An item serves a request when it has a URL with the request's scheme and host (compared as
/// `CredentialTarget` normalises them) and, if that URL names a path, the request's path (a
/// trailing `.git` does not count); when the request names a user, the item's username must be
/// that user. Items people made answer git too; items another helper made (docker) never do, and
/// the helper changes or erases only the items it made itself (origin `git`).
package enum GitCredentialRules {
    /// The `origin` of the items the git helper makes.
    package static let origin = "git"

    /// The item audit records name as the releasing command: `git-credential` for `get`, else
    /// `git-credential store` / `git-credential erase`.
    package static func auditCommand(_ action: GitCredentialAction) -> String {
        action == .get ? "git-credential" : "git-credential \(action.rawValue)"
    }

    /// Whether `action` can do anything for `request` at all. It cannot without a protocol, nor
    /// for `store` without a password git's format can carry; the helper then ends at once,
    /// without opening the vault (so it needs no key and prompts for nothing).
    package static func needsVault(_ action: GitCredentialAction, _ request: GitCredentialRequest) -> Bool {
        guard request.target != nil else { return false }
        if action == .store { return storablePassword(request) != nil }
        return true
    }

    /// Whether the item URL `item` serves the request's place `request`: same scheme and host,
    /// and the same path when `item` names one (a trailing `.git` is not significant).
    package static func serves(_ item: CredentialTarget, _ request: CredentialTarget) -> Bool {
        func bare(_ p: String) -> String { p.hasSuffix(".git") ? String(p.dropLast(4)) : p }
        return item.scheme == request.scheme && item.host == request.host
            && (item.path.isEmpty || bare(item.path) == bare(request.path))
    }

    /// The URL of `item` that serves `request` best (one naming a path first), or nil. Item URLs
    /// without a scheme are read as https.
    package static func servingURL(of item: Item, for request: CredentialTarget) -> CredentialTarget? {
        let serving = item.urls.compactMap { CredentialTarget(url: $0, defaultScheme: "https") }.filter { serves($0, request) }
        return serving.first { !$0.path.isEmpty } ?? serving.first
    }

    /// The items made by one of `origins` (nil: made by a person) that serve `request`, each with
    /// the URL that does, in the order of `items`. Nothing serves a request without a protocol.
    package static func candidates(for request: GitCredentialRequest, in items: [Item],
                                  origins: Set<String?>) -> [(item: Item, url: CredentialTarget)] {
        guard let target = request.target else { return [] }
        return items.compactMap { item in
            guard origins.contains(item.origin), request.username == nil || item.username == request.username,
                  let url = servingURL(of: item, for: target) else { return nil }
            return (item, url)
        }
    }

    /// `get`: the items that may answer, best first: one whose serving URL names a path before a
    /// host-wide one, then the most recently modified. An item whose password expired
    /// (`password_expiry_utc` at or before `now`) never answers. `.releaseFirst(names)`, or `.none`.
    package static func get(_ request: GitCredentialRequest, items: [Item], now: Int64 = unixNow()) -> CredentialPlan {
        let found = candidates(for: request, in: items, origins: [nil, origin])
            .filter { ($0.item.passwordExpiry ?? Int64.max) > now }.sorted { a, b in
            let pa = a.url.path.isEmpty ? 0 : 1, pb = b.url.path.isEmpty ? 0 : 1
            return pa != pb ? pa > pb : a.item.modified > b.item.modified
        }
        return found.isEmpty ? .none : .releaseFirst(found.map(\.item.name))
    }

    /// The answer git reads for a released item: `username=U` (when it has one), `password=P`,
    /// and `password_expiry_utc=N` and `oauth_refresh_token=T` when the item keeps them; nil when
    /// it has no password, or a value git's format cannot carry.
    package static func answer(from item: Item) -> String? {
        guard let password = item.password, GitCredentialRequest.canCarry(password),
              GitCredentialRequest.canCarry(item.username ?? ""),
              GitCredentialRequest.canCarry(item.oauthRefreshToken ?? "") else { return nil }
        var out = ""
        if let u = item.username { out += "username=\(u)\n" }
        out += "password=\(password)\n"
        if let e = item.passwordExpiry { out += "password_expiry_utc=\(e)\n" }
        if let t = item.oauthRefreshToken { out += "oauth_refresh_token=\(t)\n" }
        return out
    }

    /// The answer git reads for a released item, assembled in guarded memory: the same lines as
    /// `answer(from: Item)`, the password and the refresh token copied from the released secrets
    /// record, never a String. nil when it has no password, or a value git's format cannot carry
    /// (a newline or a NUL byte anywhere in it).
    /// - Throws: `CryptoError.outOfMemory`.
    package static func answer(from released: ReleasedItem) throws -> SecretOutput? {
        let item = released.overview.item
        guard GitCredentialRequest.canCarry(item.username ?? "") else { return nil }
        func carries(_ v: UnsafeRawBufferPointer) -> Bool { !v.contains(0x0A) && !v.contains(0) }
        return try released.withSecrets { s -> SecretOutput? in
            guard let password = s.value(of: .password), carries(password) else { return nil }
            let token = s.value(of: .custom(CredentialExtras.refreshTokenField)).flatMap { $0.isEmpty ? nil : $0 }
            if let token, !carries(token) { return nil }
            let out = try SecretOutput(capacity: 256 + password.count + (token?.count ?? 0))
            if let u = item.username { out.append("username=\(u)\n") }
            out.append("password=")
            out.append(password)
            out.append("\n")
            if let e = item.passwordExpiry { out.append("password_expiry_utc=\(e)\n") }
            if let token {
                out.append("oauth_refresh_token=")
                out.append(token)
                out.append("\n")
            }
            return out
        }
    }

    /// `store`. git stores after every successful use, so a login the vault already gives (an
    /// item serving the request, person-made or not, with exactly the request's username, this
    /// password and the same `password_expiry_utc`) is left alone: the plan compares first. A
    /// request with an `oauth_refresh_token` (which changes as it is used) is always written.
    /// Otherwise the helper's own item for the same place (scheme, host, path) and username gets
    /// the new password, expiry and refresh token; failing that, a new item `git/LABEL (USER)` (a
    /// free variant of that name) is added, tagged and marked `git`, keeping the request's URL
    /// without the user. `.none` without a place or a storable password.
    package static func store(_ request: GitCredentialRequest, items: [Item], now: Int64 = unixNow()) -> CredentialPlan {
        guard let password = storablePassword(request), let target = request.target,
              GitCredentialRequest.canCarry(request.oauthRefreshToken ?? "") else { return .none }
        let extras = CredentialExtras(passwordExpiry: request.passwordExpiry, oauthRefreshToken: request.oauthRefreshToken)
        let same = request.oauthRefreshToken != nil ? [] : candidates(for: request, in: items, origins: [nil, origin])
            .filter { $0.item.username == request.username && $0.item.passwordExpiry == request.passwordExpiry }.map(\.item.name)
        let write: CredentialPlan
        if let mine = items.first(where: { i in
            i.origin == origin && i.username == request.username
                && i.urls.contains { target.samePlace(CredentialTarget(url: $0, defaultScheme: "https")) }
        }) {
            var change = ItemChange()
            change.password = password
            extras.apply(to: &change)
            write = .update(mine.name, change)
        } else {
            let base = "git/" + target.label + (request.username.map { " (\(CredentialTarget.namePart($0, limit: 40)))" } ?? "")
            let name = Item.freeName(base, taken: Set(items.map(\.name)))
            var item = Item(name: name, username: request.username, password: password, urls: [target.url],
                            tags: ["git"], origin: origin, now: now)
            extras.apply(to: &item)
            write = .add(item)
        }
        return same.isEmpty ? write : .compareThenWrite(same, password: password, otherwise: write)
    }

    /// `erase`: the helper's own items serving the request go; as in git's own helpers a field
    /// the request leaves out matches anything, so without a path the items of every path on
    /// that host go too (and without a username, every user's). With a password in the request,
    /// only those whose password is that one (the plan compares first). Items a person made are
    /// never erased. `.none` when nothing is to go.
    package static func erase(_ request: GitCredentialRequest, items: [Item]) -> CredentialPlan {
        guard let target = request.target else { return .none }
        let anyPath = target.path.isEmpty
        let mine = items.filter { item in
            item.origin == origin && (request.username == nil || item.username == request.username)
                && item.urls.contains { url in
                    guard let u = CredentialTarget(url: url, defaultScheme: "https") else { return false }
                    return anyPath ? u.scheme == target.scheme && u.host == target.host : serves(u, target)
                }
        }.map(\.name)
        if mine.isEmpty { return .none }
        if let password = request.password { return .compareThenRemove(mine, password: password) }
        return .remove(mine)
    }

    /// The plan for `action`.
    package static func plan(_ action: GitCredentialAction, _ request: GitCredentialRequest, items: [Item],
                            now: Int64 = unixNow()) -> CredentialPlan {
        switch action {
        case .get: get(request, items: items, now: now)
        case .store: store(request, items: items, now: now)
        case .erase: erase(request, items: items)
        }
    }

    private static func storablePassword(_ request: GitCredentialRequest) -> String? {
        guard let password = request.password, GitCredentialRequest.canCarry(password) else { return nil }
        return password
    }
}
