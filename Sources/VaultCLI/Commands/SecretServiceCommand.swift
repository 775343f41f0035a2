import FoundationEssentials
import VaultKit
import VaultSystem

/// `vault secret-service`: the desktop's Secret Service provider. It runs `vault-secret-service`
/// (next to this binary) in this process's place, so `vault` itself never loads GLib.
enum SecretServiceCommand {
    /// The options of `secret-service`, declared once.
    enum Options {
        static let replace = OptionSpec.flag("--replace", "take org.freedesktop.secrets from its owner (gnome-keyring)")
        static let scanTimeout = OptionSpec.value("--scan-timeout", "D", "how long an unlock prompt waits for a finger (default 30s)")
        static let pinentry = OptionSpec.value("--pinentry", "PROGRAM", "ask the passcode through this pinentry when no finger unlocks")
        static let owner = OptionSpec.flag("--owner", "print who owns org.freedesktop.secrets (vault, gnome-keyring, nobody) and exit")
    }

    static let command = CommandSpec(
        name: "secret-service", summary: "serve vaults to the desktop's Secret Service clients (org.freedesktop.secrets)",
        usage: "vault secret-service [--replace] [--vault NAME]... [--scan-timeout D] [--pinentry PROGRAM] | --owner",
        options: [Options.replace, Options.scanTimeout, Options.pinentry, Options.owner],
        examples: """
          vault secret-service --replace                  # take over from gnome-keyring, serve the default vault
          vault secret-service --vault default --vault work
          systemctl --user enable --now vault-secret-service.service
          """,
        run: { inv, ctx in
            var args = ["vault-secret-service"]
            if inv.has(Options.owner) { args.append("--owner") }
            if inv.has(Options.replace) { args.append("--replace") }
            for v in inv.all(GlobalOptions.vault) { args += ["--vault", v] }
            if let t = inv[Options.scanTimeout] { args += ["--scan-timeout", t] }
            if let p = inv[Options.pinentry] { args += ["--pinentry", p] }
            let program = try servicePath()
            do {
                try ProcessReplacement.exec(program, arguments: args, environment: ctx.environment)
            } catch {
                throw VaultError.commandNotExecutable(program)
            }
        })

    /// `vault-secret-service` next to the running vault.
    static func servicePath() throws -> String {
        let path = ProcessIdentity.siblingProgram("vault-secret-service")
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw VaultError.failure("vault-secret-service is not installed next to vault (\(path))", hint: "reinstall vault (Vault/install.sh)")
        }
        return path
    }

    /// Who owns `org.freedesktop.secrets` on the session bus (`vault-secret-service --owner`, at
    /// most 2 s), or why it could not be told.
    static func owner(_ env: [String: String]) -> (owner: String?, detail: String) {
        guard env["DBUS_SESSION_BUS_ADDRESS"]?.isEmpty == false
              || env["XDG_RUNTIME_DIR"].map({ FileManager.default.fileExists(atPath: $0 + "/bus") }) == true else {
            return (nil, "no session bus")
        }
        guard let program = try? servicePath() else { return (nil, "vault-secret-service is not installed") }
        guard let run = try? ChildProcess.capture(path: program, arguments: [program, "--owner"], environment: env,
                                                  outputLimit: 64 << 10, errorKept: 0, timeoutSeconds: 2) else {
            return (nil, "cannot run \(program)")
        }
        if run.timedOut { return (nil, "the session bus does not answer") }
        let text = String(decoding: run.output, as: UTF8.self).trimmed()
        guard run.status == .exited(0), !text.isEmpty else { return (nil, "the session bus could not be asked") }
        return (text, text)
    }
}
