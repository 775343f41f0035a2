import Foundation
import Testing

/// The architecture invariants of docs/architecture.md that a machine can check, checked over the
/// sources themselves. `Layout.violations` takes the files as text, so a test can also plant a
/// violation and see it reported.
enum Layout {
    /// What each Swift module may import (docs/architecture.md, "Modules"). Glibc is the
    /// POSIX layer's: see `cNamedFiles`. Every module linked into `vault` takes
    /// FoundationEssentials, never Foundation (its start-up is a third of `vault --version`'s);
    /// VaultSystem imports `Swift` for the standard library's normalisation (`@_spi(_Unicode)`).
    static let imports: [String: Set<String>] = [
        "VaultSystem": ["Glibc", "Swift"],
        "VaultKit": ["CSodium", "CSQLite", "CTSS2", "VaultSystem", "FoundationEssentials", "Synchronization", "Glibc"],
        "VaultOTP": ["VaultKit", "VaultSystem", "CNettle", "FoundationEssentials"],
        "VaultDBus": ["CGio", "Foundation"],
        "FingerprintKit": ["CFprint", "VaultSystem", "VaultDBus", "Foundation", "Dispatch", "Synchronization", "Glibc"],
        "SecretService": ["VaultKit", "VaultSystem", "VaultAgent", "VaultDBus", "CGcrypt", "Foundation"],
        "ReaderLink": ["VaultKit", "VaultSystem", "VaultWire", "FoundationEssentials"],
        "VaultWire": ["VaultKit", "VaultSystem", "FoundationEssentials"],
        "VaultAgent": ["VaultKit", "VaultSystem", "VaultWire", "VaultSync", "FoundationEssentials"],
        "VaultAuthority": ["VaultKit", "VaultSystem", "VaultWire", "FoundationEssentials", "Synchronization"],
        "VaultSSH": ["VaultKit", "VaultSystem", "VaultWire", "VaultAgent", "CCrypto", "FoundationEssentials"],
        "VaultInterchange": ["VaultKit", "VaultSystem", "CArchive", "CXML2", "FoundationEssentials", "Glibc"],
        "VaultSync": ["VaultKit", "VaultSystem", "FoundationEssentials"],
        "VaultCLI": ["VaultKit", "VaultSystem", "VaultAgent", "VaultAuthority", "ReaderLink", "VaultOTP", "VaultInterchange", "VaultSync", "VaultSSH", "FoundationEssentials"],
        "vault": ["VaultCLI", "VaultSystem"],
        "vault-agent": ["VaultAgent", "VaultSystem"],
        "vault-ssh-agent": ["VaultSSH", "VaultSystem", "VaultDBus"],
        "vault-authd": ["VaultAuthority", "FingerprintKit", "VaultKit", "VaultSystem", "Foundation"],
        "vault-reader": ["ReaderLink", "FingerprintKit", "VaultSystem", "Foundation"],
        "vault-clipboard": ["CXCB", "VaultKit", "VaultSystem", "Foundation"],
        "virtual-reader": ["FingerprintKit", "Foundation"],
        "vault-secret-service": ["SecretService", "VaultSystem"],
    ]

    /// Outside VaultSystem, Glibc is imported only by the files named for a C library.
    static let cNamedFiles = ["Sodium.swift", "SQLite.swift", "GLib.swift", "TSS2.swift", "Nettle.swift", "LibArchive.swift", "LibCrypto.swift",
                              "KeePassXML.swift", "XCB.swift", "Gcrypt.swift"]
    static func isCNamed(_ file: String) -> Bool {
        let name = (file as NSString).lastPathComponent
        return cNamedFiles.contains(name) || name.hasPrefix("Fprint")
    }

    /// Where `[String: Any]` may appear: the command line's JSON output and the foreign formats'
    /// parsers. Never on a wire, in the store or in an authority.
    static let untypedJSON = ["VaultCLI/", "VaultInterchange/", "VaultKit/JSON/JSONText.swift", "VaultKit/JSON/JSONPlain.swift", "VaultKit/Credentials/DockerCredentialRules.swift"]

    /// The modules linked into `vault` join strings with VaultSystem's `joinedText`: the standard
    /// library's `joined(separator:)` asks the runtime for associated types, and in the static
    /// `vault` the first such question scans every conformance record (docs/performance.md).
    static let joinsWithJoinedText: Set<String> = ["VaultSystem", "VaultKit", "VaultOTP", "ReaderLink", "VaultWire", "VaultAgent",
                                                   "VaultAuthority", "VaultSSH", "VaultInterchange", "VaultSync", "VaultCLI", "vault"]

    /// The shims whose libraries are opened on first use: their module maps link nothing.
    static let openedOnDemand = ["CSQLite", "CTSS2", "CNettle", "CArchive", "CXML2", "CCrypto"]

    /// Every broken invariant in `files` (paths relative to Sources, contents), one line each.
    static func violations(_ files: [String: String]) -> [String] {
        var out: [String] = []
        let importLine = try! NSRegularExpression(pattern: #"^\s*(?:@_exported\s+|public\s+|package\s+|internal\s+|private\s+|fileprivate\s+)?import\s+(?:(?:struct|enum|class|func|var|let)\s+)?([A-Za-z0-9_]+)"#,
                                                  options: [.anchorsMatchLines])
        // A call, not the declaration of `ProcessExit.exit` nor a mention in a comment.
        let exitCall = try! NSRegularExpression(pattern: #"(?m)^(?!\s*///?)[^\n]*?(?<![A-Za-z0-9_.])(?<!func )exit\("#)
        for (path, text) in files.sorted(by: { $0.key < $1.key }) {
            let module = String(path.split(separator: "/").first ?? "")
            let range = NSRange(text.startIndex..., in: text)
            if path.hasSuffix(".swift") {
                for m in importLine.matches(in: text, range: range) {
                    let imported = String(text[Range(m.range(at: 1), in: text)!])
                    if let allowed = imports[module], !allowed.contains(imported) {
                        out.append("\(path): \(module) imports \(imported)")
                    }
                    if imported == "Glibc", module != "VaultSystem", !isCNamed(path) {
                        out.append("\(path): Glibc outside VaultSystem and the files named for a C library")
                    }
                }
                if !path.hasSuffix("/main.swift"), exitCall.firstMatch(in: text, range: range) != nil {
                    out.append("\(path): exit( outside main")
                }
                if joinsWithJoinedText.contains(module), text.contains(".joined(separator:") {
                    out.append("\(path): joined(separator:) in a module linked into vault (joinedText)")
                }
                if text.contains("[String: Any]"), !untypedJSON.contains(where: { path.hasPrefix($0) }) {
                    out.append("\(path): [String: Any] outside the JSON output boundary")
                }
            }
            if path.hasSuffix("/module.modulemap"), openedOnDemand.contains(module),
               text.range(of: #"(?m)^\s*link\s+""#, options: .regularExpression) != nil {
                out.append("\(path): a library opened on first use is linked")
            }
        }
        return out
    }

    /// The package's Sources folder, as text files.
    static func sources() throws -> [String: String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources").path
        var files: [String: String] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root) else { return files }
        for case let path as String in walker where path.hasSuffix(".swift") || path.hasSuffix(".modulemap") {
            files[path] = try String(contentsOfFile: root + "/" + path, encoding: .utf8)
        }
        return files
    }
}

@Suite struct LayoutTests {
    @Test func theSourcesKeepTheArchitectureInvariants() throws {
        let files = try Layout.sources()
        #expect(files.count > 100, "the sources were not found")
        #expect(Set(files.keys.map { String($0.split(separator: "/")[0]) }).filter { !$0.hasPrefix("C") } == Set(Layout.imports.keys),
                "a module is missing from the import table (docs/architecture.md)")
        let found = Layout.violations(files)
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }

    @Test func eachPlantedViolationIsReported() throws {
        var files = try Layout.sources()
        files["VaultAgent/Planted.swift"] = "import FingerprintKit\n"
        files["VaultCLI/Planted.swift"] = "internal import Foundation\n"
        files["VaultSync/Planted.swift"] = "import Glibc\nlet x: [String: Any] = [:]\nfunc f() { exit(1) }\nlet y = [\"a\"].joined(separator: \",\")\n"
        files["CSQLite/module.modulemap"] = (files["CSQLite/module.modulemap"] ?? "") + "\n    link \"sqlite3\"\n"
        let found = Layout.violations(files)
        for expected in ["VaultAgent/Planted.swift: VaultAgent imports FingerprintKit",
                         "VaultCLI/Planted.swift: VaultCLI imports Foundation",
                         "VaultSync/Planted.swift: VaultSync imports Glibc",
                         "VaultSync/Planted.swift: Glibc outside VaultSystem",
                         "VaultSync/Planted.swift: exit( outside main",
                         "VaultSync/Planted.swift: [String: Any] outside the JSON output boundary",
                         "VaultSync/Planted.swift: joined(separator:) in a module linked into vault",
                         "CSQLite/module.modulemap: a library opened on first use is linked"] {
            #expect(found.contains { $0.hasPrefix(expected) }, "not reported: \(expected)\n\(found.joined(separator: "\n"))")
        }
        #expect(found.count == 8, "\(found.joined(separator: "\n"))")
    }
}
