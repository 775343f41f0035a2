import Foundation
import Testing

// What a program was released holds only in the unlock session it was released in and for the
// item as it was; a new collection whose recovery key nobody saw is not kept; CreateCollection's
// bound counts the prompts not yet started. Against the real service on a bus of the test's own
// (SecretServiceTests.swift has the rig).

/// A pinentry that answers every command OK, a passcode to GETPIN, and ERR to MESSAGE (the
/// recovery key is never shown).
private func failingPinentry(in folder: String) throws -> String {
    let path = folder + "/pinentry-no-message"
    try """
        #!/bin/sh
        echo "OK ready"
        while read -r line; do
          case "$line" in
            GETPIN*) echo "D \(Sandbox.passcode)"; echo OK ;;
            MESSAGE*) echo "ERR 83886179 Operation cancelled <Pinentry>" ;;
            BYE*) echo OK; exit 0 ;;
            *) echo OK ;;
          esac
        done
        """.write(toFile: path, atomically: true, encoding: .utf8)
    chmod(path, 0o700)
    return path
}

@Suite struct SecretServiceApprovalTests {
    /// One long-running program, approved with one touch in a per-client collection: after
    /// `vault lock` and `vault unlock` from the terminal (with no service call between, and the
    /// same timeout), its next read needs a new touch (none: `AccessDenied`); after `vault edit`
    /// of the item outside the service, its next read is the new value, after a new touch.
    @Test func anApprovalEndsWithItsSessionAndWithTheItemAsItWas() throws {
        let box = Sandbox.withEnrolledFinger()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--scan-timeout", "3"])
        defer { rig.close() }
        #expect(rig.secretTool(["store", "--label=Kept", "service", "kept"], stdin: "ap-Secret-3301").status == 0)
        #expect(box.vault(["settings", "--secret-service-approval", "per-client"], passcode: Sandbox.passcode).status == 0)
        let name = try #require(box.vault(["ls"]).stdout.split(separator: "\n").first { $0.hasPrefix("Kept #") }.map(String.init))

        // The program reads when a file `goN` appears, and prints `N VALUE` or `N denied`.
        let folder = box.home
        let output = folder + "/client"
        let client = start("/usr/bin/python3", ["-c", """
            import os, sys, time, secretstorage
            conn = secretstorage.dbus_init()
            for n in range(1, 5):
                while not os.path.exists(sys.argv[1] + "/go%d" % n):
                    time.sleep(0.02)
                item = next(secretstorage.get_default_collection(conn).search_items({"service": "kept"}))
                try:
                    print(n, item.get_secret().decode(), flush=True)
                except Exception as e:
                    print(n, "denied", type(e).__name__, str(e)[:80], flush=True)
            """, folder], env: rig.env, output: output)
        defer { kill(client, SIGKILL); _ = reap(client) }
        func read(_ n: Int, touch: Bool) -> String {
            let prompt = "touch the fingerprint reader"
            let seen = rig.service!.stderr.components(separatedBy: prompt).count - 1
            let feed = touch ? ReaderFeed(socket: box.readerSocket, env: box.env,
                                          steps: [.awaitStderrCount(prompt, seen + 1), .device("SCAN alice")],
                                          log: box.home + "/reader\(n).log") : nil
            rig.service!.feed = feed
            defer { rig.service!.feed = nil }
            _ = FileManager.default.createFile(atPath: folder + "/go\(n)", contents: Data())
            let limit = Date(timeIntervalSinceNow: 60)
            while Date() < limit {
                let out = (try? String(contentsOfFile: output + ".out", encoding: .utf8)) ?? ""
                if let line = out.split(separator: "\n").first(where: { $0.hasPrefix("\(n) ") }) {
                    if let feed { #expect(feed.finish(grace: 10) == [0], "read \(n): the touch was not asked for") }
                    return String(line.dropFirst("\(n) ".count))
                }
                usleep(20_000)
            }
            return "no answer: \((try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "")"
        }
        #expect(read(1, touch: true) == "ap-Secret-3301")

        // Locked and unlocked again from the terminal: the service heard nothing of it.
        #expect(box.vault(["lock"]).status == 0)
        let unlock = box.vault(["unlock", "--scope", "user", "--passcode", "--timeout", "600"], passcode: Sandbox.passcode)
        #expect(unlock.status == 0, "unlock: \(unlock.stderr)")
        let stale = read(2, touch: false)
        #expect(stale.hasPrefix("denied") && stale.contains("AccessDenied"), "the old session's approval was served: \(stale)")
        #expect(read(3, touch: true) == "ap-Secret-3301")

        // Changed outside the service: the new value, never the remembered one, after a new touch.
        let edit = box.vault(["edit", name, "--password-stdin"], stdin: "ap-Secret-3302\n")
        #expect(edit.status == 0, "edit: \(edit.stderr)")
        #expect(read(4, touch: true) == "ap-Secret-3302")
        #expect(rig.service!.stderr.components(separatedBy: "touch the fingerprint reader").count - 1 == 4, "\(rig.service!.stderr)")
    }

    /// A pinentry that fails to show the recovery key (ERR to MESSAGE): the new vault is removed
    /// (its folder) and not served; the prompt completes dismissed.
    @Test func aNewCollectionWhoseRecoveryKeyWasNotShownIsRemoved() throws {
        let box = Sandbox()
        box.initVault()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--pinentry", try failingPinentry(in: box.home)])
        defer { rig.close() }
        let r = rig.python("""
            import secretstorage
            from secretstorage.exceptions import PromptDismissedException
            conn = secretstorage.dbus_init()
            try:
                c = secretstorage.create_collection(conn, "Unseen Key")
                print("created", c.collection_path)
            except PromptDismissedException:
                print("dismissed")
            print("collections", sorted(x.collection_path for x in secretstorage.get_all_collections(conn)))
            """)
        #expect(r.status == 0 && r.stdout.hasPrefix("dismissed\n"), "\(r.stdout) \(r.stderr)\n\(rig.service!.stderr)")
        #expect(!r.stdout.contains("Unseen"), "\(r.stdout)")
        #expect(!FileManager.default.fileExists(atPath: box.home + "/vaults/Unseen-Key"), "the vault nobody has the recovery key of was kept")
        #expect(FileManager.default.fileExists(atPath: box.home + "/vaults/default/vault.db"))
    }

    /// 16 CreateCollection prompts one client never starts use up the bound: another client's
    /// 17th is refused with `LimitsExceeded`.
    @Test func unstartedCreationPromptsCountTowardsTheBound() throws {
        let box = Sandbox()
        box.initVault()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--pinentry", try failingPinentry(in: box.home)])
        defer { rig.close() }
        let r = rig.python("""
            import secretstorage
            from secretstorage.util import DBusAddressWrapper
            def create(conn, label):
                svc = DBusAddressWrapper("/org/freedesktop/secrets", "org.freedesktop.Secret.Service", conn)
                return svc.call("CreateCollection", "a{sv}s", {"org.freedesktop.Secret.Collection.Label": ("s", label)}, "")
            first, second = secretstorage.dbus_init(), secretstorage.dbus_init()
            prompts = [create(first, "c%d" % n)[1] for n in range(16)]
            print("prompts", len(set(p for p in prompts if p != "/")))
            try:
                print("17th", create(second, "c16"))
            except Exception as e:
                print("17th refused", "LimitsExceeded" in str(e) or "LimitsExceeded" in repr(e.args))
            """)
        #expect(r.status == 0 && r.stdout == "prompts 16\n17th refused True\n", "\(r.stdout) \(r.stderr)")
    }
}
