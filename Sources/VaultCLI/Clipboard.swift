import FoundationEssentials
import VaultKit
import VaultSystem

/// The desktop clipboard. On X11, `vault-clipboard` (next to vault) owns the selection itself: it
/// offers the value with the `x-kde-passwordManagerHint: secret` target that clipboard managers
/// skip, and after the delay gives back what the clipboard held before, unless another client
/// copied something meanwhile. Without it (and on Wayland), `xclip` or `wl-copy`/`wl-paste` and a
/// detached clearer that, after the delay, puts back what the clipboard held before (as pass
/// does) if it still holds what vault put there; those offer no hint.
enum Clipboard {
    struct Tool {
        let copy: [String]
        let paste: [String]
    }

    /// The tool for this session, or nil.
    static func tool(_ env: [String: String]) -> Tool? {
        let path = env["PATH"] ?? "/usr/bin:/bin"
        func find(_ name: String) -> String? {
            path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
        }
        if env["WAYLAND_DISPLAY"]?.isEmpty == false, let copy = find("wl-copy"), let paste = find("wl-paste") {
            return Tool(copy: [copy], paste: [paste, "--no-newline"])
        }
        if env["DISPLAY"]?.isEmpty == false, let xclip = find("xclip") {
            return Tool(copy: [xclip, "-selection", "clipboard", "-in"], paste: [xclip, "-selection", "clipboard", "-out"])
        }
        return nil
    }

    /// The environment the tools need, and nothing else.
    static func toolEnvironment(_ env: [String: String]) -> [String: String] {
        env.filter { ["DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "PATH", "HOME"].contains($0.key) }
    }

    /// Runs `argv` with `input` on stdin (stdout captured, stderr discarded); returns (status, stdout).
    /// The value goes through a pipe, never argv. `setsid`: detached in a session of its own, not
    /// waited for (status 0). `extraFD`, `secondFD`: more pipes with these bytes as those descriptors.
    /// - Throws: `.failure` when the tool cannot start, `.io` when a pipe cannot be made.
    @discardableResult
    static func run(_ argv: [String], input: [UInt8], env: [String: String], setsid: Bool = false,
                    extraFD: (fd: Int32, bytes: [UInt8])? = nil, secondFD: (fd: Int32, bytes: [UInt8])? = nil,
                    capture: Bool = false) throws -> (Int32, [UInt8]) {
        do {
            var inPipe = try UnixPipe(), outPipe = try UnixPipe(), extra = try UnixPipe(), second = try UnixPipe()
            var actions: [FileAction] = [.dup2(from: inPipe.readEnd.rawValue, to: 0)]
            actions.append(capture ? .dup2(from: outPipe.writeEnd.rawValue, to: 1) : .open(1, "/dev/null", .writeOnly))
            // The tools fork a server that lives on: it must not hold our caller's output pipes.
            actions.append(.open(2, "/dev/null", .writeOnly))
            if let x = extraFD { actions.append(.dup2(from: extra.readEnd.rawValue, to: x.fd)) }
            if let x = secondFD { actions.append(.dup2(from: second.readEnd.rawValue, to: x.fd)) }
            let child: ChildProcess
            do {
                child = try ChildProcess.spawn(path: argv[0], arguments: argv, environment: env,
                                               fileActions: actions, newSession: setsid)
            } catch {
                throw VaultError.failure("cannot run \(argv[0]): \(error.reason)")
            }
            try inPipe.readEnd.close()
            try outPipe.writeEnd.close()
            try extra.readEnd.close()
            try second.readEnd.close()
            // A tool that exits without reading shows in its status; the write error adds nothing.
            if let x = extraFD { try? extra.writeEnd.writeAll(x.bytes) }
            try extra.writeEnd.close()
            // The pipe buffer may be smaller than what the clipboard held: the clearer reads it
            // while we write, and we are not waiting for it otherwise.
            if let x = secondFD { try? second.writeEnd.writeAll(x.bytes) }
            try second.writeEnd.close()
            try? inPipe.writeEnd.writeAll(input)
            try inPipe.writeEnd.close()
            if setsid { return (0, []) }   // detached: not ours to wait for
            let out = try outPipe.readEnd.readAll(limit: 64 << 20)
            return (try child.wait().shellCode, out)
        } catch let e as SystemError {
            throw VaultError.io(path: e.path ?? argv[0], e.reason)
        }
    }

    /// Why no clipboard can be written here, checked before anything is unlocked (no touch is
    /// spent on a copy that cannot be made): no graphical session, or no tool for the one there is.
    /// - Throws: `.failure` saying which.
    static func check(_ env: [String: String]) throws {
        if tool(env) != nil || ownerProgram(env) != nil { return }
        let wayland = env["WAYLAND_DISPLAY"]?.isEmpty == false, x11 = env["DISPLAY"]?.isEmpty == false
        if !wayland && !x11 {
            throw VaultError.failure("no clipboard: no graphical session (neither DISPLAY nor WAYLAND_DISPLAY is set)",
                                     hint: "print the value with --field, or run this in a desktop terminal")
        }
        throw VaultError.failure("no clipboard: \(wayland ? "wl-copy and wl-paste are" : "xclip is") not installed for this \(wayland ? "Wayland" : "X11") session",
                                 hint: "install \(wayland ? "wl-clipboard" : "xclip"), or print the value with --field")
    }

    /// `vault-clipboard`, next to the running vault, when this is an X11 session (not Wayland
    /// with wl-copy, which is preferred there) and it is installed; nil otherwise.
    static func ownerProgram(_ env: [String: String]) -> String? {
        guard env["DISPLAY"]?.isEmpty == false else { return nil }
        if env["WAYLAND_DISPLAY"]?.isEmpty == false, let t = tool(env), !t.copy[0].hasSuffix("/xclip") { return nil }
        let path = ProcessIdentity.siblingProgram("vault-clipboard")
        return FileManager.default.isExecutableFile(atPath: path) ? path : nil
    }

    /// Copies `value` (its text) and arranges the clearing.
    static func copy(_ value: String, clearAfter seconds: Double, _ ctx: CommandContext) throws {
        let secret = try SecretBytes(copying: Array(value.utf8))
        try copy(secret, clearAfter: seconds, ctx)
    }

    /// Copies `value` and arranges the clearing after `seconds`: by `vault-clipboard` on X11, by
    /// the tool and `vault clipboard-clear` otherwise.
    /// - Throws: `.failure` when there is no clipboard or the copy fails.
    static func copy(_ value: borrowing SecretBytes, clearAfter seconds: Double, _ ctx: CommandContext) throws {
        try check(ctx.environment)
        if let owner = ownerProgram(ctx.environment) {
            try offer(value, clearAfter: seconds, owner: owner, ctx.environment)
            return
        }
        guard let tool = tool(ctx.environment) else { return }
        let env = toolEnvironment(ctx.environment)
        var bytes = value.exposedBytes()
        defer { wipe(&bytes) }
        // What the clipboard held before (nothing when it was empty or the tool says no), given
        // back when the value is cleared; at most 1 MiB is kept.
        var before: [UInt8] = []
        if let (status, held) = try? run(tool.paste, input: [], env: env, capture: true), status == 0, held.count <= 1 << 20 {
            before = held
        }
        // A value copied twice must not come back as "what was there before".
        if before == bytes { wipe(&before) }
        defer { wipe(&before) }
        let (status, _) = try run(tool.copy, input: bytes, env: env)
        guard status == 0 else { throw VaultError.failure("\(tool.copy[0]) failed (exit \(status))") }
        let exe = ProcessIdentity.runningExecutable
        try run([exe, "clipboard-clear", "--after", String(seconds)], input: [], env: env, setsid: true,
                extraFD: (3, bytes), secondFD: (4, before))
    }

    /// Starts `vault-clipboard --after SECONDS` detached, hands it `value` through a pipe on its
    /// standard input (never argv or the environment, which holds only what an X client needs),
    /// and waits (at most 15 s) for its status line: `ok` once it owns the clipboard.
    /// - Throws: `.failure` with its reason when it cannot take the clipboard.
    static func offer(_ value: borrowing SecretBytes, clearAfter seconds: Double, owner: String, _ env: [String: String]) throws {
        do {
            var input = try UnixPipe(), status = try UnixPipe()
            let child: ChildProcess
            do {
                child = try ChildProcess.spawn(
                    path: owner, arguments: [owner, "--after", String(seconds)],
                    environment: env.filter { ["DISPLAY", "XAUTHORITY", "HOME"].contains($0.key) },
                    fileActions: [.dup2(from: input.readEnd.rawValue, to: 0), .dup2(from: status.writeEnd.rawValue, to: 1),
                                  .open(2, "/dev/null", .writeOnly)],
                    newSession: true)
            } catch {
                throw VaultError.failure("cannot run \(owner): \(error.reason)")
            }
            try input.readEnd.close()
            try status.writeEnd.close()
            // An owner that ends early (a refused value) shows in its status line.
            try? value.withUnsafeBytes { try input.writeEnd.writeAll($0) }
            try input.writeEnd.close()
            var said: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 512)
            let deadline = MonotonicClock.seconds() + 15
            while said.count < 4096, !said.contains(10), MonotonicClock.seconds() < deadline {
                let left = Int32(max(1, (deadline - MonotonicClock.seconds()) * 1000))
                guard try Poll.isReadable(status.readEnd.rawValue, timeoutMilliseconds: left) else { continue }
                let n = try chunk.withUnsafeMutableBytes { try status.readEnd.read(into: $0) }
                if n == 0 { break }
                said += chunk[0..<n]
            }
            let line = String(decoding: said, as: UTF8.self).trimmed()
            if line == "ok" { return }   // it lives on, detached: not ours to wait for
            if line.isEmpty && MonotonicClock.seconds() >= deadline {
                try? child.send(.kill)
                _ = try? child.wait()
                throw VaultError.failure("cannot copy to the clipboard: \(owner) did not take it within 15 s")
            }
            let code = (try? child.wait())?.shellCode ?? -1
            let reason = line.hasPrefix("error: ") ? String(line.dropFirst(7)) : "\(owner) ended (exit \(code)) without taking it"
            throw VaultError.failure("cannot copy to the clipboard: \(reason)")
        } catch let e as SystemError {
            throw VaultError.io(path: e.path ?? owner, e.reason)
        }
    }

    /// The options of `clearCommand`, declared once: the table lists them and the command reads them.
    enum ClearOptions {
        static let after = OptionSpec.value("--after", "SECONDS", "the delay")
    }

    /// The hidden command the clearer runs: waits, then, if the clipboard still holds the value read
    /// from descriptor 3, puts back what descriptor 4 holds (the content before the copy), or
    /// empties it when that is nothing.
    static let clearCommand = CommandSpec(
        name: "clipboard-clear", summary: "(internal) empty the clipboard after a delay if it still holds a copied secret",
        usage: "vault clipboard-clear --after SECONDS 3<value [4<previous]",
        options: [ClearOptions.after],
        examples: "vault get github --clip     # starts 'vault clipboard-clear --after 45' with the value on fd 3",
        run: { inv, ctx in
            guard let value = try SecretLine.read(fd: 3) else { return }
            var previous = isOpen(4) ? ((try? readAll(fd: 4, limit: 1 << 20, label: "fd 4")) ?? []) : []
            defer { wipe(&previous) }
            let seconds = Double(inv[ClearOptions.after] ?? "45") ?? 45
            MonotonicClock.sleep(seconds: max(0, min(seconds, 3600)))
            guard let tool = tool(ctx.environment) else { return }
            let (status, current) = try run(tool.paste, input: [], env: toolEnvironment(ctx.environment), capture: true)
            var now = current
            defer { wipe(&now) }
            let held = try SecretBytes(copying: now)
            if status == 0, held.isEqual(to: value) {
                try run(tool.copy, input: previous, env: toolEnvironment(ctx.environment))
            }
        })
}
