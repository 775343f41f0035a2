import Foundation
import VaultAgent

// The lean agent process: VaultAgent, VaultKit and VaultSystem only (no libfprint, no GLib).
// `vault unlock` starts it as `vault-agent --socket PATH --exit-idle SECONDS`.
exit(AgentMain.run(CommandLine.arguments))
