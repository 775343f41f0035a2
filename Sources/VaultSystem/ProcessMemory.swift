internal import Glibc

/// The process's heap as the kernel sees it.
public enum ProcessMemory {
    private typealias MallocTrim = @convention(c) (Int) -> Int32

    /// glibc's `malloc_trim`, looked up by name: a C library without one (musl, in a fully static
    /// build) leaves it nil and the call below does nothing.
    private static let mallocTrim: MallocTrim? = {
        guard let symbol = dlsym(nil /* RTLD_DEFAULT */, "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: MallocTrim.self)
    }()

    /// Hands the heap's free pages back to the kernel (`malloc_trim(0)`: every arena, the pages
    /// inside free chunks too), so a long-lived process's resident size falls back after a burst
    /// of allocations (a listing of a large vault, an export). It frees nothing that is in use;
    /// its cost grows with the heap's size, so it is for after such a burst, not every request.
    public static func returnFreePages() {
        _ = mallocTrim?(0)
    }

    /// Unlocks the pages `region` is on (`munlock`, which takes them from the start of the
    /// first): they may be swapped again. Pages that were not locked are left as they are.
    public static func unlockPages(of region: UnsafeMutableRawBufferPointer) {
        guard let start = region.baseAddress, region.count > 0 else { return }
        _ = munlock(start, region.count)
    }

    /// The size of a page.
    public static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// Zeroes `region` and gives its whole pages back to the kernel (`madvise(MADV_DONTNEED)`: a
    /// private anonymous page reads as zeros afterwards and takes no memory until written). For
    /// bytes of a large mapping of one's own, such as guarded memory, that are done with or not
    /// written yet; the mapping stays, so its owner frees it as usual.
    public static func releasePages(of region: UnsafeMutableRawBufferPointer) {
        guard let start = region.baseAddress, region.count > 0 else { return }
        start.initializeMemory(as: UInt8.self, repeating: 0, count: region.count)
        let first = (Int(bitPattern: start) + pageSize - 1) / pageSize * pageSize
        let end = (Int(bitPattern: start) + region.count) / pageSize * pageSize
        guard end > first, let p = UnsafeMutableRawPointer(bitPattern: first) else { return }
        _ = madvise(p, end - first, MADV_DONTNEED)
    }
}
