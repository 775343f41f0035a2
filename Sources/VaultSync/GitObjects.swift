import Foundation
import VaultKit
import VaultSystem

/// One entry of a tree listing.
struct TreeEntry: Equatable {
    var mode: String
    var type: String
    var sha: String
}

/// The plumbing vault uses: reading trees and blobs, writing blobs, trees and commits.
extension Git {
    /// The commit a ref names, nil when the ref does not exist.
    func resolve(_ ref: String) throws -> String? {
        let out = try run(["rev-parse", "--verify", "--quiet", ref + "^{commit}"])
        return out.status.isSuccess ? out.text : nil
    }

    /// Every blob of a commit's tree, by path (`ls-tree -r`).
    func tree(of commit: String) throws -> [String: TreeEntry] {
        try entries(try checked(["ls-tree", "-r", "-z", "--full-tree", commit]).stdout)
    }

    /// The entries of `ls-tree -z` / `diff-tree -z` style output of `ls-tree`.
    func entries(_ raw: [UInt8]) throws -> [String: TreeEntry] {
        var out: [String: TreeEntry] = [:]
        for record in raw.split(separator: 0) {
            guard let tab = record.firstIndex(of: 9) else { throw untrusted("tree listing is malformed") }
            let head = String(decoding: record[record.startIndex..<tab], as: UTF8.self).split(separator: " ")
            let path = String(decoding: record[(tab + 1)...], as: UTF8.self)
            guard head.count == 3 else { throw untrusted("tree listing is malformed") }
            out[path] = TreeEntry(mode: String(head[0]), type: String(head[1]), sha: String(head[2]))
        }
        return out
    }

    /// The contents of blobs, by sha (one `cat-file --batch`). Each is at most `limit` bytes.
    func blobs(_ shas: [String], limit: Int = 64 << 20) throws -> [String: [UInt8]] {
        let unique = Array(Set(shas))
        guard !unique.isEmpty else { return [:] }
        let out = try checked(["cat-file", "--batch"], input: Array(unique.joined(separator: "\n").utf8) + [10]).stdout
        var result: [String: [UInt8]] = [:]
        var i = 0
        while i < out.count {
            guard let nl = out[i...].firstIndex(of: 10) else { throw untrusted("object listing is malformed") }
            let head = String(decoding: out[i..<nl], as: UTF8.self).split(separator: " ")
            guard head.count == 3, head[1] == "blob", let size = Int(head[2]), size <= limit, nl + 1 + size < out.count + 1 else {
                throw untrusted("object \(head.first ?? "") is missing, not a blob or too large")
            }
            result[String(head[0])] = Array(out[(nl + 1)..<(nl + 1 + size)])
            i = nl + 1 + size + 1
        }
        return result
    }

    /// Writes blobs into the object store in one `fast-import` (one pack), returning their shas in order.
    func writeBlobs(_ contents: [[UInt8]]) throws -> [String] {
        guard !contents.isEmpty else { return [] }
        var input: [UInt8] = []
        input.reserveCapacity(contents.reduce(0) { $0 + $1.count + 40 })
        for (n, c) in contents.enumerated() {
            input += Array("blob\nmark :\(n + 1)\ndata \(c.count)\n".utf8)
            input += c
            input.append(10)
        }
        input += Array("done\n".utf8)
        let marks = repository + "/vault-tmp-marks-" + hexString(randomBytes(8))
        defer { try? FileSystem.remove(marks) }
        try checked(["fast-import", "--quiet", "--done", "--export-marks=" + marks], input: input)
        let text = String(decoding: (try? PrivateFiles.read(marks, limit: 1 << 30)) ?? [], as: UTF8.self)
        var shas = [String](repeating: "", count: contents.count)
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let n = Int(parts[0].dropFirst()), n >= 1, n <= contents.count else { continue }
            shas[n - 1] = String(parts[1])
        }
        guard !shas.contains("") else { throw VaultError.failure("git fast-import did not write every object") }
        return shas
    }

    /// Builds the tree of `files` (paths at most one folder deep) and returns its sha.
    func writeTree(_ files: [String: TreeEntry]) throws -> String {
        var folders: [String: [(String, String)]] = [:]
        var root: [String] = []
        for (path, e) in files {
            if let slash = path.firstIndex(of: "/") {
                folders[String(path[..<slash]), default: []].append((String(path[path.index(after: slash)...]), e.sha))
            } else {
                root.append("100644 blob \(e.sha)\t\(path)")
            }
        }
        for (name, entries) in folders {
            let listing = entries.map { "100644 blob \($0.1)\t\($0.0)" }.joined(separator: "\0") + "\0"
            let sha = try checked(["mktree", "-z"], input: Array(listing.utf8)).text
            root.append("040000 tree \(sha)\t\(name)")
        }
        let listing = root.isEmpty ? "" : root.joined(separator: "\0") + "\0"
        return try checked(["mktree", "-z"], input: Array(listing.utf8)).text
    }

    /// A commit of `tree` with `parents` and `message`, authored by the device id only.
    func commit(tree: String, parents: [String], message: String, device: String) throws -> String {
        var arguments = ["commit-tree", tree]
        for p in parents { arguments += ["-p", p] }
        arguments += ["-F", "-"]
        let who = ["-c", "user.name=vault-\(device)", "-c", "user.email=\(device)@vault.invalid"]
        return try checked(who + arguments, input: Array(message.utf8)).text
    }

    /// A commit's tree, parents and message (`cat-file commit`).
    func commitObject(_ sha: String) throws -> (tree: String, parents: [String], message: String) {
        let raw = try checked(["cat-file", "commit", sha]).stdout
        let text = String(decoding: raw, as: UTF8.self)
        guard let split = text.range(of: "\n\n") else { throw untrusted("commit \(sha) is malformed") }
        var tree = "", parents: [String] = []
        for line in text[..<split.lowerBound].split(separator: "\n") {
            if line.hasPrefix("tree ") { tree = String(line.dropFirst(5)) }
            if line.hasPrefix("parent ") { parents.append(String(line.dropFirst(7))) }
            if line.hasPrefix("gpgsig") || line.hasPrefix("encoding") { throw untrusted("commit \(sha) carries headers vault never writes") }
        }
        return (tree, parents, String(text[split.upperBound...]))
    }

    /// Whether `a` is an ancestor of (or equal to) `b`.
    func isAncestor(_ a: String, of b: String) throws -> Bool {
        let out = try run(["merge-base", "--is-ancestor", a, b])
        switch out.status {
        case .exited(0): return true
        case .exited(1): return false
        default: throw VaultError.failure("git merge-base failed: \(out.stderr)")
        }
    }
}
