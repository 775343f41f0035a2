import Foundation
import VaultAuthority

// The system key authority: runs as its own user (vault-auth), normally from its systemd unit.
exit(AuthorityDaemon.run(CommandLine.arguments, environment: ProcessInfo.processInfo.environment))
