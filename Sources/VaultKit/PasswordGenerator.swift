import Foundation

/// Random passwords from libsodium's uniform generator: characters from chosen classes (at least
/// one of each), or pronounceable words.
public struct PasswordGenerator: Sendable {
    /// Character classes that may be used.
    public var lower = true, upper = true, digits = true, symbols = true
    /// Number of characters.
    public var length: Int

    /// A generator for `length` characters of every class.
    public init(length: Int = 24) { self.length = length }

    static let lowerSet = Array("abcdefghijklmnopqrstuvwxyz")
    static let upperSet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    static let digitSet = Array("0123456789")
    static let symbolSet = Array("!#$%&()*+,-./:;<=>?@[]^_{}~")

    /// A password with at least one character of each enabled class, never starting with `-`.
    /// - Throws: `VaultError.usage` for a length under 4 or over 1024, or no class enabled.
    public func generate() throws -> String {
        let classes = [(lower, Self.lowerSet), (upper, Self.upperSet), (digits, Self.digitSet), (symbols, Self.symbolSet)]
            .filter { $0.0 }.map { $0.1 }
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
        let n = [(lower, 26), (upper, 26), (digits, 10), (symbols, 27)].filter { $0.0 }.map { $0.1 }.reduce(0, +)
        return Double(length) * log2(Double(max(n, 1)))
    }

    static let consonants = Array("bdfghjklmnprstvz")
    static let vowels = Array("aeiou")

    /// `count` pronounceable words of three consonant-vowel syllables (16*5 = 80 syllables, about
    /// 19 bits a word) joined by `separator`.
    /// - Throws: `VaultError.usage` for fewer than 3 or more than 64 words.
    public static func words(_ count: Int, separator: String = "-") throws -> String {
        guard (3...64).contains(count) else { throw VaultError.usage("--words must be between 3 and 64") }
        return (0..<count).map { _ in
            String((0..<3).flatMap { _ in
                [consonants[Int(randomUniform(UInt32(consonants.count)))], vowels[Int(randomUniform(UInt32(vowels.count)))]]
            })
        }.joined(separator: separator)
    }

    /// Bits of entropy of `words(count)`.
    public static func wordsEntropyBits(_ count: Int) -> Double { Double(count) * 3 * log2(80) }
}

