internal import VaultSystem
/// An environment file as `vault run --env-file` reads it (the dotenv syntax of docker compose,
/// python-dotenv and `op run`): `KEY=VALUE` lines, an optional `export ` in front, blank lines
/// and `#` comments, values unquoted (trimmed; ` #` starts a comment), in single quotes (taken
/// literally) or in double quotes (`\n`, `\t`, `\"`, `\\` and `\$` escapes; may span lines).
package enum DotEnv {
    /// The variables, in order (a later line for the same key replaces an earlier one).
    /// - Throws: `.usage` naming the line: no `=`, a key that is not a variable name, an
    ///   unterminated quote, text after a closing quote.
    package static func parse(_ text: String) throws -> [(key: String, value: String)] {
        var result: [(key: String, value: String)] = []
        let chars = Array(text.replacingEvery("\r\n", with: "\n"))
        var i = 0, line = 1
        func fail(_ what: String) -> VaultError { .usage("line \(line): \(what)") }
        func skipBlanks() { while i < chars.count, chars[i] == " " || chars[i] == "\t" { i += 1 } }
        while i < chars.count {
            skipBlanks()
            if i >= chars.count { break }
            if chars[i] == "\n" { i += 1; line += 1; continue }
            if chars[i] == "#" {
                while i < chars.count, chars[i] != "\n" { i += 1 }
                continue
            }
            var key = ""
            while i < chars.count, chars[i] != "=", chars[i] != "\n" { key.append(chars[i]); i += 1 }
            key = key.trimmingBlanks()
            if key.hasPrefix("export ") || key.hasPrefix("export\t") { key = String(key.dropFirst(7)).trimmingBlanks() }
            guard i < chars.count, chars[i] == "=" else { throw fail("expected KEY=VALUE") }
            guard isVariableName(key) else { throw fail("'\(key)' is not a variable name (letters, digits and _, not starting with a digit)") }
            i += 1
            skipBlanks()
            var value = ""
            if i < chars.count, chars[i] == "'" || chars[i] == "\"" {
                let quote = chars[i]
                let start = line
                i += 1
                var closed = false
                while i < chars.count {
                    let c = chars[i]
                    if c == quote { closed = true; i += 1; break }
                    if c == "\n" { line += 1 }
                    if quote == "\"", c == "\\", i + 1 < chars.count {
                        let n = chars[i + 1]
                        switch n {
                        case "n": value.append("\n")
                        case "t": value.append("\t")
                        case "r": value.append("\r")
                        case "\"", "\\", "$": value.append(n)
                        default: value.append(c); value.append(n)
                        }
                        i += 2
                        continue
                    }
                    value.append(c)
                    i += 1
                }
                guard closed else { throw VaultError.usage("line \(start): the quoted value of \(key) is not closed") }
                skipBlanks()
                if i < chars.count, chars[i] == "#" {
                    while i < chars.count, chars[i] != "\n" { i += 1 }
                }
                guard i >= chars.count || chars[i] == "\n" else { throw fail("text after the closing quote of \(key)") }
            } else {
                while i < chars.count, chars[i] != "\n" {
                    // ` #` starts a comment; a `#` inside a word (`a#b`) is part of the value.
                    if chars[i] == "#", value.last == " " || value.last == "\t" { break }
                    value.append(chars[i])
                    i += 1
                }
                while i < chars.count, chars[i] != "\n" { i += 1 }
                value = value.trimmingBlanks()
            }
            result.removeAll { $0.key == key }
            result.append((key, value))
        }
        return result
    }

    /// Letters, digits and `_`, not starting with a digit.
    package static func isVariableName(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, first.isASCIILetter || first == "_" else { return false }
        return s.unicodeScalars.allSatisfy { $0.isASCIILetter || $0 == "_" || ("0"..."9").contains($0) }
    }
}

extension Unicode.Scalar {
    fileprivate var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}

extension String {
    fileprivate func trimmingBlanks() -> String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return String(s)
    }
}
