import Foundation
import Testing
@testable import VaultKit

/// The JSON vault stores (the key authority's sealed state, the audit records, the settings row
/// and the slots' parameters) is written and read by `WireJSON`; vaults and state files written
/// before were Foundation's `JSONEncoder`'s. Each stored type, with every field set (no optional
/// left out, checked by `Mirror`), must read the same from Foundation's bytes as Foundation reads
/// it, and Foundation must read `WireJSON`'s bytes (an older vault on a synced machine, or a
/// downgrade, reads them).
@Suite struct StoredJSONTests {
    /// Foundation's reading of `value`, keys sorted: the comparison of two values of a type that
    /// is not `Equatable`.
    static func canonical<T: Encodable>(_ value: T) throws -> String {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return String(decoding: try e.encode(value), as: UTF8.self)
    }

    /// The paths of the optionals left nil in `value` (a test value must set them all).
    static func nils(_ value: Any, path: String = "") -> [String] {
        let m = Mirror(reflecting: value)
        if m.displayStyle == .optional {
            guard let child = m.children.first else { return [path] }
            return nils(child.value, path: path)
        }
        var out: [String] = []
        for (i, c) in m.children.enumerated() {
            out += nils(c.value, path: path + "." + (c.label ?? "\(i)"))
        }
        return out
    }

    /// `json` (every field of `T`) both ways between Foundation's coder and `WireJSON`.
    static func check<T: Codable>(_ type: T.Type, _ json: String) throws {
        let value = try JSONDecoder().decode(T.self, from: Data(json.utf8))
        #expect(nils(value).isEmpty, "\(T.self) leaves \(nils(value)) unset")
        let expected = try canonical(value)
        // What an older vault wrote (Foundation escapes "/" as "\/") reads the same.
        let foundations = Array(try JSONEncoder().encode(value))
        let read = try WireJSON.decode(T.self, from: foundations)
        #expect(try canonical(read) == expected, "\(T.self): WireJSON reads Foundation's bytes differently")
        let lent = try foundations.withUnsafeBytes { try WireJSON.decode(T.self, from: $0) }
        #expect(try canonical(lent) == expected)
        // What vault writes now, Foundation reads the same.
        let wire = try WireJSON.encode(value)
        let back = try JSONDecoder().decode(T.self, from: Data(wire))
        #expect(try canonical(back) == expected, "\(T.self): Foundation reads WireJSON's bytes differently")
        #expect(try canonical(try WireJSON.decode(T.self, from: wire)) == expected)
    }

    static let sensor = #"{"driver":"virtual_image","deviceID":"dev/0"}"#

    @Test func authorityStateReadsBothWays() throws {
        try Self.check(EmbeddedKeyAuthority.AuthRecord.self, """
            {"failedMatches":3,"lastPasscodeBootID":"b/1","lastPasscodeTime":1700000000,
             "matches":[{"vaultID":[1,2,255],"slotID":7,"time":-5,"bootID":"boot é"}],
             "passcodeFailures":{"0a0b":2,"ff":0},"lastPasscodeAttempt":{"0a0b":1700000001},
             "vaultPasscode":{"0a0b":{"bootID":"b","time":9223372036854775807}}}
            """)
        try Self.check(EmbeddedKeyAuthority.PrintsState.self, """
            {"epoch":[0,1,2],
             "prints":[{"finger":"right-index","sensor":\(Self.sensor),"data":[9,8],"enrolled":1,"byVault":[3],"label":"work \\"v\\"","confirmed":false}],
             "bindings":[{"vaultID":[4],"slotID":2,"secret":[5],"proofKey":[6],"sensor":\(Self.sensor),"domainState":[7],
                          "rules":{"afterReboot":true,"intervalHours":48},"created":2,"historySeq":3,
                          "keys":[{"id":[1],"secret":[2],"seq":0}]}],
             "vaults":[{"vaultID":[4],"proofKey":[6],"pendingProofKey":[8],"owner":true,"registered":5,"label":"a/b"}],
             "history":[{"seq":1,"kind":"enrolled","finger":"left-thumb","time":4,"byVault":[4],"label":"x"}],
             "confirmedChip":["right-index","\\u0000\\n"]}
            """)
    }

    @Test func vaultRowsReadBothWays() throws {
        try Self.check(AuditRecord.self, #"{"time":1700000000,"item":"db/prod \"main\"","field":"password","command":"git-credential","uid":4294967295,"pid":-1,"executable":"/usr/bin/git"}"#)
        try Self.check(VaultSettings.self, #"{"policy":"biometrics","passcodeIntervalHours":0,"passcodeAfterReboot":false,"secretServiceApproval":"per-client"}"#)
        try Self.check(KDFParameters.self, #"{"memoryBytes":268435456,"operations":3,"salt":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,255]}"#)
        try Self.check(PasscodeSlotParameters.self, #"{"memoryBytes":8388608,"operations":1,"salt":[1],"tpm":{"v":1,"salt":[2],"sealed":[3,4]}}"#)
        try Self.check(FingerprintBinding.self, #"{"sensor":\#(Self.sensor),"domainState":"00ff","authority":"system","keyID":"abcd"}"#)
        try Self.check(RecoveryParams.self, #"{"v":1,"publicKey":"0123456789abcdef"}"#)
    }

    /// A slot's parameters written by an older vault (no `tpm`), and a passcode slot's read as
    /// plain Argon2id parameters (the `tpm` member ignored), as Foundation read them.
    @Test func slotParametersReadAsBefore() throws {
        let old = Array(#"{"memoryBytes":8388608,"operations":1,"salt":[1,2]}"#.utf8)
        let p = try WireJSON.decode(PasscodeSlotParameters.self, from: old)
        #expect(p.tpm == nil && p.memoryBytes == 8 << 20 && p.operations == 1 && p.salt == [1, 2])
        let withTPM = Array(#"{"memoryBytes":8388608,"operations":1,"salt":[1,2],"tpm":{"v":1,"salt":[2],"sealed":[3]}}"#.utf8)
        let k = try WireJSON.decode(KDFParameters.self, from: withTPM)
        #expect(k == (try JSONDecoder().decode(KDFParameters.self, from: Data(withTPM))))
    }

    /// Damaged stored JSON is refused, never read as something else.
    @Test func damagedRowsAreRefused() {
        for text in [#"{"policy":"biometrics""#, #"{"policy":"never"}"#, #"{"passcodeIntervalHours":"48"}"#, "[]", "",
                     #"{"passcodeIntervalHours":1.5}"#, #"{"policy":"biometrics"} x"#] {
            #expect(throws: DecodingError.self, "\(text)") { try WireJSON.decode(VaultSettings.self, from: Array(text.utf8)) }
            #expect(throws: DecodingError.self, "\(text)") { try JSONDecoder().decode(VaultSettings.self, from: Data(text.utf8)) }
        }
    }
}
