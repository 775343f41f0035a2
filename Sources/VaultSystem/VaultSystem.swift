/// VaultSystem: the project's POSIX layer (errno checks, descriptors, private files, sockets,
/// child processes, signals, pseudo-terminals). Filled in by the layers work.
public enum VaultSystem {}
