import VaultKit
import VaultSystem

/// `vault edit NAME --notes-edit`: the notes go to a file in a private tmpfs folder
/// (`ScratchFolder`: 0700 under `$XDG_RUNTIME_DIR`, else `/dev/shm`), the person's `$VISUAL` or
/// `$EDITOR` (else `vi`) edits it on the terminal, and the folder is wiped (zeros over every
/// file in it, the editor's swap and backup files too) and removed, whatever happened.
enum NotesEditor {
    /// What the editing did.
    enum Outcome: Equatable {
        case unchanged
        /// The file was left empty: the notes are removed.
        case cleared
        case changed(String)
    }

    /// The most a notes file may hold when it comes back.
    static let limit = 1 << 20

    /// Edits the notes of `name` (released as `get --field notes` is: a fresh match for an item
    /// with fingerprint login on). One newline is added for the editor when the notes do not end
    /// in one, and one final newline is dropped when read back.
    /// - Throws: `.io` when no tmpfs folder can be made or the file cannot be read back,
    ///   `.failure` when the editor fails (nothing is changed), `.usage` for notes that are not UTF-8.
    static func edit(_ name: String, in vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext) throws -> Outcome {
        var old: [UInt8] = []
        defer { wipe(&old) }
        if try vault.overview(named: name).hasNotes {
            let secret = try Release.guarded(vault, inv, ctx) {
                try vault.releaseSecret(named: name, field: .notes, command: "edit", freshMatch: $0)
            }
            old = secret.exposedBytes()
        }
        let folder: ScratchFolder
        do { folder = try ScratchFolder.make("notes", environment: ctx.environment) } catch {
            throw VaultError.io(path: error.path ?? "the temporary folder", error.reason + "; the notes are not written to a disk")
        }
        defer { folder.wipe() }
        var shown = old
        defer { wipe(&shown) }
        if shown.last != 10 { shown.append(10) }
        let file: String
        do { file = try shown.withUnsafeBytes { try folder.create("notes.txt", $0) } } catch let e as SystemError {
            throw VaultError.io(path: e.path ?? folder.path, e.reason)
        }
        let editor = [ctx.environment["VISUAL"], ctx.environment["EDITOR"]].compactMap { $0 }.first { !$0.isEmpty } ?? "vi"
        let status: ExitStatus
        do {
            // As git runs it: through the shell, so `EDITOR="code --wait"` works.
            let child = try ChildProcess.spawn(SpawnRequest(
                path: "/bin/sh", arguments: ["sh", "-c", editor + " \"$1\"", "vault-edit", file], environment: ctx.environment,
                fileActions: [.open(0, "/dev/tty", .readWrite), .dup2(from: 0, to: 1), .dup2(from: 0, to: 2)]))
            status = try child.wait()
        } catch {
            throw VaultError.failure("cannot run the editor '\(editor)': \(error.reason)")
        }
        guard status.isSuccess else {
            throw VaultError.failure("the editor '\(editor)' ended with \(status); the notes of '\(name)' were not changed")
        }
        var new: [UInt8]
        do {
            let fd = try FileDescriptor.open(file, .readOnly, options: [.noFollow])
            new = try fd.readAll(limit: limit)
        } catch {
            throw VaultError.io(path: file, error.reason + "; the notes of '\(name)' were not changed")
        }
        defer { wipe(&new) }
        if new.last == 10 { new.removeLast() }
        if new == old || (old.last == 10 && new + [10] == old) { return .unchanged }
        if new.isEmpty { return .cleared }
        guard let text = String(validating: new, as: UTF8.self) else {
            throw VaultError.usage("the notes are not valid UTF-8; the notes of '\(name)' were not changed")
        }
        return .changed(text)
    }
}
