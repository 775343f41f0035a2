import Foundation
import Testing
@testable import VaultKit

/// tpm2-tss through `TSS2.swift`, against a real swtpm per test.
@Suite(.enabled(if: SoftwareTPM.available, "swtpm is not installed (apt-get install swtpm swtpm-tools tpm2-tools)"))
struct TPMTests {
    @Test func sealedSecretUnsealsOnlyOnItsOwnTPM() throws {
        let tpm = try SoftwareTPM()
        let secret = try SecretBytes.random(count: 32)
        let object = try tpm.device.seal(secret, authValue: try SecretBytes(zeroed: 0), policy: TPMSealPolicy(pcr7: false, dictionaryAttackProtected: false))
        #expect(!object.privatePart.isEmpty)
        // The stored halves never contain the secret.
        #expect(!containsSubsequence(object.publicPart + object.privatePart, secret.exposedBytes()))
        let back = try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0))
        let same = back.isEqual(to: secret)
        #expect(same)
        // Four unseals in a row: every loaded object is flushed (swtpm has 3 transient slots).
        for _ in 0..<4 { _ = try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0)) }

        let other = try SoftwareTPM()
        #expect(throws: TPMFailure.foreignObject) { _ = try other.device.unseal(object, authValue: try SecretBytes(zeroed: 0)) }
    }

    @Test func fiftySealsAndUnsealsInARowFlushEveryObjectAndAreTimed() throws {
        let tpm = try SoftwareTPM()
        var seal: [Double] = [], unseal: [Double] = []
        for _ in 0..<50 {
            let secret = try SecretBytes.random(count: 32)
            var t = Date()
            let object = try tpm.device.seal(secret, authValue: try SecretBytes(zeroed: 0), policy: TPMSealPolicy(pcr7: false, dictionaryAttackProtected: false))
            seal.append(Date().timeIntervalSince(t) * 1000)
            t = Date()
            let back = try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0))
            unseal.append(Date().timeIntervalSince(t) * 1000)
            let same = back.isEqual(to: secret)
            #expect(same)
        }
        func median(_ v: [Double]) -> String { String(format: "%.1f", v.sorted()[v.count / 2]) }
        // Not a timed test: the figures go to docs/performance.md.
        print("swtpm: seal median \(median(seal)) ms, unseal median \(median(unseal)) ms (50 each, one connection per call)")
    }

    @Test func aPCR7BoundObjectFailsOnceThePCRChanges() throws {
        let tpm = try SoftwareTPM()
        let secret = try SecretBytes.random(count: 32)
        let object = try tpm.device.seal(secret, authValue: try SecretBytes(zeroed: 0), policy: TPMSealPolicy(pcr7: true, dictionaryAttackProtected: false))
        let same = try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0)).isEqual(to: secret)
        #expect(same)
        try tpm.extendPCR7()
        #expect(throws: TPMFailure.policyFailed) { _ = try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0)) }
    }

    @Test func wrongAuthValuesCountUntilTheTPMLocks() throws {
        let tpm = try SoftwareTPM()
        try tpm.setDictionaryAttack(maxTries: 2, recoverySeconds: 600)
        let auth = try SecretBytes.random(count: 32), wrong = try SecretBytes.random(count: 32)
        let secret = try SecretBytes.random(count: 32)
        let object = try tpm.device.seal(secret, authValue: auth, policy: TPMSealPolicy(pcr7: false, dictionaryAttackProtected: true))
        let same = try tpm.device.unseal(object, authValue: auth).isEqual(to: secret)
        #expect(same)
        #expect(try tpm.device.dictionaryAttackState() == TPMDictionaryAttackState(failedTries: 0, maxTries: 2, recoverySeconds: 600))
        #expect(throws: TPMFailure.wrongAuthorization) { _ = try tpm.device.unseal(object, authValue: wrong) }
        #expect(try tpm.device.dictionaryAttackState().triesLeft == 1)
        #expect(throws: TPMFailure.wrongAuthorization) { _ = try tpm.device.unseal(object, authValue: wrong) }
        #expect(try tpm.device.dictionaryAttackState().lockedOut)
        #expect(throws: TPMFailure.lockout) { _ = try tpm.device.unseal(object, authValue: auth) }

        // A NODA object (the daemon's device secret) still opens during the lockout.
        let noda = try tpm.device.seal(secret, authValue: try SecretBytes(zeroed: 0), policy: TPMSealPolicy(pcr7: false, dictionaryAttackProtected: false))
        let nodaSame = try tpm.device.unseal(noda, authValue: try SecretBytes(zeroed: 0)).isEqual(to: secret)
        #expect(nodaSame)
    }

    @Test func anUnreachableTPMIsNamed() throws {
        let device = TPMDevice(tcti: "swtpm:path=/nonexistent/tpm.sock")
        #expect {
            try device.dictionaryAttackState()
        } throws: { e in
            guard case TPMFailure.unreachable(let m) = e else { return false }
            return m.contains("/nonexistent/tpm.sock")
        }
    }
}

func containsSubsequence(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
        if Array(haystack[i..<(i + needle.count)]) == needle { return true }
    }
    return false
}

/// The passcode on the TPM (`vault settings --passcode-on-tpm`), on real swtpms.
@Suite(.enabled(if: SoftwareTPM.available, "swtpm is not installed (apt-get install swtpm swtpm-tools tpm2-tools)"))
struct PasscodeOnTPMTests {
    /// A vault at `root` whose passcode is on `tpm`; returns its recovery key.
    func makeVault(_ root: TempRoot, tpm: SoftwareTPM) throws -> String {
        var location = try root.location()
        location.tpm = tpm.device
        let created = try VaultStore.create(at: location, passcode: try secret("right passcode"), kdf: fastKDF)
        try created.vault.add(Item(name: "db", password: "s3cret"))
        try created.vault.changePasscode(to: try secret("right passcode"), kdf: nil, onTPM: true)
        return created.recoveryKey
    }

    func store(_ root: TempRoot, tpm: SoftwareTPM?) throws -> VaultStore {
        var location = try root.location()
        location.tpm = tpm?.device
        return try VaultStore.open(location)
    }

    @Test func theRightPasscodeOpensWrongOnesCountOnTheTPMUntilItLocksAndTheRecoveryKeyOpensElsewhere() throws {
        let tpm = try SoftwareTPM()
        try tpm.setDictionaryAttack(maxTries: 3, recoverySeconds: 600)
        let root = TempRoot()
        let recovery = try makeVault(root, tpm: tpm)
        let vault = try store(root, tpm: tpm)
        #expect(try vault.slot(.passcode)?.passcodeIsOnTPM == true)
        #expect(try vault.unlock(passcode: try secret("right passcode")).item(named: "db").password == "s3cret")

        #expect(throws: VaultError.authenticationFailed("wrong passcode, 2 tries before the TPM locks")) {
            _ = try vault.unlock(passcode: try secret("guess 1"))
        }
        #expect(try tpm.device.dictionaryAttackState().failedTries == 1, "counted by the TPM, not by a file")
        #expect(throws: VaultError.authenticationFailed("wrong passcode, 1 try before the TPM locks")) {
            _ = try vault.unlock(passcode: try secret("guess 2"))
        }
        #expect(throws: VaultError.tpmLockout(seconds: 600)) { _ = try vault.unlock(passcode: try secret("guess 3")) }
        // Locked: even the right passcode is refused until the recovery time passes.
        #expect(throws: VaultError.tpmLockout(seconds: 600)) { _ = try vault.unlock(passcode: try secret("right passcode")) }
        #expect(VaultError.tpmLockout(seconds: 600).exitCode == 17)
        #expect(VaultError.tpmLockout(seconds: 600).message.contains("lifts in about 600 s"))

        // The recovery key opens the vault copied to a machine with another TPM; the passcode there
        // meets a TPM that cannot open the slot's object.
        let elsewhere = TempRoot()
        try FileManager.default.createDirectory(atPath: elsewhere.path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try FileManager.default.copyItem(atPath: try root.location().folder, toPath: try elsewhere.location().folder)
        let otherTPM = try SoftwareTPM()
        let copy = try store(elsewhere, tpm: otherTPM)
        #expect(try copy.unlock(recoveryKey: recovery).item(named: "db").password == "s3cret")
        #expect {
            _ = try copy.unlock(passcode: try secret("right passcode"))
        } throws: { e in
            guard case VaultError.tpmForeign = e else { return false }
            return (e as! VaultError).exitCode == 5 && (e as! VaultError).message.contains("another machine's TPM")
        }
    }

    @Test func anOfflineAttackOnACopiedDatabaseWithTheRightPasscodeButWithoutTheTPMFails() throws {
        let tpm = try SoftwareTPM()
        let root = TempRoot()
        _ = try makeVault(root, tpm: tpm)
        // No TPM reachable: named, exit 15, pointing at the recovery key.
        let offline = try store(root, tpm: nil)
        #expect {
            _ = try offline.unlock(passcode: try secret("right passcode"))
        } throws: { e in
            guard let v = e as? VaultError, case .tpmUnavailable = v else { return false }
            return v.exitCode == 15 && v.message.contains("TPM") && v.hint?.contains("recover") == true
        }
        // What an attacker with the file computes: Argon2id of the right passcode under the slot's
        // parameters. Without the TPM's unseal it does not open the slot.
        let slot = try #require(try offline.slot(.passcode))
        let a = try PasswordKDF.deriveKey(password: try secret("right passcode"), parameters: try slot.passcodeParameters())
        let ad = offline.slotAD(id: slot.id, kind: slot.kind, params: slot.params, generation: slot.generation)
        #expect(throws: CryptoError.authenticationFailed) { _ = try AEAD.open(slot.wrapped, key: a, nonce: slot.nonce, associatedData: ad) }
        // Nor does the slot's object leak the secret: it is bound to the TPM that made it.
        let t = try #require(try slot.passcodeTPM())
        #expect(throws: VaultError.self) {
            _ = try PasscodeTPM.unseal(t, a: a, vaultID: offline.vaultID, tpm: try SoftwareTPM().device, what: "copy")
        }
        // With the TPM, the same passcode opens.
        #expect(try store(root, tpm: tpm).unlock(passcode: try secret("right passcode")).item(named: "db").password == "s3cret")
    }

    @Test func rotationKeepsItOnTheTPMAndTurningItOffNeedsThePasscodeAndRewrapsTheSlot() throws {
        let tpm = try SoftwareTPM()
        let root = TempRoot()
        _ = try makeVault(root, tpm: tpm)
        let opened = try store(root, tpm: tpm).unlock(passcode: try secret("right passcode"))
        let rotated = try opened.rotate(passcode: try secret("right passcode"), kdf: nil, recovery: .keep, authority: nil).vault
        #expect(try store(root, tpm: tpm).slot(.passcode)?.passcodeIsOnTPM == true, "a rotation keeps it on the TPM")
        try rotated.changePasscode(to: try secret("right passcode"), kdf: nil, onTPM: false)
        let plain = try store(root, tpm: nil)
        #expect(try plain.slot(.passcode)?.passcodeIsOnTPM == false)
        #expect(try plain.unlock(passcode: try secret("right passcode")).item(named: "db").password == "s3cret")
    }
}

/// The authority's device secret at rest with a TPM (what vault-authd does per uid).
@Suite(.enabled(if: SoftwareTPM.available, "swtpm is not installed (apt-get install swtpm swtpm-tools tpm2-tools)"))
struct SealedDeviceSecretTests {
    @Test func aClearSecretIsSealedScrubbedAndNeverFallsBackToAFile() throws {
        let tpm = try SoftwareTPM()
        let root = TempRoot()
        let folder = root.path + "/authority"
        _ = try EmbeddedKeyAuthority(folder: folder)
        let clear = try #require(FileManager.default.contents(atPath: folder + "/device-secret"))
        #expect(clear.count == 32)

        let sealedAuthority = try EmbeddedKeyAuthority(folder: folder, sealing: .tpm(tpm.device, pcr7: false))
        #expect(sealedAuthority.secretProtection == .tpm)
        #expect(!FileManager.default.fileExists(atPath: folder + "/device-secret"), "the clear file is removed")
        let record = try TPMSealedRecord(encoded: Array(try #require(FileManager.default.contents(atPath: folder + "/device-secret.tpm"))),
                                         what: "blob")
        #expect(record.policy == TPMSealPolicy(pcr7: false, dictionaryAttackProtected: false))
        #expect(try tpm.device.unseal(record.object, authValue: try SecretBytes(zeroed: 0)).exposedBytes() == Array(clear),
                "the same secret: bindings made before still open")
        for name in try FileManager.default.contentsOfDirectory(atPath: folder) {
            let data = try #require(FileManager.default.contents(atPath: folder + "/" + name))
            #expect(data.range(of: clear) == nil, "\(name) holds the device secret in clear")
        }

        // Without the TPM the daemon does not quietly make a new clear secret.
        #expect {
            _ = try EmbeddedKeyAuthority(folder: folder)
        } throws: { e in
            guard case VaultError.tpmUnavailable(let m) = e else { return false }
            return m.contains("sealed by a TPM")
        }
        // Turning PCR 7 binding on re-seals the same secret under the policy; an extend then fails it.
        _ = try EmbeddedKeyAuthority(folder: folder, sealing: .tpm(tpm.device, pcr7: true))
        let bound = try TPMSealedRecord(encoded: Array(try #require(FileManager.default.contents(atPath: folder + "/device-secret.tpm"))),
                                        what: "blob")
        #expect(bound.policy.pcr7)
        try tpm.extendPCR7()
        #expect {
            _ = try EmbeddedKeyAuthority(folder: folder, sealing: .tpm(tpm.device, pcr7: true))
        } throws: { e in
            guard let v = e as? VaultError, case .tpmPolicyFailed = v else { return false }
            return v.exitCode == 15 && v.message.contains("PCR 7") && v.hint?.contains("vault enroll") == true
        }
        // Set aside (after the owner's passcode, `vault enroll`), a new secret is sealed.
        try EmbeddedKeyAuthority.setAsideSealedSecret(in: folder)
        _ = try EmbeddedKeyAuthority(folder: folder, sealing: .tpm(tpm.device, pcr7: true))
        #expect(FileManager.default.fileExists(atPath: folder + "/device-secret.tpm.old"))
    }
}
