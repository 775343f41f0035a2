import FoundationEssentials
import VaultKit
import VaultSystem

/// Associated data built field by field with lengths (docs/format.md's rule: every variable
/// field preceded by its u32 length, integers big-endian).
struct Fields {
    private(set) var bytes: [UInt8] = []

    init(label: String) { append(Array(label.utf8)) }

    mutating func append(_ b: [UInt8]) {
        append32(UInt32(b.count))
        bytes += b
    }

    mutating func append32(_ n: UInt32) {
        bytes += [UInt8(n >> 24 & 0xff), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
    }

    mutating func append64(_ n: UInt64) {
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(n >> UInt64(shift) & 0xff)) }
    }
}

/// An item's version record: the hybrid logical clock value and the device that wrote it.
struct ItemVersion: Equatable, Comparable {
    var hlc: UInt64
    var device: [UInt8]

    static func < (a: ItemVersion, b: ItemVersion) -> Bool {
        a.hlc != b.hlc ? a.hlc < b.hlc : a.device.lexicographicallyPrecedes(b.device)
    }
}

/// A hybrid logical clock: milliseconds since 1970 in the high 48 bits, a counter in the low 16;
/// each value is above every value this machine has seen.
struct HybridClock {
    var last: UInt64

    mutating func tick(now: Date = Date()) -> UInt64 {
        let physical = UInt64(max(0, now.timeIntervalSince1970 * 1000)) << 16
        last = max(physical, last + 1)
        return last
    }

    mutating func observe(_ hlc: UInt64) { last = max(last, hlc) }
}

/// What is wrong with something the remote sent: refused with exit 5.
func untrusted(_ what: String) -> VaultError {
    VaultError.corrupt("the remote's \(what); nothing was changed here")
}

/// The sealed files of the repository: items and conflict records.
enum SealedFile {
    static let magic: [UInt8] = Array("VSI1".utf8)
    static let prefixLength = 4 + 8 + 16 + 24

    /// The padded length of a plaintext of `n` bytes: 512, 1024, 2048, 4096, then multiples of 4096.
    static func bucket(_ n: Int) -> Int {
        for b in [512, 1024, 2048, 4096] where n <= b { return b }
        return (n + 4095) / 4096 * 4096
    }

    static func ad(label: String, vaultID: [UInt8], id: [UInt8], version: ItemVersion) -> [UInt8] {
        var f = Fields(label: label)
        f.append(vaultID)
        f.append(id)
        f.append64(version.hlc)
        f.append(version.device)
        return f.bytes
    }

    /// Seals `plain` (padded to its bucket) as the file of `id` at `version`.
    static func seal(_ plain: [UInt8], label: String, vaultID: [UInt8], id: [UInt8], version: ItemVersion,
                     key: borrowing SecretBytes) throws -> [UInt8] {
        let padded = try SecretBytes(zeroed: bucket(plain.count))
        padded.withUnsafeMutableBytes { b in plain.withUnsafeBytes { b.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: plain.count) } }
        let s = try padded.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: ad(label: label, vaultID: vaultID, id: id, version: version)) }
        var f = Fields(label: "")
        f.append64(version.hlc)
        return magic + Array(f.bytes.suffix(8)) + version.device + s.nonce + s.ciphertext
    }

    /// The version record of a file, read from its clear prefix (nil: not a sealed file).
    static func version(of file: [UInt8]) -> ItemVersion? {
        guard file.count > prefixLength + 16, Array(file[0..<4]) == magic else { return nil }
        let hlc = file[4..<12].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return ItemVersion(hlc: hlc, device: Array(file[12..<28]))
    }

    /// Opens the file of `id`; its version record is checked by the associated data.
    /// - Throws: `.corrupt` (exit 5) naming `path` when it is malformed or does not open
    ///   (altered, or moved from another id or vault).
    static func open<R>(_ file: [UInt8], label: String, vaultID: [UInt8], id: [UInt8], key: borrowing SecretBytes, path: String,
                        _ body: (UnsafeRawBufferPointer) throws -> R) throws -> (ItemVersion, R) {
        guard let version = version(of: file) else { throw untrusted("file \(path) is not a sealed vault file") }
        let plain: SecretBytes
        do {
            plain = try AEAD.open(Array(file[(prefixLength)...]), key: key, nonce: Array(file[28..<52]),
                                  associatedData: ad(label: label, vaultID: vaultID, id: id, version: version))
        } catch {
            throw untrusted("file \(path) failed authentication (altered, or moved there from another id)")
        }
        return (version, try plain.withUnsafeBytes(body))
    }
}

/// The `header` file: what a new machine needs to open the vault (docs/format.md).
struct RepoHeader: Codable, Equatable {
    struct Slot: Codable, Equatable {
        var id: Int64
        var kind: String
        var params: String
        var nonce: String
        var wrapped: String
    }

    var v: Int = 1
    var vault: String
    var generation: Int64
    var slotSeq: Int64
    var hlc: UInt64
    var slots: [Slot]
    var repoKey: String

    /// Decodes and checks a header for `vaultID` (nil: any vault, a clone's first read).
    static func decode(_ bytes: [UInt8], vaultID: [UInt8]?) throws -> RepoHeader {
        guard bytes.count <= 1 << 20, let h = try? JSONDecoder().decode(RepoHeader.self, from: Data(bytes)), h.v == 1,
              let id = bytesFromHex(h.vault), id.count == 16, h.slots.count <= 8 else {
            throw untrusted("header is malformed")
        }
        if let vaultID, id != vaultID { throw untrusted("header belongs to another vault (\(h.vault))") }
        return h
    }

    /// The slots as vault.db stores them.
    func keySlots() throws -> [KeySlot] {
        try slots.map { s in
            guard let kind = SlotKind(rawValue: s.kind), kind == .passcode || kind == .recovery,
                  let params = bytesFromHex(s.params), let nonce = bytesFromHex(s.nonce), let wrapped = bytesFromHex(s.wrapped) else {
                throw untrusted("header holds a malformed slot")
            }
            return KeySlot(id: s.id, kind: kind, generation: generation, params: params, sealedNonce: nonce, wrapped: wrapped)
        }
    }
}

/// A `devices/ID` file: a machine's public key, vouched for by a holder of the repository key.
struct DeviceRecord: Codable, Equatable {
    var v: Int = 1
    var device: String
    var publicKey: String
    var mac: String

    static func mac(vaultID: [UInt8], device: [UInt8], publicKey: [UInt8], key: borrowing SecretBytes) throws -> [UInt8] {
        var f = Fields(label: "vault-sync-device-v1")
        f.append(vaultID)
        f.append(device)
        f.append(publicKey)
        return try KeyedHash.hash(f.bytes, key: key, outputLength: 32)
    }

    /// The public key of a device file whose MAC holds, else nil.
    static func verifiedKey(_ bytes: [UInt8], name: String, vaultID: [UInt8], key: borrowing SecretBytes) -> [UInt8]? {
        guard bytes.count <= 4096, let d = try? JSONDecoder().decode(DeviceRecord.self, from: Data(bytes)), d.v == 1, d.device == name,
              let id = bytesFromHex(d.device), id.count == 16, let pk = bytesFromHex(d.publicKey), pk.count == 32,
              let m = bytesFromHex(d.mac), let want = try? mac(vaultID: vaultID, device: id, publicKey: pk, key: key),
              constantTimeEqual(m, want) else { return nil }
        return pk
    }
}

/// `revoked/DEVICEID`: a device no longer trusted (`vault remote revoke`), under a MAC of the
/// repository key, so only a holder of the vault's key revokes one. A commit signed by a
/// revoked device is refused, whatever its own tree says.
struct RevocationRecord: Codable, Equatable {
    var v: Int = 1
    var device: String
    var mac: String

    static func mac(vaultID: [UInt8], device: [UInt8], key: borrowing SecretBytes) throws -> [UInt8] {
        var f = Fields(label: "vault-sync-revoked-v1")
        f.append(vaultID)
        f.append(device)
        return try KeyedHash.hash(f.bytes, key: key, outputLength: 32)
    }

    static func make(vaultID: [UInt8], device: [UInt8], key: borrowing SecretBytes) throws -> [UInt8] {
        Array(try JSONEncoder().encode(RevocationRecord(device: hexString(device), mac: hexString(try mac(vaultID: vaultID, device: device, key: key)))))
    }

    /// Whether a revocation file named `name` is one a holder of the vault's key made.
    static func holds(_ bytes: [UInt8], name: String, vaultID: [UInt8], key: borrowing SecretBytes) -> Bool {
        guard bytes.count <= 4096, let r = try? JSONDecoder().decode(RevocationRecord.self, from: Data(bytes)), r.v == 1, r.device == name,
              let id = bytesFromHex(r.device), id.count == 16, let m = bytesFromHex(r.mac),
              let want = try? mac(vaultID: vaultID, device: id, key: key) else { return false }
        return constantTimeEqual(m, want)
    }
}

/// The signed commit message (docs/format.md, "Commits").
enum CommitSignature {
    static func signedText(vault: String, device: String, tree: String, parents: [String]) -> [UInt8] {
        var s = "vault-sync-commit-v1\nvault \(vault)\ndevice \(device)\ntree \(tree)\n"
        for p in parents { s += "parent \(p)\n" }
        return Array(s.utf8)
    }

    static func message(device: String, signature: [UInt8]) -> String {
        "vault sync \(device)\n\nvault-signature: \(hexString(signature))\n"
    }

    /// The device id and signature a commit message names (nil: not a vault commit).
    static func parse(message: String) -> (device: String, signature: [UInt8])? {
        let lines = message.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.count >= 3, lines[0].hasPrefix("vault sync "), lines[1].isEmpty, lines[2].hasPrefix("vault-signature: ") else { return nil }
        let device = String(lines[0].dropFirst("vault sync ".count))
        guard device.count == 32, let sig = bytesFromHex(String(lines[2].dropFirst("vault-signature: ".count))), sig.count == 64 else { return nil }
        return (device, sig)
    }
}

/// A resolved conflict, kept sealed in `conflicts/ID` so every machine can list it.
struct ConflictRecord: Codable, Equatable {
    /// `field` (same field, both changed), `edit-kept` (edit against delete), `renamed` (a name added twice).
    var kind: String
    var item: String
    var name: String
    var field: String?
    var kept: String?
    var lost: String?
    var secret: Bool
    var winner: String
    var loser: String?
    var time: Int64
}

/// This machine's memory of the repository (`sync.state`), MACed under the repository key.
/// The row stamps are kept beside it in `sync.stamps` (binary, rewritten only when a row was
/// sent or written): the state names their keyed hash, so a stamps file that is not the one the
/// state was saved with counts as none (every row is sent again: slow, never lossy).
struct SyncState: Codable {
    var v: Int = 1
    var local: String?
    var remote: String?
    var hlc: UInt64 = 0
    /// The stamps of an older state file (JSON inside it), read once and moved to `sync.stamps`.
    var stamps: [String: String]?
    var header: String?
    /// `BLAKE2b-256(key = state key, sync.stamps)`, hex.
    var stampsHash: String?

    static func load(_ path: String, key: borrowing SecretBytes) -> SyncState? {
        guard let raw = try? PrivateFiles.read(path, limit: 1 << 30), raw.count > 32 else { return nil }
        let body = Array(raw[32...])
        guard let want = try? KeyedHash.hash(body, key: key, outputLength: 32), constantTimeEqual(Array(raw[0..<32]), want) else { return nil }
        return try? JSONDecoder().decode(SyncState.self, from: Data(body))
    }

    func save(_ path: String, key: borrowing SecretBytes) throws {
        let body = Array(try JSONEncoder().encode(self))
        let mac = try KeyedHash.hash(body, key: key, outputLength: 32)
        do { try AtomicFile.write(mac + body, to: path) } catch { throw VaultError.io(path: path, "\(error)") }
    }
}

/// The row stamps a sync last saw (`sync.stamps`): "VST1" ‖ (u8 len ‖ item id ‖ u8 len ‖ stamp)*.
enum SyncStamps {
    static let magic: [UInt8] = Array("VST1".utf8)

    static func encode(_ stamps: [[UInt8]: [UInt8]]) -> [UInt8] {
        var out = magic
        out.reserveCapacity(4 + stamps.count * 50)
        for (id, stamp) in stamps where id.count < 256 && stamp.count < 256 {
            out.append(UInt8(id.count)); out += id
            out.append(UInt8(stamp.count)); out += stamp
        }
        return out
    }

    /// The stamps of `path` when its keyed hash is `hash` (hex), else nil.
    static func load(_ path: String, hash: String?, key: borrowing SecretBytes) -> [[UInt8]: [UInt8]]? {
        guard let hash, let raw = try? PrivateFiles.read(path, limit: 1 << 30), raw.count >= 4, Array(raw[0..<4]) == magic,
              let got = try? KeyedHash.hash(raw, key: key, outputLength: 32), let want = bytesFromHex(hash),
              constantTimeEqual(got, want) else { return nil }
        var out: [[UInt8]: [UInt8]] = [:]
        var i = 4
        while i < raw.count {
            let n = Int(raw[i])
            guard i + 1 + n < raw.count else { return nil }
            let m = Int(raw[i + 1 + n])
            guard i + 2 + n + m <= raw.count else { return nil }
            out[Array(raw[(i + 1)..<(i + 1 + n)])] = Array(raw[(i + 2 + n)..<(i + 2 + n + m)])
            i += 2 + n + m
        }
        return out
    }

    /// Writes `stamps` to `path` and returns their keyed hash (hex) for the state.
    static func save(_ stamps: [[UInt8]: [UInt8]], to path: String, key: borrowing SecretBytes) throws -> String {
        let body = encode(stamps)
        let hash = try KeyedHash.hash(body, key: key, outputLength: 32)
        do { try AtomicFile.write(body, to: path) } catch { throw VaultError.io(path: path, "\(error)") }
        return hexString(hash)
    }
}
