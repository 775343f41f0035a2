import FoundationEssentials
import VaultKit
import VaultSystem

/// One entry of a tree listing.
struct TreeEntry: Equatable {
    var mode: String
    var type: String
    var sha: String
}

/// One path's entry before and after (nil: absent there).
struct TreeChange: Equatable {
    var old: TreeEntry?
    var new: TreeEntry?
}

/// The plumbing vault uses: reading trees and blobs, writing blobs, trees and commits.
extension Git {
    /// The commit a ref names, nil when the ref does not exist.
    func resolve(_ ref: String) throws -> String? {
        let out = try run(["rev-parse", "--verify", "--quiet", ref + "^{commit}"])
        return out.status.isSuccess ? out.text : nil
    }

    /// Every blob of a commit's tree, by path (`ls-tree -r`). Only a first sync or a clone
    /// needs a whole listing; every other step reads `changes` between two commits.
    func tree(of commit: String) throws -> [String: TreeEntry] {
        try entries(try checked(["ls-tree", "-r", "-z", "--full-tree", commit]).stdout)
    }

    /// The entries of `paths` in a commit's tree (those that exist), without listing the rest.
    func entries(at commit: String, _ paths: [String]) throws -> [String: TreeEntry] {
        try entries(try checked(["ls-tree", "-z", "--full-tree", commit, "--"] + paths).stdout)
    }

    /// The entries of `ls-tree -z` output (`MODE TYPE SHA\tPATH\0`), read from the bytes.
    func entries(_ raw: [UInt8]) throws -> [String: TreeEntry] {
        var out: [String: TreeEntry] = [:]
        var i = 0
        while i < raw.count {
            guard let end = raw[i...].firstIndex(of: 0), let tab = raw[i..<end].firstIndex(of: 9),
                  let s1 = raw[i..<tab].firstIndex(of: 32), let s2 = raw[(s1 + 1)..<tab].firstIndex(of: 32) else {
                throw untrusted("tree listing is malformed")
            }
            out[String(decoding: raw[(tab + 1)..<end], as: UTF8.self)] = TreeEntry(
                mode: String(decoding: raw[i..<s1], as: UTF8.self), type: String(decoding: raw[(s1 + 1)..<s2], as: UTF8.self),
                sha: String(decoding: raw[(s2 + 1)..<tab], as: UTF8.self))
            i = end + 1
        }
        return out
    }

    /// What changed from the tree of `from` (nil: an empty tree) to the tree of `to`, file by
    /// file (`diff-tree -r`, no rename detection): one `TreeChange` per path added, changed or
    /// removed. Costs what changed, not the size of the trees.
    func changes(from: String?, to: String) throws -> [String: TreeChange] {
        guard let from else {
            return try tree(of: to).mapValues { TreeChange(old: nil, new: $0) }
        }
        let raw = try checked(["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", from, to]).stdout
        var out: [String: TreeChange] = [:]
        var i = 0
        let zero = String(repeating: "0", count: 40)
        while i < raw.count {
            // ":OLDMODE NEWMODE OLDSHA NEWSHA STATUS\0PATH\0"
            guard raw[i] == 58, let end = raw[i...].firstIndex(of: 0), end + 1 < raw.count, let pathEnd = raw[(end + 1)...].firstIndex(of: 0) else {
                throw untrusted("tree difference is malformed")
            }
            let head = String(decoding: raw[(i + 1)..<end], as: UTF8.self).split(separator: " ")
            guard head.count == 5 else { throw untrusted("tree difference is malformed") }
            let path = String(decoding: raw[(end + 1)..<pathEnd], as: UTF8.self)
            func entry(_ mode: Substring, _ sha: Substring) -> TreeEntry? {
                guard sha != zero, mode != "000000" else { return nil }
                return TreeEntry(mode: String(mode), type: mode == "160000" ? "commit" : mode == "040000" ? "tree" : "blob", sha: String(sha))
            }
            out[path] = TreeChange(old: entry(head[0], head[2]), new: entry(head[1], head[3]))
            i = pathEnd + 1
        }
        return out
    }

    /// The tree of `base`'s tree (nil: empty) with `set` written and `remove` taken out, built
    /// in a temporary index (`read-tree`, `update-index --index-info`, `write-tree`): the
    /// unchanged folders are not listed into vault at all. Returns the tree's sha.
    func writeTree(base: String?, set: [String: String], remove: [String]) throws -> String {
        let index = repository + "/vault-tmp-index-" + hexString(randomBytes(8))
        defer { try? FileSystem.remove(index); try? FileSystem.remove(index + ".lock") }
        let env = ["GIT_INDEX_FILE": index]
        if let base { try checked(["read-tree", base], extra: env) }
        var lines: [UInt8] = []
        lines.reserveCapacity((set.count + remove.count) * 100)
        for path in remove where set[path] == nil { lines += Array("0 \(String(repeating: "0", count: 40))\t\(path)".utf8) + [0] }
        for (path, sha) in set { lines += Array("100644 \(sha)\t\(path)".utf8) + [0] }
        if !lines.isEmpty { try checked(["update-index", "-z", "--index-info"], input: lines, extra: env) }
        return try checked(["write-tree"], extra: env).text
    }

    /// The sha of a commit's tree.
    func treeSHA(of commit: String) throws -> String {
        try checked(["rev-parse", "--verify", commit + "^{tree}"]).text
    }

    /// The contents of blobs, by sha (one `cat-file --batch`). Each is at most `limit` bytes.
    func blobs(_ shas: [String], limit: Int = 64 << 20) throws -> [String: [UInt8]] {
        let unique = Array(Set(shas))
        guard !unique.isEmpty else { return [:] }
        let out = try checked(["cat-file", "--batch"], input: Array(unique.joinedText(separator: "\n").utf8) + [10]).stdout
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
        guard let split = text.byteRange(of: "\n\n") else { throw untrusted("commit \(sha) is malformed") }
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
