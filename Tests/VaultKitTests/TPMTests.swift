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
        #expect(throws: TPMFailure.foreignObject) { try other.device.unseal(object, authValue: try SecretBytes(zeroed: 0)) }
    }

    @Test func aPCR7BoundObjectFailsOnceThePCRChanges() throws {
        let tpm = try SoftwareTPM()
        let secret = try SecretBytes.random(count: 32)
        let object = try tpm.device.seal(secret, authValue: try SecretBytes(zeroed: 0), policy: TPMSealPolicy(pcr7: true, dictionaryAttackProtected: false))
        let same = try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0)).isEqual(to: secret)
        #expect(same)
        try tpm.extendPCR7()
        #expect(throws: TPMFailure.policyFailed) { try tpm.device.unseal(object, authValue: try SecretBytes(zeroed: 0)) }
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
        #expect(throws: TPMFailure.wrongAuthorization) { try tpm.device.unseal(object, authValue: wrong) }
        #expect(try tpm.device.dictionaryAttackState().triesLeft == 1)
        #expect(throws: TPMFailure.wrongAuthorization) { try tpm.device.unseal(object, authValue: wrong) }
        #expect(try tpm.device.dictionaryAttackState().lockedOut)
        #expect(throws: TPMFailure.lockout) { try tpm.device.unseal(object, authValue: auth) }

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
