/// VaultAgent: the per-user unlock-session server and its client. Filled in by the layers work.
public enum VaultAgentModule {}
