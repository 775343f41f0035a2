/// export's object of one item, written as `JSONText` writes the dictionary `ExportJSON.object`
/// makes (keys in sorted order), straight from the item's overview and its lent secrets record.
extension JSONText {
    /// Appends the export object of `overview`'s item with `secrets` to guarded memory: no
    /// dictionary, no dynamic cast per value; the secrets go from their record into `out`
    /// escaped byte by byte and never become `String`s.
    public static func appendExportObject(_ overview: ItemOverview, _ secrets: ItemSecrets, to out: SecretOutput) {
        var o = out
        appendExportObject(overview, secrets, to: &o)
    }

    static func appendExportObject<Out: JSONOutput>(_ overview: ItemOverview, _ secrets: ItemSecrets, to out: inout Out) {
        let item = overview.item
        func text(_ key: StaticString, _ value: String?) {
            guard let value else { return }
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            appendString(value, to: &out)
        }
        func secret(_ key: StaticString, _ value: UnsafeRawBufferPointer?) {
            guard let value else { return }
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            appendString(bytes: value, to: &out)
        }
        func texts(_ key: StaticString, _ values: [String]) {
            key.withUTF8Buffer { out.appendRun(UnsafeRawBufferPointer($0)) }
            out.append(UInt8(ascii: "["))
            for (i, v) in values.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                appendString(v, to: &out)
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
                    if let v = secrets.value(of: .custom(f.name)) { appendString(bytes: v, to: &out) } else { appendString("", to: &out) }
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
        secret(#","notes":"#, secrets.value(of: .notes))
        text(#","origin":"#, item.origin)
        secret(#","password":"#, secrets.value(of: .password))
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
        secret(#","totp":"#, secrets.value(of: .totp))
        text(#","type":"#, item.type.rawValue)
        texts(#","urls":"#, item.urls)
        text(#","user_prompt":"#, item.userPrompt)
        text(#","username":"#, item.username)
        out.append(UInt8(ascii: "}"))
    }
}
