import Foundation
import Testing
@testable import VaultCLI
import VaultKit

/// A sink that keeps what comes as text apart from what comes from guarded memory
/// (`writeSecret`), so a test sees which path each byte took.
final class SplitSink: TextSink {
    private(set) var text = ""
    private(set) var guarded = ""
    /// Everything, in order.
    private(set) var all = ""
    func write(_ text: String) {
        self.text += text
        all += text
    }
    func writeSecret(_ secret: borrowing SecretBytes) {
        let s = secret.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
        guarded += s
        all += s
    }
    func writeSecret(_ output: SecretOutput) {
        let s = (try? output.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }) ?? ""
        guarded += s
        all += s
    }
}

/// The outputs that carry secrets are assembled in guarded memory and handed to the sink from
/// there (`writeSecret`), never as text; what they write is what the String paths wrote.
@Suite struct GuardedOutputTests {
    let cli = InProcess()
    let pc = "guarded output passcode"

    func passcode() -> String { "\(cli.fd(pc + "\n"))" }

    func run(_ args: [String], stdin: String = "") -> (status: Int32, out: SplitSink, err: String) {
        let out = SplitSink(), err = BufferSink()
        let input = cli.fd(stdin)
        defer { close(input) }
        let ctx = CommandContext(stdout: out, stderr: err, environment: cli.env, terminal: NoTerminal(), stdinFD: input)
        return (VaultCLI.run(args, context: ctx), out, err.text)
    }

    func makeVault() {
        let r = cli.run(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint", "--passcode-fd", passcode()])
        #expect(r.status == 0, "\(r.err)")
    }

    @Test func gitsAnswerComesFromGuardedMemoryAndIsTheSameText() {
        makeVault()
        let password = "g1t \"pw\" ✓"
        var r = run(["git-credential", "store", "--passcode-fd", passcode()],
                    stdin: "protocol=https\nhost=example.com\nusername=bob\npassword=\(password)\npassword_expiry_utc=4000000000\noauth_refresh_token=tok-9\n\n")
        #expect(r.status == 0, "\(r.err)")
        r = run(["git-credential", "get", "--passcode-fd", passcode()], stdin: "protocol=https\nhost=example.com\n\n")
        #expect(r.status == 0, "\(r.err)")
        let expected = GitCredentialRules.answer(from: Item(name: "x", username: "bob", password: password,
                                                             fields: CredentialExtras(passwordExpiry: 4_000_000_000, oauthRefreshToken: "tok-9").fields))
        #expect(r.out.guarded == expected, "byte for byte the String answer")
        #expect(r.out.text.isEmpty, "nothing went out as text")
    }

    @Test func dockersAnswerComesFromGuardedMemoryAndIsTheSameText() {
        makeVault()
        let secret = "d0cker\\\"s\u{1}ecret"
        let server = "https://index.docker.io/v1/"
        var r = run(["docker-credential", "store", "--passcode-fd", passcode()],
                    stdin: JSONText.text(["ServerURL": server, "Username": "me", "Secret": secret]))
        #expect(r.status == 0, "\(r.out.all)\(r.err)")
        r = run(["docker-credential", "get", "--passcode-fd", passcode()], stdin: server)
        #expect(r.status == 0, "\(r.out.all)\(r.err)")
        #expect(r.out.guarded == JSONText.text(["ServerURL": server, "Username": "me", "Secret": secret]) + "\n")
        #expect(r.out.text.isEmpty)
    }

    /// `get --reveal`, `--json` and `--field` of a secret: written from guarded memory, as the
    /// String formatting wrote them.
    @Test func getPrintsSecretsFromGuardedMemoryAsBefore() throws {
        makeVault()
        let json = #"[{"name":"x","username":"u","password":"p\"w","notes":"n1\nn2","totp":"otpauth://totp/x?secret=JBSWY3DPEHPK3PXP","#
            + #""fields":[{"name":"pin","kind":"hidden","value":"1234"},{"name":"site","kind":"text","value":"eu"}],"#
            + #""password_history":[{"password":"old1","replaced":10},{"password":"old2","replaced":20}],"created":1,"modified":2}]"#
        #expect(cli.run(["import", "--passcode-fd", passcode()], stdin: json).status == 0)
        let totp = cli.run(["get", "x", "--field", "totp-uri", "--passcode-fd", passcode()]).out.dropLast()
        #expect(totp.hasPrefix("otpauth://"))

        var r = run(["get", "x", "--reveal", "--passcode-fd", passcode()])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.guarded == """
            name: x
            username: u
            password: p"w
            totp: \(totp)
            notes: n1
            n2
            pin: 1234
            site: eu
            password history: 2 former passwords (--field history)
            fingerprint login: off

            """)
        #expect(r.out.text.isEmpty)

        r = run(["get", "x", "--json", "--reveal", "--passcode-fd", passcode()])
        let whole: [String: Any] = [
            "name": "x", "username": "u", "password": "p\"w", "notes": "n1\nn2", "totp": String(totp), "type": "login", "urls": [String](),
            "tags": [String](), "fingerprint_login": false, "created": 1, "modified": 2, "history_count": 2,
            "fields": [["name": "pin", "kind": "hidden", "value": "1234"], ["name": "site", "kind": "text", "value": "eu"]],
        ]
        #expect(r.out.guarded == JSONText.text(whole) + "\n")
        #expect(r.out.text.isEmpty)

        r = run(["get", "x", "--json", "--passcode-fd", passcode()])
        #expect(!r.out.all.contains("p\\\"w") && !r.out.all.contains("1234") && r.out.all.contains(#""has_password":true"#))

        for (field, expected) in [("notes", #"{"notes":"n1\nn2"}"#), ("pin", #"{"pin":"1234"}"#), ("history", #"{"history":"old2\nold1"}"#),
                                  ("site", #"{"site":"eu"}"#)] {
            r = run(["get", "x", "--field", field, "--json", "--passcode-fd", passcode()])
            #expect(r.status == 0 && r.out.guarded == expected + "\n", "\(field): \(r.out.all) \(r.err)")
        }
        r = run(["get", "x", "--field", "history", "--passcode-fd", passcode()])
        #expect(r.out.guarded == "old2\nold1\n")
        r = run(["get", "x", "--field", "totp-uri", "--json", "--passcode-fd", passcode()])
        #expect(r.out.guarded == JSONText.text(["totp-uri": String(totp)]) + "\n" && r.out.text.isEmpty)
        r = run(["get", "x", "--field", "totp-uri", "--passcode-fd", passcode()])
        #expect(r.out.guarded == totp && r.out.text == "\n")
    }

    /// `vault login NAME --format env|json|netrc` prints from guarded memory the text the String
    /// quoting gives.
    @Test func printedLoginsComeFromGuardedMemory() throws {
        makeVault()
        for password in ["it's a \"pw\" \\ x", "plain", "tab\there", "nbsp\u{a0}x"] {
            let r0 = cli.run(["add", "site", "--force", "--username", "me", "--url", "https://example.com/x", "--password-stdin",
                              "--passcode-fd", passcode()], stdin: password + "\n")
            #expect(r0.status == 0, "\(r0.err)")
            var r = run(["login", "site", "--format", "env", "--passcode-fd", passcode()])
            #expect(r.out.guarded == "export VAULT_USERNAME='me'\nexport VAULT_PASSWORD=\(shellQuoted(password))\n", "\(r.err)")
            r = run(["login", "site", "--format", "json", "--passcode-fd", passcode()])
            #expect(r.out.guarded == JSONText.text(["username": "me", "password": password, "url": "https://example.com/x"]) + "\n")
            r = run(["login", "site", "--format", "netrc", "--passcode-fd", passcode()])
            #expect(r.out.guarded == "machine example.com login me password \(netrcToken(password))\n")
            #expect(r.out.text.isEmpty)
        }
    }
}
