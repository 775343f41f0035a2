import FingerprintKit
import Testing

extension FingerprintKitTests {
    /// libfprint's `virtual_device_storage`: a match-on-chip reader that stores prints and identifies.
    @Suite struct StorageDeviceTests {
        @Test func sensorsReportStorageAndIdentify() throws {
            let reader = VirtualReader(.storage)
            let info = try #require(try FingerprintService.shared.sensors().first)
            #expect(info.driver == "virtual_device_storage")
            #expect(info.matchOnChip)
            #expect(info.supportsIdentify)
            #expect(info.enrollStages == 5)
            _ = reader
        }

        @Test func enrolledPrintsAreStoredAndIdentified() throws {
            let reader = VirtualReader(.storage)
            let sensor = try reader.open()
            defer { sensor.close() }
            let thumb = try reader.enroll(sensor, id: "thumb", finger: .rightThumb)
            let index = try reader.enroll(sensor, id: "index", finger: .rightIndex)
            let thumbID = try FingerprintService.shared.describe(print: thumb).identity
            let indexID = try FingerprintService.shared.describe(print: index).identity
            #expect(try FingerprintService.shared.describe(print: thumb).deviceStored)
            #expect(thumbID != indexID)
            #expect(try sensor.storedPrintIdentities() == [thumbID, indexID].sorted())

            func match() throws -> Int? {
                try sensor.match(prints: [thumb, index], timeout: 10, cancellation: FingerprintCancellation())
            }
            for (scan, expected) in [("index", 1), ("thumb", 0)] {
                try reader.send(["SCAN \(scan)"])
                #expect(try match() == expected)
            }
            try reader.send(["SCAN little"])
            #expect(try match() == nil)
        }

        @Test func storedIdentitiesFollowTheChip() throws {
            let reader = VirtualReader(.storage)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "mine")
            let mine = try FingerprintService.shared.describe(print: print).identity

            try reader.send(["INSERT planted"])
            let withPlanted = try sensor.storedPrintIdentities()
            #expect(withPlanted.count == 2)
            #expect(withPlanted.contains(mine))
            #expect(try reader.client.send("LIST").split(separator: "\n").sorted() == ["mine", "planted"])

            try reader.send(["REMOVE planted"])
            #expect(try sensor.storedPrintIdentities() == [mine])

            try sensor.deletePrint(print)
            #expect(try sensor.storedPrintIdentities() == [])
            #expect(throws: FingerprintError.dataNotFound) { try sensor.deletePrint(print) }
        }

        @Test func enrollingAStoredFingerAgainIsADuplicate() throws {
            let reader = VirtualReader(.storage)
            let sensor = try reader.open()
            defer { sensor.close() }
            _ = try reader.enroll(sensor, id: "thumb")
            try reader.send(["SCAN thumb"])
            #expect(throws: FingerprintError.duplicate) {
                try sensor.enroll(
                    finger: .rightThumb, username: "tester", timeout: 10, cancellation: FingerprintCancellation(),
                    progress: { _ in })
            }
        }

        @Test func aPrintRemovedFromTheChipNoLongerMatches() throws {
            let reader = VirtualReader(.storage)
            let sensor = try reader.open()
            defer { sensor.close() }
            let print = try reader.enroll(sensor, id: "gone")
            try reader.send(["REMOVE gone", "SCAN gone"])
            #expect(try sensor.match(prints: [print], timeout: 10, cancellation: FingerprintCancellation()) == nil)
        }
    }
}
