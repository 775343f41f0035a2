import Foundation
import Testing

/// Importers, exports and one-time codes, run through the real binary: real exports made here by
/// keepassxc-cli and pass (with a throw-away gpg key), fixtures in each other manager's documented
/// shape, malformed files, round trips, and codes cross-checked with oathtool.
@Suite struct ImportTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    /// Writes `text` to a file in the sandbox and returns its path.
    func file(_ name: String, _ text: String) -> String {
        let path = box.home + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
        return path
    }

    /// Every item of `vault` as vault's JSON, by name.
    func exported(_ vault: String = "default") -> [String: [String: Any]] {
        let r = box.vault(["export", "--vault", vault], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        let list = (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [[String: Any]] ?? []
        return Dictionary(list.map { ($0["name"] as? String ?? "", $0) }, uniquingKeysWith: { a, _ in a })
    }

    func fields(_ item: [String: Any]?) -> [String: (kind: String, value: String)] {
        var out: [String: (kind: String, value: String)] = [:]
        for case let f as [String: Any] in (item?["fields"] as? [Any]) ?? [] {
            out[f["name"] as? String ?? ""] = (f["kind"] as? String ?? "", f["value"] as? String ?? "")
        }
        return out
    }

    func run(_ tool: String, _ args: [String], stdin: String = "", env extra: [String: String] = [:]) -> RunResult {
        spawn(tool, args, env: box.env.merging(extra) { _, b in b }, stdin: stdin)
    }

    // MARK: streamed import

    /// vault's own JSON goes straight into the vault, one item at a time, in one transaction: with
    /// and without a session, a bad element anywhere (a duplicate name, a malformed last element,
    /// a wrong type deep in the input) writes nothing; a good import counts what it wrote.
    @Test func aStreamedImportWritesAllOrNothing() throws {
        box.initVault()
        func items(_ n: Int, from start: Int = 0) -> [String] {
            (start..<(start + n)).map { #"{"name":"s\#($0)","username":"u\#($0)","password":"p-\#($0)","url":"https://s\#($0).example"}"# }
        }
        let bad: [(String, String)] = [
            ("[" + (items(2500) + [#"{"name":"s7"}"#]).joined(separator: ",") + "]", "item 2501: the name 's7' appears twice"),
            ("[" + items(2500).joined(separator: ",") + #",{"name":"x""#, "the JSON array breaks after item 2500"),
            ("[" + (items(1200) + [#"{"name":"t","tags":[1]}"#] + items(5, from: 9000)).joined(separator: ",") + "]", "item 1201 ('t'): 'tags[0]' has the wrong type"),
            // Two spellings of one name (NFD, then NFC) are the one name given twice.
            ("[" + (items(3) + [#"{"name":"caf\u0065\u0301"}"#, #"{"name":"caf\u00e9"}"#]).joined(separator: ",") + "]", "item 5: the name 'caf\u{E9}' appears twice"),
        ]
        for session in [false, true] {
            if session { #expect(box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc).status == 0) }
            for (input, message) in bad {
                let r = session ? box.vault(["import", "--no-input"], stdin: input) : box.vault(["import"], passcode: pc, stdin: input)
                #expect(r.status == 2 && r.stderr.contains(message), "session \(session): \(r.status) \(r.stderr.suffix(300))")
                #expect(box.vault(["ls"], passcode: pc).stdout.isEmpty, "nothing of a refused import was written (session \(session))")
            }
        }
        let r = box.vault(["import", "--no-input", "--json"], stdin: "[" + items(3000).joined(separator: ",") + "]")
        #expect(r.status == 0 && r.stdout == #"{"added":3000,"imported":3000,"replaced":0}"# + "\n", "\(r.stdout) \(r.stderr.suffix(300))")
        #expect(r.stderr.contains("vault: imported 3000 items\nvault: by type: 3000 logins"), "\(r.stderr)")
        box.vault(["lock", "--all"])
        #expect(box.vault(["get", "s2999", "--field", "password"], passcode: pc).stdout == "p-2999\n")
        #expect(box.vault(["ls"], passcode: pc).stdout.split(separator: "\n").count == 3000)
    }

    /// A streamed import killed (SIGKILL) after it wrote thousands of items into its transaction,
    /// while it waits for more input: nothing of it is in the vault, and the vault opens and
    /// imports again (no lock or damage left behind).
    @Test func aStreamedImportKilledMidwayLeavesNothing() throws {
        box.initVault()
        let fifo = box.home + "/feed"
        #expect(mkfifo(fifo, 0o600) == 0)
        let pid = start(vaultBinary, ["import", fifo, "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
        let fd = open(fifo, O_WRONLY)
        #expect(fd >= 0)
        // 3,000 items (about 300 KB) written whole: with a 64 KiB pipe, the import has read and
        // written at least 2,300 of them when the last write returns.
        let part = "[" + (0..<3000).map { #"{"name":"k\#($0)","password":"p\#($0)"},"# }.joined()
        let wrote = part.withCString { write(fd, $0, strlen($0)) }
        #expect(wrote == part.utf8.count)
        usleep(200_000)
        #expect(kill(pid, SIGKILL) == 0)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        close(fd)
        #expect(status & 0x7f == SIGKILL, "the import was still running when killed")
        let ls = box.vault(["ls"], passcode: pc)
        #expect(ls.status == 0 && ls.stdout.isEmpty, "\(ls.status) \(ls.stdout.prefix(100)) \(ls.stderr)")
        let again = box.vault(["import"], passcode: pc, stdin: #"[{"name":"after","password":"x"}]"#)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(box.vault(["ls"], passcode: pc).stdout == "after\n")
    }

    // MARK: one-time codes

    @Test func otpMatchesOathtoolAndHOTPAdvances() throws {
        box.initVault()
        let secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQGEZA"
        for (alg, digits) in [("SHA1", 6), ("SHA256", 7), ("SHA512", 8)] {
            let uri = "otpauth://totp/Ex:me?secret=\(secret)&algorithm=\(alg)&digits=\(digits)&period=300"
            var r = box.vault(["add", "t-\(alg)", "--totp-stdin"], passcode: pc, stdin: uri + "\n")
            #expect(r.status == 0, "\(r.stderr)")
            var attempts = 0
            while attempts < 3 {
                attempts += 1
                r = box.vault(["otp", "t-\(alg)", "--json"], passcode: pc)
                #expect(r.status == 0, "\(r.stderr)")
                let o = json(r.stdout)
                let now = Int(Date().timeIntervalSince1970)
                let left = o["seconds_left"] as? Int ?? 0
                #expect((1...300).contains(left) && o["period"] as? Int == 300 && o["type"] as? String == "totp")
                let oath = run("/usr/bin/oathtool", ["--totp=\(alg.lowercased())", "--base32", "--digits=\(digits)", "--time-step-size=300s",
                                                     "--now=@\(now)", secret])
                if left < 3 { continue } // a period boundary between the two runs
                #expect(oath.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == o["code"] as? String, "\(alg): vault and oathtool differ")
                break
            }
            r = box.vault(["get", "t-\(alg)", "--field", "totp-uri"], passcode: pc)
            #expect(r.stdout == uri + "\n")
            r = box.vault(["get", "t-\(alg)", "--field", "totp"], passcode: pc)
            #expect(r.stdout.count == digits + 1 && r.stdout.dropLast().allSatisfy(\.isNumber), "get --field totp prints the code: \(r.stdout)")
        }
        // HOTP: each code once, the counter stored after it.
        var r = box.vault(["add", "h", "--totp-stdin"], passcode: pc, stdin: "otpauth://hotp/h?secret=\(secret)&counter=5\n")
        #expect(r.status == 0, "\(r.stderr)")
        for counter in 5...7 {
            r = box.vault(["otp", "h"], passcode: pc)
            let oath = run("/usr/bin/oathtool", ["--hotp", "--base32", "--counter=\(counter)", secret])
            #expect(r.stdout == oath.stdout, "HOTP counter \(counter)")
        }
        r = box.vault(["get", "h", "--field", "totp-uri"], passcode: pc)
        #expect(r.stdout.contains("counter=8"), "\(r.stdout)")
        // A bare base32 secret becomes a URI; invalid ones are refused on add with what is wrong.
        r = box.vault(["add", "bare", "--totp-stdin"], passcode: pc, stdin: "jbsw y3dp ehpk 3pxp\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["get", "bare", "--field", "totp-uri"], passcode: pc)
        #expect(r.stdout == "otpauth://totp/bare?secret=JBSWY3DPEHPK3PXP\n")
        for (bad, message) in [("otpauth://totp/x?secret=JBSW1", "base32"), ("otpauth://totp/x?secret=JBSWY3DP&algorithm=MD5", "algorithm"),
                               ("otpauth://totp/x?secret=JBSWY3DP&period=0", "period"), ("not base32!", "base32")] {
            r = box.vault(["add", "bad", "--totp-stdin"], passcode: pc, stdin: bad + "\n")
            #expect(r.status == 2 && r.stderr.contains(message), "\(bad): \(r.stderr)")
        }
        r = box.vault(["otp", "bare-not-there"], passcode: pc)
        #expect(r.status == 3)
    }

    @Test func customFieldsFromAddAndEditHiddenOnesFromStdin() {
        box.initVault()
        var r = box.vault(["add", "card", "--type", "card", "--field", "holder=Ann Lee", "--field", "site:url=https://bank.example",
                           "--field", "pin:hidden", "--password-stdin"], passcode: pc, stdin: "pw\n4321\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "x", "--field", "pin:hidden=1234"], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("standard input"), "a hidden value on argv is refused: \(r.stderr)")
        r = box.vault(["get", "card"], passcode: pc)
        #expect(r.stdout.contains("holder: Ann Lee") && r.stdout.contains("pin: ********") && !r.stdout.contains("4321"), "\(r.stdout)")
        #expect(r.stdout.contains("type: card"))
        r = box.vault(["get", "card", "--field", "pin"], passcode: pc)
        #expect(r.stdout == "4321\n")
        r = box.vault(["edit", "card", "--field", "pin:hidden", "--remove-field", "site", "--password-stdin"], passcode: pc, stdin: "pw2\n9999\n")
        #expect(r.status == 0, "\(r.stderr)")
        let item = exported()["card"]
        #expect(fields(item)["pin"]?.value == "9999" && fields(item)["site"] == nil && fields(item)["holder"]?.kind == "text")
        #expect((item?["password_history"] as? [[String: Any]])?.first?["password"] as? String == "pw")
        r = box.vault(["get", "card", "--field", "history"], passcode: pc)
        #expect(r.stdout == "pw\n")
        r = box.vault(["log", "--json"], passcode: pc)
        #expect(r.stdout.contains("\"field\":\"pin\""), "reading a hidden field is an audited release")
    }

    // MARK: vault's own JSON and round trips

    @Test func vaultJSONRoundTripsNewFieldsAndIsStrictInside() throws {
        box.initVault()
        box.initVault("copy")
        box.initVault("bw")
        let items = #"""
        [{"name":"full","type":"card","username":"u","password":"p","urls":["https://a","https://b"],"notes":"n","tags":["a/b","c"],
          "totp":"otpauth://totp/x?secret=JBSWY3DPEHPK3PXP","fields":[{"name":"number","kind":"hidden","value":"4111"},
          {"name":"site","kind":"url","value":"https://c"},{"name":"second","kind":"totp","value":"otpauth://totp/y?secret=JBSWY3DPEHPK3PXQ"},
          {"name":"plain","kind":"text","value":"t"}],"password_history":[{"password":"old1","replaced":1600000000},{"password":"old2","replaced":1600000100}],
          "fingerprint_login":false,"user_prompt":"User:","password_prompt":"Secret:","origin":"git","created":1500000000,"modified":1600000200},
         {"name":"note only","type":"note","notes":"just text","created":1,"modified":2}]
        """#
        var r = box.vault(["import"], passcode: pc, stdin: items)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("1 card") && r.stderr.contains("1 note"), "\(r.stderr)")
        r = box.vault(["export"], passcode: pc)
        let first = r.stdout
        r = box.vault(["import", "--vault", "copy", "-"], passcode: pc, stdin: first)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(NSDictionary(dictionary: exported("copy")).isEqual(to: exported()), "vault → vault JSON → vault keeps every field")
        // Bitwarden JSON out and back.
        r = box.vault(["export", "--format", "bitwarden"], passcode: pc)
        #expect(r.status == 0)
        let bw = try #require(json(r.stdout)["items"] as? [[String: Any]])
        #expect(bw.count == 2 && json(r.stdout)["encrypted"] as? Bool == false)
        r = box.vault(["import", "--vault", "bw", file("bw.json", r.stdout)], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("this looks like a Bitwarden JSON export"))
        #expect(NSDictionary(dictionary: exported("bw")).isEqual(to: exported()), "vault → Bitwarden JSON → vault keeps every field")
        // Strict inside fields and history too; nothing imported.
        for (bad, words) in [(#"[{"name":"q","fields":[{"name":"a","kind":"text","value":"v","colour":"red"}]}]"#, ["item 1 ('q')", "fields[0].colour"]),
                             (#"[{"name":"q","fields":[{"name":"a","kind":"secret","value":"v"}]}]"#, ["item 1 ('q')", "fields[0].kind"]),
                             (#"[{"name":"q","password_history":[{"password":"a","replaced":"yesterday"}]}]"#, ["password_history[0].replaced"]),
                             (#"[{"name":"q","type":"passkey"}]"#, ["'type'"]),
                             (#"[{"name":"q"},{"name":"r","totp":"otpauth://totp/x?secret=JBSWY3DP&digits=12"}]"#, ["item 2 ('r')", "digits"])] {
            r = box.vault(["import", "--vault", "copy"], passcode: pc, stdin: bad)
            #expect(r.status == 2 && words.allSatisfy(r.stderr.contains), "\(bad): \(r.stderr)")
        }
        #expect(exported("copy").count == 2, "nothing of a refused import was written")
    }

    @Test func encryptedExportOpensWithTheRightPassphraseOnly() {
        box.initVault()
        box.initVault("copy")
        var r = box.vault(["add", "s", "--password-stdin", "--field", "k:hidden"], passcode: pc, stdin: "password-Zq8-secret\nhidden-Wx4-value\n")
        #expect(r.status == 0)
        r = box.vault(["export", "--encrypt", "--passphrase-fd", "4", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: pc, fds: [4: "export pass phrase\n"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.hasPrefix("-----BEGIN VAULT ENCRYPTED EXPORT-----\n") && !r.stdout.contains("password-Zq8-secret") && !r.stdout.contains("hidden-Wx4-value"))
        let path = file("backup.vault-export", r.stdout)
        r = box.vault(["import", "--vault", "copy", path, "--passphrase-fd", "4"], passcode: pc, fds: [4: "wrong pass phrase\n"])
        #expect(r.status == 10 && r.stderr.contains("wrong passphrase"), "\(r.stderr)")
        r = box.vault(["import", "--vault", "copy", path, "--passphrase-fd", "4"], passcode: pc, fds: [4: "export pass phrase\n"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(fields(exported("copy")["s"])["k"]?.value == "hidden-Wx4-value" && exported("copy")["s"]?["password"] as? String == "password-Zq8-secret")
        // A truncated file is damaged, not a wrong passphrase.
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        r = box.vault(["import", "--vault", "copy", "--force", file("cut", String(text.prefix(text.count / 2))), "--passphrase-fd", "4"], passcode: pc,
                      fds: [4: "export pass phrase\n"])
        #expect(r.status == 5, "\(r.stderr)")
    }

    // MARK: real exports: keepassxc-cli and pass

    @Test func keepassxcExportsMadeByKeepassxcCli() throws {
        box.initVault()
        box.initVault("xml")
        let db = box.home + "/t.kdbx"
        // A KeePass XML with groups, a custom attribute, a protected one and TOTP, imported by
        // keepassxc-cli into a kdbx; an entry is then added and its password changed by the CLI.
        let source = file("source.xml", """
        <?xml version="1.0" encoding="UTF-8" standalone="yes"?>
        <KeePassFile><Meta><Generator>test</Generator></Meta><Root><Group><UUID>AAAAAAAAAAAAAAAAAAAAAQ==</UUID><Name>Root</Name>
        <Group><UUID>AAAAAAAAAAAAAAAAAAAAAg==</UUID><Name>Work</Name>
        <Group><UUID>AAAAAAAAAAAAAAAAAAAAAw==</UUID><Name>Dev</Name>
        <Entry><UUID>AAAAAAAAAAAAAAAAAAAABA==</UUID><Tags>ci;build</Tags>
        <String><Key>Title</Key><Value>gitlab</Value></String><String><Key>UserName</Key><Value>alice</Value></String>
        <String><Key>Password</Key><Value ProtectInMemory="True">pa,ss"word</Value></String>
        <String><Key>URL</Key><Value>https://git.example</Value></String><String><Key>Notes</Key><Value>line1
        line2</Value></String>
        <String><Key>otp</Key><Value>otpauth://totp/gitlab:alice?secret=JBSWY3DPEHPK3PXP&amp;period=30&amp;digits=6&amp;issuer=gitlab</Value></String>
        <String><Key>team</Key><Value>platform</Value></String><String><Key>recovery code</Key><Value ProtectInMemory="True">r-123</Value></String>
        </Entry></Group></Group></Group></Root></KeePassFile>
        """)
        var r = run("/usr/bin/keepassxc-cli", ["import", "-q", "-p", source, db], stdin: "kp-pass\nkp-pass\n")
        #expect(r.status == 0, "keepassxc-cli import: \(r.stderr)")
        r = run("/usr/bin/keepassxc-cli", ["add", "-q", "-u", "bob", "--url", "https://mail.example", "-p", db, "Work/mail"], stdin: "kp-pass\nfirst\n")
        #expect(r.status == 0, "keepassxc-cli add: \(r.stderr)")
        r = run("/usr/bin/keepassxc-cli", ["edit", "-q", "-p", db, "Work/mail"], stdin: "kp-pass\nsecond\n")
        #expect(r.status == 0, "keepassxc-cli edit: \(r.stderr)")
        let csv = run("/usr/bin/keepassxc-cli", ["export", "-q", "-f", "csv", db], stdin: "kp-pass\n")
        let xml = run("/usr/bin/keepassxc-cli", ["export", "-q", "-f", "xml", db], stdin: "kp-pass\n")
        #expect(csv.status == 0 && xml.status == 0, "\(csv.stderr) \(xml.stderr)")

        r = box.vault(["import", file("k.csv", csv.stdout)], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("this looks like a KeePassXC CSV export"), "\(r.stderr)")
        var items = exported()
        var g = try #require(items["gitlab"])
        #expect(g["username"] as? String == "alice" && g["password"] as? String == "pa,ss\"word" && g["notes"] as? String == "line1\nline2")
        #expect(g["urls"] as? [String] == ["https://git.example"] && g["tags"] as? [String] == ["Work/Dev"])
        #expect((g["totp"] as? String)?.contains("secret=JBSWY3DPEHPK3PXP") == true)
        #expect(items["mail"]?["password"] as? String == "second" && items["mail"]?["tags"] as? [String] == ["Work"])

        r = box.vault(["import", "--vault", "xml", "--from", "keepass-xml", file("k.xml", xml.stdout)], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        items = exported("xml")
        g = try #require(items["gitlab"])
        #expect(g["password"] as? String == "pa,ss\"word" && g["tags"] as? [String] == ["Work/Dev", "build", "ci"])
        #expect(fields(g)["team"]?.value == "platform" && fields(g)["team"]?.kind == "text")
        #expect(fields(g)["recovery code"]?.value == "r-123" && fields(g)["recovery code"]?.kind == "hidden")
        #expect((items["mail"]?["password_history"] as? [[String: Any]])?.map { $0["password"] as? String } == ["first"], "history from KeePass's entry history")
        // KeePassXC writes tags sorted, comma-separated. Its CSV has no custom attributes; the XML keeps them.
        #expect(fields(exported()["gitlab"]).isEmpty)
    }

    @Test func passStoreMadeByPass() throws {
        box.initVault()
        let gnupg = box.home + "/gnupg", store = box.home + "/store"
        try FileManager.default.createDirectory(atPath: gnupg, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let env = ["GNUPGHOME": gnupg, "PASSWORD_STORE_DIR": store]
        var r = run("/usr/bin/gpg", ["--batch", "--passphrase", "", "--quick-gen-key", "vault test <test@vault.invalid>", "ed25519", "cert,sign", "never"], env: env)
        #expect(r.status == 0, "gpg key: \(r.stderr)")
        let fpr = run("/usr/bin/gpg", ["--batch", "--list-keys", "--with-colons"], env: env).stdout
            .split(separator: "\n").first { $0.hasPrefix("fpr:") }?.split(separator: ":", omittingEmptySubsequences: false)[9] ?? ""
        r = run("/usr/bin/gpg", ["--batch", "--passphrase", "", "--quick-add-key", String(fpr), "cv25519", "encr", "never"], env: env)
        #expect(r.status == 0, "gpg subkey: \(r.stderr)")
        r = run("/usr/bin/pass", ["init", String(fpr)], env: env)
        #expect(r.status == 0, "pass init: \(r.stderr)")
        r = run("/usr/bin/pass", ["insert", "-m", "web/github"], stdin: "gh-pass\nusername: octo\nurl: https://github.com\notpauth://totp/gh?secret=JBSWY3DPEHPK3PXP\nrecovery: abc-def\nfree text line\n", env: env)
        #expect(r.status == 0, "pass insert: \(r.stderr)")
        r = run("/usr/bin/pass", ["insert", "-m", "wifi"], stdin: "wifi-pass\n", env: env)
        #expect(r.status == 0)
        box.env["GNUPGHOME"] = gnupg
        r = box.vault(["import", store], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("this looks like a pass password store") && r.stderr.contains("imported 2 items"), "\(r.stderr)")
        let items = exported()
        let gh = try #require(items["web/github"])
        #expect(gh["password"] as? String == "gh-pass" && gh["username"] as? String == "octo" && gh["urls"] as? [String] == ["https://github.com"])
        #expect(gh["totp"] as? String == "otpauth://totp/gh?secret=JBSWY3DPEHPK3PXP" && gh["notes"] as? String == "free text line")
        #expect(fields(gh)["recovery"]?.value == "abc-def")
        #expect(items["wifi"]?["password"] as? String == "wifi-pass")
        // Without the key, gpg fails and the entry is named; nothing is imported.
        box.env["GNUPGHOME"] = box.home + "/empty-gnupg"
        try FileManager.default.createDirectory(atPath: box.home + "/empty-gnupg", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        r = box.vault(["import", "--force", "--from", "pass", store], passcode: pc)
        #expect(r.status == 2 && r.stderr.contains("entry 'web/github'"), "\(r.stderr)")
    }
}

extension ImportTests {
    /// Eight `vault otp` of one HOTP item at once: eight different codes (the counters 0 to 7, as
    /// oathtool computes them) and the counter stored at 8. The counter advances by compare and
    /// set, so a command that lost the race reads again instead of handing out a code twice.
    @Test func concurrentHOTPCodesAreNeverHandedOutTwice() throws {
        box.initVault()
        let secret = "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        var r = box.vault(["add", "h", "--totp-stdin"], passcode: pc, stdin: "otpauth://hotp/h?secret=\(secret)&counter=0\n")
        #expect(r.status == 0, "\(r.stderr)")
        let results = Locked<[RunResult]>([])
        let env = box.env, pc = self.pc
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let one = spawn(vaultBinary, ["otp", "h", "--passcode-fd", "3"], env: env, fds: [3: pc + "\n"])
            results.withLock { $0.append(one) }
        }
        let all = results.withLock { $0 }
        #expect(all.allSatisfy { $0.status == 0 }, "\(all.map(\.stderr))")
        let codes = Set(all.map(\.stdout))
        let expected = Set((0..<8).map { run("/usr/bin/oathtool", ["--hotp", "--base32", "--counter=\($0)", secret]).stdout })
        #expect(codes == expected, "each counter's code exactly once")
        r = box.vault(["get", "h", "--field", "totp-uri"], passcode: pc)
        #expect(r.stdout.contains("counter=8"), "\(r.stdout)")
    }
}

/// A value behind a lock (test threads).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&value) } }
}
