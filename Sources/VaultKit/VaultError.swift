/// Every failure the vault reports to a person or a script. Each case knows its message, its hint
/// and its exit code (the stable table of DESIGN.md). Messages never contain secret material.
public enum VaultError: Error, Equatable, Sendable, Codable {
    /// 1: anything without a more specific code.
    case failure(String, hint: String? = nil)
    /// 2: the command line is wrong.
    case usage(String, hint: String? = nil)
    /// 3: no such item.
    case itemNotFound(String)
    /// 3: no such item, and the vault holds one of a name near it (`near`).
    case itemNotFoundNear(String, near: String)
    /// 3: no vault at this path.
    case vaultNotFound(name: String, path: String)
    /// 3: a secret reference (`vault://...`) names no item, vault or field that has a value.
    case referenceNotFound(reference: String, String)
    /// 4: the name is taken.
    case alreadyExists(String)
    /// 4: this finger is already enrolled (on the reader the enrolment would use).
    case fingerEnrolled(String)
    /// 3: this finger is not enrolled.
    case fingerNotEnrolled(String)
    /// 5: data failed authentication or is not a vault database.
    case corrupt(String)
    /// 5: the database was written by a newer vault.
    case newerFormat(found: Int, supported: Int)
    /// 6: a file could not be read or written.
    case io(path: String, String)
    /// 6: a vault file or folder is readable by others.
    case insecurePermissions(path: String, isDirectory: Bool)
    /// 10: wrong recovery key, or no match after the retry limit, or a refused request.
    case authenticationFailed(String)
    /// 10: the passcode given does not open the vault.
    case wrongPasscode
    /// 11: the user cancelled.
    case userCancel
    /// 12: the passcode is needed but cannot be read.
    case passcodeNeeded(String)
    /// 13: the system cancelled (reader taken, signal).
    case systemCancel(String)
    /// 14: the vault has no passcode slot.
    case passcodeNotSet
    /// 15: no usable fingerprint reader.
    case biometryNotAvailable(String)
    /// 16: no prints enrolled.
    case biometryNotEnrolled
    /// 17: too many failed matches.
    case biometryLockout
    /// 18: the program cancelled (timeout, lock during a scan).
    case appCancel(String)
    /// 19: the unlock session expired or was invalidated.
    case sessionInvalid(String)
    /// 20: the enrolled prints changed since this vault's fingerprint slot was bound.
    case domainStateChanged
    /// 20: the prints include fingers no vault of this user vouched for (enrolled without an
    /// owner vault's proof, or changed outside vault): each change said, the fingers named;
    /// `owner`: whether the vault binding could confirm them.
    case unconfirmedPrints([String], fingers: [String], owner: Bool)
    /// 5: the key authority's state (prints file, lockout record, device secret) failed authentication.
    case authorityDamaged(String)
    /// 10: the key authority holds another proof key for this vault than the ones this copy of
    /// it can prove (its own and its earlier generations'): the vault or the authority's state
    /// is older than the other. The vault still opens with its passcode or recovery key.
    case proofRefused
    /// 19: a rotation committed while this command held the old key: nothing was written.
    case keysRotated
    /// 10: the item has fingerprint login on: releasing its secret needs a fresh match (the
    /// command asks for one and tries again; this reaches a person only when none can be made).
    case freshMatchNeeded(item: String)
    /// 5: a vault's settings row is unreadable (never silently replaced by the defaults).
    case settingsDamaged(vault: String)
    /// 1: a change that required a field to hold what this command read found it changed by
    /// another command meanwhile (an HOTP counter advanced twice): nothing was written.
    case changedMeanwhile(item: String)
    /// 15: a TPM is needed (a sealed device secret, a vault whose passcode is on the TPM) and none answers.
    case tpmUnavailable(String)
    /// 5: the TPM refuses a sealed object as not its own: it was sealed by another machine's TPM
    /// (a copied disk, a restored backup) or altered. The string names the file or slot.
    case tpmForeign(String)
    /// 15: the TPM refuses to unseal because PCR 7 (Secure Boot state) changed since the sealing.
    case tpmPolicyFailed(String)
    /// 17: the TPM is in dictionary-attack lockout; it lifts after about `seconds` (nil: unknown).
    case tpmLockout(seconds: Int?)
    /// 126: the command after `--` is not an executable file.
    case commandNotExecutable(String)
    /// 127: the command after `--` is not found.
    case commandNotFound(String)
    /// The child program of `run`/`login` ended with this status (128 + signal when killed): the
    /// status is passed on and nothing is printed.
    case childExited(status: Int32)
    /// The failure was already reported in the caller's own protocol (docker's helper prints its
    /// errors on stdout): only the exit code remains.
    case alreadyReported(code: Int32)

    /// The kind of exit this error is (nil: a child's status or an already reported code passed on as is).
    public var kind: ExitCode? {
        switch self {
        case .failure, .changedMeanwhile: .failure
        case .usage: .usage
        case .itemNotFound, .itemNotFoundNear, .vaultNotFound, .referenceNotFound, .fingerNotEnrolled: .notFound
        case .alreadyExists, .fingerEnrolled: .alreadyExists
        case .corrupt, .newerFormat, .authorityDamaged, .settingsDamaged: .corrupt
        case .io, .insecurePermissions: .io
        case .authenticationFailed, .wrongPasscode, .freshMatchNeeded, .proofRefused: .authenticationFailed
        case .userCancel: .userCancel
        case .passcodeNeeded: .passcodeNeeded
        case .systemCancel: .systemCancel
        case .passcodeNotSet: .passcodeNotSet
        case .biometryNotAvailable, .tpmUnavailable, .tpmPolicyFailed: .biometryNotAvailable
        case .tpmForeign: .corrupt
        case .tpmLockout: .biometryLockout
        case .biometryNotEnrolled: .biometryNotEnrolled
        case .biometryLockout: .biometryLockout
        case .appCancel: .appCancel
        case .sessionInvalid, .keysRotated: .invalidContext
        case .domainStateChanged, .unconfirmedPrints: .domainStateChanged
        case .commandNotExecutable: .cannotExecute
        case .commandNotFound: .commandNotFound
        case .childExited, .alreadyReported: nil
        }
    }

    /// The process exit code (DESIGN.md's table, `ExitCode`).
    public var exitCode: Int32 {
        switch self {
        case .childExited(let status): status
        case .alreadyReported(let code): code
        default: kind?.rawValue ?? 1
        }
    }

    /// One lower-case line saying what went wrong.
    public var message: String {
        switch self {
        case .failure(let m, _), .usage(let m, _): m
        case .itemNotFound(let n), .itemNotFoundNear(let n, _): "no item named '\(n)'"
        case .vaultNotFound(let n, let p): "no vault named '\(n)' at \(p)"
        case .referenceNotFound(let r, let why): "\(r): \(why)"
        case .alreadyExists(let n): "an item named '\(n)' already exists"
        case .fingerEnrolled(let f): "\(f) is already enrolled"
        case .fingerNotEnrolled(let f): "\(f) is not enrolled"
        case .corrupt(let m): "vault data is damaged or was tampered with: \(m)"
        case .newerFormat(let f, let s): "this vault uses format version \(f); this vault program reads up to version \(s)"
        case .io(let p, let m): "\(p): \(m)"
        case .insecurePermissions(let p, let dir): "\(p) is accessible by other users (\(dir ? "folder" : "file") must be private)"
        case .authenticationFailed(let m): m
        case .wrongPasscode: "wrong passcode"
        case .userCancel: "cancelled"
        case .passcodeNeeded(let m): "the passcode is needed (\(m)) but cannot be read"
        case .systemCancel(let m): "cancelled by the system: \(m)"
        case .passcodeNotSet: "this vault has no passcode"
        case .biometryNotAvailable(let m): "no usable fingerprint reader: \(m)"
        case .biometryNotEnrolled: "no fingerprints are enrolled"
        case .biometryLockout: "fingerprint is locked out after too many failed matches"
        case .appCancel(let m): "cancelled: \(m)"
        case .sessionInvalid(let m): "the unlock session \(m)"
        case .domainStateChanged: "the enrolled fingerprints changed since this vault was bound to them"
        case .unconfirmedPrints(let changes, _, _):
            "not bound: the fingerprints include a finger no vault of yours vouched for: " + changes.joinedText(separator: "; ")
        case .authorityDamaged(let m): "the fingerprint state is damaged: \(m)"
        case .proofRefused: "the proof of the vault key is not valid: the key authority holds a key of this vault that this copy of it does not have"
        case .settingsDamaged(let v): "the settings of vault '\(v)' are damaged"
        case .changedMeanwhile(let item): "item '\(item)' was changed by another command meanwhile; nothing was written"
        case .keysRotated: "the vault's keys were rotated while this command ran; nothing was written"
        case .freshMatchNeeded(let item): "'\(item)' has fingerprint login on: releasing it needs a fresh fingerprint match"
        case .tpmUnavailable(let m): "the TPM is not available: \(m)"
        case .tpmForeign(let what): "\(what) was sealed by another machine's TPM (or altered): this TPM cannot open it"
        case .tpmPolicyFailed(let what): "the TPM refuses to unseal \(what): PCR 7 (the Secure Boot state) changed since it was sealed"
        case .tpmLockout(let seconds):
            "the TPM is locked after too many wrong passcodes (dictionary-attack lockout)"
                + (seconds.map { "; it lifts in about \($0) s of powered-on time" } ?? "")
        case .commandNotExecutable(let p): "cannot run \(p): not an executable file"
        case .commandNotFound(let n): "command not found: \(n)"
        case .childExited(let status): "the command exited with status \(status)"
        case .alreadyReported(let code): "failed with exit code \(code)"
        }
    }

    /// What the user can do about it, when there is something to do.
    public var hint: String? { hint(vault: nil) }

    /// The hint, with `--vault NAME` in every command it names when the vault is not `default`
    /// (a hint typed as shown must act on the vault that failed).
    public func hint(vault: String?) -> String? {
        let suffix = vault.map { $0 == "default" ? "" : " --vault \($0)" } ?? ""
        func command(_ c: String) -> String { "vault " + c + suffix }
        return switch self {
        case .failure(_, let h), .usage(_, let h): h
        case .itemNotFound: "list the items with '\(command("ls"))'"
        case .itemNotFoundNear(_, let near): "did you mean '\(near)'? (\(command("ls")) lists the items)"
        case .referenceNotFound: "references are vault://[VAULT/]ITEM/FIELD, FIELD one of \(SecretReference.builtInFields.map(\.spelling).joinedText(separator: ", ")) or a custom field; list the items with 'vault ls'"
        case .vaultNotFound(let n, _): n == "default" ? "create it with 'vault init'" : "create it with 'vault init --vault \(n)'"
        case .alreadyExists: "choose another name, or replace it with --force"
        case .fingerEnrolled(let f): "remove it first with '\(command("unenroll " + f))', or name another finger with --finger"
        case .fingerNotEnrolled: "the enrolled fingers: '\(command("fingers"))'"
        case .corrupt: "restore the vault folder from a backup; other items are still readable"
        case .newerFormat: "upgrade vault"
        case .io: nil
        case .insecurePermissions(let p, let dir): dir ? "chmod 700 \(p)" : "chmod 600 \(p)"
        case .authenticationFailed: nil
        case .wrongPasscode: "forgot it? '\(command("recover"))' sets a new one with your recovery key"
        case .userCancel: nil
        case .passcodeNeeded: "open an unlock session with '\(command("unlock"))', pass the passcode with --passcode-fd N, or run on a terminal"
        case .systemCancel: "close the program holding the reader (fprintd) and try again"
        case .passcodeNotSet: "set one with '\(command("passcode"))' or recover with '\(command("recover"))'"
        case .biometryNotAvailable: "run 'vault doctor', or unlock with --passcode"
        case .biometryNotEnrolled: "enrol a finger with '\(command("enroll"))'"
        case .biometryLockout: "unlock with the passcode to reset it: \(command("unlock --passcode"))"
        case .appCancel: nil
        case .sessionInvalid: "unlock again with '\(command("unlock"))'"
        case .domainStateChanged: "give its passcode once to re-bind it: \(VaultError.rebindCommand(vault: vault))"
        case .unconfirmedPrints(_, let fingers, let owner):
            owner ? "if it is yours, confirm it: '\(command("enroll --bind --confirm " + fingers.joinedText(separator: ",")))'; if not, remove it: 'vault unenroll \(fingers[0])' (or fprintd-delete)"
                  : "only a vault that manages your fingerprints (your first one) can confirm it: 'vault enroll --bind --confirm \(fingers.joinedText(separator: ",")) --vault NAME'"
        case .changedMeanwhile: "run the command again"
        case .settingsDamaged(let v): "restore the vault from a backup, or set them again: vault settings\(v == "default" ? "" : " --vault \(v)") --policy P"
        case .commandNotExecutable: nil
        case .tpmUnavailable:
            "check the TPM with 'vault doctor' (VAULT_TPM_TCTI, vault-authd --tpm, group tss); the recovery key opens the vault on any machine: '\(command("recover"))'"
        case .tpmForeign:
            "on this machine, open the vault with its passcode or recovery key ('\(command("recover"))'), then enrol again with '\(command("enroll"))'"
        case .tpmPolicyFailed:
            "unlock with the passcode, then re-bind: '\(command("enroll"))' (it asks for the passcode and seals a new secret for the current PCR 7)"
        case .tpmLockout:
            "wait for the lockout to lift, or open the vault with its recovery key: '\(command("recover"))'"
        case .keysRotated: "run it again"
        case .freshMatchNeeded: "touch the reader when asked; 'vault edit NAME --fingerprint-login off' (a touch) turns it off"
        case .commandNotFound(let n): n.contains("/") ? nil : "it is not in PATH; give its full path"
        case .childExited, .alreadyReported: nil
        case .proofRefused:
            "was this vault restored from an older backup? Its passcode and recovery key still open it; \(VaultError.reregisterCommand(vault: vault)) registers its current key with the key authority (a touch of an enrolled finger confirms it)"
        case .authorityDamaged: "run '\(command("enroll"))' (it asks for the vault's passcode): the damaged file is reset and you enrol your fingers again"
        }
    }
}

extension VaultError {
    /// The one fix for a vault whose fingerprint binding is stale (the prints changed since it was
    /// bound, exit 20): its passcode, new keys, and a binding to the current prints. Every message
    /// about a stale binding names this command.
    public static func rebindCommand(vault: String?) -> String {
        "vault unlock --passcode --rotate" + (vault.map { $0 == "default" ? "" : " --vault \($0)" } ?? "")
    }

    /// The one fix for a vault whose key the authority does not know any more (`.proofRefused`):
    /// its passcode, then a touch of an enrolled finger, registers the vault's current key.
    public static func reregisterCommand(vault: String?) -> String {
        "'vault enroll --bind --reregister" + (vault.map { $0 == "default" ? "" : " --vault \($0)" } ?? "") + "'"
    }

    /// Whether `main` prints this error: a child's exit status and an error already reported in
    /// another protocol are passed on silently.
    public var isPrinted: Bool {
        switch self {
        case .childExited, .alreadyReported: false
        default: true
        }
    }
}

/// The stable exit codes (DESIGN.md), each with its meaning: the one source of `vault help
/// exit-codes` and of the table in docs/cli.md (a test compares them).
public enum ExitCode: Int32, CaseIterable, Sendable {
    case success = 0
    case failure = 1
    case usage = 2
    case notFound = 3
    case alreadyExists = 4
    case corrupt = 5
    case io = 6
    case authenticationFailed = 10
    case userCancel = 11
    case passcodeNeeded = 12
    case systemCancel = 13
    case passcodeNotSet = 14
    case biometryNotAvailable = 15
    case biometryNotEnrolled = 16
    case biometryLockout = 17
    case appCancel = 18
    case invalidContext = 19
    case domainStateChanged = 20
    case cannotExecute = 126
    case commandNotFound = 127

    /// What the code means, in one line.
    public var meaning: String {
        switch self {
        case .success: "success (run and login: the command's own exit status is passed on)"
        case .failure: "other failure"
        case .usage: "usage error"
        case .notFound: "no such item or vault"
        case .alreadyExists: "already exists"
        case .corrupt: "vault data corrupt or tampered (names the item or file), or sealed by another machine's TPM"
        case .io: "I/O or permission problem (names the path, or standard output)"
        case .authenticationFailed: "authentication failed: wrong passcode or recovery key, or no match after 3 tries"
        case .userCancel: "cancelled by the user (Ctrl-C)"
        case .passcodeNeeded: "the passcode is needed (chosen, reboot or 48 h rule) but none can be read"
        case .systemCancel: "cancelled by the system: the reader is busy"
        case .passcodeNotSet: "no passcode set"
        case .biometryNotAvailable: "no usable fingerprint reader (none, removed mid-scan, no permission), or no usable TPM (missing, PCR 7 changed)"
        case .biometryNotEnrolled: "no prints enrolled, or this vault is not bound to any"
        case .biometryLockout: "fingerprint locked out after 5 failed matches: passcode required; or the TPM's lockout after wrong passcodes"
        case .appCancel: "cancelled by the program: no finger within --scan-timeout"
        case .invalidContext: "the unlock session expired, was locked or was invalidated, or the keys were rotated meanwhile"
        case .domainStateChanged: "the enrolled prints changed since the vault was bound: unlock with the passcode and rotate"
        case .cannotExecute: "run/login: the command is not an executable file"
        case .commandNotFound: "run/login: the command is not found"
        }
    }
}
