/// The enrolment rules: which proof enrolling needs, that enrolling or removing a finger gives the
/// vault named new keys bound to the new prints (every other vault then needs its passcode once),
/// and what a damaged authority state means for an owner who just gave a passcode.
extension UnlockedVault {
    /// Enrols a finger through `authority` with this vault's proof. Once any vault is bound,
    /// enrolling needs a bound vault's proof: a vault not bound yet is bound first.
    /// - Parameter finger: nil picks the first free finger in the usual order.
    package func enroll(finger: String?, through authority: any KeyAuthority) throws -> EnrolledFinger {
        try proven(.enroll, by: authority, subject: AuthorityProofMAC.fingerSubject(finger)) {
            try authority.enroll(finger: finger, sensor: nil, proof: $0, label: store.location.name)
        }
    }

    /// `vault enroll`: enrols, then rotates this vault so it is bound to the new set of prints.
    package func enrollAndRotate(finger: String?, through authority: any KeyAuthority, passcode: borrowing SecretBytes,
                                progress: (Int, Int) -> Void = { _, _ in }) throws -> (EnrolledFinger, RotationResult) {
        let done = try enroll(finger: finger, through: authority)
        // A finger enrolled before any vault was bound is this owner's own: confirmed here.
        let result = try rotate(passcode: passcode, kdf: nil, recovery: .keep, authority: authority,
                                confirm: done.confirmed ? [] : [done.finger], progress: progress)
        authority.recordUnlock(of: result.vault)
        return (done, result)
    }

    /// `vault unenroll`: removes the finger's prints, then rotates this vault onto what remains.
    /// - Throws: `.fingerNotEnrolled` (3) when the finger is not enrolled.
    package func unenrollAndRotate(finger: String, through authority: any KeyAuthority, passcode: borrowing SecretBytes,
                                  progress: (Int, Int) -> Void = { _, _ in }) throws -> RotationResult {
        let gone = try proven(.unenroll, by: authority, subject: AuthorityProofMAC.fingerSubject(finger)) {
            try authority.unenroll(finger: finger, proof: $0, label: store.location.name)
        }
        guard !gone.isEmpty else { throw VaultError.fingerNotEnrolled(finger) }
        return try rotate(passcode: passcode, kdf: nil, recovery: .keep, authority: authority, progress: progress)
    }
}

extension KeyAuthority {
    /// The enrolled fingers, none when the authority cannot be reached now (a rotation then
    /// makes no fingerprint slot instead of failing).
    func fingersIfReachable() throws -> [EnrolledFinger] {
        do {
            return try fingers()
        } catch VaultError.biometryNotAvailable {
            return []
        }
    }

    /// For an owner who just proved a passcode: a damaged prints state is reset (it could never
    /// yield a match again, and would block enrolment forever). - Returns: why it was reset, or nil.
    package func resetIfDamaged() throws -> String? {
        do {
            _ = try fingers()
            return nil
        } catch VaultError.biometryNotAvailable {
            // Not reachable now (vault-authd down): nothing to reset; fingerprint requests say why.
            return nil
        } catch VaultError.authorityDamaged(let why) {
            try resetPrints(proof: nil)
            return why
        } catch let e as VaultError {
            // A TPM-sealed secret this TPM cannot open (PCR 7 changed, another machine's state)
            // is as unusable as a damaged file: the authority seals a new one.
            switch e {
            case .tpmPolicyFailed, .tpmForeign:
                try resetPrints(proof: nil)
                return e.message
            default:
                throw e
            }
        }
    }
}
