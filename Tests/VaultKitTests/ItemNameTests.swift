import Testing
@testable import VaultKit

/// Item names: the printable-ASCII path and the Unicode path apply the same rules.
@Suite struct ItemNameTests {
    @Test(arguments: ["github", "git/example.org/me", "a b", String(repeating: "x", count: 256), "~!@#$%^&*()_+{}|:<>?",
                      "a.b", "x/.y", "...", "a/..b", "~"])
    func printableASCIINamesAreKeptAsGiven(name: String) throws {
        #expect(try Item.normalize(name: name) == name)
    }

    @Test func unicodeNamesAreComposed() throws {
        #expect(try Item.normalize(name: "cafe\u{301}") == "caf\u{e9}")
        #expect(try Item.normalize(name: String(repeating: "\u{e9}", count: 256)).count == 256)
    }

    @Test(arguments: [
        ("", "1 to 256 characters"), (String(repeating: "x", count: 257), "1 to 256 characters"),
        (String(repeating: "\u{e9}", count: 257), "1 to 256 characters"), (String(repeating: "\u{1F600}", count: 257), "1 to 256"),
        (" lead", "start or end with a space"), ("trail ", "start or end with a space"), ("\u{3000}wide", "start or end with a space"),
        ("tab\there", "control characters"), ("nl\n", "control characters"), ("del\u{7F}", "control characters"),
        ("bad\u{FFFD}", "U+FFFD"), ("git\u{200B}hub", "invisible format"), ("rtl\u{202E}", "invisible format"),
        ("a/../b", "'.' or '..'"), ("./a", "'.' or '..'"), ("a/.", "'.' or '..'"), (".", "'.' or '..'"), ("..", "'.' or '..'"),
        (" ", "start or end with a space"), ("a/ ", "start or end with a space"),
    ])
    func badNamesAreRefusedOnEitherPath(name: String, reason: String) {
        do {
            _ = try Item.normalize(name: name)
            Issue.record("\(name.debugDescription) was accepted")
        } catch let e as VaultError {
            #expect(e.message.contains(reason), "\(name.debugDescription): \(e.message)")
        } catch {
            Issue.record("\(error)")
        }
    }
}
