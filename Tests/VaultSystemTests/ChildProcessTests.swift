import Foundation
import Testing
import VaultSystem

/// Runs `sh -c script` with standard output captured; (status, output).
func shell(_ script: String, environment: [String: String] = [:], fileActions: [FileAction] = [],
           newSession: Bool = false) throws -> (VaultSystem.ExitStatus, String) {
    var pipe = try UnixPipe()
    let child = try ChildProcess.spawn(path: "/bin/sh", arguments: ["sh", "-c", script], environment: environment,
                                       fileActions: [.dup2(from: pipe.writeEnd.rawValue, to: 1)] + fileActions,
                                       newSession: newSession)
    try pipe.writeEnd.close()
    let output = try pipe.readEnd.readAll(limit: 1 << 20)
    return (try child.wait(), String(decoding: output, as: UTF8.self))
}

@Suite struct ChildProcessTests {
    @Test func exitCodesAndSignals() throws {
        var (status, _) = try shell("exit 42")
        #expect(status == .exited(42) && status.shellCode == 42 && !status.isSuccess)
        (status, _) = try shell("kill -KILL $$")
        #expect(status == .signaled(.kill))
        #expect(status.shellCode == 137)
        (status, _) = try shell("true")
        #expect(status.isSuccess)
    }

    @Test func theEnvironmentIsExactlyTheOneGiven() throws {
        let (status, output) = try shell(#"printf '%s|%s' "$SECRET" "${HOME-unset}""#, environment: ["SECRET": "a b'c"])
        #expect(status.isSuccess)
        #expect(output == "a b'c|unset")
    }

    /// Entries of a secret block reach the child as they are (spaces, `=`, UTF-8), alongside the
    /// ordinary variables, and replace an ordinary variable of the same name.
    @Test func aSecretEnvironmentBlockCompletesTheEnvironment() throws {
        var pipe = try UnixPipe()
        let request = SpawnRequest(path: "/bin/sh", arguments: ["sh", "-c", #"printf '%s|%s|%s|%s' "$TOKEN" "$PLAIN" "$EMPTY" "$(env | grep -c '^TOKEN=')""#],
                                   environment: ["PLAIN": "p", "TOKEN": "ordinary, replaced"],
                                   fileActions: [.dup2(from: pipe.writeEnd.rawValue, to: 1)])
        let block = Array("TOKEN=s3 cr=t ✓\u{0}EMPTY=\u{0}".utf8)
        let child = try block.withUnsafeBytes { b throws(SystemError) in try ChildProcess.spawn(request, secretEnvironment: b) }
        try pipe.writeEnd.close()
        let output = try pipe.readEnd.readAll(limit: 1 << 20)
        #expect(try child.wait().isSuccess)
        #expect(String(decoding: output, as: UTF8.self) == "s3 cr=t ✓|p||1")
    }

    @Test func fileActionsRunInOrder() throws {
        let scratch = Scratch()
        let file = scratch.file("out")
        var (status, output) = try shell("echo to-file; echo to-pipe >&5",
                                         fileActions: [.dup2(from: 1, to: 5), .open(1, file, .writeOnly, [.create, .truncate])])
        #expect(status.isSuccess)
        #expect(output == "to-pipe\n")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "to-file\n")
        (_, output) = try shell("[ -e /proc/$$/fd/5 ] && echo open || echo closed", fileActions: [.dup2(from: 1, to: 5), .close(5)])
        #expect(output == "closed\n")
        // Our own descriptors are close-on-exec: the child does not get them by accident.
        let mine = try FileDescriptor.open("/dev/null", .readOnly)
        let raw = mine.rawValue
        (_, output) = try shell("[ -e /proc/$$/fd/\(raw) ] && echo open || echo closed")
        #expect(output == "closed\n")
    }

    @Test func theChildGetsSIGPIPEBackEvenWhenWeIgnoreIt() throws {
        let saved = ignoreBrokenPipe()
        defer { saved.restore() }
        #expect(Signal.brokenPipe.isIgnored)
        // A shell cannot undo a signal ignored at its start: `kill -PIPE $$` only kills it if
        // the spawn set SIGPIPE back to the default.
        let (status, _) = try shell("kill -PIPE $$; echo survived")
        #expect(status == .signaled(.brokenPipe))
        #expect(status.shellCode == 141)
    }

    @Test func theChildStartsWithAnEmptySignalMask() throws {
        let (_, output) = try shell("grep SigBlk /proc/self/status")
        #expect(output == "SigBlk:\t0000000000000000\n")
    }

    @Test func aNewSessionHasTheChildAsLeader() throws {
        var (_, output) = try shell(#"set -- $(cat /proc/$$/stat); [ "$6" = "$$" ] && echo leader || echo member"#, newSession: true)
        #expect(output == "leader\n")
        (_, output) = try shell(#"set -- $(cat /proc/$$/stat); [ "$6" = "$$" ] && echo leader || echo member"#)
        #expect(output == "member\n")
    }

    @Test func waitNonBlockingReturnsNilWhileRunning() throws {
        let child = try ChildProcess.spawn(path: "/bin/sleep", arguments: ["sleep", "0.3"], environment: [:])
        #expect(try child.waitNonBlocking() == nil)
        var status: VaultSystem.ExitStatus?
        let end = MonotonicClock.seconds() + 10
        while status == nil && MonotonicClock.seconds() < end {
            MonotonicClock.sleep(seconds: 0.02)
            status = try child.waitNonBlocking()
        }
        #expect(status == .exited(0))
        #expect(systemError { _ = try child.wait() }?.call == "waitpid")
    }

    @Test func aMissingProgramIsASpawnError() {
        let error = systemError { _ = try ChildProcess.spawn(path: "/no/such/program", arguments: ["x"], environment: [:]) }
        #expect(error?.call == "posix_spawn")
        #expect(error?.path == "/no/such/program")
        #expect(error?.isNotFound == true)
    }

    @Test func programLookupFollowsExecvp() throws {
        let scratch = Scratch()
        let plain = scratch.file("tool")
        _ = FileManager.default.createFile(atPath: plain, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o600])
        try PrivateFiles.makeFolder(scratch.file("bin"))
        let runnable = scratch.file("bin/tool")
        _ = FileManager.default.createFile(atPath: runnable, contents: Data("#!/bin/sh\n".utf8), attributes: [.posixPermissions: 0o700])
        #expect(ProgramLookup.find("sh", searchPath: "/nonexistent:/bin") == .found("/bin/sh"))
        #expect(ProgramLookup.find("no-such-tool-here", searchPath: "/bin:/usr/bin") == .notFound)
        #expect(ProgramLookup.find("/etc/passwd", searchPath: "") == .notExecutable("/etc/passwd"))
        #expect(ProgramLookup.find("tool", searchPath: scratch.path) == .notExecutable(plain))
        // A later executable wins over an earlier non-executable file.
        #expect(ProgramLookup.find("tool", searchPath: scratch.path + ":" + scratch.file("bin")) == .found(runnable))
        #expect(ProgramLookup.find("bin", searchPath: scratch.path) == .notExecutable(scratch.file("bin")))
    }
}
