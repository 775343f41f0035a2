import FoundationEssentials

/// Keeping a key authority in step with the vault's master key. The authority checks a vault's
/// proofs under the proof key it registered, which the master key derives; a rotation makes a
/// new master key. The authority can miss that: no reader at the rotation, a daemon that did not
/// answer, a crash between the vault's commit and the daemon's update, the daemon's state
/// restored from a backup. So the vault keeps the proof keys of its earlier generations
/// (newest first, at most `earlierProofKeyLimit`, sealed under the current master key in the
/// meta row `earlier_proof_keys`), and a proof the authority refuses is followed by a proof
/// under each of them that hands it the current key. The authority learns nothing it did not
/// register itself: only the holder of the current master key can open that row.
extension UnlockedVault {
    /// How many earlier proof keys a vault keeps (its last eight rotations).
    static let earlierProofKeyLimit = 8
    static let earlierProofKeysMeta = "earlier_proof_keys"
    private static let proofKeyBytes = 32

    /// The earlier generations' proof keys, newest first, as one buffer of 32-byte keys (empty:
    /// none, a vault never rotated since they were kept).
    /// - Throws: `.corrupt` when the row does not open under this master key.
    func earlierProofKeys() throws -> SecretBytes {
        guard let row = try store.meta(Self.earlierProofKeysMeta)?.bytes else { return try SecretBytes(zeroed: 0) }
        guard row.count > 24 else { throw VaultError.corrupt("the record of earlier proof keys is truncated") }
        do {
            let keys = try AEAD.open(Array(row[24...]), key: try earlierProofKeysKey(), nonce: Array(row[0..<24]),
                                     associatedData: earlierProofKeysAD())
            guard keys.count % Self.proofKeyBytes == 0 else { throw VaultError.corrupt("the record of earlier proof keys is malformed") }
            return keys
        } catch is CryptoError {
            throw VaultError.corrupt("the record of earlier proof keys fails authentication")
        }
    }

    /// Writes, as this (new) generation's record, `previous`'s proof key followed by the keys
    /// `previous` kept, at most `earlierProofKeyLimit`. Called inside the rotation's transaction.
    func recordEarlierProofKeys(of previous: UnlockedVault) throws {
        let current = try previous.proofKey()
        let older = try previous.earlierProofKeysKeptOrNone()
        let n = Self.proofKeyBytes
        let kept = min(Self.earlierProofKeyLimit, 1 + older.count / n)
        let keys = try SecretBytes(zeroed: kept * n)
        keys.withUnsafeMutableBytes { out in
            current.withUnsafeBytes { out.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: n) }
            older.withUnsafeBytes { o in
                if kept > 1 { (out.baseAddress! + n).copyMemory(from: o.baseAddress!, byteCount: (kept - 1) * n) }
            }
        }
        let sealed = try keys.withUnsafeBytes { try AEAD.seal($0, key: try earlierProofKeysKey(), associatedData: earlierProofKeysAD()) }
        try store.setMeta(Self.earlierProofKeysMeta, .blob(sealed.nonce + sealed.ciphertext))
    }

    /// The earlier keys, none when their record is damaged (it then loses only the keys before
    /// this generation).
    private func earlierProofKeysKeptOrNone() throws -> SecretBytes {
        do {
            return try earlierProofKeys()
        } catch {
            return try SecretBytes(zeroed: 0)
        }
    }

    private func earlierProofKeysKey() throws -> SecretBytes {
        try KeyedHash.deriveKey(from: masterKey, context: "vault/v1/earlier-proof-keys")
    }

    private func earlierProofKeysAD() -> [UInt8] {
        var w = ByteWriter(label: "vault-earlier-proof-keys-v1")
        w.append(store.vaultID)
        w.append(generation)
        return w.bytes
    }

    /// Hands `authority` this vault's current proof key under the newest earlier key it still
    /// holds. - Returns: whether one was accepted (false: it holds none of them, or does not know
    /// the vault at all).
    func bringInStep(_ authority: any KeyAuthority) throws -> Bool {
        let earlier = try earlierProofKeys()
        let current = try proofKey()
        let subject = try AuthorityProofMAC.keySubject(current)
        let n = Self.proofKeyBytes
        for i in 0..<(earlier.count / n) {
            let key = try earlier.withUnsafeBytes { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[(i * n)..<((i + 1) * n)])) }
            let proof = try proof(.rekey, challenge: try authority.challenge(), subject: subject, key: key)
            do {
                return try authority.rekey(proof, proofKey: current) != .notBound
            } catch VaultError.proofRefused {
                continue
            }
        }
        return false
    }

    /// `body` with a fresh proof of this vault for `purpose` and `subject`; when `authority`
    /// refuses it (it holds an earlier generation's key: see above), it is brought in step and
    /// `body` runs once more with a new proof. Every request that carries a proof goes through here.
    /// - Throws: `.proofRefused` when the authority holds none of this vault's keys.
    package func proven<R: ~Copyable>(_ purpose: ProofPurpose, by authority: any KeyAuthority, subject: [UInt8] = [],
                          _ body: (AuthorityProof) throws -> R) throws -> R {
        do {
            return try body(try proof(purpose, for: authority, subject: subject))
        } catch VaultError.proofRefused {
            guard try bringInStep(authority) else { throw VaultError.proofRefused }
            return try body(try proof(purpose, for: authority, subject: subject))
        }
    }

    /// Before a rotation commits: tells `authority` the next generation's proof key (it stays
    /// the next one there until a proof under it arrives, so a rotation that never commits
    /// changes nothing). Best effort: an authority that does not answer now is brought in step
    /// at the next proof (`proven`). - Returns: why it was not told, nil when it was (or does
    /// not know this vault).
    func announce(_ next: UnlockedVault, to authority: any KeyAuthority) -> String? {
        do {
            let key = try next.proofKey()
            _ = try proven(.rekey, by: authority, subject: try AuthorityProofMAC.keySubject(key)) {
                try authority.rekey($0, proofKey: key)
            }
            return nil
        } catch let e as VaultError {
            return e.message
        } catch {
            return "\(error)"
        }
    }
}
