public import VaultKit
internal import VaultSystem

/// Why a key file was not read.
public enum SSHKeyFileError: Error, Equatable, Sendable {
    /// The file is encrypted and no passphrase was given.
    case passphraseNeeded
    /// The passphrase did not open it (the check words differ, or GCM's tag).
    case wrongPassphrase
    /// Not a private key file vault reads, or a damaged one (why).
    case unreadable(String)
}

/// OpenSSH's private key files: `openssh-key-v1` (PROTOCOL.key; unencrypted, or under a
/// passphrase with bcrypt_pbkdf and aes256-ctr or aes256-gcm@openssh.com), and the PEM / PKCS#8
/// files `ssh-keygen -m PEM|PKCS8` and OpenSSL write (through libcrypto's decoders). vault
/// writes the unencrypted openssh-key-v1 form (what `ssh-keygen -N ''` writes): the vault seals it.
public enum SSHKeyFile {
    static let magic = Array("openssh-key-v1".utf8) + [0]
    static let begin = "-----BEGIN OPENSSH PRIVATE KEY-----"
    static let end = "-----END OPENSSH PRIVATE KEY-----"

    /// The key and comment of `file`. `passphrase` is called only for an encrypted file
    /// (nil: none can be had). The file's bytes are the caller's to wipe.
    /// - Throws: `SSHKeyFileError`; `SSHWireError` for a key that does not hold together.
    public static func read(_ file: [UInt8], passphrase: () throws -> [UInt8]?) throws -> (key: SSHPrivateKey, comment: String) {
        let text = String(decoding: file, as: UTF8.self)
        if text.contains(begin) {
            var blob = try armored(text)
            defer { wipe(&blob) }
            return try readV1(blob, passphrase: passphrase)
        }
        if file.starts(with: magic) { return try readV1(file, passphrase: passphrase) }
        return try readPEM(file, passphrase: passphrase)
    }

    /// The base64 between the armour lines, decoded.
    private static func armored(_ text: String) throws(SSHKeyFileError) -> [UInt8] {
        guard let start = text.byteRange(of: begin), let stop = text.byteRange(of: end, from: start.upperBound) else {
            throw .unreadable("no end line")
        }
        let body = text[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
        guard let bytes = Base64.decode(String(body)) else { throw .unreadable("its base64") }
        return bytes
    }

    private static func readV1(_ blob: [UInt8], passphrase: () throws -> [UInt8]?) throws -> (key: SSHPrivateKey, comment: String) {
        guard blob.starts(with: magic) else { throw SSHKeyFileError.unreadable("not an openssh-key-v1 file") }
        var r = SSHReader(Array(blob[magic.count...]))
        let cipher: String, kdf: String, kdfOptions: [UInt8], publicBlob: [UInt8]
        var sealed: [UInt8]
        do {
            cipher = try r.text()
            kdf = try r.text()
            kdfOptions = try r.string()
            guard try r.uint32() == 1 else { throw SSHKeyFileError.unreadable("a file of more than one key") }
            publicBlob = try r.string()
            sealed = try r.string()
        } catch let e as SSHWireError { throw SSHKeyFileError.unreadable("its header (\(e))") }
        defer { wipe(&sealed) }
        var plain: [UInt8]
        switch (cipher, kdf) {
        case ("none", "none"):
            plain = sealed
        case ("aes256-ctr", "bcrypt"), ("aes256-gcm@openssh.com", "bcrypt"):
            guard var pass = try passphrase() else { throw SSHKeyFileError.passphraseNeeded }
            defer { wipe(&pass) }
            var o = SSHReader(kdfOptions)
            let salt: [UInt8], rounds: UInt32
            do {
                salt = try o.string()
                rounds = try o.uint32()
            } catch { throw SSHKeyFileError.unreadable("its bcrypt parameters") }
            let gcm = cipher.hasPrefix("aes256-gcm")
            let ivLength = gcm ? 12 : 16
            var derived = try BcryptPBKDF.derive(passphrase: pass, salt: salt, rounds: Int(rounds), length: 32 + ivLength)
            defer { wipe(&derived) }
            let key = Array(derived[..<32]), iv = Array(derived[32...])
            if gcm {
                guard let tag = try? r.raw(16) else { throw SSHKeyFileError.unreadable("no GCM tag") }
                do { plain = try LibCrypto.decrypt(sealed, cipher: .aes256GCM, key: key, iv: iv, tag: tag) } catch is LibCrypto.Failure {
                    throw SSHKeyFileError.wrongPassphrase
                }
            } else {
                guard sealed.count % 16 == 0 else { throw SSHKeyFileError.unreadable("an encrypted part of \(sealed.count) bytes") }
                plain = try LibCrypto.decrypt(sealed, cipher: .aes256CTR, key: key, iv: iv)
            }
        default:
            throw SSHKeyFileError.unreadable("cipher \(cipher) with kdf \(kdf) (vault reads none, aes256-ctr and aes256-gcm@openssh.com with bcrypt)")
        }
        defer { wipe(&plain) }
        var p = SSHReader(plain)
        guard let check1 = try? p.uint32(), let check2 = try? p.uint32() else { throw SSHKeyFileError.unreadable("a short private part") }
        guard check1 == check2 else { throw cipher == "none" ? SSHKeyFileError.unreadable("its check words") : SSHKeyFileError.wrongPassphrase }
        let key = try SSHPrivateKey.readAgentEncoding(from: &p)
        let comment = try p.text()
        // The padding is 1, 2, 3...
        var k: UInt8 = 1
        while !p.isAtEnd {
            guard try p.byte() == k else { throw SSHKeyFileError.unreadable("its padding") }
            k &+= 1
        }
        guard key.publicKey.blob == publicBlob else { throw SSHKeyFileError.unreadable("a public key that is not the private key's") }
        return (key, comment)
    }

    private static func readPEM(_ file: [UInt8], passphrase: () throws -> [UInt8]?) throws -> (key: SSHPrivateKey, comment: String) {
        let text = String(decoding: file, as: UTF8.self)
        guard text.contains("-----BEGIN ") && text.contains("PRIVATE KEY-----") else {
            throw SSHKeyFileError.unreadable("not a private key file (openssh-key-v1, PEM or PKCS#8)")
        }
        let encrypted = text.contains("ENCRYPTED") || text.contains("Proc-Type: 4,ENCRYPTED")
        var pass: [UInt8]?
        if encrypted {
            guard let given = try passphrase() else { throw SSHKeyFileError.passphraseNeeded }
            pass = given
        }
        defer { if pass != nil { wipe(&pass!) } }
        guard var encoding = try LibCrypto.decodePrivateKey(file, passphrase: pass) else {
            throw encrypted ? SSHKeyFileError.wrongPassphrase : SSHKeyFileError.unreadable("libcrypto could not read it")
        }
        defer { wipe(&encoding) }
        var r = SSHReader(encoding)
        return (try SSHPrivateKey.readAgentEncoding(from: &r), "")
    }

    /// `key` with `comment` as an unencrypted openssh-key-v1 file, armoured (70 base64
    /// characters a line, as ssh-keygen writes it), in guarded memory.
    public static func write(_ key: SSHPrivateKey, comment: String) throws -> SecretBytes {
        var inner = SSHWriter()
        let check = randomBytes(4)
        inner.raw(check)
        inner.raw(check)
        var encoding = key.agentEncoding()
        inner.raw(encoding)
        wipe(&encoding)
        inner.text(comment)
        var k: UInt8 = 1
        while inner.bytes.count % 8 != 0 {
            inner.byte(k)
            k += 1
        }
        var w = SSHWriter()
        w.raw(magic)
        w.text("none")
        w.text("none")
        w.string([])
        w.uint32(1)
        w.string(SSHPublicKey(kind: key.publicKey.kind).blob)
        w.string(inner.bytes)
        wipe(&inner.bytes)
        var b64 = Array(Base64.encode(w.bytes).utf8)
        wipe(&w.bytes)
        defer { wipe(&b64) }
        var out = Array((begin + "\n").utf8)
        var i = 0
        while i < b64.count {
            out += b64[i..<min(i + 70, b64.count)]
            out.append(10)
            i += 70
        }
        out += Array((end + "\n").utf8)
        defer { wipe(&out) }
        return try SecretBytes(copying: out)
    }
}
