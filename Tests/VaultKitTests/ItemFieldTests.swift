import Foundation
import Testing
@testable import VaultKit

/// The one field vocabulary: how a user's spelling becomes an `ItemField`, what an unknown one
/// is told, and what a `FieldSelection` releases and when it needs a fresh match.
@Suite struct ItemFieldTests {
    static let item: Item = {
        var i = Item(name: "db", username: "me", password: "pw-2", urls: ["https://a", "https://b"], notes: "n", tags: ["x", "y"],
                     totp: "otpauth://totp/x?secret=A",
                     fields: [CustomField(name: "pin", kind: .hidden, value: "1234"), CustomField(name: "site", value: "s"),
                              CustomField(name: "seed", kind: .totp, value: "otpauth://totp/y?secret=B")])
        i.replacePassword(with: "pw-3", now: 9)
        i.userPrompt = "login:"
        return i
    }()

    @Test func everyBuiltInFieldIsReadFromItsSpellingInAnyCaseAndWrittenBack() {
        for field in ItemField.builtIn {
            #expect(ItemField(parsing: field.spelling) == field && ItemField(parsing: field.spelling.uppercased()) == field, "\(field)")
            #expect(ItemField(builtIn: field.spelling) == field && field.isBuiltIn)
        }
        #expect(Set(ItemField.builtIn).count == ItemField.builtIn.count, "one spelling each")
        #expect(ItemField(parsing: "user") == .username && ItemField(parsing: "User") == .username, "the alias")
        #expect(ItemField(parsing: "totp-uri") == .totpURI && ItemField(parsing: "user-prompt") == .userPrompt)
        #expect(ItemField(builtIn: "user") == nil && ItemField(builtIn: "Password") == nil, "the wire's names are exact")
    }

    @Test func anyOtherSpellingIsACustomFieldByItsExactName() {
        #expect(ItemField(parsing: "pin") == .custom("pin") && ItemField(parsing: "PIN") == .custom("PIN"))
        #expect(ItemField(parsing: "Account No") == .custom("Account No") && ItemField(parsing: "all") == .custom("all"))
        #expect(ItemField(parsing: "").isBuiltIn == false)
        #expect(ItemField.custom("pin").spelling == "pin" && "\(ItemField.custom("a b"))" == "a b")
    }

    @Test func anUnknownFieldIsToldTheNearestNameAndTheList() throws {
        #expect(try ItemField.custom("pin").checked(in: Self.item) == .custom("pin"))
        #expect(try ItemField.history.checked(in: Item(name: "bare")) == .history, "a built-in field is always known")
        do {
            _ = try ItemField(parsing: "pasword").checked(in: Self.item)
            Issue.record("an unknown field was accepted")
        } catch let e as VaultError {
            #expect(e.message == "unknown field 'pasword'")
            #expect(e.hint?.hasPrefix("did you mean 'password'? fields: name, type, username, password, url,") == true, "\(e.hint ?? "")")
            #expect(e.hint?.hasSuffix(", or one of this item's: pin, site, seed") == true)
        }
        // The item's own custom fields are candidates too; far words get the list alone.
        #expect(ItemField.hint(for: "pni", in: Self.item).hasPrefix("did you mean 'pin'?"))
        #expect(ItemField.hint(for: "zzzzzz", in: nil).hasPrefix("fields: name, type"))
        #expect(Spelling.nearest(to: "--fiel", among: ["--field", "--format"]) == "--field")
        #expect(Spelling.nearest(to: "lsit", among: ["list", "ls"]) == "list")
    }

    @Test func theValueOfEveryField() {
        let i = Self.item
        let values: [ItemField: String?] = [
            .name: "db", .type: "login", .username: "me", .password: "pw-3", .url: "https://a", .urls: "https://a\nhttps://b", .notes: "n",
            .tags: "x,y", .totp: i.totp, .totpURI: i.totp, .otp: nil, .history: "pw-2", .userPrompt: "login:", .passwordPrompt: nil,
            .custom("pin"): "1234", .custom("site"): "s", .custom("nothing"): nil,
        ]
        for (field, value) in values { #expect(i.value(of: field) == value, "\(field)") }
        #expect(Item(name: "e").value(of: .urls) == nil && Item(name: "e").value(of: .tags) == nil && Item(name: "e").value(of: .history) == nil)
    }

    @Test func secretsAreTheRecordsFieldsAndTheTOTPFormsReadTheSecret() {
        let i = Self.item
        let secret: [ItemField] = [.password, .notes, .totp, .totpURI, .otp, .history, .custom("pin"), .custom("seed")]
        let plain: [ItemField] = [.name, .type, .username, .url, .urls, .tags, .userPrompt, .passwordPrompt, .custom("site"), .custom("nothing")]
        for f in secret { #expect(i.isSecretField(f), "\(f)") }
        for f in plain { #expect(!i.isSecretField(f), "\(f)") }
        #expect(ItemField.otp.source == .totp && ItemField.totpURI.source == .totp && ItemField.password.source == .password)
        #expect(ItemField.password.isSingleSecret(of: i) && ItemField.otp.isSingleSecret(of: i) && !ItemField.history.isSingleSecret(of: i))
        #expect(!ItemField.username.isSingleSecret(of: i))
    }

    @Test func aSelectionNeedsAFreshMatchOnlyForASecretOfAnItemWithFingerprintLogin() {
        var guarded = Self.item
        guarded.fingerprintLogin = true
        for selection: FieldSelection in [.all, .fields([.password]), .fields([.username, .otp]), .fields([.history]), .fields([.custom("pin")])] {
            #expect(guarded.releaseNeedsFreshMatch(selection), "\(selection)")
            #expect(!Self.item.releaseNeedsFreshMatch(selection), "fingerprint login off: \(selection)")
        }
        for selection: FieldSelection in [.nothing, .fields([.username, .url, .custom("site")]), .fields([.custom("nothing")])] {
            #expect(!guarded.releaseNeedsFreshMatch(selection), "no secret named: \(selection)")
        }
    }

    @Test func aSelectionResolvesToTheStoredFieldsEachOnce() {
        let i = Self.item
        #expect(FieldSelection.all.resolved(for: i) == [.password, .totp, .notes, .custom("pin"), .custom("seed")], "all: not the history")
        #expect(FieldSelection.fields([.otp, .totpURI, .username, .totp, .username]).resolved(for: i) == [.totp, .username])
        #expect(FieldSelection.nothing.isEmpty && !FieldSelection.all.isEmpty && FieldSelection.nothing.resolved(for: i).isEmpty)
        // What a release hands out as text: only what it names.
        let all = i.withholdingSecrets(except: .all)
        #expect(all.password == "pw-3" && all.notes == "n" && all.totp == i.totp && all.passwordHistory.isEmpty && all.customField("pin")?.value == "1234")
        let pin = i.withholdingSecrets(except: .fields([.custom("pin"), .history]))
        #expect(pin.password == nil && pin.notes == nil && pin.totp == nil && pin.customField("seed")?.value == "" && pin.customField("pin")?.value == "1234")
        #expect(pin.passwordHistory == i.passwordHistory && pin.customField("site")?.value == "s")
        #expect(i.withholdingSecrets(except: .nothing) == ItemOverview(i).item)
    }

    @Test func anOverviewTellsWhichFieldsTheItemHasWithoutASecret() {
        let o = ItemOverview(Self.item), bare = ItemOverview(Item(name: "bare", fields: [CustomField(name: "pin", kind: .hidden, value: "1")]))
        for f: ItemField in [.password, .otp, .totpURI, .notes, .history, .custom("pin"), .username, .userPrompt] { #expect(o.has(f), "\(f)") }
        for f: ItemField in [.password, .totp, .notes, .history, .username, .url, .passwordPrompt, .custom("nothing")] { #expect(!bare.has(f), "\(f)") }
        #expect(bare.has(.custom("pin")), "a secret custom field is there even with its value withheld")
    }

    /// Foundation's coder reads and writes the same shape as the wire's (WireJSONTests checks both).
    @Test func fieldsCodeAsTheirNamesAndCustomFieldsAsAnObject() throws {
        let fields: [ItemField] = ItemField.builtIn + [.custom("pin"), .custom("password")]
        let data = try JSONEncoder().encode(fields)
        #expect(try JSONDecoder().decode([ItemField].self, from: data) == fields)
        #expect(String(decoding: try JSONEncoder().encode([ItemField.custom("pin"), .totpURI]), as: UTF8.self) == #"[{"custom":"pin"},"totp-uri"]"#)
        for bad in [#"["pin"]"#, #"["USERNAME"]"#, #"["user"]"#, #"[{"kind":"pin"}]"#, #"[7]"#] {
            #expect(throws: DecodingError.self, "\(bad)") { _ = try JSONDecoder().decode([ItemField].self, from: Data(bad.utf8)) }
        }
        #expect(try JSONDecoder().decode(FieldSelection.self, from: Data(#""all""#.utf8)) == .all)
        #expect(throws: DecodingError.self) { _ = try JSONDecoder().decode(FieldSelection.self, from: Data(#""some""#.utf8)) }
    }
}
