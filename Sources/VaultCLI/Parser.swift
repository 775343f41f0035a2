import VaultKit

/// One option of a command: `--name VALUE` or a flag.
struct OptionSpec: Sendable {
    let name: String
    let value: String?
    let help: String
    var repeatable = false
    /// A one-letter alias (`-i`), for options other tools spell that way.
    var short: String? = nil

    /// This option with the alias `short`.
    func alias(_ short: String) -> OptionSpec {
        var o = self
        o.short = short
        return o
    }

    static func flag(_ name: String, _ help: String) -> OptionSpec { OptionSpec(name: name, value: nil, help: help) }
    static func value(_ name: String, _ value: String, _ help: String, repeatable: Bool = false) -> OptionSpec {
        OptionSpec(name: name, value: value, help: help, repeatable: repeatable)
    }
}

/// One verb of the command table. Help and `help COMMAND` are generated from it.
struct CommandSpec: Sendable {
    let name: String
    let summary: String
    let usage: String
    var options: [OptionSpec] = []
    var arguments: ClosedRange<Int> = 0...0
    var takesCommand = false
    var examples: String = ""
    let run: @Sendable (Invocation, CommandContext) throws -> Void
}

/// The options every command accepts, before or after its name.
let globalOptions: [OptionSpec] = [
    .value("--vault", "NAME", "the vault to use (else VAULT_NAME, else 'default')"),
    .value("--passcode-fd", "N", "read the passcode from file descriptor N (first line)"),
    .flag("--no-input", "never prompt; fail with the exit code that says what was missing"),
    .value("--sensor", "ID", "the fingerprint reader to use (device id or driver; else VAULT_SENSOR)"),
    .value("--authority", "KIND", "the key authority: system (vault-authd) or embedded (else VAULT_AUTHORITY, else system when it answers)"),
    .flag("--help", "show help for the command"),
]

/// A parsed command line.
struct Invocation {
    let command: CommandSpec
    var arguments: [String] = []
    var values: [String: [String]] = [:]
    var flags: Set<String> = []
    /// Everything after `--`.
    var trailing: [String] = []
    /// When set, the `--passcode-fd` passcode is read once and lent to every vault the command
    /// opens (secret references to several vaults).
    var passcodeOnce: PasscodeOnce?

    func value(_ name: String) -> String? { values[name]?.last }
    func all(_ name: String) -> [String] { values[name] ?? [] }
    func has(_ name: String) -> Bool { flags.contains(name) || values[name] != nil }

    /// An integer option, or a usage error naming it.
    func int(_ name: String) throws -> Int? {
        guard let v = value(name) else { return nil }
        guard let n = Int(v) else { throw VaultError.usage("\(name) expects a number, not '\(v)'") }
        return n
    }

    /// `--no-input`.
    var noInput: Bool { flags.contains("--no-input") }
}

/// Parses arguments against the command table.
enum Parser {
    static func parse(_ args: [String], table: [CommandSpec]) throws -> Invocation? {
        var rest = args[...]
        var pre: [(String, String?)] = []
        // Global options may come before the verb.
        while let first = rest.first, first.hasPrefix("-"), first != "--" {
            rest = rest.dropFirst()
            let (name, inline) = split(first)
            // `vault --version` is the `version` command (one place prints the version).
            if name == "--version", inline == nil, let v = table.first(where: { $0.name == "version" }) {
                return Invocation(command: v)
            }
            guard let spec = globalOptions.first(where: { $0.name == name }) else {
                if name == "-h" { return nil }
                throw unknownOption(name, known: globalOptions.map(\.name), command: nil)
            }
            if spec.name == "--help" { return nil }
            if spec.value != nil {
                guard let v = inline ?? rest.first else { throw VaultError.usage("\(name) needs a value (\(spec.value!))") }
                if inline == nil { rest = rest.dropFirst() }
                pre.append((name, v))
            } else {
                pre.append((name, nil))
            }
        }
        guard let verb = rest.first else { return nil }
        rest = rest.dropFirst()
        guard let command = table.first(where: { $0.name == verb }) else {
            let near = suggestion(verb, among: table.map(\.name))
            throw VaultError.usage("unknown command '\(verb)'", hint: near.map { "did you mean 'vault \($0)'?" } ?? "see 'vault help'")
        }
        var inv = Invocation(command: command)
        for (n, v) in pre { if let v { inv.values[n, default: []].append(v) } else { inv.flags.insert(n) } }
        let specs = command.options + globalOptions
        while let raw = rest.first {
            rest = rest.dropFirst()
            let arg = specs.first { $0.short != nil && $0.short == raw }?.name ?? raw
            if arg == "--" { inv.trailing = Array(rest); break }
            if arg == "-h" { inv.flags.insert("--help"); continue }
            if arg.hasPrefix("--") {
                let (name, inline) = split(arg)
                guard let spec = specs.first(where: { $0.name == name }) else {
                    throw unknownOption(name, known: specs.map(\.name), command: command.name)
                }
                if spec.value != nil {
                    guard let v = inline ?? rest.first else { throw VaultError.usage("\(name) needs a value (\(spec.value!))") }
                    if inline == nil { rest = rest.dropFirst() }
                    if !spec.repeatable, inv.values[name] != nil, !globalOptions.contains(where: { $0.name == name }) {
                        throw VaultError.usage("\(name) given twice")
                    }
                    inv.values[name, default: []].append(v)
                } else {
                    if inline != nil { throw VaultError.usage("\(name) takes no value") }
                    inv.flags.insert(name)
                }
            } else if arg.hasPrefix("-") && arg.count > 1 {
                throw unknownOption(arg, known: specs.map(\.name), command: command.name)
            } else {
                inv.arguments.append(arg)
            }
        }
        if inv.flags.contains("--help") { return inv }
        if !command.arguments.contains(inv.arguments.count) {
            let what = inv.arguments.count < command.arguments.lowerBound ? "missing argument" : "too many arguments"
            throw VaultError.usage("\(what) for '\(command.name)'", hint: "usage: \(command.usage)")
        }
        if !inv.trailing.isEmpty && !command.takesCommand {
            throw VaultError.usage("'\(command.name)' takes nothing after --")
        }
        return inv
    }

    static func split(_ arg: String) -> (String, String?) {
        if let eq = arg.firstIndex(of: "=") { return (String(arg[..<eq]), String(arg[arg.index(after: eq)...])) }
        return (arg, nil)
    }

    static func unknownOption(_ name: String, known: [String], command: String?) -> VaultError {
        let near = suggestion(name, among: known)
        let help = command.map { "see 'vault help \($0)'" } ?? "see 'vault help'"
        return .usage("unknown option '\(name)'", hint: near.map { "did you mean '\($0)'? \(help)" } ?? help)
    }

    /// The closest candidate within a small edit distance, or one that starts with the input.
    static func suggestion(_ word: String, among candidates: [String]) -> String? {
        let scored = candidates.map { ($0, distance(word, $0)) }.sorted { $0.1 < $1.1 }
        if let best = scored.first, best.1 <= max(2, word.count / 3) { return best.0 }
        return candidates.first { $0.hasPrefix(word) && word.count >= 2 }
    }

    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var prev = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var cur = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            prev = cur
        }
        return a.isEmpty ? b.count : prev[b.count]
    }
}

/// Generated help text.
enum Help {
    static func overview(_ table: [CommandSpec]) -> String {
        var s = "vault: a secrets vault unlocked by your fingerprint\n\nusage: vault [--vault NAME] COMMAND [OPTIONS]\n\ncommands:\n"
        let width = (table.map(\.name.count).max() ?? 8) + 2
        for c in table { s += "  " + c.name.padding(toLength: width, withPad: " ", startingAt: 0) + c.summary + "\n" }
        s += "\nglobal options:\n" + options(globalOptions)
        s += "\nenvironment: VAULT_HOME (root folder), VAULT_NAME (vault), VAULT_SENSOR (reader)\n"
        s += "see 'vault help COMMAND' for a command, 'vault help exit-codes' for exit codes\n"
        return s
    }

    static func command(_ c: CommandSpec) -> String {
        var s = "usage: \(c.usage)\n\n\(c.summary)\n"
        if !c.options.isEmpty { s += "\noptions:\n" + options(c.options) }
        s += "\nglobal options:\n" + options(globalOptions)
        if !c.examples.isEmpty { s += "\nexamples:\n" + c.examples.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n") + "\n" }
        return s
    }

    static func options(_ opts: [OptionSpec]) -> String {
        let labels = opts.map { o in (o.short.map { $0 + ", " } ?? "") + o.name + (o.value.map { " " + $0 } ?? "") }
        let width = (labels.map(\.count).max() ?? 10) + 2
        return zip(labels, opts).map { "  " + $0.0.padding(toLength: width, withPad: " ", startingAt: 0) + $0.1.help + "\n" }.joined()
    }

    static var exitCodeText: String {
        "exit codes:\n" + ExitCode.allCases.map { "  " + String($0.rawValue).padding(toLength: 5, withPad: " ", startingAt: 0) + $0.meaning + "\n" }.joined()
    }
}
