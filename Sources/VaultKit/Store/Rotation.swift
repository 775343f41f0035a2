import FoundationEssentials

/// What a rotation does with the recovery slot.
package enum RecoveryRotation: Sendable {
    /// Re-wrap the slot for the same recovery key (only its public key is needed).
    case keep
    /// Make a new recovery key; the old one stops working.
    case replace
}

/// The result of a rotation.
package struct RotationResult {
    /// The vault under its new master key.
    package let vault: UnlockedVault
    /// Items re-sealed.
    package let items: Int
    /// The new recovery key, when it was replaced (to be shown once).
    package let recoveryKey: String?
    /// Whether a fingerprint slot was bound (false: no reader or no prints).
    package let fingerprintBound: Bool
    /// Whether the key authority had fingers enrolled (false: the way to a fingerprint slot is
    /// an enrolment, not a binding).
    package let fingersEnrolled: Bool
    /// Why the key authority could not be told the new proof key before the commit (nil: it
    /// was, or it does not know the vault). It is brought in step at the next proof all the same.
    package let authorityNotTold: String?
}

extension UnlockedVault {
    /// Replaces the master key: every item and audit record is re-sealed with a fresh nonce under
    /// keys of the new generation, the name index is recomputed, the passcode and recovery slots are
    /// re-wrapped, the fingerprint slot is re-bound through `authority` (when it has prints on a
    /// reader that is present) and every old slot is deleted -- all in one SQLite transaction that
    /// first checks the generation is still this key's, so a crash or a concurrent rotation leaves
    /// either the old vault or the new one, never a mix.
    ///
    /// - Parameters:
    ///   - passcode: the passcode the new passcode slot opens with (the current one, or a new one).
    ///   - kdf: new Argon2id cost, or nil to keep the current cost (with a fresh salt).
    ///   - recovery: keep or replace the recovery key.
    ///   - authority: re-binds the fingerprint slot (nil: no fingerprint slot).
    ///   - sensor: the reader to bind on (nil: the authority's choice).
    ///   - progress: called with (done, total) as items are re-sealed.
    /// - Throws: `.corrupt` naming damaged rows (nothing is changed: a damaged row cannot be
    ///   re-sealed and would be lost), `.keysRotated` when another rotation committed or another
    ///   process changed a slot (the passcode) since this vault was unlocked, or any store error.
    package func rotate(passcode: borrowing SecretBytes, kdf: KDFParameters?, recovery: RecoveryRotation,
                       authority: (any KeyAuthority)?, sensor: SensorIdentity? = nil, confirm: [String] = [],
                       report: BindingReport = BindingReport(),
                       progress: (Int, Int) -> Void = { _, _ in }) throws -> RotationResult {
        let newGeneration = generation + 1
        let fresh = try UnlockedVault(store: store, masterKey: try SecretBytes.random(count: 32), generation: newGeneration,
                                      slotSequence: slotSequenceSeen)
        let slots = try store.slots()
        var params = kdf ?? KDFParameters()
        if kdf == nil, let old = try? slots.first(where: { $0.kind == .passcode })?.passcodeParameters() {
            params.memoryBytes = old.memoryBytes
            params.operations = old.operations
        }
        var newRecovery: RecoveryKey?
        var recoverySealer: RecoverySealer?
        switch recovery {
        case .replace:
            let key = try RecoveryKey.generate()
            recoverySealer = RecoverySealer(publicKey: try key.publicKey())
            newRecovery = consume key
        case .keep:
            recoverySealer = slots.first(where: { $0.kind == .recovery }).flatMap(RecoverySealer.reusing)
        }
        // A passcode on the TPM stays on the TPM (a new object, under the new generation's slot).
        let onTPM = slots.first(where: { $0.kind == .passcode })?.passcodeIsOnTPM ?? false
        let passcodeSealer = try PasscodeSealer(passcode: passcode, parameters: params, tpm: try passcodeTarget(onTPM: onTPM))
        let rules = try store.settings().passcodeRules
        var count = 0
        var bound = false, enrolled = false
        // The authority holds the new proof key as the next one before anything commits: a crash
        // from here on leaves it able to check the vault's proofs under whichever key won.
        let notTold = authority.flatMap { announce(fresh, to: $0) }
        try withLargePageCache { try writeTransaction {
            // Every slot is re-made from what this process knew; a slot changed since (a passcode
            // changed by another process) would be undone without a word.
            guard try store.slotSequence() == slotSequenceSeen else { throw VaultError.keysRotated }
            let total = try store.itemCount()
            count = try reseal(itemsInto: fresh, total: total, progress: progress)
            try reseal(auditInto: fresh)
            try reseal(syncSecretsInto: fresh)
            try db.query("DELETE FROM slots")
            try fresh.insertSlot(passcodeSealer, generation: newGeneration)
            if let recoverySealer { try fresh.insertSlot(recoverySealer, generation: newGeneration) }
            if let authority, try !authority.fingersIfReachable().isEmpty {
                enrolled = true
                do {
                    try fresh.insertSlot(FingerprintSealer(authority: authority, prover: self, sensor: sensor, rules: rules,
                                                           confirm: confirm, report: report),
                                         generation: newGeneration)
                    bound = true
                } catch let e as VaultError {
                    // No reader now, or no prints on it: the vault opens with the passcode until re-bound.
                    switch e {
                    case .biometryNotAvailable, .biometryNotEnrolled, .systemCancel: break
                    default: throw e
                    }
                }
            }
            try store.setMeta("key_generation", .integer(newGeneration))
            try store.setMeta("rotated", .integer(unixNow()))
            try fresh.recordEarlierProofKeys(of: self)
            try fresh.recordKeyCheck()
        } }
        return RotationResult(vault: fresh, items: count, recoveryKey: newRecovery?.text, fingerprintBound: bound, fingersEnrolled: enrolled,
                              authorityNotTold: notTold)
    }

    /// Re-seals every item's two records under `fresh`'s key, in batches of rows read by id, so
    /// memory stays bounded whatever the vault's size; each plaintext is re-sealed from the one
    /// guarded buffer it was opened into (nothing is decoded but the name, for the new index).
    /// - Throws: `.corrupt` naming the damaged rows (the caller's transaction then rolls back).
    func reseal(itemsInto fresh: UnlockedVault, total: Int, progress: (Int, Int) -> Void) throws -> Int {
        let scratch = try RecordScratch()
        // By rowid, not by id: a seek in the table itself instead of through id's index.
        let batch = try db.prepare("SELECT rowid, \(ItemRow.columns) FROM items WHERE rowid > ? ORDER BY rowid LIMIT 512")
        let update = try db.prepare("UPDATE items SET \(ItemRow.updateSet) WHERE rowid=?")
        var damaged: [String] = []
        var done = 0
        var after: Int64 = 0
        while true {
            try batch.bind([.integer(after)])
            var rows: [(rowid: Int64, row: ItemRow)] = []
            while let r = try batch.next() { rows.append((r[0].int ?? 0, ItemRow(Array(r.dropFirst())))) }
            guard let last = rows.last else { break }
            after = last.rowid
            for (rowid, row) in rows {
                let next: ItemRow
                do {
                    next = try reseal(row, into: fresh, scratch: scratch)
                } catch is CryptoError {
                    damaged.append(hexString(row.id))
                    continue
                } catch is RecordFormatError {
                    damaged.append(hexString(row.id))
                    continue
                }
                guard damaged.isEmpty else { continue }
                // New index entries are keyed MACs under a new key: a clash with an old entry not
                // yet replaced is a 2^-256 event, and would only abort this transaction.
                try update.bind(Array(next.values.dropFirst()) + [.integer(rowid)])
                _ = try update.next()
                done += 1
                if done % 256 == 0 || done == total { progress(done, total) }
            }
        }
        guard damaged.isEmpty else {
            throw VaultError.corrupt("\(damaged.count) damaged item row(s) (\(damaged.prefix(3).joined(separator: ", "))) cannot be re-sealed; nothing was changed (list them with 'vault repair', remove them with 'vault repair --remove')")
        }
        return done
    }

    /// One row re-sealed under `fresh`'s key.
    private func reseal(_ row: ItemRow, into fresh: UnlockedVault, scratch: RecordScratch) throws -> ItemRow {
        let o = try withOverview(row, scratch: scratch) { plain in
            let name = try OverviewRecord.name(of: plain)
            let sealed = try AEAD.seal(plain, key: fresh.itemKey, associatedData: fresh.recordAD(id: row.id, kind: .overview, generation: fresh.generation))
            return (sealed, try fresh.nameMAC(name), ItemRow.loginHint(try OverviewRecord.fingerprintLoginIsOn(plain)))
        }
        let s = try withSecrets(row, scratch: scratch) { plain in
            try AEAD.seal(plain, key: fresh.itemKey,
                          associatedData: fresh.recordAD(id: row.id, kind: .secrets, generation: fresh.generation, overviewNonce: o.0.nonce))
        }
        return ItemRow(id: row.id, nameMAC: o.1, generation: fresh.generation, overviewNonce: o.0.nonce, overview: o.0.ciphertext,
                       secretsNonce: s.nonce, secrets: s.ciphertext, loginHint: o.2)
    }

    /// Re-seals every audit record under the new generation's audit key.
    func reseal(auditInto fresh: UnlockedVault) throws {
        let rows = try db.query("SELECT id, nonce, sealed FROM audit")
        for row in rows {
            let id = row[0].int ?? 0
            let plain = try AEAD.open(row[2].bytes ?? [], key: auditKey, nonce: row[1].bytes ?? [], associatedData: auditAD(id: id, generation: generation))
            let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: fresh.auditKey, associatedData: fresh.auditAD(id: id, generation: fresh.generation)) }
            try db.query("UPDATE audit SET nonce=?, sealed=?, generation=? WHERE id=?", [.blob(s.nonce), .blob(s.ciphertext), .integer(fresh.generation), .integer(id)])
        }
    }

    /// The associated data of an audit record: vault id, record id, key generation.
    func auditAD(id: Int64, generation: Int64) -> [UInt8] {
        var w = ByteWriter(label: "vault-audit-v1")
        w.append(store.vaultID)
        w.append(id)
        w.append(generation)
        return w.bytes
    }
}
