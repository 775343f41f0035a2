import FingerprintKit
import Foundation
import VaultAuthority
import VaultKit
import VaultSystem

/// Which reader backend the daemon uses: `--backend auto|fprintd|libfprint`.
enum ReaderBackend: String {
    /// fprintd when it owns its name on the system bus at the moment a request needs the reader,
    /// else libfprint directly.
    case auto
    /// fprintd only (a request fails with 15 when it does not answer).
    case fprintd
    /// libfprint directly (the reader must not be held by fprintd).
    case libfprint
}

/// The daemon's readers by backend: for each request, fprintd's or libfprint's (`auto` looks
/// for fprintd on the system bus first).
final class BackendReaders: ReaderSource, @unchecked Sendable {
    let backend: ReaderBackend
    let fprintd: FprintdReaders
    let libfprint: LibfprintReaders

    init(backend: ReaderBackend, fprintd: FprintdReaders, libfprint: LibfprintReaders) {
        self.backend = backend
        self.fprintd = fprintd
        self.libfprint = libfprint
    }

    func open(prefer: SensorIdentity?, session: ScanSession) throws -> any SessionReader {
        switch backend {
        case .fprintd: return try fprintd.open(prefer: prefer, session: session)
        case .libfprint: return try libfprint.open(prefer: prefer, session: session)
        case .auto:
            // A binding made on fprintd stays there (and fails as 15 when it is gone), and the
            // other way round: a libfprint binding never silently moves to fprintd's prints.
            if prefer?.driver == FprintdReaders.driver || (prefer == nil && FprintdSession.isRunning()) {
                return try fprintd.open(prefer: prefer, session: session)
            }
            return try libfprint.open(prefer: prefer, session: session)
        }
    }

    var backendDescription: String { Self.describe(backend) }

    func backendFingers(uid: UInt32) -> [String]? {
        guard backend == .fprintd || (backend == .auto && FprintdSession.isRunning()),
              let user = ProcessIdentity.userName(of: uid) else { return nil }
        return (try? FprintdSession.enrolledFingers(of: user))?.map(FprintdFinger.vaultName)
    }

    /// Which backend `auto` would pick now, and why (the daemon's log, `vault doctor`).
    static func describe(_ backend: ReaderBackend) -> String {
        switch backend {
        case .fprintd: "fprintd (vault-authd --backend fprintd)"
        case .libfprint: "libfprint (vault-authd --backend libfprint)"
        case .auto: FprintdSession.isRunning() ? "fprintd (it owns net.reactivated.Fprint on the system bus)"
            : "libfprint (fprintd is not on the system bus)"
        }
    }
}

/// The reader as fprintd serves it: a claim of fprintd's default device for the calling user's
/// login name over a D-Bus connection of the request's own, verify and enrol through fprintd,
/// and fprintd's stored prints of that user as the "chip's list" the domain state covers.
final class FprintdReaders: ReaderSource, @unchecked Sendable {
    /// The driver name of fprintd's sensor identity.
    static let driver = "fprintd"
    /// fprintd's state folder (`/var/lib/fprint`; fprintd's `STATE_DIRECTORY` in tests).
    let printsFolder: String

    init(printsFolder: String) {
        self.printsFolder = printsFolder
    }

    func open(prefer: SensorIdentity?, session: ScanSession) throws -> any SessionReader {
        guard let user = ProcessIdentity.userName(of: session.uid) else {
            throw VaultError.biometryNotAvailable("uid \(session.uid) has no user name, and fprintd keeps prints by user name")
        }
        let claim: FprintdSession
        do { claim = try FprintdSession(claimFor: user) } catch { throw Self.vaultError(error) }
        session.onEnd { claim.close() }
        return FprintdSessionReader(claim, session: session, printsFolder: printsFolder)
    }

    /// fprintd's errors as the vault's exit codes.
    static func vaultError(_ e: FprintdError) -> VaultError {
        switch e {
        case .notRunning(let d):
            .biometryNotAvailable("fprintd does not answer on the system bus (\(d)); start it, or run vault-authd with --backend libfprint")
        case .busy: .systemCancel("another program is using the reader")
        case .permissionDenied(let action):
            .io(path: "polkit", "\(action) was refused to vault-authd; install Vault/50-vault-auth-fprintd.rules in /etc/polkit-1/rules.d")
        case .noEnrolledPrints: .biometryNotEnrolled
        case .vanished: .biometryNotAvailable("fprintd went away during the scan")
        case .timedOut: .appCancel("no finger within the scan timeout")
        case .cancelled: .userCancel
        case .cancelledByProgram: .appCancel("the scan was cancelled")
        case .retry(let a): .failure("the scan did not work: \(a)")
        case .removed: .biometryNotAvailable("the reader was removed")
        case .duplicate: .failure("this finger is already enrolled in fprintd")
        case .failed(let m): .biometryNotAvailable("fprintd: \(m)")
        }
    }
}

/// One request's claim of fprintd's device as the hosted authority's reader.
final class FprintdSessionReader: SessionReader {
    let claim: FprintdSession
    let session: ScanSession
    let printsFolder: String
    let identity: SensorIdentity

    init(_ claim: FprintdSession, session: ScanSession, printsFolder: String) {
        self.claim = claim
        self.session = session
        self.printsFolder = printsFolder
        identity = SensorIdentity(driver: FprintdReaders.driver, deviceID: claim.deviceName)
    }

    /// Listing fprintd's prints asks fprintd and reads its files: under the scan lease.
    var storesPrints: Bool { true }

    /// What the domain state covers of fprintd: the user's enrolled fingers as fprintd lists
    /// them, and for each stored print file its path, a hash of its content, its inode and its
    /// modification and change times in nanoseconds. Re-enrolling the same finger can write a
    /// byte-identical file (virtual readers do), but never with the same times: `fprintd-enroll`,
    /// `fprintd-delete` or the desktop's settings change this list, and so every binding.
    /// - Throws: 15 when fprintd does not answer or its files cannot be read (fail closed: an
    ///   unreadable folder is never an empty list).
    func chipPrints() throws -> [String] {
        let fingers: [String]
        do { fingers = try claim.enrolledFingers() } catch { throw FprintdReaders.vaultError(error) }
        var lines = fingers.sorted().map { "fprintd-finger \($0)" }
        let folder = printsFolder + "/" + claim.user
        let files: [String]
        do {
            files = try FileManager.default.subpathsOfDirectory(atPath: folder).sorted()
        } catch {
            // No fingers and no folder: nothing enrolled yet. Fingers without readable files fail.
            if fingers.isEmpty { return lines }
            throw VaultError.biometryNotAvailable(
                "vault-authd cannot read fprintd's prints in \(folder) (\(error.localizedDescription)): it needs CAP_DAC_READ_SEARCH (AmbientCapabilities= in its unit)")
        }
        for relative in files {
            let path = folder + "/" + relative
            do {
                let st = try FileStatus.of(path)
                guard st.kind == .regular else { continue }
                let content = try FileDescriptor.open(path, .readOnly).readAll(limit: 1 << 24)
                let digest = hexString(try KeyedHash.hash(content, key: [], outputLength: 32))
                lines.append("fprintd-print \(relative) \(digest) inode=\(st.inode) mtime=\(st.modifiedNanoseconds) ctime=\(st.changedNanoseconds) size=\(st.size)")
            } catch let e as SystemError {
                throw VaultError.biometryNotAvailable(
                    "vault-authd cannot read fprintd's print \(path) (\(e.reason)): it needs CAP_DAC_READ_SEARCH (AmbientCapabilities= in its unit)")
            }
        }
        if !fingers.isEmpty && !lines.contains(where: { $0.hasPrefix("fprintd-print ") }) {
            throw VaultError.biometryNotAvailable("fprintd lists fingers of \(claim.user) but \(folder) holds no prints: is --fprintd-state fprintd's state folder?")
        }
        return lines
    }

    /// One verify through fprintd of the user's fingers: fprintd matches against its own prints,
    /// so a match is the first of vault's prints on this reader (index 0).
    func scan(against prints: [[UInt8]], prompt: String) throws -> Int? {
        let cancellation = FingerprintCancellation()
        let claim = self.claim, timeout = session.scanTimeout
        do {
            let matched = try session.whileCancellable(onCancel: { cancellation.cancel($0 == .user ? .user : .program) }) {
                try claim.verify(timeout: timeout, cancellation: cancellation)
            }
            return matched && !prints.isEmpty ? 0 : nil
        } catch let e as FprintdError {
            if e == .cancelled || e == .cancelledByProgram, let reason = session.cancelReason { throw reason.interruption }
            switch e {
            case .retry(let advice): throw ScanInterruption.retry(advice: advice)
            case .timedOut: throw ScanInterruption.timedOut
            case .cancelled: throw ScanInterruption.userCancelled
            case .cancelledByProgram: throw ScanInterruption.programCancelled
            case .removed: throw ScanInterruption.removed
            case .busy: throw ScanInterruption.busy("another program is using the reader")
            case .vanished: throw ScanInterruption.failed("fprintd went away during the scan")
            default: throw FprintdReaders.vaultError(e)
            }
        }
    }

    /// Enrols `finger` in fprintd for the user (the print then serves sudo and the login screen
    /// too); a finger fprintd already has is taken as it is, without a scan. The "print" vault
    /// keeps is only the reference `fprintd FINGER`: the print itself stays fprintd's.
    func enroll(finger: String) throws -> [UInt8] {
        let name = FprintdFinger.fprintdName(finger)
        let reference = Array("fprintd \(name)".utf8)
        let existing: [String]
        do { existing = try claim.enrolledFingers() } catch { throw FprintdReaders.vaultError(error) }
        if existing.contains(name) { return reference }
        let session = self.session, claim = self.claim, timeout = session.scanTimeout
        session.notify(.notice(notice: .enrolling(finger: finger, reader: claim.deviceName, stages: claim.enrollStages)))
        let cancellation = FingerprintCancellation()
        do {
            try session.whileCancellable(onCancel: { cancellation.cancel($0 == .user ? .user : .program) }) {
                try claim.enroll(finger: name, timeout: timeout, cancellation: cancellation) { done, total, advice in
                    session.notify(.notice(notice: .enrollProgress(completed: done, total: total, advice: advice)))
                }
            }
        } catch let e as FprintdError {
            if e == .cancelled || e == .cancelledByProgram, let reason = session.cancelReason { throw reason.interruption.vaultError }
            throw FprintdReaders.vaultError(e)
        }
        return reference
    }

    /// `vault unenroll` stops vault using a finger; it does not delete it from fprintd, where it
    /// also serves sudo and the login screen (`fprintd-delete` does that).
    func deletePrint(_ data: [UInt8]) throws {}
}
