// vault-reader: the fingerprint reader of the embedded key authority, in a process of its own.
// vault starts it (next to itself) when a command needs the reader, and talks to it over a
// socketpair on standard input and output (ReaderLink); it is not meant to be run by hand.
import Foundation
import VaultSystem

ProcessHardening.closeInheritedDescriptors()
try? ProcessHardening.disableCoreDumps()
_ = ignoreBrokenPipe()
if CommandLine.arguments.count > 1 || isTerminal(0) {
    FileHandle.standardError.write(Data("vault-reader: started by vault when it needs the fingerprint reader; not run by hand\n".utf8))
    exit(2)
}
exit(ReaderServer().run())
