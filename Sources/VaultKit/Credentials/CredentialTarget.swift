import FoundationEssentials
internal import VaultSystem

/// A credential's place reduced to what the credential helpers compare: the scheme in lower case,
/// `host[:port]` in lower case without the scheme's default port (443 for https, 80 for http), and
/// the path without surrounding slashes.
package struct CredentialTarget: Equatable, Sendable {
    /// The scheme, lower case (`https`, `ssh`, ...).
    package var scheme: String
    /// `host[:port]`, lower case, without the scheme's default port.
    package var host: String
    /// The path without leading or trailing slashes; empty for none.
    package var path: String
    /// The user named in the URL (`https://me@host`), percent-decoded.
    package var username: String?
    /// The password named in the URL, percent-decoded (git's `url=` may carry one).
    package var password: String?

    /// A place from its parts, normalised as described on the type.
    package init(scheme: String, host: String, path: String) {
        self.scheme = scheme.lowercased()
        self.host = CredentialTarget.normalize(host: host, scheme: self.scheme)
        self.path = CredentialTarget.trimSlashes(path)
    }

    /// Parses `scheme://[user[:password]@]host[:port][/path][?query][#fragment]`; the query and
    /// fragment are dropped. A URL without `scheme://` takes `defaultScheme`, or is refused (nil)
    /// when that is nil; a scheme with characters other than letters, digits, `+`, `-` and `.` is
    /// refused too.
    package init?(url raw: String, defaultScheme: String?) {
        var rest = Substring(raw.trimmed())
        let scheme: String
        if let r = rest.byteRange(of: "://") {
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

    /// Whether both name the same place: scheme, host and path (the user in the URL does not count).
    package func samePlace(_ other: CredentialTarget?) -> Bool {
        guard let other else { return false }
        return scheme == other.scheme && host == other.host && path == other.path
    }

    /// `scheme://host[/path]`: the URL a helper-made item keeps. Characters that would read back
    /// as something else are percent-encoded (`%`, white space, `?` and `#`; in the host also `/`
    /// and `@`), so `init(url:)` of it names this same place.
    package var url: String {
        func encoded(_ s: String, _ special: String) -> String {
            s.percentEncoded { !TrimSet.whitespacesAndNewlines.contains($0) && !special.unicodeScalars.contains($0) }
        }
        return scheme + "://" + encoded(host, "%?#/@") + (path.isEmpty ? "" : "/" + encoded(path, "%?#"))
    }

    /// A readable part of an item name: `host[/path]`, with `scheme:` in front when it is not https,
    /// made a valid item name part by `namePart(_:limit:)`, at most 200 characters.
    package var label: String {
        CredentialTarget.namePart((scheme == "https" ? "" : scheme + ":") + host + (path.isEmpty ? "" : "/" + path), limit: 200)
    }

    /// `text` made fit to follow `git/` or `docker/` in an item name (`Item.normalize` accepts the
    /// result): in NFC, control and format characters (zero-width, bidi) and U+FFFD (what invalid
    /// UTF-8 decodes to) dropped, at most `limit`
    /// characters and `3 * limit` bytes, `.` and `..` components made `_`, no trailing space.
    static func namePart(_ text: String, limit: Int) -> String {
        let visible = text.nfc.unicodeScalars.filter {
            $0.properties.generalCategory != .control && $0.properties.generalCategory != .format && $0 != "\u{FFFD}"
        }
        var cut = String(String(visible).prefix(limit))
        while cut.utf8.count > 3 * limit || cut.last?.isWhitespace == true { cut.removeLast() }
        // Components are judged after the cuts: dropping, truncating or trimming can make a `..`.
        return cut.split(separator: "/", omittingEmptySubsequences: false).map { $0 == "." || $0 == ".." ? "_" : String($0) }
            .joinedText(separator: "/")
    }

    private static func decode(_ s: Substring) -> String { String(s).percentDecoded ?? String(s) }

    private static func trimSlashes(_ s: String) -> String { s.trimmed(where: { $0 == "/" }) }

    private static func normalize(host: String, scheme: String) -> String {
        var h = host.lowercased()
        // Every default port goes (`h:443:443` too), so normalising twice changes nothing.
        for (s, port) in [("https", ":443"), ("http", ":80")] where scheme == s {
            while h.hasSuffix(port) { h.removeLast(port.count) }
        }
        return h
    }
}
