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
