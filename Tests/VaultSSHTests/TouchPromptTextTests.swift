import Testing
@testable import VaultSSH

/// The text of a vault key's touch prompt: the peer's parts (program chain, SSHSIG namespace,
/// user name) bounded each on its own so the key and the destination host stay shown, control
/// characters replaced, and the batch a request joins keyed by the whole untruncated request.
@Suite struct SSHTouchPromptTextTests {
    let host = "SHA256:" + String(repeating: "h", count: 43)
    let fingerprint = "SHA256:" + String(repeating: "k", count: 43)

    func prompt(user: String? = nil, namespace: String? = nil, program: String = "ssh <- bash") -> (prompt: String, batch: String) {
        AgentHandler.touchPrompt(key: "gh", fingerprint: fingerprint, program: program, namespace: namespace,
                                 user: user, host: user == nil ? nil : host)
    }

    @Test func aLongUserNameNeverPushesTheHostOutOfThePrompt() {
        let shown = prompt(user: String(repeating: "u", count: 4000), program: String(repeating: "p", count: 4000)).prompt
        #expect(shown.hasSuffix("…@" + host), "\(shown)")
        #expect(shown.hasPrefix("sign with SSH key 'gh' (\(fingerprint)) for ppp"), "\(shown)")
        #expect(shown.unicodeScalars.count <= TouchPrompt.limit, "\(shown.unicodeScalars.count)")
        // Short parts are shown whole.
        #expect(prompt(user: "git").prompt == "sign with SSH key 'gh' (\(fingerprint)) for ssh <- bash to git@\(host)")
    }

    @Test func requestsDifferingPastWhatIsShownAreNotBatchedTogether() {
        let long = String(repeating: "u", count: 600)
        let a = prompt(user: long + "a"), b = prompt(user: long + "b")
        #expect(a.prompt == b.prompt, "both shown alike")
        #expect(a.batch != b.batch, "yet each asks for its own touch")
        #expect(prompt(user: long + "a").batch == a.batch, "the very same request joins")
        let n1 = prompt(namespace: String(repeating: "n", count: 600) + "1"), n2 = prompt(namespace: String(repeating: "n", count: 600) + "2")
        #expect(n1.prompt == n2.prompt && n1.batch != n2.batch)
        #expect(n1.prompt.hasSuffix("…'"), "\(n1.prompt)")
    }

    @Test func controlCharactersOfThePeerAreReplaced() {
        let shown = prompt(user: "a\u{1b}]0;x\u{07}\nb", program: "e\u{9b}vil").prompt
        #expect(!shown.unicodeScalars.contains { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) }, "\(shown)")
        #expect(shown.contains("for e?vil to a?]0;x??b@"), "\(shown)")
    }
}
