import Foundation

/// Why a scan did not produce a match or non-match.
public enum ScanInterruption: Error, Equatable, Sendable {
    /// The scan failed in a way worth retrying; `advice` says how ("center your finger").
    case retry(advice: String)
    /// The scan timed out (`--scan-timeout`).
    case timedOut
    /// Ctrl-C.
    case userCancelled
    /// The user pressed Enter: use the passcode instead.
    case fallbackRequested
    /// The program cancelled the scan (`vault lock`).
    case programCancelled
    /// The reader went away.
    case removed
    /// Another program holds the reader.
    case busy(String)
    /// Any other reader failure.
    case failed(String)
}

/// An open fingerprint reader as authentication needs it. VaultCLI adapts FingerprintKit's sensor
/// to this, so VaultKit stays free of libfprint.
public protocol FingerprintReader: AnyObject {
    /// Which sensor this is.
    var identity: SensorIdentity { get }
    /// The prints stored on the chip (match-on-chip readers), else empty.
    func chipPrints() throws -> [String]
    /// One scan against `prints`: the index of the matching one, nil for a clean non-match.
    /// - Throws: `ScanInterruption`.
    func scan(against prints: [[UInt8]], prompt: String) throws -> Int?
}

/// Authentication policies (LocalAuthentication's deviceOwnerAuthenticationWithBiometrics and
/// deviceOwnerAuthentication).
public enum AuthPolicy: String, Sendable, CaseIterable {
    /// Fingerprint only: never falls back to the passcode by itself.
    case biometrics
    /// Fingerprint, or the passcode when fingerprint cannot be used (the default).
    case biometricsOrPasscode = "biometrics-or-passcode"
}

/// The public parameters of a fingerprint slot, bound into its associated data.
public struct FingerprintBinding: Codable, Equatable, Sendable {
    /// The reader the vault was bound on.
    public var sensor: SensorIdentity
    /// The domain state (hex) at binding time.
    public var domainState: String
    /// Creates a binding.
    public init(sensor: SensorIdentity, domainState: DomainState) {
        self.sensor = sensor
        self.domainState = domainState.hex
    }
}

/// One evaluation of a policy for one vault: 3 tries, the lockout, the reboot and 48 h rules,
/// and the passcode fallback. Everything that asks the user goes through the closures given.
public final class AuthContext {
    /// The tries one evaluation allows.
    public static let triesPerEvaluation = 3

    let authority: any KeyAuthority
    /// The policy evaluated.
    public var policy: AuthPolicy
    /// Opens the reader on demand, preferring the one the vault is bound to (errors:
    /// `VaultError.biometryNotAvailable` / `.systemCancel`).
    let openReader: (SensorIdentity?) throws -> any FingerprintReader
    /// Returns the passcode, or nil when none can be read (no terminal and no descriptor).
    let readPasscode: (String) throws -> SecretBytes?
    /// Narration for the person (tries left, advice); never stdout.
    let say: (String) -> Void
    /// Shown at the fingerprint prompt (`--reason`).
    public var reason: String?
    /// Whether the caller asked for the passcode straight away (`--passcode`, or `--passcode-fd`).
    public var passcodeFirst = false
    /// How the last successful evaluation authenticated.
    public private(set) var outcome: AuthOutcome?

    /// A context over the given authority and user interface.
    public init(authority: any KeyAuthority, policy: AuthPolicy, openReader: @escaping (SensorIdentity?) throws -> any FingerprintReader,
                readPasscode: @escaping (String) throws -> SecretBytes?, say: @escaping (String) -> Void) {
        self.authority = authority
        self.policy = policy
        self.openReader = openReader
        self.readPasscode = readPasscode
        self.say = say
    }

    /// The fingerprint slot of the store, with its binding.
    public static func binding(of store: VaultStore) throws -> (KeySlot, FingerprintBinding)? {
        guard let slot = try store.slots().first(where: { $0.kind == "fingerprint" }) else { return nil }
        guard let b = try? JSONDecoder().decode(FingerprintBinding.self, from: Data(slot.params)) else {
            throw VaultError.corrupt("the fingerprint slot's binding is unreadable")
        }
        return (slot, b)
    }

    /// Why the passcode is needed before any scan (lockout, reboot, 48 h), or nil.
    public func passcodeRule(settings: VaultSettings) throws -> VaultError? {
        let r = try authority.record()
        if r.failedMatches >= lockoutThreshold { return .biometryLockout }
        if settings.passcodeAfterReboot, r.lastPasscodeBootID != authority.bootID {
            return .passcodeNeeded("first unlock since the machine started")
        }
        if settings.passcodeIntervalHours > 0 {
            let last = r.lastPasscodeTime ?? 0
            if authority.now() - last > Int64(settings.passcodeIntervalHours) * 3600 {
                return .passcodeNeeded("no passcode unlock in the last \(settings.passcodeIntervalHours) h")
            }
        }
        return nil
    }

    /// Evaluates the policy and unlocks `store`.
    /// - Throws: the `VaultError` that says why (10 retry limit or wrong passcode, 11 cancel,
    ///   12 passcode needed, 13 system cancel, 15 no reader, 16 not enrolled, 17 lockout,
    ///   18 timeout, 20 prints changed).
    public func unlock(_ store: VaultStore) throws -> UnlockedVault {
        if passcodeFirst { return try unlockWithPasscode(store, because: .passcodeNeeded("the passcode was chosen")) }
        let why: VaultError
        do {
            return try unlockWithFingerprint(store)
        } catch let e as VaultError {
            switch e {
            case .biometryLockout, .biometryNotAvailable, .biometryNotEnrolled, .domainStateChanged, .passcodeNeeded:
                why = e
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
    public func unlockWithPasscode(_ store: VaultStore, because why: VaultError) throws -> UnlockedVault {
        var prompt = "passcode for vault '\(store.location.name)'"
        if !passcodeFirst {
            if case .passcodeNeeded(let m) = why { prompt = m + "; " + prompt } else { prompt = why.message + "; " + prompt }
        }
        guard let passcode = try readPasscode(prompt) else { throw why }
        let vault = try store.unlock(passcode: passcode)
        try authority.recordPasscodeUnlock()
        outcome = .passcode
        return vault
    }

    /// The fingerprint path: a match (checks, up to three scans), then the slot opens; after the
    /// retry limit, the passcode when the policy allows it and one can be read.
    func unlockWithFingerprint(_ store: VaultStore) throws -> UnlockedVault {
        let match: FingerprintMatch
        do {
            match = try matchFingerprint(store, passcodeRules: true,
                                         prompt: "touch the fingerprint reader to unlock vault '\(store.location.name)'")
        } catch RetryLimit.exceeded {
            if policy == .biometricsOrPasscode, let passcode = try readPasscode("retry limit exceeded; passcode for vault '\(store.location.name)'") {
                let vault = try store.unlock(passcode: passcode)
                try authority.recordPasscodeUnlock()
                outcome = .passcode
                return vault
            }
            throw VaultError.authenticationFailed("no match: retry limit exceeded")
        }
        let key = try authority.fingerprintSlotKey(vaultID: store.vaultID, slotID: match.slot.id, sensor: match.sensor, domainState: match.state)
        do {
            return try store.unlock(slot: match.slot, kek: key)
        } catch {
            throw VaultError.domainStateChanged
        }
    }

    /// A fresh fingerprint match for `store`'s binding, with no passcode fallback: what
    /// `vault login` and the fingerprint-login switch demand even inside an unlock session.
    /// - Throws: 15 no reader, 16 not enrolled, 17 lockout, 18 timeout, 10 no match after the
    ///   retry limit, 11 Ctrl-C, 20 prints changed since the vault was bound.
    public func requireFreshMatch(_ store: VaultStore, prompt: String) throws {
        do {
            _ = try matchFingerprint(store, passcodeRules: false, prompt: prompt)
        } catch RetryLimit.exceeded {
            throw VaultError.authenticationFailed("no match: retry limit exceeded")
        }
    }

    private enum RetryLimit: Error { case exceeded }

    private struct FingerprintMatch {
        let slot: KeySlot
        let sensor: SensorIdentity
        let state: DomainState
    }

    /// Checks the binding, the lockout and (with `passcodeRules`) the reboot and 48 h rules, opens
    /// the bound reader, checks the domain state, then allows up to three scans.
    private func matchFingerprint(_ store: VaultStore, passcodeRules: Bool, prompt: String) throws -> FingerprintMatch {
        let enrolled = try authority.prints()
        guard let (slot, binding) = try AuthContext.binding(of: store) else {
            if enrolled.isEmpty { throw VaultError.biometryNotEnrolled }
            throw VaultError.domainStateChanged
        }
        if passcodeRules {
            if let rule = try passcodeRule(settings: store.settings()) { throw rule }
        } else if try authority.record().failedMatches >= lockoutThreshold {
            throw VaultError.biometryLockout
        }
        let reader = try openReader(binding.sensor)
        let mine = enrolled.filter { $0.sensor == reader.identity }
        guard !mine.isEmpty else {
            throw enrolled.isEmpty ? VaultError.biometryNotEnrolled : VaultError.domainStateChanged
        }
        let state = try authority.domainState(chipPrints: reader.chipPrints())
        guard binding.sensor == reader.identity, binding.domainState == state.hex else { throw VaultError.domainStateChanged }
        let shown = prompt + (reason.map { " (\($0))" } ?? "")
        for attempt in 1...AuthContext.triesPerEvaluation {
            let left = AuthContext.triesPerEvaluation - attempt
            let tries = "\(left) \(left == 1 ? "try" : "tries") left"
            do {
                if try reader.scan(against: mine.map(\.data), prompt: shown) != nil {
                    try authority.recordMatch()
                    outcome = .fingerprint(at: authority.now())
                    return FingerprintMatch(slot: slot, sensor: reader.identity, state: state)
                }
                if try authority.recordFailedMatch() >= lockoutThreshold {
                    say("vault: no match; fingerprint is now locked out")
                    throw VaultError.biometryLockout
                }
                say(left > 0 ? "vault: no match, \(tries)" : "vault: no match")
            } catch let i as ScanInterruption {
                switch i {
                case .retry(let advice): say("vault: \(advice)" + (left > 0 ? " (\(tries))" : ""))
                case .timedOut: throw VaultError.appCancel("no finger within the scan timeout")
                case .userCancelled: throw VaultError.userCancel
                case .fallbackRequested: throw VaultError.passcodeNeeded("you chose the passcode")
                case .programCancelled: throw VaultError.appCancel("the scan was cancelled")
                case .removed: throw VaultError.biometryNotAvailable("the reader was removed")
                case .busy(let m): throw VaultError.systemCancel(m)
                case .failed(let m): throw VaultError.biometryNotAvailable(m)
                }
            }
        }
        throw RetryLimit.exceeded
    }
}

/// How an evaluation ended successfully.
public enum AuthOutcome: Equatable, Sendable {
    /// A finger matched (at this time).
    case fingerprint(at: Int64)
    /// The passcode (or recovery key) was given.
    case passcode
}

extension UnlockedVault {
    /// Binds (or re-binds) this vault's one fingerprint slot to `sensor` and the current domain
    /// state. Open sessions and the old binding stop working.
    public func bindFingerprint(authority: any KeyAuthority, sensor: SensorIdentity, domainState: DomainState) throws {
        let params = Array(try JSONEncoder().encode(FingerprintBinding(sensor: sensor, domainState: domainState)))
        try replaceSlot(kind: "fingerprint", params: params) { slotID in
            try authority.fingerprintSlotKey(vaultID: store.vaultID, slotID: slotID, sensor: sensor, domainState: domainState)
        }
    }
}
