import VaultKit

/// `vault git-credential get|store|erase` (and `git-credential-vault`): git's credential helper.
/// Reads git's description on standard input, lets `GitCredentialRules` decide, carries the plan
/// out and answers in git's format. Errors are one `vault: error:` line on stderr (git shows it
/// and carries on without the helper).
enum GitCredentialCommand {
    static let gitCredential = CommandSpec(
        name: "git-credential", summary: "git's credential helper: get, store, erase (git runs it)",
        usage: "vault [--vault NAME] [--passcode-fd N] git-credential get|store|erase",
        options: Auth.options,
        arguments: 1...1,
        examples: """
        ln -s "$(command -v vault)" ~/.local/bin/git-credential-vault
        git config --global credential.helper vault
        git config --global credential.helper 'vault --vault work'
        git config --global credential.helper '!vault --vault work git-credential'
        printf 'protocol=https\\nhost=example.com\\n\\n' | vault git-credential get
        """,
        run: { inv, ctx in
            do {
                try run(CredentialHelpers.withoutPrompts(inv), ctx)
            } catch let e as VaultError {
                ctx.stderr.write("vault: error: \(CredentialHelpers.oneLine(e))\n")
                throw VaultError.alreadyReported(code: e.exitCode)
            }
        })

    static func run(_ inv: Invocation, _ ctx: CommandContext) throws {
        var input = try CredentialHelpers.readInput(ctx, untilBlankLine: true)
        let request = GitCredentialRequest(parsing: input)
        CredentialHelpers.wipe(&input)
        // gitcredentials(7): an action a helper does not know is ignored, silently.
        guard let action = GitCredentialAction(rawValue: inv.arguments[0]), GitCredentialRules.needsVault(action, request),
              let target = request.target else { return }
        let purpose = switch action {
        case .get: "git credentials for \(target.host)"
        case .store: "save git credentials for \(target.host)"
        case .erase: "erase git credentials for \(target.host)"
        }
        let vault = try openAccess(inv, ctx, purpose: purpose)
        let plan = GitCredentialRules.plan(action, request, items: try CredentialHelpers.readableItems(vault))
        // The answer is assembled in guarded memory from the released secrets and written from
        // there: the password is never a String.
        var answer: SecretOutput?
        _ = try CredentialHelpers.carryOut(plan, on: vault, command: GitCredentialRules.auditCommand(action), inv, ctx,
                                           answerFields: [.custom(CredentialExtras.refreshTokenField)],
                                           accepts: { answer = try GitCredentialRules.answer(from: $0); return answer != nil })
        if let answer { ctx.stdout.writeSecret(answer) }
    }
}
