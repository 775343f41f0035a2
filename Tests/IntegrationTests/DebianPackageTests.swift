import Foundation
import Testing

/// `Vault/package.sh`, the Debian package: what it holds, what lintian says, and (as root) its
/// installation, upgrade and purge with systemd 252 as PID 1 of a systemd-nspawn container over a
/// throw-away overlay of this machine's root (`Fixtures/systemd-container/boot-container.sh`, the
/// recipe of SYSTEMD.md).
///
/// The tests package the debug build through the same script (`--from`): a release build takes
/// about 2 minutes here and its package 2 more to compress. What differs is only the binaries:
/// the debug ones run on the toolchain's Swift runtime, which the container sees through the
/// overlay, and lintian names their RUNPATH (the one error the release package does not have).
/// gzip -1 instead of xz (dpkg-deb's DPKG_DEB_COMPRESSOR_*) for the same reason.
let packageScript = shippedFolder + "/package.sh"

/// Runs `Vault/package.sh --from (the built binaries) args`.
func runPackage(_ args: [String]) -> RunResult {
    spawn("/bin/bash", [packageScript, "--from", builtFolder] + args,
          env: systemPath.merging(["DPKG_DEB_COMPRESSOR_TYPE": "gzip", "DPKG_DEB_COMPRESSOR_LEVEL": "1",
                                   "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + ((ProcessInfo.processInfo.environment["PATH"]) ?? "")]) { $1 },
          timeLimit: 300)
}

/// The upstream version, as `vault --version` prints it.
let builtVersion: String = {
    let out = spawn(vaultBinary, ["--version"], env: [:]).stdout
    return out.hasPrefix("vault ") ? String(out.dropFirst(6)).trimmingCharacters(in: .whitespacesAndNewlines) : "?"
}()

/// What the package holds: path (without the leading "."), then mode and owner as `dpkg-deb -c`
/// prints them, or the target of a link.
let packagedFiles: [String: String] = [
    "/usr/bin/vault": "-rwxr-xr-x root/root", "/usr/bin/vault-agent": "-rwxr-xr-x root/root",
    "/usr/bin/vault-authd": "-rwxr-xr-x root/root", "/usr/bin/vault-reader": "-rwxr-xr-x root/root",
    "/usr/bin/vault-clipboard": "-rwxr-xr-x root/root", "/usr/bin/vault-ssh-agent": "-rwxr-xr-x root/root",
    "/usr/bin/git-credential-vault": "-> vault", "/usr/bin/docker-credential-vault": "-> vault",
    "/usr/lib/systemd/system/vault-authd.service": "-rw-r--r-- root/root",
    "/usr/lib/systemd/user/vault-agent.service": "-rw-r--r-- root/root",
    "/usr/lib/systemd/user/vault-ssh-agent.service": "-rw-r--r-- root/root",
    "/usr/lib/sysusers.d/vault-auth.conf": "-rw-r--r-- root/root",
    "/usr/lib/udev/rules.d/70-vault-auth.rules": "-rw-r--r-- root/root",
    "/usr/share/polkit-1/rules.d/50-vault-auth-fprintd.rules": "-rw-r--r-- root/root",
    "/usr/share/man/man1/vault.1.gz": "-rw-r--r-- root/root",
    "/usr/share/man/man8/vault-authd.8.gz": "-rw-r--r-- root/root",
    "/usr/share/bash-completion/completions/vault": "-rw-r--r-- root/root",
    "/usr/share/zsh/vendor-completions/_vault": "-rw-r--r-- root/root",
    "/usr/share/fish/vendor_completions.d/vault.fish": "-rw-r--r-- root/root",
    "/usr/share/doc/vault/copyright": "-rw-r--r-- root/root",
    "/usr/share/doc/vault/changelog.Debian.gz": "-rw-r--r-- root/root",
    "/usr/share/lintian/overrides/vault": "-rw-r--r-- root/root",
]

/// What vault-fprintd holds: the unit's drop-in for fprintd (CAP_DAC_READ_SEARCH) and its papers.
let fprintdPackageFiles: [String: String] = [
    "/usr/lib/systemd/system/vault-authd.service.d/fprintd.conf": "-rw-r--r-- root/root",
    "/usr/share/doc/vault-fprintd/copyright": "-rw-r--r-- root/root",
    "/usr/share/doc/vault-fprintd/changelog.Debian.gz": "-rw-r--r-- root/root",
    "/usr/share/lintian/overrides/vault-fprintd": "-rw-r--r-- root/root",
]

/// `dpkg-deb -c`: every file and link of the package (path: mode and owner, or "-> target").
func packageListing(_ deb: String) -> [String: String] {
    var found: [String: String] = [:]
    for line in spawn("/usr/bin/dpkg-deb", ["-c", deb], env: systemPath).stdout.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 6, !fields[0].hasPrefix("d") else { continue }
        let path = String(fields[5].dropFirst())
        found[path] = fields[0].hasPrefix("l") ? "-> " + (fields.count > 7 ? String(fields[7]) : "?") : fields[0] + " " + fields[1]
    }
    return found
}

/// A field of the package's control file.
func controlField(_ deb: String, _ name: String) -> String {
    spawn("/usr/bin/dpkg-deb", ["--field", deb, name], env: systemPath).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
}

@Suite struct DebianPackageTests {
    static let unavailable: String? = {
        for tool in ["/usr/bin/dpkg-deb", "/usr/bin/dpkg-shlibdeps", "/usr/bin/dpkg-gencontrol", "/usr/bin/readelf"]
        where !FileManager.default.isExecutableFile(atPath: tool) { return "\(tool) is missing (Debian: dpkg-dev, binutils)" }
        return nil
    }()

    @Test(.enabled(if: unavailable == nil, "\(unavailable ?? "")"))
    func thePackageHoldsEveryFileWhereDebianPutsItWithItsVersionAndDependencies() throws {
        let out = temporaryFolder("deb")
        defer { try? FileManager.default.removeItem(atPath: out) }
        let r = runPackage(["--output", out])
        let deb = out + "/vault_\(builtVersion)-1_amd64.deb"
        #expect(r.status == 0 && FileManager.default.fileExists(atPath: deb), "\(r.stdout)\n\(r.stderr)")
        #expect(r.stdout.contains("vault package: built \(deb)"), "\(r.stdout)")
        #expect(packageListing(deb) == packagedFiles)
        let fprintd = out + "/vault-fprintd_\(builtVersion)-1_all.deb"
        #expect(packageListing(fprintd) == fprintdPackageFiles)
        #expect(controlField(fprintd, "Depends") == "vault (= \(builtVersion)-1), fprintd")
        #expect(controlField(fprintd, "Architecture") == "all")
        let x2 = temporaryFolder("extract-fprintd")
        defer { try? FileManager.default.removeItem(atPath: x2) }
        #expect(spawn("/usr/bin/dpkg-deb", ["-x", fprintd, x2], env: systemPath).status == 0)
        let dropIn = serviceSettings((try? String(contentsOfFile: x2 + "/usr/lib/systemd/system/vault-authd.service.d/fprintd.conf", encoding: .utf8)) ?? "")
        #expect(dropIn.filter { $0.key == "ExecStart" }.map(\.value) == ["", "/usr/bin/vault-authd --backend auto --fprintd-state /var/lib/fprint"])
        #expect(dropIn.first { $0.key == "AmbientCapabilities" }?.value == "CAP_DAC_READ_SEARCH")
        #expect(controlField(deb, "Package") == "vault" && controlField(deb, "Architecture") == "amd64")
        #expect(controlField(deb, "Version") == builtVersion + "-1", "the version is what vault --version prints")
        // Depends: the libraries the binaries link (dpkg-shlibdeps, with versions), those every
        // command opens with dlopen (no ELF header names them), and a systemd-sysusers.
        let depends = controlField(deb, "Depends")
        for name in ["libc6 (>= ", "libsodium23 (>= ", "libfprint-2-2 (>= ", "libglib2.0-0 (>= ", "libxcb1", "libsqlite3-0", "libnettle8",
                     "systemd | systemd-standalone-sysusers | systemd-sysusers"] {
            #expect(depends.contains(name), "\(name) not in Depends: \(depends)")
        }
        #expect(!depends.contains("swift"), "\(depends)")
        let recommends = controlField(deb, "Recommends")
        for name in ["libarchive13", "libxml2", "libssl3", "libtss2-esys", "libtss2-tctildr0", "libtss2-mu", "libtss2-rc0"] {
            #expect(recommends.contains(name), "\(name) not in Recommends: \(recommends)")
        }
        #expect(controlField(deb, "Suggests") == "vault-fprintd")
        // `vault` links GCC's static libstdc++: the package names the source it came from.
        let builtUsing = controlField(deb, "Built-Using")
        #expect(builtUsing.hasPrefix("gcc-") && builtUsing.contains(" (= "), "Built-Using: \(builtUsing)")
        let size = Int(controlField(deb, "Installed-Size")) ?? 0
        #expect(size > 1000, "Installed-Size \(size)")
        // The maintainer scripts, and a control file dpkg reads back.
        let t = temporaryFolder("control")
        defer { try? FileManager.default.removeItem(atPath: t) }
        #expect(spawn("/usr/bin/dpkg-deb", ["--control", deb, t], env: systemPath).status == 0)
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: t)) ?? []) == ["control", "md5sums", "postinst", "prerm", "postrm"])
        let postinst = (try? String(contentsOfFile: t + "/postinst", encoding: .utf8)) ?? ""
        for line in ["systemd-sysusers ${DPKG_ROOT:+--root=\"$DPKG_ROOT\"} vault-auth.conf", "deb-systemd-helper enable 'vault-authd.service'",
                     "deb-systemd-invoke $_dh_action 'vault-authd.service'", "udevadm control --reload-rules"] {
            #expect(postinst.contains(line), "\(line) not in the postinst")
        }
        // Every file but the package's own records is in md5sums.
        let sums = ((try? String(contentsOfFile: t + "/md5sums", encoding: .utf8)) ?? "").split(separator: "\n").map { String($0.dropFirst(34)) }
        #expect(Set(sums) == Set(packagedFiles.filter { !$0.value.hasPrefix("->") }.keys.map { String($0.dropFirst()) }))

        // The unit as installed: ExecStart in /usr/bin, its manual page named.
        let x = temporaryFolder("extract")
        defer { try? FileManager.default.removeItem(atPath: x) }
        #expect(spawn("/usr/bin/dpkg-deb", ["-x", deb, x], env: systemPath).status == 0)
        let unit = (try? String(contentsOfFile: x + "/usr/lib/systemd/system/vault-authd.service", encoding: .utf8)) ?? ""
        #expect(serviceSettings(unit).first { $0.key == "ExecStart" }?.value == "/usr/bin/vault-authd")
        #expect(unit.contains("\nDocumentation=man:vault-authd(8) man:vault(1)\n"), "\(unit.prefix(800))")
        let agent = (try? String(contentsOfFile: x + "/usr/lib/systemd/user/vault-agent.service", encoding: .utf8)) ?? ""
        #expect(serviceSettings(agent).first { $0.key == "ExecStart" }?.value == "/usr/bin/vault-agent")
        let sshAgent = (try? String(contentsOfFile: x + "/usr/lib/systemd/user/vault-ssh-agent.service", encoding: .utf8)) ?? ""
        #expect(serviceSettings(sshAgent).first { $0.key == "ExecStart" }?.value == "/usr/bin/vault-ssh-agent -D -a %t/vault/ssh-agent.sock")
        #expect(sshAgent.contains("\nDocumentation=man:vault(1)\n"), "\(sshAgent.prefix(800))")
        // The binaries are stripped and run from where the package puts them, helpers beside vault.
        for b in ["vault", "vault-agent", "vault-ssh-agent", "vault-authd", "vault-reader", "vault-clipboard"] {
            let sections = spawn("/usr/bin/readelf", ["-S", "-W", x + "/usr/bin/" + b], env: systemPath)
            #expect(sections.status == 0 && !sections.stdout.contains(".symtab") && !sections.stdout.contains(" .comment "),
                    "\(b) is not stripped as dh_strip strips")
        }
        let installed = spawn(x + "/usr/bin/vault", ["--version"], env: [:])
        #expect(installed.status == 0 && installed.stdout == "vault \(builtVersion)\n", "\(installed.stderr)")
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/man") {
            let page = spawn("/usr/bin/man", ["--warnings", "-l", "-Tutf8", x + "/usr/share/man/man8/vault-authd.8.gz"], env: systemPath)
            #expect(page.status == 0 && page.stdout.contains("--test-mode") && page.stderr.isEmpty, "\(page.stderr)")
        }
        #expect(spawn("/bin/sh", ["-n", t + "/postinst"], env: systemPath).status == 0)

        // Reproducible: the same build packaged again is the same bytes (SOURCE_DATE_EPOCH from
        // the last commit, gzip -n, sorted md5sums).
        let again = temporaryFolder("deb-again")
        defer { try? FileManager.default.removeItem(atPath: again) }
        #expect(runPackage(["--output", again]).status == 0)
        for name in ["vault_\(builtVersion)-1_amd64.deb", "vault-fprintd_\(builtVersion)-1_all.deb"] {
            #expect(FileManager.default.contentsEqual(atPath: out + "/" + name, andPath: again + "/" + name), "\(name) differs when built again")
        }
    }

    /// lintian, when installed: on these debug-build packages the only errors may be the RUNPATH to
    /// the toolchain's Swift runtime (the release build links it in: `./Vault/package.sh --lintian`
    /// reports no error and no warning there), and no warning at all.
    @Test(.enabled(if: unavailable == nil && FileManager.default.isExecutableFile(atPath: "/usr/bin/lintian"),
                   "lintian or dpkg-dev is not installed"))
    func lintianFindsNoErrorButTheDebugBuildsRunpath() throws {
        let out = temporaryFolder("lintian")
        defer { try? FileManager.default.removeItem(atPath: out) }
        #expect(runPackage(["--output", out]).status == 0)
        let r = spawn("/usr/bin/lintian", [out + "/vault_\(builtVersion)-1_amd64.deb", out + "/vault-fprintd_\(builtVersion)-1_all.deb"],
                      env: systemPath, timeLimit: 300)
        let findings = r.stdout.split(separator: "\n").filter { $0.hasPrefix("E:") || $0.hasPrefix("W:") }
        let runpath = findings.filter { $0.hasPrefix("E: vault: custom-library-search-path RUNPATH ") && $0.contains("/swift/") }
        #expect(findings.count == runpath.count, "\(findings.filter { !runpath.contains($0) }.joined(separator: "\n"))")
        #expect(r.stdout.contains("E: vault: custom-library-search-path") || !readelfSaysToolchainRuntime(),
                "lintian says nothing of the debug build's RUNPATH: is it checking?\n\(r.stdout)\(r.stderr)")
    }

    func readelfSaysToolchainRuntime() -> Bool {
        spawn("/usr/bin/readelf", ["-d", vaultBinary], env: systemPath).stdout.contains("libswiftCore.so")
    }

    @Test func everyLibraryVaultOpensWithDlopenIsInThePackagesDependencies() throws {
        let script = try String(contentsOfFile: packageScript, encoding: .utf8)
        let shims = try FileManager.default.contentsOfDirectory(atPath: packageRoot + "/Sources").filter { $0.hasPrefix("C") }
        var opened: [String] = []
        for shim in shims {
            let text = (try? String(contentsOfFile: packageRoot + "/Sources/" + shim + "/shim.h", encoding: .utf8)) ?? ""
            for part in text.components(separatedBy: "\"").dropFirst() where part.range(of: #"^lib[A-Za-z0-9_.+-]+\.so\.[0-9]+$"#, options: .regularExpression) != nil {
                opened.append(part)
            }
        }
        #expect(opened.count >= 9, "sqlite, nettle, libarchive, libxml2, libcrypto and four of tpm2-tss: \(opened)")
        let listed = script.split(separator: "\n").filter { $0.hasPrefix("dlopen_depends=(") || $0.hasPrefix("dlopen_recommends=(") }.joined(separator: " ")
        for soname in opened {
            #expect(listed.contains(" " + soname) || listed.contains("(" + soname), "\(soname) is opened with dlopen but is not in package.sh's dlopen_depends or dlopen_recommends")
        }
    }

    @Test(.enabled(if: unavailable == nil, "\(unavailable ?? "")"))
    func unknownOptionsAreUsageErrorsAndAVersionMustBeDebians() {
        var r = spawn("/bin/bash", [packageScript, "--prefix=/x"], env: systemPath)
        #expect(r.status == 2 && r.stderr.hasPrefix("vault package: error: unknown option '--prefix=/x'"), "\(r.stderr)")
        r = spawn("/bin/bash", [packageScript, "--from", builtFolder, "--version", "1.0", "--output", NSTemporaryDirectory()], env: systemPath)
        #expect(r.status == 1 && r.stderr.contains("'1.0' is not a Debian version"), "\(r.stderr)")
    }
}

/// systemd 252 as PID 1 of a systemd-nspawn container whose root is a copy-on-write overlay of
/// this machine's root (what the container changes is thrown away at `stop()`).
final class NspawnMachine: @unchecked Sendable {
    static let script = packageRoot + "/Tests/IntegrationTests/Fixtures/systemd-container/boot-container.sh"
    /// Why none can boot here, or nil.
    static let unavailable: String? = {
        guard getuid() == 0 else { return "needs root (systemd-nspawn, mounts, dpkg in the container); CI runs as root" }
        for tool in ["/usr/bin/systemd-nspawn", "/usr/bin/nsenter", "/lib/systemd/systemd", "/usr/bin/dpkg"]
        where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is missing" + (tool.hasSuffix("nspawn") ? " (Debian: systemd-container)" : "")
        }
        return nil
    }()

    let name: String
    let base: String
    private(set) var leader: pid_t = 0
    private var running = false

    init() throws {
        name = "vault-deb-" + UUID().uuidString.prefix(8).lowercased()
        base = "/tmp/sdc-" + name
        let r = spawn(Self.script, ["start", name], env: systemPath.merging(["SDC_BASE": base, "SDC_TIMEOUT": "90"]) { $1 }, timeLimit: 120)
        running = true
        guard r.status == 0, let pid = r.stdout.components(separatedBy: "leader pid ").dropFirst().first?
            .split(separator: ";").first.flatMap({ Int32($0) }) else {
            stop()
            throw PackagingError("the container did not boot: \(r.stdout)\n\(r.stderr)")
        }
        leader = pid
    }

    deinit { stop() }

    /// The host path of the container's root.
    var root: String { base + "/root" }

    /// Runs a command in all of the container's namespaces, as root, with a plain environment.
    @discardableResult
    func run(_ args: [String], stdin: String = "", fds: [Int32: String] = [:], timeLimit: Double = 180,
             onStderr: ((String) -> Void)? = nil) -> RunResult {
        spawn("/usr/bin/nsenter", ["-t", String(leader), "-a", "--", "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                                   "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"] + args,
              env: systemPath, stdin: stdin, fds: fds, timeLimit: timeLimit, onStderr: onStderr)
    }

    /// `sh -c command` in the container.
    @discardableResult
    func sh(_ command: String) -> RunResult { run(["/bin/sh", "-c", command]) }

    /// A property of a unit (`systemctl show -P`).
    func show(_ unit: String, _ property: String) -> String {
        run(["systemctl", "show", "-P", property, unit]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Halts the container cleanly and removes its mounts, cgroups and files.
    func stop() {
        guard running else { return }
        running = false
        _ = spawn(Self.script, ["stop", name], env: systemPath.merging(["SDC_BASE": base]) { $1 }, timeLimit: 120)
    }
}

/// Install, upgrade, vault-fprintd, purge and install again with systemd running: measured here
/// (2 cores shared with other builds) 65 to 90 s, of which the three package builds take about
/// 15 s, each apt run 3 to 6 s, the boot 1 s and the halt 2 s.
@Suite(.serialized, .enabled(if: NspawnMachine.unavailable == nil && DebianPackageTests.unavailable == nil,
                             "\(NspawnMachine.unavailable ?? DebianPackageTests.unavailable ?? "")"))
struct DebianPackageRootTests {
    /// Every path where a package installs or keeps things (/etc, /usr, /var, /opt, /srv; not
    /// /work and the like, which this machine's other builds change under the overlay), but what
    /// changes without vault: package managers' records and caches (/var/lib/dpkg, apt,
    /// PackageKit, /var/cache, /var/log), systemd's timer stamps and /var/tmp. The homes and
    /// /root are not listed (a user's own vaults stay after a purge, as Debian policy says; the
    /// packages are copied into /root).
    static let listing = """
        find /etc /usr /var /opt /srv -xdev \\( -path /var/tmp \
        -o -path /var/log -o -path /var/cache -o -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/lib/PackageKit \
        -o -path /var/lib/systemd/timers \\) -prune -o -printf '%y %m %u %p\\n' | LC_ALL=C sort
        """

    @Test func theInstalledPackageStartsItsDaemonServesAFingerprintUnlockSurvivesAnUpgradeAndItsPurgeLeavesNothing() throws {
        // Two packages of the same build: an older version, then this one.
        let out = temporaryFolder("debs")
        defer { try? FileManager.default.removeItem(atPath: out) }
        let older = "\(builtVersion)~older1-1", newer = "\(builtVersion)-1"
        for version in [older, newer] {
            let r = runPackage(["--version", version, "--output", out])
            try #require(r.status == 0, "package.sh --version \(version): \(r.stdout)\n\(r.stderr)")
        }
        let box = try NspawnMachine()
        defer { box.stop() }
        // This machine is a Docker image: its policy-rc.d forbids maintainer scripts to start
        // services. A real Debian machine has none.
        try? FileManager.default.removeItem(atPath: box.root + "/usr/sbin/policy-rc.d")
        try FileManager.default.createDirectory(atPath: box.root + "/root/debs", withIntermediateDirectories: true)
        for version in [older, newer] {
            try FileManager.default.copyItem(atPath: out + "/vault_\(version)_amd64.deb", toPath: box.root + "/root/debs/vault_\(version)_amd64.deb")
        }
        try FileManager.default.copyItem(atPath: out + "/vault-fprintd_\(newer)_all.deb", toPath: box.root + "/root/debs/vault-fprintd_\(newer)_all.deb")
        #expect(box.run(["dpkg-query", "-W", "vault"]).status != 0, "vault is installed on this machine already: the test needs a machine without it")
        // An ordinary person, made before the first listing (their home is theirs, not the package's).
        let person = "vault-deb"
        #expect(box.run(["useradd", "-m", "-s", "/bin/sh", person]).status == 0)
        let earlierAccount = box.run(["getent", "passwd", "vault-auth"])
        let hadUser = earlierAccount.status == 0
        let before = box.sh(Self.listing).stdout

        // 1. The older package, as the README says: apt install ./vault_*.deb.
        var r = box.run(["apt-get", "install", "-y", "--no-install-recommends", "/root/debs/vault_\(older)_amd64.deb"], stdin: "")
        #expect(r.status == 0, "apt-get install: \(r.stdout)\n\(r.stderr)")
        #expect(box.run(["dpkg-query", "-W", "-f", "${Version} ${Status}", "vault"]).stdout == "\(older) install ok installed")
        #expect(box.show("vault-authd.service", "ActiveState") == "active", "\(box.run(["journalctl", "-u", "vault-authd", "-o", "cat", "--no-pager"]).stdout)")
        #expect(box.show("vault-authd.service", "UnitFileState") == "enabled")
        #expect(box.show("vault-authd.service", "FragmentPath").hasSuffix("lib/systemd/system/vault-authd.service"))
        let account = box.run(["getent", "passwd", "vault-auth"]).stdout
        // Made as the package declares it, or, when the machine had one (another test's), kept as it was.
        if hadUser {
            #expect(account == earlierAccount.stdout, "the system user: \(account)")
        } else {
            #expect(account.hasSuffix(":vault key authority:/nonexistent:/usr/sbin/nologin\n"), "the system user: \(account)")
        }
        let uid = account.split(separator: ":").dropFirst(2).first.map(String.init) ?? "?"
        let daemon = box.run(["cat", "/proc/\(box.show("vault-authd.service", "MainPID"))/status"]).stdout
        #expect(daemon.contains("\nUid:\t\(uid)\t\(uid)\t") && daemon.contains("\nNoNewPrivs:\t1"), "the daemon runs as vault-auth (\(uid)):\n\(daemon)")
        let folders = box.run(["stat", "-c", "%a %U %F %n", "/run/vault-auth", "/run/vault-auth/socket", "/var/lib/vault-auth"]).stdout
        #expect(folders == "755 vault-auth directory /run/vault-auth\n666 vault-auth socket /run/vault-auth/socket\n700 vault-auth directory /var/lib/vault-auth\n", "\(folders)")
        #expect(box.run(["man", "-w", "vault-authd"]).stdout == "/usr/share/man/man8/vault-authd.8.gz\n")

        // 2. The administrator's drop-in puts the installed daemon on libfprint's virtual reader
        // (test mode: the only mode that serves it); an ordinary user enrols and unlocks by finger.
        let dropIn = box.root + "/etc/systemd/system/vault-authd.service.d"
        try FileManager.default.createDirectory(atPath: dropIn, withIntermediateDirectories: true)
        let virtualReader = """
            [Service]
            Environment=FP_DRIVERS_WHITELIST=virtual_device FP_VIRTUAL_DEVICE=/run/vault-auth/reader.sock
            ExecStart=
            ExecStart=/usr/bin/vault-authd --test-mode --backend libfprint

            """
        _ = FileManager.default.createFile(atPath: dropIn + "/virtual-reader.conf", contents: Data(virtualReader.utf8))
        #expect(box.run(["systemctl", "daemon-reload"]).status == 0)
        #expect(box.run(["systemctl", "restart", "vault-authd.service"]).status == 0)
        // The reader socket the daemon listens on, from this side: through the container's root.
        let reader = "/proc/\(box.leader)/root/run/vault-auth/reader.sock"
        func vault(_ args: [String], passcode: Bool = false, stdin: String = "", scans: Int = 0) -> RunResult {
            let feed = ReaderFeed(socket: reader, env: ["PATH": "/usr/bin:/bin"], steps: Array(repeating: .device("SCAN alice"), count: scans),
                                  log: out + "/reader.log")
            var r = box.run(["setpriv", "--reuid=\(person)", "--regid=\(person)", "--init-groups", "env", "-i", "HOME=/home/\(person)",
                             "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "NO_COLOR=1", "XDG_RUNTIME_DIR=/home/\(person)/.run",
                             "/usr/bin/vault"] + args + (passcode ? ["--passcode-fd", "3"] : []),
                            stdin: stdin, fds: passcode ? [3: Sandbox.passcode + "\n"] : [:], timeLimit: 90,
                            onStderr: { feed.stderrChanged($0) })
            r.reader = feed.finish(grace: scans == 0 ? 0 : 5)
            return r
        }
        #expect(box.run(["install", "-d", "-o", person, "-g", person, "-m", "0700", "/home/\(person)/.run"]).status == 0)
        r = vault(["init", "--kdf-memory", "8", "--kdf-ops", "1"], passcode: true, scans: 5)
        #expect(r.status == 0, "init through the installed vault-authd: \(r.stderr)\n\(r.reader)")
        r = vault(["add", "gh", "--password-stdin"], passcode: true, stdin: "tok-1\n")
        #expect(r.status == 0, "add: \(r.stderr)")
        r = vault(["get", "gh", "--field", "password", "--no-input"], scans: 1)
        #expect(r.status == 0 && r.stdout == "tok-1\n", "a fingerprint get through the older package: \(r.status) \(r.stderr)")
        let status = json(vault(["status", "--json"]).stdout)
        #expect((status["authority"] as? [String: Any])?["kind"] as? String == "system", "\(status)")
        let stateBefore = box.run(["ls", "/var/lib/vault-auth"]).stdout
        #expect(stateBefore.contains("uid-"), "the person's state in the daemon: \(stateBefore)")

        // 3. The upgrade: the daemon restarts on the new binary, keeps every user's state, and
        // the administrator's drop-in stays in force.
        let pidBefore = box.show("vault-authd.service", "MainPID")
        r = box.run(["apt-get", "install", "-y", "--no-install-recommends", "/root/debs/vault_\(newer)_amd64.deb"], stdin: "")
        #expect(r.status == 0, "the upgrade: \(r.stdout)\n\(r.stderr)")
        #expect(r.stdout.contains("Unpacking vault (\(newer)) over (\(older))"), "\(r.stdout)")
        #expect(box.run(["dpkg-query", "-W", "-f", "${Version} ${Status}", "vault"]).stdout == "\(newer) install ok installed")
        #expect(box.show("vault-authd.service", "ActiveState") == "active")
        #expect(box.show("vault-authd.service", "MainPID") != pidBefore, "the upgrade restarts the daemon")
        #expect(box.show("vault-authd.service", "UnitFileState") == "enabled")
        #expect(box.run(["ls", "/var/lib/vault-auth"]).stdout == stateBefore)
        r = vault(["get", "gh", "--field", "password", "--no-input"], scans: 1)
        #expect(r.status == 0 && r.stdout == "tok-1\n", "a fingerprint get after the upgrade: \(r.status) \(r.stderr)")

        // vault-fprintd: its drop-in restarts the running daemon with CAP_DAC_READ_SEARCH, its
        // removal without it (the administrator's drop-in, later in name order, keeps ExecStart).
        #expect(box.show("vault-authd.service", "AmbientCapabilities").isEmpty)
        var pid = box.show("vault-authd.service", "MainPID")
        r = box.run(["apt-get", "install", "-y", "--no-install-recommends", "/root/debs/vault-fprintd_\(newer)_all.deb"], stdin: "")
        #expect(r.status == 0, "apt-get install vault-fprintd: \(r.stdout)\n\(r.stderr)")
        #expect(box.show("vault-authd.service", "AmbientCapabilities") == "cap_dac_read_search")
        #expect(box.show("vault-authd.service", "MainPID") != pid && box.show("vault-authd.service", "ActiveState") == "active")
        let capabilities = box.run(["grep", "^CapEff:", "/proc/\(box.show("vault-authd.service", "MainPID"))/status"]).stdout
        #expect(capabilities == "CapEff:\t0000000000000004\n", "the daemon's one capability: \(capabilities)")
        pid = box.show("vault-authd.service", "MainPID")
        r = box.run(["apt-get", "purge", "-y", "vault-fprintd"], stdin: "")
        #expect(r.status == 0, "apt-get purge vault-fprintd: \(r.stdout)\n\(r.stderr)")
        #expect(box.show("vault-authd.service", "AmbientCapabilities").isEmpty)
        #expect(box.show("vault-authd.service", "MainPID") != pid && box.show("vault-authd.service", "ActiveState") == "active")

        // 4. The purge, asking nothing (stdin is empty; DEBIAN_FRONTEND=noninteractive).
        let files = box.run(["dpkg", "-L", "vault"]).stdout.split(separator: "\n").map(String.init)
        #expect(files.contains("/usr/bin/vault-authd") && files.contains("/usr/lib/systemd/system/vault-authd.service"), "\(files)")
        try FileManager.default.removeItem(atPath: dropIn)
        r = box.run(["apt-get", "purge", "-y", "vault"], stdin: "")
        #expect(r.status == 0, "apt-get purge: \(r.stdout)\n\(r.stderr)")
        #expect(box.run(["dpkg-query", "-W", "-f", "${Status}", "vault"]).stdout.isEmpty
                || box.run(["dpkg-query", "-W", "-f", "${Status}", "vault"]).stdout == "unknown ok not-installed")
        #expect(box.show("vault-authd.service", "LoadState") == "not-found")
        let left = files.filter { path in
            var st = stat()
            return lstat(box.root + path, &st) == 0 && (st.st_mode & S_IFMT) != S_IFDIR
        }
        #expect(left.isEmpty, "files of the package left after the purge: \(left)")
        #expect(box.run(["test", "-e", "/var/lib/vault-auth"]).status != 0, "purge removes /var/lib/vault-auth")
        #expect(box.run(["test", "-e", "/run/vault-auth"]).status != 0, "/run/vault-auth goes with the stopped daemon")
        let after = box.sh(Self.listing).stdout
        let added = Set(after.split(separator: "\n")).subtracting(before.split(separator: "\n"))
        let removed = Set(before.split(separator: "\n")).subtracting(after.split(separator: "\n"))
        #expect(added.isEmpty && removed.isEmpty, "the file system differs after install, upgrade and purge:\nadded: \(added.sorted())\nremoved: \(removed.sorted())")
        // The system user stays (Debian leaves system users: files elsewhere may still be theirs).
        #expect(hadUser || box.run(["getent", "passwd", "vault-auth"]).status == 0)
        // The person's vault stays in their home.
        r = vault(["get", "gh", "--field", "password", "--passcode"], passcode: true)
        #expect(r.status == 127 || r.stderr.contains("No such file"), "vault is gone from /usr/bin: \(r.status) \(r.stderr)")
        let vaults = box.run(["find", "/home/\(person)/.local/share/vault", "-type", "f"]).stdout
        #expect(!vaults.isEmpty, "the person's vault stays in their home")

        // 5. Installed again (what README says of a purge): the vault opens with its passcode, not
        // by finger, until the person enrols under the new daemon and binds the vault again.
        r = box.run(["apt-get", "install", "-y", "--no-install-recommends", "/root/debs/vault_\(newer)_amd64.deb"], stdin: "")
        #expect(r.status == 0, "apt-get install again: \(r.stdout)\n\(r.stderr)")
        try FileManager.default.createDirectory(atPath: dropIn, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: dropIn + "/virtual-reader.conf", contents: Data(virtualReader.utf8))
        #expect(box.run(["systemctl", "daemon-reload"]).status == 0)
        #expect(box.run(["systemctl", "restart", "vault-authd.service"]).status == 0)
        r = vault(["get", "gh", "--field", "password", "--passcode"], passcode: true)
        #expect(r.status == 0 && r.stdout == "tok-1\n", "a passcode get after the purge: \(r.status) \(r.stderr)")
        r = vault(["get", "gh", "--field", "password", "--no-input"])
        #expect(r.status != 0 && r.stdout.isEmpty, "no finger opens it after the purge: \(r.status) \(r.stderr)")
        r = vault(["enroll"], passcode: true, scans: 5)
        #expect(r.status == 0, "enroll under the new daemon: \(r.stderr)")
        r = vault(["enroll", "--bind"], passcode: true)
        #expect(r.status == 0, "enroll --bind: \(r.stderr)")
        r = vault(["get", "gh", "--field", "password", "--no-input"], scans: 1)
        #expect(r.status == 0 && r.stdout == "tok-1\n", "a finger again: \(r.status) \(r.stderr)")
    }
}
