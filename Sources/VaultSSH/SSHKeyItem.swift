public import VaultKit
internal import VaultSystem

/// When the SSH agent asks for a finger before a vault key signs (`--confirm`).
public enum SSHKeyConfirm: String, CaseIterable, Sendable {
    /// A live match for every signature.
    case sign
    /// One match per requesting program (its executable in its terminal session) until the
    /// vault's unlock session ends (`vault lock`, the idle time, the hard limit).
    case session
    /// One match for the first signature, then every program of the user may sign until the
    /// unlock session ends.
    case none
}

/// An `ssh-key` item (docs/format.md, "SSH keys"): built from a key, and read back.
public enum SSHKeyItem {
    /// The item called `name` holding `key`: the authorized_keys line and the policy in the
    /// overview, the private key (an openssh-key-v1 file) a hidden field, fingerprint login on.
    public static func item(name: String, key: SSHPrivateKey, comment: String, confirm: SSHKeyConfirm) throws -> Item {
        let file = try SSHKeyFile.write(key, comment: comment)
        let text = file.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
        return Item(name: name, type: .sshKey, fields: [
            CustomField(name: SSHKeyFields.publicKey, kind: .text, value: key.publicKey.authorizedKeysLine(comment: comment)),
            CustomField(name: SSHKeyFields.privateKey, kind: .hidden, value: text),
            CustomField(name: SSHKeyFields.confirm, kind: .text, value: confirm.rawValue),
        ], fingerprintLogin: true)
    }

    /// What the overview of an `ssh-key` item says, without a secret.
    public struct Listed: Sendable, Equatable {
        /// The item's name.
        public var name: String
        /// The public key.
        public var publicKey: SSHPublicKey
        /// The authorized_keys line's comment.
        public var comment: String
        /// The agent's policy.
        public var confirm: SSHKeyConfirm

        /// The authorized_keys line.
        public var line: String { publicKey.authorizedKeysLine(comment: comment) }
    }

    /// The key of an `ssh-key` item's overview, nil for another item or a damaged line.
    public static func listed(_ item: Item) -> Listed? {
        guard item.type == .sshKey, let line = item.customField(SSHKeyFields.publicKey)?.value else { return nil }
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        guard parts.count >= 2, let blob = Base64.decode(String(parts[1])), let key = try? SSHPublicKey.parse(blob),
              key.typeName == parts[0], key.certificate == nil else { return nil }
        let confirm = item.customField(SSHKeyFields.confirm).flatMap { SSHKeyConfirm(rawValue: $0.value) } ?? .session
        return Listed(name: item.name, publicKey: key, comment: parts.count > 2 ? String(parts[2]) : "", confirm: confirm)
    }

    /// The private key of an item's released `private-key` field (an openssh-key-v1 file), checked
    /// against the public key its overview lists.
    /// - Throws: `SSHKeyFileError`, `SSHWireError` for a damaged field or another key.
    public static func privateKey(_ field: borrowing SecretBytes, expecting listed: Listed) throws -> SSHPrivateKey {
        var bytes = field.exposedBytes()
        defer { wipe(&bytes) }
        let (key, _) = try SSHKeyFile.read(bytes) { nil }
        guard key.publicKey.blob == listed.publicKey.blob else { throw SSHWireError.invalid("the private key of item '\(listed.name)' is not its public key's") }
        return key
    }
}
