import FoundationEssentials

/// A plain JSON coder for `Codable` messages (the agent's and the key authority's frames, the
/// reader link): the same JSON as Foundation's `JSONEncoder`/`JSONDecoder` for the types vault
/// sends (`Data` as base64, as Foundation writes it; no `Date` or `URL` among them), written by `JSONText`'s string escaping and read
/// by `JSONValue`. Foundation's coder asks the runtime, for every type it meets, whether it
/// conforms to its private marker protocols; in a statically linked vault each first question
/// scans every conformance record of the binary, which was half of the CPU a `vault get` in a
/// session spent in its own code (docs/performance.md). This coder asks nothing of the runtime.
package enum WireJSON {
    /// `value` as JSON text.
    /// - Throws: `EncodingError.invalidValue` for a non-finite number.
    package static func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        try encodeNode(value, path: []).write(to: &out)
        return out
    }

    /// The one key of the object `decoder` reads when it is this coder's (a message coded by
    /// hand: `{"case":{...}}`), else of `container`: `allKeys` hands the keys over as
    /// existentials cast back one by one, and the first such cast asks the runtime for the key
    /// type's conformance (a scan of every conformance record). nil unless exactly one key.
    package static func onlyKey(of decoder: any Decoder, _ container: KeyedDecodingContainer<WireKey>) -> WireKey? {
        if let tree = decoder as? TreeDecoder {
            guard case .object(let members) = tree.value, members.count == 1 else { return nil }
            return WireKey(stringValue: members[0].key)
        }
        let keys = container.allKeys
        return keys.count == 1 ? keys[0] : nil
    }

    /// The `T` in `bytes`.
    /// - Throws: `DecodingError` with the coding path (malformed JSON is `.dataCorrupted` at the
    ///   top), as Foundation's decoder does.
    package static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try bytes.withUnsafeBytes { try decode(type, from: $0) }
    }

    /// The `T` in `bytes`, read where they are (an opened record in guarded memory is not copied).
    /// - Throws: as `decode(_:from:)` above.
    package static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) throws -> T {
        let value: JSONValue
        do { value = try JSONValue.parse(bytes.bindMemory(to: UInt8.self)) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "not JSON: \(error.reason) at byte \(error.offset)"))
        }
        return try decodeValue(type, value, path: [])
    }
}

// MARK: encoding

/// A value being built: containers are classes so a nested container can be filled after it was
/// placed in its parent (as `Encoder` allows).
private final class Node {
    enum Kind { case value(JSONValue), object([(String, Node)]), array([Node]), unset }
    var kind: Kind = .unset

    func write(to out: inout [UInt8]) throws {
        switch kind {
        case .unset: out += Array("{}".utf8)
        case .value(let v): try Node.write(v, to: &out)
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, (k, v)) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(k, to: &out)
                out.append(UInt8(ascii: ":"))
                try v.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (i, e) in elements.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                try e.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        }
    }

    static func write(_ v: JSONValue, to out: inout [UInt8]) throws {
        switch v {
        case .string(let s): JSONText.appendString(s, to: &out)
        case .number(let n): out += Array(n.utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .null: out += Array("null".utf8)
        case .array, .object: preconditionFailure("containers are Nodes")
        }
    }
}

/// The one coding key type of the messages coded by hand (the agent's requests and replies):
/// any string, written as a literal (`"vault"`).
package struct WireKey: CodingKey, ExpressibleByStringLiteral, Sendable {
    package var stringValue: String
    package var intValue: Int?
    package init(stringValue: String) { self.stringValue = stringValue }
    package init(intValue: Int) { self.stringValue = "\(intValue)"; self.intValue = intValue }
    package init(stringLiteral value: String) { self.stringValue = value }
}

private func number<N: BinaryInteger>(_ n: N) -> JSONValue { .number(String(n)) }

private func number(_ d: Double, _ path: [any CodingKey]) throws -> JSONValue {
    guard d.isFinite else { throw EncodingError.invalidValue(d, .init(codingPath: path, debugDescription: "not a finite number")) }
    if d == d.rounded(), abs(d) < 1e15 { return .number(String(Int64(d))) }
    return .number("\(d)")
}

private final class TreeEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    let node = Node()

    init(path: [any CodingKey]) { codingPath = path }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.kind {} else { node.kind = .object([]) }
        return KeyedEncodingContainer(KeyedEncoder<Key>(node: node, path: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.kind {} else { node.kind = .array([]) }
        return UnkeyedEncoder(node: node, path: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleEncoder(node: node, path: codingPath) }
}

/// Encodes `value` into a fresh node (nested `Encodable` values, through their own `encode(to:)`).
private func encodeNode<T: Encodable>(_ value: T, path: [any CodingKey]) throws -> Node {
    // A metatype comparison, not a conformance question: the one Foundation type on the wire.
    if T.self == Data.self {
        let n = Node()
        n.kind = .value(.string((value as! Data).base64EncodedString()))
        return n
    }
    let e = TreeEncoder(path: path)
    try value.encode(to: e)
    return e.node
}

private struct KeyedEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }

    func put(_ key: Key, _ child: Node) {
        guard case .object(var members) = node.kind else { return }
        members.removeAll { $0.0 == key.stringValue }
        members.append((key.stringValue, child))
        node.kind = .object(members)
    }

    func put(_ key: Key, _ value: JSONValue) {
        let n = Node()
        n.kind = .value(value)
        put(key, n)
    }

    mutating func encodeNil(forKey key: Key) throws { put(key, .null) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { put(key, .bool(value)) }
    mutating func encode(_ value: String, forKey key: Key) throws { put(key, .string(value)) }
    mutating func encode(_ value: Double, forKey key: Key) throws { put(key, try number(value, path + [key])) }
    mutating func encode(_ value: Float, forKey key: Key) throws { put(key, try number(Double(value), path + [key])) }
    mutating func encode(_ value: Int, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { put(key, number(value)) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { put(key, try encodeNode(value, path: path + [key])) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = Node()
        child.kind = .object([])
        put(key, child)
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, path: path + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = Node()
        child.kind = .array([])
        put(key, child)
        return UnkeyedEncoder(node: child, path: path + [key])
    }

    mutating func superEncoder() -> any Encoder { superEncoder(forKey: Key(stringValue: "super")!) }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        let e = TreeEncoder(path: path + [key])
        put(key, e.node)
        return e
    }
}

private struct UnkeyedEncoder: UnkeyedEncodingContainer {
    let node: Node
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }
    var count: Int { if case .array(let a) = node.kind { a.count } else { 0 } }

    func add(_ child: Node) {
        guard case .array(var elements) = node.kind else { return }
        elements.append(child)
        node.kind = .array(elements)
    }

    func add(_ value: JSONValue) {
        let n = Node()
        n.kind = .value(value)
        add(n)
    }

    var here: [any CodingKey] { path + [WireKey(intValue: count)] }

    mutating func encodeNil() throws { add(.null) }
    mutating func encode(_ value: Bool) throws { add(.bool(value)) }
    mutating func encode(_ value: String) throws { add(.string(value)) }
    mutating func encode(_ value: Double) throws { add(try number(value, here)) }
    mutating func encode(_ value: Float) throws { add(try number(Double(value), here)) }
    mutating func encode(_ value: Int) throws { add(number(value)) }
    mutating func encode(_ value: Int8) throws { add(number(value)) }
    mutating func encode(_ value: Int16) throws { add(number(value)) }
    mutating func encode(_ value: Int32) throws { add(number(value)) }
    mutating func encode(_ value: Int64) throws { add(number(value)) }
    mutating func encode(_ value: UInt) throws { add(number(value)) }
    mutating func encode(_ value: UInt8) throws { add(number(value)) }
    mutating func encode(_ value: UInt16) throws { add(number(value)) }
    mutating func encode(_ value: UInt32) throws { add(number(value)) }
    mutating func encode(_ value: UInt64) throws { add(number(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { add(try encodeNode(value, path: here)) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = Node()
        child.kind = .object([])
        let at = here
        add(child)
        return KeyedEncodingContainer(KeyedEncoder<NestedKey>(node: child, path: at))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = Node()
        child.kind = .array([])
        let at = here
        add(child)
        return UnkeyedEncoder(node: child, path: at)
    }

    mutating func superEncoder() -> any Encoder {
        let e = TreeEncoder(path: here)
        add(e.node)
        return e
    }
}

private struct SingleEncoder: SingleValueEncodingContainer {
    let node: Node
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }

    func set(_ v: JSONValue) { node.kind = .value(v) }

    mutating func encodeNil() throws { set(.null) }
    mutating func encode(_ value: Bool) throws { set(.bool(value)) }
    mutating func encode(_ value: String) throws { set(.string(value)) }
    mutating func encode(_ value: Double) throws { set(try number(value, path)) }
    mutating func encode(_ value: Float) throws { set(try number(Double(value), path)) }
    mutating func encode(_ value: Int) throws { set(number(value)) }
    mutating func encode(_ value: Int8) throws { set(number(value)) }
    mutating func encode(_ value: Int16) throws { set(number(value)) }
    mutating func encode(_ value: Int32) throws { set(number(value)) }
    mutating func encode(_ value: Int64) throws { set(number(value)) }
    mutating func encode(_ value: UInt) throws { set(number(value)) }
    mutating func encode(_ value: UInt8) throws { set(number(value)) }
    mutating func encode(_ value: UInt16) throws { set(number(value)) }
    mutating func encode(_ value: UInt32) throws { set(number(value)) }
    mutating func encode(_ value: UInt64) throws { set(number(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = try encodeNode(value, path: path)
        node.kind = child.kind
    }
}

// MARK: decoding

/// A `T` from `value`; `Data` from base64, as Foundation reads it.
private func decodeValue<T: Decodable>(_ type: T.Type, _ value: JSONValue, path: [any CodingKey]) throws -> T {
    if T.self == Data.self {
        guard case .string(let s) = value else { throw mismatch(String.self, value, path) }
        guard let d = Data(base64Encoded: s) else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "not base64"))
        }
        return d as! T
    }
    return try T(from: TreeDecoder(value: value, path: path))
}

private struct TreeDecoder: Decoder {
    let value: JSONValue
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch([String: JSONValue].self, value, path) }
        return KeyedDecodingContainer(KeyedDecoder<Key>(members: members, path: path))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw mismatch([Any].self, value, path) }
        return UnkeyedDecoder(elements: elements, path: path)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleDecoder(value: value, path: path) }
}

private func mismatch(_ type: Any.Type, _ value: JSONValue, _ path: [any CodingKey]) -> DecodingError {
    if value == .null { return .valueNotFound(type, .init(codingPath: path, debugDescription: "null where a value is expected")) }
    return .typeMismatch(type, .init(codingPath: path, debugDescription: "a value of another type"))
}

/// The scalar readers every container shares.
private enum Scalar {
    static func bool(_ v: JSONValue, _ path: [any CodingKey]) throws -> Bool {
        guard case .bool(let b) = v else { throw mismatch(Bool.self, v, path) }
        return b
    }

    static func string(_ v: JSONValue, _ path: [any CodingKey]) throws -> String {
        guard case .string(let s) = v else { throw mismatch(String.self, v, path) }
        return s
    }

    static func double(_ v: JSONValue, _ path: [any CodingKey]) throws -> Double {
        guard case .number(let text) = v else { throw mismatch(Double.self, v, path) }
        guard let d = Double(text), d.isFinite else {
            throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "the number \(text) does not fit"))
        }
        return d
    }

    static func integer<N: FixedWidthInteger>(_ v: JSONValue, _ path: [any CodingKey]) throws -> N {
        guard case .number(let text) = v else { throw mismatch(N.self, v, path) }
        if let n = N(text) { return n }
        // 1e3 or 5.0: an integer written as a float, as Foundation's decoder accepts it.
        if let d = Double(text), d == d.rounded(), let n = N(exactly: d) { return n }
        throw DecodingError.dataCorrupted(.init(codingPath: path, debugDescription: "the number \(text) does not fit \(N.self)"))
    }
}

private struct KeyedDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [(key: String, value: JSONValue)]
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }
    var allKeys: [Key] { members.compactMap { Key(stringValue: $0.key) } }

    func contains(_ key: Key) -> Bool { members.contains { $0.key == key.stringValue } }

    func value(_ key: Key) throws -> JSONValue {
        guard let v = members.first(where: { $0.key == key.stringValue })?.value else {
            throw DecodingError.keyNotFound(key, .init(codingPath: path, debugDescription: "no value for '\(key.stringValue)'"))
        }
        return v
    }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key) == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try Scalar.bool(value(key), path + [key]) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try Scalar.string(value(key), path + [key]) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try Scalar.double(value(key), path + [key]) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try Scalar.double(value(key), path + [key])) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try Scalar.integer(value(key), path + [key]) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try Scalar.integer(value(key), path + [key]) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try decodeValue(type, value(key), path: path + [key]) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try TreeDecoder(value: value(key), path: path + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try TreeDecoder(value: value(key), path: path + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { try superDecoder(forKey: Key(stringValue: "super")!) }
    func superDecoder(forKey key: Key) throws -> any Decoder { TreeDecoder(value: try value(key), path: path + [key]) }
}

private struct UnkeyedDecoder: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let path: [any CodingKey]
    var currentIndex = 0
    var codingPath: [any CodingKey] { path }
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    init(elements: [JSONValue], path: [any CodingKey]) {
        self.elements = elements
        self.path = path
    }

    var here: [any CodingKey] { path + [WireKey(intValue: currentIndex)] }

    mutating func next(_ type: Any.Type) throws -> JSONValue {
        guard !isAtEnd else { throw DecodingError.valueNotFound(type, .init(codingPath: here, debugDescription: "the array ends")) }
        defer { currentIndex += 1 }
        return elements[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { let p = here; return try Scalar.bool(next(type), p) }
    mutating func decode(_ type: String.Type) throws -> String { let p = here; return try Scalar.string(next(type), p) }
    mutating func decode(_ type: Double.Type) throws -> Double { let p = here; return try Scalar.double(next(type), p) }
    mutating func decode(_ type: Float.Type) throws -> Float { let p = here; return Float(try Scalar.double(next(type), p)) }
    mutating func decode(_ type: Int.Type) throws -> Int { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { let p = here; return try Scalar.integer(next(type), p) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let p = here
        return try decodeValue(type, next(type), path: p)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let p = here
        return try TreeDecoder(value: next([String: JSONValue].self), path: p).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let p = here
        return try TreeDecoder(value: next([Any].self), path: p).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let p = here
        return TreeDecoder(value: try next(Any.self), path: p)
    }
}

private struct SingleDecoder: SingleValueDecodingContainer {
    let value: JSONValue
    let path: [any CodingKey]
    var codingPath: [any CodingKey] { path }

    func decodeNil() -> Bool { value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try Scalar.bool(value, path) }
    func decode(_ type: String.Type) throws -> String { try Scalar.string(value, path) }
    func decode(_ type: Double.Type) throws -> Double { try Scalar.double(value, path) }
    func decode(_ type: Float.Type) throws -> Float { Float(try Scalar.double(value, path)) }
    func decode(_ type: Int.Type) throws -> Int { try Scalar.integer(value, path) }
    func decode(_ type: Int8.Type) throws -> Int8 { try Scalar.integer(value, path) }
    func decode(_ type: Int16.Type) throws -> Int16 { try Scalar.integer(value, path) }
    func decode(_ type: Int32.Type) throws -> Int32 { try Scalar.integer(value, path) }
    func decode(_ type: Int64.Type) throws -> Int64 { try Scalar.integer(value, path) }
    func decode(_ type: UInt.Type) throws -> UInt { try Scalar.integer(value, path) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try Scalar.integer(value, path) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try Scalar.integer(value, path) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try Scalar.integer(value, path) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try Scalar.integer(value, path) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(type, value, path: path) }
}
