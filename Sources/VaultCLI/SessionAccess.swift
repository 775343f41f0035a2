import Foundation
import VaultKit

/// The vault as served by the unlock session's agent.
final class SessionAccess {
    /// The session of `location`, or nil when none is open.
    static func connect(_ location: VaultLocation, _ inv: Invocation, _ ctx: CommandContext) throws -> (any VaultAccess)? {
        nil
    }
}
