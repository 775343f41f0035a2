import FoundationEssentials
import VaultSystem

/// How a key authority keeps its device secret at rest.
package enum DeviceSecretSealing: Equatable, Sendable {
    /// `STATE/device-secret` (32 bytes, 0600): protected by file permissions only.
    case filePermissions
    /// `STATE/device-secret.tpm`: sealed by `device`'s TPM under its storage key (`NODA`), and with
    /// `pcr7` opening only while PCR 7 (the Secure Boot state) is what it was at sealing.
    case tpm(TPMDevice, pcr7: Bool)

    /// What protects the secrets, as `vault doctor` says it.
    package var protection: SecretProtection {
        switch self {
        case .filePermissions: .filePermissions
        case .tpm(_, let pcr7): pcr7 ? .tpmPCR7 : .tpm
        }
    }
}

/// What protects a key authority's secrets at rest (`vault doctor`, `vault status --json`).
package enum SecretProtection: String, Codable, Sendable {
    /// Sealed by the machine's TPM: a copy of the disk is useless elsewhere.
    case tpm
    /// Sealed by the TPM and bound to PCR 7.
    case tpmPCR7 = "tpm-pcr7"
    /// In a file only the authority's user can read.
    case filePermissions = "file-permissions"

    /// One line for `vault doctor`.
    package var description: String {
        switch self {
        case .tpm: "sealed by the TPM (a copy of the disk opens nothing elsewhere)"
        case .tpmPCR7: "sealed by the TPM, bound to PCR 7 (Secure Boot state)"
        case .filePermissions: "protected by file permissions only (no TPM): a copy of the disk holds the device secret"
        }
    }
}

/// A sealed TPM object as stored: `len‖"vault-tpm-sealed-v1"`, flags (u32: bit 0 PCR 7 policy,
/// bit 1 dictionary-attack protected), `len‖TPM2B_PUBLIC`, `len‖TPM2B_PRIVATE` (lengths u32
/// big-endian).
package struct TPMSealedRecord: Equatable, Sendable {
    /// The object.
    package var object: TPMSealedObject
    /// What it asks of an unseal.
    package var policy: TPMSealPolicy

    static let label = "vault-tpm-sealed-v1"

    /// Creates a record.
    package init(object: TPMSealedObject, policy: TPMSealPolicy) {
        self.object = object
        self.policy = policy
    }

    /// The stored bytes.
    package var encoded: [UInt8] {
        var w = ByteWriter(label: TPMSealedRecord.label)
        w.append(UInt32((policy.pcr7 ? 1 : 0) | (policy.dictionaryAttackProtected ? 2 : 0)))
        w.append(object.publicPart)
        w.append(object.privatePart)
        return w.bytes
    }

    /// Parses stored bytes. - Throws: `.corrupt` naming `what`.
    package init(encoded bytes: [UInt8], what: String) throws {
        var at = 0
        func u32() throws -> Int {
            guard at + 4 <= bytes.count else { throw VaultError.corrupt("\(what) is truncated") }
            defer { at += 4 }
            return bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) }
        }
        func field() throws -> [UInt8] {
            let n = try u32()
            guard n <= 4096, at + n <= bytes.count else { throw VaultError.corrupt("\(what) is truncated") }
            defer { at += n }
            return Array(bytes[at..<at + n])
        }
        guard try field() == Array(TPMSealedRecord.label.utf8) else { throw VaultError.corrupt("\(what) is not a sealed TPM object") }
        let flags = try u32()
        let pub = try field(), priv = try field()
        guard at == bytes.count, flags & ~3 == 0 else { throw VaultError.corrupt("\(what) is not a sealed TPM object") }
        object = TPMSealedObject(publicPart: pub, privatePart: priv)
        policy = TPMSealPolicy(pcr7: flags & 1 != 0, dictionaryAttackProtected: flags & 2 != 0)
    }
}

extension TPMFailure {
    /// The vault error this failure means for `what` (a file, a vault's passcode slot).
    package func vaultError(_ what: String) -> VaultError {
        switch self {
        case .unreachable(let m): .tpmUnavailable("\(what) needs the TPM, which does not answer (\(m))")
        case .foreignObject, .malformedObject: .tpmForeign(what)
        case .policyFailed: .tpmPolicyFailed(what)
        case .lockout: .tpmLockout(seconds: nil)
        case .wrongAuthorization, .wrongAuthorizationNotCounted: .authenticationFailed("the TPM refused the authorization for \(what)")
        case .outOfObjectMemory: .failure("the TPM has no free object slot (\(what))", hint: "another program holds TPM objects; try again")
        case .other(let call, let code, let text): .failure("the TPM failed: \(call): \(text) (0x\(String(code, radix: 16)))")
        }
    }
}

/// The device secret of a key authority, in `folder`: in clear (`device-secret`, file
/// permissions only) or sealed by the TPM (`device-secret.tpm`). With a TPM, a clear secret left
/// from before is sealed and its file overwritten and removed; a sealed one is never silently
/// replaced by a fresh clear one.
enum DeviceSecretFile {
    static func clearPath(_ folder: String) -> String { folder + "/device-secret" }
    static func sealedPath(_ folder: String) -> String { folder + "/device-secret.tpm" }

    /// The secret, made (and sealed) on first use.
    /// - Throws: `.tpmUnavailable` (a sealed secret and no TPM, or a TPM that does not answer),
    ///   `.tpmForeign` (another TPM's blob), `.tpmPolicyFailed` (PCR 7 changed), `.corrupt`, `.io`.
    static func load(_ folder: String, sealing: DeviceSecretSealing) throws -> SecretBytes {
        let clear = clearPath(folder), sealed = sealedPath(folder)
        guard case .tpm(let device, let pcr7) = sealing else {
            if FileSystem.exists(sealed) {
                throw VaultError.tpmUnavailable("the device secret in \(folder) is sealed by a TPM, and none is configured")
            }
            return try loadClear(clear)
        }
        let policy = TPMSealPolicy(pcr7: pcr7, dictionaryAttackProtected: false)
        if let bytes = try PrivateFiles.read(sealed, limit: 16 << 10) {
            let record = try TPMSealedRecord(encoded: bytes, what: sealed)
            let secret: SecretBytes
            let none = try SecretBytes(zeroed: 0)
            do throws(TPMFailure) { secret = try device.unseal(record.object, authValue: none) } catch { throw error.vaultError(sealed) }
            guard secret.count == 32 else { throw VaultError.corrupt("\(sealed) does not hold a device secret") }
            if record.policy != policy {
                // The daemon's PCR 7 setting changed: re-seal under the new policy (re-binding).
                try write(secret, sealed: sealed, device: device, policy: policy, exclusive: false)
            }
            return secret
        }
        let secret: SecretBytes
        if FileSystem.exists(clear) {
            secret = try loadClear(clear)
        } else {
            secret = try SecretBytes.random(count: 32)
        }
        if try !write(secret, sealed: sealed, device: device, policy: policy, exclusive: true) {
            // Another process sealed one first: that one is the secret.
            return try load(folder, sealing: sealing)
        }
        if FileSystem.exists(clear) { try scrub(clear) }
        return secret
    }

    /// Moves an unopenable sealed secret aside (`device-secret.tpm.old`, with the lockout record
    /// sealed under it: `auth.sealed.old`) so a fresh one can be
    /// made: what follows a passcode after PCR 7 changed or the state came from another machine.
    static func setAside(_ folder: String) throws {
        let sealed = sealedPath(folder)
        guard FileSystem.exists(sealed) else { return }
        do {
            try FileSystem.rename(sealed, to: sealed + ".old")
            // Sealed under the old secret, the lockout record would read as damaged (locked out).
            if FileSystem.exists(folder + "/auth.sealed") { try FileSystem.rename(folder + "/auth.sealed", to: folder + "/auth.sealed.old") }
        } catch { throw error.vaultError }
    }

    @discardableResult
    private static func write(_ secret: borrowing SecretBytes, sealed: String, device: TPMDevice, policy: TPMSealPolicy,
                              exclusive: Bool) throws -> Bool {
        let object: TPMSealedObject
        let none = try SecretBytes(zeroed: 0)
        do throws(TPMFailure) { object = try device.seal(secret, authValue: none, policy: policy) } catch { throw error.vaultError(sealed) }
        do {
            return try VaultSystem.AtomicFile.write(TPMSealedRecord(object: object, policy: policy).encoded, to: sealed, exclusive: exclusive)
        } catch { throw error.vaultError }
    }

    private static func loadClear(_ path: String) throws -> SecretBytes {
        if try PrivateFiles.read(path, limit: 64) == nil {
            let s = try SecretBytes.random(count: 32)
            try s.withUnsafeBytes { b in
                do throws(SystemError) { try VaultSystem.AtomicFile.write(b, to: path, exclusive: true) } catch { throw error.vaultError }
            }
        }
        // Read back: when two processes start at once, the first writer's secret is the one.
        guard var data = try PrivateFiles.read(path, limit: 64), data.count == 32 else {
            throw VaultError.corrupt("\(path) is not a device secret")
        }
        defer { wipe(&data) }
        return try SecretBytes(copying: data)
    }

    /// Overwrites a clear secret's file with zeros (synced) before removing it.
    private static func scrub(_ path: String) throws {
        do {
            try FileSystem.overwrite(path, with: [UInt8](repeating: 0, count: 32))
            try FileSystem.remove(path)
        } catch { throw error.vaultError }
    }
}
