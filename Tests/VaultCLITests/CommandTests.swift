import Foundation
import Testing
@testable import VaultCLI
import VaultKit

/// No keyboard: what a script or CI sees.
final class NoTerminal: Terminal {
    var isAvailable: Bool { false }
    var inputFD: Int32 { -1 }
    func readSecret(prompt: String) throws -> SecretBytes? { nil }
    func readLine(prompt: String) -> String? { nil }
    func write(_ text: String) {}
}

/// Runs commands in-process against a temporary VAULT_HOME, with captured streams.
final class InProcess {
    let home = NSTemporaryDirectory() + "vault-cli-" + UUID().uuidString.prefix(8)
    var env: [String: String] {
        ["VAULT_HOME": home + "/v", "XDG_STATE_HOME": home + "/s", "XDG_RUNTIME_DIR": home + "/r", "HOME": home]
    }
    deinit { try? FileManager.default.removeItem(atPath: home) }

    /// A pipe whose read end holds `text`; the caller passes the descriptor number on the command line.
    func fd(_ text: String) -> Int32 {
        var p: [Int32] = [0, 0]
        precondition(pipe(&p) == 0)
        _ = text.withCString { write(p[1], $0, strlen($0)) }
        close(p[1])
        return p[0]
    }

    func run(_ args: [String], stdin: String = "") -> (status: Int32, out: String, err: String) {
        let out = BufferSink(), err = BufferSink()
        let input = fd(stdin)
        defer { close(input) }
        let ctx = CommandContext(stdout: out, stderr: err, environment: env, terminal: NoTerminal(), stdinFD: input)
        let status = VaultCLI.run(args, context: ctx)
        return (status, out.text, err.text)
    }
}

@Suite struct ParserTests {
    let table = VaultCLI.table

    @Test func globalOptionsGoBeforeOrAfterTheCommand() throws {
        let a = try #require(try Parser.parse(["--vault", "w", "get", "x", "--field=password"], table: table))
        let b = try #require(try Parser.parse(["get", "x", "--vault=w", "--field", "password"], table: table))
        #expect(a.command.name == "get" && b.command.name == "get")
        #expect(a[GlobalOptions.vault] == "w" && b[GlobalOptions.vault] == "w")
        #expect(a[ItemCommands.GetOptions.field] == "password" && b[ItemCommands.GetOptions.field] == "password")
        #expect(a.arguments == ["x"])
    }

    @Test func unknownVerbsAndOptionsGetASuggestion() {
        #expect(throws: VaultError.usage("unknown command 'gte'", hint: "did you mean 'vault get'?")) {
            _ = try Parser.parse(["gte"], table: table)
        }
        do {
            _ = try Parser.parse(["get", "x", "--feild", "password"], table: table)
            Issue.record("accepted an unknown option")
        } catch let e as VaultError {
            #expect(e.exitCode == 2)
            #expect(e.hint?.contains("--field") == true)
        } catch { Issue.record("\(error)") }
    }

    @Test func argumentCountsValuesAndTrailingCommandsAreChecked() {
        #expect(throws: VaultError.self) { _ = try Parser.parse(["get"], table: table) }
        #expect(throws: VaultError.self) { _ = try Parser.parse(["get", "a", "b"], table: table) }
        #expect(throws: VaultError.self) { _ = try Parser.parse(["get", "a", "--field"], table: table) }
        #expect(throws: VaultError.self) { _ = try Parser.parse(["get", "a", "--field", "x", "--field", "y"], table: table) }
        #expect(throws: VaultError.self) { _ = try Parser.parse(["get", "a", "--", "ls"], table: table) }
        #expect(throws: VaultError.self) { _ = try Parser.parse(["generate", "--no-symbols=1"], table: table) }
        let run = try? Parser.parse(["run", "--env", "A=x", "--env", "B=y", "--", "env", "-0"], table: table)
        #expect(run?.all(RunCommand.RunOptions.env) == ["A=x", "B=y"])
        #expect(run?.trailing == ["env", "-0"])
    }

    @Test func durationsTakeUnits() {
        #expect(Duration.seconds("90") == 90)
        #expect(Duration.seconds("90s") == 90)
        #expect(Duration.seconds("5m") == 300)
        #expect(Duration.seconds("12h") == 43200)
        #expect(Duration.seconds("soon") == nil)
    }

    @Test func everyCommandHasGeneratedHelpWithUsageAndExamples() {
        for c in table {
            let h = Help.command(c)
            #expect(h.hasPrefix("usage: vault"), "\(c.name)")
            if c.name != "help" && c.name != "version" { #expect(h.contains("examples:"), "\(c.name) has no examples") }
        }
        #expect(Help.exitCodeText.contains("17   fingerprint locked out"))
    }
}

@Suite struct InProcessCommandTests {
    let cli = InProcess()
    let pc = "in process passcode"

    @Test func aVaultLivesAndDiesInProcessWithCapturedStreams() {
        var r = cli.run(["init", "--kdf-memory", "8", "--kdf-ops", "1", "--no-fingerprint", "--passcode-fd", "\(cli.fd(pc + "\n"))"])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.split(separator: "-").count == 14, "only the recovery key on stdout")
        #expect(r.err.contains("recovery key"))
        r = cli.run(["add", "site", "--username", "me", "--password-stdin", "--passcode-fd", "\(cli.fd(pc + "\n"))"], stdin: "s3cr3t\n")
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.isEmpty)
        r = cli.run(["get", "site", "--field", "password", "--passcode-fd", "\(cli.fd(pc + "\n"))"])
        #expect(r.out == "s3cr3t\n")
        r = cli.run(["get", "site", "--passcode-fd", "\(cli.fd(pc + "\n"))"])
        #expect(!r.out.contains("s3cr3t"))
        r = cli.run(["get", "site", "--field", "password", "--passcode-fd", "\(cli.fd("wrong\n"))"])
        #expect(r.status == 10)
        #expect(r.out.isEmpty)
        #expect(r.err.hasPrefix("vault: error: "))
        r = cli.run(["rm", "site"])
        #expect(r.status == 2, "no terminal and no --force")
        #expect(r.err.contains("vault: hint: pass --force"))
        // A descriptor at the open-files limit can never be open in this process (a fixed number
        // such as 99 may be, by another test running beside this one in the same process).
        var limit = rlimit()
        _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        let unopenable: UInt64 = min(UInt64(limit.rlim_cur), UInt64(Int32.max))
        r = cli.run(["get", "site", "--field", "password", "--passcode-fd", String(unopenable)])
        #expect(r.status == 2, "a descriptor that is not open is a usage error: \(r.err)")
    }

    @Test func noArgumentsIsAUsageErrorAndHelpIsSuccess() {
        var r = cli.run([])
        #expect(r.status == 2)
        #expect(r.out.isEmpty && r.err.contains("usage: vault"))
        r = cli.run(["--help"])
        #expect(r.status == 0 && r.out.contains("everyday:"))
        r = cli.run(["help", "nope"])
        #expect(r.status == 2)
    }
}

/// The exit codes have one source (`ExitCode`): help, docs/cli.md and every error agree with it.
@Suite struct ExitCodeTableTests {
    @Test func helpListsEveryExitCode() {
        let r = InProcess().run(["help", "exit-codes"])
        #expect(r.status == 0)
        for code in ExitCode.allCases {
            #expect(r.out.contains("  \(code.rawValue)") && r.out.contains(code.meaning), "\(code)")
        }
    }

    @Test func theDocumentedTableIsTheSameTable() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        let section = try #require(text.components(separatedBy: "## Exit codes").last)
        var rows: [(Int32, String)] = []
        for line in section.split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            if let code = Int32(cells[0]) { rows.append((code, cells[1])) }
        }
        #expect(rows.map(\.0) == ExitCode.allCases.map(\.rawValue))
        #expect(rows.map(\.1) == ExitCode.allCases.map(\.meaning))
    }

    @Test func everyErrorMapsToACodeOfTheTable() {
        let samples: [VaultError] = [
            .failure("x"), .usage("x"), .itemNotFound("x"), .vaultNotFound(name: "a", path: "/p"), .alreadyExists("x"),
            .corrupt("x"), .newerFormat(found: 9, supported: 1), .io(path: "/p", "x"), .insecurePermissions(path: "/p", isDirectory: true),
            .authenticationFailed("x"), .userCancel, .passcodeNeeded("x"), .systemCancel("x"), .passcodeNotSet,
            .biometryNotAvailable("x"), .biometryNotEnrolled, .biometryLockout, .appCancel("x"), .sessionInvalid("x"),
            .keysRotated, .domainStateChanged, .authorityDamaged("x"), .settingsDamaged(vault: "v"),
            .commandNotExecutable("/x"), .commandNotFound("x"),
        ]
        let codes = Set(ExitCode.allCases.map(\.rawValue))
        for e in samples {
            #expect(e.kind != nil && codes.contains(e.exitCode), "\(e)")
            #expect(!e.message.isEmpty && e.message == e.message.trimmingCharacters(in: .whitespaces))
        }
        #expect(Set(samples.compactMap(\.kind)) == Set(ExitCode.allCases.filter { $0 != .success }))
        #expect(VaultError.childExited(status: 42).exitCode == 42 && !VaultError.childExited(status: 42).isPrinted)
    }

    @Test func aCryptoErrorIsAMessageNotADump() {
        let r = VaultCLI.vaultError(CryptoError.outOfMemory)
        #expect(r.message == "out of locked memory for keys")
        #expect(!r.message.contains("CryptoError"))
    }
}

/// A terminal's screen, as a sink.
final class ScreenSink: TextSink {
    private(set) var text = ""
    var isTerminal: Bool { true }
    func write(_ text: String) { self.text += text }
}

@Suite struct TerminalEscapeTests {
    @Test func controlCharactersOfAnItemAreEscapedOnATerminalOnly() throws {
        let p = InProcess()
        let pc = p.fd("pass word 1\n")
        #expect(p.run(["init", "--no-fingerprint", "--kdf-memory", "8", "--kdf-ops", "1", "--passcode-fd", "\(pc)"]).status == 0)
        let evil = "{\"name\":\"x\",\"username\":\"a\\u001b]52;c;aGk=\\u0007b\",\"notes\":\"line1\\nline2\\u009b31m\",\"password\":\"pw\"}"
        #expect(p.run(["import", "--passcode-fd", "\(p.fd("pass word 1\n"))"], stdin: "[" + evil + "]").status == 0)
        let screen = ScreenSink(), err = BufferSink()
        let ctx = CommandContext(stdout: screen, stderr: err, environment: p.env, terminal: NoTerminal())
        #expect(VaultCLI.run(["get", "x", "--reveal", "--passcode-fd", "\(p.fd("pass word 1\n"))"], context: ctx) == 0, "\(err.text)")
        #expect(!screen.text.unicodeScalars.contains { $0.value == 0x1B || $0.value == 0x07 || $0.value == 0x9B })
        #expect(screen.text.contains("username: a\\x1b]52;c;aGk=\\x07b"))
        #expect(screen.text.contains("notes: line1\nline2\\x9b31m"), "newlines stay")
        // A pipe gets the bytes as they are (a script asked for exactly the value).
        let r = p.run(["get", "x", "--field", "username", "--passcode-fd", "\(p.fd("pass word 1\n"))"])
        #expect(r.out == "a\u{1b}]52;c;aGk=\u{07}b\n")
    }
}

@Suite struct PromiseTests {
    @Test func aClipboardClearLongerThanTheClearerWaitsIsRefused() {
        let p = InProcess()
        #expect(p.run(["init", "--no-fingerprint", "--kdf-memory", "8", "--kdf-ops", "1", "--passcode-fd", "\(p.fd("pass word 1\n"))"]).status == 0)
        let r = p.run(["get", "x", "--clip", "--clear-after", "2h", "--passcode-fd", "\(p.fd("pass word 1\n"))"])
        #expect(r.status == 2)
        #expect(r.err.contains("at most 1h"))
    }
}

@Suite struct AuthorityChoiceTests {
    @Test func anUnknownAuthorityIsAUsageErrorAndAnAbsentDaemonLeavesThePasscode() {
        let p = InProcess()
        #expect(p.run(["init", "--no-fingerprint", "--kdf-memory", "8", "--kdf-ops", "1", "--passcode-fd", "\(p.fd("pass word 1\n"))"]).status == 0)
        var r = p.run(["status", "--authority", "tpm"])
        #expect(r.status == 2 && r.err.contains("unknown key authority 'tpm'"))
        // The system authority asked for, and no daemon: status says so, the passcode opens.
        r = p.run(["status", "--json", "--authority", "system"])
        #expect(r.status == 0, "\(r.err)")
        #expect(r.out.contains("\"kind\":\"system\""))
        #expect(r.out.contains("vault-authd"), "says the daemon does not answer: \(r.out)")
        r = p.run(["add", "x", "--password-stdin", "--authority", "system", "--passcode-fd", "\(p.fd("pass word 1\n"))"], stdin: "pw\n")
        #expect(r.status == 0, "\(r.err)")
        // Without the passcode, the fingerprint path says why it is not available.
        r = p.run(["get", "x", "--no-input", "--authority", "system"])
        // The vault has no fingerprint binding: locked, the passcode is needed (12).
        #expect(r.status == 12, "\(r.err)")
    }
}

@Suite struct HintTests {
    @Test func hintsNameTheVaultWhenItIsNotTheDefault() {
        let p = InProcess()
        #expect(p.run(["init", "--vault", "work", "--no-fingerprint", "--kdf-memory", "8", "--kdf-ops", "1", "--passcode-fd", "\(p.fd("pass word 1\n"))"]).status == 0)
        let r = p.run(["get", "nope", "--vault", "work", "--passcode-fd", "\(p.fd("pass word 1\n"))"])
        #expect(r.status == 3)
        #expect(r.err.contains("vault: hint: list the items with 'vault ls --vault work'"), "\(r.err)")
        #expect(VaultError.domainStateChanged.hint(vault: "work")?.contains("vault unlock --passcode --rotate --vault work") == true)
        #expect(VaultError.domainStateChanged.hint(vault: "default")?.contains("--vault") == false)
    }
}

/// `VaultCLI.command(named:)`, the parser's look-up, finds every command of the table under its
/// name (and only names of the table), and a parse through it reads as one through the table.
@Suite struct CommandLookupTests {
    @Test func everyCommandOfTheTableIsFoundByItsName() {
        let names = VaultCLI.table.map(\.name)
        #expect(Set(names).count == names.count, "a name twice in the table")
        for name in names {
            #expect(VaultCLI.command(named: name)?.name == name, "\(name)")
        }
        for other in ["", "nope", "show", "list", "GET", "get ", "copy"] {
            #expect(VaultCLI.command(named: other) == nil, "\(other)")
        }
    }

    @Test func aParseThroughTheLookUpIsAParseThroughTheTable() throws {
        let lookup = CommandTable(named: VaultCLI.command(named:), all: { VaultCLI.table })
        for args in [["get", "x", "--field", "password"], ["show", "x"], ["--version"], ["--vault", "w", "ls", "--json"], ["help", "get"]] {
            let a = try Parser.parse(args, commands: lookup), b = try Parser.parse(args, table: VaultCLI.table)
            #expect(a?.command.name == b?.command.name && a?.arguments == b?.arguments && a?.values == b?.values && a?.flags == b?.flags, "\(args)")
        }
        for bad in [["gte"], ["get", "x", "--feild", "password"]] {
            var first = "", second = ""
            do { _ = try Parser.parse(bad, commands: lookup) } catch { first = "\(error)" }
            do { _ = try Parser.parse(bad, table: VaultCLI.table) } catch { second = "\(error)" }
            #expect(!first.isEmpty && first == second, "\(bad)")
        }
    }
}
