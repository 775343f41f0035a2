internal import Glibc

/// An open file descriptor this value owns: closed in `deinit` unless ownership was given away
/// with ``take()``. Every descriptor VaultSystem opens has `FD_CLOEXEC` set, so no child program
/// inherits it by accident.
public struct FileDescriptor: ~Copyable {
    /// The raw descriptor, borrowed: valid while this value lives; never close it yourself.
    /// `-1` after ``take()`` or ``close()``.
    public private(set) var rawValue: Int32
    /// What errors name: the path it was opened from, or a label such as `standard output`.
    public let label: String?

    /// Takes ownership of `rawValue` (closed when this value ends).
    public init(owning rawValue: Int32, label: String? = nil) {
        self.rawValue = rawValue
        self.label = label
    }

    deinit {
        if rawValue >= 0 { _ = Glibc.close(rawValue) }
    }

    /// How a file is opened for reading and writing.
    public enum Access: Sendable {
        /// `O_RDONLY`.
        case readOnly
        /// `O_WRONLY`.
        case writeOnly
        /// `O_RDWR`.
        case readWrite

        var flags: Int32 {
            switch self {
            case .readOnly: O_RDONLY
            case .writeOnly: O_WRONLY
            case .readWrite: O_RDWR
            }
        }
    }

    /// `open(2)` options besides the access mode (`O_CLOEXEC` is always added).
    public struct Options: OptionSet, Sendable {
        /// The bits passed to `open(2)`.
        public let rawValue: Int32
        /// Options from `open(2)` bits.
        public init(rawValue: Int32) { self.rawValue = rawValue }
        /// `O_CREAT`: create the file when missing.
        public static let create = Options(rawValue: O_CREAT)
        /// `O_EXCL`: with ``create``, fail with `EEXIST` when the name exists (even as a symlink).
        public static let exclusive = Options(rawValue: O_EXCL)
        /// `O_TRUNC`: empty the file.
        public static let truncate = Options(rawValue: O_TRUNC)
        /// `O_APPEND`: every write goes to the end.
        public static let append = Options(rawValue: O_APPEND)
        /// `O_NOFOLLOW`: fail with `ELOOP` when the last component is a symbolic link.
        public static let noFollow = Options(rawValue: O_NOFOLLOW)
        /// `O_NONBLOCK`.
        public static let nonBlocking = Options(rawValue: O_NONBLOCK)
        /// `O_NOCTTY`: opening a terminal does not make it the controlling terminal.
        public static let noControllingTerminal = Options(rawValue: O_NOCTTY)
        /// `O_DIRECTORY`: fail unless it is a folder.
        public static let directory = Options(rawValue: O_DIRECTORY)
    }

    /// Opens `path` (always with `O_CLOEXEC`).
    /// - Parameter mode: the permission bits of a file ``Options/create`` makes (the umask applies).
    /// - Throws: ``SystemError`` for `open` on `path`.
    public static func open(_ path: String, _ access: Access, options: Options = [],
                            mode: UInt32 = 0o600) throws(SystemError) -> FileDescriptor {
        let flags = access.flags | options.rawValue | O_CLOEXEC
        let fd = try syscall("open", path: path) { Glibc.open(path, flags, mode_t(mode)) }
        return FileDescriptor(owning: fd, label: path)
    }

    /// Gives up ownership: returns the raw descriptor, which the caller must close.
    public mutating func take() -> Int32 {
        let fd = rawValue
        rawValue = -1
        return fd
    }

    /// Whether this value still holds a descriptor.
    public var isValid: Bool { rawValue >= 0 }

    /// Closes now and reports the error `close(2)` returns (a delayed write error on NFS, say);
    /// afterwards the value holds nothing. Closing an empty value does nothing.
    /// - Throws: ``SystemError`` for `close`.
    public mutating func close() throws(SystemError) {
        guard rawValue >= 0 else { return }
        let fd = take()
        // Linux frees the descriptor even when close fails (EINTR included): never retried.
        try syscall("close", path: label, retryOnInterrupt: false) { Glibc.close(fd) }
    }

    /// One `read(2)`: fills the front of `buffer`; 0 at end of file. Retries after `EINTR`.
    /// - Throws: ``SystemError`` for `read` (`EAGAIN` on an empty non-blocking descriptor).
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
        try readSome(fd: rawValue, into: buffer, label: label)
    }

    /// Exactly `count` bytes, fewer only when the input ends first (none at all at end of file).
    /// - Throws: ``SystemError`` for `read`.
    public func readExactly(_ count: Int) throws(SystemError) -> [UInt8] {
        try VaultSystem.readExactly(fd: rawValue, count: count, label: label)
    }

    /// Everything up to end of file.
    /// - Throws: ``SystemError`` for `read`; `EFBIG` (``Errno/tooLarge``) past `limit` bytes.
    public func readAll(limit: Int) throws(SystemError) -> [UInt8] {
        try VaultSystem.readAll(fd: rawValue, limit: limit, label: label)
    }

    /// Writes every byte (see ``writeAll(fd:bytes:label:)``).
    /// - Throws: ``SystemError`` for `write`: a full disk, a closed pipe, ...
    public func writeAll(_ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        try VaultSystem.writeAll(fd: rawValue, bytes: bytes, label: label)
    }

    /// Writes every byte of `bytes`.
    /// - Throws: ``SystemError`` for `write`.
    public func writeAll(_ bytes: [UInt8]) throws(SystemError) {
        try VaultSystem.writeAll(fd: rawValue, bytes: bytes, label: label)
    }

    /// One `write(2)` of `bytes` (retried after `EINTR` only): how many it took, perhaps fewer
    /// than all. For a peer that must never make us wait (a terminal someone else may have
    /// stalled): on a non-blocking descriptor that is full it throws `EAGAIN` at once.
    /// - Throws: ``SystemError`` for `write` (``SystemError/isWouldBlock`` when full).
    public func writeSome(_ bytes: [UInt8]) throws(SystemError) -> Int {
        let fd = rawValue
        return try syscall("write", path: label) { bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } }
    }

    /// Flushes the file's data to the disk; a failure means the data may be lost and is thrown.
    /// - Throws: ``SystemError`` for `fsync`.
    public func sync() throws(SystemError) {
        let fd = rawValue
        try syscall("fsync", path: label) { fsync(fd) }
    }

    /// Cuts the file to `size` bytes (or extends it with a hole): `ftruncate(2)`, which gives the
    /// blocks past `size` back to the file system at once.
    /// - Throws: ``SystemError`` for `ftruncate`.
    public func truncate(to size: Int64) throws(SystemError) {
        let fd = rawValue
        try syscall("ftruncate", path: label) { ftruncate(fd, off_t(size)) }
    }

    /// Turns `O_NONBLOCK` on or off.
    /// - Throws: ``SystemError`` for `fcntl`.
    public func setNonBlocking(_ on: Bool) throws(SystemError) {
        try VaultSystem.setNonBlocking(fd: rawValue, on, label: label)
    }

    /// What `fstat(2)` says about the descriptor.
    /// - Throws: ``SystemError`` for `fstat`.
    public func status() throws(SystemError) -> FileStatus {
        let fd = rawValue
        var st = stat()
        try syscall("fstat", path: label) { fstat(fd, &st) }
        return FileStatus(st)
    }

    /// A new descriptor for the same open file (`F_DUPFD_CLOEXEC`).
    /// - Throws: ``SystemError`` for `fcntl`.
    public func duplicate() throws(SystemError) -> FileDescriptor {
        let fd = rawValue
        let copy = try syscall("fcntl", path: label) { fcntl(fd, F_DUPFD_CLOEXEC, 0) }
        return FileDescriptor(owning: copy, label: label)
    }
}

/// The parts of `struct stat` VaultSystem's callers use.
public struct FileStatus: Equatable, Sendable {
    /// What kind of file.
    public enum Kind: Sendable, Equatable {
        /// A regular file.
        case regular
        /// A folder.
        case directory
        /// A symbolic link (only from `lstat`).
        case symbolicLink
        /// A Unix socket.
        case socket
        /// A pipe or FIFO.
        case fifo
        /// A character device (a terminal, `/dev/null`).
        case characterDevice
        /// A block device.
        case blockDevice
    }

    /// The file's kind.
    public let kind: Kind
    /// The permission bits (`mode & 0o7777`).
    public let permissions: UInt32
    /// The owner's uid.
    public let owner: UInt32
    /// The size in bytes.
    public let size: Int64
    /// The inode number.
    public let inode: UInt64
    /// The device holding the file (`st_dev`): with ``inode``, which file this is.
    public let device: UInt64
    /// The last modification, in nanoseconds since 1970.
    public let modifiedNanoseconds: Int64
    /// The last status change, in nanoseconds since 1970.
    public let changedNanoseconds: Int64
    /// The bytes of storage allocated to it (`st_blocks` × 512): less than ``size`` for a sparse file.
    public let allocatedBytes: Int64

    init(_ st: stat) {
        switch st.st_mode & S_IFMT {
        case S_IFDIR: kind = .directory
        case S_IFLNK: kind = .symbolicLink
        case S_IFSOCK: kind = .socket
        case S_IFIFO: kind = .fifo
        case S_IFCHR: kind = .characterDevice
        case S_IFBLK: kind = .blockDevice
        default: kind = .regular
        }
        permissions = UInt32(st.st_mode & 0o7777)
        owner = st.st_uid
        size = Int64(st.st_size)
        inode = UInt64(st.st_ino)
        device = UInt64(st.st_dev)
        modifiedNanoseconds = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
        changedNanoseconds = Int64(st.st_ctim.tv_sec) * 1_000_000_000 + Int64(st.st_ctim.tv_nsec)
        allocatedBytes = Int64(st.st_blocks) * 512
    }

    /// `lstat(2)`: the path itself, a symbolic link not followed.
    /// - Throws: ``SystemError`` for `lstat` (``SystemError/isNotFound`` when missing).
    public static func of(_ path: String, followingLinks: Bool = false) throws(SystemError) -> FileStatus {
        var st = stat()
        if followingLinks {
            try syscall("stat", path: path) { stat(path, &st) }
        } else {
            try syscall("lstat", path: path) { lstat(path, &st) }
        }
        return FileStatus(st)
    }
}

// MARK: - raw descriptors we do not own (stdin, stdout, a passcode descriptor)

/// One `read(2)` on a descriptor we do not own; 0 at end of file. Retries after `EINTR` unless
/// `retryOnInterrupt` is false.
/// - Throws: ``SystemError`` for `read`.
public func readSome(fd: Int32, into buffer: UnsafeMutableRawBufferPointer, label: String? = nil,
                     retryOnInterrupt: Bool = true) throws(SystemError) -> Int {
    guard let base = buffer.baseAddress, buffer.count > 0 else { return 0 }
    return try syscall("read", path: label ?? descriptorLabel(fd), retryOnInterrupt: retryOnInterrupt) {
        Glibc.read(fd, base, buffer.count)
    }
}

/// Exactly `count` bytes from `fd`, fewer only when the input ends first.
/// - Throws: ``SystemError`` for `read`.
public func readExactly(fd: Int32, count: Int, label: String? = nil) throws(SystemError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    var filled = 0
    while filled < count {
        let n = try narrowing {
            try out.withUnsafeMutableBytes { b in
                try readSome(fd: fd, into: UnsafeMutableRawBufferPointer(rebasing: b[filled...]), label: label)
            }
        }
        if n == 0 { break }
        filled += n
    }
    if filled < count { out.removeSubrange(filled...) }
    return out
}

/// Everything `fd` gives up to end of file.
/// - Throws: ``SystemError`` for `read`; `EFBIG` (``Errno/tooLarge``) past `limit` bytes.
public func readAll(fd: Int32, limit: Int, label: String? = nil) throws(SystemError) -> [UInt8] {
    var out: [UInt8] = []
    // Read into a chunk no larger than the limit needs (one byte over it tells a file too long),
    // never zeroed as a whole: each read's bytes are wiped once copied out.
    let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: limit < 16384 ? max(1, limit + 1) : 16384, alignment: 16)
    defer { chunk.deallocate() }
    while true {
        let n = try readSome(fd: fd, into: chunk, label: label)
        let arrived = UnsafeMutableRawBufferPointer(rebasing: chunk[0..<n])
        defer { wipe(arrived) }
        if n == 0 { return out }
        guard out.count + n <= limit else {
            wipe(&out)
            throw SystemError(call: "read", path: label ?? descriptorLabel(fd), code: EFBIG)
        }
        out += UnsafeRawBufferPointer(arrived)
    }
}

/// Writes every byte to a descriptor we do not own: loops over partial writes and `EINTR`, and on
/// a non-blocking descriptor that is full (`EAGAIN`) waits with `poll` until it takes more.
/// - Throws: ``SystemError`` for `write` (`ENOSPC` for a full disk, `EPIPE` for a closed pipe when
///   `SIGPIPE` is ignored); nothing is ever dropped silently.
public func writeAll(fd: Int32, bytes: UnsafeRawBufferPointer, label: String? = nil) throws(SystemError) {
    guard let base = bytes.baseAddress else { return }
    var offset = 0
    while offset < bytes.count {
        do {
            let n = try syscall("write", path: label ?? descriptorLabel(fd)) { Glibc.write(fd, base + offset, bytes.count - offset) }
            offset += n
        } catch where error.isWouldBlock {
            _ = try Poll.wait([PollRequest(fd: fd, events: .writable)], timeoutMilliseconds: -1)
        }
    }
}

/// Writes every byte of `bytes` to `fd` (see ``writeAll(fd:bytes:label:)-(_,UnsafeRawBufferPointer,_)``).
/// - Throws: ``SystemError`` for `write`.
public func writeAll(fd: Int32, bytes: [UInt8], label: String? = nil) throws(SystemError) {
    try narrowing { try bytes.withUnsafeBytes { b in try writeAll(fd: fd, bytes: b, label: label) } }
}

/// Whether `fd` is an open descriptor (`fcntl(F_GETFD)`).
public func isOpen(_ fd: Int32) -> Bool {
    fd >= 0 && fcntl(fd, F_GETFD) != -1
}

/// Whether `fd` is a terminal (`isatty`).
public func isTerminal(_ fd: Int32) -> Bool {
    isatty(fd) == 1
}

/// Sets `FD_CLOEXEC` on a descriptor inherited without it (one placed by `dup2` for a child):
/// no program this process runs inherits it.
/// - Throws: ``SystemError`` for `fcntl`.
public func setCloseOnExec(fd: Int32, label: String? = nil) throws(SystemError) {
    let flags = try syscall("fcntl", path: label ?? descriptorLabel(fd)) { fcntl(fd, F_GETFD) }
    if flags & FD_CLOEXEC == 0 { try syscall("fcntl", path: label ?? descriptorLabel(fd)) { fcntl(fd, F_SETFD, flags | FD_CLOEXEC) } }
}

/// Turns `O_NONBLOCK` on or off on a descriptor.
/// - Throws: ``SystemError`` for `fcntl`.
public func setNonBlocking(fd: Int32, _ on: Bool, label: String? = nil) throws(SystemError) {
    let flags = try syscall("fcntl", path: label ?? descriptorLabel(fd)) { fcntl(fd, F_GETFL) }
    let wanted = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
    if wanted != flags { try syscall("fcntl", path: label ?? descriptorLabel(fd)) { fcntl(fd, F_SETFL, wanted) } }
}

/// Overwrites an array that held secret bytes with zeros and empties it.
public func wipe(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { b in
        if let p = b.baseAddress { memset(p, 0, b.count) }
    }
    bytes.removeAll()
}

/// Overwrites memory that held secret bytes with zeros (`explicit_bzero`: never left out as a
/// store nobody reads).
public func wipe(_ bytes: UnsafeMutableRawBufferPointer) {
    if let p = bytes.baseAddress, bytes.count > 0 { explicit_bzero(p, bytes.count) }
}

/// How errors name a descriptor without a label.
func descriptorLabel(_ fd: Int32) -> String {
    switch fd {
    case 0: "standard input"
    case 1: "standard output"
    case 2: "standard error"
    default: "fd \(fd)"
    }
}

/// A pipe (named so as not to clash with Foundation's `Pipe`): both ends close-on-exec, each owned.
public struct UnixPipe: ~Copyable {
    /// The end to read from.
    public var readEnd: FileDescriptor
    /// The end to write to.
    public var writeEnd: FileDescriptor

    /// `pipe2(O_CLOEXEC)`.
    /// - Throws: ``SystemError`` for `pipe2`.
    public init() throws(SystemError) {
        var ends: [Int32] = [-1, -1]
        try syscall("pipe2") { pipe2(&ends, O_CLOEXEC) }
        readEnd = FileDescriptor(owning: ends[0], label: "pipe")
        writeEnd = FileDescriptor(owning: ends[1], label: "pipe")
    }
}

/// Array's `withUnsafe(Mutable)Bytes` rethrow as `any Error`; this narrows back to the one error
/// the bodies here throw.
func narrowing<T>(_ body: () throws -> T) throws(SystemError) -> T {
    do { return try body() } catch let error as SystemError { throw error } catch {
        preconditionFailure("only SystemError is thrown here: \(error)")
    }
}

/// `pipe2(2)` and `accept4(2)` are GNU extensions the Glibc module hides; bound by symbol.
@_silgen_name("pipe2")
func pipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32
@_silgen_name("accept4")
func accept4(_ fd: Int32, _ address: UnsafeMutableRawPointer?, _ length: UnsafeMutableRawPointer?, _ flags: Int32) -> Int32
