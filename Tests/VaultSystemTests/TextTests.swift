import Foundation
import Testing
import VaultSystem

/// VaultSystem's text helpers replace Foundation calls in every module linked into `vault`: each
/// is checked against the Foundation call it replaces, on inputs that tell them apart.
@Suite struct TextTests {
    /// joinedText is the standard library's joined(separator:), for Strings and Substrings.
    @Test func joinedTextIsJoined() {
        let cases: [[String]] = [[], [""], ["a"], ["a", "b"], ["", "", ""], ["é", "e\u{301}", "🧑‍💻"], ["x, y", "z"]]
        for parts in cases {
            for separator in ["", ", ", "\u{301}", "/"] {
                #expect(parts.joinedText(separator: separator) == parts.joined(separator: separator), "\(parts) \(separator)")
                let subs = parts.map { Substring($0) }
                #expect(subs.joinedText(separator: separator) == subs.joined(separator: separator), "\(parts) \(separator)")
            }
        }
        #expect("a//b/c".split(separator: "/").dropLast().joinedText(separator: "/") == "a/b")
    }

    static let samples = ["", " ", "\t a b \n", "\u{3000}x\u{00A0}", "\u{2028}y\u{85}", "\r\nline\r\n", "  \u{FEFF}z ",
                          "Café", "e\u{301}", "\u{1E0A}\u{323}", "한국어", "Å\u{212B}", "💳 card", "a/b%2F?c#d@e", "%zz", "%4",
                          "%C3%A9", "%FF", "plain"]

    @Test func trimmingMatchesFoundation() {
        for s in Self.samples {
            #expect(s.trimmed() == s.trimmingCharacters(in: .whitespacesAndNewlines), "\(Array(s.unicodeScalars))")
            #expect(s.trimmed(.whitespaces) == s.trimmingCharacters(in: .whitespaces), "\(Array(s.unicodeScalars))")
            #expect(s.trimmed(.newlines) == s.trimmingCharacters(in: .newlines), "\(Array(s.unicodeScalars))")
            #expect(s.trimmed(where: { $0 == "/" }) == s.trimmingCharacters(in: CharacterSet(charactersIn: "/")))
        }
    }

    @Test func normalisationMatchesFoundation() {
        for s in Self.samples + ["\u{0390}", "\u{1F82}", "\u{FB2C}", "ḱṷ\u{0328}"] {
            #expect(Array(s.nfc.utf8) == Array(s.precomposedStringWithCanonicalMapping.utf8), "\(Array(s.unicodeScalars))")
            var nfd: [UInt8] = []
            s.withNFDBytes { nfd.append($0) }
            #expect(nfd == Array(s.decomposedStringWithCanonicalMapping.utf8), "\(Array(s.unicodeScalars))")
            var nfc: [UInt8] = []
            s.withNFCBytes { nfc.append($0) }
            #expect(nfc == Array(s.precomposedStringWithCanonicalMapping.utf8))
        }
    }

    @Test func percentCodingMatchesFoundation() {
        let special = "%?#/@"
        for s in Self.samples {
            #expect(s.percentDecoded == s.removingPercentEncoding, "\(s)")
            #expect(s.percentEncoded(keeping: \.isAlphanumeric) == s.addingPercentEncoding(withAllowedCharacters: .alphanumerics), "\(s)")
            let allowed = CharacterSet.whitespacesAndNewlines.union(CharacterSet(charactersIn: special)).inverted
            #expect(s.percentEncoded { !TrimSet.whitespacesAndNewlines.contains($0) && !special.unicodeScalars.contains($0) }
                    == s.addingPercentEncoding(withAllowedCharacters: allowed), "\(s)")
        }
    }

    @Test func searchAndReplaceMatchFoundationOnASCIIMarkers() {
        let texts = ["https://host/x", "no marker", "a: b: c", "ssh://u@h:22", "\n\nbody", "x\n\n", "::", "é: ü"]
        for t in texts {
            for needle in ["://", ": ", "\n\n", ":"] {
                let mine = t.byteRange(of: needle).map { t.distance(from: t.startIndex, to: $0.lowerBound) }
                let theirs = t.range(of: needle).map { t.distance(from: t.startIndex, to: $0.lowerBound) }
                #expect(mine == theirs, "\(t) \(needle)")
                #expect(t.replacingEvery(needle, with: "<>") == t.replacingOccurrences(of: needle, with: "<>"))
            }
        }
        let key = "-----BEGIN X-----\nabc\n-----END X-----\n-----END X-----"
        let start = key.byteRange(of: "-----BEGIN X-----")!
        let stop = key.byteRange(of: "-----END X-----", from: start.upperBound)!
        #expect(stop == key.range(of: "-----END X-----", range: start.upperBound..<key.endIndex))
        #expect("'a'b'".replacingEvery("'", with: "'\\''") == "'\\''a'\\''b'\\''")
    }

    @Test func pathsMatchNSString() {
        for p in ["/usr/bin/vault", "/vault", "/", "vault", "/a/b/", "/a//b", "a/b", "", "/run/user/1000/vault/agent.sock"] {
            #expect(PathText.folder(of: p) == (p as NSString).deletingLastPathComponent, "\(p)")
            #expect(PathText.lastComponent(of: p) == (p as NSString).lastPathComponent, "\(p)")
        }
        #expect(ProcessIdentity.siblingProgram("vault-agent").hasSuffix("/vault-agent"))
        #expect(PathText.folder(of: ProcessIdentity.siblingProgram("x")) == PathText.folder(of: ProcessIdentity.runningExecutable))
    }

    @Test func timesMatchISO8601DateFormatter() {
        let formatter = ISO8601DateFormatter()
        for t: Int64 in [0, 1, 59, 951_782_400, 1_700_000_000, 4_102_444_800, -1, -86_401, 253_402_300_799] {
            #expect(ISOTime.string(t) == formatter.string(from: Date(timeIntervalSince1970: TimeInterval(t))), "\(t)")
        }
    }

    @Test func homeDirectoryIsThePasswdEntry() throws {
        let home = try #require(ProcessIdentity.homeDirectory(of: getuid()))
        #expect(home == String(cString: getpwuid(getuid())!.pointee.pw_dir))
        #expect(ProcessIdentity.homeDirectory(of: 4_000_000_123) == nil)
    }
}

@Suite struct ThreadTests {
    @Test func aDetachedThreadRunsAndSignals() throws {
        let done = ThreadSignal()
        let lock = ThreadLock()
        nonisolated(unsafe) var count = 0
        for _ in 0..<8 {
            try Threads.detach(name: "a very long test thread name") {
                for _ in 0..<1000 { lock.withLock { count += 1 } }
                if lock.withLock({ count }) == 8000 { done.fire() }
            }
        }
        #expect(done.wait(seconds: 60))
        #expect(lock.withLock { count } == 8000)
    }

    @Test func aSignalNotFiredTimesOut() {
        let signal = ThreadSignal()
        let start = MonotonicClock.seconds()
        #expect(!signal.wait(seconds: 0.05))
        #expect(MonotonicClock.seconds() - start >= 0.05)
        signal.fire()
        #expect(signal.wait(seconds: 0))
    }

    @Test func aConditionWaitEndsAtItsTimeOrWhenBroadcast() throws {
        let condition = ThreadCondition()
        condition.lock()
        #expect(!condition.wait(seconds: 0.02))
        condition.unlock()
        nonisolated(unsafe) var ready = false
        try Threads.detach {
            condition.lock()
            ready = true
            condition.broadcast()
            condition.unlock()
        }
        condition.lock()
        while !ready { condition.wait(seconds: 60) }
        condition.unlock()
        #expect(ready)
    }
}

@Suite struct CaptureTests {
    @Test func outputAndTheTailOfErrorsAreRead() throws {
        let run = try ChildProcess.capture(path: "/bin/sh", arguments: ["sh", "-c", "printf out; head -c 200000 /dev/zero | tr '\\0' e >&2; echo END >&2; exit 3"],
                                           environment: [:], outputLimit: 100, errorKept: 10)
        #expect(run.status == .exited(3))
        #expect(String(decoding: run.output, as: UTF8.self) == "out")
        #expect(String(decoding: run.errorTail, as: UTF8.self) == "eeeeeeEND\n")
        #expect(!run.overLimit && !run.timedOut)
    }

    @Test func outputOverTheLimitStopsTheProgram() throws {
        let run = try ChildProcess.capture(path: "/bin/sh", arguments: ["sh", "-c", "exec cat /dev/zero"],
                                           environment: [:], outputLimit: 1 << 20, errorKept: 0)
        #expect(run.overLimit && run.output.isEmpty)
        #expect(run.status != .exited(0))
    }

    @Test func aProgramPastItsTimeIsKilled() throws {
        let run = try ChildProcess.capture(path: "/bin/sleep", arguments: ["sleep", "60"], environment: [:],
                                           outputLimit: 10, errorKept: 10, timeoutSeconds: 0.1)
        #expect(run.timedOut)
        #expect(run.status == .signaled(.kill))
    }
}
