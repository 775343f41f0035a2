extension AuthorityStatus {
    /// What an authority that holds nothing for the caller (no folder yet: `vault-authd` for a
    /// user who never enrolled) says in `vault status`, as `EmbeddedKeyAuthority.status` says it
    /// over a new folder: no fingers and no failures; a slot asked about is not bound; the
    /// reboot and interval rules of `rules` are due (no passcode unlock was ever recorded). There
    /// is no domain state: there are no prints to describe.
    package static func empty(kind: AuthorityKind, slot: SlotReference?, rules: PasscodeRules, sensor: SensorIdentity?,
                             secrets: SecretProtection?) -> AuthorityStatus {
        AuthorityStatus(kind: kind, fingers: [], printsError: nil, failedMatches: 0, threshold: lockoutThreshold, sensor: sensor,
                        domainState: nil, bindingCurrent: slot == nil ? nil : false,
                        passcodeDue: rules.intervalHours > 0 ? Int64(rules.intervalHours) * 3600 : nil,
                        passcodeAfterRebootDue: rules.afterReboot, secrets: secrets)
    }
}
