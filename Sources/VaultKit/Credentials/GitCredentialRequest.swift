/// One credential description as git writes it to a helper (gitcredentials(7), git-credential(1)):
/// `key=value` lines up to a blank line or the end of input. Unknown keys (`capability[]`,
/// `wwwauth[]`, ...) and lines without `=` are ignored; `password_expiry_utc` (git 2.40) and
/// `oauth_refresh_token` (git 2.41) are kept with the credential.
package struct GitCredentialRequest: Equatable, Sendable {
    /// `protocol=`: the scheme (`https`, `ssh`, ...).
    package var scheme: String?
    /// `host=`: `host[:port]`.
    package var host: String?
    /// `path=`: git sends it for https only with `credential.useHttpPath`.
    package var path: String?
    /// `username=`.
    package var username: String?
    /// `password=`.
    package var password: String?
    /// `password_expiry_utc=`: when the password expires, seconds since 1970 (a value that is
    /// not a number is ignored, as git ignores it).
    package var passwordExpiry: Int64?
    /// `oauth_refresh_token=`.
    package var oauthRefreshToken: String?

    /// A request with the given keys.
    package init(scheme: String? = nil, host: String? = nil, path: String? = nil,
                username: String? = nil, password: String? = nil) {
        self.scheme = scheme
        self.host = host
        self.path = path
        self.username = username
        self.password = password
    }

    /// Parses git's format. A later key replaces an earlier one; `url=` stands for its parts and,
    /// as in git, first clears every key that came before it.
    package init(parsing bytes: [UInt8]) {
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
            case "password_expiry_utc": passwordExpiry = Int64(value)
            case "oauth_refresh_token": oauthRefreshToken = value
            case "url":
                self = GitCredentialRequest()
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
    package var target: CredentialTarget? {
        guard let scheme, !scheme.isEmpty else { return nil }
        return CredentialTarget(scheme: scheme, host: host ?? "", path: path ?? "")
    }

    /// Whether git's line format can carry `value` (no newline, no NUL).
    package static func canCarry(_ value: String) -> Bool { !value.contains("\n") && !value.contains("\0") }
}

/// The actions git asks a helper for. gitcredentials(7): a helper ignores any other, silently.
package enum GitCredentialAction: String, CaseIterable, Sendable {
    /// Answer with a stored login for the request.
    case get
    /// Keep the login git just used successfully.
    case store
    /// Forget the login git was refused with.
    case erase
}
