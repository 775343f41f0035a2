import FoundationEssentials
import VaultKit
import VaultOTP

/// `vault otp NAME`: the current one-time code of an item's TOTP or HOTP secret.
enum OTPCommand {
    /// The options of `otp`, declared once: the table lists them and the command reads them.
    enum OTPOptions {
        static let json = OptionSpec.flag("--json", "print {\"code\", \"type\", \"seconds_left\", \"period\"}")
    }

    static let otp = CommandSpec(
        name: "otp", summary: "print the current one-time code of a login (TOTP, or HOTP with its counter advanced)",
        usage: "vault otp NAME [--json]",
        options: [OTPOptions.json] + Auth.options,
        arguments: 1...1,
        examples: """
        vault otp github
        vault otp github --json | jq -r .seconds_left
        vault get github --field totp-uri
        """,
        run: { inv, ctx in
            let name = try Item.normalize(name: inv.arguments[0])
            let vault = try openAccess(inv, ctx, purpose: "make a code for '\(name)'")
            let code: OTPCode
            do {
                code = try current(try ItemLookup.existing(name, in: vault), command: "otp", from: vault, inv, ctx)
            } catch VaultError.failure(let message, nil) where message.hasSuffix("has no TOTP secret") {
                throw VaultError.failure(message, hint: "add one with 'printf '%s\\n' \"$URI\" | vault edit \(name) --totp-stdin' (an otpauth:// URI or a base32 secret)")
            }
            if inv.has(OTPOptions.json) {
                var o: [String: Any] = ["code": code.code, "type": code.advancedURI == nil ? "totp" : "hotp"]
                if let left = code.secondsRemaining { o["seconds_left"] = left }
                if let p = code.period { o["period"] = p }
                ctx.stdout.write(jsonText(o))
            } else {
                ctx.stdout.write(code.code + "\n")
            }
        })

    /// The item's code now; an HOTP counter is advanced and stored before the code is returned,
    /// by compare and set (the store applies it only if the URI is still the one the code came
    /// from), so two commands at once never hand out one code twice: the later one reads again.
    /// The TOTP secret's release is audited.
    static func current(_ name: String, command: String, from vault: any VaultAccess, _ inv: Invocation, _ ctx: CommandContext) throws -> OTPCode {
        var attempt = 0
        while true {
            let item = try Release.item(name, fields: .fields([.totp]), command: command, from: vault, inv, ctx)
            let code = try OTP.code(for: item, at: Date(timeIntervalSince1970: TimeInterval(ctx.clock())))
            guard let next = code.advancedURI else { return code }
            var change = ItemChange()
            change.totp = next
            change.requireTOTP = item.totp
            do {
                try vault.update(item.name, change)
                return code
            } catch VaultError.changedMeanwhile where attempt < 20 {
                attempt += 1
            }
        }
    }
}
