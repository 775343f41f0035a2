import FingerprintKit
import Testing

extension FingerprintKitTests {
    /// libfprint's `virtual_image`: real NBIS minutiae detection and bozorth3 matching on fixture images.
    @Suite struct ImageDeviceTests {
        @Test func enrolledImageMatchesAnotherImpressionOfTheSameFingerOnly() throws {
            let reader = VirtualReader(.image)
            let sensor = try reader.open()
            defer { sensor.close() }
            #expect(sensor.info.driver == "virtual_image")
            #expect(sensor.info.supportsIdentify)
            #expect(!sensor.info.matchOnChip)
            let feeder = try ImageFeeder(sensor, socketPath: reader.socketPath)
            defer { feeder.close() }

            let probe = try fixture("probe.pgm")
            feeder.present(Array(repeating: probe, count: 5))
            let progress = Recorder<EnrollProgress>()
            let print = try sensor.enroll(
                finger: .rightIndex, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
                progress: progress.append)
            #expect(progress.all.map(\.completedStages) == [1, 2, 3, 4, 5])
            #expect(try FingerprintService.shared.describe(print: print).driver == "virtual_image")

            for (image, expected) in [("matching.pgm", 0 as Int?), ("nonmatching.pgm", nil), ("whorl.pgm", nil)] {
                feeder.present([try fixture(image)])
                let result = try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
                #expect(result == expected, "\(image)")
            }
            #expect(feeder.remaining == 0)
            #expect(feeder.errors.all.isEmpty)
        }

        @Test func identifyPicksTheMatchingPrintAmongSeveral() throws {
            let reader = VirtualReader(.image)
            let sensor = try reader.open()
            defer { sensor.close() }
            let feeder = try ImageFeeder(sensor, socketPath: reader.socketPath)
            defer { feeder.close() }

            var prints: [[UInt8]] = []
            for name in ["whorl.pgm", "probe.pgm"] {
                feeder.present(Array(repeating: try fixture(name), count: 5))
                prints.append(try sensor.enroll(
                    finger: .leftIndex, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
                    progress: { _ in }))
            }
            feeder.present([try fixture("matching.pgm")])
            #expect(try sensor.match(prints: prints, timeout: 10, cancellation: FingerprintCancellation()) == 1)
            feeder.present([try fixture("whorl.pgm")])
            #expect(try sensor.match(prints: prints, timeout: 10, cancellation: FingerprintCancellation()) == 0)
        }

        @Test func retryErrorAndUnplugFrames() throws {
            let reader = VirtualReader(.image)
            let sensor = try reader.open()
            defer { sensor.close() }
            let feeder = try ImageFeeder(sensor, socketPath: reader.socketPath)
            defer { feeder.close() }
            let probe = try fixture("probe.pgm")

            feeder.present([.image(probe), .retry(2), .image(probe), .image(probe), .image(probe), .image(probe)])
            let progress = Recorder<EnrollProgress>()
            let print = try sensor.enroll(
                finger: .rightIndex, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
                progress: progress.append)
            #expect(progress.all.map(\.retry) == [nil, .centerFinger, nil, nil, nil, nil])
            #expect(progress.all.map(\.completedStages) == [1, 1, 2, 3, 4, 5])

            feeder.present([.retry(3)])
            #expect(throws: FingerprintError.retry(.removeFinger)) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
            feeder.present([.error(4)])
            #expect(throws: busyMessage) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
            feeder.present([.unplug])
            #expect(throws: FingerprintError.removed) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
            #expect(feeder.errors.all.isEmpty)
        }
    }
}
