// The libFuzzer entry point of the `foreign` target. What it feeds and checks is `KitFuzzTarget.foreign`
// in Tests/VaultKitTests/FuzzSmokeTests.swift, shared with the test suite's smoke pass (docs/fuzzing.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    libFuzzerEntry(.foreign, data, size)
}
