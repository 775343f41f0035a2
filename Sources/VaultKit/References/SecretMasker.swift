/// Resolved secret values in one block of guarded memory (`SecretBytes`), each reachable by
/// its reference. What `vault read`, `run` and `inject` resolve lives here until it is written
/// out, and `SecretMasker` looks for these bytes in a child's output.
package final class SecretValues {
    private let storage: SecretBytes
    private let ranges: [String: Range<Int>]
    /// The ranges of the values that are secrets (released fields): what masking looks for.
    let secretRanges: [Range<Int>]

    /// One value as it was resolved: ordinary bytes (a username, or a value already decoded into
    /// a String), or a secret released into guarded memory (`VaultAccess.releaseSecret`).
    package enum Part {
        /// Bytes in ordinary memory (wiped once copied).
        case bytes([UInt8])
        /// A secret in guarded memory, never a String on its way here.
        case secret(SecretBox)
    }

    /// Copies `values` into one block of guarded memory: the bytes (then wiped) and the guarded
    /// secrets (guarded memory to guarded memory). `secret` says which values are masked in
    /// `vault run`'s output.
    package convenience init(_ values: [(key: String, part: Part, secret: Bool)]) throws {
        var flat: [(key: String, bytes: [UInt8], secret: Bool)] = []
        var boxes: [String: SecretBox] = [:]
        for v in values {
            switch v.part {
            case .bytes(let b): flat.append((v.key, b, v.secret))
            case .secret(let box):
                // A placeholder of the right length: the bytes are copied in after, from the box.
                flat.append((v.key, [UInt8](repeating: 0, count: box.bytes.count), v.secret))
                boxes[v.key] = box
            }
        }
        try self.init(&flat)
        storage.withUnsafeMutableBytes { dst in
            for (key, box) in boxes {
                guard let r = ranges[key], !r.isEmpty else { continue }
                box.bytes.withUnsafeBytes { src in dst.baseAddress!.advanced(by: r.lowerBound).copyMemory(from: src.baseAddress!, byteCount: r.count) }
            }
        }
    }

    /// Copies `values` into guarded memory and wipes the arrays given. `secret` says which
    /// values are secrets (masked in `vault run`'s output); the others (a username, a URL) are not.
    package init(_ values: inout [(key: String, bytes: [UInt8], secret: Bool)]) throws {
        var offset = 0
        var ranges: [String: Range<Int>] = [:]
        var secretRanges: [Range<Int>] = []
        for v in values where ranges[v.key] == nil {
            let r = offset..<(offset + v.bytes.count)
            ranges[v.key] = r
            if v.secret && !r.isEmpty { secretRanges.append(r) }
            offset += v.bytes.count
        }
        let storage = try SecretBytes(zeroed: offset)
        storage.withUnsafeMutableBytes { dst in
            for i in values.indices {
                guard let r = ranges[values[i].key] else { continue }
                values[i].bytes.withUnsafeBytes { src in
                    if let s = src.baseAddress, !r.isEmpty { dst.baseAddress!.advanced(by: r.lowerBound).copyMemory(from: s, byteCount: r.count) }
                }
            }
        }
        for i in values.indices { for j in values[i].bytes.indices { values[i].bytes[j] = 0 } }
        values.removeAll()
        self.storage = storage
        self.ranges = ranges
        self.secretRanges = secretRanges.sorted { $0.count > $1.count }
    }

    /// Whether `reference` was resolved.
    package func contains(_ reference: String) -> Bool { ranges[reference] != nil }

    /// Lends the value of `reference` (empty when it was not resolved).
    package func withValue<R>(_ reference: String, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { all in
            guard let r = ranges[reference], !r.isEmpty else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
            return try body(UnsafeRawBufferPointer(rebasing: all[r]))
        }
    }

    /// The value of `reference` as a `String`: for a child's environment, which is text
    /// (`ChildProcess` wipes its copy after the spawn).
    package func string(_ reference: String) -> String {
        withValue(reference) { String(decoding: $0, as: UTF8.self) }
    }

    /// Lends every byte.
    func withAllBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try storage.withUnsafeBytes(body) }

    /// The length of the longest secret (0 without any).
    package var longestSecret: Int { secretRanges.first?.count ?? 0 }
}

/// A `SecretBytes` in a box, so it can sit in arrays and dictionaries (it is `~Copyable`).
package final class SecretBox {
    /// The secret.
    package let bytes: SecretBytes
    /// Boxes `bytes`.
    package init(_ bytes: consuming SecretBytes) { self.bytes = bytes }
}

/// Replaces every secret of a `SecretValues` in a stream of bytes by `<concealed by vault>`,
/// also when a secret is split across two writes: it holds back at most the longest secret's
/// length minus one byte (a tail that could still be the start of a secret) until more comes or
/// the stream ends (`finish`). At one position the longest secret wins. It cannot see a secret
/// that the program transformed (encoded, split by other output, printed reversed).
package final class SecretMasker {
    /// What a secret is replaced by.
    package static let replacement: [UInt8] = Array("<concealed by vault>".utf8)

    private let values: SecretValues
    private var held: [UInt8] = []

    /// A masker for the secrets in `values`.
    package init(_ values: SecretValues) { self.values = values }

    deinit { wipeHeld() }

    /// At most how many bytes are held back at any time.
    package var maximumHeld: Int { max(0, values.longestSecret - 1) }

    /// Takes the next bytes of the stream; returns what can be written now.
    package func feed(_ bytes: UnsafeRawBufferPointer) -> [UInt8] { process(bytes, final: false) }

    /// The end of the stream: returns everything still held, masked.
    package func finish() -> [UInt8] { process(UnsafeRawBufferPointer(start: nil, count: 0), final: true) }

    private func wipeHeld() {
        for i in held.indices { held[i] = 0 }
        held.removeAll()
    }

    private func process(_ bytes: UnsafeRawBufferPointer, final: Bool) -> [UInt8] {
        let ranges = values.secretRanges
        if ranges.isEmpty && held.isEmpty { return Array(bytes) }
        var buffer = held
        buffer.append(contentsOf: bytes)
        wipeHeld()
        defer { for i in buffer.indices { buffer[i] = 0 } }
        var out: [UInt8] = []
        out.reserveCapacity(buffer.count)
        values.withAllBytes { secrets in
            var i = 0
            scan: while i < buffer.count {
                var full = 0
                for r in ranges where secrets[r.lowerBound] == buffer[i] {
                    let available = buffer.count - i
                    let n = min(available, r.count)
                    var same = true
                    for k in 1..<max(n, 1) where secrets[r.lowerBound + k] != buffer[i + k] { same = false; break }
                    guard same else { continue }
                    if n == r.count {
                        if full == 0 { full = r.count }
                    } else if !final {
                        // A longer secret may still follow: wait for more (ranges are longest first).
                        held = Array(buffer[i...])
                        break scan
                    }
                }
                if full > 0 {
                    out.append(contentsOf: SecretMasker.replacement)
                    i += full
                } else {
                    out.append(buffer[i])
                    i += 1
                }
            }
        }
        return out
    }
}
