import FoundationEssentials
import VaultKit
import VaultSystem

/// Whether `path` is a folder.
package func isFolder(_ path: String) -> Bool {
    (try? FileStatus.of(path, followingLinks: true))?.kind == .directory
}

/// A `pass` password store: every `*.gpg` file below the folder (`.git` and `.extensions`
/// skipped), decrypted through `gpg` as pass itself does (`gpg -d --quiet --yes --batch`, the
/// user's agent and keyring), one entry at a time; the entry's path is the item's name.
package enum PassStore {
    package static func read(_ folder: String, environment: [String: String], now: Int64) throws -> ImportBatch {
        guard FileSystem.exists(folder + "/.gpg-id") else {
            throw VaultError.usage("'\(folder)' is not a pass store (it has no .gpg-id)")
        }
        guard case .found(let gpg) = ProgramLookup.find("gpg", searchPath: environment["PATH"] ?? "/usr/bin:/bin") else {
            throw VaultError.usage("gpg is not installed; pass entries are decrypted with it", hint: "apt-get install gnupg")
        }
        let root = URL(fileURLWithPath: folder).standardizedFileURL.path
        var paths: [String] = []
        guard let walk = try? FileManager.default.subpathsOfDirectory(atPath: root) else { throw VaultError.io(path: folder, "cannot be listed") }
        for rel in walk {
            if rel.hasPrefix(".git") || rel.hasPrefix(".extensions") || rel.contains("/.") { continue }
            if rel.hasSuffix(".gpg") { paths.append(rel) }
        }
        paths.sort()
        var batch = ImportBatch()
        let extra = (environment["PASSWORD_STORE_GPG_OPTS"] ?? "").split(separator: " ").map(String.init)
        for rel in paths {
            let name = String(rel.dropLast(4))
            let file = root + "/" + rel
            var text = try decrypt(gpg, extra + ["-d", "--quiet", "--yes", "--batch", "--compress-algo=none", "--no-encrypt-to", file],
                                   entry: name, environment: environment)
            defer { wipe(&text) }
            guard let s = String(validating: text, as: UTF8.self) else { throw VaultError.usage("entry '\(name)': not UTF-8 text once decrypted") }
            let mtime = (try? FileManager.default.attributesOfItem(atPath: file)[.modificationDate] as? Date).map { Int64($0.timeIntervalSince1970) }
            try batch.add(PassEntry.item(path: name, text: s, modified: mtime, now: now), entry: "entry '\(name)'")
        }
        return batch
    }

    /// gpg's standard output, at most `ImportLimits.item` (gpg inflates what the file holds
    /// compressed, so a small file can decrypt to gigabytes: gpg is stopped at the bound); its
    /// error output is shown only in the error (the last 64 KiB of it kept).
    static func decrypt(_ gpg: String, _ arguments: [String], entry: String, environment: [String: String]) throws -> [UInt8] {
        let run: CapturedRun
        do {
            run = try ChildProcess.capture(path: gpg, arguments: ["gpg"] + arguments, environment: environment,
                                           outputLimit: ImportLimits.item, errorKept: 64 << 10)
        } catch {
            throw VaultError.failure("gpg could not be started: \(error)")
        }
        if run.overLimit { throw ImportLimits.tooLarge("entry '\(entry)' (decrypted)") }
        guard run.status == .exited(0) else {
            var data = run.output
            wipe(&data)
            let why = String(decoding: run.errorTail, as: UTF8.self).split(separator: "\n").last.map(String.init)
                ?? "exit \(run.status.shellCode)"
            throw VaultError.usage("entry '\(entry)': gpg could not decrypt it (\(why))")
        }
        return run.output
    }

}
