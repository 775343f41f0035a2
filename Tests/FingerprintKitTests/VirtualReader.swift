import Dispatch
import FingerprintKit
import Foundation
import Synchronization
import Testing

/// All FingerprintKit tests: one serialized suite, because libfprint's environment variables and
/// its main context are process-wide. The nested suites live in the other files.
@Suite(.serialized) struct FingerprintKitTests {}

/// libfprint's three virtual drivers and the variable that names each one's socket.
enum VirtualDriver: String, CaseIterable {
    case device = "virtual_device"
    case storage = "virtual_device_storage"
    case image = "virtual_image"

    var variable: String {
        switch self {
        case .device: "FP_VIRTUAL_DEVICE"
        case .storage: "FP_VIRTUAL_DEVICE_STORAGE"
        case .image: "FP_VIRTUAL_IMAGE"
        }
    }
}

/// A fresh temporary folder and the environment that makes libfprint enumerate exactly one virtual
/// reader, with its socket in that folder. The folder is removed on release.
final class VirtualReader {
    let driver: VirtualDriver
    let directory: String

    init(_ driver: VirtualDriver) {
        self.driver = driver
        var template = Array("/tmp/fkit-test-XXXXXX".utf8CString)
        directory = String(cString: mkdtemp(&template)!)
        VirtualReader.clearEnvironment()
        setenv(driver.variable, directory + "/reader.sock", 1)
        setenv("FP_DRIVERS_WHITELIST", driver.rawValue, 1)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Makes libfprint see no virtual reader at all.
    static func clearEnvironment() {
        for driver in VirtualDriver.allCases { unsetenv(driver.variable) }
        unsetenv("FP_VIRTUAL_DEVICE_IDENT")
        setenv("FP_DRIVERS_WHITELIST", VirtualDriver.allCases.map(\.rawValue).joined(separator: ":"), 1)
    }

    var socketPath: String { directory + "/reader.sock" }

    var client: VirtualDeviceClient { VirtualDeviceClient(socketPath: socketPath) }

    func open() throws(FingerprintError) -> FingerprintSensor {
        try FingerprintService.shared.open(selector: driver.rawValue)
    }

    /// Queues commands for the virtual_device drivers; each is acknowledged before the next is sent.
    func send(_ commands: [String]) throws {
        for command in commands { _ = try client.send(command, wait: 5) }
    }

    /// Enrols by queueing one `SCAN id` per stage (virtual_device drivers).
    func enroll(
        _ sensor: FingerprintSensor, id: String, finger: Finger = .rightIndex
    ) throws -> [UInt8] {
        try send(Array(repeating: "SCAN \(id)", count: sensor.info.enrollStages))
        return try sensor.enroll(
            finger: finger, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
            progress: { _ in })
    }
}

/// Collects values reported from the libfprint thread.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])

    func append(_ value: Value) { values.withLock { $0.append(value) } }

    var all: [Value] { values.withLock { $0 } }
}

/// Runs `action` on another thread the first time the reader starts waiting for a finger.
func onFirstFingerNeeded(_ sensor: FingerprintSensor, _ action: @escaping @Sendable () -> Void) {
    let fired = Mutex(false)
    sensor.onFingerStatus = { status in
        guard status == .needed, fired.withLock({ fired in defer { fired = true }; return !fired }) else { return }
        DispatchQueue.global().async(execute: action)
    }
}

/// What the virtual_image reader is sent when it next waits for a finger.
enum Presentation: Sendable {
    case image(GreyImage)
    case retry(Int)
    case error(Int)
    case unplug
}

/// Feeds the virtual_image driver one presentation each time the reader starts waiting for a
/// finger, so every image lands while the reader captures.
final class ImageFeeder: @unchecked Sendable {
    private let client: VirtualImageClient
    private let queue = DispatchQueue(label: "image-feeder")
    private let pending = Mutex<[Presentation]>([])
    let errors = Recorder<VirtualReaderError>()

    /// Connects to the reader's socket and watches `sensor`; the client is only used on `queue`.
    init(_ sensor: FingerprintSensor, socketPath: String) throws {
        client = try VirtualImageClient(socketPath: socketPath, wait: 5)
        sensor.onFingerStatus = { [weak self] status in
            guard status == .needed else { return }
            self?.sendNext()
        }
    }

    /// Presentations for the next times a finger is needed, in order.
    func present(_ presentations: [Presentation]) {
        pending.withLock { $0 += presentations }
    }

    /// Images for the next times a finger is needed, in order.
    func present(_ images: [GreyImage]) {
        present(images.map(Presentation.image))
    }

    var remaining: Int { pending.withLock { $0.count } }

    private func sendNext() {
        guard let next = pending.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) else { return }
        queue.async {
            do throws(VirtualReaderError) {
                switch next {
                case .image(let image): try self.client.send(image: image)
                case .retry(let code):
                    // As a real reader: finger on, a bad scan, finger lifted (enrolment waits for that).
                    try self.client.setFinger(true)
                    try self.client.sendRetry(code)
                    try self.client.setFinger(false)
                case .error(let code): try self.client.sendError(code)
                case .unplug: try self.client.unplug()
                }
            } catch {
                self.errors.append(error)
            }
        }
    }

    func close() {
        queue.sync { client.close() }
    }
}

/// What libfprint's `FP_DEVICE_ERROR_BUSY` becomes.
let busyMessage = FingerprintError.readerBusy("the device is still busy with another operation, please try again later")

/// The fingerprint images next to this file (NIST and SourceAFIS test prints, see Fixtures/README.md).
func fixture(_ name: String) throws -> GreyImage {
    let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
    return try GreyImage(pgmFile: folder.appendingPathComponent(name).path)
}

/// Seconds `body` takes.
func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now()
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
}

