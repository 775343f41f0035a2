/// VaultAuthority: the system key authority (`vault-authd`) and its client. Filled in by the
/// system-authority work.
public enum VaultAuthorityModule {}
