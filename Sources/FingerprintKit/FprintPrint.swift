internal import CFprint

/// Owns one reference to an `FpPrint`. Created and used on the libfprint thread; released there.
final class FprintPrint {
    let pointer: OpaquePointer
    private let thread: FprintThread

    /// Adopts a reference the caller owns (transfer full), sinking it if it is still floating.
    init(adopting pointer: OpaquePointer, thread: FprintThread) {
        if g_object_is_floating(gpointer(pointer)) != 0 {
            g_object_ref_sink(gpointer(pointer))
        }
        self.pointer = pointer
        self.thread = thread
    }

    /// Takes a new reference to a print someone else owns (transfer none).
    convenience init(retaining pointer: OpaquePointer, thread: FprintThread) {
        g_object_ref(gpointer(pointer))
        self.init(adopting: pointer, thread: thread)
    }

    /// Reads `fp_print_serialize` output back.
    convenience init(serialized bytes: [UInt8], thread: FprintThread) throws(FingerprintError) {
        // Checked first so that garbage is refused here rather than logged by libfprint.
        let envelope = try Self.envelope(bytes)
        g_variant_unref(envelope)
        let print = try bytes.withUnsafeBufferPointer { (buffer) throws(FingerprintError) in
            try fprintCall { fp_print_deserialize(buffer.baseAddress, gsize(buffer.count), $0) }
        }
        guard let print else { throw .invalidPrint }
        self.init(adopting: print, thread: thread)
    }

    deinit {
        let pointer = Pointer(value: UnsafeMutableRawPointer(pointer))
        thread.async { g_object_unref(pointer.value) }
    }

    /// `fp_print_serialize`: the bytes a caller stores to match against later.
    func serialized() throws(FingerprintError) -> [UInt8] {
        var data: UnsafeMutablePointer<guchar>?
        var length: gsize = 0
        _ = try fprintCall { fp_print_serialize(pointer, &data, &length, $0) }
        guard let data else { throw .failed("libfprint returned no print data") }
        defer { g_free(data) }
        return Array(UnsafeBufferPointer(start: data, count: Int(length)))
    }

    /// `fp_print_equal`: same type, driver, device id and template data; metadata is ignored.
    func isEqual(to other: FprintPrint) -> Bool {
        fp_print_equal(pointer, other.pointer) != 0
    }

    /// `fp_print_compatible`: enrolled with this device's driver and device id.
    func isCompatible(with device: FprintDevice) -> Bool {
        fp_print_compatible(pointer, device.pointer) != 0
    }

    func metadata(identity: String) -> PrintMetadata {
        PrintMetadata(
            driver: string(fp_print_get_driver(pointer)) ?? "",
            deviceID: string(fp_print_get_device_id(pointer)) ?? "",
            finger: Finger(fp_print_get_finger(pointer)),
            username: string(fp_print_get_username(pointer)),
            deviceStored: fp_print_get_device_stored(pointer) != 0,
            identity: identity)
    }

    private static let magic: [UInt8] = Array("FP3".utf8)

    /// The identity of a serialized print (see ``PrintMetadata/identity``): SHA-256 over the fields
    /// `fp_print_equal` compares (type, driver, device id, template).
    static func identity(ofSerialized bytes: [UInt8]) throws(FingerprintError) -> String {
        let value = try envelope(bytes)
        defer { g_variant_unref(value) }
        let children: [OpaquePointer?] = [0, 1, 2, 9].map { g_variant_get_child_value(value, $0) }
        defer { children.forEach { g_variant_unref($0) } }
        let key = children.withUnsafeBufferPointer {
            g_variant_ref_sink(g_variant_new_tuple($0.baseAddress, gsize($0.count)))
        }
        defer { g_variant_unref(key) }
        guard let checksum = g_compute_checksum_for_data(
            G_CHECKSUM_SHA256, g_variant_get_data(key)?.assumingMemoryBound(to: guchar.self),
            g_variant_get_size(key))
        else { throw .invalidPrint }
        defer { g_free(checksum) }
        return String(cString: checksum)
    }

    /// Parses the serialized form (the caller unrefs the result): "FP3", then a GVariant
    /// `(issbymsmsia{sv}v)` in normal form holding type, driver, device id, device-stored, finger,
    /// user name, description, enrolment date, extensions and template. The type must be one
    /// libfprint knows (1 raw, 2 NBIS minutiae).
    private static func envelope(_ bytes: [UInt8]) throws(FingerprintError) -> OpaquePointer {
        guard bytes.count > 3, bytes.starts(with: magic) else { throw .invalidPrint }
        let type = g_variant_type_new("(issbymsmsia{sv}v)")
        defer { g_variant_type_free(type) }
        let payload = bytes.dropFirst(3).withUnsafeBytes { g_bytes_new($0.baseAddress, gsize($0.count)) }
        defer { g_bytes_unref(payload) }
        guard let value = g_variant_ref_sink(g_variant_new_from_bytes(type, payload, 0)) else {
            throw .invalidPrint
        }
        let printType = g_variant_get_child_value(value, 0)
        defer { g_variant_unref(printType) }
        guard g_variant_is_normal_form(value) != 0, (1...2).contains(g_variant_get_int32(printType)) else {
            g_variant_unref(value)
            throw .invalidPrint
        }
        return value
    }
}

/// A raw pointer moved to the libfprint thread for release; the GObject refcount is thread-safe.
struct Pointer: @unchecked Sendable {
    let value: UnsafeMutableRawPointer
}

extension Finger {
    init?(_ finger: FpFinger) {
        switch finger {
        case FP_FINGER_LEFT_THUMB: self = .leftThumb
        case FP_FINGER_LEFT_INDEX: self = .leftIndex
        case FP_FINGER_LEFT_MIDDLE: self = .leftMiddle
        case FP_FINGER_LEFT_RING: self = .leftRing
        case FP_FINGER_LEFT_LITTLE: self = .leftLittle
        case FP_FINGER_RIGHT_THUMB: self = .rightThumb
        case FP_FINGER_RIGHT_INDEX: self = .rightIndex
        case FP_FINGER_RIGHT_MIDDLE: self = .rightMiddle
        case FP_FINGER_RIGHT_RING: self = .rightRing
        case FP_FINGER_RIGHT_LITTLE: self = .rightLittle
        default: return nil
        }
    }

    var fpFinger: FpFinger {
        switch self {
        case .leftThumb: FP_FINGER_LEFT_THUMB
        case .leftIndex: FP_FINGER_LEFT_INDEX
        case .leftMiddle: FP_FINGER_LEFT_MIDDLE
        case .leftRing: FP_FINGER_LEFT_RING
        case .leftLittle: FP_FINGER_LEFT_LITTLE
        case .rightThumb: FP_FINGER_RIGHT_THUMB
        case .rightIndex: FP_FINGER_RIGHT_INDEX
        case .rightMiddle: FP_FINGER_RIGHT_MIDDLE
        case .rightRing: FP_FINGER_RIGHT_RING
        case .rightLittle: FP_FINGER_RIGHT_LITTLE
        }
    }
}
