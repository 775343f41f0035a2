/// How deeply a JSON text nests, found without parsing it: Foundation's decoders recurse once per
/// level, so a peer's `[[[[...` 100,000 deep would exhaust a thread's stack before any error. Every
/// decoder of input from another process (the agent, vault-authd, an import) checks this first.
package enum JSONDepth {
    /// The nesting vault's own messages and exports need, with room to spare.
    package static let limit = 32

    /// Whether `bytes` opens more than `limit` arrays or objects inside one another (brackets in
    /// strings do not count). Takes an array, not any sequence: called generically from another
    /// module, the loop asked the runtime for the iterator's type at its first use (a scan of
    /// every conformance record in the static `vault`).
    package static func exceeds(_ bytes: [UInt8], limit: Int = JSONDepth.limit) -> Bool {
        var depth = 0, inString = false, escaped = false
        for b in bytes {
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true } else if b == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch b {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > limit { return true }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return false
    }
}
