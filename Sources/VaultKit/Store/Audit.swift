import FoundationEssentials

/// One release of a secret: when, which item and field, which command, which uid.
public struct AuditRecord: Codable, Equatable, Sendable {
    /// Seconds since 1970.
    public var time: Int64
    /// The item's name.
    public var item: String
    /// The field released (`password`, `username`, `login`...).
    public var field: String
    /// The command that released it (`get`, `run`, `login`, `git-credential`...).
    public var command: String
    /// The uid of the requesting process.
    public var uid: UInt32
    /// The requesting process, when known.
    public var pid: Int32?
    /// The requesting process's executable (`/proc/PID/exe`, read by whoever holds the key: the
    /// agent for its peer), nil when it could not be read. `command` is what the caller says it
    /// is; this is what the kernel says it runs.
    public var executable: String?

    /// A record stamped now.
    public init(item: String, field: String, command: String, uid: UInt32, pid: Int32? = nil, executable: String? = nil,
                time: Int64 = unixNow()) {
        self.time = time
        self.item = item
        self.field = field
        self.command = command
        self.uid = uid
        self.pid = pid
        self.executable = executable
    }
}

extension UnlockedVault {
    /// Appends a sealed audit record (its own transaction).
    public func appendAudit(_ record: AuditRecord) throws {
        try writeTransaction {
            let id = ((try db.query("SELECT coalesce(max(id), 0) + 1 FROM audit").first?.first?.int) ?? 1)
            let plain = try WireJSON.encode(record)
            let s = try plain.withUnsafeBytes { try AEAD.seal($0, key: auditKey, associatedData: auditAD(id: id, generation: generation)) }
            try db.query("INSERT INTO audit(id, generation, nonce, sealed) VALUES(?,?,?,?)",
                         [.integer(id), .integer(generation), .blob(s.nonce), .blob(s.ciphertext)])
        }
    }

    /// The audit log, oldest first; a record that fails authentication is reported, not skipped.
    /// - Throws: `.keysRotated` instead of reporting records damaged when a rotation committed
    ///   since this vault was unlocked.
    public func auditRecords(limit: Int? = nil) throws -> [Result<AuditRecord, VaultError>] {
        let sql = "SELECT id, nonce, sealed, generation FROM audit ORDER BY id" + (limit.map { " DESC LIMIT \($0)" } ?? "")
        var out: [Result<AuditRecord, VaultError>] = try db.query(sql).map { row in
            let id = row[0].int ?? 0
            do {
                guard row[3].int == generation else { throw CryptoError.authenticationFailed }
                let plain = try AEAD.open(row[2].bytes ?? [], key: auditKey, nonce: row[1].bytes ?? [], associatedData: auditAD(id: id, generation: generation))
                return .success(try plain.withUnsafeBytes { try WireJSON.decode(AuditRecord.self, from: $0) })
            } catch {
                return .failure(VaultError.corrupt("audit record \(id) failed authentication"))
            }
        }
        if out.contains(where: { if case .failure = $0 { true } else { false } }) { try checkStillCurrent() }
        if limit != nil { out.reverse() }
        return out
    }
}
