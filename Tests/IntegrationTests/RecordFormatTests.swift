import Foundation
import Testing
@testable import VaultKit

/// Record format 2 through the binary: listings and searches open overviews only.
@Suite struct RecordFormatTests {
    let box = Sandbox()
    let pc = Sandbox.passcode

    /// Every secrets record corrupted: `ls` and `search` still work, with and without an unlock
    /// session; a summary still prints; releasing a secret is exit 5 naming the item.
    @Test func listingsAndSearchesNeverOpenASecretsRecord() throws {
        box.initVault()
        for (name, user) in [("github", "octo"), ("gitlab", "tanuki"), ("bank", "me")] {
            let r = box.vault(["add", name, "--username", user, "--url", "https://\(name).example", "--password-stdin"], passcode: pc, stdin: "pw-\(name)\n")
            #expect(r.status == 0, "\(r.stderr)")
        }
        let loc = try VaultLocation(name: "default", environment: box.env)
        let store = try VaultStore.open(loc)
        for row in try store.db.query("SELECT id, secrets FROM items") {
            var bytes = try #require(row[1].bytes)
            for k in bytes.indices { bytes[k] ^= 0x5a }
            try store.db.query("UPDATE items SET secrets=? WHERE id=?", [.blob(bytes), row[0]])
        }
        func check(_ context: String, session: Bool) {
            let auth = session ? nil : pc
            var r = box.vault(["ls"], passcode: auth)
            #expect(r.status == 0 && r.stdout == "bank\ngithub\ngitlab\n", "\(context): ls: \(r.status) \(r.stderr)")
            r = box.vault(["search", "GIT"], passcode: auth)
            #expect(r.status == 0 && r.stdout == "github\ngitlab\n", "\(context): search: \(r.status) \(r.stderr)")
            r = box.vault(["search", "tanuki", "--json"], passcode: auth)
            #expect(r.status == 0 && r.stdout.contains("\"gitlab\""), "\(context): search by username: \(r.stderr)")
            r = box.vault(["get", "github"], passcode: auth)
            #expect(r.status == 0 && r.stdout.contains("username: octo"), "\(context): summary: \(r.stderr)")
            r = box.vault(["get", "github", "--field", "password"], passcode: auth)
            #expect(r.status == 5, "\(context): get --field password: \(r.status)")
            #expect(r.stderr.contains("item 'github'") && r.stderr.contains("secrets record"), "\(context): \(r.stderr)")
        }
        check("without a session", session: false)
        let u = box.vault(["unlock", "--scope", "user", "--timeout", "60"], passcode: pc)
        #expect(u.status == 0, "\(u.stderr)")
        check("through the session", session: true)
    }
}
