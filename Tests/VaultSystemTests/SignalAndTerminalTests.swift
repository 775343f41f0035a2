import Foundation
import Testing
import VaultSystem

/// Signal handlers are process-wide: these run one at a time.
@Suite(.serialized) struct SignalAndTerminalTests {
    @Test func interruptsSetTheFlag() throws {
        Interrupts.install()
        Interrupts.requested = false
        try Signal.interrupt.send(to: ProcessIdentity.pid)
        let end = MonotonicClock.seconds() + 5
        while !Interrupts.requested && MonotonicClock.seconds() < end { MonotonicClock.sleep(seconds: 0.01) }
        #expect(Interrupts.requested)
        Interrupts.requested = false
        #expect(!Interrupts.requested)
    }

    @Test func signalsAreForwardedToTheChild() throws {
        var pipe = try UnixPipe()
        let forwarding = SignalForwarding(skipKernelSent: false)
        defer { forwarding.restore() }
        #expect(forwarding.forwarded.contains(.terminate))
        let child = try ChildProcess.spawn(
            path: "/bin/sh", arguments: ["sh", "-c", #"trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done"#],
            environment: ["PATH": "/usr/bin:/bin"], fileActions: [.dup2(from: pipe.writeEnd.rawValue, to: 1)],
            defaultSignals: forwarding.forwarded)
        forwarding.attach(child.pid)
        try pipe.writeEnd.close()
        #expect(try pipe.readEnd.readExactly(6) == Array("ready\n".utf8))
        try Signal.terminate.send(to: ProcessIdentity.pid)
        #expect(try child.wait() == .exited(5))
        #expect(try pipe.readEnd.readAll(limit: 100) == Array("got-term\n".utf8))
    }

    @Test func aChildOnAPseudoTerminalSeesATerminal() throws {
        var terminal = try PseudoTerminal.open(size: WindowSize(rows: 30, columns: 100))
        #expect(terminal.slavePath.hasPrefix("/dev/pts/"))
        let child = try ChildProcess.spawn(
            path: "/bin/sh", arguments: ["sh", "-c", "test -t 0 && echo stdin-tty; stty size; exec 4</dev/tty && echo has-tty"],
            environment: ["PATH": "/usr/bin:/bin"], fileActions: terminal.childFileActions, newSession: true)
        try terminal.slave.close()
        var output: [UInt8] = []
        while true {
            var chunk = [UInt8](repeating: 0, count: 1024)
            let n = (try? chunk.withUnsafeMutableBytes { try terminal.master.read(into: $0) }) ?? 0
            if n == 0 { break }  // EIO: the child's side is closed
            output += chunk[0..<n]
        }
        #expect(try child.wait().isSuccess)
        let text = String(decoding: output, as: UTF8.self)
        #expect(text.contains("stdin-tty\r\n"))
        #expect(text.contains("30 100\r\n"))
        #expect(text.contains("has-tty"))
    }

    @Test func echoAndSizeReadBack() throws {
        let terminal = try PseudoTerminal.open()
        let slave = terminal.slave.rawValue, master = terminal.master.rawValue
        #expect(TerminalMode.echoIsOn(slave))
        var attributes = try TerminalAttributes.get(slave)
        attributes.echo = false
        try attributes.set(slave)
        #expect(!TerminalMode.echoIsOn(slave))
        #expect(!TerminalMode.echoIsOn(master), "the master reports the slave's settings")
        attributes.echo = true
        try attributes.set(slave)
        let inside = try TerminalMode.withEchoOff(slave) { TerminalMode.echoIsOn(slave) }
        #expect(!inside && TerminalMode.echoIsOn(slave))
        let raw = try TerminalMode.withRawMode(slave) { try TerminalAttributes.get(slave).canonical }
        let after = try TerminalAttributes.get(slave).canonical
        #expect(!raw && after)
        try WindowSize(rows: 12, columns: 34).set(master)
        #expect(try WindowSize.get(slave) == WindowSize(rows: 12, columns: 34))
        #expect(try TerminalAttributes.get(slave).endOfFile == 4)
        #expect(!TerminalMode.echoIsOn(-1))
        #expect(systemError { _ = try TerminalAttributes.get(FileDescriptor.open("/dev/null", .readOnly).rawValue) } != nil)
    }

    /// Types `reply` once the output ends in `prompt`, then releases piped input.
    final class Typist: TerminalRelayDriver {
        let prompt: String
        let reply: [UInt8]
        var seen = ""
        var typed = false
        var ticks = 0
        init(prompt: String, reply: String) {
            self.prompt = prompt
            self.reply = Array(reply.utf8)
        }
        func programWrote(_ output: ArraySlice<UInt8>, echoOn: Bool, keyboard: TerminalKeyboard) throws {
            seen += String(decoding: output, as: UTF8.self)
            if !typed && seen.hasSuffix(prompt) {
                typed = true
                try reply.withUnsafeBytes { try keyboard.typeLine($0) }
            }
        }
        func tick(echoOn: Bool, keyboard: TerminalKeyboard) throws { ticks += 1 }
        var holdsPipedInput: Bool { !typed }
        var checkIntervalMilliseconds: Int32 { 50 }
    }

    @Test func theRelayTypesWhatTheDriverSaysAndHoldsPipedInput() throws {
        var input = try UnixPipe()
        try input.writeEnd.writeAll(Array("from-the-pipe\n".utf8))
        try input.writeEnd.close()
        var output = try UnixPipe()
        let typist = Typist(prompt: "Name: ", reply: "bob")
        let script = #"printf 'Name: '; read n; read m; echo "[$n/$m]"; read eof || echo saw-eof; exit 3"#
        let result = try TerminalRelay.run(
            SpawnRequest(path: "/bin/sh", arguments: ["sh", "-c", script], environment: ["PATH": "/usr/bin:/bin"]),
            input: input.readEnd.rawValue, output: output.writeEnd.rawValue, driver: typist)
        try output.writeEnd.close()
        let text = String(decoding: try output.readEnd.readAll(limit: 1 << 16), as: UTF8.self)
        #expect(result.status == .exited(3))
        #expect(result.outputFailure == nil)
        #expect(text.contains("[bob/from-the-pipe]"), "\(text)")
        #expect(text.contains("saw-eof"))
        #expect(typist.ticks > 0)
    }

    @Test func relayOutputFailuresAreReportedNotFatal() throws {
        let full = try FileDescriptor.open("/dev/full", .writeOnly)
        let null = try FileDescriptor.open("/dev/null", .readOnly)
        let result = try TerminalRelay.run(
            SpawnRequest(path: "/bin/sh", arguments: ["sh", "-c", "echo hello; exit 4"], environment: [:]),
            input: null.rawValue, output: full.rawValue, driver: Typist(prompt: "never", reply: ""))
        #expect(result.status == .exited(4))
        #expect(result.outputFailure?.isFull == true)
    }
}
