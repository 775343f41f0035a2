import Foundation
import Testing
@testable import VaultCLI
import VaultKit

/// `ls`, `search` (names and `--json`, with `--tag`) and `export` print, byte for byte, what they
/// printed before the loops over every row read the columns in place (the outputs below are
/// those of the build before that change, commit 276f12c, on the same import).
@Suite struct ListingOutputTests {
    let cli = InProcess()
    let pc = "in process passcode"

    /// Four items with every field a listing or an export shows: names that sort by byte
    /// (capitals first, then accents), several URLs and tags, an origin, custom fields, prompts,
    /// a password history, a note.
    static let items = #"""
[{"created":100,"modified":200,"name":"Zeta Bank","username":"z@example.com","password":"p \"q\" \\ é","urls":["https://zeta.example/login","https://m.zeta.example"],"tags":["bank","prod"],"type":"login","notes":"line1\nline2","totp":"otpauth://totp/z?secret=JBSWY3DPEHPK3PXP","fingerprint_login":false},
 {"created":101,"modified":201,"name":"café ☕","username":"Ünïcode","password":"x","tags":[],"urls":[],"type":"login","fingerprint_login":false,"origin":"keepass","fields":[{"kind":"text","name":"site","value":"EU"},{"kind":"hidden","name":"pin","value":"1234"}]},
 {"created":102,"modified":202,"name":"alpha","tags":["prod"],"urls":["https://EX.example"],"type":"note","notes":"a note","fingerprint_login":false},
 {"created":103,"modified":203,"name":"Beta/ssh","username":"root","password":"r","tags":[],"urls":[],"type":"login","user_prompt":"login:","password_prompt":"Password:","fingerprint_login":false,"password_history":[{"password":"older","replaced":150}]}]
"""#

    static let expected: [([String], String)] = [
        (["ls"], "Beta/ssh\nZeta Bank\nalpha\ncafé ☕\n"),
        (["ls", "--json"], "{\"damaged\":[],\"items\":[{\"created\":103,\"fingerprint_login\":false,\"modified\":203,\"name\":\"Beta/ssh\",\"tags\":[],\"urls\":[],\"username\":\"root\"},{\"created\":100,\"fingerprint_login\":false,\"modified\":200,\"name\":\"Zeta Bank\",\"tags\":[\"bank\",\"prod\"],\"urls\":[\"https://zeta.example/login\",\"https://m.zeta.example\"],\"username\":\"z@example.com\"},{\"created\":102,\"fingerprint_login\":false,\"modified\":202,\"name\":\"alpha\",\"tags\":[\"prod\"],\"urls\":[\"https://EX.example\"]},{\"created\":101,\"fingerprint_login\":false,\"modified\":201,\"name\":\"café ☕\",\"origin\":\"keepass\",\"tags\":[],\"urls\":[],\"username\":\"Ünïcode\"}]}\n"),
        (["search", "ex"], "Zeta Bank\nalpha\n"),
        (["search", "ex", "--json"], "{\"damaged\":[],\"items\":[{\"created\":100,\"fingerprint_login\":false,\"modified\":200,\"name\":\"Zeta Bank\",\"tags\":[\"bank\",\"prod\"],\"urls\":[\"https://zeta.example/login\",\"https://m.zeta.example\"],\"username\":\"z@example.com\"},{\"created\":102,\"fingerprint_login\":false,\"modified\":202,\"name\":\"alpha\",\"tags\":[\"prod\"],\"urls\":[\"https://EX.example\"]}]}\n"),
        (["search", "CAFÉ"], "café ☕\n"),
        (["ls", "--tag", "prod"], "Zeta Bank\nalpha\n"),
        (["ls", "--tag", "prod", "--json"], "{\"damaged\":[],\"items\":[{\"created\":100,\"fingerprint_login\":false,\"modified\":200,\"name\":\"Zeta Bank\",\"tags\":[\"bank\",\"prod\"],\"urls\":[\"https://zeta.example/login\",\"https://m.zeta.example\"],\"username\":\"z@example.com\"},{\"created\":102,\"fingerprint_login\":false,\"modified\":202,\"name\":\"alpha\",\"tags\":[\"prod\"],\"urls\":[\"https://EX.example\"]}]}\n"),
        (["search", "nothing-matches"], ""),
        (["export"], "[{\"created\":100,\"fingerprint_login\":false,\"modified\":200,\"name\":\"Zeta Bank\",\"notes\":\"line1\\nline2\",\"password\":\"p \\\"q\\\" \\\\ é\",\"tags\":[\"bank\",\"prod\"],\"totp\":\"otpauth://totp/z?secret=JBSWY3DPEHPK3PXP\",\"type\":\"login\",\"urls\":[\"https://zeta.example/login\",\"https://m.zeta.example\"],\"username\":\"z@example.com\"},\n{\"created\":101,\"fields\":[{\"kind\":\"text\",\"name\":\"site\",\"value\":\"EU\"},{\"kind\":\"hidden\",\"name\":\"pin\",\"value\":\"1234\"}],\"fingerprint_login\":false,\"modified\":201,\"name\":\"café ☕\",\"origin\":\"keepass\",\"password\":\"x\",\"tags\":[],\"type\":\"login\",\"urls\":[],\"username\":\"Ünïcode\"},\n{\"created\":102,\"fingerprint_login\":false,\"modified\":202,\"name\":\"alpha\",\"notes\":\"a note\",\"tags\":[\"prod\"],\"type\":\"note\",\"urls\":[\"https://EX.example\"]},\n{\"created\":103,\"fingerprint_login\":false,\"modified\":203,\"name\":\"Beta/ssh\",\"password\":\"r\",\"password_history\":[{\"password\":\"older\",\"replaced\":150}],\"password_prompt\":\"Password:\",\"tags\":[],\"type\":\"login\",\"urls\":[],\"user_prompt\":\"login:\",\"username\":\"root\"}]\n"),
    ]

    func run(_ args: [String]) -> (status: Int32, out: String, err: String) {
        let out = SplitSink(), err = BufferSink()
        let input = cli.fd("")
        defer { close(input) }
        let ctx = CommandContext(stdout: out, stderr: err, environment: cli.env, terminal: NoTerminal(), stdinFD: input)
        let status = VaultCLI.run(args + ["--passcode-fd", "\(cli.fd(pc + "\n"))"], context: ctx)
        return (status, out.all, err.text)
    }

    @Test func everyListingAndTheExportPrintWhatTheyPrinted() throws {
        #expect(run(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint"]).status == 0)
        let file = cli.home + "/items.json"
        try Self.items.write(toFile: file, atomically: true, encoding: .utf8)
        let imported = run(["import", file])
        #expect(imported.status == 0, "\(imported.err)")
        for (args, expected) in Self.expected {
            let r = run(args)
            #expect(r.status == 0, "\(args): \(r.err)")
            #expect(r.out == expected, "\(args)")
        }
    }

    /// `export` of odd items (every type and field kind, every escape, long texts) prints what
    /// the build before the records writer printed (Tests/VaultKitTests/Fixtures/export).
    @Test func theOddItemsExportAsBefore() throws {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("VaultKitTests/Fixtures/export")
        #expect(run(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint"]).status == 0)
        let imported = run(["import", fixtures.appendingPathComponent("odd-items.json").path])
        #expect(imported.status == 0, "\(imported.err)")
        let r = run(["export"])
        #expect(r.status == 0, "\(r.err)")
        #expect(Array(r.out.utf8) == Array(try Data(contentsOf: fixtures.appendingPathComponent("odd-expected.json"))))
        #expect(r.err.contains("vault: exported 50 items (plain vault JSON: every secret readable)"), "\(r.err)")
        let bitwarden = run(["export", "--format", "bitwarden"])
        #expect(bitwarden.status == 0 && bitwarden.err.contains("vault: exported 50 items (plain Bitwarden JSON"), "\(bitwarden.err)")
    }
}
