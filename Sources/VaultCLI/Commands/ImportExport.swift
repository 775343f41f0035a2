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
            var raw: [UInt8]
            do {
                raw = try readAll(fd: ctx.stdinFD, limit: 1 << 30, label: "standard input")
            } catch {
                throw VaultError.io(path: "standard input", (error as? SystemError)?.reason ?? "\(error)")
            }
            defer { wipe(&raw) }
            let items = try VaultJSON.items(from: raw)
            let vault = try openAccess(inv, ctx, purpose: "import \(items.count) item\(items.count == 1 ? "" : "s")")
            if inv.has("--force") {
                // Replacing an item with fingerprint login on changes what a touch protects: one touch.
                let guarded = try CredentialHelpers.readableItems(vault).filter(\.fingerprintLogin).map(\.name)
                if let first = items.lazy.compactMap({ try? Item.normalize(name: $0.name) }).first(where: guarded.contains) {
                    try Release.freshMatch(for: first, vault, inv, ctx)
                }
            }
            let n = try vault.add(contentsOf: items, replace: inv.has("--force"))
            ctx.say("vault: imported \(n) item\(n == 1 ? "" : "s")")
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
            for e in try Release.all(command: "export", from: vault, inv, ctx) {
                switch e {
                case .item(let item):
                    out.append(VaultJSON.object(item))
                case .damaged: damaged += 1
                }
            }
            ctx.stdout.write(jsonText(out))
            if damaged > 0 { throw VaultError.corrupt("\(damaged) damaged item(s) were not exported") }
        })
}
