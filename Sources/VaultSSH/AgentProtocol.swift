/// The message numbers of the SSH agent protocol (draft-miller-ssh-agent, OpenSSH's
/// PROTOCOL.agent) that vault's agent answers.
public enum AgentMessage {
    public static let failure: UInt8 = 5
    public static let success: UInt8 = 6
    public static let requestIdentities: UInt8 = 11
    public static let identitiesAnswer: UInt8 = 12
    public static let signRequest: UInt8 = 13
    public static let signResponse: UInt8 = 14
    public static let addIdentity: UInt8 = 17
    public static let removeIdentity: UInt8 = 18
    public static let removeAllIdentities: UInt8 = 19
    public static let addSmartcardKey: UInt8 = 20
    public static let removeSmartcardKey: UInt8 = 21
    public static let lock: UInt8 = 22
    public static let unlock: UInt8 = 23
    public static let addIDConstrained: UInt8 = 25
    public static let addSmartcardKeyConstrained: UInt8 = 26
    public static let `extension`: UInt8 = 27
    public static let extensionFailure: UInt8 = 28
    /// The SSH-1 "remove all RSA identities", which OpenSSH's agent still treats as remove-all.
    public static let removeAllRSAIdentities: UInt8 = 9

    /// Key constraints of an added identity.
    public static let constrainLifetime: UInt8 = 1
    public static let constrainConfirm: UInt8 = 2
    public static let constrainMaxSign: UInt8 = 3
    public static let constrainExtension: UInt8 = 255
}

/// The agent's limits, OpenSSH's where it has one.
public enum AgentLimit {
    /// The longest message accepted (OpenSSH's `AGENT_MAX_LEN`, 256 KiB); a longer one closes
    /// the connection.
    public static let message = 256 * 1024
    /// Session bindings per connection (`AGENT_MAX_SESSION_IDS`).
    public static let sessionBinds = 16
    /// The longest session identifier (`AGENT_MAX_SID_LEN`).
    public static let sessionIDBytes = 128
    /// Destination constraints per key (`AGENT_MAX_DEST_CONSTRAINTS`).
    public static let destinationConstraints = 1024
    /// Identities held at once.
    public static let identities = 4096
    /// Connections served at once, and per peer process.
    public static let connections = 128
    public static let connectionsPerProcess = 32
    /// Seconds a message has to arrive whole once its first byte came (a connection that
    /// stalls mid-message is closed then); with nothing begun, a connection may stay open.
    public static let messageSeconds: Double = 10
    /// Seconds a peer has to take a reply (and a second more per MiB).
    public static let replySeconds: Double = 10
}
