import FoundationEssentials
internal import VaultSystem
import ReaderLink
import VaultAgent
import VaultKit

/// `vault completion SHELL` and `vault manpage`: shell completions for bash, zsh and fish and the
/// vault(1) manual page, all generated from the command table (a command added to the table is
/// completed and documented without more work). Item names come from an open unlock session
/// only (`vault completion --items`): completing never asks for a finger or a passcode.
enum CompletionCommand {
    /// The options of `completion`, declared once: the table lists them and the command reads them.
    enum CompletionOptions {
        static let items = OptionSpec.flag("--items", "print the item names of the vault's open unlock session (nothing without one; never authenticates)")
        static let vaults = OptionSpec.flag("--vaults", "print the names of the vaults")
    }

    static let completion = CommandSpec(
        name: "completion", summary: "print the shell completion script for bash, zsh or fish",
        usage: "vault completion bash|zsh|fish | --items | --vaults",
        options: [
            CompletionOptions.items,
            CompletionOptions.vaults,
        ],
        arguments: 0...1,
        examples: """
        source <(vault completion bash)                 # in ~/.bashrc
        vault completion zsh > ~/.zfunc/_vault           # a folder on $fpath
        vault completion fish > ~/.config/fish/completions/vault.fish
        """,
        run: { inv, ctx in
            if inv.has(CompletionOptions.items) {
                let loc = try location(inv, ctx)
                guard let session = try? SessionAccess.open(loc, environment: ctx.environment),
                      let entries = try? session.allItems() else { return }
                let names = entries.compactMap { e -> String? in if case .item(let i) = e { i.name } else { nil } }
                for n in names.sorted() where !n.contains("\n") { ctx.stdout.write(n + "\n") }
                return
            }
            if inv.has(CompletionOptions.vaults) {
                let loc = try location(inv, ctx)
                let names = (try? FileManager.default.contentsOfDirectory(atPath: loc.root)) ?? []
                for n in names.sorted() where (try? VaultLocation(name: n, environment: ["VAULT_HOME": loc.root]))?.exists == true {
                    ctx.stdout.write(n + "\n")
                }
                return
            }
            guard let shell = inv.arguments.first else {
                throw VaultError.usage("which shell?", hint: "usage: \(inv.command.usage)")
            }
            let model = CompletionModel(VaultCLI.listed)
            switch shell {
            case "bash": ctx.stdout.write(model.bash)
            case "zsh": ctx.stdout.write(model.zsh)
            case "fish": ctx.stdout.write(model.fish)
            default:
                throw VaultError.usage("no completion for '\(shell)'", hint: "shells: bash, zsh, fish")
            }
        })

    static let manpage = CommandSpec(
        name: "manpage", summary: "print the vault(1) manual page (roff, for man)",
        usage: "vault manpage",
        examples: "vault manpage > /usr/local/share/man/man1/vault.1\nvault manpage | man -l -",
        run: { _, ctx in ctx.stdout.write(ManualPage.render(VaultCLI.listed)) })
}

/// What the completion scripts know, taken from the table.
struct CompletionModel {
    let commands: [CommandSpec]

    init(_ commands: [CommandSpec]) { self.commands = commands }

    /// Commands whose argument is an existing item's name.
    static let itemCommands: Set<String> = ["get", "edit", "rm", "mv", "login", "otp"]

    /// Fixed values an option takes, by option name.
    static let optionValues: [String: [String]] = [
        "--field": ItemField.builtIn.map(\.spelling), "--clear": ItemField.clearable.map(\.spelling),
        "--finger": FingerNames.all, "--policy": AuthPolicy.allCases.map(\.rawValue),
        "--format": ["env", "json", "netrc"], "--authority": ["system", "embedded"], "--fingerprint-login": ["on", "off"],
        "--passcode-after-reboot": ["on", "off"],
    ]

    var names: [String] { commands.map(\.name) + CommandIndex.aliases.keys.filter { a in commands.contains { $0.name == CommandIndex.aliases[a] } }.sorted() }
    var globalWords: [String] { globalOptions.map(\.name) }
    var globalsWithValue: [String] { globalOptions.filter { $0.value != nil }.map(\.name) }

    /// Every option of `c` (short flags too), globals excluded.
    func words(_ c: CommandSpec) -> [String] {
        c.options.map(\.name) + c.options.compactMap(CommandIndex.shortSpelling)
    }

    /// The command names a `case` arm matches (the command and its aliases).
    func pattern(_ c: CommandSpec) -> [String] { [c.name] + CommandIndex.aliases(of: c.name) }

    /// Options that take a value, with all their spellings.
    var valueOptions: [String] {
        var all = Set(globalsWithValue)
        for c in commands { for o in c.options where o.value != nil { all.insert(o.name); if let s = CommandIndex.shortSpelling(o) { all.insert(s) } } }
        return all.sorted()
    }

    // MARK: bash

    var bash: String {
        var s = """
        # bash completion for vault(1), generated by 'vault completion bash' from its command table.
        # Load it with: source <(vault completion bash)
        _vault() {
            local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
            local cmd="" i vaultargs=()
            for ((i = 1; i < COMP_CWORD; i++)); do
                case "${COMP_WORDS[i]}" in
                    --vault) vaultargs=(--vault "${COMP_WORDS[i+1]}"); ((i++)) ;;
                    \(globalsWithValue.filter { $0 != "--vault" }.joinedText(separator: "|"))) ((i++)) ;;
                    -*) ;;
                    *) [[ -z "$cmd" ]] && cmd="${COMP_WORDS[i]}" ;;
                esac
            done
            local IFS=$'\\n'
            case "$prev" in
                --vault) COMPREPLY=($(compgen -W "$(vault completion --vaults 2>/dev/null)" -- "$cur")); return ;;

        """
        for (option, values) in CompletionModel.optionValues.sorted(by: { $0.key < $1.key }) {
            let spellings = [option] + (CommandIndex.short(for: option).map { ["-\($0)"] } ?? [])
            s += "        \(spellings.joinedText(separator: "|"))) COMPREPLY=($(compgen -W \"\(values.joinedText(separator: "\n"))\" -- \"$cur\")); return ;;\n"
        }
        let bare = valueOptions.filter { CompletionModel.optionValues[$0] == nil && $0 != "--vault" }
        if !bare.isEmpty { s += "        \(bare.joinedText(separator: "|"))) return ;;\n" }
        s += """
                esac
                if [[ -z "$cmd" ]]; then
                    if [[ "$cur" == -* ]]; then
                        COMPREPLY=($(compgen -W "\(globalWords.joinedText(separator: "\n"))" -- "$cur"))
                    else
                        COMPREPLY=($(compgen -W "\(names.joinedText(separator: "\n"))" -- "$cur"))
                    fi
                    return
                fi
                local opts="" items=0
                case "$cmd" in

        """
        for c in commands {
            let items = CompletionModel.itemCommands.contains(c.name) ? 1 : 0
            s += "            \(pattern(c).joinedText(separator: "|"))) opts=\"\(words(c).joinedText(separator: "\n"))\" items=\(items) ;;\n"
        }
        s += """
                esac
                if [[ "$cur" == -* ]]; then
                    COMPREPLY=($(compgen -W "$opts"$'\\n'"\(globalWords.joinedText(separator: "\n"))" -- "$cur"))
                elif ((items)); then
                    COMPREPLY=($(compgen -W "$(vault completion --items "${vaultargs[@]}" 2>/dev/null)" -- "$cur"))
                fi
            }
            complete -F _vault vault

            """
        return s
    }

    // MARK: zsh

    var zsh: String {
        var s = """
        #compdef vault
        # zsh completion for vault(1), generated by 'vault completion zsh' from its command table.
        # Put it in a folder on $fpath as _vault, or load it with: source <(vault completion zsh)
        _vault() {
            local cur=${words[CURRENT]} prev=${words[CURRENT-1]} cmd= i
            local -a vaultargs
            for (( i = 2; i < CURRENT; i++ )); do
                case ${words[i]} in
                    --vault) vaultargs=(--vault ${words[i+1]}); (( i++ )) ;;
                    \(globalsWithValue.filter { $0 != "--vault" }.joinedText(separator: "|"))) (( i++ )) ;;
                    -*) ;;
                    *) [[ -z $cmd ]] && cmd=${words[i]} ;;
                esac
            done
            case $prev in
                --vault) compadd -- ${(f)"$(vault completion --vaults 2>/dev/null)"}; return ;;

        """
        for (option, values) in CompletionModel.optionValues.sorted(by: { $0.key < $1.key }) {
            let spellings = [option] + (CommandIndex.short(for: option).map { ["-\($0)"] } ?? [])
            s += "        \(spellings.joinedText(separator: "|"))) compadd -- \(values.joinedText(separator: " ")); return ;;\n"
        }
        let bare = valueOptions.filter { CompletionModel.optionValues[$0] == nil && $0 != "--vault" }
        if !bare.isEmpty { s += "        \(bare.joinedText(separator: "|"))) return ;;\n" }
        s += """
                esac
                if [[ -z $cmd ]]; then
                    if [[ $cur == -* ]]; then compadd -- \(globalWords.joinedText(separator: " "))
                    else
                        local -a described=(

        """
        for c in commands {
            s += "                \(zshQuoted(c.name + ":" + Help.brief(c.summary, 60)))\n"
        }
        s += """
                        )
                        _describe -t commands 'vault command' described 2>/dev/null || compadd -- \(names.joinedText(separator: " "))
                    fi
                    return
                fi
                local -a opts
                local items=0
                case $cmd in

        """
        for c in commands {
            let items = CompletionModel.itemCommands.contains(c.name) ? 1 : 0
            s += "            \(pattern(c).joinedText(separator: "|"))) opts=(\(words(c).joinedText(separator: " "))); items=\(items) ;;\n"
        }
        s += """
                esac
                if [[ $cur == -* ]]; then
                    compadd -- $opts \(globalWords.joinedText(separator: " "))
                elif (( items )); then
                    compadd -- ${(f)"$(vault completion --items $vaultargs 2>/dev/null)"}
                fi
            }
            if [[ $funcstack[1] == _vault ]]; then _vault "$@"; else compdef _vault vault; fi

            """
        return s
    }

    private func zshQuoted(_ s: String) -> String { "'" + s.replacingEvery("'", with: "'\\''") + "'" }

    // MARK: fish

    var fish: String {
        func q(_ s: String) -> String { "'" + s.replacingEvery("\\", with: "\\\\").replacingEvery("'", with: "\\'") + "'" }
        var s = """
        # fish completion for vault(1), generated by 'vault completion fish' from its command table.
        # Save it as ~/.config/fish/completions/vault.fish
        function __vault_items
            set -l args
            set -l words (commandline -opc)
            if set -l i (contains -i -- --vault $words)
                set args --vault $words[(math $i + 1)]
            end
            vault completion --items $args 2>/dev/null
        end
        complete -c vault -f

        """
        let all = names.joinedText(separator: " ")
        for c in commands {
            s += "complete -c vault -n \"not __fish_seen_subcommand_from \(all)\" -a \(c.name) -d \(q(CommandIndex.briefs[c.name] ?? Help.brief(c.summary, 60)))\n"
        }
        for (alias, target) in CommandIndex.aliases.sorted(by: { $0.key < $1.key }) where commands.contains(where: { $0.name == target }) {
            s += "complete -c vault -n \"not __fish_seen_subcommand_from \(all)\" -a \(alias) -d \(q("= vault \(target)"))\n"
        }
        func spec(_ o: OptionSpec) -> String {
            var line = " -l " + String(o.name.dropFirst(2))
            if let sh = CommandIndex.shortSpelling(o) { line += " -s \(sh.dropFirst())" }
            if o.value != nil {
                line += " -r"
                if let values = CompletionModel.optionValues[o.name] { line += " -a " + q(values.joinedText(separator: " ")) }
                if o.name == "--vault" { line += " -a '(vault completion --vaults 2>/dev/null)'" }
            }
            return line + " -d " + q(Help.brief(o.help, 60))
        }
        for o in globalOptions { s += "complete -c vault" + spec(o) + "\n" }
        for c in commands {
            let seen = "-n \"__fish_seen_subcommand_from \(pattern(c).joinedText(separator: " "))\""
            for o in c.options { s += "complete -c vault \(seen)" + spec(o) + "\n" }
            if CompletionModel.itemCommands.contains(c.name) { s += "complete -c vault \(seen) -a '(__vault_items)'\n" }
        }
        return s
    }
}

/// The vault(1) manual page in roff (man(7) macros), from the table.
enum ManualPage {
    /// Text escaped for roff: backslashes, hyphens (so options copy as ASCII), leading dots.
    static func esc(_ text: String) -> String {
        var t = text.replacingEvery("\\", with: "\\e").replacingEvery("-", with: "\\-")
        if t.hasPrefix(".") || t.hasPrefix("'") { t = "\\&" + t }
        return t
    }

    static func option(_ o: OptionSpec) -> String {
        let short = CommandIndex.shortSpelling(o).map { "\\fB\\-\($0.dropFirst())\\fR, " } ?? ""
        return ".TP\n" + short + "\\fB" + esc(o.name) + "\\fR" + (o.value.map { " \\fI" + esc($0) + "\\fR" } ?? "") + "\n" + esc(o.help) + "\n"
    }

    static func render(_ table: [CommandSpec]) -> String {
        var s = ".\\\" vault(1), generated by 'vault manpage' from the command table\n"
        s += ".TH VAULT 1 \"\" \"vault \(VaultCLI.version)\" \"User Commands\"\n"
        s += ".SH NAME\nvault \\- a secrets vault unlocked by your fingerprint\n"
        s += ".SH SYNOPSIS\n.B vault\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGUMENTS\\fR] [\\fB\\-\\-\\fR \\fICOMMAND\\fR ...]\n"
        s += ".SH DESCRIPTION\n" + esc("vault keeps logins sealed with libsodium in one SQLite database per vault. A fingerprint match (or the passcode) releases the vault key; scripts fetch logins through an unlock session. Results go to standard output; prompts go to the terminal; messages to standard error as 'vault: error: ...' and 'vault: hint: ...'.") + "\n"
        s += ".SH GLOBAL OPTIONS\nAccepted before or after the command name.\n"
        for o in globalOptions { s += option(o) }
        s += ".SH COMMANDS\n"
        for group in CommandIndex.grouped(table) {
            s += ".SS " + esc(group.title.prefix(1).uppercased() + group.title.dropFirst()) + "\n"
            for c in group.commands {
                s += ".TP\n\\fB" + esc(c.usage) + "\\fR\n" + esc(c.summary) + "\n"
                let aliases = CommandIndex.aliases(of: c.name)
                if !aliases.isEmpty { s += ".br\nAlso: " + aliases.map { "\\fBvault " + esc($0) + "\\fR" }.joinedText(separator: ", ") + ".\n" }
                if !c.options.isEmpty {
                    s += ".RS\n"
                    for o in c.options { s += option(o) }
                    s += ".RE\n"
                }
                if !c.examples.isEmpty {
                    s += ".RS\n.PP\nExamples:\n.nf\n" + c.examples.split(separator: "\n").map { esc(String($0)) }.joinedText(separator: "\n") + "\n.fi\n.RE\n"
                }
            }
        }
        s += ".SH ENVIRONMENT\n"
        for (name, text) in [("VAULT_HOME", "root of the vaults (default $XDG_DATA_HOME/vault, else ~/.local/share/vault)"),
                             ("VAULT_NAME", "the vault when --vault is not given"), ("VAULT_SENSOR", "the reader when --sensor is not given"),
                             ("VAULT_AUTHORITY", "system or embedded, when --authority is not given"),
                             ("XDG_STATE_HOME", "the embedded key authority's state lives in $XDG_STATE_HOME/vault"),
                             ("XDG_RUNTIME_DIR", "the unlock-session agent's socket folder is $XDG_RUNTIME_DIR/vault"),
                             ("NO_COLOR", "when set and not empty, no colour or bold (as --no-color)")] {
            s += ".TP\n.B \(name)\n" + esc(text) + "\n"
        }
        s += ".SH EXIT STATUS\n"
        for code in ExitCode.allCases { s += ".TP\n.B \(code.rawValue)\n" + esc(code.meaning) + "\n" }
        s += ".SH FILES\n.TP\n.I $VAULT_HOME/NAME/vault.db\n" + esc("a vault (folder 0700, file 0600)") + "\n"
        s += ".SH SEE ALSO\n" + esc("vault help COMMAND; the project's docs/cli.md; git-credential(1); pass(1)") + "\n"
        return s
    }
}
