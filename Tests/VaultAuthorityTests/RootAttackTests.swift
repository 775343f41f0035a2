import Foundation
import Testing
import VaultAuthority
import VaultKit
import VaultSystem

/// The attacks of code running as the user, sent to the real vault-authd (as `vault-auth`, on
/// libfprint's virtual_device) by a client process running as an ordinary user, through the
/// daemon's socket, with requests built for the test (not the vault binary): forged proofs and
/// bindings change nothing, a key seen once opens nothing after the next unlock. Needs root.
@Suite(.serialized, .enabled(if: runningAsRoot, "needs root: creates the vault-auth and authd-alice users and starts processes as them with setpriv (CI runs as root)"))
struct RootAttackTests {
    @Test func forgedBindsRecordsEnrolmentsRemovalsAndResetsAreRefusedAndChangeNothing() throws {
        let daemon = try SystemDaemon()
        let owner = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try owner.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        let bound = try owner.bind(vault, confirm: ["right-index"])
        #expect(bound.ok && bound.owner == true, "\(bound)")
        let liveKey = try #require(vault.key.current)
        // The owner locks fingerprint out.
        _ = try owner.unlock(vault, on: daemon, scans: ["someone-else"])
        #expect(try owner.unlock(vault, on: daemon, scans: ["someone-else"]).exitCode == 17)

        // Another process of the same user, with no passcode and no finger.
        let attacker = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let invented = FakeVault(slot: 1)
        let spare = try attacker.bind(invented)
        #expect(spare.ok && spare.owner == false, "a vault bound after the first manages nothing: \(spare)")
        let record = try attacker.run(.recordPasscode(vaultID: invented.id, proofKey: invented.proofKey, forged: false))
        #expect(record.recorded == "vault", "its passcode restarts its own clock only: \(record)")
        #expect(try attacker.status().failedMatches == 5, "the lockout stays")
        #expect(try attacker.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: true)).exitCode == 10)

        // No enrolment, removal or reset with the invented vault's proof, a forged one, or none.
        for (id, key) in [(invented.id, invented.proofKey), (vault.id, randomBytes(32))] as [([UInt8], [UInt8])] {
            #expect(try attacker.run(.enroll(finger: "left-thumb", vaultID: id, proofKey: key)).exitCode == 10)
            #expect(try attacker.run(.unenroll(finger: "right-index", vaultID: id, proofKey: key)).exitCode == 10)
            #expect(try attacker.run(.reset(vaultID: id, proofKey: key)).exitCode == 10)
        }
        #expect(try attacker.run(.enroll(finger: "left-thumb", vaultID: nil, proofKey: nil)).exitCode == 10)
        #expect(try attacker.run(.unenroll(finger: "right-index", vaultID: nil, proofKey: nil)).exitCode == 10)
        #expect(try attacker.run(.reset(vaultID: nil, proofKey: nil)).exitCode == 10)
        #expect(try attacker.status().fingerNames == ["right-index"])

        // The vault's live slot and three spare slots, bound under a key the attacker chose.
        let squatted = FakeVault(slot: vault.slot)
        for slot in [vault.slot, 50, 51, 52] {
            let r = try attacker.run(.bind(vaultID: vault.id, slot: slot, proofKey: squatted.proofKey, rules: relaxedRules,
                                           proverKey: randomBytes(32), confirm: []))
            #expect(r.exitCode == 10 && r.key == nil, "slot \(slot): \(r)")
        }
        // A bind frame without any proof, sent raw.
        let slotJSON = "{\"vaultID\":\(vault.id),\"slotID\":\(vault.slot)}".replacingOccurrences(of: " ", with: "")
        let raw = try attacker.run(.raw(json: "{\"bind\":{\"request\":{\"slot\":\(slotJSON),\"rules\":{\"afterReboot\":false,\"intervalHours\":0},\"confirm\":[]}}}",
                                        tail: randomBytes(32)))
        #expect(raw.exitCode == 10, "\(raw)")
        // A rekey of the owner's vault to the attacker's key under a proof with a random key (a
        // fresh challenge of the daemon), and a re-registration sent raw: the first needs a proof
        // under the registered key, the second a live match (locked out: none is even tried).
        let rekey = try attacker.run(.rekey(vaultID: vault.id, proofKey: randomBytes(32), newKey: squatted.proofKey))
        #expect(rekey.exitCode == 10, "\(rekey)")
        let reregister = try attacker.run(.raw(json: "{\"reregister\":{\"vaultID\":\(vault.id),\"prompt\":\"p\",\"scanTimeout\":2}}".replacingOccurrences(of: " ", with: ""),
                                               tail: squatted.proofKey))
        #expect(reregister.exitCode == 17, "\(reregister)")
        // Neither left the attacker's key with the daemon: a proof under it proves nothing.
        #expect(try attacker.run(.recordPasscode(vaultID: vault.id, proofKey: squatted.proofKey, forged: false)).exitCode == 10)

        // The owner's passcode lifts the lockout and the owner's finger opens the untouched slot.
        #expect(try owner.run(.recordPasscode(vaultID: vault.id, proofKey: vault.proofKey, forged: false)).recorded == "owner")
        #expect(try owner.status().failedMatches == 0)
        #expect(vault.key.current == liveKey)
        let opened = try owner.unlock(vault, on: daemon, scans: ["alice-finger"])
        #expect(opened.key == bound.key, "the binding the owner made, not one of the attacker's")
        #expect(daemon.daemon.isRunning)
    }

    @Test func theIntruderFingerSequenceEndsWithTheIntruderRefused() throws {
        let daemon = try SystemDaemon()
        let owner = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try owner.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        #expect(try owner.bind(vault, confirm: ["right-index"]).ok)

        // The intruder's finger, enrolled with every proof the attacker can make: refused.
        let attacker = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        let invented = FakeVault(slot: 1)
        _ = try attacker.bind(invented)
        for v: FakeVault? in [invented, vault.withNewProofKey(), nil] {
            var scanned = false
            let r = try attacker.run(.enroll(finger: "left-thumb", vaultID: v?.id, proofKey: v?.proofKey), onNotice: { n in
                if case .enrolling = n { scanned = true }
            })
            #expect(r.exitCode == 10 && !scanned, "refused before any scan: \(r)")
        }
        // The owner's vault still opens (nothing changed: no exit 20), and the owner following
        // the re-bind hint anyway binds to the prints the owner enrolled alone.
        #expect(try owner.unlock(vault, on: daemon, scans: ["alice-finger"]).key != nil)
        let rebound = try owner.bind(vault)
        #expect(rebound.ok && rebound.changes == [], "\(rebound)")
        let intruder = try owner.unlock(vault, on: daemon, scans: ["intruder-finger"])
        #expect(intruder.retryLimit && intruder.key == nil, "the intruder's finger opens nothing")
        // A finger the owner enrols is named in the next binding's report, with the vault that signed it.
        #expect(try owner.enroll("alice-second", on: daemon, finger: "left-index", vault: vault).ok)
        #expect(try owner.unlock(vault, on: daemon, scans: ["alice-finger"]).exitCode == 20)
        let after = try owner.bind(vault)
        #expect(after.changes?.contains { $0.hasPrefix("left-index was enrolled on ") && $0.hasSuffix("by vault 'test'") } == true,
                "\(after.changes ?? [])")
        #expect(try owner.unlock(vault, on: daemon, scans: ["alice-second"]).key != nil)
    }

    @Test func aSlotKeySeenInOneUnlockOpensNothingAfterTheNextAndACrashBeforeTheResealStillOpens() throws {
        let daemon = try SystemDaemon()
        let alice = try ClientProcess(user: TestUsers.alice, daemon: daemon)
        #expect(try alice.enroll("alice-finger", on: daemon).ok)
        let vault = FakeVault()
        let bound = try alice.bind(vault, confirm: ["right-index"])
        let firstID = try #require(vault.key.current)

        // One unlock, seen by a preloaded library: its key and the next one.
        let seen = try alice.unlock(vault, on: daemon, scans: ["alice-finger"])
        #expect(seen.key == bound.key)
        let next = try #require(seen.nextKey)
        #expect(next != bound.key && seen.nextKeyID != firstID)
        // A crash before the re-seal: the slot still names the key it has, and it opens.
        let crashed = try alice.unlock(vault, on: daemon, scans: ["alice-finger"], commit: false)
        #expect(crashed.key == next)
        let reopened = try alice.unlock(vault, on: daemon, scans: ["alice-finger"])
        #expect(reopened.key == next && reopened.nextKey != crashed.nextKey, "a next key handed out once is never handed out again")
        // After the next unlock, the keys seen before are gone: a copy of the vault sealed with
        // them is exit 20 without a scan.
        _ = try alice.unlock(vault, on: daemon, scans: ["alice-finger"])
        for old in [firstID, seen.nextKeyID] {
            let r = try alice.run(.unlock(vaultID: vault.id, slot: vault.slot, keyID: old, rules: relaxedRules, scanTimeout: 20, cancel: nil))
            #expect(r.exitCode == 20 && r.key == nil, "\(String(describing: old)): \(r)")
        }
        #expect(try alice.unlock(vault, on: daemon, scans: ["alice-finger"]).key != nil)
    }
}
