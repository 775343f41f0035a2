import FoundationEssentials
import VaultKit
import VaultSystem

/// The credential helpers for git and docker: the `vault` binary run as `git-credential-vault` or
/// `docker-credential-vault` (argv[0]), or the verbs `vault git-credential ACTION` and
/// `vault docker-credential ACTION`. Both store ordinary vault items marked with an `origin`, read
/// the vault through `openAccess` (the unlock session when one is open) and never prompt. What
/// they read, store and erase is decided in VaultKit (`GitCredentialRules`,
/// `DockerCredentialRules`); the commands parse, carry out the plan and answer.
enum CredentialHelpers {
    /// The program a credential helper is started as, recognised by argv[0]'s last path component.
    enum Program: Equatable {
        case git, docker

        /// The helper that `argv0` names, or nil for plain `vault`.
        init?(argv0: String) {
            switch argv0.split(separator: "/").last.map(String.init) ?? argv0 {
            case "git-credential-vault": self = .git
            case "docker-credential-vault": self = .docker
            default: return nil
            }
        }
    }

    /// The verbs, for the command table.
    static var commands: [CommandSpec] { [GitCredentialCommand.gitCredential, DockerCredentialCommand.dockerCredential] }

    /// Verb names that `vault help` leaves out of its overview: programs call them, people rarely do.
    static let unlistedNames: Set<String> = ["git-credential", "docker-credential", "clipboard-clear"]

    /// Runs the helper `program` with the arguments after argv[0]; returns the exit code.
    static func main(_ program: Program, _ arguments: [String], context ctx: CommandContext) -> Int32 {
        switch program {
        case .git:
            return VaultCLI.run(["git-credential"] + arguments, context: ctx)
        case .docker:
            // `--version` and `-v`, as docker-credential-helpers' own helpers answer them.
            if arguments == ["--version"] || arguments == ["-v"] {
                ctx.stdout.write(DockerCredentialCommand.versionLine)
                return 0
            }
            // Docker reads a helper's errors from stdout, usage errors included.
            do {
                guard let inv = try Parser.parse(["docker-credential"] + arguments,
                                                 table: [DockerCredentialCommand.dockerCredential]) else { return 0 }
                if inv.has(GlobalOptions.help) {
                    ctx.stdout.write(Help.command(inv.command))
                    return 0
                }
                try DockerCredentialCommand.run(inv, ctx)
                return 0
            } catch VaultError.alreadyReported(let code) {
                return code
            } catch {
                ctx.stdout.write(DockerCredentialCommand.line(error) + "\n")
                return 1
            }
        }
    }

    /// Carries out `plan` on `vault`. Every password read, to answer or to compare with the one
    /// the helper was given, is a release of the `password` field audited as `command`, in
    /// guarded memory (compared there, byte by byte). Returns the released item that answers a
    /// `.release` or `.releaseFirst` plan (for `.releaseFirst`, the first that `accepts`), else
    /// nil; an answer also releases `answerFields` (git's refresh token) when the item has them.
    @discardableResult
    static func carryOut(_ plan: CredentialPlan, on vault: any VaultAccess, command: String,
                         _ inv: Invocation, _ ctx: CommandContext, answerFields: [ItemField] = [],
                         accepts: (ReleasedItem) throws -> Bool = { _ in true }) throws -> ReleasedItem? {
        func release(_ name: String) throws -> ReleasedItem {
            try Release.secrets(name, fields: .fields([.password] + answerFields), command: command, from: vault, inv, ctx)
        }
        func releasedPasswordIs(_ name: String, _ password: String) throws -> Bool {
            try Release.secrets(name, fields: .fields([.password]), command: command, from: vault, inv, ctx).withSecrets {
                $0.value(of: .password)?.elementsEqual(password.utf8) ?? false
            }
        }
        switch plan {
        case .none:
            return nil
        case .release(let name):
            return try release(name)
        case .releaseFirst(let names):
            for name in names {
                guard try vault.overview(named: name).hasPassword else { continue }
                let item = try release(name)
                if try accepts(item) { return item }
            }
            return nil
        case .update(let name, let change):
            try vault.update(name, change)
            return nil
        case .add(let item):
            try vault.add(item, replace: false)
            return nil
        case .remove(let names):
            for name in names { try vault.remove(name) }
            return nil
        case .compareThenRemove(let names, let password):
            for name in names where try releasedPasswordIs(name, password) { try vault.remove(name) }
            return nil
        case .compareThenWrite(let names, let password, let otherwise):
            for name in names where try releasedPasswordIs(name, password) { return nil }
            return try carryOut(otherwise, on: vault, command: command, inv, ctx)
        }
    }

    /// The item list a helper decides on, damaged rows left out. It carries no secrets: the plan
    /// says which items to release.
    static func readableItems(_ vault: any VaultAccess) throws -> [Item] {
        try vault.allItems().compactMap { if case .item(let i) = $0 { i } else { nil } }
    }

    /// The invocation with `--no-input` set: a helper runs under another program, with no one to
    /// answer a prompt (a finger on the reader, the session or `--passcode-fd` still unlock).
    static func withoutPrompts(_ inv: Invocation) -> Invocation {
        var inv = inv
        inv.set(GlobalOptions.noInput)
        return inv
    }

    /// An error's message with its hint in parentheses: the helpers' callers show one line.
    static func oneLine(_ e: VaultError) -> String {
        e.hint.map { "\(e.message) (\($0))" } ?? e.message
    }

    /// Everything on standard input up to end of file, or up to a blank line when `untilBlankLine`
    /// (git's format); at most 1 MiB.
    static func readInput(_ ctx: CommandContext, untilBlankLine: Bool) throws -> [UInt8] {
        let limit = 1 << 20
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n: Int
            do {
                n = try withUnsafeMutableBytes(of: &byte) { try readSome(fd: ctx.stdinFD, into: $0, label: "standard input") }
            } catch {
                throw VaultError.io(path: "standard input", (error as? SystemError)?.reason ?? "\(error)")
            }
            if n == 0 { break }
            if untilBlankLine && byte == 10 && (bytes.isEmpty || bytes.last == 10) { break }
            guard bytes.count < limit else { throw VaultError.usage("standard input is longer than 1 MiB") }
            bytes.append(byte)
        }
        byte = 0
        return bytes
    }

    /// Overwrites a buffer that held a secret.
    static func wipe(_ bytes: inout [UInt8]) {
        for i in bytes.indices { bytes[i] = 0 }
        bytes.removeAll()
    }
}
