import Foundation
import VaultSystem
@testable import VaultKit

/// A real TPM 2.0 for one test: Debian's swtpm serving a fresh state folder on a Unix socket
/// (reachable by any user: the root tests' daemon runs as another one), stopped when the value goes.
final class SoftwareTPM: @unchecked Sendable {
    let folder: String
    let process: Process
    var socket: String { folder + "/tpm.sock" }
    var device: TPMDevice { TPMDevice(tcti: "swtpm:path=" + socket) }

    /// Starts swtpm over `state` (a folder holding another swtpm's state: the same TPM), else a fresh one.
    init(state: String? = nil) throws {
        folder = NSTemporaryDirectory() + "swtpm-" + hexString(randomBytes(6))
        if let state {
            try FileManager.default.copyItem(atPath: state, toPath: folder)
        } else {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/swtpm")
        process.arguments = ["socket", "--tpm2", "--tpmstate", "dir=" + folder,
                             "--server", "type=unixio,path=\(folder)/tpm.sock,mode=0666",
                             "--ctrl", "type=unixio,path=\(folder)/tpm.sock.ctrl,mode=0666",
                             "--flags", "not-need-init,startup-clear"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let end = Date().addingTimeInterval(30)
        while !accepts(folder + "/tpm.sock.ctrl") || !accepts(socket) {
            guard Date() < end, process.isRunning else { throw VaultError.failure("swtpm did not start") }
            usleep(2000)
        }
    }

    /// Whether swtpm is installed (tests skip with a message otherwise).
    static var available: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/swtpm") }

    /// Runs a tpm2-tools program against this TPM (test set-up only: PCR extends, DA parameters).
    @discardableResult
    func tool(_ name: String, _ arguments: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/" + name)
        p.arguments = arguments
        p.environment = ["TPM2TOOLS_TCTI": device.tcti, "TSS2_LOG": "all+NONE"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw VaultError.failure("\(name) \(arguments) failed: \(p.terminationStatus)") }
        return String(decoding: data, as: UTF8.self)
    }

    /// Sets the dictionary-attack parameters (the lockout authorization is empty, as by default).
    func setDictionaryAttack(maxTries: Int, recoverySeconds: Int) throws {
        try tool("tpm2_dictionarylockout", ["-s", "-n", "\(maxTries)", "-t", "\(recoverySeconds)", "-l", "\(recoverySeconds)"])
    }

    /// Extends PCR 7 (SHA-256 bank), as a firmware or Secure Boot change does.
    func extendPCR7() throws {
        try tool("tpm2_pcrextend", ["7:sha256=" + String(repeating: "ab", count: 32)])
    }

    /// Stops swtpm after an orderly TPM2_Shutdown (its state may then be reused), through its
    /// control channel (a signal the test runner ignores would be ignored by swtpm too).
    func stop() {
        guard process.isRunning else { return }
        _ = try? tool("tpm2_shutdown", [])
        let ctl = Process()
        ctl.executableURL = URL(fileURLWithPath: "/usr/bin/swtpm_ioctl")
        ctl.arguments = ["-s", "--unix", folder + "/tpm.sock.ctrl"]
        ctl.standardOutput = FileHandle.nullDevice
        ctl.standardError = FileHandle.nullDevice
        if (try? ctl.run()) != nil { ctl.waitUntilExit() }
        let end = Date().addingTimeInterval(3)
        while process.isRunning && Date() < end { usleep(2000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: folder)
    }
}

/// Whether swtpm's socket at `path` accepts a connection now: the file exists from its `bind`, but
/// connections are accepted only from its `listen` on, which a loaded machine may reach later (a
/// client connecting in between fails with "tcti:IO failure").
private func accepts(_ path: String) -> Bool { (try? UnixSocket.connect(path: path)) != nil }
