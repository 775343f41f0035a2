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
    /// A batch's rows are copied into one reused buffer (the SELECT ends before the first UPDATE)
    /// and each row's new columns are sealed into another, bound in place.
    /// - Throws: `.corrupt` naming the damaged rows (the caller's transaction then rolls back).
    func reseal(itemsInto fresh: UnlockedVault, total: Int, progress: (Int, Int) -> Void) throws -> Int {
        let scratch = try RecordScratch()
        // By rowid, not by id: a seek in the table itself instead of through id's index.
        let batch = try db.prepare("SELECT rowid, \(ItemRow.columns) FROM items WHERE rowid > ? ORDER BY rowid LIMIT 512")
        let update = try db.prepare("UPDATE items SET \(ItemRow.updateSet) WHERE rowid=?")
        let rows = ItemRowBatch()
        let sealed = ResealedColumns()
        var damaged: [String] = []
        var done = 0
        var after: Int64 = 0
        while true {
            try batch.reset()
            try batch.bind(after, at: 1)
            rows.removeAll()
            while try batch.step() { rows.append(rowID: batch.integer(0) ?? 0, ItemRowColumns(batch, from: 1)) }
            guard let last = rows.lastRowID else { break }
            after = last
            try rows.forEach { rowid, row in
                do {
                    try reseal(row, into: fresh, scratch: scratch, sealed: sealed)
                } catch is CryptoError {
                    damaged.append(hexString(Array(row.id)))
                    return
                } catch is RecordFormatError {
                    damaged.append(hexString(Array(row.id)))
                    return
                }
                guard damaged.isEmpty else { return }
                // New index entries are keyed MACs under a new key: a clash with an old entry not
                // yet replaced is a 2^-256 event, and would only abort this transaction.
                try sealed.bind(to: update, generation: fresh.generation, rowID: rowid)
                _ = try update.step()
                try update.reset()
                done += 1
                if done % 256 == 0 || done == total { progress(done, total) }
            }
        }
        guard damaged.isEmpty else {
            throw VaultError.corrupt("\(damaged.count) damaged item row(s) (\(damaged.prefix(3).joined(separator: ", "))) cannot be re-sealed; nothing was changed (list them with 'vault repair', remove them with 'vault repair --remove')")
        }
        return done
    }

    /// One row re-sealed under `fresh`'s key into `sealed`: the name's new index entry, the
    /// login hint from the sealed flag, both records under fresh nonces.
    private func reseal(_ row: ItemRowColumns, into fresh: UnlockedVault, scratch: RecordScratch, sealed: ResealedColumns) throws {
        try withOverview(row, scratch: scratch) { plain in
            try KeyedHash.hash(try OverviewRecord.nameBytes(of: plain), key: fresh.indexKey, into: sealed.nameMAC)
            sealed.loginHint = ItemRow.loginHint(try OverviewRecord.fingerprintLoginIsOn(plain))
            RandomPool.shared.fill(sealed.overviewNonce)
            let ad = sealed.associatedData.bytes(prefix: fresh.recordADPrefix, id: row.id, kind: .overview, generation: fresh.generation)
            try AEAD.seal(plain, key: fresh.itemKey, nonce: UnsafeRawBufferPointer(sealed.overviewNonce), associatedData: ad,
                          into: sealed.overview(sealing: plain.count))
        }
        try withSecrets(row, scratch: scratch) { plain in
            RandomPool.shared.fill(sealed.secretsNonce)
            let ad = sealed.associatedData.bytes(prefix: fresh.recordADPrefix, id: row.id, kind: .secrets, generation: fresh.generation,
                                                 overviewNonce: UnsafeRawBufferPointer(sealed.overviewNonce))
            try AEAD.seal(plain, key: fresh.itemKey, nonce: UnsafeRawBufferPointer(sealed.secretsNonce), associatedData: ad,
                          into: sealed.secrets(sealing: plain.count))
        }
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

/// A batch of item rows copied out of their statement into one buffer reused for every batch
/// (a rotation reads 512 rows, then updates them: no array per column per row).
final class ItemRowBatch {
    private var bytes: [UInt8] = []
    /// Per row: its rowid, generation, login hint, and where each of its six byte columns ends
    /// in `bytes` (each starts where the one before ended).
    private var rows: [(rowID: Int64, generation: Int64, loginHint: Int64?, ends: (Int, Int, Int, Int, Int, Int))] = []

    /// The rowid of the last row appended, nil when the batch is empty.
    var lastRowID: Int64? { rows.last?.rowID }

    /// Empties the batch, keeping its capacity.
    func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        rows.removeAll(keepingCapacity: true)
    }

    /// Copies `row` (read in place) into the batch.
    func append(rowID: Int64, _ row: ItemRowColumns) {
        func add(_ b: UnsafeRawBufferPointer) -> Int {
            bytes.append(contentsOf: b)
            return bytes.count
        }
        let ends = (add(row.id), add(row.nameMAC), add(row.overviewNonce), add(row.overview), add(row.secretsNonce), add(row.secrets))
        rows.append((rowID, row.generation, row.loginHint, ends))
    }

    /// Lends each row of the batch in order, its columns in the batch's buffer.
    func forEach(_ body: (Int64, ItemRowColumns) throws -> Void) rethrows {
        try bytes.withUnsafeBytes { all in
            func part(_ from: Int, _ to: Int) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: all[from..<to]) }
            var start = 0
            for r in rows {
                let e = r.ends
                try body(r.rowID, ItemRowColumns(id: part(start, e.0), nameMAC: part(e.0, e.1), generation: r.generation,
                                                 overviewNonce: part(e.1, e.2), overview: part(e.2, e.3), secretsNonce: part(e.3, e.4),
                                                 secrets: part(e.4, e.5), loginHint: r.loginHint))
                start = e.5
            }
        }
    }
}

/// One row's new columns as a rotation seals them (public bytes: the ciphertexts, nonces and
/// index entry it writes), in buffers reused for every row and bound to the UPDATE in place.
final class ResealedColumns {
    let nameMAC = UnsafeMutableRawBufferPointer.allocate(byteCount: 32, alignment: 8)
    let overviewNonce = UnsafeMutableRawBufferPointer.allocate(byteCount: AEAD.nonceLength, alignment: 8)
    let secretsNonce = UnsafeMutableRawBufferPointer.allocate(byteCount: AEAD.nonceLength, alignment: 8)
    /// The associated data of the record being sealed.
    let associatedData = RecordADBuffer()
    var loginHint: Int64 = 0
    private var overviewStorage = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 8)
    private var secretsStorage = UnsafeMutableRawBufferPointer.allocate(byteCount: 1024, alignment: 8)
    private var overviewCount = 0
    private var secretsCount = 0

    deinit {
        for b in [nameMAC, overviewNonce, secretsNonce, overviewStorage, secretsStorage] { b.deallocate() }
    }

    private static func room(_ storage: inout UnsafeMutableRawBufferPointer, _ n: Int) -> UnsafeMutableRawBufferPointer {
        if n > storage.count {
            storage.deallocate()
            storage = .allocate(byteCount: max(n, 2 * storage.count), alignment: 8)
        }
        return UnsafeMutableRawBufferPointer(rebasing: storage[0..<n])
    }

    /// Room for the sealed overview of a `plaintext`-byte record.
    func overview(sealing plaintext: Int) -> UnsafeMutableRawBufferPointer {
        overviewCount = plaintext + AEAD.tagLength
        return Self.room(&overviewStorage, overviewCount)
    }

    /// Room for the sealed secrets record of a `plaintext`-byte record.
    func secrets(sealing plaintext: Int) -> UnsafeMutableRawBufferPointer {
        secretsCount = plaintext + AEAD.tagLength
        return Self.room(&secretsStorage, secretsCount)
    }

    /// The overview sealed last (valid until the next `overview(sealing:)`).
    var sealedOverview: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: overviewStorage[0..<overviewCount]) }

    /// The secrets record sealed last (valid until the next `secrets(sealing:)`).
    var sealedSecrets: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: secretsStorage[0..<secretsCount]) }

    /// Binds the row to `update` (`ItemRow.updateSet`, then the rowid), in place: the caller
    /// steps it and resets it (which clears the bindings) before the next row is sealed.
    func bind(to update: Statement, generation: Int64, rowID: Int64) throws {
        try update.bind(borrowing: UnsafeRawBufferPointer(nameMAC), at: 1)
        try update.bind(generation, at: 2)
        try update.bind(borrowing: UnsafeRawBufferPointer(overviewNonce), at: 3)
        try update.bind(borrowing: sealedOverview, at: 4)
        try update.bind(borrowing: UnsafeRawBufferPointer(secretsNonce), at: 5)
        try update.bind(borrowing: sealedSecrets, at: 6)
        try update.bind(loginHint, at: 7)
        try update.bind(rowID, at: 8)
    }
}
