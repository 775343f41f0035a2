import Foundation
import VaultKit
import VaultSystem

/// The portable JSON form of items: an array of objects with the fields of `Item`.
enum ImportExport {
    static let importCommand = CommandSpec(
        name: "import", summary: "add items from JSON on standard input (one transaction: all or nothing)",
        usage: "vault import [--force] < items.json",
        options: [.flag("--force", "replace items whose names exist")] + Auth.options,
        examples: """
        vault export --vault old > items.json && vault import --vault new < items.json
        echo '[{"name":"wifi","password":"hunter2"}]' | vault import
        """,
        run: { inv, ctx in
            var data: Data
            do {
                var raw = try readAll(fd: ctx.stdinFD, limit: 1 << 30, label: "standard input")
                data = Data(raw)
                wipe(&raw)
            } catch {
                throw VaultError.io(path: "standard input", (error as? SystemError)?.reason ?? "\(error)")
            }
            defer { data.resetBytes(in: 0..<data.count) }
            guard let array = try? JSONSerialization.jsonObject(with: data) as? [[String: Any]] else {
                throw VaultError.usage("standard input is not a JSON array of items", hint: "see 'vault help import'")
            }
            let now = unixNow()
            let items: [Item] = try array.enumerated().map { i, o in
                guard let name = o["name"] as? String else { throw VaultError.usage("item \(i + 1) has no name") }
                var item = Item(name: name, username: o["username"] as? String, password: o["password"] as? String,
                                urls: o["urls"] as? [String] ?? (o["url"] as? String).map { [$0] } ?? [],
                                notes: o["notes"] as? String, tags: o["tags"] as? [String] ?? [], totp: o["totp"] as? String,
                                origin: o["origin"] as? String, now: now)
                item.created = (o["created"] as? Int).map(Int64.init) ?? now
                return item
            }
            let vault = try openAccess(inv, ctx, purpose: "import \(items.count) items")
            let n = try vault.add(contentsOf: items, replace: inv.has("--force"))
            ctx.say("vault: imported \(n) items")
        })

    static let exportCommand = CommandSpec(
        name: "export", summary: "print every item, secrets included, as JSON (for a backup or another vault)",
        usage: "vault export > items.json",
        options: Auth.options,
        examples: "vault export | gpg -e -r me > vault-backup.json.gpg",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "export every item")
            var out: [[String: Any]] = []
            var damaged = 0
            for e in try vault.releaseAll(command: "export") {
                switch e {
                case .item(let item):
                    var o = listingJSON(item)
                    if let p = item.password { o["password"] = p }
                    if let t = item.totp { o["totp"] = t }
                    if let n = item.notes { o["notes"] = n }
                    out.append(o)
                case .damaged: damaged += 1
                }
            }
            ctx.stdout.write(jsonText(out))
            if damaged > 0 { throw VaultError.corrupt("\(damaged) damaged item(s) were not exported") }
        })
}
