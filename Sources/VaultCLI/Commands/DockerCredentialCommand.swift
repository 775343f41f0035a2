import VaultKit

/// `vault docker-credential store|get|erase|list|version` (and `docker-credential-vault`): docker's
/// credential helper (docker-credential-helpers' protocol). Reads docker's input, lets
/// `DockerCredentialRules` decide, carries the plan out and answers in JSON. Every error is one
/// line on stdout, where docker reads it, with exit 1.
enum DockerCredentialCommand {
    static let dockerCredential = CommandSpec(
        name: "docker-credential", summary: "docker's credential helper: store, get, erase, list, version",
        usage: "vault [--vault NAME] [--passcode-fd N] docker-credential store|get|erase|list|version",
        options: Auth.options,
        arguments: 1...1,
        examples: """
        ln -s "$(command -v vault)" ~/.local/bin/docker-credential-vault
        echo '{ "credsStore": "vault" }' > ~/.docker/config.json     # merge with what is there
        vault unlock                      # docker passes no options: the helper uses the unlock session
        echo https://index.docker.io/v1/ | docker-credential-vault get
        """,
        run: { inv, ctx in
            do {
                try run(inv, ctx)
            } catch {
                ctx.stdout.write(line(error) + "\n")
                throw VaultError.alreadyReported(code: 1)
            }
        })

    /// What `version`, `--version` and `-v` print.
    static var versionLine: String { "docker-credential-vault (vault) \(VaultCLI.version)\n" }

    /// The one line docker reads on failure.
    static func line(_ error: any Error) -> String {
        switch error {
        case let e as DockerCredentialError: e.isProtocolText ? e.message : "vault: error: \(e.message)"
        case let e as VaultError: "vault: error: \(CredentialHelpers.oneLine(e))"
        default: "vault: error: \(error)"
        }
    }

    static func run(_ inv: Invocation, _ ctx: CommandContext) throws {
        let inv = CredentialHelpers.withoutPrompts(inv)
        guard let action = DockerCredentialAction(rawValue: inv.arguments[0]) else {
            throw DockerCredentialError.unknownAction(inv.arguments[0])
        }
        switch action {
        case .version:
            ctx.stdout.write(versionLine)

        case .store:
            var input = try CredentialHelpers.readInput(ctx, untilBlankLine: false)
            defer { CredentialHelpers.wipe(&input) }
            let credential = try DockerCredential(json: input)
            let vault = try openAccess(inv, ctx, purpose: "save docker credentials for \(credential.server.host)")
            let plan = DockerCredentialRules.store(credential, items: try CredentialHelpers.readableItems(vault))
            try CredentialHelpers.carryOut(plan, on: vault, command: DockerCredentialRules.auditCommand, inv, ctx)

        case .get:
            let (raw, server) = try DockerCredentialRules.serverURL(input: CredentialHelpers.readInput(ctx, untilBlankLine: false))
            let vault = try openAccess(inv, ctx, purpose: "docker credentials for \(server.host)")
            let plan = try DockerCredentialRules.get(server, items: try CredentialHelpers.readableItems(vault))
            guard let released = try CredentialHelpers.carryOut(plan, on: vault, command: DockerCredentialRules.auditCommand, inv, ctx) else {
                throw DockerCredentialError.notFound
            }
            // The JSON is written into guarded memory, the secret escaped byte by byte from the
            // released record: it is never a String.
            let out = try SecretOutput()
            released.withSecrets { s in
                let secret: Any = s.value(of: .password).map(JSONSecret.init) ?? ""
                JSONText.append(["ServerURL": raw, "Username": released.overview.item.username ?? "", "Secret": secret], to: out)
            }
            out.append("\n")
            ctx.stdout.writeSecret(out)

        case .erase:
            let (_, server) = try DockerCredentialRules.serverURL(input: CredentialHelpers.readInput(ctx, untilBlankLine: false))
            let vault = try openAccess(inv, ctx, purpose: "erase docker credentials for \(server.host)")
            let plan = try DockerCredentialRules.erase(server, items: try CredentialHelpers.readableItems(vault))
            try CredentialHelpers.carryOut(plan, on: vault, command: DockerCredentialRules.auditCommand, inv, ctx)

        case .list:
            let vault = try openAccess(inv, ctx, purpose: "list docker credentials")
            ctx.stdout.write(jsonText(DockerCredentialRules.list(try CredentialHelpers.readableItems(vault))))
        }
    }
}
