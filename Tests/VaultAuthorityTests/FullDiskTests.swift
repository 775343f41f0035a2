import Foundation
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// A small file system mounted at `root` (ext4 on a loop device over an image file in /tmp, or a
/// tmpfs with `size=`), holding a daemon's state folder next to a world-writable `tmp` (1777), as
/// `/var/lib` and `/tmp` share `/` on a default install. Unmounted (lazily if busy) and removed by
/// ``unmount()`` or `deinit`; a run that died without either is cleaned up by the next one (its
/// folder names a dead pid).
final class SmallFileSystem: @unchecked Sendable {
    enum Kind: String, Sendable {
        case ext4, tmpfs
    }

    let kind: Kind
    let base: String
    let root: String
    /// The daemon's state folder (made by `SystemDaemon`).
    var state: String { root + "/state" }
    /// The world-writable folder any user may fill.
    var shared: String { root + "/tmp" }
    private var fills = 0
    private var mounted = false

    /// Why a file system of `kind` cannot be made here, or nil (tried with 1 MiB).
    static func unavailable(_ kind: Kind) -> String? {
        guard runningAsRoot else { return "needs root: mounts a small file system and starts processes as other users with setpriv (CI runs as root)" }
        let tools = ["/usr/bin/mount", "/usr/bin/umount", "/usr/bin/dd"] + (kind == .ext4 ? ["/usr/sbin/mkfs.ext4"] : [])
        for tool in tools where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is not installed (Debian: e2fsprogs, mount, coreutils)"
        }
        do {
            let probe = try SmallFileSystem(kind, megabytes: 1)
            probe.unmount()
            return nil
        } catch {
            return "a small \(kind.rawValue) file system cannot be mounted here: \(error)"
        }
    }

    static let ext4Unavailable = unavailable(.ext4)
    static let tmpfsUnavailable = unavailable(.tmpfs)

    init(_ kind: Kind, megabytes: Int) throws {
        self.kind = kind
        SmallFileSystem.removeLeftovers()
        base = "/tmp/authd-fs-" + hexString(randomBytes(5))
        root = base + "/mnt"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try Data("\(getpid())\n".utf8).write(to: URL(fileURLWithPath: base + "/pid"))
        let image = base + "/image"
        do {
            switch kind {
            case .ext4:
                try Self.run("/usr/bin/truncate", ["-s", "\(megabytes)M", image])
                try Self.run("/usr/sbin/mkfs.ext4", ["-q", "-F", image])
                try Self.run("/usr/bin/mount", ["-o", "loop,nodev,nosuid", image, root])
            case .tmpfs:
                try Self.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,nodev,nosuid", "tmpfs", root])
            }
            mounted = true
            try Self.run("/usr/bin/chmod", ["0755", root])
            try Self.run("/usr/bin/install", ["-d", "-m", "1777", shared])
        } catch {
            unmount()
            throw error
        }
    }

    deinit { unmount() }

    /// Unmounts (lazily when something still holds it: the loop device goes with the last user)
    /// and removes the folder.
    func unmount() {
        if mounted {
            if (try? runProgram("/usr/bin/umount", [root]))?.code != 0 { _ = try? runProgram("/usr/bin/umount", ["-l", root]) }
            mounted = false
        }
        if !Self.isMountPoint(root) { try? FileManager.default.removeItem(atPath: base) }
    }

    /// What an unprivileged user may still allocate there.
    var space: FileSystemSpace { get throws { try FileSystem.space(of: root) } }

    /// Fills the file system as `user` (a new file in the 1777 folder each time): `dd` in 64 KiB
    /// blocks, then in 1 KiB blocks for the rest, each until `ENOSPC`.
    /// - Returns: the bytes written.
    @discardableResult
    func fill(as user: String) throws -> Int {
        fills += 1
        let file = shared + "/fill-\(fills)"
        for (bs, more) in [("64k", [String]()), ("1k", ["oflag=append", "conv=notrunc"])] {
            let r = try runProgram("/usr/bin/setpriv", ["--reuid=\(user)", "--regid=\(user)", "--init-groups", "--inh-caps=-all",
                                                        "/usr/bin/dd", "if=/dev/zero", "of=\(file)", "bs=\(bs)"] + more, timeLimit: 60)
            guard r.code != 0, r.stderr.contains("No space left on device") else {
                throw VaultError.failure("dd as \(user) did not end with a full disk: \(r.code) \(r.stderr)")
            }
        }
        _ = try? runProgram("/usr/bin/sync", ["-f", root])
        return Int((try FileStatus.of(file)).size)
    }

    /// Removes every file `fill` made.
    func emptyShared() throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: shared) {
            try FileManager.default.removeItem(atPath: shared + "/" + name)
        }
        _ = try? runProgram("/usr/bin/sync", ["-f", root])
    }

    private static func run(_ path: String, _ arguments: [String]) throws {
        let r = try runProgram(path, arguments, timeLimit: 60)
        guard r.code == 0 else { throw VaultError.failure("\((path as NSString).lastPathComponent) \(arguments.joined(separator: " ")): \(r.stderr)") }
    }

    private static func isMountPoint(_ path: String) -> Bool {
        let mounts = (try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? ""
        return mounts.split(separator: "\n").contains { $0.split(separator: " ").dropFirst().first.map(String.init) == path }
    }

    /// Unmounts and removes what a test process that is gone left (its pid file names a dead pid).
    private static func removeLeftovers() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/tmp") else { return }
        for name in names where name.hasPrefix("authd-fs-") {
            let base = "/tmp/" + name
            guard let text = try? String(contentsOfFile: base + "/pid", encoding: .utf8),
                  let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)), kill(pid, 0) != 0, errno == ESRCH else { continue }
            if isMountPoint(base + "/mnt") { _ = try? runProgram("/usr/bin/umount", ["-l", base + "/mnt"]) }
            if !isMountPoint(base + "/mnt") { try? FileManager.default.removeItem(atPath: base) }
        }
    }
}

/// The daemon's state on a small file system that a user fills completely: other users' passcode
/// requests, failure counts and a new user's first request go on, on the daemon's reserve, and a
/// failure that cannot be counted still gets no scan.
@Suite(.serialized)
struct FullDiskTests {
    @Test(.enabled(if: SmallFileSystem.ext4Unavailable == nil, "\(SmallFileSystem.ext4Unavailable ?? "")"))
    func onExt4AUserWhoFillsTheStateStopsNoOtherUserAndNoFailureGoesUncounted() throws {
        try fillAndCarryOn(.ext4)
    }

    @Test(.enabled(if: SmallFileSystem.tmpfsUnavailable == nil, "\(SmallFileSystem.tmpfsUnavailable ?? "")"))
    func onTmpfsTheSame() throws {
        try fillAndCarryOn(.tmpfs)
    }

    private func fillAndCarryOn(_ kind: SmallFileSystem.Kind) throws {
        let disk = try SmallFileSystem(kind, megabytes: 8)
        defer { disk.unmount() }
        // Everything that holds the file system (the daemon, the clients) ends inside.
        try fillAndCarryOn(disk)
    }

    private func fillAndCarryOn(_ disk: SmallFileSystem) throws {
        let daemon = try SystemDaemon(state: disk.state)
        defer { daemon.daemon.stop() }
        let reservePath = disk.state + "/reserve"
        func reserve() -> FileStatus? { try? FileStatus.of(reservePath) }

        // Made at start: 1 MiB of real blocks, the daemon's, 0600.
        let made = try #require(reserve(), "the daemon made no reserve: \(daemon.daemon.logText)")
        #expect(made.size == Int64(StateReserve.defaultSize) && made.allocatedBytes >= made.size, "\(made)")
        #expect(made.owner == TestUsers.uid(TestUsers.daemon) && made.permissions == 0o600)

        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try alice.run(.testSettings(bootID: nil, now: 1_800_000_000)).ok, "a fixed clock: the passcode waits are exact")
        #expect(try alice.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        let kek = try #require(try alice.bind(vault, confirm: ["right-index"]).key)
        #expect(try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "owner")

        // Bob fills the file system through the world-writable folder; before each of Alice's
        // and Carol's requests below he fills it again, so each one finds it full.
        var held = Int(made.size)
        func full(_ step: String) throws {
            let wrote = try disk.fill(as: TestUsers.bob)
            let left = try disk.space.availableBytes
            #expect(left < 64 << 10, "\(step): \(left) bytes left after bob wrote \(wrote)")
        }
        func drew(_ step: String) {
            let now = Int(reserve()?.size ?? 0)
            #expect(now < held, "\(step) drew on the reserve (\(held) -> \(now) bytes)")
            held = now
        }

        // A new user's first requests: an enrolment (the folder, the device secret, the print;
        // nothing else makes state), then a counted wrong passcode.
        try full("carol's first request")
        let carolUID = try #require(TestUsers.uid(TestUsers.carol))
        let carol = try ClientProcess(user: TestUsers.carol, daemon: daemon)
        let carolsVault = FakeVault()
        let enrolled = try carol.enroll("carol-finger", on: daemon)
        #expect(enrolled.ok, "\(String(describing: enrolled.message))")
        #expect(FileSystem.exists(disk.state + "/uid-\(carolUID)/device-secret"))
        let first = try carol.run(.recordPasscodeFailure(vaultID: carolsVault.id))
        #expect(first.ok, "\(String(describing: first.message))")
        #expect(try carol.run(.beginPasscodeAttempt(vaultID: carolsVault.id)).wait == 0)
        #expect(try carol.run(.recordPasscode(vaultID: carolsVault.id, proofKey: carolsVault.proofKey, forged: false)).recorded == "not-bound")
        drew("carol's first request")

        // Alice's passcode unlock is recorded; the wait before an attempt is read. The clock
        // moves on a second first: an unlock that leaves the record as it was (the same second,
        // nothing to clear) writes nothing, so it would not need the reserve.
        #expect(try alice.run(.testSettings(bootID: nil, now: 1_800_000_001)).ok)
        try full("recordPasscodeUnlock")
        let recorded = try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false))
        #expect(recorded.recorded == "owner", "\(String(describing: recorded.message))")
        drew("recordPasscodeUnlock")
        #expect(try alice.run(.beginPasscodeAttempt(vaultID: vault.id)).wait == 0)

        // Wrong passcodes are counted: after four the wait is 2 s.
        try full("recordPasscodeFailure")
        for i in 1...4 {
            let r = try alice.run(.recordPasscodeFailure(vaultID: vault.id))
            #expect(r.ok, "wrong passcode \(i): \(String(describing: r.message))")
        }
        drew("recordPasscodeFailure")
        #expect(try alice.run(.beginPasscodeAttempt(vaultID: vault.id)).wait == passcodeDelay(afterFailures: 4))

        // Failed matches are counted, none as a success: 3, then the lockout at 5, which holds
        // against the right finger.
        try full("a failed match")
        let three = try alice.unlock(vault, on: daemon, scans: ["someone-else"])
        #expect(three.retryLimit && three.key == nil, "\(three)")
        drew("a failed match")
        #expect(try alice.status().failedMatches == 3)
        try full("the lockout")
        let five = try alice.unlock(vault, on: daemon, scans: ["someone-else"])
        #expect(five.exitCode == 17 && five.key == nil, "\(five)")
        drew("the lockout")
        #expect(try alice.status().failedMatches == 5)
        #expect(try alice.unlock(vault, on: daemon, scans: ["alice-finger"]).exitCode == 17)

        // The passcode lifts it, and the finger opens again, still on a full disk.
        try full("the passcode after the lockout")
        #expect(try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "owner")
        drew("the passcode after the lockout")
        #expect(try alice.status().failedMatches == 0)
        let opened = try alice.unlock(vault, on: daemon, scans: ["alice-finger"])
        #expect(opened.key == kek)
        #expect(daemon.daemon.logText.contains("is full (writing \(disk.state)/uid-"), "\(daemon.daemon.logText)")

        // Bob keeps filling until the reserve is spent: each round gives one more piece.
        var rounds = 0
        var spent: ClientResult?
        while rounds < 40 {
            try full("round \(rounds)")
            let r = try carol.run(.recordPasscodeFailure(vaultID: carolsVault.id))
            if !r.ok { spent = r; break }
            rounds += 1
        }
        #expect(spent?.exitCode == 6 && spent?.message?.contains("No space left on device") == true, "\(String(describing: spent))")
        #expect(reserve() == nil, "a spent reserve is gone")
        #expect(rounds >= 5, "the reserve lasted \(rounds) rounds")
        // A passcode unlock that cannot be recorded (a second later: its clock must be written)
        // is an error, never "recorded"; the wait is still read (it writes nothing).
        #expect(try alice.run(.testSettings(bootID: nil, now: 1_800_000_002)).ok)
        let unrecorded = try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false))
        #expect(unrecorded.exitCode == 6 && unrecorded.recorded == nil, "\(unrecorded)")
        #expect(try alice.run(.beginPasscodeAttempt(vaultID: vault.id)).wait == 0)

        // Now a failure cannot be written: the finger gets no scan, nothing is counted, no key.
        var notices: [ScanNotice] = []
        let closed = try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: vault.key.current, rules: relaxedRules, scanTimeout: 5, cancel: nil), onNotice: { n in
            notices.append(n)
            if case .touchReader = n { try daemon.reader("SCAN alice-finger") }
        })
        #expect(closed.exitCode == 6 && closed.key == nil && closed.message?.contains("No space left on device") == true, "\(closed)")
        #expect(!notices.contains { if case .touchReader = $0 { true } else { false } }, "no scan: \(notices)")
        #expect(try alice.status().failedMatches == 0)

        // Space freed: the next request makes the reserve whole, and everything goes on.
        try disk.emptyShared()
        #expect(try alice.status().failedMatches == 0)
        let back = try #require(reserve(), "the reserve is back")
        #expect(back.size == Int64(StateReserve.defaultSize) && back.allocatedBytes >= back.size, "\(back)")
        #expect(daemon.daemon.logText.contains("is whole again"))
        #expect(try alice.unlock(vault, on: daemon, scans: ["alice-finger"]).key == (opened.nextKey ?? kek), "the key the slot was re-sealed with")
        #expect(try alice.run(.recordPasscodeFailure(vaultID: vault.id)).ok)
        #expect(try alice.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "owner")
        #expect(try carol.run(.beginPasscodeAttempt(vaultID: carolsVault.id)).ok)
        #expect(daemon.daemon.isRunning)
    }
}
