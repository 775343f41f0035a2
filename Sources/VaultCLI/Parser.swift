import FoundationEssentials
internal import VaultSystem
import VaultKit

/// One option of a command: `--name VALUE` or a flag.
struct OptionSpec: Sendable {
    let name: String
    let value: String?
    var help: String
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
enum GlobalOptions {
    static let vault = OptionSpec.value("--vault", "NAME", "the vault to use (else VAULT_NAME, else 'default')")
    static let passcodeFD = OptionSpec.value("--passcode-fd", "N", "read the passcode from file descriptor N (first line)")
    static let noInput = OptionSpec.flag("--no-input", "never prompt; fail with the exit code that says why")
    static let sensor = OptionSpec.value("--sensor", "ID", "the reader: device id or driver (else VAULT_SENSOR)")
    static let authority = OptionSpec.value("--authority", "KIND", "system (vault-authd) or embedded (else VAULT_AUTHORITY)")
    static let noColor = OptionSpec.flag("--no-color", "no colour or bold, also on a terminal (else NO_COLOR)")
    static let help = OptionSpec.flag("--help", "show help for the command (-h)")
    static let version = OptionSpec.flag("--version", "print the version and exit")
}

/// The global options in the order help lists them.
let globalOptions: [OptionSpec] = [
    GlobalOptions.vault, GlobalOptions.passcodeFD, GlobalOptions.noInput, GlobalOptions.sensor,
    GlobalOptions.authority, GlobalOptions.noColor, GlobalOptions.help, GlobalOptions.version,
]

/// The names of the options an invocation's command read, kept so a test can check that a
/// command reads only what it declares (a read of an option it does not declare is a bug: the
/// parser refuses that option, so the read is always false).
final class OptionReads: @unchecked Sendable {
    private let lock = ThreadLock()
    private var names: Set<String> = []

    /// Every option name read so far.
    var all: Set<String> {
        lock.lock()
        defer { lock.unlock() }
        return names
    }

    func record(_ name: String) {
        lock.lock()
        names.insert(name)
        lock.unlock()
    }
}

/// A parsed command line. Options are read through their keys, the `OptionSpec`s the command
/// table declares (`inv[GetOptions.field]`, `inv.has(GetOptions.json)`): there is no look-up by
/// a name typed a second time.
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
    /// The options read, shared by the copies of this invocation a command makes.
    let reads = OptionReads()

    init(command: CommandSpec) {
        self.command = command
    }

    /// The last value of `option`, or nil.
    subscript(_ option: OptionSpec) -> String? { read(option).last }
    /// The last value of `option` when the command declares it, else nil: for code shared by
    /// commands of which only some take the option (the scan timeout of every authority).
    subscript(ifDeclared option: OptionSpec) -> String? {
        declares(option) ? self[option] : nil
    }
    /// Whether `option` was given, when the command declares it (false otherwise).
    func hasIfDeclared(_ option: OptionSpec) -> Bool { declares(option) && has(option) }
    /// Whether the command (or the global list) declares `option`.
    func declares(_ option: OptionSpec) -> Bool {
        (command.options + globalOptions).contains { $0.name == option.name }
    }
    /// Every value of a repeatable `option`, in order.
    func all(_ option: OptionSpec) -> [String] { read(option) }
    /// Whether `option` was given.
    func has(_ option: OptionSpec) -> Bool {
        reads.record(option.name)
        return flags.contains(option.name) || values[option.name] != nil
    }

    /// An integer option, or a usage error naming it.
    func int(_ option: OptionSpec) throws -> Int? {
        guard let v = self[option] else { return nil }
        guard let n = Int(v) else { throw VaultError.usage("\(option.name) expects a number, not '\(v)'") }
        return n
    }

    /// Gives the flag `option` (a command that runs another with it).
    mutating func set(_ option: OptionSpec) { flags.insert(option.name) }
    /// Gives `option` these values, replacing any given.
    mutating func set(_ option: OptionSpec, to values: [String]) { self.values[option.name] = values }

    private func read(_ option: OptionSpec) -> [String] {
        reads.record(option.name)
        return values[option.name] ?? []
    }

    /// The options read that the command does not declare (its own and the global ones).
    var undeclaredReads: Set<String> {
        reads.all.subtracting((command.options + globalOptions).map(\.name))
    }

    /// `--no-input`.
    var noInput: Bool { has(GlobalOptions.noInput) }
}

/// The commands a parse knows: each found by its name, and all of them (for suggestions).
struct CommandTable {
    /// The command of that name, or nil.
    let named: (String) -> CommandSpec?
    /// Every command, in the table's order.
    let all: () -> [CommandSpec]

    init(named: @escaping (String) -> CommandSpec?, all: @escaping () -> [CommandSpec]) {
        self.named = named
        self.all = all
    }

    /// The commands of `table`.
    init(_ table: [CommandSpec]) {
        self.init(named: { name in table.first { $0.name == name } }, all: { table })
    }

    /// The command `verb` names: its own name, else the alias's (CommandIndex.aliases).
    func resolve(_ verb: String) -> CommandSpec? {
        named(verb) ?? CommandIndex.aliases[verb].flatMap(named)
    }
}

/// Parses arguments against the command table.
enum Parser {
    static func parse(_ args: [String], table: [CommandSpec]) throws -> Invocation? {
        try parse(args, commands: CommandTable(table))
    }

    /// ``parse(_:table:)`` with the commands looked up by name: only the spec of the verb given
    /// is made (the whole table only for an unknown verb's suggestion).
    static func parse(_ args: [String], commands: CommandTable) throws -> Invocation? {
        var rest = args[...]
        var pre: [(String, String?)] = []
        // Global options may come before the verb.
        while let first = rest.first, first.hasPrefix("-"), first != "--" {
            rest = rest.dropFirst()
            let (name, inline) = split(first)
            // `vault --version` is the `version` command (one place prints the version).
            if name == "--version", inline == nil, let v = commands.named("version") {
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
        guard let command = commands.resolve(verb) else {
            let near = CommandIndex.suggestion(forVerb: verb, in: commands.all())
            throw VaultError.usage("unknown command '\(verb)'", hint: near.map { "did you mean 'vault \($0)'?" } ?? "see 'vault help'")
        }
        var inv = Invocation(command: command)
        for (n, v) in pre { if let v { inv.values[n, default: []].append(v) } else { inv.flags.insert(n) } }
        let specs = command.options + globalOptions
        while let raw = rest.first {
            rest = rest.dropFirst()
            let arg = specs.first { $0.short != nil && $0.short == raw }?.name ?? raw
            if arg == "--" {
                // After `--` come a command to run (run, login) or, for every other verb,
                // arguments only: `vault get -- -leading` reads an item whose name starts with '-'.
                if command.takesCommand { inv.trailing = Array(rest) } else { inv.arguments += rest }
                break
            }
            if arg == "-h" { inv.set(GlobalOptions.help); continue }
            if arg.hasPrefix("--") || shortFlag(arg, specs) != nil {
                var (name, inline) = split(arg)
                if let long = shortFlag(arg, specs) { name = long; inline = nil }
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
                if command.arguments.upperBound > 0 && !command.takesCommand {
                    let near = suggestion(arg, among: specs.map(\.name)).map { "did you mean '\($0)'? " } ?? ""
                    throw VaultError.usage("unknown option '\(arg)'",
                                           hint: near + "a name that starts with '-' goes after '--': 'vault \(command.name) -- \(arg)'")
                }
                throw unknownOption(arg, known: specs.map(\.name), command: command.name)
            } else {
                inv.arguments.append(arg)
            }
        }
        if inv.flags.contains(GlobalOptions.help.name) { return inv }
        if !command.arguments.contains(inv.arguments.count) {
            let what = inv.arguments.count < command.arguments.lowerBound ? "missing argument" : "too many arguments"
            throw VaultError.usage("\(what) for '\(command.name)'", hint: "usage: \(command.usage)")
        }
        if !inv.trailing.isEmpty && !command.takesCommand {
            throw VaultError.usage("'\(command.name)' takes nothing after --")
        }
        return inv
    }

    /// The long option a short flag (`-f`) stands for, when the command has that option.
    static func shortFlag(_ arg: String, _ specs: [OptionSpec]) -> String? {
        guard arg.count == 2, arg.first == "-", let c = arg.last, let long = CommandIndex.shortFlags[c],
              specs.contains(where: { $0.name == long }) else { return nil }
        return long
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

    /// The candidate meant by a mistyped `word` (`Spelling.nearest`: the one "did you mean" of
    /// commands, options and fields).
    static func suggestion(_ word: String, among candidates: [String]) -> String? {
        Spelling.nearest(to: word, among: candidates)
    }
}
