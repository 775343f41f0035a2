/// export's object of one item, written as `JSONText` writes the dictionary `ExportJSON.object`
/// makes (keys in sorted order), straight from the item's two opened records: one walk of each
/// record's fields where they lie, the texts escaped run by run and copied into guarded memory
/// in bulk. No `Item`, no `String`, no array per item; the secrets go from their record into the
/// output and never leave guarded memory.
extension JSONText {
    /// `","type":"login"` and the rest, in `OverviewRecord.types` order.
    private static let typeMembers: [[UInt8]] = OverviewRecord.types.map { member("type", $0.rawValue) }
    /// `{"kind":"text","name":` and the rest, in `OverviewRecord.kinds` order.
    private static let kindMembers: [[UInt8]] = OverviewRecord.kinds.map { Array("{".utf8) + member("kind", $0.rawValue).dropFirst() + Array(#","name":"#.utf8) }

    /// `,"KEY":"VALUE"` for a value with nothing to escape.
    private static func member(_ key: String, _ value: String) -> [UInt8] {
        var out: [UInt8] = Array(",".utf8)
        appendString(key, to: &out)
        out.append(UInt8(ascii: ":"))
        appendString(value, to: &out)
        return out
    }

    /// Appends the export object of the item `records` holds to guarded memory.
    package static func appendExportObject(_ records: ReleasedRecords, to out: SecretOutput) {
        out.append { w in appendExportObject(records, to: &w) }
    }

    static func appendExportObject(_ records: ReleasedRecords, to w: inout SecretOutput.Appender) {
        let o = records.overview, s = records.secretsRecord
        let ol = records.layout, sl = records.secretsLayout
        func text(_ key: StaticString, _ span: FieldSpan, in record: UnsafeRawBufferPointer, _ w: inout SecretOutput.Appender) {
            guard span.isPresent else { return }
            w.append(key)
            w.appendJSONString(record.fieldBytes(span))
        }
        func list(_ key: StaticString, _ run: FieldRun, _ w: inout SecretOutput.Appender) {
            w.append(key)
            var walk = RecordWalk(unchecked: o, from: run.start, to: run.end)
            var first = true
            while let (_, v) = walk.nextUnchecked() {
                if !first { w.append(UInt8(ascii: ",")) }
                first = false
                w.appendJSONString(o.fieldBytes(v))
            }
            w.append(UInt8(ascii: "]"))
        }
        w.append(#"{"created":"#)
        w.appendDecimal(ol.created)
        if ol.fields.count > 0 {
            w.append(#","fields":["#)
            var walk = RecordWalk(unchecked: o, from: ol.fields.start, to: ol.fields.end)
            var first = true
            while let (_, v) = walk.nextUnchecked() {
                if !first { w.append(UInt8(ascii: ",")) }
                first = false
                let kind = Int(o[v.start])
                let (name, value) = RecordWalk.namedUnchecked(o, v, skipping: 1)
                kindMembers[kind].withUnsafeBytes { w.append($0) }
                w.appendJSONString(o.fieldBytes(name))
                w.append(#","value":"#)
                if OverviewRecord.kinds[kind].isSecret {
                    // The value is in the secrets record (an item written without one: empty).
                    if let secret = sl.value(named: o.fieldBytes(name), in: s) {
                        w.appendJSONString(s.fieldBytes(secret))
                    } else {
                        w.append(#""""#)
                    }
                } else {
                    w.appendJSONString(o.fieldBytes(value))
                }
                w.append(UInt8(ascii: "}"))
            }
            w.append(UInt8(ascii: "]"))
        }
        w.append(ol.fingerprintLogin ? #","fingerprint_login":true"# : #","fingerprint_login":false"#)
        w.append(#","modified":"#)
        w.appendDecimal(ol.modified)
        text(#","name":"#, ol.name, in: o, &w)
        text(#","notes":"#, sl.notes, in: s, &w)
        text(#","origin":"#, ol.origin, in: o, &w)
        text(#","password":"#, sl.password, in: s, &w)
        if sl.history.count > 0 {
            w.append(#","password_history":["#)
            var walk = RecordWalk(unchecked: s, from: sl.history.start, to: sl.history.end)
            var first = true
            while let (_, v) = walk.nextUnchecked() {
                w.append(first ? #"{"password":"# : #",{"password":"#)
                first = false
                w.appendJSONString(s.fieldBytes(FieldSpan(start: v.start + 8, count: v.count - 8)))
                w.append(#","replaced":"#)
                w.appendDecimal(s.int64(at: v.start))
                w.append(UInt8(ascii: "}"))
            }
            w.append(UInt8(ascii: "]"))
        }
        text(#","password_prompt":"#, ol.passwordPrompt, in: o, &w)
        list(#","tags":["#, ol.tags, &w)
        text(#","totp":"#, sl.totp, in: s, &w)
        typeMembers[Int(ol.type)].withUnsafeBytes { w.append($0) }
        list(#","urls":["#, ol.urls, &w)
        text(#","user_prompt":"#, ol.userPrompt, in: o, &w)
        text(#","username":"#, ol.username, in: o, &w)
        w.append(UInt8(ascii: "}"))
    }
}

extension SecretOutput.Appender {
    /// Appends `n` in decimal, as `String(n)` writes it.
    mutating func appendDecimal(_ n: Int64) {
        guard reserve(20) else { return }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        let written = withUnsafeMutableBytes(of: &digits) { d in
            var m = n.magnitude, k = 24
            repeat {
                k -= 1
                d[k] = UInt8(truncatingIfNeeded: m % 10) &+ 0x30
                m /= 10
            } while m != 0
            if n < 0 { k -= 1; d[k] = UInt8(ascii: "-") }
            (base + count).copyMemory(from: d.baseAddress! + k, byteCount: 24 - k)
            return 24 - k
        }
        advance(written)
    }

    /// Appends `bytes` (UTF-8) as a JSON string, byte for byte what `JSONText.appendString`
    /// writes: the runs between escapes copied whole, eight bytes tested at a time, room made
    /// once per 4 KiB of text (six bytes for each, what an escape takes at most).
    mutating func appendJSONString(_ bytes: UnsafeRawBufferPointer) {
        let piece = 4096
        guard let source = bytes.baseAddress, bytes.count > 0 else {
            append(#""""#)
            return
        }
        append(UInt8(ascii: "\""))
        var at = 0
        repeat {
            let n = min(piece, bytes.count - at)
            guard reserve(6 * n) else { return }
            advance(JSONText.escape(source + at, count: n, into: base + count))
            at += n
        } while at < bytes.count
        append(UInt8(ascii: "\""))
    }
}

extension JSONText {
    private static let escapeHex: StaticString = "0123456789abcdef"

    /// Whether any of the eight bytes of `w` needs an escape in a JSON string (below 0x20, a
    /// quote, a backslash): the word tests of "Bit Twiddling Hacks" (exact as a yes or no).
    @inline(__always)
    static func needsEscape(_ w: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, high: UInt64 = 0x8080_8080_8080_8080
        let quote = w ^ (ones &* 0x22), backslash = w ^ (ones &* 0x5C)
        let below = (w &- ones &* 0x20) & ~w
        let zeroQuote = (quote &- ones) & ~quote
        let zeroBackslash = (backslash &- ones) & ~backslash
        return (below | zeroQuote | zeroBackslash) & high != 0
    }

    /// Writes `count` bytes at `source` escaped for a JSON string (no quotes) to `out`, which has
    /// room for six bytes per byte; returns how many were written.
    static func escape(_ source: UnsafeRawPointer, count: Int, into out: UnsafeMutableRawPointer) -> Int {
        var i = 0, run = 0, k = 0
        while i < count {
            if count - i >= 8, !needsEscape(source.loadUnaligned(fromByteOffset: i, as: UInt64.self)) {
                i += 8
                continue
            }
            let b = source.load(fromByteOffset: i, as: UInt8.self)
            guard b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") else {
                i += 1
                continue
            }
            if run < i {
                (out + k).copyMemory(from: source + run, byteCount: i - run)
                k += i - run
            }
            i += 1
            run = i
            out.storeBytes(of: UInt8(ascii: "\\"), toByteOffset: k, as: UInt8.self)
            let short: UInt8
            switch b {
            case UInt8(ascii: "\""): short = UInt8(ascii: "\"")
            case UInt8(ascii: "\\"): short = UInt8(ascii: "\\")
            case 0x0A: short = UInt8(ascii: "n")
            case 0x0D: short = UInt8(ascii: "r")
            case 0x09: short = UInt8(ascii: "t")
            case 0x08: short = UInt8(ascii: "b")
            case 0x0C: short = UInt8(ascii: "f")
            default: short = 0
            }
            if short != 0 {
                out.storeBytes(of: short, toByteOffset: k + 1, as: UInt8.self)
                k += 2
            } else {
                let hex = escapeHex.utf8Start
                out.storeBytes(of: UInt8(ascii: "u"), toByteOffset: k + 1, as: UInt8.self)
                out.storeBytes(of: UInt8(ascii: "0"), toByteOffset: k + 2, as: UInt8.self)
                out.storeBytes(of: UInt8(ascii: "0"), toByteOffset: k + 3, as: UInt8.self)
                out.storeBytes(of: hex[Int(b >> 4)], toByteOffset: k + 4, as: UInt8.self)
                out.storeBytes(of: hex[Int(b & 15)], toByteOffset: k + 5, as: UInt8.self)
                k += 6
            }
        }
        if run < count {
            (out + k).copyMemory(from: source + run, byteCount: count - run)
            k += count - run
        }
        return k
    }
}
