import Foundation
import VaultSystem

/// A fresh folder under the system's temporary folder, removed when the value goes.
final class Scratch {
    let path: String

    init() {
        path = NSTemporaryDirectory() + "vaultsystem-" + UUID().uuidString.prefix(8)
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
    }

    deinit {
        // A test may have made a folder read-only.
        _ = try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: path)
        try? FileManager.default.removeItem(atPath: path)
    }

    /// `name` inside the folder.
    func file(_ name: String) -> String { path + "/" + name }

    /// Names in the folder.
    var entries: [String] { (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] }

    /// The permission bits of `path`.
    func mode(_ path: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
    }
}

/// The error `body` throws, if it is a SystemError.
func systemError(_ body: () throws -> Void) -> SystemError? {
    do { try body() } catch let e as SystemError { return e } catch { return nil }
    return nil
}
