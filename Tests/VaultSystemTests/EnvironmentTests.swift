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
