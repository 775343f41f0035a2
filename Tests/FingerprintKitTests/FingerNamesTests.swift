import FingerprintKit
import ReaderLink
import Testing

/// The CLI parses `--finger` from ReaderLink's list (it does not load libfprint); it must be
/// FingerprintKit's list.
@Suite struct FingerNamesTests {
    @Test func readerLinkNamesAreFingerprintKitsFingers() {
        #expect(FingerNames.all == Finger.allCases.map(\.rawValue))
    }
}
