import Foundation
package import VaultKit
import VaultSystem

/// What one `vault sync` did.
package struct SyncSummary: Sendable {
    /// Items this machine sent (changed here since its last sync).
    package var sent = 0
    /// Items written here from the remote (added or changed).
    package var received = 0
    /// Items deleted here because the remote deleted them.
    package var deleted = 0
    /// Conflicts resolved in this sync (same field, edit against delete, a name added twice).
    package var conflicts: [String] = []
    /// Whether a merge commit was made (both sides had changed).
    package var merged = false
    /// How many pushes were refused as not fast-forward and tried again.
    package var retries = 0
    /// The commit both sides now have.
    package var head = ""
}

/// Where a vault's sync files live: beside its vault.db.
package struct SyncPaths: Sendable {
    package let repository: String
    package let lock: String
    package let state: String

    package init(_ location: VaultLocation) {
        repository = location.folder + "/sync.git"
        lock = location.folder + "/sync.lock"
        state = location.folder + "/sync.state"
    }
}

/// The remote a vault syncs with: `vault remote set|show|remove`.
package enum SyncRemote {
    /// Checks a remote URL: any git URL (ssh, https, a path, `file://`), not an option, not
    /// `ext::` (a command), and no password in it (git's credential helpers hold those).
    package static func check(_ url: String) throws {
        guard !url.isEmpty, !url.hasPrefix("-"), !url.contains("\n"), !url.contains("\0") else {
            throw VaultError.usage("'\(url)' is not a git URL")
        }
        guard !url.lowercased().hasPrefix("ext::"), !url.contains("::") || url.hasPrefix("file::") == false else {
            throw VaultError.usage("remote helpers with '::' (ext::, fd::) are refused: they run commands")
        }
        if let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@"),
           url[scheme.upperBound..<at].contains(":") {
            throw VaultError.usage("the URL holds a password", hint: "leave it out: git's credential helper (or ssh) supplies it")
        }
    }

    /// Makes the vault's bare repository when missing and sets its remote.
    package static func set(_ url: String, location: VaultLocation, environment: [String: String]) throws {
        try check(url)
        let paths = SyncPaths(location)
        let git = try Git(repository: paths.repository, environment: environment, interactive: false)
        if !FileSystem.exists(paths.repository + "/HEAD") {
            do { try PrivateFiles.makeFolder(paths.repository) } catch { throw VaultError.io(path: paths.repository, "\(error)") }
            try git.checked(["init", "--quiet", "--bare", paths.repository])
            try git.checked(["symbolic-ref", "HEAD", "refs/heads/vault"])
        }
        _ = try git.run(["config", "--unset-all", "remote.origin.url"])
        try git.checked(["config", "remote.origin.url", url])
        try git.checked(["config", "remote.origin.fetch", "+refs/heads/vault:refs/remotes/origin/vault"])
    }

    /// The remote's URL, nil when none is set.
    package static func show(location: VaultLocation, environment: [String: String]) throws -> String? {
        let paths = SyncPaths(location)
        guard FileSystem.exists(paths.repository + "/HEAD") else { return nil }
        let git = try Git(repository: paths.repository, environment: environment, interactive: false)
        let out = try git.run(["config", "--get", "remote.origin.url"])
        return out.status.isSuccess ? out.text : nil
    }

    /// What a clone needs before it can unlock: the remote's header, fetched into a new
    /// repository beside the vault-to-be (nothing of it is believed yet: the slots only open
    /// with the right passcode or recovery key, and the history is checked once they did).
    package static func cloneHeader(_ url: String, location: VaultLocation, environment: [String: String])
        throws -> (vaultID: [UInt8], generation: Int64, slots: [KeySlot]) {
        do { try PrivateFiles.makeFolder(location.folder) } catch { throw VaultError.io(path: location.folder, "\(error)") }
        try set(url, location: location, environment: environment)
        let git = try Git(repository: SyncPaths(location).repository, environment: environment, interactive: false)
        guard !(try git.checked(["ls-remote", "--heads", "origin", "refs/heads/vault"]).text.isEmpty) else {
            throw VaultError.vaultNotFound(name: "at \(url)", path: url)
        }
        try git.checked(["fetch", "--quiet", "--no-tags", "origin", "+refs/heads/vault:" + SyncEngine.tracking])
        let out = try git.run(["cat-file", "blob", SyncEngine.tracking + ":header"])
        guard out.status.isSuccess else { throw untrusted("branch has no header") }
        let header = try RepoHeader.decode(out.stdout, vaultID: nil)
        return (bytesFromHex(header.vault)!, header.generation, try header.keySlots())
    }

    /// Removes what a clone that did not finish made (its vault database, repository, state).
    package static func discardClone(_ location: VaultLocation) {
        let paths = SyncPaths(location)
        for path in [paths.repository] { try? FileManager.default.removeItem(atPath: path) }
        for path in [location.databasePath, location.databasePath + "-wal", location.databasePath + "-shm", paths.state, paths.lock] {
            try? FileSystem.remove(path)
        }
        try? FileSystem.removeFolder(location.folder)
    }

    /// Forgets the remote (the local repository and its history stay, so a later `set` goes on).
    package static func remove(location: VaultLocation, environment: [String: String]) throws {
        let paths = SyncPaths(location)
        guard FileSystem.exists(paths.repository + "/HEAD") else { return }
        let git = try Git(repository: paths.repository, environment: environment, interactive: false)
        _ = try git.run(["config", "--remove-section", "remote.origin"])
    }
}

/// One `vault sync`: commit this machine's changes, fetch, check, merge, apply, push.
package final class SyncEngine {
    let vault: UnlockedVault
    let git: Git
    let paths: SyncPaths
    let vaultID: [UInt8]
    let vaultHex: String
    private(set) var secrets: SyncSecrets!
    private var itemKey: SecretBytes?
    private var conflictKey: SecretBytes?
    private var deviceMACKey: SecretBytes?
    private var stateKey: SecretBytes?
    var state = SyncState()
    var clock = HybridClock(last: 0)
    var deviceHex: String { hexString(secrets.deviceID) }
    static let branch = "refs/heads/vault", tracking = "refs/remotes/origin/vault"

    /// An engine for `vault`, whose remote must be set.
    /// - Throws: `.failure` when no remote is set.
    package init(vault: UnlockedVault, environment: [String: String], interactive: Bool) throws {
        self.vault = vault
        paths = SyncPaths(vault.store.location)
        vaultID = vault.store.vaultID
        vaultHex = hexString(vaultID)
        guard FileSystem.exists(paths.repository + "/HEAD") else {
            throw VaultError.failure("vault '\(vault.store.location.name)' has no remote", hint: "set one with 'vault remote set URL'")
        }
        git = try Git(repository: paths.repository, environment: environment, interactive: interactive)
        guard try git.run(["config", "--get", "remote.origin.url"]).status.isSuccess else {
            throw VaultError.failure("vault '\(vault.store.location.name)' has no remote", hint: "set one with 'vault remote set URL'")
        }
    }

    private func adopt(_ s: SyncSecrets) throws {
        secrets = s
        itemKey = try s.derived("vault/v1/sync-items")
        conflictKey = try s.derived("vault/v1/sync-conflicts")
        deviceMACKey = try s.derived("vault/v1/sync-devices")
        stateKey = try s.derived("vault/v1/sync-state")
    }

    // MARK: the whole sync

    /// Runs one sync, holding the vault's sync lock.
    /// - Throws: `.corrupt` (exit 5) for anything the remote sent that does not hold (nothing
    ///   changes here then), `.failure` when git fails or the pushes keep being refused.
    package func sync() throws -> SyncSummary {
        let lock = try FileLock(path: paths.lock)
        return try lock.withExclusive { try syncLocked() }
    }

    /// The first sync of a cloned vault: the whole history is checked before anything of it is
    /// written, then every item comes in.
    /// - Throws: as `sync`.
    package func clone() throws -> SyncSummary {
        let lock = try FileLock(path: paths.lock)
        return try lock.withExclusive {
            guard let remote = try fetch() else { throw VaultError.failure("the remote holds no vault") }
            try establishSecrets(remote: remote)
            try verify(remote: remote, local: nil)
            try git.checked(["update-ref", SyncEngine.branch, remote])
            return try syncLocked()
        }
    }

    private func syncLocked() throws -> SyncSummary {
        var summary = SyncSummary()
        var remote = try fetch()
        try establishSecrets(remote: remote)
        let loaded = SyncState.load(paths.state, key: stateKey!)
        let fresh = loaded == nil
        state = loaded ?? SyncState()
        clock.observe(state.hlc)
        for attempt in 0..<6 {
            if attempt > 0 { remote = try fetch(); summary.retries += 1 }
            let (local, expected) = try commitLocalChanges(&summary)
            if let remote { try verify(remote: remote, local: local) }
            let target = try merge(local: local, remote: remote, &summary)
            try apply(from: local, to: target, expected: expected, fresh: fresh && attempt == 0, &summary)
            if let target, target != local {
                try git.checked(["update-ref", SyncEngine.branch, target] + (local.map { [$0] } ?? []))
            }
            state.local = target
            if let remote { state.remote = remote }
            state.stamps = Dictionary(uniqueKeysWithValues: try vault.rowStamps().map { (hexString($0.key), hexString($0.value)) })
            state.hlc = clock.last
            try state.save(paths.state, key: stateKey!)
            summary.head = target ?? ""
            guard let target, target != remote else { return summary }
            if try push(target) {
                state.remote = target
                try state.save(paths.state, key: stateKey!)
                return summary
            }
        }
        throw VaultError.failure("the remote kept moving: 6 pushes were refused as not fast-forward", hint: "run 'vault sync' again")
    }

    /// The sync secrets: the vault's own, or at a first sync the repository key of the remote's
    /// header (opened with this vault's key: the same vault) or a new one for an empty remote.
    private func establishSecrets(remote: String?) throws {
        if let s = try vault.syncSecrets() { try adopt(s); return }
        let repoKey: SecretBytes
        if let remote {
            let header = try readHeader(at: remote)
            guard let sealed = bytesFromHex(header.repoKey), header.generation == vault.generation,
                  let rk = try? vault.openRepoKey(sealed) else {
                throw VaultError.failure("the remote holds a vault this machine's vault is not a copy of",
                                         hint: "start this machine from it with 'vault clone URL --vault OTHER'")
            }
            repoKey = rk
        } else {
            repoKey = try SecretBytes.random(count: 32)
        }
        let s = SyncSecrets(repoKey: repoKey, deviceKey: try Ed25519.generate(), deviceID: randomBytes(16))
        try vault.storeSyncSecrets(s)
        try adopt(s)
    }

    func readHeader(at commit: String) throws -> RepoHeader {
        let out = try git.run(["cat-file", "blob", commit + ":header"])
        guard out.status.isSuccess else { throw untrusted("commit \(commit) has no header") }
        return try RepoHeader.decode(out.stdout, vaultID: vaultID)
    }

    // MARK: transport

    /// Fetches the remote's branch; nil when the remote has none.
    /// - Throws: `.corrupt` when the remote lost a branch this machine saw.
    func fetch() throws -> String? {
        let heads = try git.checked(["ls-remote", "--heads", "origin", "refs/heads/vault"]).text
        guard !heads.isEmpty else {
            if let seen = state.remote { throw untrusted("branch is gone, though this machine saw it at \(seen) (rolled back or replaced)") }
            return nil
        }
        try git.checked(["fetch", "--quiet", "--no-tags", "origin", "+refs/heads/vault:" + SyncEngine.tracking])
        return try git.resolve(SyncEngine.tracking)
    }

    /// Pushes `commit`; false when refused as not fast-forward (the remote moved: try again).
    func push(_ commit: String) throws -> Bool {
        let out = try git.run(["push", "--quiet", "--porcelain", "origin", commit + ":refs/heads/vault"])
        if out.status.isSuccess { return true }
        let all = out.stderr + String(decoding: out.stdout, as: UTF8.self)
        if all.contains("non-fast-forward") || all.contains("fetch first") || all.contains("rejected") { return false }
        throw VaultError.failure("git push failed: \(out.stderr.split(separator: "\n").last.map(String.init) ?? "\(out.status)")")
    }

    // MARK: this machine's changes

    /// Commits every item row changed here since the last sync (and the header and this
    /// device's record when they are missing or out of date). - Returns: the local head and
    /// the row stamps it reflects.
    func commitLocalChanges(_ summary: inout SyncSummary) throws -> (String?, [[UInt8]: [UInt8]]) {
        let head = try git.resolve(SyncEngine.branch)
        var tree = try head.map { try git.tree(of: $0) } ?? [:]
        let current = try vault.rowStamps()
        let changed = current.filter { state.stamps[hexString($0.key)] != hexString($0.value) }.map(\.key)
        let deleted = state.stamps.keys.filter { bytesFromHex($0).map { current[$0] == nil } ?? false }
        var files: [(String, [UInt8])] = []
        for (id, item) in try vault.items(ids: changed.sorted { $0.lexicographicallyPrecedes($1) }) {
            files.append(("items/" + hexString(id), try sealItem(item, id: id, version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID))))
        }
        var removed = false
        for hex in deleted where tree["items/" + hex] != nil {
            tree["items/" + hex] = nil
            removed = true
        }
        let mark = "\(vault.generation):\(try vault.store.slotSequence())"
        if state.header != mark || tree["header"] == nil {
            let slots = try vault.portableSlots().map {
                RepoHeader.Slot(id: $0.id, kind: $0.kind.rawValue, params: hexString($0.params), nonce: hexString($0.sealedNonce), wrapped: hexString($0.wrappedKey))
            }
            let h = RepoHeader(vault: vaultHex, generation: vault.generation, slotSeq: try vault.store.slotSequence(), hlc: clock.tick(),
                               slots: slots, repoKey: hexString(try vault.sealRepoKey(secrets)))
            files.append(("header", Array(try JSONEncoder().encode(h))))
            state.header = mark
        }
        if tree["devices/" + deviceHex] == nil {
            let pk = secrets.devicePublicKey
            let d = DeviceRecord(device: deviceHex, publicKey: hexString(pk),
                                 mac: hexString(try DeviceRecord.mac(vaultID: vaultID, device: secrets.deviceID, publicKey: pk, key: deviceMACKey!)))
            files.append(("devices/" + deviceHex, Array(try JSONEncoder().encode(d))))
        }
        summary.sent += changed.count + deleted.count
        guard !files.isEmpty || removed else { return (head, current) }
        let shas = try git.writeBlobs(files.map(\.1))
        for ((path, _), sha) in zip(files, shas) { tree[path] = TreeEntry(mode: "100644", type: "blob", sha: sha) }
        let commit = try signedCommit(tree: tree, parents: head.map { [$0] } ?? [])
        try git.checked(["update-ref", SyncEngine.branch, commit] + (head.map { [$0] } ?? []))
        state.local = commit
        state.stamps = Dictionary(uniqueKeysWithValues: current.map { (hexString($0.key), hexString($0.value)) })
        state.hlc = clock.last
        try state.save(paths.state, key: stateKey!)
        return (commit, current)
    }

    func sealItem(_ item: Item, id: [UInt8], version: ItemVersion) throws -> [UInt8] {
        var plain = SyncRecords.encode(item)
        defer { wipe(&plain) }
        return try SealedFile.seal(plain, label: "vault-sync-item-v1", vaultID: vaultID, id: id, version: version, key: itemKey!)
    }

    func openItem(_ file: [UInt8], id: [UInt8], path: String) throws -> (ItemVersion, Item) {
        try SealedFile.open(file, label: "vault-sync-item-v1", vaultID: vaultID, id: id, key: itemKey!, path: path) { try SyncRecords.decode($0) }
    }

    func signedCommit(tree files: [String: TreeEntry], parents: [String]) throws -> String {
        let tree = try git.writeTree(files)
        let text = CommitSignature.signedText(vault: vaultHex, device: deviceHex, tree: tree, parents: parents)
        let signature = try Ed25519.sign(text, secretKey: secrets.deviceKey)
        return try git.commit(tree: tree, parents: parents, message: CommitSignature.message(device: deviceHex, signature: signature), device: deviceHex)
    }

    // MARK: trusting nothing

    /// Checks every commit of the remote this machine has not seen (docs/format.md): the
    /// history goes on from the last remote head seen, every commit is signed by a device of
    /// this vault, every file it changed is well-formed, opens under its own id and is newer
    /// than the version it replaced.
    /// - Throws: `.corrupt` naming what was wrong.
    func verify(remote: String, local: String?) throws {
        if let seen = state.remote, seen != remote, try !git.isAncestor(seen, of: remote) {
            throw untrusted("history does not contain \(seen), which this machine saw there (rolled back or force-pushed)")
        }
        var exclude: [String] = []
        if let seen = state.remote { exclude.append("^" + seen) }
        if let local { exclude.append("^" + local) }
        let list = try git.checked(["rev-list", "--topo-order", "--reverse", remote] + exclude).text
        for commit in list.split(separator: "\n").map(String.init) { try verify(commit: commit) }
    }

    private static let idPattern = try! NSRegularExpression(pattern: "^(items|devices|conflicts)/[0-9a-f]{32}$")

    func verify(commit: String) throws {
        let c = try git.commitObject(commit)
        guard let (device, signature) = CommitSignature.parse(message: c.message) else {
            throw untrusted("commit \(commit) is not a vault commit (unsigned)")
        }
        let deviceFile = try git.run(["cat-file", "blob", commit + ":devices/" + device])
        guard deviceFile.status.isSuccess,
              let pk = DeviceRecord.verifiedKey(deviceFile.stdout, name: device, vaultID: vaultID, key: deviceMACKey!) else {
            throw untrusted("commit \(commit) is signed by an unknown key (device \(device) is not one of this vault's)")
        }
        guard Ed25519.verify(signature, of: CommitSignature.signedText(vault: vaultHex, device: device, tree: c.tree, parents: c.parents), publicKey: pk) else {
            throw untrusted("commit \(commit) has a signature that does not verify under device \(device)'s key")
        }
        let tree = try git.tree(of: commit)
        let parentTrees = try c.parents.map { try git.tree(of: $0) }
        var changed: [String: TreeEntry] = [:]
        for (path, e) in tree where parentTrees.isEmpty || parentTrees.contains(where: { $0[path] != e }) { changed[path] = e }
        for (path, e) in changed {
            let range = NSRange(path.startIndex..., in: path)
            guard e.mode == "100644", e.type == "blob",
                  path == "header" || SyncEngine.idPattern.firstMatch(in: path, range: range) != nil else {
                throw untrusted("commit \(commit) holds \(path) (\(e.mode) \(e.type)), which is no file of a vault repository")
            }
        }
        let blobs = try git.blobs(changed.values.map(\.sha) + parentTrees.flatMap { p in changed.keys.compactMap { p[$0]?.sha } })
        for (path, e) in changed {
            guard let file = blobs[e.sha] else { throw untrusted("commit \(commit) lacks the object of \(path)") }
            if path == "header" { _ = try RepoHeader.decode(file, vaultID: vaultID); continue }
            let id = bytesFromHex(String(path.split(separator: "/")[1]))!
            if path.hasPrefix("items/") {
                let (version, _) = try openItem(file, id: id, path: path)
                for p in parentTrees {
                    if let old = p[path], old != e, let before = blobs[old.sha].flatMap(SealedFile.version(of:)), !(before < version) {
                        throw untrusted("commit \(commit) puts back an older version of \(path) (a replayed item file)")
                    }
                }
                clock.observe(version.hlc)
            } else if path.hasPrefix("conflicts/") {
                _ = try SealedFile.open(file, label: "vault-sync-conflict-v1", vaultID: vaultID, id: id, key: conflictKey!, path: path) { _ in () }
            } else if DeviceRecord.verifiedKey(file, name: String(path.dropFirst("devices/".count)), vaultID: vaultID, key: deviceMACKey!) == nil {
                throw untrusted("commit \(commit) adds \(path), a device no holder of the vault's key vouched for")
            }
        }
    }

    // MARK: merging

    /// The commit both sides end on: the local head when the remote is behind it, the remote's
    /// when this machine is behind, else a merge commit of the two (signed).
    func merge(local: String?, remote: String?, _ summary: inout SyncSummary) throws -> String? {
        guard let remote else { return local }
        guard let local else { return remote }
        if local == remote { return local }
        if try git.isAncestor(remote, of: local) { return local }
        if try git.isAncestor(local, of: remote) { return remote }
        summary.merged = true
        let baseOut = try git.run(["merge-base", local, remote])
        let base = baseOut.status.isSuccess ? try git.tree(of: baseOut.text) : [:]
        let ours = try git.tree(of: local), theirs = try git.tree(of: remote)
        var result: [String: TreeEntry] = [:]
        var both: [String] = []
        for path in Set(ours.keys).union(theirs.keys) {
            let o = ours[path], t = theirs[path], b = base[path]
            if o == t { result[path] = o } else if o == b { result[path] = t } else if t == b { result[path] = o } else { both.append(path) }
        }
        let blobs = try git.blobs(both.flatMap { [ours[$0]?.sha, theirs[$0]?.sha, base[$0]?.sha].compactMap { $0 } })
        var files: [(String, [UInt8])] = []
        var conflicts: [ConflictRecord] = []
        let now = unixNow()
        for path in both.sorted() {
            let o = ours[path].flatMap { blobs[$0.sha] }, t = theirs[path].flatMap { blobs[$0.sha] }
            if path == "header" {
                let ho = try o.map { try RepoHeader.decode($0, vaultID: vaultID) }, ht = try t.map { try RepoHeader.decode($0, vaultID: vaultID) }
                result[path] = (ht?.hlc ?? 0) > (ho?.hlc ?? 0) ? theirs[path] : ours[path]
            } else if path.hasPrefix("items/") {
                let id = bytesFromHex(String(path.dropFirst(6)))!
                let side: ([UInt8]?) throws -> MergeSide = { f in
                    guard let f else { return MergeSide() }
                    let (v, item) = try self.openItem(f, id: id, path: path)
                    return MergeSide(item: item, version: v)
                }
                let b = try side(base[path].flatMap { blobs[$0.sha] })
                let outcome = ItemMerge.merge(id: hexString(id), base: b.item, ours: try side(o), theirs: try side(t), now: now)
                conflicts += outcome.conflicts
                if let item = outcome.item {
                    files.append((path, try sealItem(item, id: id, version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID))))
                } else {
                    result[path] = nil
                }
            } else {
                result[path] = ours[path] ?? theirs[path]
            }
        }
        try resolveNames(result: &result, ours: ours, files: &files, conflicts: &conflicts, now: now)
        for c in conflicts {
            let id = randomBytes(16)
            var plain = Array(try JSONEncoder().encode(c))
            defer { wipe(&plain) }
            files.append(("conflicts/" + hexString(id), try SealedFile.seal(plain, label: "vault-sync-conflict-v1", vaultID: vaultID, id: id,
                                                                           version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID), key: conflictKey!)))
            summary.conflicts.append(describe(c))
        }
        let shas = try git.writeBlobs(files.map(\.1))
        for ((path, _), sha) in zip(files, shas) { result[path] = TreeEntry(mode: "100644", type: "blob", sha: sha) }
        return try signedCommit(tree: result, parents: [local, remote])
    }

    /// Keeps both of two items that ended with the same name: of the items that differ from
    /// this machine's tree (only they can clash: this machine's own names are unique in its
    /// vault), taken in version order, one whose name is held already gets a suffix, ` (2)`,
    /// ` (3)`..., and a new version.
    private func resolveNames(result: inout [String: TreeEntry], ours: [String: TreeEntry], files: inout [(String, [UInt8])],
                              conflicts: inout [ConflictRecord], now: Int64) throws {
        let written = Dictionary(files.map { ($0.0, $0.1) }, uniquingKeysWith: { a, _ in a })
        let incomingPaths = Set(result.keys.filter { $0.hasPrefix("items/") && result[$0] != ours[$0] }).union(written.keys)
        guard !incomingPaths.isEmpty else { return }
        let fromBlobs = try git.blobs(incomingPaths.compactMap { written[$0] == nil ? result[$0]?.sha : nil })
        var incoming: [String: (version: ItemVersion, item: Item)] = [:]
        for path in incomingPaths {
            guard let file = written[path] ?? result[path].flatMap({ fromBlobs[$0.sha] }) else { continue }
            let (v, item) = try openItem(file, id: bytesFromHex(String(path.dropFirst(6)))!, path: path)
            incoming[path] = (v, item)
        }
        var taken = Set<String>()
        func heldLocally(_ name: String) throws -> Bool {
            guard let id = try vault.itemID(named: name) else { return false }
            let path = "items/" + hexString(id)
            return result[path] != nil && incoming[path] == nil
        }
        for path in incoming.keys.sorted(by: { incoming[$0]!.version < incoming[$1]!.version }) {
            var item = incoming[path]!.item
            let name = try Item.normalize(name: item.name)
            let held = try heldLocally(name)
            guard taken.contains(name) || held else { taken.insert(name); continue }
            var n = 2
            var candidate = "\(name) (\(n))"
            while try taken.contains(candidate) || heldLocally(candidate) { n += 1; candidate = "\(name) (\(n))" }
            item.name = candidate
            taken.insert(candidate)
            let id = bytesFromHex(String(path.dropFirst(6)))!
            files.removeAll { $0.0 == path }
            files.append((path, try sealItem(item, id: id, version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID))))
            conflicts.append(ConflictRecord(kind: "renamed", item: hexString(id), name: candidate, field: "name", kept: candidate, lost: name,
                                            secret: false, winner: deviceHex, loser: nil, time: now))
        }
    }

    func describe(_ c: ConflictRecord) -> String {
        switch c.kind {
        case "renamed": return "'\(c.lost ?? "")' was added on two machines: one is now '\(c.name)'"
        case "edit-kept": return "'\(c.name)' was edited on one machine and deleted on another: the edit was kept"
        default: return "'\(c.name)': \(c.field ?? "a field") changed on two machines: the later change was kept" + (c.field == "password" ? " (the other is in its history)" : "")
        }
    }

    // MARK: applying

    /// Writes into the vault what `target` has that `local` (this vault as committed) has not,
    /// in one transaction that writes nothing when a row changed since `expected` was read.
    func apply(from local: String?, to target: String?, expected: [[UInt8]: [UInt8]], fresh: Bool, _ summary: inout SyncSummary) throws {
        guard let target, target != local || fresh else { return }
        let before = try local.map { try git.tree(of: $0) } ?? [:]
        let after = try git.tree(of: target)
        var upserts: [String] = [], deletes: [[UInt8]] = []
        for (path, e) in after where path.hasPrefix("items/") {
            let id = bytesFromHex(String(path.dropFirst(6)))!
            if before[path] != e || (fresh && expected[id] == nil) { upserts.append(path) }
        }
        for path in before.keys where path.hasPrefix("items/") && after[path] == nil {
            let id = bytesFromHex(String(path.dropFirst(6)))!
            if expected[id] != nil { deletes.append(id) }
        }
        guard !upserts.isEmpty || !deletes.isEmpty else { return }
        let blobs = try git.blobs(upserts.map { after[$0]!.sha })
        var items: [(id: [UInt8], item: Item)] = []
        for path in upserts {
            let id = bytesFromHex(String(path.dropFirst(6)))!
            items.append((id, try openItem(blobs[after[path]!.sha]!, id: id, path: path).1))
        }
        _ = try vault.applySync(deletes: deletes, upserts: items, expected: expected)
        summary.received += items.count
        summary.deleted += deletes.count
    }

    // MARK: listing conflicts

    /// Every conflict resolved in this vault's history (the local head's `conflicts/`), oldest first.
    package func conflicts() throws -> [(record: ConflictSummary, text: String)] {
        guard let s = try vault.syncSecrets() else { return [] }
        try adopt(s)
        guard let head = try git.resolve(SyncEngine.branch) else { return [] }
        let tree = try git.tree(of: head).filter { $0.key.hasPrefix("conflicts/") }
        let blobs = try git.blobs(tree.values.map(\.sha))
        var out: [(ConflictRecord, String)] = []
        for (path, e) in tree {
            let id = bytesFromHex(String(path.dropFirst("conflicts/".count)))!
            let (_, c) = try SealedFile.open(blobs[e.sha]!, label: "vault-sync-conflict-v1", vaultID: vaultID, id: id, key: conflictKey!, path: path) {
                // The record is JSON padded with zeros to its bucket (JSON never holds a NUL).
                let end = $0.lastIndex { $0 != 0 }.map { $0 + 1 } ?? 0
                return try JSONDecoder().decode(ConflictRecord.self, from: Data(UnsafeRawBufferPointer(rebasing: $0[0..<end])))
            }
            out.append((c, describe(c)))
        }
        return out.sorted { $0.0.time < $1.0.time }.map { (record: ConflictSummary($0.0), text: $0.1) }
    }
}

/// A resolved conflict as `vault sync --conflicts` shows it.
package struct ConflictSummary: Sendable {
    package let kind: String
    package let item: String
    package let name: String
    package let field: String?
    package let kept: String?
    package let lost: String?
    package let secret: Bool
    package let time: Int64

    init(_ c: ConflictRecord) {
        kind = c.kind; item = c.item; name = c.name; field = c.field; kept = c.kept; lost = c.lost; secret = c.secret; time = c.time
    }
}
