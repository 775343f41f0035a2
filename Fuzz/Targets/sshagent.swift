// The libFuzzer entry point of the `sshagent` target. What it feeds and checks is `SSHFuzzTarget`
// in Tests/VaultSSHTests/FuzzSmokeTests.swift, shared with the test suite's smoke pass (docs/fuzzing.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    libFuzzerEntry(data, size)
}
