/// A key authority that cannot be reached (the system daemon is down or absent): every
/// fingerprint request is exit 15 naming why, while the passcode and the recovery key still open
/// every vault (their unlocks simply cannot be recorded: no lockout is reset, no clock restarted).
package final class UnreachableAuthority: KeyAuthority {
    /// The kind that was asked for.
    package let kind: AuthorityKind
    /// Why it cannot be reached.
    package let reason: String

    /// An authority of `kind` that does not answer, for `reason`.
    package init(kind: AuthorityKind, reason: String) {
        self.kind = kind
        self.reason = reason
    }

    private var unavailable: VaultError { .biometryNotAvailable(reason) }

    package func fingers() throws -> [EnrolledFinger] { throw unavailable }
    package func reader(prefer: SensorIdentity?) throws -> SensorIdentity { throw unavailable }
    /// A challenge no one will check (the passcode path asks for one to record the unlock).
    package func challenge() throws -> [UInt8] { randomBytes(32) }
    package func bind(_ request: BindRequest, proofKey: borrowing SecretBytes) throws -> BindingGrant {
        throw unavailable
    }
    package func unlock(_ slot: SlotReference, rules: PasscodeRules, prompt: String, events: (AuthorityEvent) -> Void) throws -> UnlockGrant {
        throw unavailable
    }
    package func verify(_ slot: SlotReference, nonce: [UInt8], reuse: Int, prompt: String, events: (AuthorityEvent) -> Void) throws -> FreshMatchToken {
        throw unavailable
    }
    /// Nothing can be recorded: the caller says so (the vault opens all the same).
    package func recordPasscodeUnlock(_ proof: AuthorityProof) throws -> PasscodeRecord { throw VaultError.failure(reason) }
    /// Nothing can be told (a later proof brings the authority in step).
    package func rekey(_ proof: AuthorityProof, proofKey: borrowing SecretBytes) throws -> PasscodeRecord { throw VaultError.failure(reason) }
    package func reregister(vaultID: [UInt8], proofKey: borrowing SecretBytes, label: String?, prompt: String,
                           events: (AuthorityEvent) -> Void) throws -> PasscodeRecord { throw unavailable }
    /// No wait can be counted here.
    package func beginPasscodeAttempt(vaultID: [UInt8]) throws -> Int { 0 }
    /// Nothing is counted.
    package func recordPasscodeFailure(vaultID: [UInt8]) throws {}
    package func enroll(finger: String?, sensor: SensorIdentity?, proof: AuthorityProof?, label: String?) throws -> EnrolledFinger { throw unavailable }
    package func unenroll(finger: String, proof: AuthorityProof?, label: String?) throws -> [EnrolledFinger] { throw unavailable }
    package func resetPrints(proof: AuthorityProof?) throws { throw unavailable }
    package func status(slot: SlotReference?, sensor: SensorIdentity?, rules: PasscodeRules) throws -> AuthorityStatus {
        AuthorityStatus(kind: kind, fingers: [], printsError: reason, failedMatches: 0, threshold: lockoutThreshold, sensor: nil,
                        domainState: nil, bindingCurrent: slot == nil ? nil : false, passcodeDue: nil, passcodeAfterRebootDue: false)
    }
}
