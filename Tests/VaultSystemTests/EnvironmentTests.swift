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
