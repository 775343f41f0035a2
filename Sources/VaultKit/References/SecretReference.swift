import Foundation

/// A secret reference, `vault://[VAULT/]ITEM/FIELD`: what `vault read`, `vault run` (its
/// environment, `--env-file`) and `vault inject` (`{{ vault://... }}`) resolve. Each part is
/// percent-decoded after the split, so an item name with `/` is written `%2F` and a space `%20`
/// (or a literal space: only `/` and `%` must be encoded).
package struct SecretReference: Hashable, Sendable, CustomStringConvertible {
    /// The vault named in the reference; nil means the command's vault (`--vault`, `VAULT_NAME`).
    package var vault: String?
    /// The item's name, normalised (`Item.normalize`).
    package var item: String
    /// The field as written (`ReferenceField`: built-in names in any case, custom fields exactly).
    package var field: String
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
            guard let d = String(part).removingPercentEncoding else {
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
        field = decodedParts[decodedParts.count - 1]
        self.text = text
    }

    /// The reference as written.
    package var description: String { text }
}

/// The fields a reference can name, and the one place their values are looked up.
package enum ReferenceField {
    /// The built-in field names (matched in any case); any other name is a custom field's.
    package static let builtIn = ["password", "username", "url", "notes", "totp-uri", "otp"]

    /// How `field` of an item is read: the item field released for it (nil when the value is no
    /// secret and comes from the overview: no release, no audit record) and its value.
    ///
    /// This is the one lookup every reference goes through (`read`, `run`, `inject`); for `otp`
    /// the TOTP secret is what is released, and the resolver hands out its current code.
    package static func lookup(_ field: String) -> ReferenceField.Reader {
        switch field.lowercased() {
        // The TOTP secret is released; the resolver turns it into the current code (VaultOTP).
        case "otp": Reader(builtIn: "totp") { $0.totp }
        case "password": Reader(builtIn: "password") { $0.password }
        case "username": Reader(builtIn: nil) { $0.username }
        case "url": Reader(builtIn: nil) { $0.urls.first }
        case "notes": Reader(builtIn: "notes") { $0.notes }
        case "totp-uri": Reader(builtIn: "totp") { $0.totp }
        default:
            // A custom field, by its exact name: a hidden or TOTP one is a release.
            Reader(isBuiltIn: false, released: { $0.customField(field)?.kind.isSecret == true ? field : nil }) { $0.customField(field)?.value }
        }
    }

    /// One field's reader (see `lookup(_:)`).
    package struct Reader: Sendable {
        /// Whether the field is a built-in one (else a custom field of that name).
        package let isBuiltIn: Bool
        /// The field of `VaultAccess.release` that hands the value of this item (its overview)
        /// out, and is audited; nil when the overview has the value.
        package let released: @Sendable (Item) -> String?
        /// The value in a (released) item, nil when the item has none.
        package let value: @Sendable (Item) throws -> String?

        /// A reader of a field: which item field its release names, and how the value is read.
        package init(isBuiltIn: Bool, released: @escaping @Sendable (Item) -> String?, value: @escaping @Sendable (Item) throws -> String?) {
            self.isBuiltIn = isBuiltIn
            self.released = released
            self.value = value
        }

        /// A built-in field's reader, released as `released` (nil: read from the overview).
        package init(builtIn released: String?, value: @escaping @Sendable (Item) throws -> String?) {
            self.init(isBuiltIn: true, released: { _ in released }, value: value)
        }
    }
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
