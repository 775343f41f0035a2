import Testing
@testable import VaultKit

/// The record encoders as they were before an import reused one writer per record kind (copied
/// from Records.swift as of commit 7f51e18, written out on arrays): what the encoders write now,
/// into a fresh writer or a reused one, must be these bytes.
enum ReferenceRecords {
    static func length(_ n: Int, _ out: inout [UInt8]) {
        var n = UInt64(n)
        repeat {
            let low = UInt8(n & 0x7f)
            n >>= 7
            out.append(n == 0 ? low : low | 0x80)
        } while n != 0
    }

    static func field(_ tag: UInt8, _ value: [UInt8], _ out: inout [UInt8]) {
        out.append(tag)
        length(value.count, &out)
        out += value
    }

    static func field(_ tag: UInt8, _ text: String?, _ out: inout [UInt8]) {
        if let text { field(tag, Array(text.utf8), &out) }
    }

    static func named(_ prefix: [UInt8], _ name: String, _ value: String) -> [UInt8] {
        var inner = prefix
        length(name.utf8.count, &inner)
        return inner + Array(name.utf8) + Array(value.utf8)
    }

    static func overview(_ item: Item) -> [UInt8] {
        var w: [UInt8] = [2, 1]
        field(1, item.name, &w)
        field(2, [UInt8(OverviewRecord.types.firstIndex(of: item.type) ?? 0)], &w)
        field(3, item.username, &w)
        for u in item.urls { field(4, u, &w) }
        for t in item.tags { field(5, t, &w) }
        field(6, RecordWriter.bigEndian(item.created), &w)
        field(7, RecordWriter.bigEndian(item.modified), &w)
        var f: UInt8 = 0
        if item.fingerprintLogin { f |= 1 }
        if item.password != nil { f |= 2 }
        if item.totp != nil { f |= 4 }
        if item.notes != nil { f |= 8 }
        field(8, [f], &w)
        field(9, item.origin, &w)
        field(10, item.userPrompt, &w)
        field(11, item.passwordPrompt, &w)
        for c in item.fields {
            field(12, named([UInt8(OverviewRecord.kinds.firstIndex(of: c.kind) ?? 0)], c.name, c.kind.isSecret ? "" : c.value), &w)
        }
        if !item.passwordHistory.isEmpty {
            let n = UInt32(clamping: item.passwordHistory.count)
            field(13, [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)], &w)
        }
        return w
    }

    static func secrets(_ item: Item) -> [UInt8] {
        var w: [UInt8] = [2, 2]
        field(1, item.password, &w)
        field(2, item.totp, &w)
        field(3, item.notes, &w)
        for c in item.fields where c.kind.isSecret { field(4, named([], c.name, c.value), &w) }
        for h in item.passwordHistory { field(5, RecordWriter.bigEndian(h.replaced) + Array(h.password.utf8), &w) }
        return w
    }
}

@Suite struct RecordEncodingTests {
    /// Items of every type and field kind, empty and absent values, non-ASCII, values long
    /// enough for two- and three-byte lengths, times at the edges, a full history.
    static var items: [Item] {
        let long = String(repeating: "x\u{E9}", count: 100), longer = String(repeating: "\u{1F600}", count: 5000)
        var out: [Item] = [
            Item(name: "a", now: 0),
            Item(name: "mail \u{E9}", type: .login, username: "me", password: "", urls: ["", "https://a.example", long], notes: longer,
                 tags: ["", "a/b"], totp: "otpauth://totp/x?secret=JBSWY3DPEHPK3PXP",
                 fields: [CustomField(name: "", kind: .text, value: ""), CustomField(name: long, kind: .hidden, value: longer),
                          CustomField(name: "u", kind: .url, value: "https://c"), CustomField(name: "t", kind: .totp, value: "otpauth://totp/y?secret=A")],
                 passwordHistory: (0..<10).map { PasswordChange(password: "old \($0)", replaced: Int64($0) - 5) },
                 fingerprintLogin: true, origin: "git", now: Int64.min),
        ]
        for type in ItemType.allCases {
            var item = Item(name: "t-\(type.rawValue)", type: type, password: long, now: Int64.max)
            item.userPrompt = "login:"
            item.passwordPrompt = ""
            item.modified = -1
            out.append(item)
        }
        for kind in CustomFieldKind.allCases { out.append(Item(name: "k", fields: [CustomField(name: "f", kind: kind, value: "v")], now: 1)) }
        return out
    }

    @Test func theEncodersWriteTheBytesTheyWrote() {
        var overview = RecordWriter(kind: .overview, capacity: 8)
        var secrets = RecordWriter(kind: .secrets, capacity: 8)
        // Reused from the largest record to the smallest and back: nothing of a longer record stays.
        for item in Self.items + Self.items.reversed() {
            #expect(OverviewRecord.encode(item) == ReferenceRecords.overview(item), "\(item.name)")
            #expect(SecretsRecord.encode(item) == ReferenceRecords.secrets(item), "\(item.name)")
            OverviewRecord.encode(item, into: &overview)
            SecretsRecord.encode(item, into: &secrets)
            #expect(overview.bytes == ReferenceRecords.overview(item), "\(item.name)")
            #expect(secrets.bytes == ReferenceRecords.secrets(item), "\(item.name)")
            secrets.zero()
            #expect(secrets.bytes.allSatisfy { $0 == 0 })
        }
    }

    @Test func typeAndKindCodesArePositions() {
        for t in ItemType.allCases { #expect(Int(OverviewRecord.typeCode(t)) == OverviewRecord.types.firstIndex(of: t)) }
        for k in CustomFieldKind.allCases { #expect(Int(OverviewRecord.kindCode(k)) == OverviewRecord.kinds.firstIndex(of: k)) }
    }

    @Test func lengthSizeIsWhatLengthWrites() {
        for n in [0, 1, 127, 128, 16383, 16384, 1 << 21, Int(Int32.max)] {
            var w = RecordWriter(kind: .overview, capacity: 0)
            w.length(n)
            #expect(w.bytes.count - 2 == RecordWriter.lengthSize(n), "\(n)")
        }
    }
}
