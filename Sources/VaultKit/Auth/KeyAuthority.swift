import Foundation

/// A reader as the vault sees it: which sensor it is, and what its chip holds.
public struct SensorIdentity: Codable, Equatable, Sendable {
    /// libfprint driver name.
    public var driver: String
    /// libfprint device id.
    public var deviceID: String
    /// Creates an identity.
    public init(driver: String, deviceID: String) {
        self.driver = driver
        self.deviceID = deviceID
    }
    /// `driver/device-id`, as bound into fingerprint slots.
    public var canonical: String { driver + "/" + deviceID }
}

/// One enrolled finger: biometric data, kept only in the key authority's sealed prints file.
public struct EnrolledPrint: Codable, Equatable, Sendable {
    /// Which finger (`right-index`...).
    public var finger: String
    /// The reader it was enrolled on.
    public var sensor: SensorIdentity
    /// libfprint's serialized print.
    public var data: [UInt8]
    /// When it was enrolled (seconds since 1970).
    public var enrolled: Int64
    /// Creates a record.
    public init(finger: String, sensor: SensorIdentity, data: [UInt8], enrolled: Int64 = unixNow()) {
        self.finger = finger
        self.sensor = sensor
        self.data = data
        self.enrolled = enrolled
    }
}

/// BLAKE2b-256 over the sorted enrolled prints, the enrolment epoch and (match-on-chip) the chip's list.
public struct DomainState: Equatable, Sendable {
    /// The 32 bytes.
    public let bytes: [UInt8]
    /// Lower-case hex, as `vault status --json` shows it.
    public var hex: String { hexString(bytes) }
}

/// The lockout counter and the passcode-unlock record.
public struct AuthRecord: Codable, Equatable, Sendable {
    /// Consecutive failed fingerprint matches.
    public var failedMatches = 0
    /// Boot id at the last passcode (or recovery) unlock.
    public var lastPasscodeBootID: String?
    /// Time of the last passcode (or recovery) unlock.
    public var lastPasscodeTime: Int64?
    /// Empty record.
    public init() {}
}

/// The seam that holds the device secret, the enrolled prints and the lockout counter. The embedded
/// implementation keeps them in files of the user; a system daemon can implement the same protocol
/// later and keep them out of the user's reach.
public protocol KeyAuthority: AnyObject {
    /// The enrolled prints.
    func prints() throws -> [EnrolledPrint]
    /// Adds a print and starts a new enrolment epoch.
    func add(_ print: EnrolledPrint) throws
    /// Forgets every enrolled print (a damaged prints file, after the owner proved a passcode) and
    /// starts a new epoch: every fingerprint slot stops working until re-bound.
    func resetPrints() throws
    /// Removes the prints of `finger` (every sensor) and starts a new epoch; returns how many went.
    func remove(finger: String) throws -> [EnrolledPrint]
    /// The domain state for a reader whose chip lists `chipPrints` (empty when not match-on-chip).
    func domainState(chipPrints: [String]) throws -> DomainState
    /// The key-encryption key of a fingerprint slot: keyed BLAKE2b of the device secret over
    /// vault id, slot id, sensor identity and domain state.
    func fingerprintSlotKey(vaultID: [UInt8], slotID: Int64, sensor: SensorIdentity, domainState: DomainState) throws -> SecretBytes
    /// The lockout record.
    func record() throws -> AuthRecord
    /// Counts a failed match; returns the new count.
    func recordFailedMatch() throws -> Int
    /// A successful match ends the run of failures (it cannot lift a lockout: there is no match then).
    func recordMatch() throws
    /// A passcode or recovery unlock: resets the lockout and remembers boot id and time.
    func recordPasscodeUnlock() throws
    /// The current boot id.
    var bootID: String { get }
    /// The clock.
    func now() -> Int64
}

/// The failed matches that lock fingerprint out.
public let lockoutThreshold = 5

/// The in-process authority: `$XDG_STATE_HOME/vault` (0700) holding `device-secret`,
/// `prints.sealed` (prints and epoch, sealed under a key derived from the device secret) and
/// `auth.sealed` (lockout counter, last passcode unlock). Files are 0600 and replaced atomically.
/// It protects against a person at the reader, not against code running as the user.
public final class EmbeddedKeyAuthority: KeyAuthority {
    /// The state folder.
    public let folder: String
    /// The current boot id (injected by tests to simulate a reboot).
    public let bootID: String
    private let clock: @Sendable () -> Int64
    private let secret: SecretBytes

    /// `$XDG_STATE_HOME/vault`, else `~/.local/state/vault`.
    public static func defaultFolder(environment: [String: String]) -> String {
        if let s = environment["XDG_STATE_HOME"], s.hasPrefix("/") { return s + "/vault" }
        return (environment["HOME"] ?? NSHomeDirectory()) + "/.local/state/vault"
    }

    /// The kernel's boot id.
    public static func currentBootID() -> String {
        (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "unknown"
    }

    /// Opens (creating on first use) the authority's state in `folder`.
    public init(folder: String, bootID: String = EmbeddedKeyAuthority.currentBootID(),
                clock: @escaping @Sendable () -> Int64 = { unixNow() }) throws {
        self.folder = folder
        self.bootID = bootID
        self.clock = clock
        try PrivateFiles.makeFolder(folder)
        try PrivateFiles.checkPrivate(folder, isDirectory: true)
        let path = folder + "/device-secret"
        try PrivateFiles.checkPrivate(path, isDirectory: false)
        if !FileManager.default.fileExists(atPath: path) {
            let s = try SecretBytes.random(count: 32)
            try AtomicFile.write(s.exposedBytes(), to: path, exclusive: true)
        }
        // Read back: when two processes start at once, the first writer's secret is the one.
        guard let data = FileManager.default.contents(atPath: path), data.count == 32 else {
            throw VaultError.corrupt("\(path) is not a device secret")
        }
        secret = try SecretBytes(copying: Array(data))
    }

    private var printsPath: String { folder + "/prints.sealed" }
    private var authPath: String { folder + "/auth.sealed" }

    private struct PrintsFile: Codable {
        var epoch: [UInt8]
        var prints: [EnrolledPrint]
    }

    private func sealedRead<T: Decodable>(_ path: String, label: String, as: T.Type) throws -> T? {
        try PrivateFiles.checkPrivate(path, isDirectory: false)
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let bytes = Array(data)
        guard bytes.count > AEAD.nonceLength else { throw VaultError.authorityDamaged("\(path) is truncated") }
        let key = try KeyedHash.deriveKey(from: secret, context: "vault/v1/authority/" + label)
        do {
            let plain = try AEAD.open(Array(bytes[AEAD.nonceLength...]), key: key, nonce: Array(bytes[..<AEAD.nonceLength]),
                                      associatedData: Array(("vault-authority-v1/" + label).utf8))
            return try plain.withUnsafeBytes { try JSONDecoder().decode(T.self, from: Data($0)) }
        } catch is CryptoError {
            throw VaultError.authorityDamaged("\(path) failed authentication (edited, or sealed under another device secret)")
        } catch is DecodingError {
            throw VaultError.authorityDamaged("\(path) is unreadable")
        }
    }

    private func sealedWrite<T: Encodable>(_ value: T, _ path: String, label: String) throws {
        let key = try KeyedHash.deriveKey(from: secret, context: "vault/v1/authority/" + label)
        let plain = try JSONEncoder().encode(value)
        let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: key, associatedData: Array(("vault-authority-v1/" + label).utf8)) }
        try AtomicFile.write(s.nonce + s.ciphertext, to: path)
    }

    private func printsFile() throws -> PrintsFile {
        try sealedRead(printsPath, label: "prints", as: PrintsFile.self) ?? PrintsFile(epoch: [], prints: [])
    }

    /// The enrolled prints.
    public func prints() throws -> [EnrolledPrint] { try printsFile().prints }

    /// Adds a print; a new random epoch makes every earlier domain state unreachable.
    public func add(_ print: EnrolledPrint) throws {
        var f = try printsFile()
        f.prints.append(print)
        f.epoch = randomBytes(16)
        try sealedWrite(f, printsPath, label: "prints")
    }

    /// Replaces the prints file with an empty one under a new epoch.
    public func resetPrints() throws {
        try sealedWrite(PrintsFile(epoch: randomBytes(16), prints: []), printsPath, label: "prints")
    }

    /// Removes a finger's prints under a new epoch; nothing is written when none matched.
    public func remove(finger: String) throws -> [EnrolledPrint] {
        var f = try printsFile()
        let gone = f.prints.filter { $0.finger == finger }
        guard !gone.isEmpty else { return [] }
        f.prints.removeAll { $0.finger == finger }
        f.epoch = randomBytes(16)
        try sealedWrite(f, printsPath, label: "prints")
        return gone
    }

    /// BLAKE2b-256 over the canonical sorted print list, the epoch and the chip's list.
    public func domainState(chipPrints: [String]) throws -> DomainState {
        let f = try printsFile()
        var lines: [String] = []
        for p in f.prints {
            let h = try KeyedHash.hash(p.data, key: [], outputLength: 32)
            lines.append("print \(p.sensor.canonical) \(p.finger) \(hexString(h))")
        }
        lines.sort()
        lines += chipPrints.sorted().map { "chip \($0)" }
        var w = ByteWriter(label: "vault-domain-state-v1")
        w.append(f.epoch)
        for l in lines { w.append(l) }
        return DomainState(bytes: try KeyedHash.hash(w.bytes, key: [], outputLength: 32))
    }

    /// Keyed BLAKE2b of the device secret over the binding.
    public func fingerprintSlotKey(vaultID: [UInt8], slotID: Int64, sensor: SensorIdentity, domainState: DomainState) throws -> SecretBytes {
        var w = ByteWriter(label: "vault-fingerprint-slot-v1")
        w.append(vaultID)
        w.append(slotID)
        w.append(sensor.canonical)
        w.append(domainState.bytes)
        return try SecretBytes(copying: try KeyedHash.hash(w.bytes, key: secret, outputLength: 32))
    }

    /// The lockout record; an altered record counts as locked out (fail closed).
    public func record() throws -> AuthRecord {
        do {
            return try sealedRead(authPath, label: "auth", as: AuthRecord.self) ?? AuthRecord()
        } catch VaultError.authorityDamaged {
            var r = AuthRecord()
            r.failedMatches = lockoutThreshold
            return r
        }
    }

    /// Counts a failed match.
    public func recordFailedMatch() throws -> Int {
        var r = try record()
        r.failedMatches += 1
        try sealedWrite(r, authPath, label: "auth")
        return r.failedMatches
    }

    /// Ends a run of failures.
    public func recordMatch() throws {
        var r = try record()
        guard r.failedMatches != 0 else { return }
        r.failedMatches = 0
        try sealedWrite(r, authPath, label: "auth")
    }

    /// Resets the lockout and remembers this passcode unlock.
    public func recordPasscodeUnlock() throws {
        var r = try record()
        r.failedMatches = 0
        r.lastPasscodeBootID = bootID
        r.lastPasscodeTime = clock()
        try sealedWrite(r, authPath, label: "auth")
    }

    /// The clock.
    public func now() -> Int64 { clock() }
}

/// Whole-file writes that never leave a half-written file: temp file, fsync, rename, fsync folder.
enum AtomicFile {
    static func write(_ bytes: [UInt8], to path: String, exclusive: Bool = false) throws {
        let tmp = path + ".tmp-\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw VaultError.io(path: tmp, String(cString: strerror(errno))) }
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, bytes.count - off) }
            if n < 0 { if errno == EINTR { continue }; close(fd); unlink(tmp); throw VaultError.io(path: tmp, String(cString: strerror(errno))) }
            off += n
        }
        fsync(fd)
        close(fd)
        if exclusive {
            // link() fails if another process created the file first: the first writer wins.
            if link(tmp, path) != 0 { let e = errno; unlink(tmp); if e == EEXIST { return }; throw VaultError.io(path: path, String(cString: strerror(e))) }
            unlink(tmp)
        } else if rename(tmp, path) != 0 {
            unlink(tmp)
            throw VaultError.io(path: path, String(cString: strerror(errno)))
        }
        let dir = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY)
        if dir >= 0 { fsync(dir); close(dir) }
    }
}
