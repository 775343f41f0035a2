import VaultSystem

/// Colour and bold for a person's terminal: errors red, warnings and hints yellow, headings and
/// progress bold. Off when the stream is not a terminal, when `NO_COLOR` is set (no-color.org),
/// with `--no-color`, and for `TERM=dumb`.
struct Style: Sendable {
    /// Whether escapes are written.
    let isOn: Bool

    /// No escapes.
    static let plain = Style(isOn: false)

    /// The style for the controlling terminal (prompts, progress): a person's terminal, so on
    /// unless `NO_COLOR`, `--no-color` or `TERM=dumb` say otherwise.
    static func terminal(_ ctx: CommandContext) -> Style {
        let noColor = ctx.environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        return Style(isOn: !ctx.noColor && !noColor && ctx.environment["TERM"] != "dumb")
    }

    /// One progress line, `[###--] 3/5 label`: the done part green and the count bold when on.
    /// Every progress bar (rotation, enrolment) is drawn by this.
    func progress(_ done: Int, of total: Int, width: Int? = nil, _ label: String) -> String {
        let w = width ?? total
        let filled = total > 0 ? min(w, done * w / total) : 0
        return "[" + green(String(repeating: "#", count: filled)) + String(repeating: "-", count: max(0, w - filled)) + "] "
            + bold("\(done)/\(total)") + " " + label
    }

    /// The style for text written to `sink` in `ctx`.
    static func of(_ sink: any TextSink, _ ctx: CommandContext) -> Style {
        let noColor = ctx.environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        return Style(isOn: sink.isTerminal && !ctx.noColor && !noColor && ctx.environment["TERM"] != "dumb")
    }

    private func wrap(_ code: String, _ text: String) -> String { isOn ? "\u{1b}[\(code)m" + text + "\u{1b}[0m" : text }

    func bold(_ text: String) -> String { wrap("1", text) }
    func red(_ text: String) -> String { wrap("1;31", text) }
    func yellow(_ text: String) -> String { wrap("33", text) }
    func green(_ text: String) -> String { wrap("32", text) }

    /// A `vault: ...` line with its label coloured (`vault: error:`, `vault: warning:`, `vault: hint:`).
    func line(_ text: String) -> String {
        guard isOn else { return text }
        for (label, paint) in [("vault: error:", red), ("vault: warning:", yellow), ("vault: hint:", yellow)] as [(String, (String) -> String)] {
            if text.hasPrefix(label) { return paint(label) + text.dropFirst(label.count) }
        }
        return text
    }
}

/// A progress bar on a person's terminal (rotation, enrolment), drawn by ``Style/progress``:
/// redrawn in place (`\r`, erase the line) in at most the terminal's width less one column, so
/// it never wraps; with `TERM=dumb` no escape at all, whole lines instead: each step when
/// `everyStep` (an enrolment's few touches), else the last one only (a rotation's items).
final class ProgressLine: @unchecked Sendable {
    private let terminal: any Terminal
    private let style: Style
    private let redraws: Bool
    private let everyStep: Bool
    private let columns: Int

    /// The progress line of `ctx`'s terminal.
    init(_ ctx: CommandContext, everyStep: Bool) {
        terminal = ctx.terminal
        style = Style.terminal(ctx)
        let term = ctx.environment["TERM"] ?? ""
        redraws = term != "dumb" && !term.isEmpty
        self.everyStep = everyStep
        columns = terminalColumns(ctx)
    }

    /// Draws `done` of `total` with `label`; the last step ends the line.
    func draw(_ done: Int, of total: Int, width: Int? = nil, _ label: String) {
        let text = ProgressLine.fitted(done, of: total, width: width, label, columns: columns, style: style)
        if redraws {
            terminal.write("\r\u{1b}[K" + text + (done == total ? "\n" : ""))
        } else if everyStep || done == total {
            terminal.write(text + "\n")
        }
    }

    /// The bar and its label in `columns - 1` characters: the bar shrinks (to 5), then the label
    /// is cut (ending in `~`), then the bar goes.
    static func fitted(_ done: Int, of total: Int, width: Int?, _ label: String, columns: Int, style: Style) -> String {
        let room = max(10, columns - 1)
        let count = "\(done)/\(total)"
        var w = width ?? total
        let fixed = 3 + count.count + 1
        if w + fixed + label.count > room { w = max(5, room - fixed - label.count) }
        var text = label
        if w + fixed + text.count > room {
            let keep = room - fixed - w
            if keep >= 4 {
                text = String(text.prefix(keep - 1)) + "~"
            } else {
                let bare = count + " " + label
                return bare.count > room ? String(bare.prefix(room - 1)) + "~" : bare
            }
        }
        return style.progress(done, of: total, width: w, text)
    }
}

/// The width of `ctx`'s terminal: its window size, else `COLUMNS`, else 80.
func terminalColumns(_ ctx: CommandContext, fd: Int32? = nil) -> Int {
    if let size = try? WindowSize.get(fd ?? ctx.terminal.inputFD), size.columns > 0 { return Int(size.columns) }
    if let c = ctx.environment["COLUMNS"].flatMap(Int.init), c > 0 { return c }
    return 80
}
