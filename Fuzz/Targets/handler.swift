// The libFuzzer entry point of the `handler` target. What it feeds and checks is `AgentFuzzTarget.handler`
// in Tests/VaultAgentTests/FuzzSmokeTests.swift, shared with the test suite's smoke pass (docs/fuzzing.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    libFuzzerEntry(.handler, data, size)
}
