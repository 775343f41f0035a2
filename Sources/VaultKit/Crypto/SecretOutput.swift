/// Output assembled in guarded memory before one `write(2)`: a protocol answer, a JSON document
/// or a page of text with secrets in it, so the secrets never become a `String` or an ordinary
/// array on the way out. The bytes live in a `SecretBytes` that grows by doubling (the old one
/// is wiped as it goes). An allocation that fails does not throw at each append: the output
/// remembers it and `withUnsafeBytes` throws, so nothing half-built is ever written.
public final class SecretOutput {
    private var storage: SecretBytes
    /// The start of `storage` (which never moves while it lives): JSON is appended a byte at a
    /// time, so a byte's append is a store, not a closure.
    private var base: UnsafeMutableRawPointer
    private var capacity: Int
    /// How many bytes were appended.
    public private(set) var count = 0
    private var failed = false

    /// An empty output with room for `capacity` bytes.
    /// - Throws: `CryptoError.outOfMemory`.
    public init(capacity: Int = 1024) throws {
        let storage = try SecretBytes(zeroed: max(capacity, 16))
        base = storage.withUnsafeMutableBytes { $0.baseAddress! }
        self.capacity = storage.count
        self.storage = storage
    }

    /// Makes room for `more` bytes; false once an allocation failed.
    private func reserve(_ more: Int) -> Bool {
        guard !failed else { return false }
        if count + more <= capacity { return true }
        guard reserve(more, keeping: count) else {
            failed = true
            return false
        }
        return true
    }

    /// Makes room for `more` bytes after the first `kept` (an appender's count), growing by
    /// doubling into a new guarded buffer; false when the allocation failed.
    private func reserve(_ more: Int, keeping kept: Int) -> Bool {
        if kept + more <= capacity { return true }
        var size = capacity
        while size < kept + more { size *= 2 }
        guard let grown = try? SecretBytes(zeroed: size) else { return false }
        storage.withUnsafeBytes { old in
            grown.withUnsafeMutableBytes { new in
                if kept > 0 { new.baseAddress!.copyMemory(from: old.baseAddress!, byteCount: kept) }
            }
        }
        base = grown.withUnsafeMutableBytes { $0.baseAddress! }
        capacity = grown.count
        storage = grown
        return true
    }

    /// Appends bytes (a secret's, lent from guarded memory, or ordinary ones).
    public func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty, reserve(bytes.count) else { return }
        base.advanced(by: count).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        count += bytes.count
    }

    /// Lends `body` an appender at the end of the output: a writer of many small pieces (export's
    /// JSON of an item) appends into the guarded buffer through a value of its own, with one
    /// bounds check per piece and none of the checks a property of this object costs at each
    /// append. What it appended counts once `body` returns; nothing is written once an
    /// allocation failed.
    package func append(_ body: (inout Appender) -> Void) {
        guard !failed else { return }
        var appender = Appender(output: self, base: base, count: count, capacity: capacity)
        body(&appender)
        if appender.failed { failed = true } else { count = appender.count }
    }

    /// Appends at the end of a `SecretOutput` (see `append(_:)`), growing it as the output
    /// itself grows.
    package struct Appender {
        fileprivate let output: SecretOutput
        /// The output's buffer, `count` bytes of it written.
        private(set) var base: UnsafeMutableRawPointer
        private(set) var count: Int
        private var capacity: Int
        fileprivate private(set) var failed = false

        fileprivate init(output: SecretOutput, base: UnsafeMutableRawPointer, count: Int, capacity: Int) {
            self.output = output
            self.base = base
            self.count = count
            self.capacity = capacity
        }

        /// Makes room for `more` bytes at `base + count`; false once an allocation failed.
        @inline(__always)
        mutating func reserve(_ more: Int) -> Bool {
            if count + more <= capacity { return !failed }
            return grow(more)
        }

        private mutating func grow(_ more: Int) -> Bool {
            guard !failed, output.reserve(more, keeping: count) else {
                failed = true
                return false
            }
            base = output.base
            capacity = output.capacity
            return true
        }

        /// Counts `n` bytes stored at `base + count` after `reserve`.
        mutating func advance(_ n: Int) { count += n }

        /// Appends bytes (a secret's, lent from guarded memory, or ordinary ones).
        mutating func append(_ bytes: UnsafeRawBufferPointer) {
            guard let from = bytes.baseAddress, reserve(bytes.count) else { return }
            (base + count).copyMemory(from: from, byteCount: bytes.count)
            count += bytes.count
        }

        /// Appends text that is never a secret (a key, punctuation).
        mutating func append(_ text: StaticString) {
            append(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }

        /// Appends one byte.
        mutating func append(_ byte: UInt8) {
            guard reserve(1) else { return }
            base.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
            count += 1
        }
    }

    /// Appends one byte.
    public func append(_ byte: UInt8) {
        guard !failed, count < capacity || reserve(1) else { return }
        base.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    /// Appends text that is not a secret (a protocol key, a label), as UTF-8.
    public func append(_ text: String) {
        var text = text
        text.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// Appends a secret as it is.
    public func append(_ secret: borrowing SecretBytes) {
        secret.withUnsafeBytes { append($0) }
    }

    /// Appends `bytes` made safe for a terminal: control characters (C0 but newline and tab, DEL,
    /// and the C1 range, U+0080 to U+009F, two bytes in UTF-8) become visible `\xNN` escapes, so
    /// a value cannot move the cursor, set the title or write the clipboard (OSC 52). Byte for
    /// byte what escaping the same text as a `String` gives, for valid UTF-8.
    public func appendTerminalSafe(_ bytes: UnsafeRawBufferPointer) {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        func escape(_ v: UInt8) {
            append(UInt8(ascii: "\\"))
            append(UInt8(ascii: "x"))
            append(hex[Int(v >> 4)])
            append(hex[Int(v & 15)])
        }
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if (b < 0x20 && b != 0x0A && b != 0x09) || b == 0x7F {
                escape(b)
                i += 1
            } else if b == 0xC2, i + 1 < bytes.count, (0x80...0x9F).contains(bytes[i + 1]) {
                escape(bytes[i + 1])
                i += 2
            } else {
                append(b)
                i += 1
            }
        }
    }

    /// Lends the bytes appended so far.
    /// - Throws: `CryptoError.outOfMemory` when an append could not grow the buffer.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        guard !failed else { throw CryptoError.outOfMemory }
        let n = count
        return try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }

    /// Lends the bytes of an output known to be whole (checked once, never appended to since).
    func withWholeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        precondition(!failed, "an output whose allocation failed was lent")
        let n = count
        return try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }

    /// Empties the output (the bytes are wiped; the room is kept).
    public func removeAll() {
        storage.wipe(prefix: count)
        count = 0
    }
}
