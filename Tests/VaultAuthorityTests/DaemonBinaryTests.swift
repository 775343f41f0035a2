import Foundation
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// The built `vault-authd` as this test's own user: its command line, its files, its refusals.
@Suite struct DaemonBinaryTests {
    @Test func aTPMThatDoesNotAnswerStopsTheDaemonAtStartAndPCR7NeedsOne() throws {
        let folder = TempFolder("authd-tpm")
        let args = ["--socket", folder.path + "/socket", "--state", folder.path + "/state"]
        let missing = try runProgram(daemonBinary, args + ["--tpm", "swtpm:path=/nonexistent/tpm.sock"])
        #expect(missing.code == 15, "\(missing.stderr)")
        #expect(missing.stderr.hasPrefix("vault-authd: error: the TPM is not available: vault-authd cannot use the TPM at swtpm:path=/nonexistent/tpm.sock"),
                "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.path + "/socket"), "it never served")
        let pcr = try runProgram(daemonBinary, args + ["--tpm", "none", "--tpm-pcr7"])
        #expect(pcr.code == 2 && pcr.stderr.contains("--tpm-pcr7 needs a TPM"), "\(pcr.stderr)")
        let empty = try runProgram(daemonBinary, args + ["--tpm="])
        #expect(empty.code == 2 && empty.stderr.contains("--tpm expects auto, none or a TCTI string"), "\(empty.stderr)")
    }

    @Test func helpGoesToStandardOutputAndUsageErrorsToStandardError() throws {
        let help = try runProgram(daemonBinary, ["--help"])
        #expect(help.code == 0)
        #expect(help.stdout.contains("usage: vault-authd [--socket PATH] [--state DIR] [--tpm auto|none|TCTI] [--tpm-pcr7] [--backend auto|fprintd|libfprint] [--fprintd-state DIR] [--test-mode]"))
        #expect(help.stdout.contains("--backend B") && help.stdout.contains("CAP_DAC_READ_SEARCH"))
        #expect(help.stdout.contains("--tpm T") && help.stdout.contains("--tpm-pcr7"))
        #expect(help.stdout.contains("--test-mode") && help.stdout.contains("refused"))
        #expect(help.stderr.isEmpty)
        let backend = try runProgram(daemonBinary, ["--backend", "pam"])
        #expect(backend.code == 2 && backend.stderr.contains("--backend expects auto, fprintd or libfprint, not 'pam'"), "\(backend.stderr)")

        let typo = try runProgram(daemonBinary, ["--sockt", "/x"])
        #expect(typo.code == 2)
        #expect(typo.stdout.isEmpty)
        #expect(typo.stderr.hasPrefix("vault-authd: error: unknown option '--sockt'\nusage: vault-authd"))
        #expect(typo.stderr.contains("did you mean '--socket'?"))

        let relative = try runProgram(daemonBinary, ["--state", "state"])
        #expect(relative.code == 2)
        #expect(relative.stderr.contains("--state expects an absolute path"))
    }

    @Test func virtualReaderVariablesStopADaemonOutsideTestMode() throws {
        let folder = TempFolder()
        for name in ["FP_VIRTUAL_DEVICE", "FP_VIRTUAL_IMAGE", "FP_DEVICE_EMULATION"] {
            let r = try runProgram(daemonBinary, ["--socket", folder.path + "/run/socket", "--state", folder.path + "/state"],
                                   environment: [name: folder.path + "/vd.sock"], timeLimit: 10)
            #expect(r.code == 1, "\(name): \(r.stderr)")
            #expect(r.stderr.contains("\(name) is set: libfprint's virtual readers are for --test-mode only"))
            #expect(!FileManager.default.fileExists(atPath: folder.path + "/run/socket"))
        }
    }

    @Test func itServesAnyoneOnA0666SocketAndKeepsItsStatePrivate() throws {
        let folder = TempFolder()
        let socket = folder.path + "/run/socket", state = folder.path + "/state"
        let daemon = try RunningDaemon(command: [daemonBinary, "--socket", socket, "--state", state],
                                       environment: ["RUNTIME_DIRECTORY": "/nonexistent", "STATE_DIRECTORY": "/nonexistent"],
                                       socketPath: socket, stateFolder: state, log: folder.path + "/log")
        #expect(try FileStatus.of(socket).permissions == 0o666)
        #expect(try FileStatus.of(folder.path + "/run").permissions == 0o755)
        #expect(try FileStatus.of(state).permissions == 0o700)

        // A test setting is refused by a daemon not in test mode, on a connection that goes on.
        let connection = try UnixSocket.connect(path: socket)
        try connection.sendAll(try AuthorityCodec.frame(.testSettings(bootID: "b", now: 1)).encoded())
        let refused = try rawReplies(connection, within: 5)
        #expect(refused.first?.0 == .failed(error: .usage("refused: test settings need a vault-authd started with --test-mode")))
        try connection.sendAll(try AuthorityCodec.frame(.ping).encoded())
        #expect(try rawReplies(connection, within: 5).first?.0 == .pong(version: 2, testMode: false))

        // Asking makes no state; the caller's folder appears, 0700, with the first request that
        // makes some (an enrolment, which ends here for want of a reader).
        try connection.sendAll(try AuthorityCodec.frame(.fingers).encoded())
        #expect(try rawReplies(connection, within: 5).first?.0 == .fingers(fingers: []))
        let mine = state + "/uid-\(ProcessIdentity.uid)"
        #expect(!FileSystem.exists(mine))
        try connection.sendAll(try AuthorityCodec.frame(.enroll(finger: nil, sensor: nil, proof: nil, label: nil, scanTimeout: 5)).encoded())
        guard case .failed(let noReader)? = try rawReplies(connection, within: 10).last?.0 else { Issue.record("enrol answered"); return }
        #expect(noReader.exitCode == 15, "\(noReader)")
        #expect(try FileStatus.of(mine).permissions == 0o700)
        #expect(try FileStatus.of(mine + "/device-secret").permissions == 0o600)
        #expect(daemon.isRunning)
    }

    @Test func refusedFramesGetOneAnswerAndTheConnectionCloses() throws {
        let folder = TempFolder()
        let socket = folder.path + "/run/socket"
        let daemon = try RunningDaemon(command: [daemonBinary, "--socket", socket, "--state", folder.path + "/state"],
                                       environment: [:], socketPath: socket, stateFolder: folder.path + "/state", log: folder.path + "/log")
        let cases: [([UInt8], String)] = [
            ([0x7f, 0xff, 0xff, 0xff], "over the key authority's limit"),
            ([0, 0, 0, 9, 1, 0, 0, 0, 0, 1, 2, 3, 4], "version 1 is not supported"),
            ([0, 0, 0, 7, 2, 0, 0, 0, 2] + Array("{}".utf8), "malformed request"),
            (try AuthorityFrame(json: Array(#"{"fingers":{}}"#.utf8), tail: [1]).encoded(), "only bind, rekey and reregister carry binary data"),
        ]
        for (bytes, message) in cases {
            let connection = try UnixSocket.connect(path: socket)
            try connection.sendAll(bytes)
            let replies = try rawReplies(connection, within: 5)
            guard case .failed(let e) = replies.first?.0 else { Issue.record("\(message): \(replies)"); continue }
            #expect(e.exitCode == 2 && e.message.contains(message), "\(e.message)")
            // Closed: the next read is the end.
            #expect(try connection.receiveAll(limit: 1 << 20).isEmpty)
        }
        // A frame that never completes is cut off after the request deadline.
        #expect(daemon.isRunning)
        #expect(rawPing(socket))
    }

    /// Random and mutated frames over the socket, each on a connection of its own (most are
    /// refused, which ends the connection): the daemon keeps answering and keeps its state.
    @Test(.timeLimit(.minutes(1))) func tenThousandRandomAndMutatedFramesOverTheSocketLeaveItAnswering() throws {
        let folder = TempFolder()
        let socket = folder.path + "/run/socket"
        let daemon = try RunningDaemon(command: [daemonBinary, "--socket", socket, "--state", folder.path + "/state"],
                                       environment: [:], socketPath: socket, stateFolder: folder.path + "/state", log: folder.path + "/log")
        let valid = try FrameTests.samples.map { try AuthorityCodec.frame($0.0, tail: $0.1).encoded() }
        var generator = SplitMix(seed: 0xdae_304)
        var answered = 0
        for i in 0..<10_000 {
            var bytes = valid[Int(generator.next() % UInt64(valid.count))]
            if i % 5 == 0 {
                bytes = (0..<Int(generator.next() % 64)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            } else {
                for _ in 0..<(1 + Int(generator.next() % 3)) where !bytes.isEmpty {
                    let at = Int(generator.next() % UInt64(bytes.count))
                    if generator.next() % 2 == 0 { bytes[at] = UInt8(truncatingIfNeeded: generator.next()) } else { bytes.removeSubrange(at...) }
                }
            }
            let connection = try UnixSocket.connect(path: socket)
            try? connection.sendAll(bytes)
            // Every hundredth waits for what the daemon says; the others hang up at once.
            if i % 100 == 0, let replies = try? rawReplies(connection, within: 0.2), !replies.isEmpty { answered += 1 }
        }
        #expect(answered > 20)
        #expect(daemon.isRunning)
        // Connections the flood left are still being closed (32 per uid at most): it answers
        // again once they are, and no connection was leaked.
        let end = MonotonicClock.seconds() + 5
        while !rawPing(socket) && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.05) }
        #expect(rawPing(socket))
        let authority = SystemKeyAuthority(socketPath: socket, daemon: .uid(ProcessIdentity.effectiveUID))
        #expect(try authority.fingers().isEmpty)
    }

    @Test func itClosesInheritedDescriptorsAndHasNoCoreLimit() throws {
        let folder = TempFolder()
        let socket = folder.path + "/run/socket"
        var pipe = try UnixPipe()
        let daemon = try RunningDaemon(command: [daemonBinary, "--socket", socket, "--state", folder.path + "/state"],
                                       environment: [:], socketPath: socket, stateFolder: folder.path + "/state", log: folder.path + "/log",
                                       inherit: [.dup2(from: pipe.writeEnd.rawValue, to: 7)])
        try pipe.writeEnd.close()
        // The daemon held the only other write end: closed, the pipe reads its end at once.
        #expect(try Poll.isReadable(pipe.readEnd.rawValue, timeoutMilliseconds: 2000))
        #expect(try pipe.readEnd.readAll(limit: 16).isEmpty)
        let limits = try String(contentsOfFile: "/proc/\(daemon.child.pid)/limits", encoding: .utf8)
        let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }
        #expect(core?.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2) == ["0", "0"], "\(String(describing: core))")
    }
}
