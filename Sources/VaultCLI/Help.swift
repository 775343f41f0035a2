internal import VaultSystem
import VaultKit

/// Generated help text: the overview (every listed command by group, in two columns, and the
/// global options once: it fits an 80x40 terminal), one command's help, the exit codes. All of it
/// comes from the command table; `style` adds bold headings on a terminal. On a terminal the text
/// wraps to its width (`columns`; lines of at most `columns - 1`, below 80 the overview takes one
/// column and, below 60, an option's help goes under its name); examples are never broken (a
/// command cut in two could not be copied).
enum Help {
    /// The overview `vault help` prints.
    static func overview(_ table: [CommandSpec], style: Style = .plain, columns: Int = 80) -> String {
        var s = wrap("vault: a secrets vault unlocked by your fingerprint", width: columns - 1).joinedText(separator: "\n") + "\n"
        s += wrap("usage: vault [GLOBAL OPTIONS] COMMAND [OPTIONS] [ARGUMENTS]", width: columns - 1).joinedText(separator: "\n       ") + "\n"
        for group in CommandIndex.grouped(table) {
            s += "\n" + style.bold(group.title + ":") + "\n"
            // A name longer than the column (secret-service) takes room from its brief.
            let cells = group.commands.map { c in
                let label = c.name.count <= 10 ? c.name.padded(to: 11) : c.name + " "
                return "  " + label + String((CommandIndex.briefs[c.name] ?? brief(c.summary, 26)).prefix(39 - label.count))
            }
            var i = 0
            while i < cells.count {
                let left = cells[i]
                if i + 1 < cells.count && columns >= 80 {
                    s += left.padded(to: 41) + cells[i + 1] + "\n"
                    i += 2
                } else {
                    s += left + "\n"
                    i += 1
                }
            }
        }
        // The three every script needs, with their help; the others by name (40 lines in all).
        s += "\n" + style.bold("global options:") + "\n" + options(Array(globalOptions.prefix(3)), width: 22, columns: columns)
        s += wrap("  also: " + globalOptions.dropFirst(3).map(label).joinedText(separator: ", "), width: columns - 1).joinedText(separator: "\n    ") + "\n"
        s += "\n" + wrap("more: 'vault help COMMAND' (or 'vault COMMAND -h'), 'vault help exit-codes'", width: columns - 1).joinedText(separator: "\n") + "\n"
        return s
    }

    /// The start of `summary` up to its first ':', ';', ',' or '(' and at most `width` characters:
    /// the overview's column.
    static func brief(_ summary: String, _ width: Int) -> String {
        var text = String(summary.prefix { !":;,(".contains($0) }).trimmed(.whitespaces)
        if text.count > width { text = String(text.prefix(width - 1)).trimmed(.whitespaces) + "~" }
        return text
    }

    /// `vault help COMMAND`: usage, summary, options (with their short flags), aliases, examples.
    static func command(_ c: CommandSpec, style: Style = .plain, columns: Int = 80) -> String {
        let columns = max(30, columns)
        var s = style.bold("usage:") + " " + wrap(c.usage, width: columns - 8).joinedText(separator: "\n       ") + "\n\n"
            + wrap(c.summary, width: columns - 1).joinedText(separator: "\n") + "\n"
        let aliases = CommandIndex.aliases(of: c.name)
        if !aliases.isEmpty { s += wrap("also: " + aliases.map { "vault \($0)" }.joinedText(separator: ", "), width: columns - 1).joinedText(separator: "\n  ") + "\n" }
        if !c.options.isEmpty { s += "\n" + style.bold("options:") + "\n" + options(c.options, columns: columns) }
        s += "\n" + wrap("global options: " + globalOptions.map(\.name).joinedText(separator: " ") + " (see 'vault help')", width: columns - 3)
            .joinedText(separator: "\n  ") + "\n"
        if !c.examples.isEmpty {
            s += "\n" + style.bold("examples:") + "\n" + c.examples.split(separator: "\n").map { "  " + $0 }.joinedText(separator: "\n") + "\n"
        }
        return s
    }

    /// An option's label: `-f, --field F`.
    static func label(_ o: OptionSpec) -> String {
        let short = CommandIndex.shortSpelling(o).map { $0 + ", " } ?? ""
        return short + o.name + (o.value.map { " " + $0 } ?? "")
    }

    /// Options, one a line, help aligned.
    static func options(_ opts: [OptionSpec], width fixed: Int? = nil, columns: Int = 80) -> String {
        let labels = opts.map(label)
        let width = columns < 60 ? 4 : fixed ?? min(26, (labels.map(\.count).max() ?? 10) + 2)
        let indent = String(repeating: " ", count: width + 2)
        return zip(labels, opts).map { l, o in
            let pad = l.count + 2 > width ? "\n" + indent : String(repeating: " ", count: width - l.count)
            return "  " + l + pad + wrap(o.help, width: columns - 1 - indent.count).joinedText(separator: "\n" + indent) + "\n"
        }.joined()
    }

    /// The width help is wrapped to on `sink`: its terminal's, else 80.
    static func columns(_ sink: any TextSink, _ ctx: CommandContext) -> Int {
        guard sink.isTerminal, let fd = (sink as? FileSink)?.fd else { return 80 }
        // Wider than 100, lines get hard to follow: the text stops there.
        return min(100, terminalColumns(ctx, fd: fd))
    }

    /// `text` in lines of at most `width` characters, broken at spaces.
    static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = [], line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width { lines.append(line); line = "" }
            line += (line.isEmpty ? "" : " ") + word
        }
        return lines + [line]
    }

    static var exitCodeText: String {
        "exit codes:\n" + ExitCode.allCases.map { "  " + (String($0.rawValue) as String).padded(to: 5) + $0.meaning + "\n" }.joined()
    }
}

extension String {
    /// The text cut or filled with spaces to `width` characters (`NSString.padding(toLength:)`).
    fileprivate func padded(to width: Int) -> String {
        let n = count
        return n >= width ? String(prefix(width)) : self + String(repeating: " ", count: width - n)
    }
}
