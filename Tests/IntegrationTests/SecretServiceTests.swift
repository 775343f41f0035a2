import Foundation
import Testing

// vault as the desktop's Secret Service provider, driven by the ecosystem's own clients
// (libsecret's secret-tool, Python's secretstorage and keyring, git-credential-libsecret) on a
// session bus of each test's own (`dbus-run-session`), so nothing touches a real desktop.

/// A session bus of its own: `dbus-run-session` around a shell that writes the bus address and
/// waits while its keep-alive file exists; `close` removes the file, and the bus goes with it.
/// Its configuration is the session bus's with no activation folder but `services` (when given):
/// a call to a name nobody owns never starts the machine's gnome-keyring in a test's place.
final class SessionBus {
    let address: String
    private let pid: pid_t
    private let keepAlive: String

    /// `services`: the one folder of activation files; `env`: the bus's environment, which the
    /// programs it activates inherit.
    init(in folder: String, services: String? = nil, env: [String: String]? = nil) throws {
        keepAlive = folder + "/bus.alive"
        let addressFile = folder + "/bus.address"
        _ = FileManager.default.createFile(atPath: keepAlive, contents: Data())
        let config = folder + "/session.conf"
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:tmpdir=\(folder)</listen>
              <auth>EXTERNAL</auth>
              \(services.map { "<servicedir>\($0)</servicedir>" } ?? "")
              <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
            </busconfig>
            """.write(toFile: config, atomically: true, encoding: .utf8)
        pid = start("/usr/bin/dbus-run-session",
                    ["--config-file=" + config, "--", "/bin/sh", "-c", "printf '%s\\n' \"$DBUS_SESSION_BUS_ADDRESS\" > \"$0.tmp\" && mv \"$0.tmp\" \"$0\"; while [ -e \"$1\" ]; do sleep 0.1; done",
                     addressFile, keepAlive],
                    env: env ?? ["PATH": "/usr/bin:/bin", "HOME": folder], output: folder + "/bus")
        let limit = Date(timeIntervalSinceNow: 10)
        var found = ""
        while Date() < limit {
            if let a = try? String(contentsOfFile: addressFile, encoding: .utf8), !a.isEmpty {
                found = a.trimmingCharacters(in: .whitespacesAndNewlines)
                break
            }
            usleep(10_000)
        }
        address = found
        try #require(!address.isEmpty, "dbus-run-session gave no address")
    }

    func close() {
        unlink(keepAlive)
        _ = reap(pid)
    }
}

/// `vault secret-service` running on a test's bus, its stderr in a file that a thread hands to
/// a `ReaderFeed` (the prompts' `vault unlock` writes its scan prompt there).
final class RunningService: @unchecked Sendable {
    let pid: pid_t
    let output: String
    var feed: ReaderFeed?
    private let lock = NSLock()
    private var stopped = false

    init(_ env: [String: String], args: [String] = [], output: String) throws {
        self.output = output
        pid = start(vaultBinary, ["secret-service"] + args, env: env, output: output)
        Thread.detachNewThread { [weak self] in
            while let self, !self.isStopped {
                if let feed = self.feed { feed.stderrChanged(self.stderr) }
                usleep(20_000)
            }
        }
        try #require(waitFor("vault-secret-service: serving"), "the service did not start: \(stderr)")
    }

    var isStopped: Bool { lock.withLock { stopped } }

    var stderr: String { (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "" }

    /// Waits (at most 30 s) until the service's stderr holds `text`.
    func waitFor(_ text: String) -> Bool {
        let limit = Date(timeIntervalSinceNow: 30)
        while Date() < limit {
            if stderr.contains(text) { return true }
            if kill(pid, 0) != 0 { return stderr.contains(text) }
            usleep(10_000)
        }
        return false
    }

    func stop() -> Int32 {
        lock.withLock { stopped = true }
        kill(pid, SIGTERM)
        return reap(pid)
    }
}

/// A sandbox, its bus, and the service on it: `env` is what clients get.
final class SecretServiceRig: @unchecked Sendable {
    let box: Sandbox
    let bus: SessionBus
    var service: RunningService?
    var env: [String: String]

    init(box: Sandbox = Sandbox(), unlock: Bool = true, serviceArgs: [String] = []) throws {
        self.box = box
        if !FileManager.default.fileExists(atPath: box.home + "/vaults/default/vault.db") { box.initVault() }
        bus = try SessionBus(in: box.home)
        env = box.env
        env["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        box.env["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        if unlock {
            let r = box.vault(["unlock", "--scope", "user", "--passcode", "--timeout", "600"], passcode: Sandbox.passcode)
            #expect(r.status == 0, "unlock: \(r.stderr)")
        }
        service = try RunningService(env, args: serviceArgs, output: box.home + "/service")
    }

    func close() {
        if let s = service { _ = s.stop() }
        box.vault(["lock", "--all"])
        bus.close()
    }

    func run(_ path: String, _ args: [String], stdin: String = "", timeLimit: Double = 60) -> RunResult {
        spawn(path, args, env: env, stdin: stdin, timeLimit: timeLimit)
    }

    func secretTool(_ args: [String], stdin: String = "") -> RunResult { run("/usr/bin/secret-tool", args, stdin: stdin) }

    func python(_ script: String, args: [String] = []) -> RunResult { run("/usr/bin/python3", ["-c", script] + args) }
}

/// Every byte of a vault's database and its WAL.
private func databaseBytes(_ box: Sandbox, vault: String = "default") -> Data {
    var all = Data()
    for suffix in ["", "-wal", "-shm"] {
        if let d = FileManager.default.contents(atPath: box.home + "/vaults/\(vault)/vault.db" + suffix) { all.append(d) }
    }
    return all
}

private let pythonSecretStorage = """
import sys, secretstorage
conn = secretstorage.dbus_init()
c = secretstorage.get_default_collection(conn)
print("locked", c.is_locked())
item = c.create_item("py item", {"app": "pytest", "n": "1"}, b"py-Secret-7781", replace=False)
found = list(c.search_items({"app": "pytest"}))
print("found", len(found), found[0].get_label(), sorted(found[0].get_attributes().items()))
print("secret", found[0].get_secret().decode())
item.set_secret(b"py-Secret-7782")
print("changed", list(c.search_items({"app": "pytest"}))[0].get_secret().decode())
item.delete()
print("after delete", len(list(c.search_items({"app": "pytest"}))))
"""

private let pythonKeyring = """
import keyring
from keyring.backends import SecretService
k = SecretService.Keyring()
k.set_password("pytest-service", "bob", "kr-Secret-1290")
print("get", k.get_password("pytest-service", "bob"))
k.set_password("pytest-service", "bob", "kr-Secret-1291")
print("replaced", k.get_password("pytest-service", "bob"))
k.delete_password("pytest-service", "bob")
print("deleted", k.get_password("pytest-service", "bob"))
"""

/// Unlock, then Dismiss on the prompt: prints the Completed signal's arguments.
private let pythonDismiss = """
import jeepney, secretstorage
from jeepney.bus_messages import MatchRule, message_bus
from secretstorage.util import DBusAddressWrapper
conn = secretstorage.dbus_init()
svc = DBusAddressWrapper("/org/freedesktop/secrets", "org.freedesktop.Secret.Service", conn)
unlocked, prompt = svc.call("Unlock", "ao", ["/org/freedesktop/secrets/aliases/default"])
print("unlocked", unlocked, "prompt", prompt != "/")
rule = MatchRule(type="signal", path=prompt, interface="org.freedesktop.Secret.Prompt", member="Completed")
with conn.filter(rule) as signals:
    conn.send_and_get_reply(message_bus.AddMatch(rule))
    DBusAddressWrapper(prompt, "org.freedesktop.Secret.Prompt", conn).call("Dismiss", "")
    msg = conn.recv_until_filtered(signals, timeout=10)
    print("completed", msg.body[0], msg.body[1][1])
    DBusAddressWrapper(prompt, "org.freedesktop.Secret.Prompt", conn).call("Dismiss", "")
"""

/// Opens a session, prints its path, then sleeps until it is killed.
private let pythonHoldSession = """
import sys, secretstorage
from secretstorage.util import DBusAddressWrapper
conn = secretstorage.dbus_init()
svc = DBusAddressWrapper("/org/freedesktop/secrets", "org.freedesktop.Secret.Service", conn)
out, path = svc.call("OpenSession", "sv", "plain", ("s", ""))
print(path, flush=True)
import time
time.sleep(3600)
"""

private let introspectSessions = """
import secretstorage
from secretstorage.util import DBusAddressWrapper
conn = secretstorage.dbus_init()
xml = DBusAddressWrapper("/org/freedesktop/secrets/session", "org.freedesktop.DBus.Introspectable", conn).call("Introspect", "")[0]
print(xml)
"""

@Suite struct SecretServiceTests {
    @Test func secretToolStoresLooksUpSearchesAndClearsWithTheValueSealed() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let value = "st-Value-\(UUID().uuidString.prefix(8))"
        var r = rig.secretTool(["store", "--label=Forge token", "service", "forge", "user", "alice"], stdin: value)
        #expect(r.status == 0, "store: \(r.stderr)")
        r = rig.secretTool(["lookup", "service", "forge", "user", "alice"])
        #expect(r.status == 0 && r.stdout == value, "lookup: \(r.stdout) \(r.stderr)")
        r = rig.secretTool(["search", "--all", "service", "forge"])
        #expect(r.status == 0, "search: \(r.stderr)")
        // secret-tool prints the attributes on stderr, the rest on stdout.
        let found = r.stdout + r.stderr
        #expect(found.contains("label = Forge token") && found.contains("attribute.user = alice")
                && found.contains("attribute.service = forge") && found.contains("secret = \(value)"), "search: \(found)")
        // A vault item of type secret-service: listed, printed by get, never in clear on disk.
        let ls = rig.box.vault(["ls", "--json"])
        let names = ((json(ls.stdout)["items"] as? [[String: Any]]) ?? []).compactMap { $0["name"] as? String }
        let name = try #require(names.first { $0.hasPrefix("Forge token #") }, "vault ls: \(ls.stdout)")
        let record = rig.box.vault(["get", name, "--json"])
        #expect(record.stdout.contains("\"secret-service.attribute.user\""), "\(record.stdout)")
        let get = rig.box.vault(["get", name, "--field", "password"])
        #expect(get.status == 0 && get.stdout.trimmingCharacters(in: .newlines) == value, "vault get: \(get.stderr)")
        #expect(rig.box.vault(["get", name, "--field", "type"]).stdout.contains("secret-service"))
        #expect(databaseBytes(rig.box).range(of: Data(value.utf8)) == nil, "the value is in clear in vault.db or its WAL")
        // The owner is vault, as doctor says.
        let owner = rig.box.vault(["secret-service", "--owner"])
        #expect(owner.status == 0 && owner.stdout.hasPrefix("vault (pid"), "owner: \(owner.stdout) \(owner.stderr)")
        #expect(rig.box.vault(["doctor"]).stdout.contains("secret service (org.freedesktop.secrets): vault (pid"))
        r = rig.secretTool(["clear", "service", "forge", "user", "alice"])
        #expect(r.status == 0, "clear: \(r.stderr)")
        r = rig.secretTool(["lookup", "service", "forge", "user", "alice"])
        #expect(r.status != 0 && r.stdout.isEmpty, "lookup after clear: \(r.stdout)")
        #expect(!rig.box.vault(["ls"]).stdout.contains("Forge token"))
    }

    @Test func pythonSecretStorageStoresReadsChangesAndDeletes() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let r = rig.python(pythonSecretStorage)
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
        #expect(r.stdout == """
            locked False
            found 1 py item [('app', 'pytest'), ('n', '1')]
            secret py-Secret-7781
            changed py-Secret-7782
            after delete 0

            """, "\(r.stdout)")
        #expect(databaseBytes(rig.box).range(of: Data("py-Secret-778".utf8)) == nil)
    }

    @Test func pythonKeyringStoresReplacesAndDeletes() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let r = rig.python(pythonKeyring)
        #expect(r.status == 0 && r.stdout == "get kr-Secret-1290\nreplaced kr-Secret-1291\ndeleted None\n", "\(r.stdout)\n\(r.stderr)")
        #expect(!rig.box.vault(["ls"]).stdout.contains("pytest-service"))
    }

    @Test func aLockedVaultIsSearchedAsLockedAndALookupWithoutAFingerEndsWithNoValue() throws {
        let box = Sandbox()
        box.initVault()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--scan-timeout", "2"])
        defer { rig.close() }
        var r = rig.secretTool(["store", "--label=Locked one", "service", "locked", "user", "carol"], stdin: "lk-Secret-5521")
        #expect(r.status == 0, "store: \(r.stderr)")
        #expect(rig.box.vault(["lock"]).status == 0)
        // The keyed index still finds the item, as locked.
        r = rig.python("""
            import secretstorage
            conn = secretstorage.dbus_init()
            c = secretstorage.get_default_collection(conn)
            items = list(c.search_items({"service": "locked"}))
            print(c.is_locked(), len(items), [i.is_locked() for i in items], len(list(c.search_items({"service": "other"}))))
            """)
        #expect(r.stdout == "True 1 [True] 0\n", "\(r.stdout) \(r.stderr)")
        // A passcode-only vault, no pinentry: the prompt's `vault unlock` cannot unlock, the prompt
        // is dismissed, and the lookup ends with no value.
        r = rig.secretTool(["lookup", "service", "locked", "user", "carol"])
        #expect(r.status != 0 && r.stdout.isEmpty, "lookup: \(r.stdout) \(r.stderr)")
        #expect(rig.service!.stderr.contains("vault: error:"), "\(rig.service!.stderr)")
    }

    @Test func promptDismissCompletesWithDismissedTrueExactlyOnce() throws {
        let rig = try SecretServiceRig(unlock: false)
        defer { rig.close() }
        let r = rig.python(pythonDismiss)
        #expect(r.status != 0 || r.stdout.contains("completed"), "\(r.stdout)\n\(r.stderr)")
        #expect(r.stdout.hasPrefix("unlocked [] prompt True\ncompleted True []\n"), "\(r.stdout)\n\(r.stderr)")
        // The second Dismiss finds no prompt: it completed once and is gone.
        #expect(r.stderr.contains("org.freedesktop.Secret.Error.NoSuchObject"), "\(r.stderr)")
    }

    @Test func twentyClientsAtOnceAreServed() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let results = ConcurrentResults(count: 20)
        DispatchQueue.concurrentPerform(iterations: 20) { i in
            let store = rig.secretTool(["store", "--label=client \(i)", "service", "many", "n", "\(i)"], stdin: "many-\(i)")
            let lookup = rig.secretTool(["lookup", "service", "many", "n", "\(i)"])
            results.set(i, store.status == 0 && lookup.status == 0 && lookup.stdout == "many-\(i)" ? nil : "\(i): \(store.stderr) \(lookup.stdout) \(lookup.stderr)")
        }
        #expect(results.failures.isEmpty, "\(results.failures)")
        let r = rig.secretTool(["search", "--all", "service", "many"])
        #expect(r.stdout.components(separatedBy: "label = client ").count - 1 == 20, "\(r.stdout)")
    }

    @Test func aClientThatLeavesTheBusLosesItsSessions() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let folder = rig.box.home
        let pid = start("/usr/bin/python3", ["-c", pythonHoldSession], env: rig.env, fds: [:], output: folder + "/holder")
        var path = ""
        for _ in 0..<1000 {
            path = ((try? String(contentsOfFile: folder + "/holder.out", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
            if !path.isEmpty { break }
            usleep(10_000)
        }
        #expect(path.hasPrefix("/org/freedesktop/secrets/session/"), "holder: \(path)")
        let node = String(path.split(separator: "/").last ?? "")
        #expect(rig.python(introspectSessions).stdout.contains("<node name=\"\(node)\"/>"))
        kill(pid, SIGKILL)
        _ = reap(pid)
        var gone = false
        for _ in 0..<500 where !gone {
            gone = !rig.python(introspectSessions).stdout.contains("<node name=\"\(node)\"/>")
            if !gone { usleep(20_000) }
        }
        #expect(gone, "the vanished client's session is still open")
    }
}

/// The same client script against vault and against gnome-keyring gives the same output.
/// (vault also keeps each secret's content type, which gnome-keyring drops.)
private let pythonCompare = """
import secretstorage
conn = secretstorage.dbus_init()
c = secretstorage.get_default_collection(conn)
if c.is_locked():
    c.unlock()
def show(tag):
    items = sorted(c.search_items({"suite": "compare"}), key=lambda i: (i.get_label(), i.get_secret()))
    # gnome-keyring adds xdg:schema to some items and keeps no content type (text/plain for all):
    # the comparison is of what the API promises, labels, the attributes set, secrets.
    print(tag, len(items), [(i.get_label(), sorted((k, v) for k, v in i.get_attributes().items() if k != "xdg:schema"), i.get_secret().decode()) for i in items])
c.create_item("one", {"suite": "compare", "k": "1"}, b"first-1", content_type="text/plain")
c.create_item("two", {"suite": "compare", "k": "2"}, b"second-2", content_type="application/octet-stream")
show("stored")
c.create_item("one again", {"suite": "compare", "k": "1"}, b"first-1b", replace=True)
show("replaced")
c.create_item("one more", {"suite": "compare", "k": "1"}, b"first-1c", replace=False)
show("kept both")
print("by k", sorted(i.get_secret().decode() for i in c.search_items({"suite": "compare", "k": "1"})))
print("none", len(list(c.search_items({"suite": "compare", "k": "3"}))))
for i in list(c.search_items({"suite": "compare"})):
    i.delete()
show("deleted")
"""

extension SecretServiceTests {
    @Test func afterVaultLockALookupGetsTheValueWhenTheEnrolledFingerTouchesAndEndsWithoutOne() throws {
        let box = Sandbox.withEnrolledFinger()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--scan-timeout", "3"])
        defer { rig.close() }
        var r = rig.secretTool(["store", "--label=Finger gated", "service", "finger", "user", "dave"], stdin: "fp-Secret-3390")
        #expect(r.status == 0, "store: \(r.stderr)")
        #expect(box.vault(["lock"]).status == 0)
        // The prompt's `vault unlock` asks for a touch on the service's stderr; the finger comes.
        // A notification server on the bus (python-dbusmock's, which logs each call): the prompt
        // says a touch is awaited.
        let notifications = start("/usr/bin/python3", ["-m", "dbusmock", "--session", "--template", "notification_daemon"],
                                  env: rig.env, output: box.home + "/notifications")
        defer {
            kill(notifications, SIGTERM)
            _ = reap(notifications)
        }
        var listening = false
        for _ in 0..<500 where !listening {
            listening = spawn("/usr/bin/gdbus", ["call", "--session", "-d", "org.freedesktop.DBus", "-o", "/org/freedesktop/DBus", "-m",
                                                 "org.freedesktop.DBus.NameHasOwner", "org.freedesktop.Notifications"],
                              env: rig.env).stdout.contains("true")
            if !listening { usleep(20_000) }
        }
        #expect(listening, "the notification server did not start")
        let feed = ReaderFeed(socket: box.readerSocket, env: box.env,
                              steps: [.awaitStderr("touch the fingerprint reader"), .device("SCAN alice")], log: box.home + "/reader.log")
        rig.service!.feed = feed
        r = rig.secretTool(["lookup", "service", "finger", "user", "dave"])
        let took = feed.finish(grace: 10)
        rig.service!.feed = nil
        #expect(r.status == 0 && r.stdout == "fp-Secret-3390", "lookup: \(r.stdout) \(r.stderr)\n\(rig.service!.stderr)")
        #expect(took == [0], "the reader took the touch: \(took)")
        let notified = (try? String(contentsOfFile: box.home + "/notifications.out", encoding: .utf8)) ?? ""
        #expect(notified.contains("Notify \"vault\"") && notified.contains("secret-tool asks to unlock the vault default: touch the fingerprint reader"),
                "no notification: \(notified)")
        #expect(box.vault(["status", "--json"]).stdout.contains("\"open\":true"), "one touch opened the vault's unlock session")
        // Locked again, and no finger: the scan times out, the prompt completes dismissed, the
        // lookup ends with no value.
        #expect(box.vault(["lock"]).status == 0)
        r = rig.secretTool(["lookup", "service", "finger", "user", "dave"])
        #expect(r.status != 0 && r.stdout.isEmpty, "lookup without a finger: \(r.stdout) \(r.stderr)")
    }

    @Test func fiveLockedLookupsAtOnceTakeOneTouch() throws {
        let box = Sandbox.withEnrolledFinger()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--scan-timeout", "20"])
        defer { rig.close() }
        #expect(rig.secretTool(["store", "--label=Shared", "service", "shared"], stdin: "sh-Secret-77").status == 0)
        #expect(box.vault(["lock"]).status == 0)
        let feed = ReaderFeed(socket: box.readerSocket, env: box.env,
                              steps: [.awaitStderr("touch the fingerprint reader"), .device("SCAN alice")], log: box.home + "/reader.log")
        rig.service!.feed = feed
        let results = ConcurrentResults(count: 5)
        DispatchQueue.concurrentPerform(iterations: 5) { i in
            let r = rig.secretTool(["lookup", "service", "shared"])
            results.set(i, r.status == 0 && r.stdout == "sh-Secret-77" ? nil : "\(i): \(r.stdout) \(r.stderr)")
        }
        #expect(feed.finish(grace: 10) == [0])
        rig.service!.feed = nil
        #expect(results.failures.isEmpty, "\(results.failures)\n\(rig.service!.stderr)")
        #expect(rig.service!.stderr.components(separatedBy: "touch the fingerprint reader").count - 1 == 1,
                "one scan for five prompts: \(rig.service!.stderr)")
    }

    /// An item with fingerprint login on: each requesting program needs a touch of its own, once
    /// (its later reads are served until lock); another program touches again; no touch, no secret.
    @Test func aFingerprintLoginItemNeedsAFreshMatchPerProgram() throws {
        let box = Sandbox.withEnrolledFinger()
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--scan-timeout", "3"])
        defer { rig.close() }
        #expect(rig.secretTool(["store", "--label=Flagged", "service", "flagged"], stdin: "fl-Secret-5150").status == 0)
        let name = try #require(box.vault(["ls"]).stdout.split(separator: "\n").first { $0.hasPrefix("Flagged #") }.map(String.init))
        let edit = box.vault(["edit", name, "--fingerprint-login", "on"], reader: [.awaitStderr("touch"), .device("SCAN alice")])
        #expect(edit.status == 0, "edit: \(edit.stderr)")
        let twice = """
            import secretstorage
            conn = secretstorage.dbus_init()
            item = next(secretstorage.get_default_collection(conn).search_items({"service": "flagged"}))
            print(item.get_secret().decode(), item.get_secret().decode())
            """
        let prompt = "touch the fingerprint reader"
        let feed = ReaderFeed(socket: box.readerSocket, env: box.env,
                              steps: [.awaitStderrCount(prompt, 1), .device("SCAN alice"), .awaitStderrCount(prompt, 2), .device("SCAN alice")],
                              log: box.home + "/reader.log")
        rig.service!.feed = feed
        let first = rig.python(twice)
        #expect(first.status == 0 && first.stdout == "fl-Secret-5150 fl-Secret-5150\n", "first program: \(first.stdout) \(first.stderr)")
        let second = rig.python(twice)
        #expect(second.status == 0 && second.stdout == "fl-Secret-5150 fl-Secret-5150\n", "second program: \(second.stdout) \(second.stderr)")
        #expect(feed.finish(grace: 10) == [0, 0])
        rig.service!.feed = nil
        #expect(rig.service!.stderr.components(separatedBy: prompt).count - 1 == 2, "one touch per program: \(rig.service!.stderr)")
        // No finger: the scan times out and the program gets no secret.
        let third = rig.python(twice)
        #expect(third.status != 0 && third.stderr.contains("org.freedesktop.DBus.Error.AccessDenied") && !third.stdout.contains("fl-Secret"),
                "\(third.stdout) \(third.stderr)")
        // A program that asks ten times at once waits for at most four touches; the rest are
        // refused at once, not queued at the reader.
        let flood = rig.python("""
            import secretstorage, jeepney
            from secretstorage.util import DBusAddressWrapper
            conn = secretstorage.dbus_init()
            item = next(secretstorage.get_default_collection(conn).search_items({"service": "flagged"}))
            svc = DBusAddressWrapper("/org/freedesktop/secrets", "org.freedesktop.Secret.Service", conn)
            _, session = svc.call("OpenSession", "sv", "plain", ("s", ""))
            addr = jeepney.DBusAddress(item.item_path, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
            for _ in range(10):
                conn.send(jeepney.new_method_call(addr, "GetSecret", "o", (session,)))
            refused = 0
            for _ in range(10):
                reply = conn.receive(timeout=60)
                while reply.header.message_type not in (jeepney.MessageType.method_return, jeepney.MessageType.error):
                    reply = conn.receive(timeout=60)
                if reply.header.message_type == jeepney.MessageType.error and "wait for a touch" in str(reply.body):
                    refused += 1
            print("refused", refused)
            """)
        #expect(flood.stdout == "refused 6\n", "\(flood.stdout) \(flood.stderr)")
    }

    @Test func theSameClientScriptGivesTheSameResultsAgainstGnomeKeyring() throws {
        let rig = try SecretServiceRig()
        let ours = rig.python(pythonCompare)
        rig.close()
        #expect(ours.status == 0, "vault: \(ours.stdout) \(ours.stderr)")

        let home = NSTemporaryDirectory() + "vault-gk-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: home + "/run", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: home) }
        let bus = try SessionBus(in: home)
        defer { bus.close() }
        let env = ["HOME": home, "XDG_RUNTIME_DIR": home + "/run", "XDG_DATA_HOME": home + "/data", "PATH": "/usr/bin:/bin",
                   "LANG": "C.UTF-8", "DBUS_SESSION_BUS_ADDRESS": bus.address]
        let daemon = start("/usr/bin/gnome-keyring-daemon", ["--foreground", "--unlock", "--components=secrets"], env: env,
                           fds: [0: "keyring-password"], output: home + "/gk")
        defer {
            kill(daemon, SIGTERM)
            _ = reap(daemon)
        }
        var owned = false
        for _ in 0..<500 where !owned {
            owned = spawn("/usr/bin/python3", ["-c", """
                import secretstorage
                secretstorage.get_default_collection(secretstorage.dbus_init())
                """], env: env).status == 0
            if !owned { usleep(20_000) }
        }
        #expect(owned, "gnome-keyring-daemon did not serve")
        let theirs = spawn("/usr/bin/python3", ["-c", pythonCompare], env: env, timeLimit: 60)
        #expect(theirs.status == 0, "gnome-keyring: \(theirs.stdout) \(theirs.stderr)")
        #expect(ours.stdout == theirs.stdout, "vault:\n\(ours.stdout)\ngnome-keyring:\n\(theirs.stdout)")
    }

    @Test func aSecondServiceNamesTheOwnerAndReplaceTakesTheNameOver() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let second = spawn(vaultBinary, ["secret-service"], env: rig.env, timeLimit: 30)
        #expect(second.status == 1 && second.stderr.contains("org.freedesktop.secrets is already owned by vault (pid \(rig.service!.pid))")
                && second.stderr.contains("--replace"), "\(second.stderr)")
        let first = rig.service!
        let taker = try RunningService(rig.env, args: ["--replace"], output: rig.box.home + "/taker")
        rig.service = taker
        #expect(reap(first.pid) == 0, "the first service ends when its name is taken")
        let r = rig.secretTool(["store", "--label=after takeover", "service", "takeover"], stdin: "to-1")
        #expect(r.status == 0 && rig.secretTool(["lookup", "service", "takeover"]).stdout == "to-1")
        #expect(rig.box.vault(["secret-service", "--owner"]).stdout.hasPrefix("vault (pid \(taker.pid))"))
    }

    @Test func vaultLinksNeitherGLibNorGcryptAndTheServiceLinksBoth() {
        let env = ["PATH": "/usr/bin:/bin"]
        let vault = spawn("/usr/bin/ldd", [vaultBinary], env: env).stdout
        #expect(!vault.contains("libgio") && !vault.contains("libglib") && !vault.contains("libgcrypt"), "\(vault)")
        let service = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().appendingPathComponent("vault-secret-service").path
        let linked = spawn("/usr/bin/ldd", [service], env: env).stdout
        #expect(linked.contains("libgio-2.0") && linked.contains("libgcrypt") && !linked.contains("libfprint"), "\(linked)")
    }
}

/// git-credential-libsecret built from `source` (by default the one Debian's git ships), into `folder`.
func buildGitCredentialLibsecret(in folder: String,
                                 source: String = "/usr/share/doc/git/contrib/credential/libsecret/git-credential-libsecret.c") throws -> String {
    let out = folder + "/git-credential-libsecret"
    let r = spawn("/bin/sh", ["-c", "exec cc -O1 -o \"$0\" \"$1\" $(pkg-config --cflags --libs glib-2.0 libsecret-1)", out, source],
                  env: ["PATH": "/usr/bin:/bin"], timeLimit: 120)
    try #require(r.status == 0, "building git-credential-libsecret (libsecret-1-dev): \(r.stderr)")
    return out
}

extension SecretServiceTests {
    @Test func gitStoresFillsAndErasesThroughGitCredentialLibsecret() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let bin = rig.box.home + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        _ = try buildGitCredentialLibsecret(in: bin)
        rig.env["PATH"] = bin + ":/usr/bin:/bin"
        let git = ["-c", "credential.helper=libsecret", "credential"]
        var r = rig.run("/usr/bin/git", git + ["approve"], stdin: "protocol=https\nhost=forge.example\nusername=erin\npassword=git-Secret-4417\n\n")
        #expect(r.status == 0, "approve: \(r.stderr)")
        r = rig.run("/usr/bin/git", git + ["fill"], stdin: "protocol=https\nhost=forge.example\n\n")
        #expect(r.status == 0 && r.stdout.contains("username=erin\n") && r.stdout.contains("password=git-Secret-4417\n"), "fill: \(r.stdout) \(r.stderr)")
        #expect(rig.box.vault(["ls"]).stdout.contains("Git: https://forge.example/ #"), "\(rig.box.vault(["ls"]).stdout)")
        r = rig.run("/usr/bin/git", git + ["reject"], stdin: "protocol=https\nhost=forge.example\nusername=erin\n\n")
        #expect(r.status == 0, "reject: \(r.stderr)")
        #expect(!rig.box.vault(["ls"]).stdout.contains("forge.example"))
    }

    /// git's own helper suite, t0303, through git-credential-libsecret against vault's service,
    /// when a tree of the installed git's release is there (docs/cli.md, "git's own helper suite").
    @Test(.enabled(if: GitTree.installed != nil, "\(GitTree.absent): no tree of the installed git's release"))
    func t0303ThroughGitCredentialLibsecret() throws {
        let tree = try #require(GitTree.installed)
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let bin = rig.box.home + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        _ = try buildGitCredentialLibsecret(in: bin)
        var env = rig.env
        env["PATH"] = bin + ":/usr/bin:/bin"
        env["GIT_TEST_CREDENTIAL_HELPER"] = "libsecret"
        env["GIT_TEST_CREDENTIAL_HELPER_SETUP"] = "export DBUS_SESSION_BUS_ADDRESS='\(rig.bus.address)'"
        env["GIT_TEST_INSTALLED"] = "/usr/bin"
        let r = spawn("/bin/sh", ["-c", "cd \"$0\"/t && exec ./t0303-credential-external.sh --root=\"$1\"", tree.path, rig.box.home + "/trash"],
                      env: env, timeLimit: 300)
        #expect(r.status == 0 && r.stdout.contains("# passed all"), "t0303 of \(tree.name):\n\(r.stdout)\n\(r.stderr)")
        print("SecretServiceTests: t0303 of \(tree.name) through git-credential-libsecret: \(r.stdout.split(separator: "\n").last { $0.hasPrefix("# passed") } ?? "")")
    }

    /// The newer suite (password_expiry_utc, oauth_refresh_token, erase rules) through that
    /// tree's own git-credential-libsecret and git.
    @Test(.enabled(if: GitTree.newer != nil, "\(GitTree.absent): no built tree of git 2.41 or later"))
    func t0303OfANewerGitThroughItsGitCredentialLibsecret() throws {
        let tree = try #require(GitTree.newer)
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let bin = rig.box.home + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        _ = try buildGitCredentialLibsecret(in: bin, source: tree.path + "/contrib/credential/libsecret/git-credential-libsecret.c")
        var env = rig.env
        env["PATH"] = bin + ":/usr/bin:/bin"
        env["GIT_TEST_CREDENTIAL_HELPER"] = "libsecret"
        env["GIT_TEST_CREDENTIAL_HELPER_SETUP"] = "export DBUS_SESSION_BUS_ADDRESS='\(rig.bus.address)'"
        let r = spawn("/bin/sh", ["-c", "cd \"$0\"/t && exec ./t0303-credential-external.sh --root=\"$1\"", tree.path, rig.box.home + "/trash"],
                      env: env, timeLimit: 300)
        #expect(r.status == 0 && r.stdout.contains("# passed all"), "t0303 of \(tree.name):\n\(r.stdout)\n\(r.stderr)")
        print("SecretServiceTests: t0303 of \(tree.name) through its git-credential-libsecret: \(r.stdout.split(separator: "\n").last { $0.hasPrefix("# passed") } ?? "")")
    }

    @Test func exportAndImportCarryTheItemsToAnotherVaultsCollection() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        #expect(rig.secretTool(["store", "--label=Carried", "service", "carry", "user", "fay"], stdin: "carry-Secret-8").status == 0)
        let exported = rig.box.vault(["export"], passcode: Sandbox.passcode)
        #expect(exported.status == 0 && exported.stdout.contains("\"type\":\"secret-service\""), "\(exported.stdout) \(exported.stderr)")
        rig.box.initVault("other")
        let file = rig.box.home + "/export.json"
        _ = FileManager.default.createFile(atPath: file, contents: Data(exported.stdout.utf8))
        let imported = rig.box.vault(["import", "--vault", "other", file], passcode: Sandbox.passcode)
        #expect(imported.status == 0, "\(imported.stderr)")
        let r = rig.box.vault(["unlock", "--scope", "user", "--passcode", "--vault", "other"], passcode: Sandbox.passcode)
        #expect(r.status == 0)
        let second = try RunningService(rig.env, args: ["--replace", "--vault", "other"], output: rig.box.home + "/other")
        _ = reap(rig.service!.pid)
        rig.service = second
        let found = rig.secretTool(["lookup", "service", "carry", "user", "fay"])
        #expect(found.status == 0 && found.stdout == "carry-Secret-8", "\(found.stdout) \(found.stderr)")
    }
}

extension SecretServiceTests {
    /// The shipped activation file (Exec at the built binary) on a bus whose only service folder
    /// holds it: the first client's call starts the service, which serves the bus's environment's vault.
    @Test func dBusActivationStartsTheServiceOnTheFirstCall() throws {
        let box = Sandbox()
        box.initVault()
        #expect(box.vault(["unlock", "--scope", "user", "--passcode", "--timeout", "600"], passcode: Sandbox.passcode).status == 0)
        defer { box.vault(["lock", "--all"]) }
        let services = box.home + "/services"
        try FileManager.default.createDirectory(atPath: services, withIntermediateDirectories: true)
        let built = URL(fileURLWithPath: vaultBinary).deletingLastPathComponent().path
        let shipped = try String(contentsOfFile: packageRoot + "/Vault/org.freedesktop.secrets.service", encoding: .utf8)
        try shipped.replacingOccurrences(of: "/usr/local/bin/", with: built + "/")
            .write(toFile: services + "/org.freedesktop.secrets.service", atomically: true, encoding: .utf8)
        let bus = try SessionBus(in: box.home, services: services, env: box.env)
        var env = box.env
        env["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        defer {
            // The activated service ends with the bus; make sure it is not left behind.
            let owner = spawn(vaultBinary, ["secret-service", "--owner"], env: env).stdout
            if let pid = owner.split(separator: " ").dropFirst(2).first.flatMap({ Int32($0.trimmingCharacters(in: CharacterSet(charactersIn: "()\n"))) }) {
                kill(pid, SIGTERM)
            }
            bus.close()
        }
        #expect(spawn(vaultBinary, ["secret-service", "--owner"], env: env).stdout == "nobody\n")
        var r = spawn("/usr/bin/secret-tool", ["store", "--label=Activated", "service", "activation"], env: env, stdin: "act-1", timeLimit: 60)
        #expect(r.status == 0, "store: \(r.stderr)")
        r = spawn("/usr/bin/secret-tool", ["lookup", "service", "activation"], env: env, timeLimit: 60)
        #expect(r.stdout == "act-1")
        #expect(spawn(vaultBinary, ["secret-service", "--owner"], env: env).stdout.hasPrefix("vault (pid "))
    }
}

/// A pseudo-terminal the test reads like a screen and types into (a terminal pinentry's).
final class TestTerminal: @unchecked Sendable {
    let master: Int32
    let slavePath: String
    private let slave: Int32
    private let lock = NSLock()
    private var shown: [UInt8] = []

    init() {
        var m: Int32 = -1, s: Int32 = -1
        precondition(openpty(&m, &s, nil, nil, nil) == 0, "openpty failed")
        _ = fcntl(m, F_SETFD, FD_CLOEXEC)
        _ = fcntl(s, F_SETFD, FD_CLOEXEC)
        var name = [CChar](repeating: 0, count: 256)
        precondition(ttyname_r(s, &name, name.count) == 0)
        slavePath = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        master = m
        slave = s
        let fd = m
        Thread.detachNewThread { [self] in
            var buf = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(fd, &buf, buf.count)
                if n <= 0 { break }
                lock.withLock { shown += buf[0..<n] }
            }
        }
    }

    var screen: String { lock.withLock { String(decoding: shown, as: UTF8.self) } }

    func waitFor(_ text: String, timeout: Double = 30) -> Bool {
        let limit = Date(timeIntervalSinceNow: timeout)
        while Date() < limit {
            if screen.contains(text) { return true }
            usleep(10_000)
        }
        return false
    }

    func type(_ text: String) { _ = text.withCString { write(master, $0, strlen($0)) } }

    func close() {
        Glibc.close(slave)
        Glibc.close(master)
    }
}

extension SecretServiceTests {
    /// A passcode-only vault, locked: the prompt's `vault unlock` cannot scan, so the passcode is
    /// asked through Debian's pinentry-tty (Assuan) on the terminal GPG_TTY names, typed there.
    @Test func withoutAFingerThePasscodeComesThroughPinentry() throws {
        let box = Sandbox()
        box.initVault()
        let terminal = TestTerminal()
        defer { terminal.close() }
        box.env["GPG_TTY"] = terminal.slavePath
        box.env["TERM"] = "dumb"
        let rig = try SecretServiceRig(box: box, serviceArgs: ["--pinentry", "/usr/bin/pinentry-tty"])
        defer { rig.close() }
        var r = rig.secretTool(["store", "--label=Pinentry", "service", "pinentry"], stdin: "pe-Secret-6620")
        #expect(r.status == 0, "store: \(r.stderr)")
        #expect(box.vault(["lock"]).status == 0)
        let typist = Thread { 
            if terminal.waitFor("Passcode:") { terminal.type(Sandbox.passcode + "\n") }
        }
        typist.start()
        r = rig.secretTool(["lookup", "service", "pinentry"])
        #expect(terminal.screen.contains("Passcode:"), "pinentry-tty asked nothing: \(terminal.screen)")
        #expect(!terminal.screen.contains(Sandbox.passcode), "the passcode was echoed")
        #expect(r.status == 0 && r.stdout == "pe-Secret-6620", "lookup: \(r.stdout) \(r.stderr)\n\(rig.service!.stderr)")
    }
}

extension SecretServiceTests {
    @Test func malformedCallsAreDBusErrorsAndTheServiceGoesOn() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        func gdbus(_ path: String, _ method: String, _ args: [String]) -> RunResult {
            rig.run("/usr/bin/gdbus", ["call", "--session", "-d", "org.freedesktop.secrets", "-o", path, "-m", method] + args)
        }
        var r = gdbus("/org/freedesktop/secrets", "org.freedesktop.Secret.Service.OpenSession", ["plain"])
        #expect(r.status != 0 && r.stderr.contains("org.freedesktop.DBus.Error.InvalidArgs"), "\(r.stderr)")
        r = gdbus("/org/freedesktop/secrets", "org.freedesktop.Secret.Service.OpenSession", ["rot13", "<''>"])
        #expect(r.stderr.contains("org.freedesktop.DBus.Error.NotSupported"), "\(r.stderr)")
        r = gdbus("/org/freedesktop/secrets", "org.freedesktop.Secret.Service.OpenSession", ["dh-ietf1024-sha256-aes128-cbc-pkcs7", "<@ay [0x01]>"])
        #expect(r.stderr.contains("org.freedesktop.DBus.Error.InvalidArgs"), "a public key of 1: \(r.stderr)")
        r = gdbus("/org/freedesktop/secrets/nowhere", "org.freedesktop.Secret.Item.Delete", [])
        #expect(r.stderr.contains("org.freedesktop.DBus.Error.UnknownObject"), "\(r.stderr)")
        r = gdbus("/org/freedesktop/secrets/collection/default/0000000000000000", "org.freedesktop.Secret.Item.GetSecret",
                  ["/org/freedesktop/secrets/session/s999"])
        #expect(r.stderr.contains("org.freedesktop.Secret.Error.NoSession"), "\(r.stderr)")
        r = gdbus("/org/freedesktop/secrets", "org.freedesktop.Secret.Service.Frob", [])
        #expect(r.stderr.contains("org.freedesktop.DBus.Error.UnknownMethod"), "\(r.stderr)")
        r = gdbus("/org/freedesktop/secrets", "org.freedesktop.DBus.Properties.Get", ["org.freedesktop.Secret.Service", "Collections"])
        #expect(r.status == 0 && r.stdout.contains("'/org/freedesktop/secrets/collection/default', '/org/freedesktop/secrets/collection/session'"), "\(r.stdout) \(r.stderr)")
        r = gdbus("/org/freedesktop/secrets", "org.freedesktop.Secret.Service.ReadAlias", ["default"])
        #expect(r.stdout.contains("objectpath '/org/freedesktop/secrets/collection/default'"), "\(r.stdout)")
        // A client's own "NameLost" signal (the bus daemon's words, from someone else) is no loss.
        let spoof = rig.python("""
            import secretstorage
            from jeepney import new_signal, DBusAddress
            from jeepney.low_level import HeaderFields
            conn = secretstorage.dbus_init()
            owner = conn.send_and_get_reply(__import__("jeepney").bus_messages.message_bus.GetNameOwner("org.freedesktop.secrets")).body[0]
            msg = new_signal(DBusAddress("/org/freedesktop/DBus", interface="org.freedesktop.DBus"), "NameLost", "s", ("org.freedesktop.secrets",))
            msg.header.fields[HeaderFields.destination] = owner
            conn.send(msg)
            print(len(list(secretstorage.get_default_collection(conn).get_all_items())) >= 0)
            """)
        #expect(spoof.status == 0, "\(spoof.stderr)")
        usleep(200_000)
        #expect(kill(rig.service!.pid, 0) == 0, "the service still runs")
        #expect(rig.box.vault(["secret-service", "--owner"]).stdout.hasPrefix("vault (pid \(rig.service!.pid))"))
    }

    @Test func theSessionCollectionKeepsItemsInMemoryOnly() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        let r = rig.python("""
            import secretstorage
            conn = secretstorage.dbus_init()
            c = secretstorage.Collection(conn, "/org/freedesktop/secrets/aliases/session")
            c.create_item("ephemeral", {"mem": "1"}, b"mem-Secret-2204")
            print([i.get_secret().decode() for i in c.search_items({"mem": "1"})], c.get_label(), c.is_locked())
            """)
        #expect(r.status == 0 && r.stdout == "['mem-Secret-2204'] session False\n", "\(r.stdout) \(r.stderr)")
        #expect(!rig.box.vault(["ls"]).stdout.contains("ephemeral"))
        #expect(databaseBytes(rig.box).range(of: Data("mem-Secret-2204".utf8)) == nil)
    }

    @Test func rotationCarriesTheItems() throws {
        let rig = try SecretServiceRig()
        defer { rig.close() }
        #expect(rig.secretTool(["store", "--label=Rotated", "service", "rotate"], stdin: "rot-Secret-31").status == 0)
        let rotated = rig.box.vault(["rotate"], passcode: Sandbox.passcode)
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(rig.box.vault(["unlock", "--scope", "user", "--passcode"], passcode: Sandbox.passcode).status == 0)
        let r = rig.secretTool(["lookup", "service", "rotate"])
        #expect(r.status == 0 && r.stdout == "rot-Secret-31", "\(r.stdout) \(r.stderr)")
    }
}

/// Results written by concurrent workers.
final class ConcurrentResults: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [String?]
    init(count: Int) { values = Array(repeating: nil, count: count) }
    func set(_ i: Int, _ v: String?) { lock.withLock { values[i] = v } }
    var failures: [String] { lock.withLock { values.compactMap { $0 } } }
}
