import Foundation
import Testing
import VaultAgent

@Suite struct AgentPathsTests {
    @Test func aSquattedSharedFolderIsNotUsed() throws {
        let root = NSTemporaryDirectory() + "agent-paths-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let env = ["HOME": "/home/someone", "XDG_STATE_HOME": "/home/someone/.state"]
        let shared = root + "/vault-\(getuid())"
        // Nothing there yet, or a folder of ours: the shared name.
        #expect(AgentPaths.folder(env, temporaryRoot: root) == shared)
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: false)
        #expect(AgentPaths.folder(env, temporaryRoot: root) == shared)
        // A file in its place, or (as root) a folder another user owns: the user's own state folder.
        try FileManager.default.removeItem(atPath: shared)
        _ = FileManager.default.createFile(atPath: shared, contents: Data())
        #expect(AgentPaths.folder(env, temporaryRoot: root) == "/home/someone/.state/vault/run")
        if getuid() == 0 {
            try FileManager.default.removeItem(atPath: shared)
            try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: false)
            #expect(chown(shared, 65534, 65534) == 0)
            #expect(AgentPaths.folder(env, temporaryRoot: root) == "/home/someone/.state/vault/run")
        }
        // XDG_RUNTIME_DIR wins.
        #expect(AgentPaths.folder(["XDG_RUNTIME_DIR": "/run/user/5"], temporaryRoot: root) == "/run/user/5/vault")
    }
}
