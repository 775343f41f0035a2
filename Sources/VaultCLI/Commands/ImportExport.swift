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
            let vault = try openAccess(inv, ctx, purpose: "import \(items.count) item\(items.count == 1 ? "" : "s")")
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
            ctx.say("vault: imported \(n) item\(n == 1 ? "" : "s")")
        })

    static let exportCommand = CommandSpec(
        name: "export", summary: "print every item, secrets included, as JSON (for a backup or another vault)",
        usage: "vault export > items.json",
        options: Auth.options,
        examples: "vault export | gpg -e -r me > vault-backup.json.gpg",
        run: { inv, ctx in
            let vault = try openAccess(inv, ctx, purpose: "export every item")
            // Written as read, about 64 KiB at a time: never the whole vault in memory.
            var damaged = 0, first = true
            var chunk: [UInt8] = []
            chunk.reserveCapacity(1 << 17)
            defer { wipe(&chunk) }
            func flush() {
                ctx.stdout.write(String(decoding: chunk, as: UTF8.self))
                wipe(&chunk)
                chunk.removeAll(keepingCapacity: true)
            }
            try Release.each(command: "export", from: vault, inv, ctx) { e in
                switch e {
                case .item(let item):
                    chunk += Array((first ? "[" : ",\n").utf8)
                    JSONText.append(VaultJSON.object(item), to: &chunk)
                    first = false
                    if chunk.count >= 1 << 16 { flush() }
                case .damaged: damaged += 1
                }
            }
            chunk += Array((first ? "[]\n" : "]\n").utf8)
            flush()
            if damaged > 0 { throw VaultError.corrupt("\(damaged) damaged item(s) were not exported") }
        })
}
