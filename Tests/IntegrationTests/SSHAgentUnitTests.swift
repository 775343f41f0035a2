import Foundation
import Testing

// The SSH agent's user unit (Vault/vault-ssh-agent.service): checked by systemd-analyze (with the
// other user units, PackagingTests.theUserUnitsPassSystemdAnalyzeVerify), and run
// by a real user manager (user@UID.service, systemd 252 as PID 1 of a systemd-nspawn container)
// from the installed Debian package.

extension PackagingTests {
    @Test func theSSHAgentsUnitListensOnTheRuntimeFolderInTheForegroundAndKeepsTheAgentsHardening() {
        let settings = serviceSettings(shipped("vault-ssh-agent.service"))
        func values(_ key: String) -> [String] { settings.filter { $0.key == key }.map(\.value) }
        let expected = [
            "ExecStart": "/usr/local/bin/vault-ssh-agent -D -a %t/vault/ssh-agent.sock", "Type": "simple",
            "RuntimeDirectory": "vault", "RuntimeDirectoryMode": "0700", "RuntimeDirectoryPreserve": "yes",
            "UMask": "0077", "LimitCORE": "0", "NoNewPrivileges": "yes", "ProtectSystem": "full", "RestrictAddressFamilies": "AF_UNIX",
            "MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native", "LockPersonality": "yes", "Restart": "on-failure",
        ]
        for (key, value) in expected {
            #expect(values(key) == [value], "\(key)=\(values(key))")
        }
        // `vault get` (a release) writes the vault's audit record wherever the vault is.
        #expect(values("ReadWritePaths").isEmpty && values("ProtectHome").isEmpty && values("PrivateTmp").isEmpty)
        #expect(shipped("vault-ssh-agent.service").contains("\n[Install]\nWantedBy=default.target\n"))
    }
}

extension DebianPackageRootTests {
    /// The installed package's vault-ssh-agent.service, started by a person's own user manager:
    /// the socket is in /run/user/UID/vault (0700, the socket 0600, theirs), ssh-add uses it,
    /// `vault doctor` as that person names it vault's agent by the unit's main pid (by its process
    /// name: the agent is not dumpable, so /proc/PID/exe is closed to its own user), and a stop
    /// removes the socket.
    @Test func theSSHAgentsUserUnitRunsUnderTheUsersManagerAndDoctorNamesIt() throws {
        let out = temporaryFolder("ssh-unit-deb")
        defer { try? FileManager.default.removeItem(atPath: out) }
        let version = "\(builtVersion)-1"
        let packaged = runPackage(["--version", version, "--output", out])
        try #require(packaged.status == 0, "package.sh: \(packaged.stdout)\n\(packaged.stderr)")
        let box = try NspawnMachine()
        defer { box.stop() }
        try? FileManager.default.removeItem(atPath: box.root + "/usr/sbin/policy-rc.d")
        try FileManager.default.createDirectory(atPath: box.root + "/root/debs", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: out + "/vault_\(version)_amd64.deb", toPath: box.root + "/root/debs/vault_\(version)_amd64.deb")
        var r = box.run(["apt-get", "install", "-y", "--no-install-recommends", "/root/debs/vault_\(version)_amd64.deb"], stdin: "")
        #expect(r.status == 0, "apt-get install: \(r.stdout)\n\(r.stderr)")
        #expect(box.run(["test", "-f", "/usr/lib/systemd/user/vault-ssh-agent.service"]).status == 0)

        let person = "vault-ssh"
        #expect(box.run(["useradd", "-m", "-s", "/bin/sh", person]).status == 0)
        let uid = box.run(["id", "-u", person]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(box.run(["loginctl", "enable-linger", person]).status == 0)
        var up = false
        for _ in 0..<100 where !up {
            up = box.run(["systemctl", "is-active", "user@\(uid).service"]).stdout.hasPrefix("active")
            if !up { usleep(100_000) }
        }
        try #require(up, "user@\(uid).service: \(box.run(["systemctl", "status", "user@\(uid).service", "--no-pager"]).stdout)")
        let run = "/run/user/\(uid)"
        func user(_ args: [String]) -> RunResult {
            box.run(["setpriv", "--reuid=\(person)", "--regid=\(person)", "--init-groups", "env", "-i", "HOME=/home/\(person)",
                     "PATH=/usr/bin:/bin", "LANG=C.UTF-8", "XDG_RUNTIME_DIR=\(run)", "SSH_AUTH_SOCK=\(run)/vault/ssh-agent.sock"] + args,
                    timeLimit: 60)
        }
        func userctl(_ args: [String]) -> RunResult {
            user(["env", "DBUS_SESSION_BUS_ADDRESS=unix:path=\(run)/bus", "systemctl", "--user"] + args)
        }
        r = userctl(["start", "vault-ssh-agent.service"])
        let journal = { box.run(["journalctl", "_SYSTEMD_USER_UNIT=vault-ssh-agent.service", "-o", "cat", "--no-pager"]).stdout }
        #expect(r.status == 0, "start: \(r.stderr)\n\(journal())")
        var listening = false
        for _ in 0..<100 where !listening {
            listening = box.run(["test", "-S", "\(run)/vault/ssh-agent.sock"]).status == 0
            if !listening { usleep(50_000) }
        }
        #expect(listening, "\(journal())")
        let modes = box.run(["stat", "-c", "%a %U %F", "\(run)/vault", "\(run)/vault/ssh-agent.sock"]).stdout
        #expect(modes == "700 \(person) directory\n600 \(person) socket\n", "\(modes)")
        r = user(["ssh-add", "-l"])
        #expect(r.status == 1 && r.stdout.contains("The agent has no identities."), "\(r.status) \(r.stdout) \(r.stderr)\n\(journal())")
        #expect(user(["ssh-keygen", "-q", "-N", "", "-t", "ed25519", "-f", "/home/\(person)/id"]).status == 0)
        #expect(user(["ssh-add", "/home/\(person)/id"]).status == 0)
        r = user(["ssh-add", "-L"])
        let pub = box.run(["cat", "/home/\(person)/id.pub"]).stdout
        #expect(r.status == 0 && r.stdout == pub, "\(r.stdout) \(r.stderr)")

        let main = userctl(["show", "-P", "MainPID", "vault-ssh-agent.service"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let doctor = json(user(["vault", "doctor", "--json"]).stdout)["ssh_agent"] as? [String: Any] ?? [:]
        #expect(doctor["state"] as? String == "vault" && doctor["pid"] as? Int == Int(main) && doctor["keys"] as? Int == 1, "\(doctor) main \(main)")
        #expect(doctor["program"] as? String == "vault-ssh-agent", "the name from /proc/PID/comm: \(doctor)")

        #expect(userctl(["stop", "vault-ssh-agent.service"]).status == 0)
        #expect(box.run(["test", "-e", "\(run)/vault/ssh-agent.sock"]).status != 0, "the agent removes its socket at SIGTERM")
        #expect(box.run(["test", "-d", "\(run)/vault"]).status == 0, "the folder stays (RuntimeDirectoryPreserve): vault-agent's socket may be in it")
    }
}
