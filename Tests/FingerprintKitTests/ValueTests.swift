import FingerprintKit
import Foundation
import Testing

extension FingerprintKitTests {
    /// The parts that need no reader: images, messages, socket clients with nothing listening.
    @Suite struct ValueTests {
        @Test func pgmFixturesLoad() throws {
            let probe = try fixture("probe.pgm")
            #expect(probe.width == 388 && probe.height == 374)
            #expect(probe.pixels.count == 388 * 374)
            let whorl = try fixture("whorl.pgm")
            #expect(whorl.width == 250 && whorl.height == 234)
        }

        @Test func pgmHeaderAllowsCommentsAndRejectsOtherFormats() throws {
            let image = try GreyImage(pgm: Array("P5\n# made by hand\n2 3\n255\n".utf8) + [0, 1, 2, 3, 4, 5])
            #expect(image == (try GreyImage(width: 2, height: 3, pixels: [0, 1, 2, 3, 4, 5])))

            #expect(throws: VirtualReaderError.invalidImage("not a binary PGM (P5) file")) {
                try GreyImage(pgm: Array("P2\n2 2\n255\n0 0 0 0".utf8))
            }
            #expect(throws: VirtualReaderError.invalidImage("maximum grey value 65535 needs more than 8 bits")) {
                try GreyImage(pgm: Array("P5 1 1 65535\n".utf8) + [0, 0])
            }
            #expect(throws: VirtualReaderError.invalidImage("PGM data shorter than 4x4")) {
                try GreyImage(pgm: Array("P5 4 4 255\n".utf8) + [0, 0])
            }
            #expect(throws: VirtualReaderError.invalidImage("size 6000x1 is outside 1...5000")) {
                try GreyImage(width: 6000, height: 1, pixels: Array(repeating: 0, count: 6000))
            }
            #expect(throws: VirtualReaderError.invalidImage("cannot read /nonexistent.pgm")) {
                try GreyImage(pgmFile: "/nonexistent.pgm")
            }
        }

        @Test func clientsGiveUpWhenNothingListens() throws {
            let reader = VirtualReader(.device)
            let elapsed = seconds {
                #expect(throws: VirtualReaderError.notListening(path: reader.socketPath)) {
                    try reader.client.send("LIST", wait: 0.2)
                }
                #expect(throws: VirtualReaderError.notListening(path: reader.socketPath)) {
                    try VirtualImageClient(socketPath: reader.socketPath, wait: 0.2)
                }
            }
            #expect(elapsed >= 0.4 && elapsed < 3)
            let long = "/tmp/" + String(repeating: "x", count: 120)
            #expect(throws: VirtualReaderError.self) { try VirtualDeviceClient(socketPath: long).send("LIST", wait: 0) }
        }

        @Test func retryAdviceAndErrorMessagesAreOneLowercaseLine() {
            #expect(RetryReason(rawValue: 1) == .tooShort)
            #expect(RetryReason.centerFinger.advice == "center your finger on the reader")
            let errors: [FingerprintError] = [
                .noReader, .readerBusy("device busy"), .permissionDenied("access denied"), .removed, .cancelled,
                .cancelledByProgram, .timedOut, .retry(.tooShort), .dataNotFound, .dataFull, .duplicate,
                .noEnrolledPrints, .invalidPrint, .notSupported("no identify"), .failed("protocol error"),
            ]
            for error in errors {
                for line in [error.message, error.hint].compactMap({ $0 }) {
                    #expect(!line.contains("\n"))
                    #expect(line.first?.isLowercase == true, "\(line)")
                    #expect(!line.hasSuffix("."), "\(line)")
                }
            }
            #expect(FingerprintError.readerBusy("x").hint?.contains("fprintd") == true)
            #expect(FingerprintError.permissionDenied("x").hint?.contains("udev") == true)
            #expect(FingerprintError.retry(.tooShort).message == "the scan did not work: swipe was too short, try again")
        }

        @Test func describeRejectsBytesThatAreNoPrint() {
            #expect(throws: FingerprintError.invalidPrint) { try FingerprintService.shared.describe(print: []) }
            #expect(throws: FingerprintError.invalidPrint) {
                try FingerprintService.shared.describe(print: Array("FP3 not a variant".utf8))
            }
        }
    }
}
