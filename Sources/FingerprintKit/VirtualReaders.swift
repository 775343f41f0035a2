internal import Foundation

/// A client for libfprint's `virtual_device` and `virtual_device_storage` drivers
/// (`FP_VIRTUAL_DEVICE=PATH`, `FP_VIRTUAL_DEVICE_STORAGE=PATH`).
///
/// The driver is the server and listens only while the device is open. Each command travels on its
/// own connection; the driver closes the connection once it has taken the command, and that end of
/// file is the acknowledgement. Waiting for it keeps commands in order: without it a newer connection
/// can replace an unread older one in the driver.
public struct VirtualDeviceClient: Sendable {
    /// The socket the driver listens on.
    public let socketPath: String

    /// Creates a client for the driver listening on `socketPath`.
    public init(socketPath: String) {
        self.socketPath = socketPath
    }

    /// Sends one command and returns the driver's reply (only `LIST` replies, one id per line).
    ///
    /// Commands: `SCAN id`, `RETRY n`, `ERROR n`, `SLEEP ms`, `FINGER 0|1`, `CONT`, `INSERT id`,
    /// `REMOVE id` (queued for the next operation); `LIST`, `UNPLUG`, `SET_ENROLL_STAGES n`,
    /// `SET_SCAN_TYPE press|swipe`, `SET_CANCELLATION_ENABLED 0|1`, `SET_KEEP_ALIVE 0|1` (at once).
    ///
    /// - Parameter wait: seconds to wait in all, both for the driver to listen (the device to be
    ///   opened; `ENOENT` and `ECONNREFUSED` are retried every 20 ms) and for the acknowledgement.
    /// - Throws: ``VirtualReaderError/notListening(path:)``, ``VirtualReaderError/noAcknowledgement(path:)``,
    ///   or another ``VirtualReaderError``.
    public func send(_ command: String, wait: Double = 10) throws(VirtualReaderError) -> String {
        let deadline = Deadline(secondsFromNow: wait)
        let connection = try PosixSocket.connect(path: socketPath, deadline: deadline)
        defer { connection.close() }
        try connection.write(Array(command.utf8))
        return String(decoding: try connection.readToEnd(deadline: deadline), as: UTF8.self)
    }
}

/// A client for libfprint's `virtual_image` driver (`FP_VIRTUAL_IMAGE=PATH`), which runs the real
/// image pipeline (NBIS minutiae detection and bozorth3 matching) on the images it is sent.
///
/// One persistent connection carries frames: two native-endian `Int32` (width, height) then
/// width × height grey bytes; a negative width is a control frame. The driver takes an image only
/// while it is waiting for a finger (an image sent at another time is dropped with a CRITICAL log),
/// so send each image when ``FingerprintSensor/onFingerStatus`` reports `.needed`, or, from another
/// process, after a pause. The driver accepts one client at a time.
public final class VirtualImageClient {
    private let connection: PosixSocket

    /// Connects, waiting up to `wait` seconds for the driver to listen (the device to be opened).
    ///
    /// - Throws: ``VirtualReaderError/notListening(path:)`` or another ``VirtualReaderError``.
    public init(socketPath: String, wait: Double = 10) throws(VirtualReaderError) {
        connection = try PosixSocket.connect(path: socketPath, deadline: Deadline(secondsFromNow: wait))
    }

    /// The socket path this client is connected to.
    public var socketPath: String { connection.path }

    /// Presents a finger: the image is scanned as if touched to the reader.
    public func send(image: GreyImage) throws(VirtualReaderError) {
        try frame(Int32(image.width), Int32(image.height), image.pixels)
    }

    /// Makes the current scan fail with `FpDeviceRetry` `code` (0 general, 1 too short, 2 centre, 3 remove).
    ///
    /// Send it between ``setFinger(_:)`` `true` and `false`, as a real reader would see it: a retry
    /// while the reader awaits a finger makes libfprint warn about its state machine, and during
    /// enrolment the reader waits for the finger to be lifted before the next scan.
    public func sendRetry(_ code: Int) throws(VirtualReaderError) {
        try frame(-1, Int32(clamping: code))
    }

    /// Ends the current operation with `FpDeviceError` `code` (e.g. 4 busy, 256 removed).
    public func sendError(_ code: Int) throws(VirtualReaderError) {
        try frame(-2, Int32(clamping: code))
    }

    /// Turns the driver's automatic finger detection (on by default: finger on, image, finger off) on or off.
    public func setAutomaticFinger(_ on: Bool) throws(VirtualReaderError) {
        try frame(-3, on ? 1 : 0)
    }

    /// Reports the finger as on or off the reader (images also do so themselves while automatic
    /// finger detection is on).
    public func setFinger(_ on: Bool) throws(VirtualReaderError) {
        try frame(-4, on ? 1 : 0)
    }

    /// Removes the device, as if it were unplugged.
    public func unplug() throws(VirtualReaderError) {
        try frame(-5, 0)
    }

    /// Whether the driver has closed this connection by `wait` seconds from now: it does so at once
    /// when another client is connected, and when the device is closed.
    public func isClosedByDriver(wait: Double) throws(VirtualReaderError) -> Bool {
        try connection.isClosedByPeer(waitingUntil: Deadline(secondsFromNow: wait))
    }

    /// Closes the connection; the driver then accepts another client. Also done on release.
    public func close() {
        connection.close()
    }

    private func frame(_ first: Int32, _ second: Int32, _ payload: [UInt8] = []) throws(VirtualReaderError) {
        var bytes = withUnsafeBytes(of: first) { Array($0) } + withUnsafeBytes(of: second) { Array($0) }
        bytes += payload
        try connection.write(bytes)
    }
}

/// An 8-bit greyscale image for ``VirtualImageClient``.
public struct GreyImage: Sendable, Equatable {
    /// Width in pixels, 1 to 5000 (the driver's limit).
    public var width: Int
    /// Height in pixels, 1 to 5000.
    public var height: Int
    /// Row-major grey values, `width * height` bytes, 0 black to 255 white.
    public var pixels: [UInt8]

    /// Creates an image from its pixels.
    ///
    /// - Throws: ``VirtualReaderError/invalidImage(_:)`` when the size is out of range or does not fit `pixels`.
    public init(width: Int, height: Int, pixels: [UInt8]) throws(VirtualReaderError) {
        guard (1...5000).contains(width), (1...5000).contains(height) else {
            throw .invalidImage("size \(width)x\(height) is outside 1...5000")
        }
        guard pixels.count == width * height else {
            throw .invalidImage("\(pixels.count) pixels for a \(width)x\(height) image")
        }
        self.width = width
        self.height = height
        self.pixels = pixels
    }

    /// Reads a binary PGM file (`P5`, maximum value at most 255).
    ///
    /// - Throws: ``VirtualReaderError/invalidImage(_:)`` when the file cannot be read or is not such a PGM.
    public init(pgmFile path: String) throws(VirtualReaderError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw .invalidImage("cannot read \(path)")
        }
        do throws(VirtualReaderError) {
            try self.init(pgm: [UInt8](data))
        } catch {
            throw .invalidImage("\(path): \(error.detail)")
        }
    }

    /// Parses binary PGM bytes: `P5`, width, height, maximum value (each after whitespace or
    /// `#` comments), one whitespace byte, then the pixels.
    public init(pgm bytes: [UInt8]) throws(VirtualReaderError) {
        var index = 0
        func token() -> String? {
            while index < bytes.count {
                if bytes[index] == UInt8(ascii: "#") {
                    while index < bytes.count, bytes[index] != UInt8(ascii: "\n") { index += 1 }
                } else if Self.isSpace(bytes[index]) {
                    index += 1
                } else {
                    break
                }
            }
            let start = index
            while index < bytes.count, !Self.isSpace(bytes[index]), bytes[index] != UInt8(ascii: "#") { index += 1 }
            return start < index ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
        }
        guard token() == "P5" else { throw .invalidImage("not a binary PGM (P5) file") }
        guard let width = token().flatMap({ Int($0) }), let height = token().flatMap({ Int($0) }),
            let maximum = token().flatMap({ Int($0) })
        else { throw .invalidImage("malformed PGM header") }
        guard (1...255).contains(maximum) else {
            throw .invalidImage("maximum grey value \(maximum) needs more than 8 bits")
        }
        index += 1
        guard width > 0, height > 0, index + width * height <= bytes.count else {
            throw .invalidImage("PGM data shorter than \(width)x\(height)")
        }
        try self.init(width: width, height: height, pixels: Array(bytes[index..<(index + width * height)]))
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0a || byte == 0x0d || byte == 0x0b || byte == 0x0c
    }
}

extension VirtualReaderError {
    /// The message without the "invalid image:" prefix, for wrapping.
    fileprivate var detail: String {
        if case .invalidImage(let detail) = self { return detail }
        return message
    }
}
