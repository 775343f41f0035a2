import Foundation
import Testing
@testable import VaultKit

@Suite struct RotationTests {
    let root = TempRoot()

    func rows(_ vault: UnlockedVault) throws -> [String: (nonce: [UInt8], sealed: [UInt8], generation: Int64)] {
        var out: [String: (nonce: [UInt8], sealed: [UInt8], generation: Int64)] = [:]
        for r in try vault.db.query("SELECT id, secrets_nonce, secrets, generation FROM items") {
            out[hexString(r[0].bytes!)] = (r[1].bytes!, r[2].bytes!, r[3].int!)
        }
        return out
    }

    @Test func rotationReSealsEveryRowAndKeepsEveryItem() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret("pass word"), kdf: fastKDF)
        let vault = created.vault
        for i in 0..<50 {
            try vault.add(Item(name: "item-\(i)", username: "u\(i)", password: "p\(i)", urls: ["https://\(i).example"], notes: "n\(i)"))
        }
        let before = try rows(vault)
        let itemsBefore = try vault.allItemsWithSecrets().compactMap { if case .item(let i) = $0 { i } else { nil } }.sorted { $0.name < $1.name }
        let slotsBefore = try vault.store.slots()

        var progressCalls = 0
        let result = try vault.rotate(passcode: try secret("pass word"), kdf: nil, recovery: .keep, authority: nil) { _, _ in progressCalls += 1 }
        #expect(result.items == 50)
        #expect(result.recoveryKey == nil)
        #expect(progressCalls > 0)

        let store = try VaultStore.open(try root.location())
        #expect(try store.keyGeneration() == 2)
        let reopened = try store.unlock(passcode: try secret("pass word"))
        let after = try rows(reopened)
        #expect(Set(after.keys) == Set(before.keys))
        for (id, old) in before {
            let new = after[id]!
            #expect(new.nonce != old.nonce)
            #expect(new.sealed != old.sealed)
            #expect(new.generation == 2)
        }
        let itemsAfter = try reopened.allItemsWithSecrets().compactMap { if case .item(let i) = $0 { i } else { nil } }.sorted { $0.name < $1.name }
        #expect(itemsAfter == itemsBefore)
        // Every old slot is gone; the new ones are of the new generation only.
        let slotsAfter = try store.db.query("SELECT id, generation FROM slots")
        #expect(slotsAfter.allSatisfy { $0[1].int == 2 })
        #expect(Set(slotsAfter.map { $0[0].int! }).isDisjoint(with: Set(slotsBefore.map(\.id))))
        // The kept recovery key still opens the new generation.
        #expect(try store.unlock(recoveryKey: created.recoveryKey).item(named: "item-7").password == "p7")
    }

    @Test func replacedRecoveryKeyRetiresTheOldOne() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret("pass word"), kdf: fastKDF)
        try created.vault.add(Item(name: "x", password: "1"))
        let result = try created.vault.rotate(passcode: try secret("pass word"), kdf: nil, recovery: .replace, authority: nil)
        let newKey = try #require(result.recoveryKey)
        let store = try VaultStore.open(try root.location())
        #expect(throws: VaultError.authenticationFailed("wrong recovery key")) { _ = try store.unlock(recoveryKey: created.recoveryKey) }
        #expect(try store.unlock(recoveryKey: newKey).item(named: "x").password == "1")
    }

    @Test func oldMasterKeyCannotReadRowsWrittenAfterRotation() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret("pass word"), kdf: fastKDF)
        let old = created.vault
        try old.add(Item(name: "before", password: "1"))
        let new = try old.rotate(passcode: try secret("pass word"), kdf: nil, recovery: .keep, authority: nil).vault
        try new.add(Item(name: "after", password: "2"))
        // The old keys, still in memory here as if copied before rotation, open nothing of the new generation.
        #expect(throws: VaultError.self) { _ = try old.item(named: "before") }
        #expect(old.allItemsFailing())
        #expect(try new.item(named: "after").password == "2")
    }

    @Test func damagedRowStopsRotationWithoutChangingAnything() throws {
        let created = try VaultStore.create(at: try root.location(), passcode: try secret("pass word"), kdf: fastKDF)
        try created.vault.add(Item(name: "good", password: "g"))
        try created.vault.add(Item(name: "bad", password: "b"))
        try created.vault.db.query("UPDATE items SET secrets = zeroblob(40) WHERE name_mac = ?", [.blob(try created.vault.nameMAC("bad"))])
        #expect(throws: VaultError.self) {
            _ = try created.vault.rotate(passcode: try secret("pass word"), kdf: nil, recovery: .keep, authority: nil)
        }
        let store = try VaultStore.open(try root.location())
        #expect(try store.keyGeneration() == 1)
        #expect(try store.unlock(passcode: try secret("pass word")).item(named: "good").password == "g")
    }
}

extension UnlockedVault {
    /// True when no row opens with these keys.
    func allItemsFailing() -> Bool {
        ((try? allItems()) ?? []).allSatisfy { if case .damaged = $0 { true } else { false } }
    }
}
