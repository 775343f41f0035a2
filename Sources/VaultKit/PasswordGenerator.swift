import FoundationEssentials
internal import VaultSystem

/// Random passwords from libsodium's uniform generator: characters from chosen classes (at least
/// one of each) or from a set given, or words of the EFF large word list.
public struct PasswordGenerator: Sendable {
    /// Character classes that may be used.
    public var lower = true, upper = true, digits = true, symbols = true
    /// Leave out characters easily taken for one another (`il1Lo0O`).
    public var excludeSimilar = false
    /// Draw from exactly these characters instead of the classes (no class rule then).
    public var characters: String?
    /// Number of characters.
    public var length: Int

    /// A generator for `length` characters of every class.
    public init(length: Int = 24) { self.length = length }

    static let lowerSet = Array("abcdefghijklmnopqrstuvwxyz")
    static let upperSet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    static let digitSet = Array("0123456789")
    static let symbolSet = Array("!#$%&()*+,-./:;<=>?@[]^_{}~")
    /// What `excludeSimilar` leaves out.
    public static let similar = Set("il1Lo0O")

    /// The classes in use, each without the similar characters when asked.
    private var classes: [[Character]] {
        [(lower, Self.lowerSet), (upper, Self.upperSet), (digits, Self.digitSet), (symbols, Self.symbolSet)]
            .filter { $0.0 }.map { $0.1.filter { !excludeSimilar || !Self.similar.contains($0) } }
    }

    /// The distinct characters of `characters`, without the similar ones when asked.
    private var customSet: [Character]? {
        guard let characters else { return nil }
        var seen = Set<Character>()
        return characters.filter { (!excludeSimilar || !Self.similar.contains($0)) && seen.insert($0).inserted }
    }

    /// A password with at least one character of each enabled class, never starting with `-`.
    /// - Throws: `VaultError.usage` for a length under 4 or over 1024, or no class enabled.
    public func generate() throws -> String {
        if let set = customSet {
            guard set.count >= 2 else { throw VaultError.usage("--chars needs at least 2 different characters (after --exclude-similar)") }
            guard (4...1024).contains(length) else { throw VaultError.usage("a generated password must be 4 to 1024 characters") }
            guard set.allSatisfy({ !$0.isWhitespace && !$0.unicodeScalars.contains { $0.properties.generalCategory == .control } }) else {
                throw VaultError.usage("--chars cannot contain white space or control characters")
            }
            return String((0..<length).map { _ in set[Int(randomUniform(UInt32(set.count)))] })
        }
        let classes = self.classes
        guard !classes.isEmpty else { throw VaultError.usage("no character class left to generate from") }
        guard (max(4, classes.count)...1024).contains(length) else {
            throw VaultError.usage("a generated password must be \(max(4, classes.count)) to 1024 characters")
        }
        let all = classes.flatMap { $0 }
        while true {
            let chars = (0..<length).map { _ in all[Int(randomUniform(UInt32(all.count)))] }
            // Never a leading '-': pasted after a command, it would be read as an option.
            if chars.first != "-", classes.allSatisfy({ set in chars.contains(where: set.contains) }) { return String(chars) }
        }
    }

    /// Bits of entropy of a `generate()` result (an upper bound: the class rule removes a little).
    public var entropyBits: Double {
        let n = customSet?.count ?? classes.map(\.count).reduce(0, +)
        return Double(length) * CLibrary.log2(Double(max(n, 1)))
    }

    /// `count` words drawn uniformly from the EFF large word list (7,776 words, about 12.9 bits
    /// a word) joined by `separator`.
    /// - Throws: `VaultError.usage` for fewer than 3 or more than 64 words.
    public static func words(_ count: Int, separator: String = "-") throws -> String {
        guard (3...64).contains(count) else { throw VaultError.usage("--words must be between 3 and 64") }
        let list = effLargeWordList
        return (0..<count).map { _ in list[Int(randomUniform(UInt32(list.count)))] }.joinedText(separator: separator)
    }

    /// Bits of entropy of `words(count)`.
    public static func wordsEntropyBits(_ count: Int) -> Double { Double(count) * CLibrary.log2(Double(effLargeWordList.count)) }
}

