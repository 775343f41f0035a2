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

/// fprintd names fingers `right-index-finger` and `left-thumb`; vault `right-index`.
@Suite struct FprintdFingerNameTests {
    @Test func vaultAndFprintdNamesRoundTrip() {
        #expect(FprintdFinger.fprintdName("right-index") == "right-index-finger")
        #expect(FprintdFinger.fprintdName("left-thumb") == "left-thumb")
        for name in FingerNames.all { #expect(FprintdFinger.vaultName(FprintdFinger.fprintdName(name)) == name) }
    }
}
