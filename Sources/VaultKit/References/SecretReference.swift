import FoundationEssentials
internal import VaultSystem

/// A secret reference, `vault://[VAULT/]ITEM/FIELD`: what `vault read`, `vault run` (its
/// environment, `--env-file`) and `vault inject` (`{{ vault://... }}`) resolve. Each part is
/// percent-decoded after the split, so an item name with `/` is written `%2F` and a space `%20`
/// (or a literal space: only `/` and `%` must be encoded).
package struct SecretReference: Hashable, Sendable, CustomStringConvertible {
    /// The vault named in the reference; nil means the command's vault (`--vault`, `VAULT_NAME`).
    package var vault: String?
    /// The item's name, normalised (`Item.normalize`).
    package var item: String
    /// The field named (`ItemField(parsing:)`: built-in names in any case, custom fields exactly).
    package var field: ItemField
    /// The reference as written (what errors name).
    package var text: String

    /// The scheme every reference starts with.
    package static let scheme = "vault://"

    /// Whether `text` is meant as a reference (starts with `vault://`), well formed or not.
    package static func looksLikeReference(_ text: String) -> Bool { text.hasPrefix(scheme) }

    /// Parses a reference.
    /// - Throws: `.usage` naming the reference when it is not `vault://[VAULT/]ITEM/FIELD` with
    ///   non-empty parts, a part is not valid percent-encoding, the item name is refused by
    ///   `Item.normalize`, or the vault name is not one `VaultLocation` accepts.
    package init(parsing text: String) throws {
        guard text.hasPrefix(SecretReference.scheme) else {
            throw VaultError.usage("'\(text)' is not a secret reference", hint: "write vault://[VAULT/]ITEM/FIELD")
        }
        let parts = text.dropFirst(SecretReference.scheme.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3, !parts.contains(where: \.isEmpty) else {
            throw VaultError.usage("'\(text)' is not vault://[VAULT/]ITEM/FIELD",
                                   hint: "a '/' in an item name is written %2F, a '%' is written %25")
        }
        func decoded(_ part: Substring) throws -> String {
            guard let d = String(part).percentDecoded else {
                throw VaultError.usage("'\(text)': '\(part)' is not valid percent-encoding")
            }
            return d
        }
        let decodedParts = try parts.map(decoded)
        // The vault name is checked where it is opened (`VaultLocation`), like `--vault`.
        if decodedParts.count == 3 { vault = decodedParts[0] }
        do {
            item = try Item.normalize(name: decodedParts[decodedParts.count - 2])
        } catch let e as VaultError {
            throw VaultError.usage("'\(text)': \(e.message)")
        }
        field = ItemField(parsing: decodedParts[decodedParts.count - 1])
        self.text = text
    }

    /// The reference as written.
    package var description: String { text }
}

extension SecretReference {
    /// The built-in fields a reference can name: every one but the password history (many
    /// values, not one). `otp` and `totp` are the current code, `totp-uri` the URI; a field
    /// whose value is a secret (`Item.isSecretField`) is released and audited, the others are
    /// read from the overview.
    package static let builtInFields = ItemField.builtIn.filter { $0 != .history }
}

/// A template of `vault inject`: text with `{{ vault://... }}` placeholders (white space inside
/// the braces optional). Text outside the placeholders is kept byte for byte.
package struct SecretTemplate: Sendable {
    /// One piece of the template, in order.
    package enum Piece: Sendable, Equatable {
        /// Bytes copied as they are.
        case text([UInt8])
        /// A placeholder.
        case reference(SecretReference)
    }

    /// The pieces, in order.
    package let pieces: [Piece]

    /// Every distinct reference, in order of first use.
    package var references: [SecretReference] {
        var seen = Set<SecretReference>()
        return pieces.compactMap { if case .reference(let r) = $0, seen.insert(r).inserted { r } else { nil } }
    }

    /// Parses a template. `{{` not followed (after optional blanks) by `vault://` is ordinary text,
    /// so templates of other tools (Helm, Jinja) pass through untouched.
    /// - Throws: `.usage` for a placeholder that is never closed (`}}`) or holds a malformed
    ///   reference, naming its line.
    package init(parsing bytes: [UInt8]) throws {
        var pieces: [Piece] = []
        var text: [UInt8] = []
        var i = 0
        let open: [UInt8] = Array("{{".utf8), close: [UInt8] = Array("}}".utf8), scheme = Array(SecretReference.scheme.utf8)
        func at(_ j: Int, _ s: [UInt8]) -> Bool { j + s.count <= bytes.count && Array(bytes[j..<(j + s.count)]) == s }
        func isBlank(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
        while i < bytes.count {
            guard at(i, open) else { text.append(bytes[i]); i += 1; continue }
            var j = i + 2
            while j < bytes.count, isBlank(bytes[j]) { j += 1 }
            guard at(j, scheme) else { text.append(bytes[i]); i += 1; continue }
            var k = j
            while k < bytes.count, !at(k, close), bytes[k] != 10 { k += 1 }
            func line() -> Int { bytes[..<i].filter { $0 == 10 }.count + 1 }
            guard at(k, close) else {
                throw VaultError.usage("line \(line()): '{{ vault://' is not closed with '}}' on the same line")
            }
            var end = k
            while end > j, isBlank(bytes[end - 1]) { end -= 1 }
            let raw = String(decoding: bytes[j..<end], as: UTF8.self)
            let reference: SecretReference
            do { reference = try SecretReference(parsing: raw) } catch let e as VaultError {
                throw VaultError.usage("line \(line()): \(e.message)", hint: e.hint)
            }
            if !text.isEmpty { pieces.append(.text(text)); text = [] }
            pieces.append(.reference(reference))
            i = k + 2
        }
        if !text.isEmpty { pieces.append(.text(text)) }
        self.pieces = pieces
    }
}
