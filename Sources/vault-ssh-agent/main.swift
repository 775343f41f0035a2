import VaultSSH
import VaultSystem
import VaultDBus

// The SSH agent in a lean process of its own (VaultSSH, VaultKit, VaultSystem; libcrypto opened
// on the first RSA, ECDSA or DSA key; GDBus for the desktop's notifications of a touch prompt):
// `vault ssh-agent` runs it, so the keys, libcrypto and GLib never live in `vault` itself.
ProcessExit.exit(SSHAgentMain.run(CommandLine.arguments, notifier: { summary, body, environment in
    let shown = DesktopNotification.OnSessionBus(summary: summary, body: body, environment: environment)
    return { shown.close() }
}))
