import Foundation
import Testing

/// Fixtures written to each manager's documented export shape (Bitwarden's JSON and CSV,
/// 1Password's CSV and 1PUX, Chrome's and Firefox's CSV); every field must land somewhere, and a
/// malformed file is exit 2 naming the line or entry with nothing imported.
@Suite struct ForeignFormatTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    func file(_ name: String, _ text: String) -> String {
        let path = box.home + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
        return path
    }

    func exported() -> [String: [String: Any]] {
        let r = box.vault(["export"], passcode: pc)
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

    /// Imports `path`, expecting success, and returns stderr.
    @discardableResult
    func importOK(_ args: [String]) -> String {
        let r = box.vault(["import"] + args, passcode: pc)
        #expect(r.status == 0, "\(args): \(r.stderr)")
        return r.stderr
    }

    /// Expects exit 2 with every word in stderr, and an empty vault after.
    func refused(_ args: [String], _ words: [String]) {
        let r = box.vault(["import"] + args, passcode: pc)
        #expect(r.status == 2 && words.allSatisfy(r.stderr.contains), "\(args): \(r.status) \(r.stderr)")
        #expect(box.vault(["ls"], passcode: pc).stdout.isEmpty, "nothing of a refused import was written")
    }

    static let bitwardenJSON = #"""
    {
      "encrypted": false,
      "folders": [{"id": "f1", "name": "Work/Servers"}],
      "items": [
        {"id": "i1", "organizationId": null, "folderId": "f1", "type": 1, "reprompt": 0, "name": "GitHub", "notes": "2FA on",
         "favorite": true,
         "fields": [{"name": "team", "value": "core", "type": 0, "linkedId": null}, {"name": "api key", "value": "k-1", "type": 1, "linkedId": null},
                    {"name": "admin", "value": "true", "type": 2, "linkedId": null}, {"name": "user link", "value": null, "type": 3, "linkedId": 100}],
         "login": {"uris": [{"match": null, "uri": "https://github.com"}, {"match": 1, "uri": "https://gist.github.com"}],
                   "username": "octo", "password": "gh-pass", "totp": "JBSWY3DPEHPK3PXP",
                   "fido2Credentials": [{"credentialId": "c1", "keyType": "public-key"}]},
         "collectionIds": null, "attachments": [{"id": "a1", "fileName": "recovery.txt"}],
         "passwordHistory": [{"lastUsedDate": "2024-02-01T10:00:00.000Z", "password": "older"}, {"lastUsedDate": "2023-01-01T10:00:00.000Z", "password": "oldest"}],
         "revisionDate": "2024-03-01T12:00:00.123Z", "creationDate": "2022-05-06T07:08:09.000Z", "deletedDate": null},
        {"id": "i2", "organizationId": null, "folderId": null, "type": 2, "reprompt": 0, "name": "Safe combo", "notes": "12-34-56",
         "favorite": false, "secureNote": {"type": 0}, "collectionIds": null, "revisionDate": "2024-01-01T00:00:00.000Z",
         "creationDate": "2024-01-01T00:00:00.000Z", "deletedDate": null},
        {"id": "i3", "organizationId": null, "folderId": null, "type": 3, "reprompt": 1, "name": "Visa", "notes": null, "favorite": false,
         "card": {"cardholderName": "Ann Lee", "brand": "Visa", "number": "4111111111111111", "expMonth": "7", "expYear": "2030", "code": "123"},
         "collectionIds": null, "revisionDate": "2024-01-01T00:00:00.000Z", "creationDate": "2024-01-01T00:00:00.000Z", "deletedDate": null},
        {"id": "i4", "organizationId": null, "folderId": null, "type": 4, "reprompt": 0, "name": "Me", "notes": null, "favorite": false,
         "identity": {"title": "Ms", "firstName": "Ann", "middleName": null, "lastName": "Lee", "address1": "1 Main St", "address2": null,
                      "address3": null, "city": "Springfield", "state": null, "postalCode": "12345", "country": "US", "company": null,
                      "email": "ann@example.com", "phone": null, "ssn": "078-05-1120", "username": "annl", "passportNumber": null, "licenseNumber": "D123"},
         "collectionIds": null, "revisionDate": "2024-01-01T00:00:00.000Z", "creationDate": "2024-01-01T00:00:00.000Z", "deletedDate": null},
        {"id": "i5", "organizationId": null, "folderId": null, "type": 1, "reprompt": 0, "name": "GitHub", "notes": null, "favorite": false,
         "login": {"uris": [], "username": "second-account", "password": "p2", "totp": null},
         "collectionIds": null, "revisionDate": "2024-01-01T00:00:00.000Z", "creationDate": "2024-01-01T00:00:00.000Z", "deletedDate": null},
        {"id": "i6", "organizationId": null, "folderId": null, "type": 1, "reprompt": 0, "name": "Deleted one", "notes": null, "favorite": false,
         "login": {"uris": [], "username": "x", "password": "y", "totp": null},
         "collectionIds": null, "revisionDate": "2024-01-01T00:00:00.000Z", "creationDate": "2024-01-01T00:00:00.000Z", "deletedDate": "2024-02-02T00:00:00.000Z"}
      ]
    }
    """#

    @Test func bitwardenJSONKeepsEveryField() throws {
        box.initVault()
        let stderr = importOK([file("bitwarden_export.json", Self.bitwardenJSON)])
        #expect(stderr.contains("this looks like a Bitwarden JSON export (--from bitwarden)"))
        #expect(stderr.contains("imported 5 items") && stderr.contains("2 logins, 1 note, 1 card, 1 identity"), "\(stderr)")
        #expect(stderr.contains("not kept: 1 attachments") && stderr.contains("not kept: 1 passkeys"), "\(stderr)")
        #expect(stderr.contains("skipped 1 item in Bitwarden's trash") && stderr.contains("1 item was renamed"), "\(stderr)")
        let items = exported()
        let gh = try #require(items["GitHub"])
        #expect(gh["username"] as? String == "octo" && gh["password"] as? String == "gh-pass" && gh["notes"] as? String == "2FA on")
        #expect(gh["urls"] as? [String] == ["https://github.com", "https://gist.github.com"])
        #expect(gh["tags"] as? [String] == ["Work/Servers", "favorite"])
        #expect(gh["totp"] as? String == "otpauth://totp/GitHub?secret=JBSWY3DPEHPK3PXP")
        let f = fields(gh)
        #expect(f["team"]?.value == "core" && f["api key"]?.kind == "hidden" && f["api key"]?.value == "k-1" && f["admin"]?.value == "true")
        #expect(f["user link"]?.value == "linked to 100")
        #expect((gh["password_history"] as? [[String: Any]])?.map { $0["password"] as? String } == ["oldest", "older"])
        #expect(gh["created"] as? Int == 1651820889 && gh["modified"] as? Int == 1709294400)
        #expect(items["GitHub (2)"]?["username"] as? String == "second-account")
        #expect(items["Safe combo"]?["type"] as? String == "note" && items["Safe combo"]?["notes"] as? String == "12-34-56")
        let card = fields(items["Visa"])
        #expect(items["Visa"]?["type"] as? String == "card" && card["number"]?.kind == "hidden" && card["number"]?.value == "4111111111111111")
        #expect(card["security code"]?.value == "123" && card["cardholder"]?.value == "Ann Lee" && card["expiry year"]?.value == "2030")
        #expect(card["bitwarden reprompt"]?.value == "on")
        let me = fields(items["Me"])
        #expect(items["Me"]?["type"] as? String == "identity" && me["firstName"]?.value == "Ann" && me["ssn"]?.kind == "hidden")
        #expect(me["licenseNumber"]?.value == "D123" && me["middleName"] == nil)
        // Hidden custom fields are masked in summaries.
        let r = box.vault(["get", "GitHub"], passcode: pc)
        #expect(r.stdout.contains("api key: ********") && !r.stdout.contains("k-1"))
    }

    @Test func bitwardenCSVAndOnePasswordCSV() throws {
        box.initVault()
        let bw = """
        folder,favorite,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp
        Social,1,login,Twitter,"multi
        line note","team: core
        pin: 1234",0,"https://twitter.com,https://x.com",me,"p,w""1",otpauth://totp/t?secret=JBSWY3DPEHPK3PXP
        ,,note,Recipe,secret sauce,,0,,,,

        """
        let stderr = importOK([file("bitwarden.csv", bw)])
        #expect(stderr.contains("this looks like a Bitwarden CSV export") && stderr.contains("1 login, 1 note"), "\(stderr)")
        var items = exported()
        let t = try #require(items["Twitter"])
        #expect(t["password"] as? String == "p,w\"1" && t["notes"] as? String == "multi\nline note" && t["urls"] as? [String] == ["https://twitter.com", "https://x.com"])
        #expect(t["tags"] as? [String] == ["Social", "favorite"] && fields(t)["pin"]?.value == "1234" && fields(t)["team"]?.value == "core")
        #expect(items["Recipe"]?["type"] as? String == "note")

        box.initVault("op")
        let op = """
        Title,Url,Username,Password,OTPAuth,Favorite,Archived,Tags,Notes,Extra column
        Amazon,https://amazon.com,buyer,am-pass,otpauth://totp/a?secret=JBSWY3DPEHPK3PXP,true,false,"shop,home",ship it,kept
        Old bank,https://bank.example,acct,b-pass,,false,true,,,

        """
        let r = box.vault(["import", "--vault", "op", file("1password.csv", op)], passcode: pc)
        #expect(r.status == 0 && r.stderr.contains("this looks like a 1Password CSV export"), "\(r.stderr)")
        let out = box.vault(["export", "--vault", "op"], passcode: pc).stdout
        let list = (try? JSONSerialization.jsonObject(with: Data(out.utf8))) as? [[String: Any]] ?? []
        items = Dictionary(list.map { ($0["name"] as? String ?? "", $0) }, uniquingKeysWith: { a, _ in a })
        #expect(items["Amazon"]?["tags"] as? [String] == ["shop", "home", "favorite"] && items["Amazon"]?["notes"] as? String == "ship it")
        #expect(fields(items["Amazon"])["Extra column"]?.value == "kept", "an unknown column becomes a custom field")
        #expect(items["Old bank"]?["tags"] as? [String] == ["archived"] && items["Old bank"]?["password"] as? String == "b-pass")
    }

    @Test func onePUXZip() throws {
        box.initVault()
        let data = #"""
        {"accounts":[{"attrs":{"accountName":"Ann","name":"Ann","avatar":"","email":"ann@example.com","uuid":"A1","domain":"https://my.1password.com/"},
          "vaults":[{"attrs":{"uuid":"v1","desc":"","avatar":"","name":"Personal","type":"P"},
            "items":[
              {"uuid":"i1","favIndex":1,"createdAt":1635522833,"updatedAt":1635522872,"trashed":false,"categoryUuid":"001",
               "details":{"loginFields":[{"value":"ann@example.com","id":"","name":"email","fieldType":"E","designation":"username"},
                                         {"value":"op-pass","id":"","name":"password","fieldType":"P","designation":"password"},
                                         {"value":"\u2713","id":"policies","name":"policies","fieldType":"C"}],
                          "notesPlain":"login notes",
                          "sections":[{"title":"Extra","name":"s1","fields":[
                             {"title":"one-time password","id":"TOTP_1","value":{"totp":"otpauth://totp/e?secret=JBSWY3DPEHPK3PXP"},"indexAtSource":0,"guarded":false,"multiline":false,"dontGenerate":false},
                             {"title":"pin","id":"p1","value":{"concealed":"9876"},"indexAtSource":1,"guarded":true,"multiline":false,"dontGenerate":false},
                             {"title":"recovery site","id":"u1","value":{"url":"https://recover.example"},"indexAtSource":2,"guarded":false,"multiline":false,"dontGenerate":false}]}],
                          "passwordHistory":[{"value":"op-old","time":1635522854}]},
               "overview":{"subtitle":"ann@example.com","urls":[{"label":"website","url":"https://www.example.com"},{"label":"","url":"https://login.example.com"}],
                           "title":"Example","url":"https://www.example.com","ps":54,"pbe":0.0,"pgrng":false,"tags":["web"]}},
              {"uuid":"i2","favIndex":0,"createdAt":1619465226,"updatedAt":1619465278,"trashed":false,"categoryUuid":"002",
               "details":{"loginFields":[],"notesPlain":"","sections":[{"title":"","name":"","fields":[
                  {"title":"cardholder name","id":"cardholder","value":{"string":"Ann Lee"},"indexAtSource":0,"guarded":false,"multiline":false,"dontGenerate":false},
                  {"title":"number","id":"ccnum","value":{"creditCardNumber":"4111111111111111"},"indexAtSource":1,"guarded":false,"multiline":false,"dontGenerate":false},
                  {"title":"expiry date","id":"expiry","value":{"monthYear":203007},"indexAtSource":2,"guarded":false,"multiline":false,"dontGenerate":false}]}],
                  "passwordHistory":[]},
               "overview":{"subtitle":"","title":"Card","url":"","ps":0,"pbe":0.0,"pgrng":false}},
              {"uuid":"i3","favIndex":0,"createdAt":1619465226,"updatedAt":1619465278,"trashed":true,"categoryUuid":"003",
               "details":{"loginFields":[],"notesPlain":"gone","sections":[],"passwordHistory":[]},
               "overview":{"subtitle":"","title":"Trashed","url":"","ps":0,"pbe":0.0,"pgrng":false}}]}]}]}
        """#
        let dir = box.home + "/pux"
        try FileManager.default.createDirectory(atPath: dir + "/files", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dir + "/export.data", contents: Data(data.utf8))
        _ = FileManager.default.createFile(atPath: dir + "/export.attributes", contents: Data(#"{"version":3,"description":"1Password Unencrypted Export","createdAt":1635523000}"#.utf8))
        _ = FileManager.default.createFile(atPath: dir + "/files/doc1__scan.pdf", contents: Data("%PDF".utf8))
        let zip = spawn("/usr/bin/python3", ["-c", """
        import zipfile, sys, os
        with zipfile.ZipFile(sys.argv[1] + '/../export.1pux', 'w', zipfile.ZIP_DEFLATED) as z:
            for name in ['export.attributes', 'export.data', 'files/doc1__scan.pdf']:
                z.write(os.path.join(sys.argv[1], name), name)
        """, dir], env: box.env)
        #expect(zip.status == 0, "\(zip.stderr)")
        let stderr = importOK([box.home + "/export.1pux"])
        #expect(stderr.contains("this looks like a 1Password 1PUX export") && stderr.contains("1 login, 1 card"), "\(stderr)")
        #expect(stderr.contains("not kept: 1 attachments") && stderr.contains("skipped 1 item in 1Password's trash"), "\(stderr)")
        let items = exported()
        let e = try #require(items["Example"])
        #expect(e["username"] as? String == "ann@example.com" && e["password"] as? String == "op-pass" && e["notes"] as? String == "login notes")
        #expect(e["urls"] as? [String] == ["https://www.example.com", "https://login.example.com"] && e["tags"] as? [String] == ["Personal", "web", "favorite"])
        #expect(e["totp"] as? String == "otpauth://totp/e?secret=JBSWY3DPEHPK3PXP")
        #expect(fields(e)["pin"]?.kind == "hidden" && fields(e)["recovery site"]?.kind == "url" && fields(e)["policies"]?.value == "\u{2713}")
        #expect((e["password_history"] as? [[String: Any]])?.first?["password"] as? String == "op-old" && e["created"] as? Int == 1635522833)
        let card = fields(items["Card"])
        #expect(card["number"]?.kind == "hidden" && card["expiry date"]?.value == "2030-07" && card["cardholder name"]?.value == "Ann Lee")
        // A damaged archive names libarchive's reason; nothing imported.
        box.initVault("other")
        let r = box.vault(["import", "--vault", "other", "--from", "1pux", file("bad.1pux", "PK\u{3}\u{4}garbage")], passcode: pc)
        #expect(r.status == 2, "\(r.stderr)")
    }

    @Test func chromeAndFirefoxCSV() throws {
        box.initVault()
        importOK([file("Chrome Passwords.csv", "name,url,username,password,note\nexample.com,https://example.com/login,me,c-pass,from chrome\n")])
        var items = exported()
        #expect(items["example.com"]?["password"] as? String == "c-pass" && items["example.com"]?["notes"] as? String == "from chrome")
        box.vault(["rm", "example.com", "--force"], passcode: pc)
        let firefox = "\u{FEFF}\"url\",\"username\",\"password\",\"httpRealm\",\"formActionOrigin\",\"guid\",\"timeCreated\",\"timeLastUsed\",\"timePasswordChanged\"\r\n"
            + "\"https://mozilla.org\",\"fox\",\"f-pass\",,\"https://mozilla.org\",\"{a1b2}\",\"1700000000000\",\"1700000500000\",\"1700000100000\"\r\n"
        let stderr = importOK([file("logins.csv", firefox)])
        #expect(stderr.contains("this looks like a Firefox CSV export"), "\(stderr)")
        items = exported()
        let m = try #require(items["mozilla.org"])
        #expect(m["username"] as? String == "fox" && m["password"] as? String == "f-pass" && m["created"] as? Int == 1700000000 && m["modified"] as? Int == 1700000100)
        #expect(fields(m)["form action origin"]?.value == "https://mozilla.org" && fields(m)["firefox guid"]?.value == "{a1b2}")
    }

    @Test func malformedFilesNameTheLineOrEntryAndImportNothing() {
        box.initVault()
        refused(["--from", "chrome-csv", file("c1.csv", "name,url,username,password\na,https://a,u,\"unclosed\n")], ["line 2", "not closed"])
        refused(["--from", "chrome-csv", file("c2.csv", "name,url,username,password\na,https://a,u,p\nb,https://b,u\n")], ["line 3", "3 fields"])
        refused([file("f.csv", "url,username,password,httpRealm,formActionOrigin,guid,timeCreated,timeLastUsed,timePasswordChanged\nhttps://a,u,p\"q,,,,,,\n")],
                ["line 2", "quote"])
        refused(["--from", "keepassxc-csv", file("k.csv", "Title,Username\nx,y\n")], ["line 1", "'Group'"])
        refused(["--from", "bitwarden-csv", file("b.csv", "folder,favorite,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp\n,,card,x,,,,,,,\n")],
                ["line 2", "unknown type 'card'"])
        refused([file("1p.csv", "Title,Url,Username,Password,OTPAuth,Favorite,Archived,Tags,Notes\nA,,u,p,otpauth://totp/a?secret=!!!,false,false,,\n")],
                ["line 2", "base32"])
        refused([file("bw.json", #"{"encrypted":false,"items":[{"type":1,"name":"a","login":{}},{"type":1,"name":"b","login":{"totp":"otpauth://totp/x?secret=AB&algorithm=MD4"}}]}"#)],
                ["entry 2 ('b')", "algorithm"])
        refused([file("bw2.json", #"{"encrypted":false,"items":[{"type":1,"name":"a"},"#)], ["line 1", "not valid JSON"])
        refused([file("bw3.json", #"{"encrypted":true,"encKeyValidation_DO_NOT_EDIT":"x","items":[]}"#)], ["encrypted"])
        refused(["--from", "keepass-xml", file("k.xml", "<?xml version=\"1.0\"?>\n<KeePassFile><Root><Group><Entry>\n<String><Key>Title</Key></Entry></Group></Root></KeePassFile>\n")],
                ["line 3"])
        refused([file("k2.xml", "<?xml version=\"1.0\"?>\n<html><body/></html>\n")], ["not a KeePass export"])
        refused([file("what.txt", "just some words\n")], ["cannot tell what format"])
        refused(["--from", "nonsense", file("x.json", "[]")], ["unknown import format"])
    }

    @Test func dryRunPrintsAndChangesNothing() {
        box.initVault()
        let r = box.vault(["import", "--dry-run", file("bitwarden_export.json", Self.bitwardenJSON)], passcode: pc)
        #expect(r.status == 0 && r.stdout.contains("login\tGitHub\n") && r.stdout.contains("card\tVisa\n"), "\(r.stdout)")
        #expect(r.stderr.contains("would import 5 items"), "\(r.stderr)")
        #expect(box.vault(["ls"], passcode: pc).stdout.isEmpty)
        // vault's own JSON, collected for --dry-run, counts each item once.
        let own = box.vault(["import", "--dry-run"], passcode: pc, stdin: #"[{"name":"a"},{"name":"b","type":"note"}]"#)
        #expect(own.status == 0 && own.stderr.contains("would import 2 items\nvault: by type: 1 login, 1 note"), "\(own.stderr)")
    }
}
