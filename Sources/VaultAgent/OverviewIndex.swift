public import VaultKit
internal import VaultSystem

/// The overview records of one session's vault, opened once and kept sorted by name, so a
/// listing or a search inside the session decrypts nothing. It follows every write made through
/// the session (the one row written is re-read), and is rebuilt when another process has
/// committed to the vault since (SQLite's `data_version` moved). It goes with the session: a
/// `lock`, an expiry or an invalidation drops it with the key, its records wiped.
///
/// The records live in one block of guarded memory (not locked in RAM: a large vault's would
/// not fit under `RLIMIT_MEMLOCK`), sorted by name, each a LEB128 length (one byte below 128,
/// two below 16,384) and its bytes, back to back; a sparse table holds the
/// offset of every `stride`th record, so finding a name is a binary search over that table and a
/// scan of at most `stride` records. At a million items that is the overview bytes, about 1 MiB
/// of lengths and 125 KiB of table (one offset and length per record took 16 MiB).
final class OverviewIndex {
    /// Every `stride`th record has its offset in `sparse`.
    static let stride = 64

    /// The records, sorted by name, then `room(for:)` zero bytes for the next additions whose
    /// pages take no memory until written (handed back to the kernel, as are those a removal
    /// frees); every byte from `used` on is zero.
    private var block: SecretBytes
    private var used: Int
    /// The offsets in `block` of records 0, `stride`, 2 × `stride`, ...
    private var sparse: [Int] = []
    /// How many items it holds.
    private(set) var count: Int
    private(set) var damaged: [String] = []
    /// The bytes the records and their lengths take, and the size of the block that holds them.
    var recordBytes: Int { used }
    var blockBytes: Int { block.count }
    /// Whether the block's bytes past the records are all zero (a removed record's are wiped).
    var unusedBytesAreZero: Bool { block.withUnsafeBytes { $0[used...].allSatisfy { $0 == 0 } } }
    /// Changes whenever the entries do: a paged listing that sees it move starts again.
    private(set) var version: Int64
    private var changeCounter: Int64

    /// Reads every overview record of `vault`. The block is made first, at the size SQLite's
    /// count of the sealed lengths bounds, its pages handed back until written; the records are read into guarded chunks,
    /// each sorted when full, and merged into the block, each chunk's pages handed back (wiped)
    /// as the merge passes them: the build holds the records about once, not twice.
    /// - Parameter chunkSize: the spill's chunk (smaller in tests, to merge many).
    init(_ vault: UnlockedVault, chunkSize: Int = RecordSpill.chunkSize) throws {
        changeCounter = try vault.changeCounter()
        version = Int64.random(in: 1...Int64.max)
        // At most two bytes of length below 16 KiB, five above (SQLite's blobs stop at 2^31): a
        // bound, not a count, since what the records do not take is room that takes no memory.
        let sizes = try vault.overviewPlaintextSizes(countingAtLeast: [1 << 14])
        let expected = sizes.bytes + 2 * sizes.rows + 3 * sizes.atLeast[0]
        var block = try SecretBytes(unlockedZeroed: expected + Self.room(for: expected))
        block.withUnsafeMutableBytes { ProcessMemory.releasePages(of: $0) }
        var damaged: [String] = []
        let spill = RecordSpill(chunkSize: chunkSize)
        try vault.forEachOverviewRecord { entry in
            switch entry {
            case .record(let plain): try spill.append(plain)
            case .damaged(let id): damaged.append(id)
            }
        }
        try spill.sortLastChunk()
        // Another process added rows between the count and the scan: the block is made again.
        if spill.bytes > block.count {
            block = try SecretBytes(unlockedZeroed: spill.bytes + Self.room(for: spill.bytes))
            block.withUnsafeMutableBytes { ProcessMemory.releasePages(of: $0) }
        }
        self.damaged = damaged
        used = spill.bytes
        count = spill.count
        var sparse: [Int] = []
        sparse.reserveCapacity((count + Self.stride - 1) / Self.stride)
        block.withUnsafeMutableBytes { out in
            var offset = 0, k = 0
            spill.drain { r in
                if k % Self.stride == 0 { sparse.append(offset) }
                (out.baseAddress! + offset).copyMemory(from: r.baseAddress!, byteCount: r.count)
                offset += r.count
                k += 1
            }
        }
        self.block = block
        self.sparse = sparse
        // The scan filled SQLite's page cache and churned the heap: both handed back.
        vault.releaseCachedPages()
        ProcessMemory.returnFreePages()
    }

    /// Whether no other connection has committed to `vault` since this index was read.
    func isCurrent(for vault: UnlockedVault) -> Bool {
        (try? vault.changeCounter()) == changeCounter
    }

    /// Where the record of `name` is or would go: its position in name order, its offset in
    /// `block`, and whether the record there is `name`'s.
    private func position(of name: String) -> (index: Int, offset: Int, found: Bool) {
        let key = Array(name.utf8)
        return block.withUnsafeBytes { all in
            // The groups whose first name is not after the key: the key is in the last of them.
            var low = 0, high = sparse.count
            while low < high {
                let mid = (low + high) / 2
                if key.lexicographicallyPrecedes(Self.record(in: all, at: sparse[mid]).bytes.name) { high = mid } else { low = mid + 1 }
            }
            guard low > 0 else { return (0, 0, false) }
            var index = (low - 1) * Self.stride, offset = sparse[low - 1]
            while index < count {
                let (r, end) = Self.record(in: all, at: offset)
                if !r.name.lexicographicallyPrecedes(key) { return (index, offset, r.name.elementsEqual(key)) }
                index += 1
                offset = end
            }
            return (index, offset, false)
        }
    }

    /// Re-reads the item called `name` after a write through the session (gone: removed).
    func refresh(_ name: String, from vault: UnlockedVault) throws {
        guard let n = try? Item.normalize(name: name) else { return }
        var record: [UInt8]?
        do {
            record = try vault.overviewRecord(named: n)
        } catch VaultError.itemNotFound {
            record = nil
        }
        defer { if record != nil { wipe(&record!) } }
        let (i, offset, found) = position(of: n)
        let old = found ? block.withUnsafeBytes { Self.record(in: $0, at: offset).end } - offset : 0
        let new = record.map { LengthPrefix.size($0.count) + $0.count } ?? 0
        let rest = used - offset - old, total = used - old + new
        func write(into out: UnsafeMutableRawBufferPointer) {
            guard let r = record else { return }
            let p = out.baseAddress! + offset
            let k = LengthPrefix.write(r.count, to: p)
            r.withUnsafeBytes { if let b = $0.baseAddress { (p + k).copyMemory(from: b, byteCount: r.count) } }
        }
        let free = block.count - total
        if free >= 0, free <= max(1 << 16, total) + Self.room(for: total) {
            block.withUnsafeMutableBytes { out in
                UnsafeMutableRawBufferPointer(rebasing: out[(offset + new)..<(offset + new + rest)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: out[(offset + old)..<used]))
                write(into: out)
                if total < used { ProcessMemory.releasePages(of: UnsafeMutableRawBufferPointer(rebasing: out[total..<used])) }
            }
        } else {
            // A new block (the old one wiped): when the room is used up, or when removals left
            // the block more than twice what it holds.
            let fresh = try SecretBytes(unlockedZeroed: total + Self.room(for: total))
            block.withUnsafeBytes { all in
                fresh.withUnsafeMutableBytes { out in
                    ProcessMemory.releasePages(of: out)
                    out.baseAddress!.copyMemory(from: all.baseAddress!, byteCount: offset)
                    write(into: out)
                    (out.baseAddress! + offset + new).copyMemory(from: all.baseAddress! + offset + old, byteCount: rest)
                }
            }
            block = fresh
        }
        used = total
        if found == (record != nil) {
            // Replaced: the same records in every group, those after it moved by the difference.
            for g in (i / Self.stride + 1)..<sparse.count { sparse[g] += new - old }
        } else {
            count += found ? -1 : 1
            reindex(from: i, at: offset)
        }
        version = Int64.random(in: 1...Int64.max)
    }

    /// The room a block keeps after `bytes` of records for additions through the session: a
    /// thirty-second, at least a page and at most 4 MiB (untouched, it takes no memory).
    static func room(for bytes: Int) -> Int { max(4096, min(bytes / 32, 4 << 20)) }

    /// Remakes the sparse table from record `index` on, which starts at `offset` (the records
    /// before it have not moved).
    private func reindex(from index: Int, at offset: Int) {
        sparse.removeSubrange(((index + Self.stride - 1) / Self.stride)...)
        var offset = offset
        block.withUnsafeBytes { all in
            for k in index..<count {
                if k % Self.stride == 0 { sparse.append(offset) }
                offset = Self.record(in: all, at: offset).end
            }
        }
    }

    /// The record that starts (with its length) at `offset`, and where the next one starts.
    private static func record(in all: UnsafeRawBufferPointer, at offset: Int) -> (bytes: UnsafeRawBufferPointer, end: Int) {
        let (length, prefix) = LengthPrefix.read(all, at: offset)
        let start = offset + prefix
        return (UnsafeRawBufferPointer(rebasing: all[start..<(start + length)]), start + length)
    }

    /// One page of a listing: from `start`, the records `matcher` matches (every record without
    /// one), until about `budget` bytes; each record as a big-endian u32 length and its bytes.
    /// - Returns: the page and where the next one starts (nil at the end).
    func page(from start: Int, matcher: OverviewMatcher?, budget: Int) -> (tail: [UInt8], next: Int?) {
        var tail: [UInt8] = []
        var i = max(0, start)
        guard i < count else { return (tail, nil) }
        block.withUnsafeBytes { all in
            var offset = sparse[i / Self.stride]
            for _ in 0..<(i % Self.stride) { offset = Self.record(in: all, at: offset).end }
            // A page of every record is at most the budget and one record more: asked for at
            // once, so no outgrown copy of the records is left in the heap.
            if matcher == nil { tail.reserveCapacity(min(budget + (1 << 16), used - offset + 3 * (count - i))) }
            while i < count, tail.count < budget {
                let (r, end) = Self.record(in: all, at: offset)
                i += 1
                offset = end
                if let matcher, !matcher.matches(r) { continue }
                let n = UInt32(r.count)
                tail += [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)]
                tail.append(contentsOf: r)
            }
        }
        return (tail, i < count ? i : nil)
    }
}

/// The length before each record of the index: LEB128, seven bits a byte, low bits first.
enum LengthPrefix {
    /// How many bytes the prefix of `length` takes.
    static func size(_ length: Int) -> Int {
        var n = 1, rest = length >> 7
        while rest > 0 { n += 1; rest >>= 7 }
        return n
    }

    /// Writes the prefix of `length` at `p`; returns its size.
    static func write(_ length: Int, to p: UnsafeMutableRawPointer) -> Int {
        var rest = length, k = 0
        while rest >= 0x80 {
            p.storeBytes(of: UInt8(rest & 0x7f | 0x80), toByteOffset: k, as: UInt8.self)
            rest >>= 7
            k += 1
        }
        p.storeBytes(of: UInt8(rest), toByteOffset: k, as: UInt8.self)
        return k + 1
    }

    /// The length whose prefix starts at `offset` (written by `write`), and the prefix's size.
    static func read(_ all: UnsafeRawBufferPointer, at offset: Int) -> (length: Int, size: Int) {
        var length = 0, shift = 0, k = offset
        while true {
            let b = all[k]
            length |= Int(b & 0x7f) << shift
            k += 1
            if b < 0x80 { return (length, k - offset) }
            shift += 7
        }
    }
}

/// The records of an index being built, length-prefixed as the index keeps them: in chunks of
/// guarded memory (no array that grows and leaves copies behind), each sorted by name when full,
/// then merged in name order. A chunk's pages are wiped and handed back as the merge passes them,
/// and the chunk is freed when the merge has taken its last record.
final class RecordSpill {
    private final class Chunk {
        let memory: SecretBytes
        /// `memory`'s bytes: the chunk owns both, and guarded memory does not move.
        let base: UnsafeMutableRawPointer
        var used = 0
        /// Where the merge is, and up to where it has wiped.
        var cursor = 0, wiped = 0
        init(capacity: Int) throws {
            memory = try SecretBytes(unlockedZeroed: capacity)
            base = memory.withUnsafeMutableBytes { $0.baseAddress! }
        }
        var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: used) }
    }

    static let chunkSize = 1 << 20
    private let chunkSize: Int
    /// How far the merge goes in a chunk before it hands the pages behind it back.
    private var releaseStep: Int { chunkSize / 64 }
    private var chunks: [Chunk?] = []
    /// The chunk records are added to (the last).
    private var open: Chunk?
    /// Where each record of the last chunk starts.
    private var offsets: [Int] = []
    /// What a chunk is sorted through (a chunk of more than one record is `chunkSize`).
    private var scratch: Chunk?
    /// The records, and their bytes with their prefixes.
    private(set) var count = 0, bytes = 0

    init(chunkSize: Int) { self.chunkSize = chunkSize }

    /// Adds a record.
    func append(_ record: UnsafeRawBufferPointer) throws {
        let size = LengthPrefix.size(record.count) + record.count
        if open == nil || open!.memory.count - open!.used < size {
            try sortLastChunk()
            open = try Chunk(capacity: max(chunkSize, size))
            chunks.append(open)
        }
        let chunk = open!
        let k = LengthPrefix.write(record.count, to: chunk.base + chunk.used)
        if let b = record.baseAddress { (chunk.base + chunk.used + k).copyMemory(from: b, byteCount: record.count) }
        offsets.append(chunk.used)
        chunk.used += size
        bytes += size
        count += 1
    }

    /// Sorts the last chunk's records by name, in place.
    func sortLastChunk() throws {
        defer { offsets.removeAll(keepingCapacity: true) }
        guard offsets.count > 1, let chunk = open else { return }
        let all = chunk.bytes
        // Each name read once, not at every comparison.
        var records = offsets.map { o in
            let r = Self.record(in: all, at: o)
            return Spilled(start: o, end: r.end, name: r.name)
        }
        records.sort { $0.name.lexicographicallyPrecedes($1.name) }
        if scratch == nil { scratch = try Chunk(capacity: chunkSize) }
        let into = scratch!.base
        var at = 0
        for r in records {
            (into + at).copyMemory(from: chunk.base + r.start, byteCount: r.end - r.start)
            at += r.end - r.start
        }
        chunk.base.copyMemory(from: into, byteCount: chunk.used)
    }

    /// Lends every record with its prefix in name order, then frees the chunks (wiped).
    func drain(_ body: (UnsafeRawBufferPointer) -> Void) {
        scratch = nil
        open = nil
        // A heap of the chunks by the name of the record each is at (kept with it).
        func head(_ c: Int) -> Spilled {
            let chunk = chunks[c]!
            let r = Self.record(in: chunk.bytes, at: chunk.cursor)
            return Spilled(start: c, end: r.end, name: r.name)
        }
        var heap = chunks.indices.filter { chunks[$0]!.used > 0 }.map(head)
        func siftDown(_ start: Int) {
            var i = start
            while true {
                let l = 2 * i + 1, r = l + 1
                var least = i
                if l < heap.count, heap[l].name.lexicographicallyPrecedes(heap[least].name) { least = l }
                if r < heap.count, heap[r].name.lexicographicallyPrecedes(heap[least].name) { least = r }
                if least == i { return }
                heap.swapAt(i, least)
                i = least
            }
        }
        for i in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(i) }
        while let first = heap.first {
            let c = first.start, end = first.end
            let chunk = chunks[c]!
            body(UnsafeRawBufferPointer(rebasing: chunk.bytes[chunk.cursor..<end]))
            chunk.cursor = end
            if end == chunk.used {
                chunks[c] = nil
                heap.swapAt(0, heap.count - 1)
                heap.removeLast()
            } else {
                if end - chunk.wiped >= releaseStep {
                    // From the page the last release stopped in (it could not hand that one back).
                    let page = ProcessMemory.pageSize
                    let from = max(0, (Int(bitPattern: chunk.base) + chunk.wiped) / page * page - Int(bitPattern: chunk.base))
                    ProcessMemory.releasePages(of: UnsafeMutableRawBufferPointer(start: chunk.base + from, count: end - from))
                    chunk.wiped = end
                }
                heap[0] = head(c)
            }
            siftDown(0)
        }
        chunks.removeAll()
    }

    /// A record of a chunk: where it starts (in a heap of chunks: which chunk) and ends, and its name.
    private struct Spilled {
        var start: Int, end: Int
        var name: UnsafeRawBufferPointer
    }

    /// The record that starts (with its prefix) at `offset`, and where the next one starts.
    private static func record(in all: UnsafeRawBufferPointer, at offset: Int) -> (name: UnsafeRawBufferPointer, end: Int) {
        let (length, k) = LengthPrefix.read(all, at: offset)
        return (UnsafeRawBufferPointer(rebasing: all[(offset + k)..<(offset + k + length)]).name, offset + k + length)
    }
}

private extension UnsafeRawBufferPointer {
    /// The name bytes of an overview record, in place (VaultKit reads the record's first field).
    /// Names are NFC, so the order of these bytes is the order of the names.
    var name: UnsafeRawBufferPointer { ItemOverview.nameBytes(ofRecord: self) }
}

extension AgentCodec {
    /// Splits a page's tail into records.
    /// - Throws: `.failure` for a tail that is not a sequence of length-prefixed records.
    public static func overviews(inListingPage tail: [UInt8]) throws -> [ItemOverview] {
        var out: [ItemOverview] = []
        try forEachRecord(inListingPage: tail) { out.append(try ItemOverview(record: $0)) }
        return out
    }

    /// Lends each record of a page's tail in place, in order.
    /// - Throws: `.failure` for a tail that is not a sequence of length-prefixed records.
    public static func forEachRecord(inListingPage tail: [UInt8], _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var i = 0
        try tail.withUnsafeBytes { all in
            while i < all.count {
                guard all.count - i >= 4 else { throw VaultError.failure("the agent sent a malformed listing page") }
                let n = Int(all[i]) << 24 | Int(all[i + 1]) << 16 | Int(all[i + 2]) << 8 | Int(all[i + 3])
                i += 4
                guard n <= all.count - i else { throw VaultError.failure("the agent sent a malformed listing page") }
                try body(UnsafeRawBufferPointer(rebasing: all[i..<(i + n)]))
                i += n
            }
        }
    }

    /// Walks the tail of a `releasedAll` reply (each item a big-endian u32 length and its
    /// overview record, then a u32 length and its secrets record), lending each item's overview
    /// and secrets in place: the caller has copied the tail into guarded memory.
    /// - Throws: `.failure` for a tail that is not such a sequence, `.corrupt` for a record that
    ///   does not decode.
    public static func forEachReleased(inExport tail: UnsafeRawBufferPointer,
                                       _ body: (ItemOverview, ItemSecrets) throws -> Void) throws {
        var i = 0
        func record() throws -> UnsafeRawBufferPointer {
            guard tail.count - i >= 4 else { throw VaultError.failure("the agent sent a malformed export") }
            let n = Int(tail[i]) << 24 | Int(tail[i + 1]) << 16 | Int(tail[i + 2]) << 8 | Int(tail[i + 3])
            i += 4
            guard n <= tail.count - i else { throw VaultError.failure("the agent sent a malformed export") }
            defer { i += n }
            return UnsafeRawBufferPointer(rebasing: tail[i..<(i + n)])
        }
        while i < tail.count {
            let overview = try ItemOverview(record: try record())
            try body(overview, try ItemSecrets(record: try record(), of: overview.item))
        }
    }
}
