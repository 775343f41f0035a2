import Foundation
import Testing

/// The git and docker credential helpers, run the way git and docker run them: the built binary
/// under the name `git-credential-vault` / `docker-credential-vault` (a symlink in the sandbox), and
/// `git credential fill|approve|reject` from the real git.
@Suite struct CredentialHelperTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    /// The sandbox's `bin` folder, put first on PATH for git.
    var bin: String { box.home + "/bin" }

    /// A symlink `bin/NAME` to the built binary.
    @discardableResult
    func link(_ name: String) -> String {
        try? FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        let path = bin + "/" + name
        if !FileManager.default.fileExists(atPath: path) {
            try? FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: vaultBinary)
        }
        return path
    }

    /// Runs `git-credential-vault args` through its symlink; with `key`, the passcode goes in on fd 3
    /// with `--passcode-fd 3` before the action (as in `credential.helper "vault --passcode-fd 3"`).
    func gitHelper(_ action: String, _ lines: [String], key: Bool = true, options: [String] = [], env extra: [String: String] = [:]) -> RunResult {
        let args = options + (key ? ["--passcode-fd", "3"] : []) + [action]
        return spawn(link("git-credential-vault"), args, env: box.env.merging(extra) { $1 },
                     stdin: lines.map { $0 + "\n" }.joined() + "\n", fds: key ? [3: pc + "\n"] : [:])
    }

    /// Runs `docker-credential-vault ACTION` through its symlink, as docker does: no options, no key.
    func dockerHelper(_ action: String?, stdin: String, env extra: [String: String] = [:]) -> RunResult {
        spawn(link("docker-credential-vault"), action.map { [$0] } ?? [], env: box.env.merging(extra) { $1 }, stdin: stdin)
    }

    /// `vault docker-credential ACTION` with the passcode on fd 3: the same code, with the key.
    func docker(_ action: String, stdin: String) -> RunResult {
        box.vault(["docker-credential", action], passcode: pc, stdin: stdin)
    }

    /// Runs the real `git args` with a throw-away global config whose only settings are
    /// `credential.helper = helper` and `settings`, no system config, no terminal prompts, the
    /// passcode on fd 3.
    func git(_ args: [String], stdin: String, helper: String, settings: [String] = []) -> RunResult {
        let config = box.home + "/gitconfig"
        let text = "[credential]\n" + (["helper = \(helper)"] + settings).map { "\t" + $0 + "\n" }.joined()
        try? text.write(toFile: config, atomically: true, encoding: .utf8)
        link("git-credential-vault")
        var env = box.env
        env["GIT_CONFIG_GLOBAL"] = config
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        env["GIT_TERMINAL_PROMPT"] = "0"
        env["PATH"] = bin + ":/usr/bin:/bin"
        return spawn("/usr/bin/git", args, env: env, stdin: stdin, fds: [3: pc + "\n"])
    }

    /// The items as `vault ls --json` prints them, by name.
    func items() -> [String: [String: Any]] {
        let r = box.vault(["ls", "--json"], passcode: pc)
        var byName: [String: [String: Any]] = [:]
        for i in json(r.stdout)["items"] as? [[String: Any]] ?? [] { byName[i["name"] as? String ?? ""] = i }
        return byName
    }

    /// The commands of the audit log, oldest first.
    func auditCommands() -> [String] {
        let r = box.vault(["log", "--json"], passcode: pc)
        return (json(r.stdout)["records"] as? [[String: Any]] ?? []).compactMap { $0["command"] as? String }
    }

    // MARK: git

    @Test func gitApproveFillRejectThroughRealGitAndTheSymlink() throws {
        box.initVault()
        let helper = "vault --vault default --passcode-fd 3"
        let cred = "protocol=https\nhost=example.com\nusername=bob\npassword=s3cret-1\n\n"

        var r = git(["credential", "approve"], stdin: cred, helper: helper)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty, "approve: \(r.stderr)")
        let stored = try #require(items()["git/example.com (bob)"])
        #expect(stored["origin"] as? String == "git")
        #expect(stored["tags"] as? [String] == ["git"])
        #expect(stored["urls"] as? [String] == ["https://example.com"])
        #expect(stored["username"] as? String == "bob")

        r = git(["credential", "fill"], stdin: "protocol=https\nhost=example.com\n\n", helper: helper)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty, "fill: \(r.stderr)")
        #expect(r.stdout.contains("username=bob\n"))
        #expect(r.stdout.contains("password=s3cret-1\n"))
        #expect(auditCommands() == ["git-credential"])

        // git hands the whole description back on reject: the helper-made item goes.
        r = git(["credential", "reject"], stdin: cred, helper: helper)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty, "reject: \(r.stderr)")
        #expect(items()["git/example.com (bob)"] == nil)

        // Nothing stored: the helper prints nothing and says nothing; git gives up (no terminal).
        r = git(["credential", "fill"], stdin: "protocol=https\nhost=example.com\n\n", helper: helper)
        #expect(r.status != 0)
        #expect(r.stdout.isEmpty)
        #expect(!r.stderr.contains("vault"), "the helper spoke: \(r.stderr)")
    }

    @Test func gitShellHelperFormWithTheVerbAndANamedVault() throws {
        box.initVault("work")
        let helper = "!\(vaultBinary) --vault work --passcode-fd 3 git-credential"
        let stored = "url=https://alice@git.example.com:8443/team/repo.git\npassword=tok-9\n\n"
        // git leaves the path of an https URL out unless credential.useHttpPath is set.
        var r = git(["credential", "approve"], stdin: stored, helper: helper)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        r = git(["credential", "approve"], stdin: stored.replacingOccurrences(of: "tok-9", with: "tok-repo"),
                helper: helper, settings: ["useHttpPath = true"])
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        let listed = box.vault(["ls", "--vault", "work"], passcode: pc)
        #expect(listed.stdout == "git/git.example.com:8443 (alice)\ngit/git.example.com:8443/team/repo.git (alice)\n", "\(listed.stdout)")

        r = git(["credential", "fill"], stdin: "url=https://git.example.com:8443/other.git\n\n", helper: helper)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("username=alice\npassword=tok-9\n"), "\(r.stdout)")
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        r = git(["credential", "fill"], stdin: "url=https://git.example.com:8443/team/repo.git\n\n", helper: helper,
                settings: ["useHttpPath = true"])
        #expect(r.stdout.contains("username=alice\npassword=tok-repo\n"), "\(r.stdout)")
    }

    @Test func gitMatchesProtocolHostPathAndUsername() throws {
        box.initVault()
        func add(_ name: String, _ user: String, _ url: String, _ password: String) {
            let r = box.vault(["add", name, "--username", user, "--url", url, "--password-stdin"], passcode: pc, stdin: password + "\n")
            #expect(r.status == 0, "\(r.stderr)")
        }
        add("team-repo", "alice", "https://git.example.com/team/repo", "pw-alice")
        add("example-any", "bob", "https://git.example.com", "pw-bob")
        add("example-http", "carol", "http://git.example.com", "pw-carol")
        add("example-port", "dave", "https://git.example.com:8443", "pw-dave")
        // A login the docker helper made is not offered to git.
        let r = docker("store", stdin: #"{"ServerURL":"https://registry.example.com","Username":"eve","Secret":"pw-eve"}"#)
        #expect(r.status == 0, "\(r.stdout)")

        func get(_ lines: [String]) -> String {
            let r = gitHelper("get", lines)
            #expect(r.status == 0, "\(lines): \(r.stderr)")
            #expect(r.stderr.isEmpty, "\(lines): \(r.stderr)")
            return r.stdout
        }
        // The item naming the path wins over the host-wide one; a trailing .git does not count.
        #expect(get(["protocol=https", "host=git.example.com", "path=team/repo.git"]) == "username=alice\npassword=pw-alice\n")
        #expect(get(["protocol=https", "host=git.example.com", "path=other/repo.git"]) == "username=bob\npassword=pw-bob\n")
        #expect(get(["protocol=https", "host=git.example.com"]) == "username=bob\npassword=pw-bob\n")
        // A username in the request must match.
        #expect(get(["protocol=https", "host=git.example.com", "path=team/repo.git", "username=bob"]) == "username=bob\npassword=pw-bob\n")
        #expect(get(["protocol=https", "host=git.example.com", "path=other/x", "username=alice"]) == "")
        #expect(get(["protocol=https", "host=git.example.com", "username=zed"]) == "")
        // The protocol and the port are part of the host.
        #expect(get(["protocol=http", "host=git.example.com"]) == "username=carol\npassword=pw-carol\n")
        #expect(get(["protocol=https", "host=git.example.com:8443"]) == "username=dave\npassword=pw-dave\n")
        #expect(get(["protocol=https", "host=GIT.example.com:443"]) == "username=bob\npassword=pw-bob\n")
        #expect(get(["protocol=https", "host=other.example.com"]) == "")
        #expect(get(["protocol=https", "host=registry.example.com"]) == "")
        // url= stands for its parts; unknown keys are ignored.
        #expect(get(["capability[]=authtype", "url=https://alice@git.example.com/team/repo.git", "wwwauth[]=Basic realm=\"x\""])
                == "username=alice\npassword=pw-alice\n")
        // No protocol: nothing can match.
        #expect(get(["host=git.example.com"]) == "")

        // Every release is in the audit log as git-credential.
        #expect(auditCommands().filter { $0 == "git-credential" }.count == 8)
    }

    @Test func gitStoreReplacesItsOwnItemAndEraseLeavesYoursAlone() throws {
        box.initVault()
        let base = ["protocol=https", "host=example.org", "username=bob"]
        var r = gitHelper("store", base + ["password=one"])
        #expect(r.status == 0 && r.stderr.isEmpty && r.stdout.isEmpty, "\(r.stderr)")
        r = gitHelper("store", base + ["password=two"])
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        #expect(items().keys.sorted() == ["git/example.org (bob)"])
        #expect(box.vault(["get", "git/example.org (bob)", "--field", "password"], passcode: pc).stdout == "two\n")

        // Erase with a password that is no longer stored leaves the newer one.
        r = gitHelper("erase", base + ["password=one"])
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        #expect(items()["git/example.org (bob)"] != nil)

        // A login you saved yourself is given to git, never duplicated by store, never erased.
        r = box.vault(["add", "mine", "--username", "me", "--url", "https://example.net", "--password-stdin"], passcode: pc, stdin: "own\n")
        #expect(r.status == 0)
        let mine = ["protocol=https", "host=example.net", "username=me", "password=own"]
        r = gitHelper("store", mine)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        r = gitHelper("erase", mine)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        #expect(items().keys.sorted() == ["git/example.org (bob)", "mine"])

        r = gitHelper("erase", base)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        #expect(items().keys.sorted() == ["mine"])
        // Erasing what is not there is no error.
        r = gitHelper("erase", base)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
    }

    @Test func gitHelperNeverPromptsAndFailsInOneLine() throws {
        box.initVault()
        // No terminal, no session, no --passcode-fd, no finger: one error line, nothing on stdout.
        for action in ["get", "store", "erase"] {
            let r = gitHelper(action, ["protocol=https", "host=example.com", "username=u", "password=p"], key: false)
            #expect(r.status != 0, "\(action)")
            #expect(r.stdout.isEmpty)
            let lines = r.stderr.split(separator: "\n")
            #expect(lines.count == 1 && lines[0].hasPrefix("vault: error: "), "\(action): \(r.stderr)")
        }
        // Actions the helper does not know, and requests without a protocol, need no key.
        for (action, lines) in [("capability", ["protocol=https", "host=example.com"]), ("get", ["host=example.com"])] {
            let r = gitHelper(action, lines, key: false)
            #expect(r.status == 0 && r.stdout.isEmpty && r.stderr.isEmpty, "\(action): \(r.stderr)")
        }
        // A vault that does not exist is said, once.
        let r = gitHelper("get", ["protocol=https", "host=example.com"], options: ["--vault", "nope"])
        #expect(r.status == 3)
        #expect(r.stderr == "vault: error: no vault named 'nope' at \(box.home)/vaults/nope (create it with 'vault init --vault nope')\n")
    }

    @Test func gitKeepsPasswordExpiryAndOAuthRefreshTokenAndNeverGivesAnExpiredPassword() throws {
        box.initVault()
        let place = ["protocol=https", "host=git.example.com"]
        var r = gitHelper("store", place + ["username=ann", "password=tok-1", "password_expiry_utc=9999999999",
                                            "oauth_refresh_token=refresh-1"])
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        r = gitHelper("get", place + ["username=ann"])
        #expect(r.stdout == "username=ann\npassword=tok-1\npassword_expiry_utc=9999999999\noauth_refresh_token=refresh-1\n", "\(r.stdout)")
        // The refresh token is a secret: no listing shows it.
        #expect(!box.vault(["ls", "--json"], passcode: pc).stdout.contains("refresh-1"))
        #expect(!box.vault(["get", "git/git.example.com (ann)", "--json"], passcode: pc).stdout.contains("refresh-1"))
        // The same password with another expiry is a new credential: it overwrites.
        r = gitHelper("store", place + ["username=ann", "password=tok-1", "password_expiry_utc=9999999998"])
        #expect(r.status == 0, "\(r.stderr)")
        r = gitHelper("get", place + ["username=ann"])
        #expect(r.stdout == "username=ann\npassword=tok-1\npassword_expiry_utc=9999999998\n", "the token went with the old credential: \(r.stdout)")
        #expect(items().keys.filter { $0.hasPrefix("git/") }.count == 1)
        // An expired password is never handed out (git then asks the next helper or the user).
        r = gitHelper("store", place + ["username=ann", "password=tok-2", "password_expiry_utc=1000"])
        #expect(r.status == 0, "\(r.stderr)")
        r = gitHelper("get", place + ["username=ann"])
        #expect(r.status == 0 && r.stdout.isEmpty, "\(r.stdout)")
        // They are custom fields of the item: the expiry shown, the refresh token hidden.
        r = gitHelper("store", place + ["username=ann", "password=tok-3", "password_expiry_utc=9999999997", "oauth_refresh_token=refresh-3"])
        let shown = box.vault(["get", "git/git.example.com (ann)"], passcode: pc).stdout
        #expect(shown.contains("9999999997") && shown.contains("oauth_refresh_token") && !shown.contains("refresh-3"), "\(shown)")
        // References reach custom fields by name; the hidden one is a release of its own.
        r = box.vault(["read", "vault://git%2Fgit.example.com (ann)/oauth_refresh_token"], passcode: pc)
        #expect(r.status == 0 && r.stdout == "refresh-3\n", "\(r.stdout) \(r.stderr)")
        r = box.vault(["read", "vault://git%2Fgit.example.com (ann)/password_expiry_utc"], passcode: pc)
        #expect(r.status == 0 && r.stdout == "9999999997\n", "\(r.stdout) \(r.stderr)")
        #expect(auditCommands().last == "read", "\(auditCommands())")
    }

    @Test func gitEraseWithoutAPathErasesThePathScopedItemsOfTheHost() throws {
        box.initVault()
        var r = gitHelper("store", ["protocol=http", "host=path.tld", "path=foo.git", "username=user", "password=pass"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(items().keys.contains("git/http:path.tld/foo.git (user)"))
        r = gitHelper("erase", ["protocol=http", "host=path.tld", "username=user"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(!items().keys.contains { $0.hasPrefix("git/") }, "\(items().keys)")
    }

    @Test func aLockedPasscodeOnlyVaultSaysSoToEveryHelperAndToNoInput() throws {
        box.initVault()
        var r = gitHelper("get", ["protocol=https", "host=example.com"], key: false)
        #expect(r.status == 12, "\(r.stderr)")
        #expect(r.stderr.contains("is locked") && r.stderr.contains("'vault unlock'") && !r.stderr.contains("enrol"), "\(r.stderr)")
        // docker: its protocol's exit 1, the same words on stdout.
        r = dockerHelper("get", stdin: "ghcr.io")
        #expect(r.status == 1 && r.stdout.contains("is locked") && r.stdout.contains("'vault unlock'") && r.stderr.isEmpty, "\(r.stdout)")
        r = box.vault(["get", "x", "--no-input"])
        #expect(r.status == 12 && r.stderr.contains("is locked"), "\(r.stderr)")
        r = box.vault(["get", "x", "--no-input", "--vault", "work"])
        #expect(r.status == 3)
        box.initVault("work")
        r = box.vault(["ls", "--no-input", "--vault", "work"])
        #expect(r.status == 12 && r.stderr.contains("'vault unlock --vault work'"), "the hint names the vault: \(r.stderr)")
    }

    @Test func dockerHelperAnswersVersionFlagsLikeTheReferenceHelpers() {
        for flag in ["--version", "-v"] {
            let r = dockerHelper(flag, stdin: "")
            #expect(r.status == 0 && r.stdout == "docker-credential-vault (vault) 0.1.0\n" && r.stderr.isEmpty, "\(flag): \(r.stdout)")
        }
    }

    // MARK: docker

    @Test func dockerStoreGetListEraseWithTheKey() throws {
        box.initVault()
        let hub = "https://index.docker.io/v1/"
        var r = docker("store", stdin: #"{"ServerURL":"\#(hub)","Username":"dockeruser","Secret":"tok-1"}"#)
        #expect(r.status == 0 && r.stdout.isEmpty && r.stderr.isEmpty, "\(r.stdout) \(r.stderr)")
        r = docker("store", stdin: #"{"ServerURL":"registry.example.com:5000","Username":"me","Secret":"tok-r"}"#)
        #expect(r.status == 0, "\(r.stdout)")

        r = docker("get", stdin: hub)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stdout) \(r.stderr)")
        var o = json(r.stdout)
        #expect(o["ServerURL"] as? String == hub)
        #expect(o["Username"] as? String == "dockeruser")
        #expect(o["Secret"] as? String == "tok-1")

        // A new secret for the same server replaces it; the URL is compared without its trailing slash.
        r = docker("store", stdin: #"{"ServerURL":"\#(hub)","Username":"dockeruser","Secret":"tok-2"}"#)
        #expect(r.status == 0)
        r = docker("get", stdin: "https://index.docker.io/v1\n")
        #expect(json(r.stdout)["Secret"] as? String == "tok-2")

        r = docker("list", stdin: "")
        #expect(r.status == 0)
        o = json(r.stdout)
        #expect(o.count == 2)
        #expect(o[hub] as? String == "dockeruser")
        #expect(o["registry.example.com:5000"] as? String == "me")

        let all = items()
        #expect(all.keys.sorted() == ["docker/index.docker.io/v1", "docker/registry.example.com:5000"])
        let hubItem = try #require(all["docker/index.docker.io/v1"])
        #expect(hubItem["origin"] as? String == "docker")
        #expect(hubItem["tags"] as? [String] == ["docker"])
        #expect(hubItem["urls"] as? [String] == [hub])

        // Logins you made yourself are not docker's: not listed, not given.
        r = box.vault(["add", "reg", "--username", "x", "--url", "https://other.example.com", "--password-stdin"], passcode: pc, stdin: "p\n")
        #expect(r.status == 0)
        #expect(json(docker("list", stdin: "").stdout).count == 2)
        r = docker("get", stdin: "https://other.example.com")
        #expect(r.status == 1)
        #expect(r.stdout == "credentials not found in native keychain\n")

        r = docker("erase", stdin: hub)
        #expect(r.status == 0 && r.stdout.isEmpty && r.stderr.isEmpty, "\(r.stdout) \(r.stderr)")
        r = docker("get", stdin: hub)
        #expect(r.status == 1)
        #expect(r.stdout == "credentials not found in native keychain\n")
        #expect(r.stderr.isEmpty)
        r = docker("erase", stdin: hub)
        #expect(r.status == 1)
        #expect(r.stdout == "credentials not found in native keychain\n")

        #expect(auditCommands() == ["docker-credential", "docker-credential"])
    }

    @Test func dockerProtocolWithoutTheKey() throws {
        box.initVault()
        // version and input checks come before the vault is opened.
        var r = dockerHelper("version", stdin: "")
        #expect(r.status == 0)
        #expect(r.stdout == "docker-credential-vault (vault) 0.1.0\n")
        #expect(r.stderr.isEmpty)
        r = spawn(vaultBinary, ["version"], env: box.env, argv0: "/somewhere/else/docker-credential-vault")
        #expect(r.stdout == "docker-credential-vault (vault) 0.1.0\n", "argv[0] alone picks the helper")

        let cases: [(String?, String, String)] = [
            ("store", "not json", "vault: error: standard input is not a JSON object with ServerURL, Username and Secret\n"),
            ("store", #"{"Username":"u","Secret":"s"}"#, "no credentials server URL\n"),
            ("store", #"{"ServerURL":"https://r.example.com","Secret":"s"}"#, "no credentials username\n"),
            ("store", #"{"ServerURL":"https://r.example.com","Username":7}"#, "vault: error: Username must be a string\n"),
            ("get", "", "no credentials server URL\n"),
            ("erase", "  \n", "no credentials server URL\n"),
            ("frobnicate", "", "vault: error: unknown credential action 'frobnicate' (store, get, erase, list, version)\n"),
            (nil, "", "vault: error: missing argument for 'docker-credential' "
                + "(usage: vault [--vault NAME] [--passcode-fd N] docker-credential store|get|erase|list|version)\n"),
        ]
        for (action, input, expected) in cases {
            r = dockerHelper(action, stdin: input)
            #expect(r.status == 1, "\(action ?? "-"): \(r.stdout)")
            #expect(r.stdout == expected, "\(action ?? "-")")
            #expect(r.stderr.isEmpty, "\(action ?? "-"): errors belong on stdout: \(r.stderr)")
        }

        // A real request needs the key: without a session it fails on stdout, without prompting.
        r = dockerHelper("get", stdin: "https://index.docker.io/v1/")
        #expect(r.status == 1)
        #expect(r.stdout.hasPrefix("vault: error: ") && r.stdout.split(separator: "\n").count == 1, "\(r.stdout)")
        #expect(r.stderr.isEmpty)

        // VAULT_NAME picks the vault.
        r = dockerHelper("list", stdin: "", env: ["VAULT_NAME": "elsewhere"])
        #expect(r.status == 1)
        #expect(r.stdout == "vault: error: no vault named 'elsewhere' at \(box.home)/vaults/elsewhere (create it with 'vault init --vault elsewhere')\n")
    }

    @Test func bothHelpersUseTheUnlockSessionWithoutAnyOption() throws {
        box.initVault()
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer {
            let session = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
            if let pid = session?["agent_pid"] as? Int { kill(pid_t(pid), SIGTERM) }
            box.vault(["lock", "--all"])
        }
        // Exactly what docker runs: the helper's name, one action, no options, no key.
        r = dockerHelper("store", stdin: #"{"ServerURL":"ghcr.io","Username":"me","Secret":"ghp-1"}"#)
        #expect(r.status == 0 && r.stdout.isEmpty && r.stderr.isEmpty, "\(r.stdout) \(r.stderr)")
        r = dockerHelper("get", stdin: "ghcr.io")
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stdout) \(r.stderr)")
        #expect(json(r.stdout)["Secret"] as? String == "ghp-1")
        #expect(json(dockerHelper("list", stdin: "").stdout) as NSDictionary == ["ghcr.io": "me"] as NSDictionary)
        // And what git runs with `credential.helper vault`.
        r = gitHelper("store", ["protocol=https", "host=example.com", "username=bob", "password=pw"], key: false)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        r = gitHelper("get", ["protocol=https", "host=example.com"], key: false)
        #expect(r.status == 0 && r.stderr.isEmpty, "\(r.stderr)")
        #expect(r.stdout == "username=bob\npassword=pw\n")
        r = dockerHelper("erase", stdin: "ghcr.io")
        #expect(r.status == 0 && r.stdout.isEmpty, "\(r.stdout)")
        #expect(auditCommands() == ["docker-credential", "git-credential"])
    }

    // MARK: help

    @Test func helperVerbsHaveHelpButStayOutOfTheOverview() {
        var r = box.vault(["help"])
        #expect(r.status == 0)
        #expect(!r.stdout.contains("git-credential") && !r.stdout.contains("docker-credential"))
        r = box.vault(["help", "git-credential"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("usage: vault [--vault NAME] [--passcode-fd N] git-credential get|store|erase"))
        r = box.vault(["help", "docker-credential"])
        #expect(r.stdout.contains("store|get|erase|list|version"))
    }
}
