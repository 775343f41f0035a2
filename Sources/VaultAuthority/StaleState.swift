internal import VaultKit
internal import VaultSystem
internal import FoundationEssentials

extension AuthorityRequestHandler {
    /// Removes the idle state folders of uids the user database has no account of: a deleted
    /// user's, or one a subordinate uid made before such uids were refused state. A folder goes
    /// only when `uid-N` names a folder of the daemon's own user, the database answered "no such
    /// account" for N (a database that fails answers nothing, and then nothing goes), the
    /// daemon's own account is found (a database that lost every account is not believed), and
    /// nothing in the folder changed for `idleSeconds`. The clear device secret is overwritten
    /// with zeros and synced before its file goes. The daemon runs this at its start and every
    /// `AuthorityLimits.staleStateSweepSeconds`.
    /// - Returns: the uids whose folders were removed.
    @discardableResult
    public func removeStateWithoutAccount(idleSeconds: Double = AuthorityLimits.staleStateSeconds) -> [UInt32] {
        let me = ProcessIdentity.effectiveUID
        guard case .account = ProcessIdentity.lookUpUser(me) else {
            AuthorityDaemon.log("note: the user database has no account of this daemon's uid \(me): no state folder is removed")
            return []
        }
        guard let names = try? FileSystem.contents(of: stateFolder) else { return [] }
        let newestAllowed = Int64((Date().timeIntervalSince1970 - idleSeconds) * 1e9)
        var removed: [UInt32] = []
        for name in names.sorted() where name.hasPrefix("uid-") {
            guard let uid = UInt32(name.dropFirst(4)), name == "uid-\(uid)", ProcessIdentity.lookUpUser(uid) == .noAccount else { continue }
            let path = folder(of: uid)
            guard let status = try? FileStatus.of(path), status.kind == .directory, status.owner == me,
                  let entries = try? FileSystem.contents(of: path) else { continue }
            let changed = entries.compactMap { try? FileStatus.of(path + "/" + $0).modifiedNanoseconds } + [status.modifiedNanoseconds]
            guard changed.allSatisfy({ $0 < newestAllowed }) else { continue }
            do {
                for entry in entries {
                    let file = path + "/" + entry
                    if entry == "device-secret", let st = try? FileStatus.of(file), st.kind == .regular {
                        try FileSystem.overwrite(file, with: [UInt8](repeating: 0, count: Int(max(st.size, 32))))
                    }
                    try FileSystem.remove(file)
                }
                try FileSystem.removeFolder(path)
                removed.append(uid)
            } catch {
                AuthorityDaemon.log("note: the state of uid \(uid), which has no account, could not be removed: \(error.reason)")
            }
        }
        if !removed.isEmpty {
            let shown = removed.prefix(8).map { "uid-\($0)" }.joinedText(separator: ", ")
            AuthorityDaemon.log("removed the idle state of \(removed.count) uid\(removed.count == 1 ? "" : "s") without an account: "
                                + shown + (removed.count > 8 ? ", ..." : ""))
        }
        return removed
    }
}
