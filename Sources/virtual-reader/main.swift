// virtual-reader: drives libfprint's virtual fingerprint readers from a shell (the demo, integration tests).
import FingerprintKit
import Foundation

let usage = """
    usage: virtual-reader device [--wait SECONDS] SOCKET COMMAND [ARG...]
           virtual-reader image [--wait SECONDS] [--delay SECONDS] SOCKET ITEM...

    device: sends one command to the virtual_device or virtual_device_storage driver listening on
    SOCKET ($FP_VIRTUAL_DEVICE or $FP_VIRTUAL_DEVICE_STORAGE of the process that opened the reader),
    waits for it to be taken, and prints the reply (LIST prints one stored id per line).
      queued for the next scan:  SCAN ID, RETRY N, ERROR N, SLEEP MS, FINGER 0|1, CONT, INSERT ID, REMOVE ID
      at once:                   LIST, UNPLUG, SET_ENROLL_STAGES N, SET_SCAN_TYPE press|swipe,
                                 SET_CANCELLATION_ENABLED 0|1, SET_KEEP_ALIVE 0|1

    image: presents items in order, over one connection, to the virtual_image driver on SOCKET
    ($FP_VIRTUAL_IMAGE). The driver takes an image only while the reader waits for a finger, so each
    item is sent --delay seconds (default 0.5) after connecting or after the previous item.
      FILE.pgm        an 8-bit binary PGM image, scanned as a finger
      --retry N       a bad scan: finger on, retry code N (0 general, 1 too short, 2 center,
                      3 remove), finger off
      --error N       the operation fails with device error N (4 busy, 256 removed, ...)
      --finger 0|1    finger off/on (with --auto-finger 0)
      --auto-finger 0|1
                      automatic finger detection around each image (on by default)
      --unplug        removes the device
      --sleep SECONDS waits, without sending

    --wait SECONDS    how long to wait for the reader to be opened (and a command taken); default 10

    examples:
      virtual-reader device /tmp/vd.sock SCAN finger-1
      virtual-reader device /tmp/vd.sock RETRY 1
      virtual-reader image /tmp/vi.sock probe.pgm probe.pgm probe.pgm probe.pgm probe.pgm
      virtual-reader image --delay 1 /tmp/vi.sock --retry 2 matching.pgm
    """

/// Prints `virtual-reader: error: MESSAGE` and exits 1; the only failure exit.
func fail(_ message: String, hint: String? = nil) -> Never {
    var text = "virtual-reader: error: \(message)\n"
    if let hint { text += "virtual-reader: hint: \(hint)\n" }
    FileHandle.standardError.write(Data(text.utf8))
    exit(1)
}

/// One thing to present to the image reader.
enum ImageItem {
    case image(GreyImage)
    case retry(Int)
    case error(Int)
    case finger(Bool)
    case automaticFinger(Bool)
    case unplug
    case sleep(Double)
}

/// Reads the leading `--wait`/`--delay` options; returns them and the remaining arguments.
func leadingOptions(
    _ arguments: ArraySlice<String>, allowed: Set<String>
) -> (options: [String: Double], rest: ArraySlice<String>) {
    var options: [String: Double] = [:]
    var rest = arguments
    while let option = rest.first, allowed.contains(option) {
        rest = rest.dropFirst()
        guard let text = rest.first, let value = Double(text), value >= 0, value.isFinite else {
            fail("\(option) needs a number of seconds")
        }
        options[option] = value
        rest = rest.dropFirst()
    }
    return (options, rest)
}

func number(after option: String, _ arguments: inout ArraySlice<String>) -> String {
    guard let value = arguments.popFirst() else { fail("\(option) needs a value") }
    return value
}

func parseItems(_ arguments: ArraySlice<String>) -> [ImageItem] {
    var arguments = arguments
    var items: [ImageItem] = []
    while let argument = arguments.popFirst() {
        switch argument {
        case "--retry", "--error":
            let text = number(after: argument, &arguments)
            guard let code = Int(text) else { fail("\(argument) needs an integer, not '\(text)'") }
            items.append(argument == "--retry" ? .retry(code) : .error(code))
        case "--finger", "--auto-finger":
            let text = number(after: argument, &arguments)
            guard text == "0" || text == "1" else { fail("\(argument) needs 0 or 1, not '\(text)'") }
            items.append(argument == "--finger" ? .finger(text == "1") : .automaticFinger(text == "1"))
        case "--unplug":
            items.append(.unplug)
        case "--sleep":
            let text = number(after: argument, &arguments)
            guard let seconds = Double(text), seconds >= 0, seconds.isFinite else {
                fail("--sleep needs a number of seconds, not '\(text)'")
            }
            items.append(.sleep(seconds))
        default:
            if argument.hasPrefix("-") { fail("unknown option '\(argument)'", hint: "see virtual-reader --help") }
            do throws(VirtualReaderError) {
                items.append(.image(try GreyImage(pgmFile: argument)))
            } catch {
                fail(error.message)
            }
        }
    }
    return items
}

/// Connects to the image reader; reconnects while the driver turns the connection away because a
/// previous client's connection is still open. Returns once the connection has stood for `delay`.
func connectImageReader(socket: String, wait: Double, delay: Double) throws(VirtualReaderError) -> VirtualImageClient {
    let start = Date()
    while true {
        let remaining = max(0, wait - Date().timeIntervalSince(start))
        let client = try VirtualImageClient(socketPath: socket, wait: remaining)
        if !(try client.isClosedByDriver(wait: delay)) { return client }
        client.close()
        guard Date().timeIntervalSince(start) < wait else { throw .connectionClosed(path: socket) }
        Thread.sleep(forTimeInterval: 0.05)
    }
}

func runDevice(_ arguments: ArraySlice<String>) {
    let (options, rest) = leadingOptions(arguments, allowed: ["--wait"])
    guard let socket = rest.first else { fail("missing SOCKET", hint: "see virtual-reader --help") }
    let command = rest.dropFirst().joined(separator: " ")
    guard !command.isEmpty else { fail("missing COMMAND", hint: "see virtual-reader --help") }
    do throws(VirtualReaderError) {
        let reply = try VirtualDeviceClient(socketPath: socket).send(command, wait: options["--wait"] ?? 10)
        FileHandle.standardOutput.write(Data(reply.utf8))
    } catch {
        fail(error.message)
    }
}

func runImage(_ arguments: ArraySlice<String>) {
    let (options, rest) = leadingOptions(arguments, allowed: ["--wait", "--delay"])
    guard let socket = rest.first else { fail("missing SOCKET", hint: "see virtual-reader --help") }
    let items = parseItems(rest.dropFirst())
    guard !items.isEmpty else { fail("nothing to send", hint: "give PGM files or --retry/--error/--unplug") }
    let delay = options["--delay"] ?? 0.5
    do throws(VirtualReaderError) {
        let client = try connectImageReader(socket: socket, wait: options["--wait"] ?? 10, delay: delay)
        defer { client.close() }
        for (index, item) in items.enumerated() {
            if index > 0, try client.isClosedByDriver(wait: delay) {
                throw VirtualReaderError.connectionClosed(path: socket)
            }
            switch item {
            case .image(let image): try client.send(image: image)
            case .retry(let code):
                // A bad scan as a real reader sees it: finger on, retry, finger lifted.
                try client.setFinger(true)
                try client.sendRetry(code)
                try client.setFinger(false)
            case .error(let code): try client.sendError(code)
            case .finger(let on): try client.setFinger(on)
            case .automaticFinger(let on): try client.setAutomaticFinger(on)
            case .unplug: try client.unplug()
            case .sleep(let seconds): Thread.sleep(forTimeInterval: seconds)
            }
        }
    } catch {
        fail(error.message)
    }
}

var arguments = CommandLine.arguments.dropFirst()
switch arguments.popFirst() {
case "device": runDevice(arguments)
case "image": runImage(arguments)
case "-h", "--help", "help": print(usage)
case nil: fail("missing mode: device or image", hint: "see virtual-reader --help")
case let mode?: fail("unknown mode '\(mode)': use device or image", hint: "see virtual-reader --help")
}
