import Foundation
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// The package's build folder: the one holding the test bundle (`VAULT_BUILD_FOLDER` overrides).
let buildFolder: String = {
    if let f = ProcessInfo.processInfo.environment["VAULT_BUILD_FOLDER"] { return f }
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return (exe as NSString).deletingLastPathComponent
}()

/// The built `vault-authd`.
let daemonBinary = buildFolder + "/vault-authd"
/// The built `virtual-reader`.
let readerBinary = buildFolder + "/virtual-reader"

/// What a finished program printed and how it ended.
struct ProgramResult {
    var stdout: String
    var stderr: String
    var status: VaultSystem.ExitStatus
    var code: Int32 { status.shellCode }
}

/// Runs `path arguments` with `environment`, stdin from /dev/null, stdout and stderr into files;
/// kills it after `timeLimit` seconds.
func runProgram(_ path: String, _ arguments: [String], environment: [String: String] = [:], timeLimit: Double = 30) throws -> ProgramResult {
    let folder = TempFolder("authd-run")
    let out = folder.path + "/out", err = folder.path + "/err"
    let child = try ChildProcess.spawn(path: path, arguments: [path] + arguments, environment: environment,
                                       fileActions: [.open(0, "/dev/null", .readOnly), .open(1, out, .writeOnly, [.create, .truncate]),
                                                     .open(2, err, .writeOnly, [.create, .truncate])])
    let end = MonotonicClock.seconds() + timeLimit
    var status: VaultSystem.ExitStatus?
    while status == nil {
        status = try child.waitNonBlocking()
        if status == nil {
            if MonotonicClock.seconds() > end { try? child.send(.kill) }
            MonotonicClock.sleep(seconds: 0.01)
        }
    }
    return ProgramResult(stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
                         stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "", status: status!)
}

/// A `vault-authd` started by a test (as this process's user, or through `setpriv` as another),
/// stopped and reaped when the value goes.
final class RunningDaemon: @unchecked Sendable {
    let socketPath: String
    let stateFolder: String
    let log: String
    let child: ChildProcess
    private var stopped = false

    /// Starts `command` (the daemon's argv, possibly behind `setpriv`) and waits until its socket
    /// answers a ping.
    init(command: [String], environment: [String: String], socketPath: String, stateFolder: String, log: String,
         inherit extra: [FileAction] = []) throws {
        self.socketPath = socketPath
        self.stateFolder = stateFolder
        self.log = log
        child = try ChildProcess.spawn(path: command[0], arguments: command, environment: environment,
                                       fileActions: [.open(0, "/dev/null", .readOnly), .open(1, log, .writeOnly, [.create, .append]),
                                                     .dup2(from: 1, to: 2)] + extra)
        let end = MonotonicClock.seconds() + 15
        while MonotonicClock.seconds() < end {
            if (try? child.waitNonBlocking()) != nil {
                throw VaultError.failure("vault-authd ended: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            }
            if rawPing(socketPath) { return }
            MonotonicClock.sleep(seconds: 0.02)
        }
        try? child.send(.kill)
        _ = try? child.wait()
        throw VaultError.failure("vault-authd did not answer on \(socketPath)")
    }

    /// Whether the process still runs.
    var isRunning: Bool { (try? child.waitNonBlocking()) == nil && !stopped }

    /// SIGTERM, then the exit status.
    @discardableResult
    func stop() -> VaultSystem.ExitStatus? {
        guard !stopped else { return nil }
        stopped = true
        try? child.send(.terminate)
        return try? child.wait()
    }

    deinit { stop() }

    var logText: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
}

/// Sends a `ping` frame and waits (2 s) for a `pong`, with no identity check.
func rawPing(_ socketPath: String) -> Bool {
    guard let socket = try? UnixSocket.connect(path: socketPath), let frame = try? AuthorityCodec.frame(.ping) else { return false }
    guard (try? socket.sendAll(frame.encoded())) != nil else { return false }
    guard let replies = try? rawReplies(socket, within: 2), case .pong = replies.last?.0 else { return false }
    return true
}

/// Reads replies until a final one (or the peer closes, or `seconds` pass).
func rawReplies(_ socket: borrowing UnixSocket, within seconds: Double) throws -> [(AuthorityReply, [UInt8])] {
    let decoder = AuthorityFrameDecoder(limit: AuthorityLimits.replyFrame)
    var out: [(AuthorityReply, [UInt8])] = []
    let end = MonotonicClock.seconds() + seconds
    var chunk = [UInt8](repeating: 0, count: 65536)
    while MonotonicClock.seconds() < end {
        while let frame = try decoder.next() {
            let reply = try AuthorityCodec.reply(frame)
            out.append((reply, frame.tail))
            if reply.isFinal { return out }
        }
        guard try Poll.isReadable(socket.rawValue, timeoutMilliseconds: 50) else { continue }
        let n = try chunk.withUnsafeMutableBytes { try socket.receive(into: $0) }
        if n == 0 { return out }
        decoder.append(Array(chunk[0..<n]))
    }
    return out
}
