import Foundation
import Testing
import VaultSystem

@Suite struct SystemErrorTests {
    @Test func namesTheCallAndThePath() {
        let scratch = Scratch()
        let missing = scratch.file("nope/deeper")
        let error = systemError { _ = try FileDescriptor.open(missing, .readOnly) }
        #expect(error?.call == "open")
        #expect(error?.path == missing)
        #expect(error?.isNotFound == true)
        #expect(error?.description == "open \(missing): No such file or directory")
        #expect(SystemError(call: "pipe2", code: Errno.tooLarge).description == "pipe2: File too large")
    }

    @Test func namedHelpersMatchTheirCodes() {
        #expect(SystemError(call: "write", code: Errno.noSpace).isFull)
        #expect(SystemError(call: "write", code: Errno.brokenPipe).isBrokenPipe)
        #expect(SystemError(call: "mkdir", code: Errno.exists).isExists)
        #expect(!SystemError(call: "write", code: Errno.io).isFull)
        #expect(SystemError(call: "open", code: Errno.accessDenied).isPermissionDenied)
    }

    @Test func syscallRetriesOnlyOnInterruptWhenAsked() throws {
        var calls = 0
        let result = try syscall("fake") { () -> Int32 in
            calls += 1
            if calls < 3 { errno = EINTR; return -1 }
            return 7
        }
        #expect(result == 7 && calls == 3)
        calls = 0
        let error = systemError {
            try syscall("fake", path: "/p", retryOnInterrupt: false) { () -> Int32 in calls += 1; errno = EINTR; return -1 }
        }
        #expect(error?.isInterrupted == true && error?.path == "/p" && calls == 1)
    }
}
