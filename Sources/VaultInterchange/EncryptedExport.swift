public import VaultKit
import VaultSystem
internal import FoundationEssentials

/// vault's encrypted export (docs/format.md): vault JSON sealed with libsodium's secretstream
/// under a key Argon2id derives from a passphrase.
///
///     "VAULTENC" | version 1 | opslimit u32 BE | memlimit KiB u32 BE | salt 16 | stream header 24
///     then chunks: length u32 BE | sealed chunk (at most 64 KiB of plaintext + 17), the last FINAL
///
/// The 57 header bytes are the associated data of the first chunk, so the cost and salt cannot
/// be changed unnoticed.
public enum EncryptedExport {
    static let version: UInt8 = 1
    static let headerLength = 8 + 1 + 4 + 4 + 16 + 24
    static let chunk = 64 * 1024

    /// `plaintext` sealed under `passphrase` at `cost` (the binary form).
    public static func seal(_ plaintext: [UInt8], passphrase: borrowing SecretBytes, cost: KDFParameters = KDFParameters()) throws -> [UInt8] {
        var out: [UInt8] = []
        let writer = try Writer(passphrase: passphrase, cost: cost, binary: { out += $0 })
        try writer.write(plaintext)
        try writer.finish()
        return out
    }

    /// Seals a stream of plaintext as it comes, in 64 KiB chunks, and hands out the text form
    /// (or, for `seal`, the bytes): an export never holds more than a chunk of plaintext here.
    public final class Writer {
        private let stream: SecretStreamPush
        private let header: [UInt8]
        private var plain: [UInt8] = []
        private var first = true
        private var finished = false
        private var pending: [UInt8] = []
        private let text: ((String) -> Void)?
        private let binary: (([UInt8]) -> Void)?

        /// A writer handing out the text form (BEGIN line, base64 lines, END line) to `text`.
        public convenience init(passphrase: borrowing SecretBytes, cost: KDFParameters, text: @escaping (String) -> Void) throws {
            try self.init(passphrase: passphrase, cost: cost, text: text, binary: nil)
        }

        convenience init(passphrase: borrowing SecretBytes, cost: KDFParameters, binary: @escaping ([UInt8]) -> Void) throws {
            try self.init(passphrase: passphrase, cost: cost, text: nil, binary: binary)
        }

        private init(passphrase: borrowing SecretBytes, cost: KDFParameters, text: ((String) -> Void)?, binary: (([UInt8]) -> Void)?) throws {
            let key = try PasswordKDF.deriveKey(password: passphrase, parameters: cost)
            stream = try SecretStreamPush(key: key)
            header = ImportFormat.encryptedMagic + [version] + be32(UInt32(cost.operations)) + be32(UInt32(cost.memoryBytes / 1024))
                + cost.salt + stream.header
            self.text = text
            self.binary = binary
        }

        /// Nothing is handed out before the first write (a command that fails to unlock after
        /// asking for the passphrase leaves no half export).
        private var started = false
        private func start() {
            guard !started else { return }
            started = true
            text?(armorBegin + "\n")
            emit(header)
        }

        /// Adds plaintext; every full chunk is sealed and handed out.
        public func write(_ bytes: [UInt8]) throws {
            precondition(!finished, "write after finish")
            start()
            plain += bytes
            while plain.count > chunk { try seal(count: chunk, final: false) }
        }

        /// Seals the rest as the final chunk and ends the text form.
        public func finish() throws {
            guard !finished else { return }
            start()
            try seal(count: plain.count, final: true)
            finished = true
            if let text {
                if !pending.isEmpty { text(Data(pending).base64EncodedString() + "\n") }
                pending = []
                text(armorEnd + "\n")
            }
        }

        private func seal(count: Int, final: Bool) throws {
            let sealed = try plain[0..<count].withUnsafeBytes { try stream.push($0, associatedData: first ? header : [], final: final) }
            first = false
            wipe(&plain, prefix: count)
            emit(be32(UInt32(sealed.count)) + sealed)
        }

        private func emit(_ bytes: [UInt8]) {
            if let binary { binary(bytes); return }
            pending += bytes
            // 48 bytes make one 64-character base64 line.
            let whole = pending.count / 48 * 48
            guard whole > 0 else { return }
            text?(Data(pending[0..<whole]).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed]) + "\n")
            pending.removeSubrange(0..<whole)
        }

        /// Zeroes and drops the first `n` bytes.
        private func wipe(_ bytes: inout [UInt8], prefix n: Int) {
            for k in 0..<n { bytes[k] = 0 }
            bytes.removeSubrange(0..<n)
        }
    }

    /// The plaintext of an encrypted export held whole (the text form or the bytes): the
    /// `Reader` over one chunk, so both ways of opening check the same things.
    /// - Throws: `.authenticationFailed` for a wrong passphrase, `.corrupt` for a damaged or
    ///   truncated file, `.usage` for another format or version.
    public static func open(_ bytes: [UInt8], passphrase: borrowing SecretBytes) throws -> [UInt8] {
        var given = false
        let reader = try Reader(passphrase: passphrase) {
            defer { given = true }
            return given ? nil : bytes
        }
        var out: [UInt8] = []
        do {
            while var chunk = try reader.next() {
                out += chunk
                wipe(&chunk)
            }
        } catch {
            wipe(&out)
            throw error
        }
        return out
    }

    static func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v & 0xFF)] }
    static func u32(_ b: [UInt8], _ i: Int) -> UInt32 { UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3]) }
}

extension EncryptedExport {
    /// The first line of the text form.
    public static let armorBegin = "-----BEGIN VAULT ENCRYPTED EXPORT-----"
    static let armorEnd = "-----END VAULT ENCRYPTED EXPORT-----"

    /// The text form written to standard output: the bytes in base64, 64 characters a line,
    /// between BEGIN and END lines.
    public static func armor(_ bytes: [UInt8]) -> String {
        let b64 = Data(bytes).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return armorBegin + "\n" + b64 + "\n" + armorEnd + "\n"
    }
}

extension EncryptedExport {
    /// Opens an encrypted export as it is read (the text form, or the bytes), handing out the
    /// plaintext chunk by chunk: an import of it never holds the file, only the chunk being opened.
    public final class Reader {
        private let input: () throws -> [UInt8]?
        private var armored: Bool?
        private var text: [UInt8] = []
        private var sawEnd = false
        private var bytes: [UInt8] = []
        private var inputDone = false
        private var stream: SecretStreamPull?
        private var header: [UInt8] = []
        private var first = true
        private var final = false

        /// A reader of the export `input` hands out in chunks (nil at the end).
        /// - Throws: as `open`.
        public init(passphrase: borrowing SecretBytes, input: @escaping () throws -> [UInt8]?) throws {
            self.input = input
            try fill(headerLength)
            guard bytes.count >= headerLength, bytes.starts(with: ImportFormat.encryptedMagic) else {
                throw VaultError.usage("this is not an encrypted vault export")
            }
            guard bytes[8] == version else { throw VaultError.usage("this encrypted export has version \(bytes[8]); this vault reads version \(version)") }
            let ops = Int(u32(bytes, 9)), memKiB = Int(u32(bytes, 13))
            guard (1...20).contains(ops), (8 * 1024...4 * 1024 * 1024).contains(memKiB) else {
                throw VaultError.corrupt("the encrypted export's Argon2id cost is out of range")
            }
            var cost = KDFParameters(memoryMiB: KDFParameters.minimumMemoryMiB, operations: 1)
            cost.operations = ops
            cost.memoryBytes = memKiB * 1024
            cost.salt = Array(bytes[17..<33])
            let key = try PasswordKDF.deriveKey(password: passphrase, parameters: cost)
            header = Array(bytes[0..<headerLength])
            stream = try SecretStreamPull(key: key, header: Array(bytes[33..<headerLength]))
            bytes.removeSubrange(0..<headerLength)
        }

        /// The next chunk of plaintext, nil after the final one.
        /// - Throws: `.authenticationFailed` for a wrong passphrase, `.corrupt` for a damaged or truncated file.
        public func next() throws -> [UInt8]? {
            if final {
                try fill(1)
                guard bytes.isEmpty else { throw VaultError.corrupt("the encrypted export has data after its last chunk") }
                return nil
            }
            try fill(4)
            guard bytes.count >= 4 else { throw VaultError.corrupt("the encrypted export is truncated (its last chunk is missing)") }
            let n = Int(u32(bytes, 0))
            guard n <= SecretStreamPush.sealedLength(chunk) else { throw VaultError.corrupt("the encrypted export is damaged") }
            try fill(4 + n)
            guard bytes.count >= 4 + n else { throw VaultError.corrupt("the encrypted export is truncated") }
            var out: [UInt8] = []
            do {
                final = try stream!.pull(bytes[4..<(4 + n)], associatedData: first ? header : [], into: &out)
            } catch {
                throw first ? VaultError.authenticationFailed("wrong passphrase for the encrypted export (or the file was altered)")
                    : VaultError.corrupt("the encrypted export was altered")
            }
            first = false
            bytes.removeSubrange(0..<(4 + n))
            return out
        }

        /// Reads until `count` decoded bytes are buffered or the input ends.
        private func fill(_ count: Int) throws {
            while bytes.count < count, !inputDone {
                guard let c = try input() else {
                    inputDone = true
                    if armored == true {
                        try decodeLines(flush: true)
                        guard sawEnd else { throw VaultError.corrupt("the encrypted export has no END line (truncated?)") }
                    }
                    return
                }
                if armored == nil { armored = !c.starts(with: ImportFormat.encryptedMagic) }
                if armored == true {
                    text += c
                    try decodeLines(flush: false)
                } else {
                    bytes += c
                }
            }
        }

        /// Decodes the complete base64 lines of the text form (the BEGIN and END lines checked).
        private func decodeLines(flush: Bool) throws {
            var start = 0
            while let nl = text[start...].firstIndex(of: 0x0A) ?? (flush && start < text.count ? text.count : nil) {
                let line = String(decoding: text[start..<nl], as: UTF8.self).trimmed()
                start = min(nl + 1, text.count)
                if line.isEmpty { continue }
                if line == armorBegin { continue }
                if line == armorEnd { sawEnd = true; continue }
                guard !sawEnd else { throw VaultError.corrupt("the encrypted export has text after its END line") }
                guard let d = Data(base64Encoded: line) else { throw VaultError.corrupt("the encrypted export's base64 is damaged") }
                bytes += d
                if nl >= text.count { break }
            }
            text.removeSubrange(0..<start)
            // The writer's lines are 64 characters: text without a line break this long is not
            // an export, and is not held while more of it arrives.
            guard text.count <= Self.lineLimit else { throw VaultError.corrupt("the encrypted export has a line longer than \(Self.lineLimit >> 10) KiB") }
        }

        /// The longest line of the text form read.
        static let lineLimit = 64 << 10
    }
}
