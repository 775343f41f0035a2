/// What a credential helper is to do with the vault, decided by `GitCredentialRules` or
/// `DockerCredentialRules` from the items' overviews (no secrets) and the request, so the rules
/// are testable without a vault. The helper carries it out through `VaultAccess`; every password it
/// reads to do so (to answer, or to compare with the one it was given) is a release, and so audited.
package indirect enum CredentialPlan: Equatable, Sendable {
    /// Nothing to read or change.
    case none
    /// Release this item and answer with its login, whatever it holds (docker's `get`).
    case release(String)
    /// Try these items in turn, best first: skip one whose overview shows no password (without
    /// releasing it), release the others until one holds a login the helper's protocol can carry;
    /// that one is the answer (git's `get`).
    case releaseFirst([String])
    /// Apply the change to this item.
    case update(String, ItemChange)
    /// Add this item (never replacing one).
    case add(Item)
    /// Remove these items.
    case remove([String])
    /// Release each item's password in turn and remove each one whose password is `password`
    /// (git's `erase` with a password: a login stored since then stays).
    case compareThenRemove([String], password: String)
    /// Release each item's password in turn; as soon as one is `password`, stop: the vault already
    /// gives this login. When none is, carry out `otherwise` (git's `store`).
    case compareThenWrite([String], password: String, otherwise: CredentialPlan)
}

/// What git keeps with a password besides the username: its expiry and an OAuth refresh token,
/// kept as custom fields of the item: `password_expiry_utc` (text: matching reads it from the
/// overview) and `oauth_refresh_token` (hidden: a secret, released by name with the password).
/// A store replaces both (one the new credential lacks is removed).
package struct CredentialExtras: Equatable, Sendable {
    /// The custom field of the expiry.
    package static let expiryField = "password_expiry_utc"
    /// The custom field of the refresh token.
    package static let refreshTokenField = "oauth_refresh_token"

    /// `password_expiry_utc`, seconds since 1970.
    package var passwordExpiry: Int64?
    /// `oauth_refresh_token`.
    package var oauthRefreshToken: String?

    /// The extras given.
    package init(passwordExpiry: Int64? = nil, oauthRefreshToken: String? = nil) {
        self.passwordExpiry = passwordExpiry
        self.oauthRefreshToken = oauthRefreshToken
    }

    /// The custom fields that hold them.
    package var fields: [CustomField] {
        (passwordExpiry.map { [CustomField(name: Self.expiryField, kind: .text, value: String($0))] } ?? [])
            + (oauthRefreshToken.map { [CustomField(name: Self.refreshTokenField, kind: .hidden, value: $0)] } ?? [])
    }

    /// Sets both on `item` (an absent one removed).
    package func apply(to item: inout Item) {
        item.fields.removeAll { $0.name == Self.expiryField || $0.name == Self.refreshTokenField }
        item.fields += fields
    }

    /// Sets both in `change` (an absent one removed).
    package func apply(to change: inout ItemChange) {
        change.removeFields += [Self.expiryField, Self.refreshTokenField]
        change.setFields += fields
    }
}

extension Item {
    /// git's `password_expiry_utc` (its custom field), nil without one or when it is no number.
    package var passwordExpiry: Int64? {
        get { customField(CredentialExtras.expiryField).flatMap { Int64($0.value) } }
        set { CredentialExtras(passwordExpiry: newValue, oauthRefreshToken: oauthRefreshToken).apply(to: &self) }
    }

    /// git's `oauth_refresh_token` (its hidden custom field), nil without one or while withheld.
    package var oauthRefreshToken: String? {
        get { customField(CredentialExtras.refreshTokenField).flatMap { $0.value.isEmpty ? nil : $0.value } }
        set { CredentialExtras(passwordExpiry: passwordExpiry, oauthRefreshToken: newValue).apply(to: &self) }
    }
}

extension Item {
    /// A name for a new helper-made item: `base`, or else the first of `base 2`, `base 3`, ...
    /// that is not in `taken`.
    package static func freeName(_ base: String, taken: Set<String>) -> String {
        if !taken.contains(base) { return base }
        var n = 2
        while taken.contains("\(base) \(n)") { n += 1 }
        return "\(base) \(n)"
    }
}
