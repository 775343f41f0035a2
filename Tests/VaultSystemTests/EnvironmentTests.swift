import Foundation
import Testing
import VaultSystem

/// `processEnvironment()` reads `environ` as it is now.
@Suite struct ProcessEnvironmentTests {
    @Test func readsTheLiveEnvironment() {
        setenv("VAULT_ENV_TEST", "a=b c", 1)
        defer { unsetenv("VAULT_ENV_TEST") }
        let env = processEnvironment()
        #expect(env["VAULT_ENV_TEST"] == "a=b c", "the value keeps its own '='")
        #expect(env["PATH"] == String(cString: getenv("PATH")))
        unsetenv("VAULT_ENV_TEST")
        #expect(processEnvironment()["VAULT_ENV_TEST"] == nil)
    }

    /// Every name of `environ` has `getenv`'s value, even when the value starts with a combining
    /// mark (a Character walk would glue it to the `=` and miss the split).
    @Test func everyNameAsGetenvSeesIt() {
        setenv("VAULT_ENV_TEST_MARK", "\u{301}é=x", 1)
        defer { unsetenv("VAULT_ENV_TEST_MARK") }
        let env = processEnvironment()
        #expect(env["VAULT_ENV_TEST_MARK"] == "\u{301}é=x")
        var p = environ
        while let entry = p.pointee {
            let text = String(cString: entry)
            if let eq = text.utf8.firstIndex(of: UInt8(ascii: "=")) {
                let name = String(text[..<eq])
                #expect(env[name] == getenv(name).map { String(cString: $0) }, "\(name)")
            }
            p += 1
        }
    }
}

/// `LibraryTable.load`: the table a loader filled, or the loader's own message.
@Suite struct LibraryTableTests {
    @Test func aFilledTableOrTheLoadersMessage() throws {
        let filled = LibraryTable.load { (table: UnsafeMutablePointer<(Int, Int)>) -> UnsafePointer<CChar>? in
            table.initialize(to: (4, 2))
            return nil
        }
        #expect(try filled.get() == (4, 2))
        let missing = LibraryTable.load { (_: UnsafeMutablePointer<Int>) -> UnsafePointer<CChar>? in
            UnsafePointer(strdup("libnothing.so.1: cannot open shared object file")!)
        }
        guard case .failure(let e) = missing else { Issue.record("a failed loader gave a table"); return }
        #expect(e.message == "libnothing.so.1: cannot open shared object file")
    }
}
