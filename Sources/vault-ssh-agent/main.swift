import VaultSSH
import VaultSystem

// The SSH agent in a lean process of its own (VaultSSH, VaultKit, VaultSystem; libcrypto opened
// on the first RSA, ECDSA or DSA key): `vault ssh-agent` runs it, so the keys and libcrypto never
// live in `vault` itself.
ProcessExit.exit(SSHAgentMain.run(CommandLine.arguments))
