import Foundation
import VaultAuthority

// The system key authority: runs as its own user (vault-auth), normally from its systemd unit.
// The readers are libfprint's, linked here only (vault itself never loads libfprint).
exit(AuthorityDaemon.run(CommandLine.arguments, environment: ProcessInfo.processInfo.environment,
                         readers: { settings in
                             BackendReaders(backend: ReaderBackend(rawValue: settings.backend) ?? .auto,
                                            fprintd: FprintdReaders(printsFolder: settings.fprintdState),
                                            libfprint: LibfprintReaders(allowVirtual: settings.testMode))
                         }))
