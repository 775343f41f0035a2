/// Entry points for the fuzz targets (`Fuzz/`, docs/fuzzing.md) into parsers that are internal to
/// VaultKit: the recovery key and its base32. They exist so the fuzzers and the test suite's smoke
/// pass reach these parsers through the public interface, without `@testable`; nothing else uses
/// them. No secret leaves through them: a parsed recovery key is dropped at once.
package enum FuzzEntryPoints {
    /// Parses `text` as `vault unlock --recovery-key` does, then drops the key.
    /// - Throws: `.authenticationFailed` when `text` is not a recovery key or its checksum fails.
    package static func parseRecoveryKey(_ text: String) throws {
        _ = try RecoveryKey.parse(text)
    }

    /// Base32 as the recovery key is read: case, spaces and dashes ignored; nil on any other character.
    package static func base32Decode(_ text: String) -> [UInt8]? {
        Base32.decode(text)
    }

    /// Base32 as the recovery key is written: upper case, no padding.
    package static func base32Encode(_ bytes: [UInt8]) -> String {
        Base32.encode(bytes)
    }
}
