/// Every failure the vault reports to a person or a script. Each case knows its message, its hint
/// and its exit code (the stable table of DESIGN.md). Messages never contain secret material.
public enum VaultError: Error, Equatable, Sendable, Codable {
    /// 1: anything without a more specific code.
    case failure(String, hint: String? = nil)
    /// 2: the command line is wrong.
    case usage(String, hint: String? = nil)
    /// 3: no such item.
    case itemNotFound(String)
    /// 3: no vault at this path.
    case vaultNotFound(name: String, path: String)
    /// 4: the name is taken.
    case alreadyExists(String)
    /// 5: data failed authentication or is not a vault database.
    case corrupt(String)
    /// 5: the database was written by a newer vault.
    case newerFormat(found: Int, supported: Int)
    /// 6: a file could not be read or written.
    case io(path: String, String)
    /// 6: a vault file or folder is readable by others.
    case insecurePermissions(path: String, isDirectory: Bool)
    /// 10: wrong passcode or recovery key, or no match after the retry limit.
    case authenticationFailed(String)
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
    /// 5: the key authority's state (prints file, lockout record, device secret) failed authentication.
    case authorityDamaged(String)
    /// 5: a vault's settings row is unreadable (never silently replaced by the defaults).
    case settingsDamaged(vault: String)
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

    /// The process exit code (DESIGN.md).
    public var exitCode: Int32 {
        switch self {
        case .failure: 1
        case .usage: 2
        case .itemNotFound, .vaultNotFound: 3
        case .alreadyExists: 4
        case .corrupt, .newerFormat, .authorityDamaged, .settingsDamaged: 5
        case .io, .insecurePermissions: 6
        case .authenticationFailed: 10
        case .userCancel: 11
        case .passcodeNeeded: 12
        case .systemCancel: 13
        case .passcodeNotSet: 14
        case .biometryNotAvailable: 15
        case .biometryNotEnrolled: 16
        case .biometryLockout: 17
        case .appCancel: 18
        case .sessionInvalid: 19
        case .domainStateChanged: 20
        case .commandNotExecutable: 126
        case .commandNotFound: 127
        case .childExited(let status): status
        case .alreadyReported(let code): code
        }
    }

    /// One lower-case line saying what went wrong.
    public var message: String {
        switch self {
        case .failure(let m, _), .usage(let m, _): m
        case .itemNotFound(let n): "no item named '\(n)'"
        case .vaultNotFound(let n, let p): "no vault named '\(n)' at \(p)"
        case .alreadyExists(let n): "an item named '\(n)' already exists"
        case .corrupt(let m): "vault data is damaged or was tampered with: \(m)"
        case .newerFormat(let f, let s): "this vault uses format version \(f); this vault program reads up to version \(s)"
        case .io(let p, let m): "\(p): \(m)"
        case .insecurePermissions(let p, let dir): "\(p) is accessible by other users (\(dir ? "folder" : "file") must be private)"
        case .authenticationFailed(let m): m
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
        case .authorityDamaged(let m): "the fingerprint state is damaged: \(m)"
        case .settingsDamaged(let v): "the settings of vault '\(v)' are damaged"
        case .commandNotExecutable(let p): "cannot run \(p): not an executable file"
        case .commandNotFound(let n): "command not found: \(n)"
        case .childExited(let status): "the command exited with status \(status)"
        case .alreadyReported(let code): "failed with exit code \(code)"
        }
    }

    /// What the user can do about it, when there is something to do.
    public var hint: String? {
        switch self {
        case .failure(_, let h), .usage(_, let h): h
        case .itemNotFound: "list the items with 'vault ls'"
        case .vaultNotFound(let n, _): n == "default" ? "create it with 'vault init'" : "create it with 'vault init --vault \(n)'"
        case .alreadyExists: "choose another name, or replace it with --force"
        case .corrupt: "restore the vault folder from a backup; other items are still readable"
        case .newerFormat: "upgrade vault"
        case .io: nil
        case .insecurePermissions(let p, let dir): dir ? "chmod 700 \(p)" : "chmod 600 \(p)"
        case .authenticationFailed: nil
        case .userCancel: nil
        case .passcodeNeeded: "pass it with --passcode-fd N, or run on a terminal"
        case .systemCancel: "close the program holding the reader (fprintd) and try again"
        case .passcodeNotSet: "set one with 'vault passcode' or recover with 'vault recover'"
        case .biometryNotAvailable: "run 'vault doctor', or unlock with --passcode"
        case .biometryNotEnrolled: "enrol a finger with 'vault enroll'"
        case .biometryLockout: "unlock with the passcode to reset it: vault unlock --passcode"
        case .appCancel: nil
        case .sessionInvalid: "unlock again with 'vault unlock'"
        case .domainStateChanged: "unlock with the passcode and rotate the keys: vault unlock --passcode --rotate"
        case .settingsDamaged(let v): "restore the vault from a backup, or set them again: vault settings\(v == "default" ? "" : " --vault \(v)") --policy P"
        case .commandNotExecutable: nil
        case .commandNotFound(let n): n.contains("/") ? nil : "it is not in PATH; give its full path"
        case .childExited, .alreadyReported: nil
        case .authorityDamaged: "run 'vault enroll' (it asks for a vault's passcode): the damaged file is reset and you enrol your fingers again"
        }
    }
}

extension VaultError {
    /// Whether `main` prints this error: a child's exit status and an error already reported in
    /// another protocol are passed on silently.
    public var isPrinted: Bool {
        switch self {
        case .childExited, .alreadyReported: false
        default: true
        }
    }
}
