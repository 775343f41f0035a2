import Testing
import VaultKit

/// An item as a listing gives it to the rules: no secrets.
private func listed(_ name: String, user: String? = nil, urls: [String], origin: String? = nil, modified: Int64 = 100) -> Item {
    Item(name: name, username: user, urls: urls, origin: origin, now: modified)
}

/// git's format from lines.
private func request(_ lines: String...) -> GitCredentialRequest {
    GitCredentialRequest(parsing: Array(lines.map { $0 + "\n" }.joined().utf8))
}

/// The names a git `get` plan would try, in order ([] for `.none`).
private func tried(_ plan: CredentialPlan) -> [String]? {
    switch plan {
    case .none: []
    case .releaseFirst(let names): names
    default: nil
    }
}

@Suite struct CredentialTargetTests {
    @Test func defaultPortsAreDroppedOnlyForTheirOwnScheme() throws {
        #expect(try #require(CredentialTarget(url: "https://Example.COM:443/x", defaultScheme: nil)).host == "example.com")
        #expect(try #require(CredentialTarget(url: "http://example.com:80", defaultScheme: nil)).host == "example.com")
        #expect(try #require(CredentialTarget(url: "https://example.com:80", defaultScheme: nil)).host == "example.com:80")
        #expect(try #require(CredentialTarget(url: "http://example.com:443", defaultScheme: nil)).host == "example.com:443")
        #expect(try #require(CredentialTarget(url: "ssh://example.com:22", defaultScheme: nil)).host == "example.com:22")
        #expect(CredentialTarget(scheme: "HTTPS", host: "Git.Example.com:443", path: "").host == "git.example.com")
    }

    @Test func schemeAndHostLowerCasedPathKeptButTrimmed() throws {
        let t = try #require(CredentialTarget(url: "HTTPS://Host.Example/Team/Repo.git/?q=1#frag", defaultScheme: nil))
        #expect(t.scheme == "https")
        #expect(t.host == "host.example")
        #expect(t.path == "Team/Repo.git")
        #expect(t.url == "https://host.example/Team/Repo.git")
        #expect(CredentialTarget(scheme: "https", host: "h", path: "//a/b//").path == "a/b")
    }

    @Test func userAndPasswordInTheURLArePercentDecodedAndNotPartOfThePlace() throws {
        let t = try #require(CredentialTarget(url: "https://al%40ce:p%3Ass@git.example.com/r", defaultScheme: nil))
        #expect(t.username == "al@ce")
        #expect(t.password == "p:ss")
        #expect(t.host == "git.example.com")
        #expect(t.samePlace(CredentialTarget(url: "https://git.example.com/r/", defaultScheme: nil)))
        #expect(!t.samePlace(CredentialTarget(url: "https://git.example.com/r2", defaultScheme: nil)))
        #expect(!t.samePlace(CredentialTarget(url: "http://git.example.com/r", defaultScheme: nil)))
        #expect(!t.samePlace(nil))
    }

    @Test func aURLWithoutSchemeNeedsADefaultAndAStrangeSchemeIsRefused() throws {
        #expect(CredentialTarget(url: "example.com/x", defaultScheme: nil) == nil)
        #expect(try #require(CredentialTarget(url: "example.com/x", defaultScheme: "https")).url == "https://example.com/x")
        #expect(CredentialTarget(url: "", defaultScheme: "https") == nil)
        #expect(CredentialTarget(url: "ht tp://example.com", defaultScheme: "https") == nil)
        #expect(CredentialTarget(url: "://example.com", defaultScheme: "https") == nil)
        #expect(try #require(CredentialTarget(url: "git+ssh://example.com", defaultScheme: nil)).scheme == "git+ssh")
    }

    @Test func labelsAreValidItemNameParts() throws {
        #expect(CredentialTarget(scheme: "https", host: "example.com", path: "team/repo").label == "example.com/team/repo")
        #expect(CredentialTarget(scheme: "http", host: "example.com:8080", path: "").label == "http:example.com:8080")
        let odd = CredentialTarget(scheme: "https", host: "example.com", path: "a/../b/./c\u{7}d")
        #expect(odd.label == "example.com/a/_/b/_/cd")
        #expect(throws: Never.self) { try Item.normalize(name: "git/" + odd.label) }
        #expect(CredentialTarget(scheme: "https", host: "h", path: String(repeating: "p", count: 300)).label.count == 200)
    }

    @Test func freeNamesCountUpFromTwo() {
        #expect(Item.freeName("git/x", taken: ["other"]) == "git/x")
        #expect(Item.freeName("git/x", taken: ["git/x"]) == "git/x 2")
        #expect(Item.freeName("git/x", taken: ["git/x", "git/x 2", "git/x 3"]) == "git/x 4")
    }
}

@Suite struct GitCredentialRequestTests {
    @Test func keysValuesAndUnknownKeys() throws {
        let r = request("capability[]=authtype", "protocol=https", "host=example.com", "path=a/b.git",
                        "username=bob", "password=p=q", "wwwauth[]=Basic realm=\"x\"", "no equals sign")
        #expect(r == GitCredentialRequest(scheme: "https", host: "example.com", path: "a/b.git", username: "bob", password: "p=q"))
        #expect(r.target == CredentialTarget(scheme: "https", host: "example.com", path: "a/b.git"))
        // A later key replaces an earlier one.
        #expect(request("host=a.example", "host=b.example").host == "b.example")
    }

    @Test func urlStandsForItsPartsAndClearsWhatCameBefore() {
        let r = request("protocol=http", "host=old.example", "path=old", "username=old", "password=old",
                        "url=https://alice@git.example.com:443/team/repo.git")
        #expect(r == GitCredentialRequest(scheme: "https", host: "git.example.com", path: "team/repo.git", username: "alice", password: nil))
        // Keys after url= still apply.
        let later = request("url=https://git.example.com", "username=bob", "path=x")
        #expect(later == GitCredentialRequest(scheme: "https", host: "git.example.com", path: "x", username: "bob"))
        // A url= that cannot be read clears everything and sets nothing.
        let broken = request("protocol=https", "host=example.com", "url=example.com/no-scheme")
        #expect(broken == GitCredentialRequest())
        #expect(broken.target == nil)
        #expect(request("url=https://u:s%20cret@example.com").password == "s cret")
    }

    @Test func noProtocolNoTarget() {
        #expect(request("host=example.com").target == nil)
        #expect(request("protocol=", "host=example.com").target == nil)
        #expect(request("protocol=https").target == CredentialTarget(scheme: "https", host: "", path: ""))
    }

    @Test func whatGitsFormatCanCarry() {
        #expect(GitCredentialRequest.canCarry("a b=c"))
        #expect(!GitCredentialRequest.canCarry("a\nb"))
        #expect(!GitCredentialRequest.canCarry("a\0b"))
    }
}

@Suite struct GitCredentialRulesTests {
    let items = [
        listed("team-repo", user: "alice", urls: ["https://git.example.com/team/repo"], modified: 100),
        listed("example-any", user: "bob", urls: ["https://git.example.com"], modified: 100),
        listed("example-http", user: "carol", urls: ["http://git.example.com"]),
        listed("example-port", user: "dave", urls: ["https://git.example.com:8443"]),
        listed("docker/registry", user: "eve", urls: ["https://registry.example.com"], origin: "docker"),
        listed("docker/git-host", user: "eve", urls: ["https://git.example.com"], origin: "docker", modified: 900),
    ]

    func get(_ r: GitCredentialRequest) -> [String]? { tried(GitCredentialRules.get(r, items: items)) }

    @Test func pathScopedItemsServeTheirPathOnlyAndComeFirst() {
        #expect(get(request("protocol=https", "host=git.example.com", "path=team/repo.git")) == ["team-repo", "example-any"])
        #expect(get(request("protocol=https", "host=git.example.com", "path=team/repo")) == ["team-repo", "example-any"])
        #expect(get(request("protocol=https", "host=git.example.com", "path=/team/repo/")) == ["team-repo", "example-any"])
        #expect(get(request("protocol=https", "host=git.example.com", "path=other/repo.git")) == ["example-any"])
        #expect(get(request("protocol=https", "host=git.example.com", "path=team/repo/sub")) == ["example-any"])
        // git leaves the path out unless useHttpPath is set: a path-scoped item cannot answer then.
        #expect(get(request("protocol=https", "host=git.example.com")) == ["example-any"])
        // Path case matters (it is the server's), host case does not.
        #expect(get(request("protocol=https", "host=GIT.Example.com", "path=Team/Repo")) == ["example-any"])
    }

    @Test func schemePortAndHostMustAgree() {
        #expect(get(request("protocol=http", "host=git.example.com")) == ["example-http"])
        #expect(get(request("protocol=https", "host=git.example.com:8443")) == ["example-port"])
        #expect(get(request("protocol=https", "host=git.example.com:443")) == ["example-any"])
        #expect(get(request("protocol=http", "host=git.example.com:80")) == ["example-http"])
        #expect(get(request("protocol=https", "host=other.example.com")) == [])
        #expect(get(request("protocol=ssh", "host=git.example.com")) == [])
        #expect(get(request("url=https://git.example.com:8443/any/thing.git")) == ["example-port"])
    }

    @Test func aUsernameInTheRequestMustMatch() {
        #expect(get(request("protocol=https", "host=git.example.com", "path=team/repo", "username=bob")) == ["example-any"])
        #expect(get(request("protocol=https", "host=git.example.com", "path=other", "username=alice")) == [])
        #expect(get(request("url=https://alice@git.example.com/team/repo.git")) == ["team-repo"])
        #expect(get(request("protocol=https", "host=git.example.com", "username=Bob")) == [])
    }

    @Test func dockerItemsNeverAnswerGitAndNoProtocolMatchesNothing() {
        #expect(get(request("protocol=https", "host=registry.example.com")) == [])
        #expect(get(request("host=git.example.com")) == [])
        let gitMade = listed("git/git.example.com (zed)", user: "zed", urls: ["https://git.example.com"], origin: "git", modified: 50)
        let plan = GitCredentialRules.get(request("protocol=https", "host=git.example.com"), items: items + [gitMade])
        #expect(tried(plan) == ["example-any", "git/git.example.com (zed)"])
    }

    @Test func newestFirstAmongEquallySpecificItems() {
        let all = [
            listed("old-host", urls: ["https://h.example"], modified: 10),
            listed("old-path", urls: ["https://h.example/r"], modified: 20),
            listed("new-host", urls: ["https://h.example"], modified: 30),
            listed("new-path", urls: ["h.example/r.git"], origin: "git", modified: 40),
        ]
        #expect(tried(GitCredentialRules.get(request("protocol=https", "host=h.example", "path=r"), items: all))
                == ["new-path", "old-path", "new-host", "old-host"])
        #expect(tried(GitCredentialRules.get(request("protocol=https", "host=h.example"), items: all)) == ["new-host", "old-host"])
    }

    @Test func anItemIsPathSpecificWhenAnyOfItsURLsNamesThePath() throws {
        let both = listed("both", urls: ["https://h.example", "https://h.example/r"], modified: 1)
        let host = listed("host", urls: ["https://h.example"], modified: 2)
        let t = try #require(request("protocol=https", "host=h.example", "path=r").target)
        #expect(GitCredentialRules.servingURL(of: both, for: t)?.path == "r")
        #expect(tried(GitCredentialRules.get(request("protocol=https", "host=h.example", "path=r"), items: [host, both])) == ["both", "host"])
        #expect(GitCredentialRules.servingURL(of: listed("x", urls: ["not a url://", "https://elsewhere"]), for: t) == nil)
    }

    @Test func theAnswerGitReads() {
        #expect(GitCredentialRules.answer(from: Item(name: "a", username: "bob", password: "pw")) == "username=bob\npassword=pw\n")
        #expect(GitCredentialRules.answer(from: Item(name: "a", password: "pw")) == "password=pw\n")
        #expect(GitCredentialRules.answer(from: Item(name: "a", username: "bob")) == nil)
        #expect(GitCredentialRules.answer(from: Item(name: "a", username: "bob", password: "p\nq")) == nil)
        #expect(GitCredentialRules.answer(from: Item(name: "a", username: "b\nob", password: "pw")) == nil)
    }

    @Test func whenTheVaultIsNotEvenOpened() {
        let full = request("protocol=https", "host=example.com", "username=u", "password=p")
        for action in GitCredentialAction.allCases {
            #expect(GitCredentialRules.needsVault(action, full), "\(action)")
            #expect(!GitCredentialRules.needsVault(action, request("host=example.com", "password=p")), "\(action)")
        }
        #expect(!GitCredentialRules.needsVault(.store, request("protocol=https", "host=example.com", "username=u")))
        #expect(!GitCredentialRules.needsVault(.store, request("protocol=https", "host=example.com", "password=a\0b")))
        #expect(GitCredentialRules.needsVault(.erase, request("protocol=https", "host=example.com")))
        #expect(GitCredentialAction(rawValue: "capability") == nil)
        #expect(GitCredentialRules.auditCommand(.get) == "git-credential")
        #expect(GitCredentialRules.auditCommand(.erase) == "git-credential erase")
    }

    // MARK: store

    @Test func storeComparesWithLoginsTheVaultAlreadyGivesThenWrites() {
        let all = [
            listed("mine", user: "me", urls: ["https://example.net"]),
            listed("mine-too", user: "me", urls: ["https://example.net/repo"]),
            listed("someone-else", user: "you", urls: ["https://example.net"]),
            listed("docker/example.net", user: "me", urls: ["https://example.net"], origin: "docker"),
        ]
        let plan = GitCredentialRules.store(request("protocol=https", "host=example.net", "path=repo.git", "username=me", "password=own"),
                                            items: all, now: 7)
        guard case .compareThenWrite(let names, let password, .add(let item)) = plan else {
            Issue.record("plan: \(plan)")
            return
        }
        #expect(names == ["mine", "mine-too"])
        #expect(password == "own")
        #expect(item == Item(name: "git/example.net/repo.git (me)", username: "me", password: "own",
                             urls: ["https://example.net/repo.git"], tags: ["git"], origin: "git", now: 7))
    }

    @Test func storeWithoutAUsernameComparesOnlyWithItemsWithoutOne() {
        let all = [listed("named", user: "me", urls: ["https://example.net"]), listed("anon", urls: ["https://example.net"])]
        let plan = GitCredentialRules.store(request("protocol=https", "host=example.net", "password=p"), items: all, now: 7)
        #expect(plan == .compareThenWrite(["anon"], password: "p", otherwise: .add(
            Item(name: "git/example.net", password: "p", urls: ["https://example.net"], tags: ["git"], origin: "git", now: 7))))
    }

    @Test func storeUpdatesTheHelpersOwnItemForTheSamePlaceAndUser() {
        let all = [
            listed("git/example.org (bob)", user: "bob", urls: ["https://example.org"], origin: "git"),
            listed("git/example.org (carol)", user: "carol", urls: ["https://example.org"], origin: "git"),
        ]
        var change = ItemChange()
        change.password = "two"
        CredentialExtras().apply(to: &change)
        let plan = GitCredentialRules.store(request("protocol=https", "host=example.org:443", "username=bob", "password=two"), items: all)
        #expect(plan == .compareThenWrite(["git/example.org (bob)"], password: "two", otherwise: .update("git/example.org (bob)", change)))

        // Same host, another path: not the same place, so a new item beside it.
        let elsewhere = GitCredentialRules.store(request("protocol=https", "host=example.org", "path=r", "username=bob", "password=x"),
                                                 items: all, now: 1)
        guard case .compareThenWrite(_, _, .add(let item)) = elsewhere else {
            Issue.record("plan: \(elsewhere)")
            return
        }
        #expect(item.name == "git/example.org/r (bob)")
    }

    @Test func storeNeverUpdatesAPersonsItemAndPicksAFreeName() {
        let all = [
            listed("git/example.org (bob)", user: "bob", urls: ["https://example.org/elsewhere"]),
            listed("git/example.org (bob) 2", user: "bob", urls: ["https://other.example"], origin: "git"),
            listed("git/example.org (bob)-docker", user: "bob", urls: ["https://example.org"], origin: "docker"),
        ]
        let plan = GitCredentialRules.store(request("protocol=https", "host=example.org", "username=bob", "password=pw"), items: all, now: 3)
        #expect(plan == .add(Item(name: "git/example.org (bob) 3", username: "bob", password: "pw", urls: ["https://example.org"],
                                  tags: ["git"], origin: "git", now: 3)))
        // A person's item for the very place: compared with, but never overwritten.
        let own = [listed("reg", user: "bob", urls: ["https://example.org"])]
        let second = GitCredentialRules.store(request("protocol=https", "host=example.org", "username=bob", "password=pw"), items: own, now: 3)
        guard case .compareThenWrite(["reg"], "pw", .add(let item)) = second else {
            Issue.record("plan: \(second)")
            return
        }
        #expect(item.name == "git/example.org (bob)")
    }

    @Test func storeNeedsAPlaceAndACarriablePassword() {
        #expect(GitCredentialRules.store(request("host=example.org", "password=pw"), items: []) == .none)
        #expect(GitCredentialRules.store(request("protocol=https", "host=example.org", "username=u"), items: []) == .none)
        #expect(GitCredentialRules.store(request("protocol=https", "host=example.org", "password=a\0b"), items: []) == .none)
        #expect(GitCredentialRules.plan(.store, request("protocol=ssh", "host=h", "password=p"), items: [], now: 5)
                == .add(Item(name: "git/ssh:h", password: "p", urls: ["ssh://h"], tags: ["git"], origin: "git", now: 5)))
    }

    // MARK: erase

    @Test func eraseRemovesOnlyTheHelpersOwnItems() {
        let all = [
            listed("git/example.org (bob)", user: "bob", urls: ["https://example.org"], origin: "git"),
            listed("git/example.org/r (bob)", user: "bob", urls: ["https://example.org/r"], origin: "git"),
            listed("git/example.org (carol)", user: "carol", urls: ["https://example.org"], origin: "git"),
            listed("mine", user: "bob", urls: ["https://example.org"]),
            listed("docker/example.org", user: "bob", urls: ["https://example.org"], origin: "docker"),
        ]
        // A field git leaves out matches anything, as in git's own helpers: without a path, the
        // items of every path of the host go (t0303 "helper_test_clean" leaves none behind).
        #expect(GitCredentialRules.erase(request("protocol=https", "host=example.org", "username=bob"), items: all)
                == .remove(["git/example.org (bob)", "git/example.org/r (bob)"]))
        #expect(GitCredentialRules.erase(request("protocol=https", "host=example.org", "path=r.git", "username=bob"), items: all)
                == .remove(["git/example.org (bob)", "git/example.org/r (bob)"]))
        #expect(GitCredentialRules.erase(request("protocol=https", "host=example.org"), items: all)
                == .remove(["git/example.org (bob)", "git/example.org/r (bob)", "git/example.org (carol)"]))
        #expect(GitCredentialRules.plan(.erase, request("protocol=https", "host=example.org", "username=bob", "password=old"), items: all)
                == .compareThenRemove(["git/example.org (bob)", "git/example.org/r (bob)"], password: "old"))
        // With a path, only the host-wide items and that path's: another path stays.
        #expect(GitCredentialRules.erase(request("protocol=https", "host=example.org", "path=other.git", "username=bob"), items: all)
                == .remove(["git/example.org (bob)"]))
        #expect(GitCredentialRules.erase(request("protocol=https", "host=example.org", "username=bob"), items: Array(all[3...])) == .none)
        #expect(GitCredentialRules.erase(request("host=example.org", "username=bob"), items: all) == .none)
    }

    @Test func getAsThePlanForItsAction() {
        #expect(GitCredentialRules.plan(.get, request("protocol=https", "host=git.example.com"), items: items) == .releaseFirst(["example-any"]))
        #expect(GitCredentialRules.plan(.get, request("protocol=https", "host=nowhere.example"), items: items) == .none)
    }
}

@Suite struct DockerCredentialRulesTests {
    @Test func serverURLsAsDockerWritesThem() throws {
        let hub = try DockerCredentialRules.server("https://index.docker.io/v1/")
        #expect(hub == CredentialTarget(scheme: "https", host: "index.docker.io", path: "v1"))
        #expect(try DockerCredentialRules.server("index.docker.io/v1").samePlace(hub))
        #expect(try DockerCredentialRules.server("HTTPS://Index.Docker.IO:443/v1//").samePlace(hub))
        #expect(try !DockerCredentialRules.server("https://index.docker.io/v2/").samePlace(hub))
        #expect(try !DockerCredentialRules.server("http://index.docker.io/v1/").samePlace(hub))
        #expect(try DockerCredentialRules.server("ghcr.io") == CredentialTarget(scheme: "https", host: "ghcr.io", path: ""))
        #expect(try DockerCredentialRules.server("registry.example.com:5000").host == "registry.example.com:5000")
        #expect(try DockerCredentialRules.server("localhost:5000/").path == "")
        #expect(throws: DockerCredentialError.malformed("not a server URL: https://")) { try DockerCredentialRules.server("https://") }
        #expect(throws: DockerCredentialError.malformed("not a server URL: a b://x")) { try DockerCredentialRules.server("a b://x") }
        // As docker-credential-helpers' registryurl reads them: `//host` has no scheme, `/host` no host,
        // and a registry speaks https or http only.
        #expect(try DockerCredentialRules.server("//foobar.example.com:2376")
                == CredentialTarget(scheme: "https", host: "foobar.example.com:2376", path: ""))
        #expect(try DockerCredentialRules.server("//Foobar.example.com:443/v1/").samePlace(DockerCredentialRules.server("foobar.example.com/v1")))
        #expect(throws: DockerCredentialError.malformed("not a server URL: /foobar.example.com")) {
            try DockerCredentialRules.server("/foobar.example.com")
        }
        #expect(throws: DockerCredentialError.malformed("not a server URL: //")) { try DockerCredentialRules.server("//") }
        #expect(throws: DockerCredentialError.malformed("not a registry URL: ftp://foobar.example.com:2376 (the scheme must be https or http)")) {
            try DockerCredentialRules.server("ftp://foobar.example.com:2376")
        }
        #expect(throws: DockerCredentialError.malformed("not a registry URL: ssh://r.example (the scheme must be https or http)")) {
            try DockerCredential(json: Array(#"{"ServerURL":"ssh://r.example","Username":"u"}"#.utf8))
        }
    }

    @Test func theServerURLOnStandardInput() throws {
        let (text, server) = try DockerCredentialRules.serverURL(input: Array("  https://index.docker.io/v1/\n".utf8))
        #expect(text == "https://index.docker.io/v1/")
        #expect(server.host == "index.docker.io")
        #expect(throws: DockerCredentialError.missingServerURL) { try DockerCredentialRules.serverURL(input: Array(" \n\t".utf8)) }
        #expect(throws: DockerCredentialError.missingServerURL) { try DockerCredentialRules.serverURL(input: []) }
    }

    @Test func theCredentialToStore() throws {
        let c = try DockerCredential(json: Array(#"{"serverurl":"ghcr.io","USERNAME":"me","Secret":"s"}"#.utf8))
        #expect(c.serverURL == "ghcr.io")
        #expect(c.server.url == "https://ghcr.io")
        #expect(c.username == "me")
        #expect(c.secret == "s")
        #expect(try DockerCredential(json: Array(#"{"ServerURL":"ghcr.io","Username":"me"}"#.utf8)).secret == "")
        let failures: [(String, DockerCredentialError)] = [
            ("not json", .malformed("standard input is not a JSON object with ServerURL, Username and Secret")),
            ("[1]", .malformed("standard input is not a JSON object with ServerURL, Username and Secret")),
            (#"{"Username":"u","Secret":"s"}"#, .missingServerURL),
            (#"{"ServerURL":"","Username":"u"}"#, .missingServerURL),
            (#"{"ServerURL":"r.example","Secret":"s"}"#, .missingUsername),
            (#"{"ServerURL":"r.example","Username":""}"#, .missingUsername),
            (#"{"ServerURL":"r.example","Username":7}"#, .malformed("Username must be a string")),
            (#"{"ServerURL":"r.example","Username":"u","Secret":null}"#, .malformed("Secret must be a string")),
            (#"{"ServerURL":"https://","Username":"u"}"#, .malformed("not a server URL: https://")),
            // Checked in order: the server URL first.
            (#"{"ServerURL":5,"Username":7}"#, .malformed("ServerURL must be a string")),
        ]
        for (json, expected) in failures {
            #expect(throws: expected, "\(json)") { try DockerCredential(json: Array(json.utf8)) }
        }
    }

    @Test func errorLinesDockerReads() {
        #expect(DockerCredentialError.notFound.message == "credentials not found in native keychain")
        #expect(DockerCredentialError.notFound.isProtocolText)
        #expect(DockerCredentialError.missingServerURL.message == "no credentials server URL")
        #expect(DockerCredentialError.missingUsername.message == "no credentials username")
        #expect(!DockerCredentialError.malformed("x").isProtocolText)
        #expect(DockerCredentialError.unknownAction("frob").message == "unknown credential action 'frob' (store, get, erase, list, version)")
        #expect(DockerCredentialAction(rawValue: "frob") == nil)
    }

    let items = [
        listed("docker/index.docker.io/v1", user: "old", urls: ["https://index.docker.io/v1/"], origin: "docker", modified: 10),
        listed("docker/index.docker.io/v1 2", user: "new", urls: ["index.docker.io/v1"], origin: "docker", modified: 20),
        listed("docker/registry.example.com:5000", user: "me", urls: ["registry.example.com:5000"], origin: "docker"),
        listed("person-hub", user: "person", urls: ["https://index.docker.io/v1/"], modified: 99),
        listed("git/index.docker.io/v1", user: "git", urls: ["https://index.docker.io/v1"], origin: "git", modified: 99),
        listed("docker/no-url", user: "x", urls: [], origin: "docker"),
    ]

    @Test func onlyDockersOwnItemsServeAServer() throws {
        let hub = try DockerCredentialRules.server("https://index.docker.io/v1/")
        #expect(DockerCredentialRules.items(serving: hub, in: items).map(\.name)
                == ["docker/index.docker.io/v1", "docker/index.docker.io/v1 2"])
        #expect(try DockerCredentialRules.get(hub, items: items) == .release("docker/index.docker.io/v1 2"))
        #expect(try DockerCredentialRules.get(DockerCredentialRules.server("registry.example.com:5000/"), items: items)
                == .release("docker/registry.example.com:5000"))
        #expect(throws: DockerCredentialError.notFound) { try DockerCredentialRules.get(DockerCredentialRules.server("registry.example.com"), items: items) }
        #expect(throws: DockerCredentialError.notFound) { try DockerCredentialRules.get(hub, items: Array(items[3...])) }
    }

    @Test func anItemStoredAsSlashSlashHostServesItsServer() throws {
        let stored = [listed("docker/foobar.example.com:2376", user: "u", urls: ["//foobar.example.com:2376"], origin: "docker")]
        for asked in ["//foobar.example.com:2376", "foobar.example.com:2376", "https://foobar.example.com:2376/"] {
            #expect(try DockerCredentialRules.get(DockerCredentialRules.server(asked), items: stored) == .release("docker/foobar.example.com:2376"),
                    "\(asked)")
        }
        #expect(throws: DockerCredentialError.notFound) {
            try DockerCredentialRules.get(DockerCredentialRules.server("http://foobar.example.com:2376"), items: stored)
        }
    }

    @Test func eraseRemovesEveryDockerItemForTheServer() throws {
        let hub = try DockerCredentialRules.server("index.docker.io/v1/")
        #expect(try DockerCredentialRules.erase(hub, items: items) == .remove(["docker/index.docker.io/v1", "docker/index.docker.io/v1 2"]))
        #expect(throws: DockerCredentialError.notFound) { try DockerCredentialRules.erase(DockerCredentialRules.server("ghcr.io"), items: items) }
    }

    @Test func storeUpdatesTheServersItemOrAddsOneWithAFreeName() throws {
        let again = try DockerCredential(json: Array(#"{"ServerURL":"https://index.docker.io/v1","Username":"u2","Secret":"t2"}"#.utf8))
        var change = ItemChange()
        change.username = "u2"
        change.password = "t2"
        change.urls = ["https://index.docker.io/v1"]
        #expect(DockerCredentialRules.store(again, items: items) == .update("docker/index.docker.io/v1", change))

        let ghcr = try DockerCredential(json: Array(#"{"ServerURL":"ghcr.io","Username":"me","Secret":"g"}"#.utf8))
        let taken = [listed("docker/ghcr.io", urls: ["https://elsewhere.example"])]
        #expect(DockerCredentialRules.store(ghcr, items: taken, now: 4)
                == .add(Item(name: "docker/ghcr.io 2", username: "me", password: "g", urls: ["ghcr.io"], tags: ["docker"], origin: "docker", now: 4)))
        let plain = try DockerCredential(json: Array(#"{"ServerURL":"http://reg.example:80/","Username":"me"}"#.utf8))
        #expect(DockerCredentialRules.store(plain, items: [], now: 4)
                == .add(Item(name: "docker/http:reg.example", username: "me", password: "", urls: ["http://reg.example:80/"],
                             tags: ["docker"], origin: "docker", now: 4)))
    }

    @Test func listGivesEachDockerItemsFirstURLAndUser() {
        var all = items
        all.append(listed("docker/anon", urls: ["anon.example", "second.example"], origin: "docker"))
        #expect(DockerCredentialRules.list(all) == [
            "https://index.docker.io/v1/": "old",
            "index.docker.io/v1": "new",
            "registry.example.com:5000": "me",
            "anon.example": "",
        ])
        #expect(DockerCredentialRules.list(Array(items[3...4])) == [:])
        // Two items keeping the same URL: the later one is listed.
        let twice = [listed("a", user: "first", urls: ["r.example"], origin: "docker"),
                     listed("b", user: "second", urls: ["r.example"], origin: "docker")]
        #expect(DockerCredentialRules.list(twice) == ["r.example": "second"])
    }
}
