import Foundation
import VaultAuthority

// The system key authority: runs as its own user (vault-auth), normally from its systemd unit.
// The readers are libfprint's, linked here only (vault itself never loads libfprint).
exit(AuthorityDaemon.run(CommandLine.arguments, environment: ProcessInfo.processInfo.environment,
                         readers: { testMode in LibfprintReaders(allowVirtual: testMode) }))
