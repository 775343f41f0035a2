import Foundation
import Testing

/// Secret references through the built binary: `vault read`, `vault run` (environment,
/// `--env-file`, masking) and `vault inject`.
@Suite struct ReferenceCommandTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    /// A vault with `db` (username, URL, notes, a password with a quote, a space and `$`) and
    /// `team/api` (a `/` in its name), and a second vault `work` with `deploy`.
    func vaultsWithItems() {
        box.initVault()
        var r = box.vault(["add", "db", "--username", "admin", "--url", "https://db.example.com", "--notes", "primary",
                           "--password-stdin"], passcode: pc, stdin: "s3cr'et pw$1\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "team/api", "--password-stdin"], passcode: pc, stdin: "tok-ABCDEFG\n")
        #expect(r.status == 0, "\(r.stderr)")
        box.initVault("work")
        r = box.vault(["add", "deploy", "--vault", "work", "--password-stdin"], passcode: pc, stdin: "deploy-key-77\n")
        #expect(r.status == 0, "\(r.stderr)")
    }

    /// `vault args` with the passcode on fd 3, given before `--`.
    func vault(_ args: [String], stdin: String = "", env extra: [String: String] = [:], passcode: Bool = true) -> RunResult {
        var all = args
        if passcode { all.insert(contentsOf: ["--passcode-fd", "3"], at: args.firstIndex(of: "--") ?? args.count) }
        return spawn(vaultBinary, all, env: box.env.merging(extra) { $1 }, stdin: stdin, fds: passcode ? [3: pc + "\n"] : [:])
    }

    /// The audit records of `vault` as "command item field".
    func audit(_ vault: String = "default") -> [String] {
        let r = box.vault(["log", "--json", "--vault", vault], passcode: pc)
        return (json(r.stdout)["records"] as? [[String: Any]] ?? []).map {
            "\($0["command"] as? String ?? "") \($0["item"] as? String ?? "") \($0["field"] as? String ?? "")"
        }
    }

    func write(_ name: String, _ text: String, mode: Int = 0o600) -> String {
        let path = box.home + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: mode])
        return path
    }

    @Test func readPrintsExactlyTheValue() {
        vaultsWithItems()
        var r = vault(["read", "vault://db/password"])
        #expect(r.status == 0 && r.stdout == "s3cr'et pw$1\n", "\(r.stdout) \(r.stderr)")
        r = vault(["read", "vault://db/password", "--no-newline"])
        #expect(r.stdout == "s3cr'et pw$1")
        #expect(vault(["read", "vault://db/username"]).stdout == "admin\n")
        #expect(vault(["read", "vault://db/url"]).stdout == "https://db.example.com\n")
        #expect(vault(["read", "vault://db/notes"]).stdout == "primary\n")
        #expect(vault(["read", "vault://team%2Fapi/password"]).stdout == "tok-ABCDEFG\n")
        #expect(vault(["read", "vault://work/deploy/password"]).stdout == "deploy-key-77\n")
        // Only secrets are releases: the password and notes reads are logged, the username is not.
        #expect(audit() == ["read db password", "read db password", "read db notes", "read team/api password"], "\(audit())")
        #expect(audit("work") == ["read deploy password"])
        // What does not resolve: exit 3 naming the reference; a malformed one is exit 2.
        for (ref, why) in [("vault://nope/password", "no item named 'nope'"), ("vault://db/otp-secret", "no field 'otp-secret'"),
                           ("vault://team%2Fapi/username", "has no username"), ("vault://nowhere/db/password", "no vault named 'nowhere'")] {
            r = vault(["read", ref])
            #expect(r.status == 3 && r.stdout.isEmpty && r.stderr.contains("\(ref): ") && r.stderr.contains(why), "\(ref): \(r.stderr)")
        }
        r = vault(["read", "vault://team/api/password/x"])
        #expect(r.status == 2 && r.stderr.contains("%2F"), "\(r.stderr)")
    }

    @Test func referencesResolveThroughAnUnlockSession() {
        vaultsWithItems()
        var r = box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(r.status == 0, "\(r.stderr)")
        defer { box.vault(["lock", "--all"]) }
        // No passcode, no finger, no terminal: the session's agent releases (and audits) them.
        r = vault(["read", "vault://team%2Fapi/password", "--no-input"], passcode: false)
        #expect(r.status == 0 && r.stdout == "tok-ABCDEFG\n", "\(r.stdout) \(r.stderr)")
        r = vault(["inject", "--no-input"], stdin: "{{ vault://db/password }}|{{ vault://db/username }}", passcode: false)
        #expect(r.status == 0 && r.stdout == "s3cr'et pw$1|admin", "\(r.stdout) \(r.stderr)")
        r = vault(["run", "--no-input", "--env", "P=vault://db/password", "--", "sh", "-c", #"printf %s "$P""#], passcode: false)
        #expect(r.status == 0 && r.stdout == "<concealed by vault>", "\(r.stdout) \(r.stderr)")
        // `work` has no session: the reference to it needs its own unlock, and there is none here.
        r = vault(["read", "vault://work/deploy/password", "--no-input"], passcode: false)
        #expect(r.status == 12, "\(r.stderr)")
        #expect(audit() == ["read team/api password", "inject db password", "run db password"], "\(audit())")
    }

    @Test func runResolvesReferencesInItsEnvironmentAndInAnEnvFile() {
        vaultsWithItems()
        let env = write(".env", """
        # the app's settings
        export DB_PASSWORD=vault://db/password
        DB_USER="vault://db/username"
        API_TOKEN='vault://team%2Fapi/password'
        GREETING="hello world" # not a secret
        DEPLOY=vault://work/deploy/password
        """)
        let child = #"printf '%s|%s|%s|%s|%s|%s' "$DB_PASSWORD" "$DB_USER" "$API_TOKEN" "$GREETING" "$DEPLOY" "$FROM_ENV""#
        let r = vault(["run", "--no-masking", "--env-file", env, "--", "sh", "-c", child], env: ["FROM_ENV": "vault://db/url"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "s3cr'et pw$1|admin|tok-ABCDEFG|hello world|deploy-key-77|https://db.example.com", "\(r.stdout)")
        // One record per secret, however many vaults.
        #expect(audit() == ["run db password", "run team/api password"], "\(audit())")
        #expect(audit("work") == ["run deploy password"])
        // --env beats the file, the file beats the environment.
        let over = vault(["run", "--no-masking", "--env-file", env, "--env", "GREETING=vault://db/notes", "--", "sh", "-c",
                          #"printf '%s|%s' "$GREETING" "$DB_USER""#], env: ["DB_USER": "vault://db/url"])
        #expect(over.stdout == "primary|admin", "\(over.stdout) \(over.stderr)")
    }

    @Test func runOpensOnlyTheVaultsItsReferencesName() {
        // No default vault at all: a reference to `work` must not open (or look for) it.
        box.initVault("work")
        var r = box.vault(["add", "deploy", "--vault", "work", "--password-stdin"], passcode: pc, stdin: "deploy-key-77\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = vault(["run", "--no-masking", "--env", "X=vault://work/deploy/password", "--", "sh", "-c", #"printf %s "$X""#])
        #expect(r.status == 0 && r.stdout == "deploy-key-77", "\(r.stdout) \(r.stderr)")
        // A NAME binding needs the command's vault, which is not there.
        r = vault(["run", "--env", "X=deploy", "--env", "Y=vault://work/deploy/password", "--", "true"])
        #expect(r.status == 3 && r.stderr.contains("no vault named 'default'"), "\(r.stderr)")
        #expect(audit("work") == ["run deploy password"], "the binding was checked before the reference was released: \(audit("work"))")
    }

    @Test func runRefusesUnknownReferencesBeforeStartingAnything() {
        vaultsWithItems()
        let marker = box.home + "/started"
        var r = vault(["run", "--env", "X=vault://db/password", "--env", "Y=vault://ghost/password", "--", "touch", marker])
        #expect(r.status == 3 && r.stderr.contains("vault://ghost/password"), "\(r.stderr)")
        r = vault(["run", "--env-file", write("bad.env", "A=vault://db\n"), "--", "touch", marker])
        #expect(r.status == 2, "\(r.stderr)")
        r = vault(["run", "--env-file", write("bad2.env", "A='open\n"), "--", "touch", marker])
        #expect(r.status == 2 && r.stderr.contains("line 1"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: marker))
        #expect(audit().isEmpty, "nothing was released: \(audit())")
    }

    @Test func runMasksEveryReleasedSecretInTheChildsOutput() {
        vaultsWithItems()
        // Whole, split over two writes (with a pause between), on stderr, and next to a
        // non-secret value (the username is not masked).
        let child = #"printf 'pw=%s\n' "$P"; printf 'tok-ABC'; sleep 0.3; printf 'DEFG!\n'; printf 'err %s\n' "$P" >&2; printf 'user=%s\n' "$U"; exit 7"#
        var r = vault(["run", "--env", "P=vault://db/password", "--env", "T=vault://team%2Fapi/password", "--env", "U=db.username",
                       "--", "sh", "-c", child])
        #expect(r.status == 7, "the child's exit status passes through: \(r.stderr)")
        #expect(r.stdout == "pw=<concealed by vault>\n<concealed by vault>!\nuser=admin\n", "\(r.stdout)")
        #expect(r.stderr == "err <concealed by vault>\n", "\(r.stderr)")
        // The legacy NAME.FIELD binding is masked too; --no-masking lets everything through.
        r = vault(["run", "--env", "P=db", "--", "sh", "-c", #"printf %s "$P""#])
        #expect(r.stdout == "<concealed by vault>")
        r = vault(["run", "--no-masking", "--env", "P=db", "--", "sh", "-c", #"printf %s "$P""#])
        #expect(r.stdout == "s3cr'et pw$1")
        // Output without secrets, binary output and a large amount pass byte for byte.
        let file = box.home + "/big.out"
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        r = spawn(vaultBinary, ["run", "--passcode-fd", "3", "--env", "P=db", "--", "sh", "-c",
                                "head -c 300000 /dev/zero | tr '\\0' x; printf '\\377\\001'"],
                  env: box.env, fds: [3: pc + "\n"], stdoutFD: fd)
        close(fd)
        let bytes = FileManager.default.contents(atPath: file).map { [UInt8]($0) } ?? []
        #expect(r.status == 0 && bytes == [UInt8](repeating: UInt8(ascii: "x"), count: 300000) + [0xff, 0x01], "\(bytes.count) bytes")
    }

    @Test func runWithMaskingPassesSignalsOnAndReportsThem() {
        vaultsWithItems()
        // The child ends by a signal: vault exits 128 + N, as without masking.
        let r = vault(["run", "--env", "P=db", "--", "sh", "-c", "kill -TERM $$"])
        #expect(r.status == 128 + SIGTERM, "\(r.status) \(r.stderr)")
        // SIGTERM sent to vault reaches the child, whose own exit status then passes through.
        let ready = box.home + "/ready"
        let script = write("trap.sh", "#!/bin/sh\ntrap 'exit 9' TERM\ntouch '\(ready)'\nwhile :; do sleep 0.1; done\n", mode: 0o700)
        // Run by sh rather than exec'd: a just-written script can be ETXTBSY while a parallel
        // test's child still holds a descriptor inherited from the write.
        let pid = start(vaultBinary, ["run", "--passcode-fd", "3", "--env", "P=db", "--", "/bin/sh", script], env: box.env, fds: [3: pc + "\n"])
        for _ in 0..<200 where !FileManager.default.fileExists(atPath: ready) { usleep(50_000) }
        #expect(FileManager.default.fileExists(atPath: ready), "the script did not start")
        kill(pid, SIGTERM)
        #expect(reap(pid) == 9, "the child's own exit status after the forwarded SIGTERM")
    }

    @Test func injectFillsATemplateIntoAPrivateFile() throws {
        vaultsWithItems()
        let template = write("config.tpl", """
        db:
          user: {{ vault://db/username }}
          password: "{{vault://db/password}}"
          again: {{ vault://db/password }}
        api: {{ vault://team%2Fapi/password }}
        deploy: {{ vault://work/deploy/password }}
        helm: {{ .Values.keep }} and {{ not-a-ref }}
        """, mode: 0o644)
        let out = box.home + "/config.yml"
        var r = vault(["inject", "-i", template, "-o", out])
        #expect(r.status == 0 && r.stdout.isEmpty, "\(r.stderr)")
        #expect(try String(contentsOfFile: out, encoding: .utf8) == """
        db:
          user: admin
          password: "s3cr'et pw$1"
          again: s3cr'et pw$1
        api: tok-ABCDEFG
        deploy: deploy-key-77
        helm: {{ .Values.keep }} and {{ not-a-ref }}
        """)
        var st = stat()
        #expect(stat(out, &st) == 0 && st.st_mode & 0o777 == 0o600, "mode \(String(st.st_mode & 0o777, radix: 8))")
        // One record per secret: the password named twice is one release.
        #expect(audit() == ["inject db password", "inject team/api password"], "\(audit())")
        #expect(audit("work") == ["inject deploy password"])
        // An existing file is replaced, 0600 again, even when it was wider.
        chmod(out, 0o644)
        r = vault(["inject", "--in-file", template, "--out-file", out])
        #expect(r.status == 0 && stat(out, &st) == 0 && st.st_mode & 0o777 == 0o600, "\(r.stderr)")
        // Standard input to standard output.
        r = vault(["inject"], stdin: "token={{ vault://team%2Fapi/password }}\n")
        #expect(r.status == 0 && r.stdout == "token=tok-ABCDEFG\n", "\(r.stdout) \(r.stderr)")
        // No temporary file is left beside the output.
        let left = try FileManager.default.contentsOfDirectory(atPath: box.home).filter { $0.contains(".tmp-") }
        #expect(left.isEmpty, "\(left)")
    }

    @Test func injectWithAnUnknownReferenceWritesNothing() throws {
        vaultsWithItems()
        let template = write("t.tpl", "a={{ vault://db/password }}\nb={{ vault://ghost/password }}\n")
        let out = box.home + "/out.env"
        var r = vault(["inject", "-i", template, "-o", out])
        #expect(r.status == 3 && r.stderr.contains("vault://ghost/password") && r.stderr.contains("no item named 'ghost'"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // An existing output stays as it was.
        _ = write("out.env", "old\n")
        r = vault(["inject", "-i", template, "-o", out])
        #expect(r.status == 3)
        #expect(try String(contentsOfFile: out, encoding: .utf8) == "old\n")
        // To stdout: nothing printed either; and nothing was released.
        r = vault(["inject"], stdin: "a={{ vault://db/password }} b={{ vault://db/nofield }}")
        #expect(r.status == 3 && r.stdout.isEmpty, "\(r.stdout)")
        #expect(audit().isEmpty, "\(audit())")
        // A malformed placeholder is a usage error naming its line.
        r = vault(["inject"], stdin: "ok\n{{ vault://db }}\n")
        #expect(r.status == 2 && r.stderr.contains("line 2"), "\(r.stderr)")
    }

    @Test func versionAndJSONOutputsForScripts() {
        box.initVault()
        var r = box.vault(["--version"])
        #expect(r.status == 0 && r.stdout == "vault 0.1.0\n")
        r = box.vault(["version", "--json"])
        #expect(json(r.stdout) as NSDictionary == ["name": "vault", "version": "0.1.0"] as NSDictionary, "\(r.stdout)")
        r = box.vault(["lock", "--json"])
        #expect(r.status == 0 && json(r.stdout)["locked"] as? Int == 0, "\(r.stdout)")
        r = box.vault(["import", "--json"], passcode: pc, stdin: #"[{"name":"a","password":"1"},{"name":"b"}]"#)
        #expect(r.status == 0 && json(r.stdout) as NSDictionary == ["imported": 2, "added": 2, "replaced": 0] as NSDictionary, "\(r.stdout)")
        r = box.vault(["import", "--json", "--force"], passcode: pc, stdin: #"[{"name":"a","password":"2"},{"name":"c"}]"#)
        #expect(json(r.stdout) as NSDictionary == ["imported": 2, "added": 1, "replaced": 1] as NSDictionary, "\(r.stdout)")
        r = box.vault(["generate", "--json", "--length", "20"])
        let g = json(r.stdout)
        #expect((g["password"] as? String)?.count == 20 && (g["entropy_bits"] as? Double ?? 0) > 100, "\(r.stdout)")
    }

    @Test func generateOptions() {
        var r = box.vault(["generate", "--words", "5", "--length", "30"])
        #expect(r.status == 2 && r.stderr.contains("--length"), "\(r.stderr)")
        r = box.vault(["generate", "--words", "6", "--separator", " "])
        let words = r.stdout.trimmingCharacters(in: .newlines).split(separator: " ")
        #expect(r.status == 0 && words.count == 6 && words.allSatisfy { $0.allSatisfy { $0.isLowercase || $0 == "-" } }, "\(r.stdout)")
        r = box.vault(["generate", "--chars", "ab", "--length", "64"])
        #expect(r.stdout.trimmingCharacters(in: .newlines).allSatisfy { $0 == "a" || $0 == "b" } && r.stdout.count == 65, "\(r.stdout)")
        for _ in 0..<20 {
            r = box.vault(["generate", "--exclude-similar", "--length", "200"])
            #expect(r.status == 0 && !r.stdout.contains { "il1Lo0O".contains($0) }, "\(r.stdout)")
        }
        r = box.vault(["generate", "--chars", "aaaa"])
        #expect(r.status == 2)
    }
}

/// One finger touch per command, however many references it resolves (libfprint's virtual reader).
extension RunLoginFingerprintTests {
    @Test func oneTouchResolvesEveryReferenceOfACommand() {
        var r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--finger", "right-index"], passcode: pc,
                      scans: Array(repeating: "alice", count: 5))
        #expect(r.status == 0, "\(r.stderr)")
        for (name, pw) in [("a", "pw-a"), ("b", "pw-b"), ("guarded", "pw-g"), ("guarded2", "pw-h")] {
            r = box.vault(["add", name, "--username", "u-" + name, "--password-stdin"], passcode: pc, stdin: pw + "\n")
            #expect(r.status == 0, "\(r.stderr)")
        }
        for name in ["guarded", "guarded2"] {
            r = vault(["edit", name, "--fingerprint-login", "on"], passcode: pc, scans: ["alice"])
            #expect(r.status == 0, "\(r.stderr)")
        }
        // Five references, four items, two of them with fingerprint login on: the one touch that
        // opens the vault is the fresh match too (a second request would time out: exit 18).
        let template = "{{ vault://a/password }} {{ vault://b/password }} {{ vault://a/username }} {{ vault://guarded/password }} {{ vault://guarded2/password }}"
        let feed = Touches(tool: runLoginReaderTool, socket: socket, env: box.env, fingers: ["alice"])
        r = spawn(vaultBinary, ["inject", "--no-input", "--scan-timeout", "5"], env: box.env, stdin: template)
        #expect(feed.finish() == 1)
        #expect(r.status == 0 && r.stdout == "pw-a pw-b u-a pw-g pw-h", "\(r.stdout) \(r.stderr)")
        #expect(r.stderr.components(separatedBy: "touch the fingerprint reader").count == 2, "one prompt: \(r.stderr)")
        let log = json(box.vault(["log", "--json"], passcode: pc).stdout)["records"] as? [[String: Any]] ?? []
        #expect(log.filter { $0["command"] as? String == "inject" }.count == 4, "one record per secret: \(log)")
    }
}

extension ReferenceCommandTests {
    /// `vault://ITEM/otp` is the current code, the one `vault otp` prints and oathtool computes;
    /// the TOTP secret is what is released (one audit record); an HOTP secret is refused.
    @Test func anOTPReferenceIsTheCurrentCode() throws {
        box.initVault()
        let secret = "JBSWY3DPEHPK3PXP"
        var r = box.vault(["add", "mfa", "--totp-stdin"], passcode: pc, stdin: "otpauth://totp/x:me?secret=\(secret)&issuer=x\n")
        #expect(r.status == 0, "\(r.stderr)")
        r = box.vault(["add", "counter", "--totp-stdin"], passcode: pc, stdin: "otpauth://hotp/x:me?secret=\(secret)&counter=3\n")
        #expect(r.status == 0, "\(r.stderr)")
        // Retried when a 30-second step boundary falls between the two reads.
        var matched = false
        for _ in 0..<3 {
            let read = vault(["read", "vault://mfa/otp"])
            let oath = spawn("/usr/bin/oathtool", ["--totp", "-b", secret], env: ["PATH": "/usr/bin:/bin"])
            #expect(read.status == 0, "\(read.stderr)")
            if read.stdout == oath.stdout && read.stdout.count == 7 { matched = true; break }
        }
        #expect(matched, "vault read vault://mfa/otp printed oathtool's code")
        #expect(audit().filter { $0.hasSuffix("mfa totp") }.count >= 1)
        r = vault(["read", "vault://counter/otp"])
        #expect(r.status == 2 && r.stderr.contains("HOTP"), "\(r.status) \(r.stderr)")
    }
}
