internal import Glibc

/// Types into the program's terminal on behalf of a ``TerminalRelayDriver``.
public struct TerminalKeyboard {
    let master: Int32

    /// Types `bytes`, then a newline (written apart, so no second copy of a secret is made).
    /// - Throws: ``SystemError`` for `write` (`EIO` once the program's side is closed).
    public func typeLine(_ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        try writeAll(fd: master, bytes: bytes, label: "/dev/ptmx")
        try writeAll(fd: master, bytes: [10], label: "/dev/ptmx")
    }

    /// Whether the program's terminal echoes input now.
    public var echoIsOn: Bool { TerminalMode.echoIsOn(master) }

    /// Whether the program's terminal is in canonical (line) mode now; a program that starts an
    /// interactive session (a remote shell, an editor) switches it off.
    public var isCanonical: Bool { (try? TerminalAttributes.get(master).canonical) ?? true }
}

/// The decisions a ``TerminalRelay`` leaves to its caller: what to type, and when. The relay only
/// moves bytes; nothing about prompts lives in VaultSystem.
public protocol TerminalRelayDriver: AnyObject {
    /// The program wrote `output` (already passed on to the user).
    /// - Parameter echoOn: whether the program's terminal echoes input right now.
    func programWrote(_ output: ArraySlice<UInt8>, echoOn: Bool, keyboard: TerminalKeyboard) throws
    /// Called on every turn of the relay loop, output or not (at most ``checkIntervalMilliseconds``
    /// apart while the program runs): for decisions that wait on time or on the echo setting.
    func tick(echoOn: Bool, keyboard: TerminalKeyboard) throws
    /// Whether input from a pipe or a file (not a terminal) is held back for now; its end of file
    /// is passed on, as the terminal's EOF character, only once it is released and sent.
    var holdsPipedInput: Bool { get }
    /// How long the loop may wait for output before the next ``tick(echoOn:keyboard:)``.
    var checkIntervalMilliseconds: Int32 { get }
}

/// What a relay run ended with.
public struct TerminalRelayResult: Sendable {
    /// How the program ended.
    public let status: ExitStatus
    /// The first failed write of the program's output to ours (the rest was dropped, the program
    /// kept running); nil when every byte was written.
    public let outputFailure: SystemError?
}

/// Runs a program on a pseudo-terminal of its own, in its own session, and relays the user's
/// terminal (raw while it runs) or pipe to it and its output back, asking a driver what to type.
/// SIGINT, SIGTERM and SIGHUP reaching us are forwarded to it (terminal signals do not reach it
/// from our terminal); SIGWINCH resizes its terminal.
public enum TerminalRelay {
    /// Output kept in one read.
    static let chunk = 16384
    /// Input buffered for the program before we stop reading more.
    static let inputLimit = 65536

    /// Starts `request` (its file actions, then the terminal's) and relays until the program's
    /// side of the terminal is closed and its status is known.
    /// - Parameters:
    ///   - input: the user's keyboard (a terminal) or a pipe/file; a terminal's settings and size
    ///     are copied to the pseudo-terminal, else the kernel's defaults apply.
    ///   - output: where the program's output goes.
    /// - Throws: ``SystemError`` for `openpty` (path `/dev/ptmx`) or `posix_spawn` (the program's
    ///   path), or what the driver throws.
    public static func run(_ request: SpawnRequest, input: Int32, output: Int32,
                           driver: any TerminalRelayDriver) throws -> TerminalRelayResult {
        let userTerminal = isTerminal(input)
        var size = WindowSize.standard
        var saved: TerminalAttributes?
        if userTerminal {
            if let reported = try? WindowSize.get(input), reported.rows > 0, reported.columns > 0 { size = reported }
            saved = try? TerminalAttributes.get(input)
        }
        var terminal = try PseudoTerminal.open(attributes: saved, size: size)
        let master = terminal.master.rawValue

        let forwarding = SignalForwarding(skipKernelSent: false)
        defer { forwarding.restore() }
        var spawn = request
        spawn.fileActions += terminal.childFileActions
        spawn.newSession = true
        spawn.defaultSignals += forwarding.forwarded
        let child = try ChildProcess.spawn(spawn)
        forwarding.attach(child.pid)
        // Our copy of the slave goes, so the master reads EIO once the child's side is closed.
        try? terminal.slave.close()
        // A closed output must not kill us with the terminal left raw (the child gets SIGPIPE's
        // default back through the spawn attributes).
        let pipeAction = ignoreBrokenPipe()
        defer { pipeAction.restore() }
        try terminal.master.setNonBlocking(true)

        if userTerminal, let saved { try? saved.makingRaw().set(input, when: .drain) }
        defer { if userTerminal, let saved { try? saved.set(input, when: .drain) } }

        let keyboard = TerminalKeyboard(master: master)
        var inputOpen = true
        var eofSent = userTerminal
        var masterOpen = true
        var toChild: [UInt8] = []
        var status: ExitStatus?
        var outputFailure: SystemError?
        var buffer = [UInt8](repeating: 0, count: chunk)
        defer { wipe(&buffer); wipe(&toChild) }
        while masterOpen {
            if forwarding.takeWindowChange(), userTerminal, let now = try? WindowSize.get(input) {
                try? now.set(master)
            }
            if status == nil { status = try? child.waitNonBlocking() }
            try driver.tick(echoOn: keyboard.echoIsOn, keyboard: keyboard)
            // Piped input goes in only once the driver releases it, and its end after it.
            let inputHeld = !userTerminal && driver.holdsPipedInput
            if !inputOpen, !eofSent, !inputHeld, toChild.isEmpty {
                if let attributes = try? TerminalAttributes.get(master) {
                    try? writeAll(fd: master, bytes: [attributes.endOfFile], label: "/dev/ptmx")
                }
                eofSent = true
            }
            let sending = !toChild.isEmpty && !inputHeld
            var requests = [PollRequest(fd: master, events: sending ? [.readable, .writable] : .readable)]
            if inputOpen && toChild.count < inputLimit { requests.append(PollRequest(fd: input, events: .readable)) }
            // Once the child has ended, only what is already buffered is read.
            let timeout: Int32 = status != nil ? 0 : driver.checkIntervalMilliseconds
            let ready: [PollEvents]
            do {
                ready = try Poll.wait(requests, timeoutMilliseconds: timeout, retryOnInterrupt: false)
            } catch where error.isInterrupted {
                continue
            } catch {
                break
            }
            if ready.allSatisfy(\.isEmpty) {
                if status != nil { break }
                continue
            }
            if ready[0].contains(.writable), sending {
                let written = try? toChild.withUnsafeBytes { b in
                    try syscall("write", path: "/dev/ptmx") { Glibc.write(master, b.baseAddress!, b.count) }
                }
                if let written, written > 0 { toChild.removeFirst(written) }
            }
            if !ready[0].subtracting(.writable).isEmpty {
                var count = 0
                do {
                    count = try buffer.withUnsafeMutableBytes { b in try readSome(fd: master, into: b, label: "/dev/ptmx") }
                    if count == 0 { masterOpen = false }
                } catch let e as SystemError where e.isWouldBlock {
                } catch {
                    // EIO: every descriptor of the child's side is closed.
                    masterOpen = false
                }
                if count > 0 {
                    do {
                        try buffer.withUnsafeBytes { b in try writeAll(fd: output, bytes: UnsafeRawBufferPointer(rebasing: b[0..<count])) }
                    } catch {
                        if outputFailure == nil { outputFailure = error as? SystemError }
                    }
                    try driver.programWrote(buffer[0..<count], echoOn: keyboard.echoIsOn, keyboard: keyboard)
                }
            }
            if ready.count > 1, !ready[1].isEmpty {
                do {
                    let n = try buffer.withUnsafeMutableBytes { b in try readSome(fd: input, into: b) }
                    if n > 0 { toChild.append(contentsOf: buffer[0..<n]) } else { inputOpen = false }
                } catch let e as SystemError where e.isWouldBlock {
                } catch is SystemError {
                    inputOpen = false
                }
            }
        }
        let final = try status ?? child.wait()
        return TerminalRelayResult(status: final, outputFailure: outputFailure)
    }
}
