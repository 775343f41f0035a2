import Dispatch
import FingerprintKit
import Foundation
import Testing

extension FingerprintKitTests {
    /// libfprint's plain `virtual_device`: verify only, prints identified by the id a `SCAN` carries.
    @Suite struct VirtualDeviceTests {
        @Test func sensorsDescribeTheReaderWithoutOpeningIt() throws {
            let reader = VirtualReader(.device)
            let sensors = try FingerprintService.shared.sensors()
            #expect(sensors == [
                SensorInfo(
                    deviceID: "0", driver: "virtual_device", name: "Virtual device for debugging",
                    scanType: "swipe", matchOnChip: false, supportsIdentify: false, enrollStages: 5)
            ])
            _ = reader
        }

        @Test func noReaderWhenNothingMatches() throws {
            VirtualReader.clearEnvironment()
            #expect(try FingerprintService.shared.sensors() == [])
            #expect(throws: FingerprintError.noReader) { try FingerprintService.shared.open(selector: nil) }

            let reader = VirtualReader(.device)
            #expect(throws: FingerprintError.noReader) {
                try FingerprintService.shared.open(selector: "no-such-reader")
            }
            let sensor = try FingerprintService.shared.open(selector: nil)
            #expect(sensor.info.driver == "virtual_device")
            sensor.close()
            _ = reader
        }

        @Test func openFailuresAreTyped() throws {
            let reader = VirtualReader(.device)
            setenv("FP_VIRTUAL_DEVICE", reader.directory + "/missing/reader.sock", 1)
            // libfprint itself logs a warning about the socket here.
            let error = #expect(throws: FingerprintError.self) { try FingerprintService.shared.open(selector: nil) }
            guard case .failed(let detail)? = error else {
                Issue.record("expected .failed, got \(String(describing: error))")
                return
            }
            #expect(detail.hasPrefix("error binding to address"))
        }

        @Test func enrollReportsEveryStageAndTheRetry() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            try reader.send(["SCAN a", "SCAN a", "RETRY 1", "SCAN a", "SCAN a", "SCAN a"])
            let progress = Recorder<EnrollProgress>()
            let print = try sensor.enroll(
                finger: .leftMiddle, username: "alice", timeout: 10, cancellation: FingerprintCancellation(),
                progress: progress.append)

            #expect(progress.all.map(\.completedStages) == [1, 2, 2, 3, 4, 5])
            #expect(progress.all.map(\.retry) == [nil, nil, .tooShort, nil, nil, nil])
            #expect(progress.all.allSatisfy { $0.totalStages == 5 })
            let metadata = try FingerprintService.shared.describe(print: print)
            #expect(metadata.driver == "virtual_device")
            #expect(metadata.finger == .leftMiddle)
            #expect(metadata.username == "alice")
            #expect(!metadata.deviceStored)
            #expect(metadata.identity.count == 64)
        }

        @Test func enrollFollowsTheReadersStageCount() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            try reader.send(["SET_ENROLL_STAGES 3", "SCAN b", "SCAN b", "SCAN b"])
            let progress = Recorder<EnrollProgress>()
            _ = try sensor.enroll(
                finger: .rightThumb, username: "bob", timeout: 10, cancellation: FingerprintCancellation(),
                progress: progress.append)
            #expect(progress.all.map(\.completedStages) == [1, 2, 3])
            #expect(progress.all.allSatisfy { $0.totalStages == 3 })
        }

        @Test func matchFindsTheEnrolledFingerAndRejectsAnother() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "finger-1")

            try reader.send(["SCAN finger-1"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == 0)
            try reader.send(["SCAN finger-2"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == nil)
        }

        /// virtual_device cannot identify: one verify against the first print, then `fp_print_equal`
        /// of the scanned print against the others.
        @Test func oneScanIsJudgedAgainstSeveralPrints() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let first = try reader.enroll(sensor, id: "thumb", finger: .leftThumb)
            let second = try reader.enroll(sensor, id: "index", finger: .leftIndex)
            let third = try reader.enroll(sensor, id: "ring", finger: .leftRing)
            let prints = [first, second, third]

            for (scan, expected) in [("index", 1), ("ring", 2), ("thumb", 0)] {
                try reader.send(["SCAN \(scan)"])
                #expect(try sensor.match(prints: prints, timeout: 10, cancellation: FingerprintCancellation()) == expected)
            }
            try reader.send(["SCAN little"])
            #expect(try sensor.match(prints: prints, timeout: 10, cancellation: FingerprintCancellation()) == nil)
        }

        @Test func retryCodesEndAMatchWithTheirReason() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            for reason in RetryReason.allCases {
                try reader.send(["RETRY \(reason.rawValue)"])
                #expect(throws: FingerprintError.retry(reason)) {
                    try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
                }
            }
            try reader.send(["SCAN a"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == 0)
        }

        @Test(arguments: [
            (4, busyMessage),
            (3, .readerBusy("the device has already been opened")),
            (1, .notSupported("the operation is not supported on this device")),
            (6, .invalidPrint),
            (7, .dataNotFound),
            (8, .dataFull),
            (9, .duplicate),
            (256, .removed),
        ])
        func deviceErrorCodesMapToTypedErrors(code: Int, expected: FingerprintError) throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            try reader.send(["ERROR \(code)"])
            #expect(throws: expected) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
        }

        @Test(arguments: [0, 2, 5, 257])
        func otherDeviceErrorsAreFailures(code: Int) throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            try reader.send(["ERROR \(code)"])
            let error = #expect(throws: FingerprintError.self) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
            guard case .failed(let detail)? = error else {
                Issue.record("expected .failed, got \(String(describing: error))")
                return
            }
            #expect(!detail.isEmpty && detail.first?.isLowercase == true)
        }

        @Test func unplugDuringAScanEndsItAsRemoved() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            let client = reader.client
            onFirstFingerNeeded(sensor) { _ = try? client.send("UNPLUG") }
            #expect(throws: FingerprintError.removed) {
                try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation())
            }
        }

        @Test(arguments: [
            (FingerprintCancellation.Reason.user, FingerprintError.cancelled),
            (.program, .cancelledByProgram),
        ])
        func cancelFromAnotherThreadEndsTheScan(reason: FingerprintCancellation.Reason, expected: FingerprintError) throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            let cancellation = FingerprintCancellation()
            onFirstFingerNeeded(sensor) { cancellation.cancel(reason) }
            #expect(throws: expected) {
                try sensor.match(prints: [print], timeout: 10, cancellation: cancellation)
            }
            #expect(cancellation.reason == reason)

            // The sensor stays usable after a cancelled scan.
            try reader.send(["SCAN a"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == 0)
        }

        /// Cancelling from another thread races inside libfprint unless the cancel is marshalled onto
        /// the libfprint thread; many cancellations in a row must each end their scan and nothing else.
        @Test func manyCancellationsInARowLeaveTheReaderUsable() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            for _ in 0..<300 {
                let cancellation = FingerprintCancellation()
                onFirstFingerNeeded(sensor) { cancellation.cancel(.user) }
                #expect(throws: FingerprintError.cancelled) {
                    try sensor.match(prints: [print], timeout: 10, cancellation: cancellation)
                }
            }
            sensor.onFingerStatus = nil
            try reader.send(["SCAN a"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == 0)
        }

        @Test func aCancelledHandleEndsTheNextScanAtOnce() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            let cancellation = FingerprintCancellation()
            cancellation.cancel(.program)
            cancellation.cancel(.user)
            #expect(cancellation.reason == .program)
            #expect(throws: FingerprintError.cancelledByProgram) {
                try sensor.match(prints: [print], timeout: 10, cancellation: cancellation)
            }
        }

        @Test func timeoutEndsAScanWithNoFinger() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            let cancellation = FingerprintCancellation()
            let elapsed = seconds {
                #expect(throws: FingerprintError.timedOut) {
                    try sensor.match(prints: [print], timeout: 0.3, cancellation: cancellation)
                }
            }
            #expect(cancellation.reason == .timeout)
            #expect(elapsed >= 0.3 && elapsed < 5)
        }

        @Test func enrollTimeoutRestartsAfterEachStage() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let client = reader.client
            // Each scan arrives 0.2 s after the previous stage: the whole enrolment takes longer than
            // the 0.5 s timeout, but no single wait does.
            sensor.onFingerStatus = { status in
                guard status == .needed else { return }
                DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { _ = try? client.send("SCAN slow") }
            }
            let progress = Recorder<EnrollProgress>()
            let elapsed = try seconds {
                _ = try sensor.enroll(
                    finger: .rightIndex, username: "tester", timeout: 0.5, cancellation: FingerprintCancellation(),
                    progress: progress.append)
            }
            #expect(progress.all.map(\.completedStages) == [1, 2, 3, 4, 5])
            #expect(elapsed > 0.5)
        }

        @Test func printsFromAnotherReaderAreNotUsed() throws {
            let enrolled: [UInt8]
            do {
                let reader = VirtualReader(.storage)
                let sensor = try reader.open()
                defer { sensor.close() }
                enrolled = try reader.enroll(sensor, id: "elsewhere")
            }
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            #expect(throws: FingerprintError.noEnrolledPrints) {
                try sensor.match(prints: [enrolled], timeout: 1, cancellation: FingerprintCancellation())
            }
            #expect(throws: FingerprintError.invalidPrint) {
                try sensor.match(prints: [[1, 2, 3, 4]], timeout: 1, cancellation: FingerprintCancellation())
            }
            #expect(throws: FingerprintError.noEnrolledPrints) {
                try sensor.match(prints: [], timeout: 1, cancellation: FingerprintCancellation())
            }
        }

        @Test func readersWithoutStorageHaveNoStoredPrints() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "a")
            #expect(try sensor.storedPrintIdentities() == [])
            try sensor.deletePrint(print)
        }

        @Test func aClosedSensorRefusesWork() throws {
            let reader = VirtualReader(.device)
            let sensor = try reader.open()
            sensor.close()
            sensor.close()
            #expect(throws: FingerprintError.self) {
                try sensor.match(prints: [], timeout: 1, cancellation: FingerprintCancellation())
            }
        }
    }
}
