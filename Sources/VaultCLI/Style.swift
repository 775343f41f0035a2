/// Colour and bold for a person's terminal: errors red, warnings and hints yellow, headings and
/// progress bold. Off when the stream is not a terminal, when `NO_COLOR` is set (no-color.org),
/// with `--no-color`, and for `TERM=dumb`.
struct Style: Sendable {
    /// Whether escapes are written.
    let isOn: Bool

    /// No escapes.
    static let plain = Style(isOn: false)

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
