import FingerprintKit
import Foundation
import Testing

/// The built `virtual-reader` executable, next to the test bundle; nil when it was not built.
let virtualReaderTool: URL? = {
    let folder = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
    let tool = folder.appendingPathComponent("virtual-reader")
    return FileManager.default.isExecutableFile(atPath: tool.path) ? tool : nil
}()

/// Runs the tool and returns its exit status, standard output and standard error.
func runTool(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = virtualReaderTool
    process.arguments = arguments
    let output = Pipe()
    let error = Pipe()
    process.standardOutput = output
    process.standardError = error
    try process.run()
    // Read while it runs so a full pipe cannot stall it.
    let stdout = output.fileHandleForReading.readDataToEndOfFile()
    let stderr = error.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
}

extension FingerprintKitTests {
    /// The `virtual-reader` executable the demo and the integration tests drive readers with.
    @Suite(.enabled(if: virtualReaderTool != nil, "virtual-reader is built with the tests"))
    struct VirtualReaderToolTests {
        @Test func deviceModeQueuesScansAndListsStorage() throws {
            let reader = VirtualReader(.storage)
            let sensor = try reader.open()
            defer { sensor.close() }
            for _ in 0..<5 {
                let result = try runTool(["device", reader.socketPath, "SCAN", "tool-finger"])
                #expect(result.status == 0 && result.stdout.isEmpty && result.stderr.isEmpty)
            }
            let print = try sensor.enroll(
                finger: .leftIndex, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
                progress: { _ in })

            #expect(try runTool(["device", reader.socketPath, "LIST"]).stdout == "tool-finger\n")
            _ = try runTool(["device", reader.socketPath, "SCAN", "tool-finger"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == 0)
        }

        @Test func imageModeEnrolsAndMatchesWithPauses() throws {
            let reader = VirtualReader(.image)
            let sensor = try reader.open()
            defer { sensor.close() }
            let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")
            let probe = fixtures.appendingPathComponent("probe.pgm").path
            let socket = reader.socketPath

            let enrolment = Thread.detach {
                try runTool(["image", "--delay", "0.25", socket, probe, probe, probe, probe, probe])
            }
            let print = try sensor.enroll(
                finger: .leftIndex, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
                progress: { _ in })
            #expect(try enrolment.value().status == 0)

            for (image, expected) in [("matching.pgm", 0 as Int?), ("nonmatching.pgm", nil)] {
                let tool = Thread.detach {
                    try runTool(["image", "--delay", "0.25", socket, fixtures.appendingPathComponent(image).path])
                }
                #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == expected)
                #expect(try tool.value().status == 0)
            }

            let retry = Thread.detach { try runTool(["image", "--delay", "0.25", socket, "--retry", "1"]) }
            #expect(throws: FingerprintError.retry(.tooShort)) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
            #expect(try retry.value().status == 0)
        }

        @Test func failuresExitOneWithAnErrorLine() throws {
            let silent = try runTool(["device", "--wait", "0.2", "/tmp/no-such-reader.sock", "LIST"])
            #expect(silent.status == 1)
            #expect(silent.stderr == """
                virtual-reader: error: no virtual reader is listening on /tmp/no-such-reader.sock (is the device open?)

                """)

            let missing = try runTool(["image", "/tmp/x.sock", "/nonexistent.pgm"])
            #expect(missing.status == 1 && missing.stderr.hasPrefix("virtual-reader: error: invalid image: cannot read"))

            let nothing = try runTool([])
            #expect(nothing.status == 1 && nothing.stderr.hasPrefix("virtual-reader: error: missing mode"))
            #expect(try runTool(["frobnicate"]).status == 1)
            #expect(try runTool(["image", "/tmp/x.sock", "--bogus"]).stderr.contains("unknown option '--bogus'"))

            let help = try runTool(["--help"])
            #expect(help.status == 0 && help.stdout.hasPrefix("usage: virtual-reader device"))
        }
    }
}

/// A value computed on a thread of its own, for running a blocking tool beside a blocking scan.
final class Detached<Value: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<Value, any Error>?

    fileprivate init(_ body: @escaping @Sendable () throws -> Value) {
        Thread.detachNewThread {
            self.result = Result(catching: body)
            self.done.signal()
        }
    }

    func value() throws -> Value {
        done.wait()
        return try result!.get()
    }
}

extension Thread {
    static func detach<Value: Sendable>(_ body: @escaping @Sendable () throws -> Value) -> Detached<Value> {
        Detached(body)
    }
}
