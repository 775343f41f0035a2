import Foundation
import Testing

/// A git source tree at a release tag with `t/helper/test-tool` built (docs/cli.md, "git's own
/// helper suite"): found in `VAULT_GIT_SOURCES` (a folder of trees named `vX.Y.Z`), else in
/// `../git-src` beside the package.
struct GitTree {
    let path: String
    let version: [Int]

    var name: String { "v" + version.map(String.init).joined(separator: ".") }

    /// The folder searched for trees.
    static let folder: String = ProcessInfo.processInfo.environment["VAULT_GIT_SOURCES"]
        ?? URL(fileURLWithPath: packageRoot).deletingLastPathComponent().appendingPathComponent("git-src").path

    /// Every usable tree (the suite and test-tool present), oldest first.
    static let all: [GitTree] = {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.compactMap { name -> GitTree? in
            guard name.hasPrefix("v") else { return nil }
            let parts = name.dropFirst().split(separator: ".").map { Int($0) }
            guard parts.count == 3, parts.allSatisfy({ $0 != nil }) else { return nil }
            let path = folder + "/" + name
            let fm = FileManager.default
            guard fm.fileExists(atPath: path + "/t/t0303-credential-external.sh"),
                  fm.isExecutableFile(atPath: path + "/t/helper/test-tool"), fm.fileExists(atPath: path + "/GIT-BUILD-OPTIONS") else { return nil }
            return GitTree(path: path, version: parts.map { $0! })
        }.sorted { $0.version.lexicographicallyPrecedes($1.version) }
    }()

    /// The installed git's version (`git --version`).
    static let installedVersion: [Int]? = {
        let r = spawn("/usr/bin/git", ["--version"], env: ["PATH": "/usr/bin:/bin"])
        guard let word = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ").dropFirst(2).first else { return nil }
        let parts = word.split(separator: ".").prefix(3).compactMap { Int($0) }
        return parts.count == 3 ? parts : nil
    }()

    /// The tree of the installed git's own release.
    static var installed: GitTree? { all.first { $0.version == installedVersion } }

    /// The newest tree from git 2.41 on (the first release whose suite checks both
    /// `password_expiry_utc` and `oauth_refresh_token`), built in full (its own `git`).
    static var newer: GitTree? {
        all.last { !$0.version.lexicographicallyPrecedes([2, 41, 0]) && FileManager.default.isExecutableFile(atPath: $0.path + "/git") }
    }

    static var absent: String {
        "no git source tree in \(folder) (see docs/cli.md, \"git's own helper suite\"; VAULT_GIT_SOURCES moves it)"
    }
}

/// git's own suite for credential helpers, `t/t0303-credential-external.sh`, run against
/// `git-credential-vault` with an unlock session: of the installed git's release, with the
/// installed git (`GIT_TEST_INSTALLED`), and of a newer release with the git built in its tree.
@Suite struct GitSuiteTests {
    /// Runs t0303 of `tree`, with `installed` (a folder with `git`) or the tree's own git, and
    /// returns its output; the vault must be empty again afterwards (the suite cleans up).
    func runSuite(_ tree: GitTree, installed: String?) throws -> RunResult {
        let box = Sandbox()
        box.initVault()
        let bin = box.home + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/git-credential-vault", withDestinationPath: vaultBinary)
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "300"], passcode: Sandbox.passcode)
        #expect(r.status == 0, "\(r.stderr)")
        defer { box.vault(["lock", "--all"]) }
        // test-lib.sh resets HOME and many variables: the setup hook puts the sandbox back.
        let setup = ["VAULT_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"].map { "export \($0)='\(box.env[$0]!)'" }.joined(separator: "; ")
        var env = box.env
        env["PATH"] = bin + ":/usr/bin:/bin"
        env["GIT_TEST_CREDENTIAL_HELPER"] = "vault"
        env["GIT_TEST_CREDENTIAL_HELPER_SETUP"] = setup
        if let installed { env["GIT_TEST_INSTALLED"] = installed }
        r = spawn("/bin/sh", ["-c", "cd \"$0\"/t && exec ./t0303-credential-external.sh --root=\"$1\"", tree.path, box.home + "/trash"],
                  env: env, timeLimit: 300)
        let left = box.vault(["ls"], passcode: Sandbox.passcode)
        #expect(left.status == 0 && left.stdout.isEmpty, "the suite's clean-up left: \(left.stdout)")
        return r
    }

    @Test(.enabled(if: GitTree.installed != nil, "\(GitTree.absent): no tree of the installed git's release"))
    func t0303OfTheInstalledGitsRelease() throws {
        let tree = try #require(GitTree.installed)
        let r = try runSuite(tree, installed: "/usr/bin")
        #expect(r.status == 0 && r.stdout.contains("# passed all"), "t0303 of \(tree.name):\n\(r.stdout)\n\(r.stderr)")
        print("GitSuiteTests: t0303 of \(tree.name) with /usr/bin/git: \(r.stdout.split(separator: "\n").last { $0.hasPrefix("# passed") } ?? "")")
    }

    @Test(.enabled(if: GitTree.newer != nil, "\(GitTree.absent): no built tree of git 2.41 or later"))
    func t0303OfANewerGitWithPasswordExpiryAndOAuthRefreshToken() throws {
        let tree = try #require(GitTree.newer)
        let r = try runSuite(tree, installed: nil)
        #expect(r.status == 0 && r.stdout.contains("# passed all"), "t0303 of \(tree.name):\n\(r.stdout)\n\(r.stderr)")
        for name in ["gets password_expiry_utc", "overwrites when password_expiry_utc changes", "gets oauth_refresh_token",
                     "erases all matching credentials"] {
            #expect(r.stdout.split(separator: "\n").contains { $0.hasPrefix("ok ") && $0.hasSuffix(" - helper (vault) \(name)") },
                    "\(name) did not pass:\n\(r.stdout)")
        }
        print("GitSuiteTests: t0303 of \(tree.name): \(r.stdout.split(separator: "\n").last { $0.hasPrefix("# passed") } ?? "")")
    }
}
