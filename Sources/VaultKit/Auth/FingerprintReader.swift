/// Why a scan did not produce a match or non-match.
package enum ScanInterruption: Error, Equatable, Sendable {
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

    /// The vault error a scan ending this way means (exit codes of DESIGN.md).
    package var vaultError: VaultError {
        switch self {
        case .retry(let advice): .failure("the scan did not work: \(advice)")
        case .timedOut: .appCancel("no finger within the scan timeout")
        case .userCancelled: .userCancel
        case .fallbackRequested: .passcodeNeeded("you chose the passcode")
        case .programCancelled: .appCancel("the scan was cancelled")
        case .removed: .biometryNotAvailable("the reader was removed")
        case .busy(let m): .systemCancel(m)
        case .failed(let m): .biometryNotAvailable(m)
        }
    }
}

/// An open fingerprint reader as the key authority needs it. VaultCLI adapts FingerprintKit's
/// sensor to this (and shows the prompts and progress), so VaultKit stays free of libfprint.
package protocol FingerprintReader: AnyObject {
    /// Which sensor this is.
    var identity: SensorIdentity { get }
    /// The prints stored on the chip (match-on-chip readers), else empty.
    func chipPrints() throws -> [String]
    /// One scan against `prints`: the index of the matching one, nil for a clean non-match.
    /// - Throws: `ScanInterruption`.
    func scan(against prints: [[UInt8]], prompt: String) throws -> Int?
    /// Enrols `finger` (all stages); returns the serialized print.
    /// - Throws: `ScanInterruption`, or a `VaultError`.
    func enroll(finger: String) throws -> [UInt8]
    /// Deletes a print from the chip (match-on-chip readers; nothing to do on others).
    func deletePrint(_ data: [UInt8]) throws
}

/// Opens the reader the caller prefers (the one a vault is bound to, or the prints were enrolled
/// on), else the one selected by the user, else the first usable one.
/// - Throws: `VaultError.biometryNotAvailable` / `.systemCancel`.
package typealias ReaderOpener = (SensorIdentity?) throws -> any FingerprintReader
