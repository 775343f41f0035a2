public import VaultKit
internal import VaultSystem
internal import Foundation

/// A passcode asked through a pinentry program (Debian's `pinentry-gnome3`, `-gtk2`, `-qt`,
/// `-curses`...), over the Assuan protocol as gpg-agent speaks it: the program greets with `OK`,
/// each command (`SETTITLE`, `SETDESC`, `SETPROMPT`, `GETPIN`) is one line answered by `OK` or
/// `ERR`, and `GETPIN` sends the passcode first as a `D` line, percent-escaped. The reply is read
/// into guarded memory; a cancel, an error or a program that ends gives nil.
public struct Pinentry {
    /// The pinentry program's path.
    public let program: String
    /// The terminal a terminal pinentry (`pinentry-tty`, `-curses`) asks on, as gpg-agent takes it
    /// from `GPG_TTY`; graphical ones read `DISPLAY` or `WAYLAND_DISPLAY` from the environment.
    public let terminal: String?
    /// The terminal's type (`TERM`), for a terminal pinentry.
    public let terminalType: String?

    /// A pinentry; `environment` gives `GPG_TTY` and `TERM`.
    public init(program: String, environment: [String: String] = [:]) {
        self.program = program
        terminal = environment["GPG_TTY"].flatMap { $0.isEmpty ? nil : $0 }
        terminalType = environment["TERM"]
    }

    /// The passcode the person typed, nil when none was given.
    public func passcode(description: String) -> SecretBytes? {
        conversation(failing: nil) { input, output in passcode(description: description, &input, &output) }
    }

    private func passcode(description: String, _ input: inout FileDescriptor, _ output: inout FileDescriptor) -> SecretBytes? {
        guard let buffer = try? SecretBytes(zeroed: 4096) else { return nil }
        var used = 0, unread = 0
        /// Reads up to the end of the next line that is not a comment or status; returns its range.
        func line() -> Range<Int>? {
            while true {
                let start = unread
                if let end = buffer.withUnsafeBytes({ b in (start..<used).first { b[$0] == 0x0a } }) {
                    unread = end + 1
                    let isNoise = buffer.withUnsafeBytes { b in end > start && (b[start] == 0x23 || (end - start >= 2 && b[start] == 0x53 && b[start + 1] == 0x20)) }
                    if isNoise { continue }
                    return start..<end
                }
                guard used < buffer.count else { return nil }
                let n = buffer.withUnsafeMutableBytes { b in
                    (try? input.read(into: UnsafeMutableRawBufferPointer(rebasing: b[used...]))) ?? 0
                }
                if n <= 0 { return nil }
                used += n
            }
        }
        func startsWith(_ r: Range<Int>, _ word: String) -> Bool {
            let w = Array(word.utf8)
            return buffer.withUnsafeBytes { b in r.count >= w.count && Array(b[r.lowerBound..<(r.lowerBound + w.count)]) == w }
        }
        func command(_ text: String) -> Bool {
            guard (try? output.writeAll(Array((text + "\n").utf8))) != nil, let r = line() else { return false }
            let ok = startsWith(r, "OK")
            return ok
        }
        guard let greeting = line(), startsWith(greeting, "OK") else { return nil }
        for c in openingCommands + ["SETDESC " + Self.escape(description), "SETPROMPT Passcode:"] where !command(c) { return nil }
        guard (try? output.writeAll(Array("GETPIN\n".utf8))) != nil, let data = line(), startsWith(data, "D ") else { return nil }
        let decoded: SecretBytes? = buffer.withUnsafeBytes { b in
            guard let out = try? SecretBytes(zeroed: data.count) else { return nil }
            var n = 0, i = data.lowerBound + 2
            out.withUnsafeMutableBytes { o in
                while i < data.upperBound {
                    if b[i] == 0x25, i + 2 < data.upperBound, let h = Self.hexValue(b[i + 1]), let l = Self.hexValue(b[i + 2]) {
                        o[n] = h << 4 | l
                        i += 3
                    } else {
                        o[n] = b[i]
                        i += 1
                    }
                    n += 1
                }
            }
            return try? out.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        _ = try? output.writeAll(Array("BYE\n".utf8))
        return decoded
    }

    /// Shows `prefix` followed by `secret` (text with no byte Assuan escapes: a recovery key)
    /// and waits for the person to dismiss it (`MESSAGE`); true when it was shown. The line
    /// with the secret is built and written from guarded memory.
    public func show(prefix: String, _ secret: borrowing SecretBytes) -> Bool {
        conversation(failing: false) { input, output in show(prefix: prefix, secret, &input, &output) }
    }

    private func show(prefix: String, _ secret: borrowing SecretBytes, _ input: inout FileDescriptor, _ output: inout FileDescriptor) -> Bool {
        var pending: [UInt8] = []
        /// The next line that is not a comment or status (no secret comes back: only OK or ERR).
        func line() -> [UInt8]? {
            while true {
                if let end = pending.firstIndex(of: 0x0a) {
                    let l = Array(pending[..<end])
                    pending.removeSubrange(...end)
                    if l.first == 0x23 || (l.count >= 2 && l[0] == 0x53 && l[1] == 0x20) { continue }
                    return l
                }
                var chunk = [UInt8](repeating: 0, count: 1024)
                let n = chunk.withUnsafeMutableBytes { (try? input.read(into: $0)) ?? 0 }
                if n <= 0 || pending.count > 65536 { return nil }
                pending += chunk[0..<n]
            }
        }
        func ok() -> Bool { line().map { $0.starts(with: Array("OK".utf8)) } ?? false }
        func command(_ text: String) -> Bool { (try? output.writeAll(Array((text + "\n").utf8))) != nil && ok() }
        guard ok() else { return false }
        for c in openingCommands where !command(c) { return false }
        let head = Array(("SETDESC " + Self.escape(prefix)).utf8)
        guard let description = try? SecretBytes(zeroed: head.count + secret.count + 1) else { return false }
        description.withUnsafeMutableBytes { d in
            d.copyBytes(from: head)
            secret.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: d[head.count...]).copyMemory(from: $0) }
            d[d.count - 1] = 0x0a
        }
        guard (try? description.withUnsafeBytes({ try output.writeAll($0) })) != nil, ok() else { return false }
        let shown = command("MESSAGE")
        _ = try? output.writeAll(Array("BYE\n".utf8))
        return shown
    }

    /// Runs the pinentry program with its standard input and output on pipes and `body` over
    /// them (read from it, write to it); `failed` when it cannot start. The program is ended and
    /// reaped afterwards.
    private func conversation<R: ~Copyable>(failing failed: consuming R, _ body: (inout FileDescriptor, inout FileDescriptor) -> R) -> R {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        let toChild = Pipe(), fromChild = Pipe()
        process.standardInput = toChild
        process.standardOutput = fromChild
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return failed }
        defer {
            try? toChild.fileHandleForWriting.close()
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
        }
        var input = FileDescriptor(owning: fromChild.fileHandleForReading.fileDescriptor)
        var output = FileDescriptor(owning: toChild.fileHandleForWriting.fileDescriptor)
        defer {
            _ = input.take()
            _ = output.take()
        }
        return body(&input, &output)
    }

    /// The terminal options (for a terminal pinentry) and the title every conversation starts with.
    private var openingCommands: [String] {
        var commands: [String] = []
        if let terminal {
            commands.append("OPTION ttyname=" + Self.escape(terminal))
            if let t = terminalType { commands.append("OPTION ttytype=" + Self.escape(t)) }
        }
        return commands + ["SETTITLE vault"]
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x37
        case 0x61...0x66: c - 0x57
        default: nil
        }
    }

    /// Assuan's escaping of a command argument: `%`, CR and LF as `%XX`.
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "\r", with: "%0D").replacingOccurrences(of: "\n", with: "%0A")
    }
}
