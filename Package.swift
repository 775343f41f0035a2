// swift-tools-version:6.0
import PackageDescription

let upcoming: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    // No warning of the project's own code survives a build: every one is an error (the only
    // warnings left in a build's output are SwiftPM's own about the toolchain's -pthread).
    .unsafeFlags(["-warnings-as-errors"]),
    // Generic types named in the code get their metadata from the type's accessor, with the
    // conformances passed in, instead of a demangled name the runtime resolves: in a statically
    // linked binary each such resolution that needs a conformance scans every conformance record
    // (4,400 in `vault`), once per type and protocol (docs/performance.md).
    .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"]),
]

let package = Package(
    name: "vault",
    products: [
        .executable(name: "vault", targets: ["vault"]),
        .executable(name: "vault-agent", targets: ["vault-agent"]),
        .executable(name: "vault-ssh-agent", targets: ["vault-ssh-agent"]),
        .executable(name: "vault-authd", targets: ["vault-authd"]),
        .executable(name: "vault-reader", targets: ["vault-reader"]),
        .executable(name: "vault-clipboard", targets: ["vault-clipboard"]),
        .executable(name: "virtual-reader", targets: ["virtual-reader"]),
        .executable(name: "vault-secret-service", targets: ["vault-secret-service"]),
        .library(name: "VaultKit", targets: ["VaultKit"]),
        .library(name: "VaultOTP", targets: ["VaultOTP"]),
        .library(name: "FingerprintKit", targets: ["FingerprintKit"]),
    ],
    targets: [
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(
            name: "CFprint", pkgConfig: "libfprint-2",
            providers: [.apt(["libfprint-2-dev", "libglib2.0-dev"])]),
        // Opened with dlopen on first use, not linked (each shim.h says why): headers only, so no
        // pkg-config, whose flags would link them into every process. CSQLite is one of them.
        .systemLibrary(name: "CTSS2", providers: [.apt(["libtss2-dev", "libtss2-tcti-swtpm0"])]),
        .systemLibrary(name: "CNettle", providers: [.apt(["nettle-dev"])]),
        .systemLibrary(name: "CCrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CArchive", providers: [.apt(["libarchive-dev"])]),
        .systemLibrary(name: "CXML2", providers: [.apt(["libxml2"])]),
        .systemLibrary(name: "CXCB", pkgConfig: "xcb", providers: [.apt(["libxcb1-dev"])]),
        // GDBus (VaultDBus) and libgcrypt (the Secret Service's DH sessions): linked only into the
        // processes that speak D-Bus, never into `vault`.
        .systemLibrary(name: "CGio", pkgConfig: "gio-2.0", providers: [.apt(["libglib2.0-dev"])]),
        .systemLibrary(name: "CGcrypt", pkgConfig: "libgcrypt", providers: [.apt(["libgcrypt20-dev"])]),
        .target(name: "VaultSystem", swiftSettings: upcoming),
        .target(name: "VaultKit", dependencies: ["CSodium", "CSQLite", "CTSS2", "VaultSystem"], swiftSettings: upcoming),
        .target(name: "VaultOTP", dependencies: ["VaultKit", "VaultSystem", "CNettle"], swiftSettings: upcoming),
        .target(name: "VaultDBus", dependencies: ["CGio"], swiftSettings: upcoming),
        .target(name: "FingerprintKit", dependencies: ["CFprint", "VaultSystem", "VaultDBus"], swiftSettings: upcoming),
        .target(
            name: "VaultInterchange", dependencies: ["VaultKit", "VaultSystem", "CArchive", "CXML2"],
            swiftSettings: upcoming),
        .target(name: "VaultSync", dependencies: ["VaultKit", "VaultSystem"], swiftSettings: upcoming),
        .target(name: "VaultWire", dependencies: ["VaultKit", "VaultSystem"], swiftSettings: upcoming),
        .target(name: "VaultAgent", dependencies: ["VaultKit", "VaultSystem", "VaultWire", "VaultSync"], swiftSettings: upcoming),
        .target(
            name: "VaultAuthority", dependencies: ["VaultKit", "VaultSystem", "VaultWire"],
            swiftSettings: upcoming),
        .target(name: "VaultSSH", dependencies: ["VaultKit", "VaultSystem", "VaultWire", "VaultAgent", "CCrypto"], swiftSettings: upcoming),
        .target(name: "ReaderLink", dependencies: ["VaultKit", "VaultSystem", "VaultWire"], swiftSettings: upcoming),
        .target(
            name: "VaultCLI", dependencies: ["VaultKit", "VaultSystem", "VaultAgent", "VaultAuthority", "ReaderLink", "VaultOTP", "VaultInterchange", "VaultSync", "VaultSSH"],
            swiftSettings: upcoming),
        .target(
            name: "SecretService", dependencies: ["VaultKit", "VaultSystem", "VaultAgent", "VaultDBus", "CGcrypt"],
            swiftSettings: upcoming),
        .executableTarget(name: "vault-secret-service", dependencies: ["SecretService", "VaultSystem"], swiftSettings: upcoming),
        // `vault` is the process scripts start most often, so its start is kept short
        // (docs/performance.md): the toolchain's lld with packed relative relocations (DT_RELR,
        // glibc 2.36+: a few kilobytes for the loader instead of 43,000 24-byte entries);
        // libstdc++ linked statically (Sources/vault/link/libstdc++.so says how), so the loader does not
        // relocate libstdc++.so.6; and no dynamic symbol table of vault's own 5,600 Swift symbols
        // (the toolchain exports them for backtraces; nothing looks them up).
        .executableTarget(
            name: "vault", dependencies: ["VaultCLI", "VaultSystem"], exclude: ["link"], swiftSettings: upcoming,
            linkerSettings: [.unsafeFlags([
                "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                "-L", Context.packageDirectory + "/Sources/vault/link", "-Xlinker", "--no-export-dynamic",
            ])]),
        .executableTarget(name: "vault-ssh-agent", dependencies: ["VaultSSH", "VaultSystem", "VaultDBus"], swiftSettings: upcoming),
        .executableTarget(name: "vault-agent", dependencies: ["VaultAgent", "VaultSystem"], swiftSettings: upcoming),
        .executableTarget(name: "vault-authd", dependencies: ["VaultAuthority", "FingerprintKit"], swiftSettings: upcoming),
        .executableTarget(name: "vault-reader", dependencies: ["ReaderLink", "FingerprintKit", "VaultSystem"], swiftSettings: upcoming),
        .executableTarget(name: "vault-clipboard", dependencies: ["CXCB", "VaultKit", "VaultSystem"], swiftSettings: upcoming),
        .executableTarget(name: "virtual-reader", dependencies: ["FingerprintKit"], swiftSettings: upcoming),
        .testTarget(
            name: "VaultKitTests", dependencies: ["VaultKit", "VaultOTP", "VaultInterchange"], exclude: ["Fixtures"],
            resources: [.copy("Vectors")], swiftSettings: upcoming),
        .testTarget(
            name: "FingerprintKitTests", dependencies: ["FingerprintKit", "ReaderLink"], exclude: ["Fixtures"],
            swiftSettings: upcoming),
        .testTarget(name: "VaultSystemTests", dependencies: ["VaultSystem"], swiftSettings: upcoming),
        .testTarget(
            name: "VaultAuthorityTests", dependencies: ["VaultAuthority", "VaultKit", "VaultSystem"], exclude: ["Fixtures"],
            swiftSettings: upcoming),
        .testTarget(name: "VaultSSHTests", dependencies: ["VaultSSH", "VaultKit", "VaultSystem"], swiftSettings: upcoming),
        .testTarget(name: "VaultAgentTests", dependencies: ["VaultAgent", "VaultKit", "VaultSystem", "VaultWire"], swiftSettings: upcoming),
        .testTarget(name: "VaultCLITests", dependencies: ["VaultCLI", "VaultKit", "VaultInterchange", "VaultSystem"], swiftSettings: upcoming),
        .testTarget(name: "SecretServiceTests", dependencies: ["SecretService", "VaultDBus", "VaultKit"], swiftSettings: upcoming),
        .testTarget(name: "IntegrationTests", dependencies: ["VaultKit", "VaultInterchange"], exclude: ["Fixtures"], swiftSettings: upcoming),
    ],
    swiftLanguageModes: [.v6]
)
