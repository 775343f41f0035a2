import Foundation
import Testing

// The Secret Service's per-collection approval, collections made over D-Bus, the per-client call
// cap and the wiping of GLib's copies of `plain` secrets, each against the real service on a bus
// of the test's own (SecretServiceTests.swift has the rig).

/// Reads an item of `{"service": NAME}` twice through `Item.GetSecret` in one program.
private func readTwice(_ service: String) -> String {
    """
    import secretstorage
    conn = secretstorage.dbus_init()
    item = next(secretstorage.get_default_collection(conn).search_items({"service": "\(service)"}))
    print(item.get_secret().decode(), item.get_secret().decode())
    """
}

/// Every occurrence of `needle` in the writable mappings of process `pid` (`/proc/PID/maps`,
/// read through `/proc/PID/mem`; root).
private func occurrences(of needle: [UInt8], inProcess pid: pid_t) -> Int {
    // Read to the end by hand: a /proc file has no size to go by.
    guard let handle = FileHandle(forReadingAtPath: "/proc/\(pid)/maps"), let data = try? handle.readToEnd() else { return -1 }
    let maps = String(decoding: data, as: UTF8.self)
    let fd = open("/proc/\(pid)/mem", O_RDONLY)
    guard fd >= 0 else { return -1 }
    defer { close(fd) }
    var found = 0
    for line in maps.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 2, fields[1].hasPrefix("rw") else { continue }
        let range = fields[0].split(separator: "-")
        guard range.count == 2, let start = UInt64(range[0], radix: 16), let end = UInt64(range[1], radix: 16) else { continue }
        var buffer = [UInt8](repeating: 0, count: Int(end - start))
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(Int64(bitPattern: start))) }
        guard n > 0 else { continue }
        // memchr to each candidate, memcmp there (not Data.range(of:), which missed matches).
        buffer.withUnsafeBytes { hay in
            needle.withUnsafeBytes { pin in
                let base = hay.baseAddress!
                var offset = 0
                while offset <= n - pin.count, let hit = memchr(base + offset, Int32(needle[0]), n - pin.count + 1 - offset) {
                    let at = base.distance(to: UnsafeRawPointer(hit))
                    if memcmp(base + at, pin.baseAddress!, pin.count) == 0 { found += 1 }
                    offset = at + 1
                }
            }
        }
    }
    return found
}

@Suite struct SecretServiceLimitsTests {
    /// `vault settings --secret-service-approval per-client`: every item of the collection is
    /// released to each program only after a fresh match of its own (Item.GetSecret and
    /// GetSecrets alike), remembered for that program; before the setting no touch is asked.
    @Test func aPerClientCollectionNeedsAFreshMatchPerProgram() throws {
        let box = Sandbox.withEnrolledFinger()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--scan-timeout", "3"])
        defer { rig.close() }
        #expect(rig.secretTool(["store", "--label=Everyday", "service", "everyday"], stdin: "cw-Secret-4410").status == 0)
        let prompt = "touch the fingerprint reader"
        let before = rig.python(readTwice("everyday"))
        #expect(before.status == 0 && before.stdout == "cw-Secret-4410 cw-Secret-4410\n", "\(before.stdout) \(before.stderr)")
        #expect(!rig.service!.stderr.contains(prompt), "no touch before the setting: \(rig.service!.stderr)")

        let set = box.vault(["settings", "--secret-service-approval", "per-client"], passcode: Sandbox.passcode)
        #expect(set.status == 0, "settings: \(set.stderr)")
        #expect(json(box.vault(["settings", "--json"]).stdout)["secret_service_approval"] as? String == "per-client")
        #expect(box.vault(["settings", "--secret-service-approval", "always"], passcode: Sandbox.passcode).status == 2)

        let feed = ReaderFeed(socket: box.readerSocket, env: box.env,
                              steps: [.awaitStderrCount(prompt, 1), .device("SCAN alice"), .awaitStderrCount(prompt, 2), .device("SCAN alice")],
                              log: box.home + "/reader.log")
        rig.service!.feed = feed
        // One program, two reads (Item.GetSecret): one touch.
        let first = rig.python(readTwice("everyday"))
        #expect(first.status == 0 && first.stdout == "cw-Secret-4410 cw-Secret-4410\n", "first program: \(first.stdout) \(first.stderr)")
        // Another program (secret-tool's lookup is GetSecrets): its own touch.
        let second = rig.secretTool(["lookup", "service", "everyday"])
        #expect(second.status == 0 && second.stdout == "cw-Secret-4410", "second program: \(second.stdout) \(second.stderr)")
        #expect(feed.finish(grace: 10) == [0, 0])
        rig.service!.feed = nil
        #expect(rig.service!.stderr.components(separatedBy: prompt).count - 1 == 2, "one touch per program: \(rig.service!.stderr)")
        // A third program and no finger: the scan times out, nothing is released, on either path.
        let third = rig.secretTool(["lookup", "service", "everyday"])
        #expect(!third.stdout.contains("cw-Secret"), "\(third.stdout) \(third.stderr)")
        let fourth = rig.python(readTwice("everyday"))
        #expect(fourth.status != 0 && fourth.stderr.contains("org.freedesktop.DBus.Error.AccessDenied") && !fourth.stdout.contains("cw-Secret"),
                "\(fourth.stdout) \(fourth.stderr)")
        // A secret that changes is released anew (a touch), never the one remembered.
        let again = ReaderFeed(socket: box.readerSocket, env: box.env,
                               steps: [.awaitStderrCount(prompt, 5), .device("SCAN alice"), .awaitStderrCount(prompt, 6), .device("SCAN alice")],
                               log: box.home + "/reader2.log")
        rig.service!.feed = again
        let changed = rig.python("""
            import secretstorage
            conn = secretstorage.dbus_init()
            item = next(secretstorage.get_default_collection(conn).search_items({"service": "everyday"}))
            before = item.get_secret().decode()
            item.set_secret(b"cw-Secret-4411")
            print(before, item.get_secret().decode())
            """)
        #expect(changed.status == 0 && changed.stdout == "cw-Secret-4410 cw-Secret-4411\n", "\(changed.stdout) \(changed.stderr)")
        #expect(again.finish(grace: 10) == [0, 0])
        rig.service!.feed = nil
    }

    /// secretstorage's `create_collection`: a new vault named from the label, its passcode typed
    /// twice at pinentry-tty, its recovery key shown there; the collection is in `Collections`,
    /// `CollectionCreated` names it, and items stored there are in the new vault.
    @Test func createCollectionMakesANewVaultThroughPinentry() throws {
        let box = Sandbox()
        box.initVault()
        let terminal = TestTerminal()
        defer { terminal.close() }
        box.env["GPG_TTY"] = terminal.slavePath
        box.env["TERM"] = "dumb"
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--pinentry", "/usr/bin/pinentry-tty"])
        defer { rig.close() }
        let typist = Thread {
            func seen(_ text: String) -> Int { terminal.screen.components(separatedBy: text).count - 1 }
            for n in 1...2 {
                let limit = Date(timeIntervalSinceNow: 60)
                while seen("Passcode:") < n && Date() < limit { usleep(10_000) }
                terminal.type(Sandbox.passcode + "\n")
            }
            // The recovery key's message waits for Enter.
            let limit = Date(timeIntervalSinceNow: 60)
            while seen("recovery key of the new vault") < 1 && Date() < limit { usleep(10_000) }
            usleep(200_000)
            terminal.type("\n")
        }
        typist.start()
        let r = rig.python("""
            import secretstorage
            from jeepney.bus_messages import MatchRule, message_bus
            conn = secretstorage.dbus_init()
            rule = MatchRule(type="signal", interface="org.freedesktop.Secret.Service", member="CollectionCreated")
            with conn.filter(rule) as created:
                conn.send_and_get_reply(message_bus.AddMatch(rule))
                c = secretstorage.create_collection(conn, "Work Secrets")
                msg = conn.recv_until_filtered(created, timeout=10)
                print("signal", msg.body[0] == c.collection_path)
            print("listed", c.collection_path in [x.collection_path for x in secretstorage.get_all_collections(conn)])
            print("label", c.get_label(), "locked", c.is_locked())
            c.create_item("in new", {"new": "1"}, b"nc-Secret-8812")
            print("secret", next(c.search_items({"new": "1"})).get_secret().decode())
            """)
        #expect(r.status == 0 && r.stdout == "signal True\nlisted True\nlabel Work-Secrets locked False\nsecret nc-Secret-8812\n",
                "\(r.stdout) \(r.stderr)\n\(rig.service!.stderr)")
        #expect(terminal.screen.contains("recovery key of the new vault Work-Secrets"), "\(terminal.screen)")
        #expect(!terminal.screen.contains(Sandbox.passcode), "the passcode was echoed")
        #expect(FileManager.default.fileExists(atPath: box.home + "/vaults/Work-Secrets/vault.db"))
        #expect(box.vault(["ls", "--vault", "Work-Secrets"]).stdout.contains("in new"))
        #expect(box.vault(["lock", "--vault", "Work-Secrets"]).status == 0)
    }

    /// Without a pinentry nobody can choose the new vault's passcode: a clear D-Bus error, and
    /// no vault is made.
    @Test func createCollectionWithoutAPinentryIsAClearError() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let r = rig.run("/usr/bin/gdbus", ["call", "--session", "-d", "org.freedesktop.secrets", "-o", "/org/freedesktop/secrets",
                                           "-m", "org.freedesktop.Secret.Service.CreateCollection",
                                           "{'org.freedesktop.Secret.Collection.Label': <'Other'>}", "''"])
        #expect(r.status != 0 && r.stderr.contains("org.freedesktop.DBus.Error.NotSupported") && r.stderr.contains("pinentry"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: rig.box.home + "/vaults/Other"))
    }

    /// A client that sends 100 calls while the service is held up (its agent stopped) has 32 of
    /// them taken and the other 68 answered `LimitsExceeded` at once; another client's call is
    /// taken and answered once the agent goes on.
    @Test func aFloodingClientIsCappedAndAnotherIsStillServed() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let status = json(rig.box.vault(["status", "--json"]).stdout)["session"] as? [String: Any]
        let agent = try #require((status?["agent_pid"] as? Int).map { pid_t($0) }, "no agent")
        #expect(kill(agent, SIGSTOP) == 0)
        var resumed = false
        defer { if !resumed { kill(agent, SIGCONT) } }
        let floodOutput = rig.box.home + "/flood"
        let flood = start("/usr/bin/python3", ["-c", """
            import jeepney
            from jeepney.io.blocking import open_dbus_connection
            conn = open_dbus_connection(bus="SESSION")
            addr = jeepney.DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Service")
            for _ in range(100):
                conn.send(jeepney.new_method_call(addr, "SearchItems", "a{ss}", ({"flood": "1"},)))
            limited = 0
            answered = 0
            while limited + answered < 100:
                reply = conn.receive(timeout=60)
                if reply.header.message_type == jeepney.MessageType.error:
                    if reply.header.fields.get(jeepney.HeaderFields.error_name) == "org.freedesktop.DBus.Error.LimitsExceeded":
                        limited += 1
                        if limited == 68:
                            print("capped", flush=True)
                    else:
                        answered += 1
                elif reply.header.message_type == jeepney.MessageType.method_return:
                    answered += 1
            print("limited", limited, "answered", answered, flush=True)
            """], env: rig.env, output: floodOutput)
        func floodSaid(_ text: String) -> Bool {
            let limit = Date(timeIntervalSinceNow: 30)
            while Date() < limit {
                if ((try? String(contentsOfFile: floodOutput + ".out", encoding: .utf8)) ?? "").contains(text) { return true }
                usleep(10_000)
            }
            return false
        }
        #expect(floodSaid("capped"), "the flood was not capped: \((try? String(contentsOfFile: floodOutput + ".err", encoding: .utf8)) ?? "")")
        let otherOutput = rig.box.home + "/other"
        let other = start("/usr/bin/gdbus", ["call", "--session", "-d", "org.freedesktop.secrets", "-o", "/org/freedesktop/secrets",
                                             "-m", "org.freedesktop.Secret.Service.ReadAlias", "default"], env: rig.env, output: otherOutput)
        // Not a condition of the result (the call is served whenever it arrives): a moment for it
        // to arrive while the flood holds its share.
        usleep(100_000)
        kill(agent, SIGCONT)
        resumed = true
        #expect(reap(other) == 0)
        #expect(((try? String(contentsOfFile: otherOutput + ".out", encoding: .utf8)) ?? "").contains("/org/freedesktop/secrets/collection/default"))
        #expect(reap(flood) == 0)
        #expect(floodSaid("limited 68 answered 32"), "\((try? String(contentsOfFile: floodOutput + ".out", encoding: .utf8)) ?? "")")
    }

    /// A secret stored and read back over a `plain` session leaves no copy in the service's
    /// memory: GLib's values are wiped or lent from guarded memory, its reader's buffer is
    /// overwritten, and what it and Swift free is wiped by the allocator.
    @Test(.enabled(if: getuid() == 0, "reading another process's memory (/proc/PID/mem) needs root"))
    func aPlainSecretLeavesNoCopyInTheServicesMemory() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let secret = "wipe-Secret-" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let kept = "kept-Secret-" + UUID().uuidString.replacingOccurrences(of: "-", with: "")
        let r = rig.python("""
            import sys
            import secretstorage
            from secretstorage.util import DBusAddressWrapper
            conn = secretstorage.dbus_init()
            svc = DBusAddressWrapper("/org/freedesktop/secrets", "org.freedesktop.Secret.Service", conn)
            _, session = svc.call("OpenSession", "sv", "plain", ("s", ""))
            col = DBusAddressWrapper("/org/freedesktop/secrets/aliases/default", "org.freedesktop.Secret.Collection", conn)
            props = {"org.freedesktop.Secret.Item.Label": ("s", "wiped"), "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"wipe": "1"})}
            item, _ = col.call("CreateItem", "a{sv}(oayays)b", props, (session, b"", sys.argv[1].encode(), "text/plain"), True)
            got = DBusAddressWrapper(item, "org.freedesktop.Secret.Item", conn).call("GetSecret", "o", session)[0]
            print(bytes(got[2]).decode())
            mem = DBusAddressWrapper("/org/freedesktop/secrets/aliases/session", "org.freedesktop.Secret.Collection", conn)
            mem.call("CreateItem", "a{sv}(oayays)b", props, (session, b"", sys.argv[2].encode(), "text/plain"), True)
            """, args: [secret, kept])
        #expect(r.status == 0 && r.stdout == secret + "\n", "\(r.stdout) \(r.stderr)")
        // The service sends itself the scrub before it answers CreateItem; its answer to a later
        // call means its reader has read everything the bus queued before, the scrub included.
        #expect(rig.run("/usr/bin/gdbus", ["call", "--session", "-d", "org.freedesktop.secrets", "-o", "/org/freedesktop/secrets",
                                           "-m", "org.freedesktop.DBus.Peer.Ping"]).status == 0)
        let found = occurrences(of: Array(secret.utf8), inProcess: rig.service!.pid)
        #expect(found == 0, "the secret is \(found) times in the service's memory")
        // The one the service keeps (the in-memory `session` collection, guarded memory) is
        // found: the search sees what the service holds.
        #expect(occurrences(of: Array(kept.utf8), inProcess: rig.service!.pid) == 1)
    }
}
