// vault-clipboard: the X11 clipboard owner of `vault get --clip`, in a process of its own so that
// vault itself does not link libxcb. vault starts it detached (next to itself) as
// `vault-clipboard --after SECONDS`, with the value on standard input (a pipe, read to its end)
// and a status pipe on standard output; it is not meant to be run by hand.
//
// It reads what the clipboard holds, takes the CLIPBOARD selection and writes `ok` (or
// `error: ...`) on standard output. It then serves the value, with the
// `x-kde-passwordManagerHint: secret` target, for SECONDS. If another client takes the selection
// meanwhile, it exits at once and touches nothing. At the deadline it wipes the value and gives
// back what the clipboard held before (served without the hint until another client copies
// something), or empties the clipboard.
import Foundation
import VaultKit
import VaultSystem

/// The most vault hands over: a value larger than this is refused (exit 1).
let valueLimit = 1 << 20

/// Writes the one status line vault waits for (vault reads up to its newline).
func report(_ line: String) {
    try? writeAll(fd: 1, bytes: Array((line + "\n").utf8))
}

/// Standard input to its end, straight into guarded memory (growing by doubling, each old
/// buffer wiped as it goes); nil (after reporting why) past `limit` bytes or when it cannot be read.
func readValue(limit: Int) -> SecretBytes? {
    do {
        var buffer = try SecretBytes(zeroed: 4096)
        var count = 0
        while true {
            if count == buffer.count {
                guard buffer.count <= limit else { break }
                let larger = try SecretBytes(zeroed: buffer.count * 2)
                buffer.withUnsafeBytes { old in larger.withUnsafeMutableBytes { $0.copyMemory(from: old) } }
                buffer = larger
            }
            let n = try buffer.withUnsafeMutableBytes { b in
                try readSome(fd: 0, into: UnsafeMutableRawBufferPointer(rebasing: b[count...]), label: "the value")
            }
            if n == 0 { break }
            count += n
        }
        guard count <= limit else {
            report("error: the value is larger than \(limit >> 20) MiB")
            return nil
        }
        return try buffer.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    } catch {
        report("error: cannot read the value: \(error)")
        return nil
    }
}

/// Connects, keeps what the clipboard holds and takes it for `value`; reports `ok`, or the
/// error and nil.
func takeClipboard(for value: borrowing SecretBytes) -> ClipboardOwner? {
    do {
        let owner = try ClipboardOwner(try XDisplay(display: ProcessInfo.processInfo.environment["DISPLAY"] ?? ""))
        guard value.count <= owner.largestValue else {
            report("error: the value (\(value.count) bytes) is larger than this X server takes in one piece (\(owner.largestValue))")
            return nil
        }
        try owner.keepPrevious(other: value)
        try owner.take()
        report("ok")
        return owner
    } catch {
        report("error: \(error)")
        return nil
    }
}

/// The whole life of the owner; returns the exit code. The value is served for `seconds`, then
/// wiped; the previous text is served after it, or the clipboard emptied, unless another client
/// took the clipboard meanwhile.
func run(seconds: Double) -> Int32 {
    do {
        try ProcessHardening.disableCoreDumps()
    } catch {
        report("error: cannot make this process non-dumpable: \(error)")
        return 1
    }
    guard let value = readValue(limit: valueLimit), let owner = takeClipboard(for: value) else { return 1 }
    let end: ServingEnd
    do {
        end = try owner.serve(value, secret: true, until: MonotonicClock.seconds() + seconds)
    } catch {
        return 1   // the X server went away: nothing left to clear
    }
    // Wiped now, not when the process ends: the previous text may be served for long. The
    // stack is overwritten from here, the frame the serving calls ran below.
    value.withUnsafeMutableBytes { b in _ = b.initializeMemory(as: UInt8.self, repeating: 0) }
    owner.forgetServedBytes()
    guard end == .deadline else { return 0 }
    do {
        try owner.restorePrevious()
        return 0
    } catch {
        return 1
    }
}

ProcessHardening.closeInheritedDescriptors()
_ = ignoreBrokenPipe()
let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 2, arguments[0] == "--after", let seconds = Double(arguments[1]), seconds >= 0, !isTerminal(0) else {
    FileHandle.standardError.write(Data("vault-clipboard: started by 'vault get --clip' on X11; not run by hand\n".utf8))
    exit(2)
}
exit(run(seconds: min(seconds, 3600)))
