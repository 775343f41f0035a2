import SecretService
import VaultSystem

// The Secret Service provider: GDBus, libgcrypt and VaultAgent's client (no libfprint, and never
// inside `vault`, which stays free of GLib). `vault secret-service` runs it; so does D-Bus
// activation (Vault/org.freedesktop.secrets.service) and the user unit.
ProcessExit.exit(SecretServiceMain.run(CommandLine.arguments))
