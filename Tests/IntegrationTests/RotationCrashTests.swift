import Foundation
import Testing
@testable import VaultKit

@Suite struct RotationCrashTests {
    let box = Sandbox()
    let pc = Sandbox.passcode
    static let itemCount = 3000

    func expected(_ i: Int) -> Item {
        Item(name: "login-\(i)", username: "user\(i)", password: "secret-\(i)-" + String(repeating: "x", count: i % 40),
             urls: ["https://host\(i).example"], notes: "note \(i)", now: 1_700_000_000)
    }

    /// Reopens the vault and checks: it opens with the passcode, every item is there with its
    /// content, and every row and slot belongs to the one current key generation.
    func checkIntact() throws -> Int64 {
        let loc = try VaultLocation(name: "default", environment: box.env)
        let store = try VaultStore.open(loc)
        let vault = try store.unlock(passcode: try SecretBytes(copying: Array(pc.utf8)))
        let generation = try store.keyGeneration()
        let rowGenerations = try store.db.query("SELECT DISTINCT generation FROM items").map { $0[0].int! }
        let slotGenerations = try store.db.query("SELECT DISTINCT generation FROM slots").map { $0[0].int! }
        #expect(rowGenerations == [generation])
        #expect(slotGenerations == [generation])
        #expect(Set(try store.slots().map(\.kind)) == [.passcode, .recovery])
        let items = try vault.allItemsWithSecrets()
        #expect(items.count == Self.itemCount)
        var byName: [String: Item] = [:]
        for e in items {
            guard case .item(let it) = e else { Issue.record("a damaged row after a crash"); continue }
            byName[it.name] = it
        }
        for i in stride(from: 0, to: Self.itemCount, by: 97) {
            let want = expected(i)
            let got = byName[want.name]
            #expect(got?.password == want.password && got?.username == want.username && got?.notes == want.notes)
        }
        #expect(byName.count == Self.itemCount)
        return generation
    }

    @Test func sigkillAtRandomMomentsLeavesOneWholeGeneration() throws {
        box.initVault()
        let loc = try VaultLocation(name: "default", environment: box.env)
        let vault = try VaultStore.open(loc).unlock(passcode: try SecretBytes(copying: Array(pc.utf8)))
        for i in 0..<Self.itemCount { try vault.add(expected(i)) }

        // One uninterrupted rotation gives the time scale for the kills.
        let t0 = Date()
        let full = reap(start(vaultBinary, ["rotate", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"]))
        #expect(full == 0)
        let duration = Date().timeIntervalSince(t0)
        var generation = try checkIntact()
        #expect(generation == 2)

        // Kill moments are drawn over the length of a rotation; when one lands too late (the run
        // completed), the window shrinks, so most runs die mid-way whatever the machine's load.
        var window = duration
        var killed = 0, completed = 0
        for run in 0..<24 {
            let pid = start(vaultBinary, ["rotate", "--passcode-fd", "3"], env: box.env, fds: [3: pc + "\n"])
            usleep(useconds_t(Double.random(in: 0...window) * 1_000_000))
            kill(pid, SIGKILL)
            let status = reap(pid)
            if status == 128 + SIGKILL {
                killed += 1
            } else {
                #expect(status == 0, "run \(run) ended with \(status)")
                completed += 1
                window *= 0.7
            }
            let now = try checkIntact()
            #expect(now == generation || now == generation + 1, "run \(run): generation \(generation) -> \(now)")
            generation = now
        }
        #expect(killed >= 12, "only \(killed) of 24 runs were killed; \(completed) completed")
    }
}
