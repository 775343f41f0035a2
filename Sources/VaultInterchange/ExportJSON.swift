public import VaultKit
/// vault's own JSON of one item as `export` writes it, with the item's secrets lent from its
/// released secrets record: the object `VaultJSON.object` makes of the whole item, the
/// password, TOTP URI, notes, secret custom field values and former passwords given as
/// `JSONSecret`s, so `JSONText` copies them into guarded memory escaped byte by byte and they
/// never become `String`s. The text is byte for byte what `VaultJSON.object` gives (a test
/// compares them).
public enum ExportJSON {
    /// The object of `overview`'s item with `secrets` (valid while the object is written).
    public static func object(_ overview: ItemOverview, _ secrets: ItemSecrets) -> [String: Any] {
        let item = overview.item
        var o = VaultJSON.object(item)
        if let v = secrets.value(of: .password) { o["password"] = JSONSecret(v) }
        if let v = secrets.value(of: .notes) { o["notes"] = JSONSecret(v) }
        if let v = secrets.value(of: .totp) { o["totp"] = JSONSecret(v) }
        if !item.fields.isEmpty {
            o["fields"] = item.fields.map { f -> [String: Any] in
                let value: Any = f.kind.isSecret ? secrets.value(of: .custom(f.name)).map(JSONSecret.init) ?? "" : f.value
                return ["name": f.name, "kind": f.kind.rawValue, "value": value]
            }
        }
        var history: [[String: Any]] = []
        secrets.forEachFormerPassword { replaced, password in history.append(["password": JSONSecret(password), "replaced": replaced]) }
        if !history.isEmpty { o["password_history"] = history }
        return o
    }

    /// Writes the object of the item whose opened records `records` lends, as `JSONText` writes
    /// `object` (keys in sorted order), straight into `out` from the records' fields where they
    /// lie: no `Item`, no dictionary, no `String` per value (export's path; a test compares the
    /// texts). The secrets go from their record into `out`, escaped a run at a time.
    public static func write(_ records: ReleasedRecords, to out: SecretOutput) {
        JSONText.appendExportObject(records, to: out)
    }
}
