import VaultAgent
import VaultSystem

// The lean agent process: VaultAgent, VaultKit and VaultSystem only (no libfprint, no GLib).
// `vault unlock` starts it as `vault-agent --socket PATH --exit-idle SECONDS`.
ProcessExit.exit(AgentMain.run(CommandLine.arguments))
