internal import VaultSystem
public import VaultKit
/// One decrypted entry of a `pass` store, read the way pass users and its extensions write it:
/// the first line is the password; `username:`/`user:`/`login:`, `url:`/`website:` lines fill
/// those fields; an `otpauth://` line (pass-otp) is the TOTP secret; other `key: value` lines
/// become custom fields; anything else is the notes.
public enum PassEntry {
    /// The item for the entry at `path` (relative to the store, without `.gpg`) with `text`.
    public static func item(path: String, text: String, modified: Int64?, now: Int64) -> Item {
        var item = Item(name: path, now: now)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        if let first = lines.first, !first.isEmpty { item.password = first }
        var notes: [String] = []
        for line in lines.dropFirst() {
            if line.lowercased().hasPrefix("otpauth://") && item.totp == nil { item.totp = line; continue }
            if let colon = line.firstIndex(of: ":"), !line[..<colon].contains(" "), colon != line.startIndex {
                let key = String(line[..<colon]), value = line[line.index(after: colon)...].trimmed(.whitespaces)
                let lower = key.lowercased()
                if ["username", "user", "login", "email"].contains(lower), item.username == nil { item.username = value; continue }
                if ["url", "website", "site"].contains(lower) { item.urls.append(value); continue }
                if !["otpauth", "http", "https"].contains(lower), !value.isEmpty, item.customField(key) == nil {
                    item.fields.append(CustomField(name: key, value: value))
                    continue
                }
            }
            notes.append(line)
        }
        while notes.last?.isEmpty == true { notes.removeLast() }
        if !notes.isEmpty { item.notes = notes.joinedText(separator: "\n") }
        if let modified { item.created = modified; item.modified = modified }
        return item
    }
}
