import Foundation
import VaultKit
import VaultSystem

/// The portable JSON form of items: an array of objects with the fields of `Item`.
enum ImportExport {
    static let importCommand = CommandSpec(
        name: "import", summary: "add items from JSON on standard input (one transaction: all or nothing)",
        usage: "vault import [--force] [--json] < items.json",
        options: [.flag("--force", "replace items whose names exist"),
                  .flag("--json", "print the counts as JSON: imported, added, replaced")] + Auth.options,
        examples: """
        vault export --vault old > items.json && vault import --vault new < items.json
        echo '[{"name":"wifi","password":"hunter2"}]' | vault import
        """,
        run: { inv, ctx in
            var raw: [UInt8]
            do {
                raw = try readAll(fd: ctx.stdinFD, limit: 1 << 30, label: "standard input")
            } catch {
                throw VaultError.io(path: "standard input", (error as? SystemError)?.reason ?? "\(error)")
            }
            defer { wipe(&raw) }
            let items = try VaultJSON.items(from: raw)
            let vault = try openAccess(inv, ctx, purpose: "import \(items.count) items")
            if inv.has("--force") {
                // Replacing an item with fingerprint login on changes what a touch protects: one touch.
                let guarded = try CredentialHelpers.readableItems(vault).filter(\.fingerprintLogin).map(\.name)
                if let first = items.lazy.compactMap({ try? Item.normalize(name: $0.name) }).first(where: guarded.contains) {
                    try Release.freshMatch(for: first, vault, inv, ctx)
                }
            }
            let replaced = inv.has("--json") && inv.has("--force")
                ? Set(try CredentialHelpers.readableItems(vault).map(\.name)).intersection(items.compactMap { try? Item.normalize(name: $0.name) }).count
                : 0
            let n = try vault.add(contentsOf: items, replace: inv.has("--force"))
            if inv.has("--json") { ctx.stdout.write(jsonText(["imported": n, "added": n - replaced, "replaced": replaced])) }
            ctx.say("vault: imported \(n) items")
        })

    static let exportCommand = CommandSpec(
        name: "export", summary: "print every item, secrets included, as JSON (for a backup or another vault)",
        usage: "vault export > items.json",
        options: Auth.options,
        examples: "vault export | gpg -e -r me > vault-backup.json.gpg",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "export every item")
            // Written as read: one item's JSON at a time, never the whole vault in memory.
            var damaged = 0, first = true
            try Release.each(command: "export", from: vault, inv, ctx) { e in
                switch e {
                case .item(let item):
                    var text = (first ? "[" : ",\n") + jsonText(VaultJSON.object(item)).dropLast()
                    ctx.stdout.write(text)
                    text.removeAll()
                    first = false
                case .damaged: damaged += 1
                }
            }
            ctx.stdout.write(first ? "[]\n" : "]\n")
            if damaged > 0 { throw VaultError.corrupt("\(damaged) damaged item(s) were not exported") }
        })
}
