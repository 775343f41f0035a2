import Testing
@testable import VaultKit

@Suite struct SecretReferenceTests {
    @Test func referencesNameAnItemAFieldAndOptionallyAVault() throws {
        let r = try SecretReference(parsing: "vault://github/password")
        #expect(r.vault == nil && r.item == "github" && r.field == .password && r.text == "vault://github/password")
        let q = try SecretReference(parsing: "vault://work/prod%2Fdb%20main/USERNAME")
        #expect(q.vault == "work" && q.item == "prod/db main" && q.field == .username)
        // A literal '/' splits: three parts are VAULT/ITEM/FIELD.
        let g = try SecretReference(parsing: "vault://git/example.org (bob)/password")
        #expect(g.vault == "git" && g.item == "example.org (bob)")
        #expect(try SecretReference(parsing: "vault://git%2Fexample.org (bob)/password").item == "git/example.org (bob)")
        #expect(try SecretReference(parsing: "vault://with space/notes").item == "with space")
        for bad in ["github/password", "vault://github", "vault://a/b/c/d", "vault:///password", "vault://x//password",
                    "vault://a/%zz/password", "vault://../password", "vault://a/b%00c/password"] {
            #expect(throws: VaultError.self, "\(bad)") { try SecretReference(parsing: bad) }
        }
    }

    @Test func aReferenceNamesItsFieldInTheOneVocabulary() throws {
        var item = Item(name: "x", username: "u", password: "p", urls: ["https://a", "https://b"], notes: "n", totp: "otpauth://totp/x?secret=A")
        item.fields = [CustomField(name: "PIN", kind: .hidden, value: "1234"), CustomField(name: "Account No", kind: .text, value: "42")]
        // The field, whether reading it is a release (and of which stored field), and its value.
        let expected: [String: (ItemField, ItemField?, String?)] = [
            "password": (.password, .password, "p"), "username": (.username, nil, "u"), "url": (.url, nil, "https://a"),
            "notes": (.notes, .notes, "n"), "totp-uri": (.totpURI, .totp, "otpauth://totp/x?secret=A"),
            // otp: the TOTP secret is released; the resolver turns it into the code.
            "otp": (.otp, .totp, nil),
        ]
        for (field, (parsed, released, value)) in expected {
            for spelling in [field, field.uppercased()] {
                let f = try SecretReference(parsing: "vault://x/\(spelling)").field
                #expect(f == parsed && f.isBuiltIn, "\(spelling)")
                #expect((item.isSecretField(f) ? f.source : nil) == released, "\(spelling)")
                #expect(item.value(of: f) == value, "\(spelling)")
            }
        }
        #expect(SecretReference.builtInFields.contains(.totp) && !SecretReference.builtInFields.contains(.history))
        // Custom fields by their exact name: a hidden one is a release of that field.
        let pin = try SecretReference(parsing: "vault://x/PIN").field
        #expect(pin == .custom("PIN") && item.isSecretField(pin) && item.value(of: pin) == "1234")
        let account = try SecretReference(parsing: "vault://x/Account%20No").field
        #expect(account == .custom("Account No") && !item.isSecretField(account) && item.value(of: account) == "42")
        #expect(item.value(of: try SecretReference(parsing: "vault://x/pin").field) == nil, "custom names are exact")
        #expect(item.value(of: .custom("nothing")) == nil)
    }

    @Test func templatesKeepTheirTextAndFindEveryPlaceholder() throws {
        let text = "a: {{ vault://x/password }}\nb: {{vault://w/y/username}} {{ not a ref }} {{vault://x/password}}\n"
        let t = try SecretTemplate(parsing: Array(text.utf8))
        #expect(t.references.map(\.text) == ["vault://x/password", "vault://w/y/username"])
        #expect(t.pieces.count == 7)
        #expect(t.pieces[0] == .text(Array("a: ".utf8)))
        #expect(t.pieces.last == .text(Array("\n".utf8)))
        #expect(t.pieces.contains(.text(Array(" {{ not a ref }} ".utf8))))
        let bytes: [UInt8] = [0xff, 0x00] + Array("{{ vault://x/notes }}".utf8)
        #expect(try SecretTemplate(parsing: bytes).pieces.first == .text([0xff, 0x00]), "binary text passes as it is")
        #expect(throws: VaultError.self) { try SecretTemplate(parsing: Array("x {{ vault://a/password\n}}".utf8)) }
        #expect(throws: VaultError.self) { try SecretTemplate(parsing: Array("{{ vault://nofield }}".utf8)) }
    }
}

@Suite struct DotEnvTests {
    @Test func readsTheDotenvSyntax() throws {
        let text = """
        # a comment
        PLAIN=value
        export EXPORTED=vault://db/password
          SPACED = spaced value   # trailing comment
        SINGLE='it is $HOME \\n' # kept literally
        DOUBLE="line1\\nline2 \\"q\\" \\\\ \\$x"
        MULTI="a
        b"
        HASH=a#b
        EMPTY=
        PLAIN=again\r

        """
        let vars = try DotEnv.parse(text)
        let d = Dictionary(vars.map { ($0.key, $0.value) }, uniquingKeysWith: { $1 })
        #expect(d["EXPORTED"] == "vault://db/password")
        #expect(d["SPACED"] == "spaced value")
        #expect(d["DOUBLE"] == "line1\nline2 \"q\" \\ $x")
        #expect(d["MULTI"] == "a\nb")
        #expect(d["HASH"] == "a#b")
        #expect(d["EMPTY"] == "")
        #expect(d["PLAIN"] == "again", "a later line wins, CRLF endings read")
        #expect(vars.map(\.key) == ["EXPORTED", "SPACED", "SINGLE", "DOUBLE", "MULTI", "HASH", "EMPTY", "PLAIN"])
    }

    @Test func singleQuotesAreLiteral() throws {
        #expect(try DotEnv.parse("A='x $y \\n'").first?.value == "x $y \\n")
    }

    @Test func refusesWhatItCannotRead() {
        for bad in ["NOEQUALS", "1ABC=x", "A-B=x", "A=\"open", "A='open", "A=\"x\" trailing"] {
            #expect(throws: VaultError.self, "\(bad)") { try DotEnv.parse(bad) }
        }
    }
}

@Suite struct SecretMaskerTests {
    func values(_ secrets: [String], plain: [String] = []) throws -> SecretValues {
        var v = secrets.enumerated().map { (key: "s\($0.offset)", bytes: Array($0.element.utf8), secret: true) }
            + plain.enumerated().map { (key: "p\($0.offset)", bytes: Array($0.element.utf8), secret: false) }
        return try SecretValues(&v)
    }

    func mask(_ chunks: [String], _ values: SecretValues) -> String {
        let m = SecretMasker(values)
        var out: [UInt8] = []
        for c in chunks { out += Array(c.utf8).withUnsafeBytes { m.feed($0) } }
        out += m.finish()
        return String(decoding: out, as: UTF8.self)
    }

    @Test func masksASecretSplitAtEveryPoint() throws {
        let v = try values(["hunter22"], plain: ["alice"])
        let text = "user alice pw hunter22 end"
        let expected = "user alice pw <concealed by vault> end"
        for cut in 0...text.utf8.count {
            let b = Array(text.utf8)
            let chunks = [String(decoding: b[..<cut], as: UTF8.self), String(decoding: b[cut...], as: UTF8.self)]
            #expect(mask(chunks, v) == expected, "split at \(cut)")
        }
        // One byte at a time, and the secret twice in a row.
        #expect(mask("hunter22hunter22!".map { String($0) }, v) == "<concealed by vault><concealed by vault>!")
    }

    @Test func holdsBackAtMostTheLongestSecretMinusOne() throws {
        let v = try values(["abcdef", "xyz"])
        let m = SecretMasker(v)
        #expect(m.maximumHeld == 5)
        let out = Array("--abcde".utf8).withUnsafeBytes { m.feed($0) }
        #expect(out == Array("--".utf8), "a possible start of a secret waits")
        let rest = Array("g".utf8).withUnsafeBytes { m.feed($0) }
        #expect(rest == Array("abcdeg".utf8), "it was not one: let through")
        #expect(m.finish().isEmpty)
        // A tail that could start a secret is let through at the end.
        #expect(mask(["ends with abc"], v) == "ends with abc")
    }

    @Test func theLongestSecretWinsAndOverlapsAreMasked() throws {
        let v = try values(["pass", "password1"])
        #expect(mask(["my password1 and pass and passw"], v) == "my <concealed by vault> and <concealed by vault> and <concealed by vault>w")
        #expect(mask(["my pass", "word1"], v) == "my <concealed by vault>", "held back for the longer one")
    }

    @Test func withoutSecretsEverythingPassesAndTransformedSecretsAreNotSeen() throws {
        let none = try values([], plain: ["alice"])
        #expect(mask(["alice ", "bob"], none) == "alice bob")
        let v = try values(["hunter22"])
        #expect(mask(["aHVudGVyMjI=", " 22retnuh"], v) == "aHVudGVyMjI= 22retnuh", "base64 and reversed: not caught (threat-model.md)")
    }
}
