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
        if let v = secrets.value(of: "password") { o["password"] = JSONSecret(v) }
        if let v = secrets.value(of: "notes") { o["notes"] = JSONSecret(v) }
        if let v = secrets.value(of: "totp") { o["totp"] = JSONSecret(v) }
        if !item.fields.isEmpty {
            o["fields"] = item.fields.map { f -> [String: Any] in
                let value: Any = f.kind.isSecret ? secrets.customValue(of: f.name).map(JSONSecret.init) ?? "" : f.value
                return ["name": f.name, "kind": f.kind.rawValue, "value": value]
            }
        }
        var history: [[String: Any]] = []
        secrets.forEachFormerPassword { replaced, password in history.append(["password": JSONSecret(password), "replaced": replaced]) }
        if !history.isEmpty { o["password_history"] = history }
        return o
    }

    /// Writes the object `object(overview, secrets)` makes, as `JSONText` writes it (keys in
    /// sorted order), straight into `out`: no dictionary, no dynamic cast per value (export's
    /// path; a test compares the two texts). The secrets go from their record into `out` escaped
    /// byte by byte.
    public static func write(_ overview: ItemOverview, _ secrets: ItemSecrets, to out: SecretOutput) {
        var o = out
        write(overview, secrets, to: &o)
    }

    static func write<Out: JSONOutput>(_ overview: ItemOverview, _ secrets: ItemSecrets, to out: inout Out) {
        let item = overview.item
        func text(_ key: StaticString, _ value: String?) {
            guard let value else { return }
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            JSONText.appendString(value, to: &out)
        }
        func secret(_ key: StaticString, _ value: UnsafeRawBufferPointer?) {
            guard let value else { return }
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            JSONText.appendString(bytes: value, to: &out)
        }
        func texts(_ key: StaticString, _ values: [String]) {
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            out.append(UInt8(ascii: "["))
            for (i, v) in values.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(v, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(ascii: #"{"created":"#)
        out.append(ascii: String(item.created))
        if !item.fields.isEmpty {
            out.append(ascii: #","fields":["#)
            for (i, f) in item.fields.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                text(#"{"kind":"#, f.kind.rawValue)
                text(#","name":"#, f.name)
                if f.kind.isSecret {
                    out.append(ascii: #","value":"#)
                    if let v = secrets.customValue(of: f.name) { JSONText.appendString(bytes: v, to: &out) } else { JSONText.appendString("", to: &out) }
                } else {
                    text(#","value":"#, f.value)
                }
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(ascii: item.fingerprintLogin ? #","fingerprint_login":true"# : #","fingerprint_login":false"#)
        out.append(ascii: #","modified":"#)
        out.append(ascii: String(item.modified))
        text(#","name":"#, item.name)
        secret(#","notes":"#, secrets.value(of: "notes"))
        text(#","origin":"#, item.origin)
        secret(#","password":"#, secrets.value(of: "password"))
        var formerPasswords = 0
        secrets.forEachFormerPassword { replaced, password in
            out.append(ascii: formerPasswords == 0 ? #","password_history":["# : ",")
            formerPasswords += 1
            secret(#"{"password":"#, password)
            out.append(ascii: #","replaced":"#)
            out.append(ascii: String(replaced))
            out.append(UInt8(ascii: "}"))
        }
        if formerPasswords > 0 { out.append(UInt8(ascii: "]")) }
        text(#","password_prompt":"#, item.passwordPrompt)
        texts(#","tags":"#, item.tags)
        secret(#","totp":"#, secrets.value(of: "totp"))
        text(#","type":"#, item.type.rawValue)
        texts(#","urls":"#, item.urls)
        text(#","user_prompt":"#, item.userPrompt)
        text(#","username":"#, item.username)
        out.append(UInt8(ascii: "}"))
    }
}
