import FoundationEssentials
import VaultSystem

/// Authentication policies (LocalAuthentication's deviceOwnerAuthenticationWithBiometrics and
/// deviceOwnerAuthentication).
package enum AuthPolicy: String, Codable, Sendable, CaseIterable {
    /// Fingerprint only: never falls back to the passcode by itself.
    case biometrics
    /// Fingerprint, or the passcode when fingerprint cannot be used (the default).
    case biometricsOrPasscode = "biometrics-or-passcode"

    /// Parses a policy name as typed on the command line.
    /// - Throws: `.usage` naming the policies.
    package static func parse(_ text: String) throws -> AuthPolicy {
        guard let p = AuthPolicy(rawValue: text) else {
            throw VaultError.usage("unknown policy '\(text)'", hint: "policies: \(allCases.map(\.rawValue).joinedText(separator: ", "))")
        }
        return p
    }
}

/// How an unlocked vault was authenticated: it travels with the vault, so a command that just
/// matched a finger does not ask for a second scan, nor one that took the passcode for another.
package enum AuthOutcome: Equatable, Sendable {
    /// A finger matched (at this time).
    case fingerprint(at: Int64)
    /// The passcode was given.
    case passcode
    /// The recovery key was given.
    case recoveryKey
}

/// Sleeps `seconds` (the wait after wrong passcodes).
package func sleepBeforePasscode(_ seconds: Int) {
    MonotonicClock.sleep(seconds: Double(seconds))
}

extension KeyAuthority {
    /// The one passcode unlock: waits as long as the authority says after wrong passcodes, opens
    /// the vault and records the unlock with the authority (which resets the lockout, the passcode
    /// failures and the passcode clock), with a proof of the master key.
    /// - Parameter waiting: shown the wait in seconds, then it sleeps; tests pass their own.
    /// - Throws: `.passcodeNotSet`, `.authenticationFailed` (wrong passcode), `.corrupt`.
    package func unlock(_ store: VaultStore, passcode: borrowing SecretBytes,
                       waiting: (Int) -> Void = sleepBeforePasscode) throws -> UnlockedVault {
        if try store.slot(.passcode) != nil {
            // The wait is the authority's to count; an authority that cannot answer (a full
            // disk, a daemon gone) never keeps the passcode from opening the vault.
            let wait = (try? beginPasscodeAttempt(vaultID: store.vaultID)) ?? 0
            if wait > 0 { waiting(wait) }
        }
        let vault: UnlockedVault
        do {
            vault = try store.unlock(passcode: passcode)
        } catch let e as VaultError where e.kind == .authenticationFailed {
            // A wrong passcode (or one the TPM refused). A failure that cannot be recorded must
            // not pass for a try that did not happen.
            try recordPasscodeFailure(vaultID: store.vaultID)
            throw e
        }
        recordUnlock(of: vault)
        vault.authentication = .passcode
        return vault
    }

    /// The one recovery-key unlock; like a passcode unlock, it resets the lockout.
    /// - Throws: `.authenticationFailed` for a mistyped or wrong key.
    package func unlock(_ store: VaultStore, recoveryKey: String) throws -> UnlockedVault {
        let vault = try store.unlock(recoveryKey: recoveryKey)
        recordUnlock(of: vault)
        vault.authentication = .recoveryKey
        return vault
    }

    /// Records a passcode-class unlock of `vault` (after `vault init` binds a new vault, its
    /// passcode counts from then on). Best effort: the passcode and the recovery key open the
    /// vault whatever the authority answers (a damaged or full state, a daemon gone, a proof it
    /// refuses); the lockout then simply stays. Why it was not recorded is kept in
    /// `vault.unrecorded` for the caller to say. - Returns: what was recorded, nil on a failure.
    @discardableResult
    package func recordUnlock(of vault: UnlockedVault) -> PasscodeRecord? {
        do {
            let record = try vault.proven(.passcodeUnlock, by: self) { try recordPasscodeUnlock($0) }
            vault.unrecorded = nil
            vault.unrecordedHint = nil
            vault.passcodeRecord = record
            return record
        } catch let e as VaultError {
            vault.unrecorded = e.message
            if case .proofRefused = e { vault.unrecordedHint = e.hint(vault: vault.store.location.name) }
        } catch {
            vault.unrecorded = "\(error)"
        }
        return nil
    }
}

/// One evaluation of a policy for one vault: the authority's match (3 tries, the lockout, the
/// reboot and 48 h rules) and the passcode fallback. Everything that asks the user goes through
/// the closures given.
package final class AuthContext {
    /// The authority evaluated against.
    package let authority: any KeyAuthority
    /// The policy evaluated.
    package var policy: AuthPolicy
    /// Returns the passcode, or nil when none can be read (no terminal and no descriptor).
    let readPasscode: (String) throws -> SecretBytes?
    /// Narration for the person (tries left, advice); never stdout.
    let say: (String) -> Void
    let clock: () -> Int64
    /// Shown at the fingerprint prompt (`--reason`).
    package var reason: String?
    /// Whether the caller asked for the passcode straight away (`--passcode`, or `--passcode-fd`).
    package var passcodeFirst = false
    /// How many passcodes one evaluation reads before a wrong one ends it (3 for a person at a
    /// terminal, 1 for a descriptor).
    package var passcodeTries = 1
    /// Whether a scan that timed out falls back to the passcode under `biometrics-or-passcode`
    /// (a person at a terminal; a script gets exit 18).
    package var timeoutFallsBack = false

    /// A context over the given authority and user interface.
    package init(authority: any KeyAuthority, policy: AuthPolicy, readPasscode: @escaping (String) throws -> SecretBytes?,
                say: @escaping (String) -> Void, clock: @escaping () -> Int64 = { unixNow() }) {
        self.authority = authority
        self.policy = policy
        self.readPasscode = readPasscode
        self.say = say
        self.clock = clock
    }

    /// Evaluates the policy and unlocks `store`.
    /// - Throws: the `VaultError` that says why (10 retry limit or wrong passcode, 11 cancel,
    ///   12 passcode needed, 13 system cancel, 15 no reader, 16 not enrolled, 17 lockout,
    ///   18 timeout, 20 prints changed).
    package func unlock(_ store: VaultStore) throws -> UnlockedVault {
        if passcodeFirst { return try unlockWithPasscode(store, because: .passcodeNeeded("the passcode was chosen")) }
        // A vault bound to no prints opens with the passcode only: when none can be read, what
        // the caller needs to hear is that the vault is locked (exit 12), not how to enrol.
        // (With prints enrolled, the unbound vault is told to bind: exit 20, as before.)
        if policy == .biometricsOrPasscode, try store.slot(.fingerprint) == nil, (try? authority.fingers())?.isEmpty ?? true {
            return try unlockWithPasscode(store, because: AuthContext.locked(store))
        }
        let why: VaultError
        do {
            return try unlockWithFingerprint(store)
        } catch let e as VaultError {
            switch e {
            case .biometryLockout, .biometryNotAvailable, .biometryNotEnrolled, .domainStateChanged, .passcodeNeeded:
                why = e
            case .appCancel where timeoutFallsBack && policy == .biometricsOrPasscode && e == ScanInterruption.timedOut.vaultError:
                why = .passcodeNeeded("no finger within the scan timeout")
            default:
                throw e
            }
        }
        // The passcode rules (reboot, 48 h) and a user's choice always allow the passcode; the
        // policy only decides whether a failing fingerprint falls back to it by itself.
        if policy == .biometrics {
            switch why {
            case .passcodeNeeded: break
            default: throw why
            }
        }
        return try unlockWithPasscode(store, because: why)
    }

    /// A passcode unlock; success resets the lockout and the reboot/48 h clock.
    package func unlockWithPasscode(_ store: VaultStore, because why: VaultError) throws -> UnlockedVault {
        var prompt = "passcode for vault '\(store.location.name)'"
        if !passcodeFirst && why != AuthContext.locked(store) {
            if case .passcodeNeeded(let m) = why { prompt = m + "; " + prompt } else { prompt = why.message + "; " + prompt }
        }
        return try passcodeUnlock(store, prompt: prompt, otherwise: why)
    }

    /// Reads a passcode and unlocks, asking again after a wrong one up to ``passcodeTries``.
    private func passcodeUnlock(_ store: VaultStore, prompt first: String, otherwise why: VaultError) throws -> UnlockedVault {
        var prompt = first
        let tries = max(1, passcodeTries)
        for attempt in 1...tries {
            guard let passcode = try readPasscode(prompt) else { throw why }
            do {
                return try authority.unlock(store, passcode: passcode, waiting: waitingMessage)
            } catch VaultError.wrongPasscode where attempt < tries {
                say("vault: wrong passcode; \(tries - attempt) \(tries - attempt == 1 ? "try" : "tries") left")
                prompt = "passcode for vault '\(store.location.name)'"
            }
        }
        throw VaultError.wrongPasscode
    }

    /// Why a vault without a fingerprint binding and without a readable passcode stays shut.
    static func locked(_ store: VaultStore) -> VaultError {
        .passcodeNeeded("vault '\(store.location.name)' is locked: no unlock session, and it has no fingerprint binding")
    }

    /// Says how long the wait after wrong passcodes is, then waits.
    private func waitingMessage(_ seconds: Int) {
        say("vault: wrong passcodes before: waiting \(seconds) s before this try")
        sleepBeforePasscode(seconds)
    }

    private func shown(_ prompt: String) -> String { prompt + (reason.map { " (\($0))" } ?? "") }

    /// The vault's fingerprint slot, or why there is none to scan for.
    private func fingerprintSlot(_ store: VaultStore) throws -> (SlotReference, KeySlot) {
        guard let slot = try store.slot(.fingerprint) else {
            throw try authority.fingers().isEmpty ? VaultError.biometryNotEnrolled : VaultError.domainStateChanged
        }
        return (SlotReference(vaultID: store.vaultID, slotID: slot.id, keyID: try slot.fingerprintBinding().keyID), slot)
    }

    /// The fingerprint path: the authority's live match releases the slot key; after the retry
    /// limit, the passcode when the policy allows it and one can be read.
    func unlockWithFingerprint(_ store: VaultStore) throws -> UnlockedVault {
        let (ref, slot) = try fingerprintSlot(store)
        let grant: UnlockGrant
        do {
            grant = try authority.unlock(ref, rules: try store.settings().passcodeRules,
                                       prompt: shown("touch the fingerprint reader to unlock vault '\(store.location.name)'"),
                                       events: { self.say($0.message) })
        } catch is RetryLimitExceeded {
            let noMatch = VaultError.authenticationFailed("3 fingers did not match")
            if policy == .biometricsOrPasscode {
                return try passcodeUnlock(store, prompt: "3 fingers did not match; passcode for vault '\(store.location.name)'", otherwise: noMatch)
            }
            throw noMatch
        }
        let vault = try store.unlock(fingerprintSlot: slot, grant: grant)
        vault.authentication = .fingerprint(at: clock())
        return vault
    }

    /// A fresh fingerprint match for `store`'s binding, with no passcode fallback: what `vault
    /// login`, a release of an item with fingerprint login on and the fingerprint-login switch
    /// demand even inside an unlock session. The authority verifies it over `nonce` (issued by
    /// the vault for what the match is for) and returns its token, which the vault checks.
    /// One of this binding's matches at most `reuse` seconds old (0-300) counts. So does the
    /// match this same command made (`unlocked` came from a finger, or `matchedAt`: when this
    /// command last had a match verified): the window then covers the time since it and a few
    /// seconds, no more; the authority answers from its own record of matches, never from this
    /// word, so nothing is skipped on trust.
    /// - Throws: 15 no reader, 16 not enrolled, 17 lockout, 18 timeout, 10 no match after the
    ///   retry limit, 11 Ctrl-C, 20 prints changed since the vault was bound.
    package func requireFreshMatch(_ store: VaultStore, nonce: [UInt8], unlocked: UnlockedVault? = nil, matchedAt: Int64? = nil,
                                  reuse: Int = 0, prompt: String) throws -> FreshMatchToken {
        let (ref, _) = try fingerprintSlot(store)
        var since = matchedAt
        if case .fingerprint(let at) = unlocked?.authentication { since = max(since ?? at, at) }
        let asked = max(0, min(reuse, Int(FreshMatchToken.maximumReuse)))
        let own = since.map { Int(min(FreshMatchToken.maximumReuse, max(0, clock() - $0) + AuthContext.ownMatchSlack)) } ?? 0
        do {
            let token = try authority.verify(ref, nonce: nonce, reuse: max(asked, own), prompt: shown(prompt), events: { self.say($0.message) })
            if let age = token.reusedAge, asked > 0, since == nil || age > Int64(own) {
                say("vault: using the fingerprint match of \(age) s ago (--reuse \(reuse))")
            }
            return token
        } catch is RetryLimitExceeded {
            throw VaultError.authenticationFailed("3 fingers did not match")
        }
    }

    /// Seconds added to the time since this command's own match when it is reused (the match
    /// is recorded a moment before the command learns of it; times are whole seconds).
    static let ownMatchSlack: Int64 = 5
}
