import FoundationEssentials
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

    package init() {}
}

/// Where a vault's sync files live: beside its vault.db.
package struct SyncPaths: Sendable {
    package let repository: String
    package let lock: String
    package let state: String
    package let stamps: String
    /// Present (empty, 0600) when the vault syncs after each write (`vault remote set --auto`).
    package let auto: String
    /// Present when a write here may not be committed to `sync.git` yet (`--auto`, the write
    /// could not commit it itself); a sync renames it to `taken` before it reads the rows and
    /// removes that when it finished, so a killed one leaves it behind.
    package let pending: String
    package let taken: String

    package init(_ location: VaultLocation) {
        repository = location.folder + "/sync.git"
        lock = location.folder + "/sync.lock"
        state = location.folder + "/sync.state"
        stamps = location.folder + "/sync.stamps"
        auto = location.folder + "/sync.auto"
        pending = location.folder + "/sync.pending"
        taken = location.folder + "/sync.pending.taken"
    }
}

/// What says a change of this machine may not be on the remote yet: the `sync.pending` marker
/// (a write not committed to `sync.git`), or a local branch ahead of the remote head last seen.
/// Holds no secret: the markers are empty files, the refs name sealed commits.
package enum SyncPending {
    /// Marks that a write may not be committed to the repository yet.
    package static func mark(_ location: VaultLocation) {
        _ = try? AtomicFile.write([], to: SyncPaths(location).pending)
    }

    /// Taken by a sync (holding the lock) before it reads the rows it commits: a write marked
    /// after this is the next sync's.
    static func take(_ paths: SyncPaths) {
        if FileSystem.exists(paths.pending) { try? FileSystem.rename(paths.pending, to: paths.taken) }
    }

    /// The sync that took the marker committed every row it read.
    static func finish(_ paths: SyncPaths) {
        try? FileSystem.remove(paths.taken)
    }

    /// Whether a change of this machine may not have reached the remote: a marker is there, or
    /// the local branch is not contained in the remote head last fetched or pushed.
    package static func isPending(_ location: VaultLocation, environment: [String: String]) -> Bool {
        let paths = SyncPaths(location)
        if FileSystem.exists(paths.pending) || FileSystem.exists(paths.taken) { return true }
        guard FileSystem.exists(paths.repository + "/HEAD"),
              let git = try? Git(repository: paths.repository, environment: environment, interactive: false),
              let head = try? git.resolve(SyncEngine.branch) else { return false }
        guard let seen = try? git.resolve(SyncEngine.tracking) else { return true }
        return !((try? git.isAncestor(head, of: seen)) ?? false)
    }

    /// What `vault sync --background` does without an unlock session, where no key is: pushes
    /// the commits this machine made (a write commits its change itself) when the remote's
    /// branch is behind them. Fast-forward only: git refuses anything else, and nothing comes
    /// in, so nothing the remote sent needs checking. Waits for the sync lock.
    /// - Returns: true when the remote now holds this machine's head; false when git failed or
    ///   the remote moved (the next `vault sync` merges).
    package static func pushCommitted(_ location: VaultLocation, environment: [String: String]) throws -> Bool {
        let paths = SyncPaths(location)
        guard FileSystem.exists(paths.repository + "/HEAD") else { return false }
        let git = try Git(repository: paths.repository, environment: environment, interactive: false)
        let lock = try FileLock(path: paths.lock)
        return try lock.withExclusive {
            guard let head = try git.resolve(SyncEngine.branch) else { return false }
            if let seen = try git.resolve(SyncEngine.tracking), try git.isAncestor(head, of: seen) { return true }
            guard try git.run(["push", "--quiet", "--porcelain", "origin", head + ":refs/heads/vault"]).status.isSuccess else { return false }
            try git.checked(["update-ref", SyncEngine.tracking, head])
            return true
        }
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
        if let scheme = url.byteRange(of: "://"), let at = url[scheme.upperBound...].firstIndex(of: "@"),
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
        for path in [location.databasePath, location.databasePath + "-wal", location.databasePath + "-shm", paths.state, paths.stamps, paths.auto, paths.pending, paths.taken, paths.lock] {
            try? FileSystem.remove(path)
        }
        try? FileSystem.removeFolder(location.folder)
    }

    /// Turns the sync after each write on or off (`vault remote set URL --auto | --no-auto`).
    package static func setAuto(_ on: Bool, location: VaultLocation) throws {
        let path = SyncPaths(location).auto
        do {
            if on { try AtomicFile.write([], to: path) } else if FileSystem.exists(path) { try FileSystem.remove(path) }
        } catch { throw VaultError.io(path: path, "\(error)") }
    }

    /// Whether the vault syncs after each write.
    package static func isAuto(location: VaultLocation) -> Bool {
        FileSystem.exists(SyncPaths(location).auto)
    }

    /// The devices this machine's branch trusts (`devices/` less `revoked/`), as their ids: read
    /// from the repository with no key (the ids are in commit authors anyway).
    package static func devices(location: VaultLocation, environment: [String: String]) throws -> [String] {
        let paths = SyncPaths(location)
        guard FileSystem.exists(paths.repository + "/HEAD") else { return [] }
        let git = try Git(repository: paths.repository, environment: environment, interactive: false)
        guard let head = try git.resolve(SyncEngine.branch) else { return [] }
        let raw = try git.checked(["ls-tree", "-z", "--full-tree", "--name-only", head, "--", "devices/", "revoked/"]).stdout
        let names = raw.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
        let revoked = Set(names.filter { $0.hasPrefix("revoked/") }.map { $0.dropFirst("revoked/".count) })
        return names.filter { $0.hasPrefix("devices/") }.map { String($0.dropFirst("devices/".count)) }.filter { !revoked.contains(Substring($0)) }.sorted()
    }

    /// Forgets the remote (the local repository and its history stay, so a later `set` goes on).
    package static func remove(location: VaultLocation, environment: [String: String]) throws {
        let paths = SyncPaths(location)
        try setAuto(false, location: location)
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
    /// The row stamps as of the last sync (`sync.stamps`), and whether they changed since saved.
    var stamps: [[UInt8]: [UInt8]] = [:]
    var stampsDirty = false
    /// Items verify opened, by `path:sha` (apply takes them from here instead of opening them again).
    var opened: [String: Item] = [:]
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

    /// After a write made in this process with `--auto` set (the writer holds the key):
    /// commits this machine's changes to the local repository, with no network, when no sync
    /// holds the lock; `vault sync --background` then pushes them without a key.
    /// - Returns: false (nothing done) when a sync holds the lock, or the vault has no sync
    ///   state yet (a first sync still has to bring the remote's items).
    package func commitAfterWrite() throws -> Bool {
        guard let s = try vault.syncSecrets() else { return false }
        let lock = try FileLock(path: paths.lock)
        guard try lock.tryExclusive() else { return false }
        defer { lock.unlock() }
        try adopt(s)
        try loadState()
        guard stateLoaded else { return false }
        SyncPending.take(paths)
        var summary = SyncSummary()
        _ = try commitLocalChanges(&summary)
        SyncPending.finish(paths)
        return true
    }

    /// `vault remote revoke DEVICE`: syncs (so the device is known and this machine up to date),
    /// commits `revoked/DEVICE` (and removes `devices/DEVICE`), signed by this machine, and
    /// syncs again to push it. From then on every machine that has seen the revocation refuses
    /// a commit DEVICE signs.
    /// - Throws: `.usage` for this machine's own id or one that is no device of the vault,
    ///   `.alreadyExists` when it was revoked already; as `sync`.
    package func revoke(_ device: String) throws -> SyncSummary {
        let lock = try FileLock(path: paths.lock)
        return try lock.withExclusive {
            _ = try syncLocked()
            guard device != deviceHex else { throw VaultError.usage("\(device) is this machine: revoke it from another one") }
            guard let head = try git.resolve(SyncEngine.branch), let id = bytesFromHex(device), id.count == 16 else {
                throw VaultError.usage("'\(device)' is no device of this vault", hint: "'vault remote show' lists them")
            }
            let present = try git.entries(at: head, ["devices/" + device, "revoked/" + device])
            if present["revoked/" + device] != nil { throw VaultError.alreadyExists("the revocation of device \(device)") }
            guard present["devices/" + device] != nil else {
                throw VaultError.usage("'\(device)' is no device of this vault", hint: "'vault remote show' lists them")
            }
            let sha = try git.writeBlobs([try RevocationRecord.make(vaultID: vaultID, device: id, key: deviceMACKey!)])[0]
            let tree = try git.writeTree(base: head, set: ["revoked/" + device: sha], remove: ["devices/" + device])
            let commit = try signedCommit(tree: tree, parents: [head])
            try git.checked(["update-ref", SyncEngine.branch, commit, head])
            return try syncLocked()
        }
    }

    /// One sync under the lock; the pending marker is taken before any row is read and
    /// cleared only when the sync completed.
    private func syncLocked() throws -> SyncSummary {
        SyncPending.take(paths)
        let summary = try syncRounds()
        SyncPending.finish(paths)
        return summary
    }

    private func syncRounds() throws -> SyncSummary {
        var summary = SyncSummary()
        // The state (the remote head this machine last saw) is loaded before the first fetch,
        // so that fetch already holds the remote to it: a branch that went away, or a history
        // behind the one seen, is refused on the first sync of a new process as on any other.
        // Only a vault that never synced has no secrets yet: its first fetch brings the header
        // they come from (and it has no state to keep).
        var remote: String?
        if let s = try vault.syncSecrets() {
            try adopt(s)
            try loadState()
            remote = try fetch()
        } else {
            remote = try fetch()
            try establishSecrets(remote: remote)
            try loadState()
        }
        let fresh = !stateLoaded
        for attempt in 0..<6 {
            if attempt > 0 { remote = try fetch(); summary.retries += 1 }
            let (local, expected) = try commitLocalChanges(&summary)
            if let remote { try verify(remote: remote, local: local) }
            let target = try merge(local: local, remote: remote, &summary)
            try apply(from: local, to: target, expected: expected, fresh: fresh && attempt == 0, &summary)
            opened = [:]
            if let target, target != local {
                try git.checked(["update-ref", SyncEngine.branch, target] + (local.map { [$0] } ?? []))
            }
            state.local = target
            if let remote { state.remote = remote }
            state.hlc = clock.last
            try saveState()
            summary.head = target ?? ""
            guard let target, target != remote else { return summary }
            if try push(target) {
                state.remote = target
                try saveState()
                return summary
            }
        }
        throw VaultError.failure("the remote kept moving: 6 pushes were refused as not fast-forward", hint: "run 'vault sync' again")
    }

    /// Whether `sync.state` held a state this vault's key opens (false: a first sync, a clone).
    private var stateLoaded = false

    /// Reads `sync.state` and `sync.stamps` (a state that does not open counts as none).
    private func loadState() throws {
        let loaded = SyncState.load(paths.state, key: stateKey!)
        stateLoaded = loaded != nil
        state = loaded ?? SyncState()
        loadStamps()
        clock.observe(state.hlc)
    }

    /// The stamps the state was saved with; an older state's JSON stamps move to `sync.stamps`;
    /// none (every row is sent again) when the file is not the state's.
    private func loadStamps() {
        if let s = SyncStamps.load(paths.stamps, hash: state.stampsHash, key: stateKey!) {
            stamps = s
            stampsDirty = false
        } else {
            stamps = [:]
            for (k, v) in state.stamps ?? [:] {
                if let id = bytesFromHex(k), let stamp = bytesFromHex(v) { stamps[id] = stamp }
            }
            stampsDirty = true
        }
        state.stamps = nil
    }

    /// Saves the state (and first the stamps, when they changed: the state names their hash).
    private func saveState() throws {
        if stampsDirty {
            state.stampsHash = try SyncStamps.save(stamps, to: paths.stamps, key: stateKey!)
            stampsDirty = false
        }
        try state.save(paths.state, key: stateKey!)
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
        if out.status.isSuccess {
            // The remote head as this machine last knew it (what `SyncPending` compares with).
            try git.checked(["update-ref", SyncEngine.tracking, commit])
            return true
        }
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
        let current = try vault.rowStamps()
        let changed = current.filter { stamps[$0.key] != $0.value }.map(\.key)
        let deleted = stamps.keys.filter { current[$0] == nil }
        var files: [(String, [UInt8])] = []
        for (id, item) in try vault.items(ids: changed.sorted { $0.lexicographicallyPrecedes($1) }) {
            files.append(("items/" + hexString(id), try sealItem(item, id: id, version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID))))
        }
        // Only the two paths asked about are listed, not the tree.
        let present = try head.map { try git.entries(at: $0, ["header", "devices/" + deviceHex]) } ?? [:]
        let mark = "\(vault.generation):\(try vault.store.slotSequence())"
        if state.header != mark || present["header"] == nil {
            let slots = try vault.portableSlots().map {
                RepoHeader.Slot(id: $0.id, kind: $0.kind.rawValue, params: hexString($0.params), nonce: hexString($0.sealedNonce), wrapped: hexString($0.wrappedKey))
            }
            let h = RepoHeader(vault: vaultHex, generation: vault.generation, slotSeq: try vault.store.slotSequence(), hlc: clock.tick(),
                               slots: slots, repoKey: hexString(try vault.sealRepoKey(secrets)))
            files.append(("header", Array(try JSONEncoder().encode(h))))
            state.header = mark
        }
        if present["devices/" + deviceHex] == nil {
            let pk = secrets.devicePublicKey
            let d = DeviceRecord(device: deviceHex, publicKey: hexString(pk),
                                 mac: hexString(try DeviceRecord.mac(vaultID: vaultID, device: secrets.deviceID, publicKey: pk, key: deviceMACKey!)))
            files.append(("devices/" + deviceHex, Array(try JSONEncoder().encode(d))))
        }
        summary.sent += changed.count + deleted.count
        guard !files.isEmpty || !deleted.isEmpty else { return (head, current) }
        let shas = try git.writeBlobs(files.map(\.1))
        var set: [String: String] = [:]
        for ((path, _), sha) in zip(files, shas) { set[path] = sha }
        let tree = try git.writeTree(base: head, set: set, remove: deleted.map { "items/" + hexString($0) })
        stamps = current
        stampsDirty = true
        if files.isEmpty, let head, try git.treeSHA(of: head) == tree {
            // Rows deleted here that the repository never held: nothing to commit.
            state.hlc = clock.last
            try saveState()
            return (head, current)
        }
        let commit = try signedCommit(tree: tree, parents: head.map { [$0] } ?? [])
        try git.checked(["update-ref", SyncEngine.branch, commit] + (head.map { [$0] } ?? []))
        state.local = commit
        state.hlc = clock.last
        try saveState()
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

    func signedCommit(tree: String, parents: [String]) throws -> String {
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
        // The devices revoked in this machine's own (checked) history: no later tree undoes that.
        revoked = try local.map { try revokedDevices(at: $0) } ?? []
        let known = revoked
        // And those the remote's head names, before any commit is checked: a commit of such a
        // device is accepted only when it comes before its revocation (an ancestor of a commit
        // that added its `revoked/` file), whatever order git lists the history in: a commit on
        // a side branch beside the revocation is refused. Each of those files is checked when
        // the loop meets the commit that added it.
        revocations = [:]
        for device in try revokedDevices(at: remote).subtracting(known) {
            let adds = try git.checked(["log", "--format=%H", "--diff-filter=A", remote, "--", "revoked/" + device]).text
            revocations[device] = adds.split(separator: "\n").map(String.init)
        }
        let list = try git.checked(["rev-list", "--topo-order", "--reverse", remote] + exclude).text
        for commit in list.split(separator: "\n").map(String.init) { try verify(commit: commit) }
        // A machine revoked by another stops when it learns so: its commits would only be refused.
        if revoked.subtracting(known).contains(deviceHex) {
            throw VaultError.failure("this machine (device \(deviceHex)) was revoked by another machine of the vault: nothing was synced",
                                     hint: "start it again with 'vault clone URL --vault OTHER'")
        }
    }

    /// Devices revoked while verifying: this machine's own, and those of every commit checked so far.
    var revoked: Set<String> = []
    /// The devices the remote's head revokes (and this machine did not know of), each with the
    /// commits that added its `revoked/` file.
    var revocations: [String: [String]] = [:]

    /// The devices `revoked/` names at `commit` (only that folder is listed).
    func revokedDevices(at commit: String) throws -> Set<String> {
        let raw = try git.checked(["ls-tree", "-z", "--full-tree", "--name-only", commit, "--", "revoked/"]).stdout
        return Set(raw.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            .filter { $0.hasPrefix("revoked/") }.map { String($0.dropFirst("revoked/".count)) })
    }

    /// Whether `path` is a file a vault repository holds: `header`, or `items/`, `devices/`,
    /// `conflicts/` or `revoked/` and 32 lowercase hex digits.
    static func isRepositoryPath(_ path: String) -> Bool {
        if path == "header" { return true }
        let parts = path.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard parts.count == 2, ["items", "devices", "conflicts", "revoked"].contains(String(decoding: parts[0], as: UTF8.self)) else { return false }
        return parts[1].count == 32 && parts[1].allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    func verify(commit: String) throws {
        let c = try git.commitObject(commit)
        guard let (device, signature) = CommitSignature.parse(message: c.message) else {
            throw untrusted("commit \(commit) is not a vault commit (unsigned)")
        }
        if try revoked.contains(device) || (git.run(["cat-file", "-e", commit + ":revoked/" + device]).status.isSuccess) {
            throw untrusted("commit \(commit) is signed by device \(device), which was revoked")
        }
        if let adds = revocations[device], try !adds.contains(where: { try $0 == commit || git.isAncestor(commit, of: $0) }) {
            throw untrusted("commit \(commit) is signed by device \(device), which was revoked (the commit does not come before its revocation)")
        }
        let deviceFile = try git.run(["cat-file", "blob", commit + ":devices/" + device])
        guard deviceFile.status.isSuccess,
              let pk = DeviceRecord.verifiedKey(deviceFile.stdout, name: device, vaultID: vaultID, key: deviceMACKey!) else {
            throw untrusted("commit \(commit) is signed by an unknown key (device \(device) is not one of this vault's)")
        }
        guard Ed25519.verify(signature, of: CommitSignature.signedText(vault: vaultHex, device: device, tree: c.tree, parents: c.parents), publicKey: pk) else {
            throw untrusted("commit \(commit) has a signature that does not verify under device \(device)'s key")
        }
        // The files that differ from at least one parent (every file of a first commit), and
        // what each parent held there: read from `diff-tree`, never from whole listings.
        var changed: [String: TreeEntry] = [:], before: [String: [String]] = [:]
        for parent in c.parents.isEmpty ? [nil] : c.parents.map(Optional.some) {
            for (path, ch) in try git.changes(from: parent, to: commit) {
                guard let new = ch.new else {
                    if path.hasPrefix("revoked/") { throw untrusted("commit \(commit) takes back the revocation \(path)") }
                    continue
                }
                changed[path] = new
                if let old = ch.old { before[path, default: []].append(old.sha) }
            }
        }
        for (path, e) in changed {
            guard e.mode == "100644", e.type == "blob", SyncEngine.isRepositoryPath(path) else {
                throw untrusted("commit \(commit) holds \(path) (\(e.mode) \(e.type)), which is no file of a vault repository")
            }
        }
        let blobs = try git.blobs(changed.values.map(\.sha) + before.values.joined())
        for (path, e) in changed {
            guard let file = blobs[e.sha] else { throw untrusted("commit \(commit) lacks the object of \(path)") }
            if path == "header" { _ = try RepoHeader.decode(file, vaultID: vaultID); continue }
            let id = bytesFromHex(String(path.split(separator: "/")[1]))!
            if path.hasPrefix("items/") {
                let (version, item) = try openItem(file, id: id, path: path)
                for old in before[path] ?? [] {
                    if let was = blobs[old].flatMap(SealedFile.version(of:)), !(was < version) {
                        throw untrusted("commit \(commit) puts back an older version of \(path) (a replayed item file)")
                    }
                }
                opened[path + ":" + e.sha] = item
                clock.observe(version.hlc)
            } else if path.hasPrefix("revoked/") {
                guard RevocationRecord.holds(file, name: String(path.dropFirst("revoked/".count)), vaultID: vaultID, key: deviceMACKey!) else {
                    throw untrusted("commit \(commit) adds \(path), a revocation no holder of the vault's key made")
                }
                revoked.insert(String(path.dropFirst("revoked/".count)))
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
        let base: String? = baseOut.status.isSuccess ? baseOut.text : nil
        // What each side changed since the merge base (diff-tree: the cost is what changed).
        // The result is this machine's tree with `overrides` (nil: removed) and `files` written.
        let ours = try git.changes(from: base, to: local), theirs = try git.changes(from: base, to: remote)
        var overrides: [String: TreeEntry?] = [:]
        var both: [String] = []
        for (path, t) in theirs {
            guard let o = ours[path] else { overrides.updateValue(t.new, forKey: path); continue }
            if o.new != t.new { both.append(path) }
        }
        let blobs = try git.blobs(both.flatMap { [ours[$0]?.new?.sha, theirs[$0]?.new?.sha, ours[$0]?.old?.sha].compactMap { $0 } })
        var files: [(String, [UInt8])] = []
        var conflicts: [ConflictRecord] = []
        let now = unixNow()
        for path in both.sorted() {
            let oEntry = ours[path]?.new, tEntry = theirs[path]?.new, bEntry = ours[path]?.old
            let o = oEntry.flatMap { blobs[$0.sha] }, t = tEntry.flatMap { blobs[$0.sha] }
            if path == "header" {
                let ho = try o.map { try RepoHeader.decode($0, vaultID: vaultID) }, ht = try t.map { try RepoHeader.decode($0, vaultID: vaultID) }
                if (ht?.hlc ?? 0) > (ho?.hlc ?? 0) { overrides.updateValue(tEntry, forKey: path) }
            } else if path.hasPrefix("items/") {
                let id = bytesFromHex(String(path.dropFirst(6)))!
                let side: ([UInt8]?) throws -> MergeSide = { f in
                    guard let f else { return MergeSide() }
                    let (v, item) = try self.openItem(f, id: id, path: path)
                    return MergeSide(item: item, version: v)
                }
                let b = try side(bEntry.flatMap { blobs[$0.sha] })
                let outcome = ItemMerge.merge(id: hexString(id), base: b.item, ours: try side(o), theirs: try side(t), now: now)
                conflicts += outcome.conflicts
                if let item = outcome.item {
                    files.append((path, try sealItem(item, id: id, version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID))))
                } else {
                    overrides.updateValue(nil, forKey: path)
                }
            } else if oEntry == nil {
                overrides.updateValue(tEntry, forKey: path)
            }
        }
        try resolveNames(overrides: &overrides, files: &files, conflicts: &conflicts, now: now)
        for c in conflicts {
            let id = randomBytes(16)
            var plain = Array(try JSONEncoder().encode(c))
            defer { wipe(&plain) }
            files.append(("conflicts/" + hexString(id), try SealedFile.seal(plain, label: "vault-sync-conflict-v1", vaultID: vaultID, id: id,
                                                                           version: ItemVersion(hlc: clock.tick(), device: secrets.deviceID), key: conflictKey!)))
            summary.conflicts.append(describe(c))
        }
        let shas = try git.writeBlobs(files.map(\.1))
        var set: [String: String] = [:], remove: [String] = []
        for (path, e) in overrides {
            if let e { set[path] = e.sha } else { remove.append(path) }
        }
        for ((path, _), sha) in zip(files, shas) { set[path] = sha }
        return try signedCommit(tree: try git.writeTree(base: local, set: set, remove: remove), parents: [local, remote])
    }

    /// Keeps both of two items that ended with the same name: of the items that differ from
    /// this machine's tree (only they can clash: this machine's own names are unique in its
    /// vault), taken in version order, one whose name is held already gets a suffix, ` (2)`,
    /// ` (3)`..., and a new version. `overrides` are the merge's changes to this machine's
    /// tree (nil: removed); every item of this vault is in that tree (committed before the merge).
    private func resolveNames(overrides: inout [String: TreeEntry?], files: inout [(String, [UInt8])],
                              conflicts: inout [ConflictRecord], now: Int64) throws {
        let written = Dictionary(files.map { ($0.0, $0.1) }, uniquingKeysWith: { a, _ in a })
        let changedHere = overrides.compactMap { path, e in path.hasPrefix("items/") && e != nil ? path : nil }
        let incomingPaths = Set(changedHere).union(written.keys)
        guard !incomingPaths.isEmpty else { return }
        let fromBlobs = try git.blobs(incomingPaths.compactMap { written[$0] == nil ? overrides[$0]??.sha : nil })
        var incoming: [String: (version: ItemVersion, item: Item)] = [:]
        for path in incomingPaths {
            guard let file = written[path] ?? overrides[path]?.flatMap({ fromBlobs[$0.sha] }) else { continue }
            let (v, item) = try openItem(file, id: bytesFromHex(String(path.dropFirst(6)))!, path: path)
            incoming[path] = (v, item)
        }
        var taken = Set<String>()
        func heldLocally(_ name: String) throws -> Bool {
            guard let id = try vault.itemID(named: name) else { return false }
            let path = "items/" + hexString(id)
            let present = overrides[path].map { $0 != nil } ?? true
            return present && incoming[path] == nil
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
        var upserts: [String: TreeEntry] = [:], deletes: [[UInt8]] = []
        if target != local {
            for (path, ch) in try git.changes(from: local, to: target) where path.hasPrefix("items/") {
                let id = bytesFromHex(String(path.dropFirst(6)))!
                if let new = ch.new { upserts[path] = new } else if expected[id] != nil { deletes.append(id) }
            }
        }
        if fresh {
            // No state (a first sync, a clone): every item of the target this vault lacks.
            for (path, e) in try git.tree(of: target) where path.hasPrefix("items/") && upserts[path] == nil {
                if expected[bytesFromHex(String(path.dropFirst(6)))!] == nil { upserts[path] = e }
            }
        }
        guard !upserts.isEmpty || !deletes.isEmpty else { return }
        let blobs = try git.blobs(upserts.compactMap { opened[$0.key + ":" + $0.value.sha] == nil ? $0.value.sha : nil })
        var items: [(id: [UInt8], item: Item)] = []
        items.reserveCapacity(upserts.count)
        for (path, e) in upserts.sorted(by: { $0.key < $1.key }) {
            let id = bytesFromHex(String(path.dropFirst(6)))!
            if let item = opened[path + ":" + e.sha] {
                items.append((id, item))
            } else {
                guard let file = blobs[e.sha] else { throw untrusted("lacks the object of \(path)") }
                items.append((id, try openItem(file, id: id, path: path).1))
            }
        }
        let written = try vault.applySync(deletes: deletes, upserts: items, expected: expected)
        for id in deletes { stamps[id] = nil }
        for (id, _) in items { stamps[id] = nil }
        for (id, stamp) in written { stamps[id] = stamp }
        stampsDirty = true
        summary.received += items.count
        summary.deleted += deletes.count
    }

    // MARK: listing conflicts

    /// Every conflict resolved in this vault's history (the local head's `conflicts/`), oldest first.
    package func conflicts() throws -> [(record: ConflictSummary, text: String)] {
        guard let s = try vault.syncSecrets() else { return [] }
        try adopt(s)
        guard let head = try git.resolve(SyncEngine.branch) else { return [] }
        let tree = try git.entries(try git.checked(["ls-tree", "-r", "-z", "--full-tree", head, "--", "conflicts"]).stdout)
            .filter { $0.key.hasPrefix("conflicts/") }
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

    /// A conflict as an unlock session's agent sent it.
    package init(kind: String, item: String, name: String, field: String?, kept: String?, lost: String?, secret: Bool, time: Int64) {
        self.kind = kind; self.item = item; self.name = name; self.field = field; self.kept = kept; self.lost = lost
        self.secret = secret; self.time = time
    }
}
