/// What a credential helper is to do with the vault, decided by `GitCredentialRules` or
/// `DockerCredentialRules` from the items' overviews (no secrets) and the request, so the rules
/// are testable without a vault. The helper carries it out through `VaultAccess`; every password it
/// reads to do so (to answer, or to compare with the one it was given) is a release, and so audited.
public indirect enum CredentialPlan: Equatable, Sendable {
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

extension Item {
    /// A name for a new helper-made item: `base`, or else the first of `base 2`, `base 3`, ...
    /// that is not in `taken`.
    public static func freeName(_ base: String, taken: Set<String>) -> String {
        if !taken.contains(base) { return base }
        var n = 2
        while taken.contains("\(base) \(n)") { n += 1 }
        return "\(base) \(n)"
    }
}
