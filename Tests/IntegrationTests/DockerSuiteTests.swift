import Foundation
import Testing

/// The Go toolchain: `go` on the test's PATH, else where Debian's golang-go puts it; nil without one.
let goBinary: String? = {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let candidates = path.split(separator: ":").map { $0 + "/go" } + ["/usr/bin/go", "/usr/lib/go/bin/go", "/usr/local/go/bin/go"]
    return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
}()

/// The Go program that drives a docker credential helper through docker-credential-helpers' own
/// client (Fixtures/docker-suite, with the vendored packages beside it).
let dockerSuiteSource = packageRoot + "/Tests/IntegrationTests/Fixtures/docker-suite"

/// docker-credential-helpers' reference client (`client` and `credentials`, the packages docker's
/// CLI runs a helper with) against `docker-credential-vault` with an unlock session: the cases of
/// that repository's tests that a storing helper must meet (docs/cli.md, "docker's reference
/// client suite").
@Suite struct DockerSuiteTests {
    /// How many cases the Go program runs: a run that stops early must not pass.
    static let cases = 54

    @Test(.enabled(if: goBinary != nil, "no go on PATH or in /usr/bin (apt-get install golang-go; docs/cli.md, \"docker's reference client suite\")"))
    func theReferenceClientAgreesWithTheHelper() throws {
        let go = try #require(goBinary)
        let box = Sandbox()
        box.initVault()
        // Built offline: the one dependency is the vendored module (a `replace` to a folder), the
        // caches are the sandbox's, and a go.mod that needs changing fails instead of changing.
        let program = box.home + "/dockersuite"
        let goEnv = ["PATH": "/usr/bin:/bin", "HOME": box.home, "GOCACHE": box.home + "/go-cache", "GOPATH": box.home + "/go",
                     "GOPROXY": "off", "GOFLAGS": "-mod=readonly", "GOENV": "off", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"]
        var r = spawn("/bin/sh", ["-c", "cd \"$0\" && exec \"$1\" build -o \"$2\" .", dockerSuiteSource, go, program],
                      env: goEnv, timeLimit: 300)
        try #require(r.status == 0, "go build of \(dockerSuiteSource) failed:\n\(r.stdout)\(r.stderr)")

        let bin = box.home + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/docker-credential-vault", withDestinationPath: vaultBinary)
        r = box.vault(["unlock", "--scope", "user", "--timeout", "300"], passcode: Sandbox.passcode)
        try #require(r.status == 0, "\(r.stderr)")
        defer {
            let session = json(box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
            if let pid = session?["agent_pid"] as? Int { kill(pid_t(pid), SIGTERM) }
            box.vault(["lock", "--all"])
        }

        // As docker runs it: `docker-credential-vault` found on PATH, no options. The reference
        // client passes the helper's stderr through to the program's: any word there is the helper's.
        var env = box.env
        env["PATH"] = bin + ":/usr/bin:/bin"
        r = spawn(program, [], env: env, timeLimit: 300)
        let lines = r.stdout.split(separator: "\n")
        let failed = lines.filter { $0.hasPrefix("not ok ") }
        let passed = lines.filter { $0.hasPrefix("ok ") }
        #expect(r.status == 0 && failed.isEmpty, "the reference client disagrees:\n\(failed.joined(separator: "\n"))\n\(r.stderr)")
        #expect(passed.count == Self.cases && lines.last == "# passed \(Self.cases) of \(Self.cases)", "\(r.stdout)")
        #expect(r.stderr.isEmpty, "the helper wrote to stderr: \(r.stderr)")

        // The suite erases what it stored, through the helper: nothing is left in the vault.
        let left = box.vault(["ls"], passcode: Sandbox.passcode)
        #expect(left.status == 0 && left.stdout.isEmpty, "left in the vault: \(left.stdout)")
        print("DockerSuiteTests: docker-credential-helpers' client against docker-credential-vault: \(lines.last ?? "")")
    }
}
