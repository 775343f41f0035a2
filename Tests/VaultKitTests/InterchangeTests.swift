import Foundation
import Testing
@testable import VaultKit
import VaultOTP

/// The pieces importers stand on: RFC 4180 CSV, the JSON element scanner, and one-time codes at
/// fixed times cross-checked with oathtool (an independent implementation, Debian's `oathtool`).
@Suite struct InterchangeTests {
    @Test func csvFollowsRFC4180() throws {
        var r = CSVReader(Array("\u{FEFF}a,b,c\r\n\"x,1\",\"he said \"\"hi\"\"\",\"two\r\nlines\"\n,,\n\nlast,row,here".utf8))
        #expect(try r.next()?.fields == ["a", "b", "c"])
        let row = try #require(try r.next())
        #expect(row.fields == ["x,1", "he said \"hi\"", "two\r\nlines"] && row.line == 2)
        #expect(try r.next()?.fields == ["", "", ""])
        let last = try #require(try r.next())
        #expect(last.fields == ["last", "row", "here"] && last.line == 6)
        #expect(try r.next() == nil)
        var bad = CSVReader(Array("a\n\"open".utf8))
        _ = try bad.next()
        #expect(throws: VaultError.self) { try bad.next() }
        #expect(CSVReader.quote("a,\"b\"") == "\"a,\"\"b\"\"\"" && CSVReader.quote("plain") == "plain")
    }

    @Test func jsonScanSplitsWithoutDecoding() throws {
        let text = Array(#" [ {"a": "x]y,z"}, [1, [2]], "s\"q", 3 , null ] "#.utf8)
        let parts = try JSONScan.elements(text).map { String(decoding: text[$0], as: UTF8.self) }
        #expect(parts == [#"{"a": "x]y,z"}"#, "[1, [2]]", #""s\"q""#, "3", "null"])
        let members = try JSONScan.members(Array(#"{"k": [1], "e\u0041": {}}"#.utf8)).map(\.key)
        #expect(members == ["k", "eA"])
        #expect(throws: JSONScan.Malformed.self) { try JSONScan.elements(Array("[1, 2".utf8)) }
        #expect(throws: JSONScan.Malformed.self) { try JSONScan.elements(Array("[1] x".utf8)) }
    }

    @Test(arguments: [("sha1", HMACAlgorithm.sha1), ("sha256", .sha256), ("sha512", .sha512)])
    func codesMatchOathtool(_ name: String, _ algorithm: HMACAlgorithm) throws {
        let secret = Array("a secret of thirty-two bytes....".utf8) + [0xFF]
        let b32 = Base32.encode(secret)
        for (time, period, digits) in [(0, 30, 6), (1_111_111_111, 30, 8), (1_700_000_000, 60, 7), (4_102_444_800, 15, 6)] {
            let oath = try oathtool(["--totp=\(name)", "--base32", "--digits=\(digits)", "--time-step-size=\(period)s", "--now=@\(time)", b32])
            #expect(try OTP.totp(secret: secret, time: Int64(time), period: period, digits: digits, algorithm: algorithm) == oath, "\(name) at \(time)")
        }
        // oathtool's HOTP is HMAC-SHA-1 only (RFC 4226); the other hashes are checked through TOTP above.
        for counter in algorithm == .sha1 ? [0, 1, 99, 1 << 33] : [] {
            let oath = try oathtool(["--hotp", "--base32", "--counter=\(counter)", "--digits=8", b32])
            let mine = try OTP.hotp(secret: secret, counter: UInt64(counter), digits: 8, algorithm: algorithm)
            #expect(mine == oath, "HOTP \(name) counter \(counter)")
        }
    }

    @Test func hotpCodeAdvancesTheStoredCounter() throws {
        let item = Item(name: "h", totp: "otpauth://hotp/h?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&counter=3&digits=6")
        let code = try OTP.code(for: item)
        #expect(code.code == "969429" && code.secondsRemaining == nil)
        #expect(code.advancedURI == "otpauth://hotp/h?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&counter=4&digits=6")
        let totp = try OTP.code(for: Item(name: "t", totp: "otpauth://totp/t?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"),
                                at: Date(timeIntervalSince1970: 59))
        #expect(totp.code == "287082" && totp.secondsRemaining == 1 && totp.period == 30)
        #expect(throws: VaultError.self) { try OTP.code(for: Item(name: "none")) }
    }

    private func oathtool(_ args: [String]) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/oathtool")
        p.arguments = args
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        try #require(p.terminationStatus == 0, "oathtool \(args)")
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
