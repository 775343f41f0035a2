import FoundationEssentials
import VaultKit

/// One side of a three-way merge of an item: its content (nil: deleted or never there) and the
/// version record that wrote it.
struct MergeSide {
    var item: Item?
    var version: ItemVersion?
}

/// The three-way merge of one item changed on both sides (docs/cli.md, "Merge rules").
enum ItemMerge {
    /// What a merge gives: the item (nil: deleted on both sides) and what it resolved.
    struct Outcome {
        var item: Item?
        var conflicts: [ConflictRecord] = []
    }

    /// Merges `ours` and `theirs` against `base`, field by field. A field changed on one side
    /// takes that side's value; changed on both to different values, the later version (hybrid
    /// logical clock, then device id) wins and the other value is kept: a password in the item's
    /// history, every field in a conflict record. An edit against a delete keeps the edit.
    static func merge(id: String, base: Item?, ours: MergeSide, theirs: MergeSide, now: Int64) -> Outcome {
        guard let o = ours.item else {
            guard let t = theirs.item else { return Outcome(item: nil) }
            return Outcome(item: t, conflicts: [editKept(id: id, t, by: theirs, now: now)])
        }
        guard let t = theirs.item else {
            return Outcome(item: o, conflicts: [editKept(id: id, o, by: ours, now: now)])
        }
        let b = base ?? Item(name: o.name, now: min(o.created, t.created))
        let oursWins = (theirs.version ?? ItemVersion(hlc: 0, device: [])) < (ours.version ?? ItemVersion(hlc: 0, device: []))
        let winner = oursWins ? ours.version : theirs.version, loser = oursWins ? theirs.version : ours.version
        var conflicts: [ConflictRecord] = []
        var m = o

        func pick<T: Equatable>(_ field: String, _ get: (Item) -> T, secret: Bool = false, show: (T) -> String?) -> T {
            let bv = get(b), ov = get(o), tv = get(t)
            if ov == tv || tv == bv { return ov }
            if ov == bv { return tv }
            let (keep, lose) = oursWins ? (ov, tv) : (tv, ov)
            conflicts.append(ConflictRecord(kind: "field", item: id, name: "", field: field, kept: show(keep), lost: show(lose),
                                            secret: secret, winner: hex(winner), loser: hex(loser), time: now))
            return keep
        }
        let text: (String?) -> String? = { $0 }
        let list: ([String]) -> String? = { $0.joinedText(separator: ", ") }
        m.name = pick("name", \.name, show: { $0 })
        m.type = pick("type", \.type, show: { $0.rawValue })
        m.username = pick("username", \.username, show: text)
        let basePassword = b.password
        m.password = pick("password", \.password, secret: true, show: text)
        m.urls = pick("urls", \.urls, show: list)
        m.notes = pick("notes", \.notes, secret: true, show: text)
        m.tags = pick("tags", \.tags, show: list)
        m.totp = pick("totp", \.totp, secret: true, show: text)
        m.fingerprintLogin = pick("fingerprint-login", \.fingerprintLogin, show: { $0 ? "on" : "off" })
        m.origin = pick("origin", \.origin, show: text)
        m.userPrompt = pick("user-prompt", \.userPrompt, show: text)
        m.passwordPrompt = pick("password-prompt", \.passwordPrompt, show: text)
        m.fields = mergeFields(base: b.fields, ours: o.fields, theirs: t.fields, oursWins: oursWins) { field, kept, lost, secret in
            conflicts.append(ConflictRecord(kind: "field", item: id, name: "", field: "field:" + field, kept: kept, lost: lost,
                                            secret: secret, winner: hex(winner), loser: hex(loser), time: now))
        }
        // Every former password of both sides stays; the losing password joins them.
        var history = o.passwordHistory
        for h in t.passwordHistory where !history.contains(h) { history.append(h) }
        for c in conflicts where c.field == "password" {
            if let lost = c.lost, !history.contains(where: { $0.password == lost }) { history.append(PasswordChange(password: lost, replaced: now)) }
        }
        // The side that changed the password made its own history entry for the base's one.
        if let bp = basePassword, bp != m.password, !history.contains(where: { $0.password == bp }) {
            history.append(PasswordChange(password: bp, replaced: now))
        }
        history.sort { $0.replaced != $1.replaced ? $0.replaced < $1.replaced : $0.password < $1.password }
        m.passwordHistory = Array(history.suffix(Item.historyLimit))
        m.created = min(o.created, t.created)
        m.modified = max(o.modified, t.modified)
        for i in conflicts.indices { conflicts[i].name = m.name }
        return Outcome(item: m, conflicts: conflicts)
    }

    /// Custom fields merged by name, in ours' order then theirs' new ones.
    static func mergeFields(base: [CustomField], ours: [CustomField], theirs: [CustomField], oursWins: Bool,
                            conflict: (String, String?, String?, Bool) -> Void) -> [CustomField] {
        var names: [String] = []
        for f in ours + theirs + base where !names.contains(f.name) { names.append(f.name) }
        var out: [CustomField] = []
        for n in names {
            let b = base.first { $0.name == n }, o = ours.first { $0.name == n }, t = theirs.first { $0.name == n }
            let chosen: CustomField?
            if o == t || t == b { chosen = o } else if o == b { chosen = t } else if o == nil || t == nil {
                chosen = o ?? t
            } else {
                chosen = oursWins ? o : t
                let lost = oursWins ? t : o
                conflict(n, chosen?.value, lost?.value, (chosen?.kind.isSecret ?? false) || (lost?.kind.isSecret ?? false))
            }
            if let chosen { out.append(chosen) }
        }
        return out
    }

    static func editKept(id: String, _ item: Item, by side: MergeSide, now: Int64) -> ConflictRecord {
        ConflictRecord(kind: "edit-kept", item: id, name: item.name, field: nil, kept: nil, lost: nil, secret: false,
                       winner: hex(side.version), loser: nil, time: now)
    }

    static func hex(_ v: ItemVersion?) -> String { v.map { hexString($0.device) } ?? "" }
}
