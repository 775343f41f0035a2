/// How people find a command in the table: the groups help lists it under, the names they type
/// from other tools (aliases, and words that only earn a suggestion), and short flags. Kept apart
/// from the commands themselves so a command added to the table needs nothing here to work: it
/// is listed under "more commands" until it is put in a group.
enum CommandIndex {
    /// Help's groups, in order, each with its commands in order.
    static let groups: [(title: String, commands: [String])] = [
        ("everyday", ["add", "get", "edit", "ls", "search", "rm", "mv", "generate", "otp"]),
        ("fingerprint", ["enroll", "unenroll", "fingers", "doctor"]),
        ("sessions and scripts", ["unlock", "lock", "run", "login", "read", "inject", "log", "agent"]),
        ("keys and machines", ["ssh-key", "secret-service", "remote", "sync", "clone"]),
        ("vault management", ["init", "status", "settings", "passcode", "recover", "rotate", "repair",
                              "import", "export", "completion", "manpage", "version"]),
    ]

    /// The overview's one-line summaries (the table's own summary, cut short, for the others).
    static let briefs: [String: String] = [
        "get": "print a login or a field", "edit": "change a login", "search": "find logins",
        "generate": "print a random password", "otp": "print a TOTP code", "enroll": "enrol a finger",
        "unenroll": "remove a finger", "fingers": "list enrolled fingers", "doctor": "check the readers",
        "unlock": "open an unlock session", "lock": "end the unlock session", "run": "run with secrets in env",
        "login": "print or type a login", "log": "show the audit log", "agent": "run the session agent",
        "init": "create a vault", "status": "show the vault's state", "settings": "show or change settings",
        "recover": "new passcode (recovery key)", "rotate": "replace the vault's keys", "repair": "list or remove bad rows",
        "import": "add items from JSON", "export": "print every item as JSON", "completion": "shell completions",
        "manpage": "print the vault(1) page", "version": "print the version", "help": "show help",
        "read": "print one vault:// field", "ssh-key": "SSH keys a finger releases", "inject": "fill secrets into a file",
        "secret-service": "be the desktop keyring", "remote": "set where sync goes",
        "sync": "sync with the remote", "clone": "this vault on a new machine",
    ]

    /// Other names for commands, as typed by people coming from pass, op, bw or gopass: each runs
    /// the command it names (`vault show NAME` is `vault get NAME`).
    static let aliases: [String: String] = [
        "show": "get", "insert": "add", "delete": "rm", "remove": "rm", "rename": "mv", "move": "mv",
        "list": "ls", "find": "search", "gen": "generate", "pwgen": "generate",
    ]

    /// Words that are close to a command without being it: they get a "did you mean" naming the
    /// command and, when it takes one, the option that does what was meant.
    static let suggestions: [String: String] = [
        "copy": "get NAME --clip", "clip": "get NAME --clip", "cp": "get NAME --clip",
        "new": "add", "create": "add", "set": "edit", "update": "edit", "modify": "edit",
        "cat": "get", "open": "unlock", "close": "lock", "totp": "otp", "code": "otp",
        "passwd": "passcode", "recovery": "recover", "info": "status", "config": "settings",
    ]

    /// Short flags for the common options: each stands for the long option when the command has it.
    static let shortFlags: [Character: String] = [
        "f": "--field", "j": "--json", "u": "--username", "l": "--length", "g": "--generate",
        "c": "--clip", "r": "--reveal", "t": "--tag", "F": "--force", "p": "--passcode",
    ]

    /// How `o` is spelled short (`-f`): its own alias, else the table's short flag.
    static func shortSpelling(_ o: OptionSpec) -> String? {
        o.short ?? short(for: o.name).map { "-\($0)" }
    }

    /// The short flag of `long`, if it has one.
    static func short(for long: String) -> Character? {
        shortFlags.first { $0.value == long }?.key
    }

    /// The command an alias stands for.
    static func resolve(_ verb: String, in table: [CommandSpec]) -> CommandSpec? {
        if let c = table.first(where: { $0.name == verb }) { return c }
        guard let target = aliases[verb] else { return nil }
        return table.first { $0.name == target }
    }

    /// The aliases of `command`.
    static func aliases(of command: String) -> [String] {
        aliases.filter { $0.value == command }.keys.sorted()
    }

    /// The "did you mean" for an unknown verb: a suggestion word, else the nearest name or alias.
    static func suggestion(forVerb verb: String, in table: [CommandSpec]) -> String? {
        if let s = suggestions[verb], table.contains(where: { $0.name == s.split(separator: " ")[0] }) { return s }
        let names = table.map(\.name)
        let known = names + aliases.keys.filter { names.contains(aliases[$0]!) }
        guard let near = Parser.suggestion(verb, among: known) else { return nil }
        return aliases[near] ?? near
    }

    /// Commands of the table in help's order: by group, then those in no group.
    static func grouped(_ table: [CommandSpec]) -> [(title: String, commands: [CommandSpec])] {
        var placed = Set<String>()
        var out: [(title: String, commands: [CommandSpec])] = []
        for g in groups {
            let cs = g.commands.compactMap { n in table.first { $0.name == n } }
            cs.forEach { placed.insert($0.name) }
            if !cs.isEmpty { out.append((g.title, cs)) }
        }
        // `help` is named by the overview's last line ('vault help COMMAND'), not listed.
        let rest = table.filter { !placed.contains($0.name) && $0.name != "help" }
        if !rest.isEmpty { out.append(("more commands", rest)) }
        return out
    }
}
