import Foundation
import Testing
@testable import VaultCLI
import VaultKit

/// Options are read through the keys the table declares; a command that reads one it does not
/// declare fails (in the debug build every test runs) naming it.
@Suite struct DeclaredOptionTests {
    /// A one-command table whose command declares `--json` and reads `--clip` too.
    static let probe = CommandSpec(
        name: "probe", summary: "reads an option it does not declare", usage: "vault probe",
        options: [ItemCommands.LsOptions.json],
        run: { inv, _ in _ = inv.has(ItemCommands.LsOptions.json) ? inv.has(ItemCommands.GetOptions.clip) : false })

    @Test func aReadOfAnUndeclaredOptionIsCaught() throws {
        let inv = try #require(try Parser.parse(["probe", "--json"], table: [Self.probe]))
        try Self.probe.run(inv, CommandContext(stdout: BufferSink(), stderr: BufferSink(), environment: [:], terminal: NoTerminal()))
        #expect(inv.undeclaredReads == ["--clip"])
        #expect(throws: VaultError.failure("internal error: 'probe' reads an option it does not declare: --clip")) {
            try VaultCLI.checkDeclaredReads(inv)
        }
    }

    @Test func declaredAndGlobalReadsPass() throws {
        let inv = try #require(try Parser.parse(["ls", "--json", "--vault", "w"], table: VaultCLI.table))
        #expect(inv.has(ItemCommands.LsOptions.json) && inv[GlobalOptions.vault] == "w" && !inv.has(AuthOptions.passcode))
        #expect(inv.undeclaredReads.isEmpty)
        #expect(inv.reads.all == ["--json", "--vault", "--passcode"])
    }

    /// Commands not run here: they serve, wait or scan (the agent, an unlock session, the
    /// clipboard clearer, enrolment, the Secret Service, which replaces the process).
    static let notRun: Set<String> = ["agent", "unlock", "clipboard-clear", "enroll", "unenroll", "secret-service"]

    /// A plausible value for an option, so the command gets past parsing to where it reads the rest.
    static func sample(_ o: OptionSpec, passcode: Int32, home: String) -> [String] {
        guard let v = o.value else { return [o.name] }
        let value: String
        switch v {
        case _ where o.name.hasSuffix("-fd"): value = "\(passcode)"
        case "N", "MIB", "HOURS", "SECONDS": value = o.name == "--kdf-memory" ? "8" : "1"
        case "D": value = "1s"
        case "on|off": value = "off"
        // Files the command may write go to the test's home, not the working directory.
        case "OUT", "FILE", "TEMPLATE", "PATH": value = home + "/out"
        case "F": value = o.name == "--field" ? "username" : o.name == "--format" ? "env" : "right-index"
        default: value = "x"
        }
        return [o.name, value]
    }

    /// Every command of the table, run in-process against a vault with an item, once bare and
    /// once with each of its options: none reads an option it does not declare.
    @Test func everyCommandReadsOnlyTheOptionsItDeclares() throws {
        let cli = InProcess()
        let pc = "declared options passcode"
        var r = cli.run(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint", "--passcode-fd", "\(cli.fd(pc + "\n"))"])
        try #require(r.status == 0, "\(r.err)")
        r = cli.run(["add", "x", "--username", "me", "--password-stdin", "--totp-stdin", "--field", "pin:hidden", "--field", "site=a",
                     "--passcode-fd", "\(cli.fd(pc + "\n"))"], stdin: "pw\nJBSWY3DPEHPK3PXP\n1234\n")
        try #require(r.status == 0, "\(r.err)")
        // The commands that change or remove the item run last.
        let last: Set<String> = ["rm", "mv", "rotate", "passcode", "recover", "import"]
        let commands = VaultCLI.table.filter { !Self.notRun.contains($0.name) }
        let ordered = commands.filter { !last.contains($0.name) } + commands.filter { last.contains($0.name) }
        var runs = 0
        for c in ordered {
            let arguments = Array(["x", "y"].prefix(c.arguments.lowerBound))
            let trailing = c.takesCommand ? ["--", "true"] : []
            for option in [nil] + c.options.map(Optional.some) {
                let fd = cli.fd(pc + "\n")
                let given = option.map { Self.sample($0, passcode: fd, home: cli.home) } ?? []
                let args = [c.name] + arguments + given + ["--no-input", "--passcode-fd", "\(fd)"] + trailing
                let result = cli.run(args)
                close(fd)
                runs += 1
                #expect(!result.err.contains("does not declare"), "\(args.joined(separator: " ")): \(result.err)")
            }
        }
        #expect(runs > 150)
    }
}

/// `get` decides what to release and print from its request and the item's overview alone.
@Suite struct GetPlanTests {
    let overview = ItemOverview(Item(name: "x", username: "me", password: "pw", totp: "JBSWY3DPEHPK3PXP",
                                     fields: [CustomField(name: "pin", kind: .hidden, value: "1234"), CustomField(name: "site", value: "a")]))

    @Test func aBuiltInSecretFieldNeedsNoOverview() {
        #expect(GetRequest(name: "x", field: .password).direct == .secret(field: .password))
        #expect(GetRequest(name: "x", field: .password, json: true).direct == nil)
        #expect(GetRequest(name: "x", field: .password, clip: true).direct == nil)
        #expect(GetRequest(name: "x", field: .totp).direct == nil)
        #expect(GetRequest(name: "x", field: .username).direct == nil)
    }

    @Test func onlyTheSecretsPrintedAreReleased() throws {
        #expect(try GetRequest(name: "x").plan(for: overview) == .item(overview, release: .nothing))
        #expect(try GetRequest(name: "x", reveal: true).plan(for: overview) == .item(overview, release: .all))
        #expect(try GetRequest(name: "x", field: .username).plan(for: overview) == .item(overview, release: .nothing))
        #expect(try GetRequest(name: "x", field: .custom("pin")).plan(for: overview) == .secret(field: .custom("pin")))
        #expect(try GetRequest(name: "x", field: .custom("pin"), json: true).plan(for: overview) == .item(overview, release: .fields([.custom("pin")])))
        #expect(try GetRequest(name: "x", field: .history).plan(for: overview) == .item(overview, release: .fields([.history])))
    }

    @Test func totpAndTheClipboard() throws {
        #expect(try GetRequest(name: "x", field: .totp).plan(for: overview) == .totp(.code, .text))
        #expect(try GetRequest(name: "x", field: .totp, json: true).plan(for: overview) == .totp(.code, .json))
        #expect(try GetRequest(name: "x", field: .totpURI).plan(for: overview) == .totpURI(json: false))
        #expect(try GetRequest(name: "x", field: .totpURI, clip: true).plan(for: overview) == .totp(.uri, .clipboard))
        #expect(try GetRequest(name: "x", clip: true).plan(for: overview) == .copy(field: .password, secret: true, release: .fields([.password]), item: "x"))
        #expect(try GetRequest(name: "x", field: .custom("site"), clip: true).plan(for: overview) == .copy(field: .custom("site"), secret: false, release: .nothing, item: "x"))
        #expect(try GetRequest(name: "x", field: .history, clip: true).plan(for: overview) == .copy(field: .history, secret: false, release: .fields([.history]), item: "x"))
    }

    /// `--field` is read by `ItemField(parsing:)`: built-in names in any case, the `user` alias,
    /// `otp` as the current code, the prompts; a custom field by its exact name.
    @Test func theFieldIsReadInTheOneVocabulary() throws {
        let parse = { (args: [String]) throws -> GetRequest in try GetRequest(try #require(try Parser.parse(args, table: VaultCLI.table))) }
        #expect(try parse(["get", "x", "--field", "PASSWORD"]).direct == .secret(field: .password))
        #expect(try parse(["get", "x", "--field", "user"]).plan(for: overview) == .item(overview, release: .nothing))
        #expect(try parse(["get", "x", "--field", "user"]).field == .username)
        #expect(try parse(["get", "x", "--field", "otp"]).plan(for: overview) == .totp(.code, .text))
        #expect(try parse(["get", "x", "--field", "user-prompt", "--json"]).plan(for: overview) == .item(overview, release: .nothing))
        #expect(try parse(["get", "x", "--field", "notes", "--json"]).plan(for: overview) == .item(overview, release: .fields([.notes])))
        #expect(try parse(["get", "x", "--field", "Pin"]).field == .custom("Pin"))
        #expect(throws: VaultError.usage("unknown field 'Pin'", hint: ItemField.hint(for: "Pin", in: overview.item))) {
            _ = try parse(["get", "x", "--field", "Pin"]).plan(for: overview)
        }
        #expect(ItemField.hint(for: "Pin", in: overview.item).hasPrefix("did you mean 'pin'?"))
    }

    @Test func unknownAndMissingFieldsAreRefusedBeforeAnyRelease() {
        #expect(throws: VaultError.self) { _ = try GetRequest(name: "x", field: .custom("nope")).plan(for: overview) }
        let bare = ItemOverview(Item(name: "y"))
        #expect(throws: VaultError.failure("item 'y' has no password")) { _ = try GetRequest(name: "y", field: .password, json: true).plan(for: bare) }
    }

    @Test func theRequestIsCheckedWhenParsed() throws {
        let parse = { (args: [String]) throws -> GetRequest in try GetRequest(try #require(try Parser.parse(args, table: VaultCLI.table))) }
        #expect(try parse(["get", "x", "-f", "pin", "--reveal"]) == GetRequest(name: "x", field: .custom("pin"), reveal: true))
        #expect(try parse(["get", "x", "--clip", "--clear-after", "2m"]) == GetRequest(name: "x", clip: true, clearAfter: 120))
        #expect(throws: VaultError.usage("--clip and --json exclude each other")) { _ = try parse(["get", "x", "--clip", "--json"]) }
        #expect(throws: VaultError.usage("--clear-after is at most 1h, not '2h'")) { _ = try parse(["get", "x", "--clear-after", "2h"]) }
    }
}
