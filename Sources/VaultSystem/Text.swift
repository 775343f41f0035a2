@_spi(_Unicode) import Swift
import Glibc

// The few text operations vault's client needs that the standard library lacks, so that no
// module linked into `vault` needs Foundation (whose start-up is a third of a `vault --version`).
// Each keeps the semantics of the Foundation call it replaces, as far as vault used it.

/// A class of characters to trim, as Foundation's `CharacterSet` names them.
public enum TrimSet: Sendable {
    /// Space separators (General Category Zs) and tab (`CharacterSet.whitespaces`).
    case whitespaces
    /// U+000A–U+000D, U+0085, U+2028 and U+2029 (`CharacterSet.newlines`).
    case newlines
    /// Both (`CharacterSet.whitespacesAndNewlines`).
    case whitespacesAndNewlines

    /// Whether `scalar` is in the class.
    public func contains(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        let newline = (0x0A...0x0D).contains(v) || v == 0x85 || v == 0x2028 || v == 0x2029
        let space = v == 0x09 || scalar.properties.generalCategory == .spaceSeparator
        switch self {
        case .whitespaces: return space
        case .newlines: return newline
        case .whitespacesAndNewlines: return space || newline
        }
    }
}

extension StringProtocol {
    /// The text without the leading and trailing scalars of `set` (Foundation's
    /// `trimmingCharacters(in:)`).
    public func trimmed(_ set: TrimSet = .whitespacesAndNewlines) -> String {
        trimmed(where: set.contains)
    }

    /// The text without the leading and trailing scalars for which `drop` holds.
    public func trimmed(where drop: (Unicode.Scalar) -> Bool) -> String {
        let scalars = String(self).unicodeScalars
        guard let first = scalars.firstIndex(where: { !drop($0) }) else { return "" }
        let last = scalars.lastIndex(where: { !drop($0) })!
        return String(String.UnicodeScalarView(scalars[first...last]))
    }

    /// The first range where `target`'s UTF-8 bytes occur (a literal, bytewise search: vault
    /// looks only for ASCII markers such as `://`), from `start` on; nil when absent or empty.
    public func byteRange(of target: some StringProtocol, from start: Index? = nil) -> Range<Index>? {
        let needle = Array(target.utf8)
        guard let head = needle.first else { return nil }
        let bytes = utf8
        var i = start ?? bytes.startIndex
        while let found = bytes[i...].firstIndex(of: head) {
            var a = found, b = needle.startIndex
            while b < needle.endIndex, a < bytes.endIndex, bytes[a] == needle[b] {
                a = bytes.index(after: a)
                b += 1
            }
            if b == needle.endIndex { return found..<a }
            i = bytes.index(after: found)
        }
        return nil
    }

    /// The text with every occurrence of `target` (bytewise, left to right, not overlapping)
    /// replaced by `replacement` (Foundation's `replacingOccurrences(of:with:)` on the texts vault
    /// gives it).
    public func replacingEvery(_ target: some StringProtocol, with replacement: some StringProtocol) -> String {
        var out = ""
        var rest = self[...]
        while let r = rest.byteRange(of: target) {
            out += rest[rest.startIndex..<r.lowerBound]
            out += replacement
            rest = rest[r.upperBound...]
        }
        out += rest
        return out
    }

    /// The text with every scalar that is not ASCII or for which `keep` fails written as its
    /// UTF-8 bytes in `%XX` (upper-case hex): `addingPercentEncoding(withAllowedCharacters:)`,
    /// which keeps only ASCII characters of the set.
    public func percentEncoded(keeping keep: (Unicode.Scalar) -> Bool) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count)
        for scalar in unicodeScalars {
            if scalar.isASCII, keep(scalar) {
                UTF8.encode(scalar) { out.append($0) }
            } else {
                UTF8.encode(scalar) { b in out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]] }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The text with each `%XX` decoded, nil when a `%` is not followed by two hex digits or the
    /// result is not UTF-8 (Foundation's `removingPercentEncoding`).
    public var percentDecoded: String? {
        func digit(_ b: UInt8) -> UInt8? {
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        let bytes = Array(utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let h = digit(bytes[i + 1]), let l = digit(bytes[i + 2]) else { return nil }
                out.append(h << 4 | l)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    /// The canonical composition (NFC) of the text (`precomposedStringWithCanonicalMapping`).
    public var nfc: String {
        String(decoding: String(self)._nfcCodeUnits, as: UTF8.self)
    }

    /// Calls `body` with each UTF-8 byte of the text's canonical decomposition (NFD), so a caller
    /// that holds a secret can write it straight into guarded memory.
    public func withNFDBytes(_ body: (UInt8) -> Void) {
        for scalar in String(self)._nfd {
            UTF8.encode(scalar) { body($0) }
        }
    }

    /// Calls `body` with each UTF-8 byte of the text's canonical composition (NFC).
    public func withNFCBytes(_ body: (UInt8) -> Void) {
        String(self)._withNFCCodeUnits { body($0) }
    }
}

extension Unicode.Scalar {
    /// A letter, mark or number (General Categories L*, M*, N*): `CharacterSet.alphanumerics`.
    public var isAlphanumeric: Bool {
        switch properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
             .nonspacingMark, .spacingMark, .enclosingMark,
             .decimalNumber, .letterNumber, .otherNumber:
            return true
        default:
            return false
        }
    }
}

/// `joined(separator:)` compiled into the caller: the standard library's own is generic code
/// that asks the runtime for the collection's associated types, and in a statically linked
/// vault the first such question scans every protocol-conformance record of the binary (about
/// 0.4 M instructions of a `vault --version`; docs/performance.md). Used on the start-up path.
extension Sequence where Element == String {
    @inlinable
    public func joinedText(separator: String) -> String {
        var out = "", first = true
        for part in self {
            if !first { out.append(separator) }
            out.append(part)
            first = false
        }
        return out
    }
}

extension Sequence where Element == Substring {
    @inlinable
    public func joinedText(separator: String) -> String {
        var out = "", first = true
        for part in self {
            if !first { out.append(separator) }
            out.append(contentsOf: part)
            first = false
        }
        return out
    }
}

/// Paths as text, as `NSString`'s path methods read them (vault's paths are absolute).
public enum PathText {
    /// The folder `path` is in: the path without its last component (repeated and trailing
    /// slashes ignored), `/` for a name at the root, `""` for a bare name.
    public static func folder(of path: String) -> String {
        let parts = path.split(separator: "/")
        let absolute = path.hasPrefix("/")
        guard parts.count > 1 else { return absolute ? "/" : "" }
        return (absolute ? "/" : "") + parts.dropLast().joinedText(separator: "/")
    }

    /// The last component of `path` (repeated and trailing slashes ignored; `/` for the root).
    public static func lastComponent(of path: String) -> String {
        guard let last = path.split(separator: "/").last else { return path.hasPrefix("/") ? "/" : "" }
        return String(last)
    }
}

/// UTC times as ISO 8601 text.
public enum ISOTime {
    /// `yyyy-MM-ddTHH:mm:ssZ` of `seconds` since 1970 (UTC), as `ISO8601DateFormatter` writes it.
    public static func string(_ seconds: Int64) -> String {
        var t = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&t, &parts) != nil else { return "1970-01-01T00:00:00Z" }
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        var year = "\(parts.tm_year + 1900)"
        while year.utf8.count < 4 { year = "0" + year }
        return "\(year)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

extension ISOTime {
    /// `yyyy-MM-dd HH:mm` of `seconds` since 1970 in the local time zone (`localtime_r`), the
    /// number itself when it cannot be converted.
    public static func localMinutes(_ seconds: Int64) -> String {
        var t = time_t(seconds)
        var parts = tm()
        guard localtime_r(&t, &parts) != nil else { return "\(seconds)" }
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday)) \(two(parts.tm_hour)):\(two(parts.tm_min))"
    }
}

/// The C library's numeric and byte-search routines the other modules need (they import no Glibc).
public enum CLibrary {
    /// The base-2 logarithm.
    public static func log2(_ x: Double) -> Double { Glibc.log2(x) }

    /// How many times `byte` occurs in `bytes` (`memchr`, so whole words at a time).
    public static func count(of byte: UInt8, in bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return 0 }
        var n = 0, at = base
        let end = base + bytes.count
        while at < end, let hit = memchr(at, Int32(byte), end - at) {
            n += 1
            at = UnsafeRawPointer(hit) + 1
        }
        return n
    }
}
