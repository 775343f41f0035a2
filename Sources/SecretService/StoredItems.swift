public import VaultKit
internal import Foundation

/// A Secret Service item as vault stores it: an item of type `secret-service` whose text fields
/// (in the overview, so listing and searching open no secret) hold the id, the label, the
/// content type and one field per attribute; the secret is the item's password (sealed like
/// any password). The name is the label and the id, so `vault ls` and `vault get` show it.
public struct StoredItem: Sendable, Equatable {
    /// The item's id: its D-Bus path element (16 hex digits).
    public var id: String
    /// The vault item's name.
    public var name: String
    /// The label the client gave.
    public var label: String
    /// The attributes, sorted by name.
    public var attributes: [SecretRequest.Attribute]
    /// The secret's content type.
    public var contentType: String
    /// Seconds since 1970.
    public var created: Int64
    /// Seconds since 1970.
    public var modified: Int64
    /// The item's fingerprint login switch (`vault edit NAME --fingerprint-login on`): each
    /// requesting program needs a fresh match of its own (docs/cli.md, "vault secret-service").
    public var fingerprintLogin: Bool

    static let idField = "secret-service.id"
    static let labelField = "secret-service.label"
    static let contentTypeField = "secret-service.content-type"
    static let attributePrefix = "secret-service.attribute."

    /// The stored item of an overview, nil when it is not a Secret Service item.
    public init?(_ item: Item) {
        guard item.type == .secretService, let id = item.customField(Self.idField)?.value, !id.isEmpty else { return nil }
        self.id = id
        name = item.name
        label = item.customField(Self.labelField)?.value ?? ""
        contentType = item.customField(Self.contentTypeField)?.value ?? "text/plain"
        attributes = item.fields.filter { $0.name.hasPrefix(Self.attributePrefix) }
            .map { SecretRequest.Attribute(String($0.name.dropFirst(Self.attributePrefix.count)), $0.value) }
            .sorted { $0.name < $1.name }
        created = item.created
        modified = item.modified
        fingerprintLogin = item.fingerprintLogin
    }

    /// A new item's record (its password set by the caller).
    public static func make(label: String, attributes: [SecretRequest.Attribute], contentType: String) throws -> Item {
        let id = hex(randomBytes(8))
        let name = try (try? Item.normalize(name: "\(label.prefix(200)) #\(id)")) ?? Item.normalize(name: "\(displayLabel(label)) #\(id)")
        var item = Item(name: name, type: .secretService)
        item.fields = [CustomField(name: idField, value: id), CustomField(name: labelField, value: label),
                       CustomField(name: contentTypeField, value: contentType)]
            + attributes.sorted { $0.name < $1.name }.map { CustomField(name: attributePrefix + $0.name, value: $0.value) }
        return item
    }

    /// The change that gives an item `label` and `attributes`.
    public func change(label newLabel: String? = nil, attributes newAttributes: [SecretRequest.Attribute]? = nil) -> ItemChange {
        var c = ItemChange()
        if let newLabel { c.setFields.append(CustomField(name: Self.labelField, value: newLabel)) }
        if let newAttributes {
            let keep = Set(newAttributes.map(\.name))
            c.removeFields = attributes.filter { !keep.contains($0.name) }.map { Self.attributePrefix + $0.name }
            c.setFields += newAttributes.map { CustomField(name: Self.attributePrefix + $0.name, value: $0.value) }
        }
        return c
    }

    /// Whether every pair of `query` is one of the item's attributes.
    public func matches(_ query: [SecretRequest.Attribute]) -> Bool {
        query.allSatisfy { q in attributes.contains(q) }
    }

    /// A label fit for an item name when the label itself is not one: control and format
    /// characters out, slashes as `-`, trimmed, at most 200 characters, `secret` when nothing is left.
    static func displayLabel(_ label: String) -> String {
        var s = String(label.unicodeScalars.filter { !($0.properties.generalCategory == .control || $0.properties.generalCategory == .format) }
            .map { $0 == "/" ? "-" : Character($0) })
        s = s.trimmingCharacters(in: .whitespaces)
        if s.count > 200 { s = String(s.prefix(200)).trimmingCharacters(in: .whitespaces) }
        if s.isEmpty || s.split(separator: "-").contains(where: { $0 == "." || $0 == ".." }) { s = "secret" }
        return s
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
    }
}
