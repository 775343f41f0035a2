internal import CFprint

/// Owns one `GCancellable`; ``cancel()`` may be called from any thread.
final class GLibCancellable: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<GCancellable>

    init() { pointer = g_cancellable_new() }

    deinit { g_object_unref(gpointer(pointer)) }

    /// Cancels on the libfprint thread. libfprint's "cancelled" handler runs in the thread that calls
    /// `g_cancellable_cancel` and is not thread-safe: it attaches an idle source and then unrefs it
    /// through a field the libfprint thread may already have cleared (a GLib CRITICAL, a leaked
    /// source, a data race). So the cancel itself is an idle callback on the default main context,
    /// which only the libfprint thread iterates, and it does so continuously.
    func cancel() {
        g_object_ref(gpointer(pointer))
        g_idle_add_full(
            G_PRIORITY_HIGH,
            { cancellable in
                g_cancellable_cancel(cancellable?.assumingMemoryBound(to: GCancellable.self))
                g_object_unref(cancellable)
                return 0  // G_SOURCE_REMOVE
            }, gpointer(pointer), nil)
    }

    var isCancelled: Bool { g_cancellable_is_cancelled(pointer) != 0 }
}

/// Bytes as lowercase hex.
func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var text = [UInt8]()
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0f)])
    }
    return String(decoding: text, as: UTF8.self)
}

/// A C string owned by GLib, copied into Swift; nil stays nil.
func string(_ text: UnsafePointer<gchar>?) -> String? {
    text.map { String(cString: $0) }
}
