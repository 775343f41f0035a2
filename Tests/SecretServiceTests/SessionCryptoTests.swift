import Foundation
import SecretService
import VaultDBus
import VaultKit
import Testing

@Suite struct SessionCryptoTests {
    /// Two ends of the exchange agree when each takes the other's public key (the service's own
    /// arithmetic both ways; libsecret and Python's secretstorage at the other end are the
    /// integration tests'), and a secret goes through AES-128-CBC with PKCS#7 and back.
    @Test func twoEndsAgreeAndASecretRoundTrips() throws {
        let a = try DHSessionKey(peer: [2])
        let b = try DHSessionKey(peer: a.publicKey)
        let c = try DHSessionKey(peer: b.publicKey)
        #expect(a.publicKey.count <= 128 && b.publicKey.count <= 128)
        for length in [0, 1, 15, 16, 17, 1000] {
            let plain = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let (iv, ciphertext) = try plain.withUnsafeBytes { try b.encrypt($0) }
            #expect(iv.count == 16 && ciphertext.count == (length / 16 + 1) * 16)
            let back = try b.decrypt(iv: iv, ciphertext)
            #expect(back.exposedBytes() == plain)
            // Another key (c agreed with b's key, not with a's): the padding does not check out,
            // or the bytes differ.
            if let other = try? c.decrypt(iv: iv, ciphertext) { #expect(other.exposedBytes() != plain) }
        }
    }

    @Test func publicKeysOutOfRangeAndMalformedCiphertextsAreRefused() throws {
        let p = [UInt8](repeating: 0xff, count: 128)
        for bad in [[], [0], [1], Array(repeating: 1, count: 129), p] {
            #expect(throws: SessionCryptoError.badPublicKey) { _ = try DHSessionKey(peer: bad) }
        }
        let key = try DHSessionKey(peer: [3])
        #expect(throws: SessionCryptoError.badCiphertext) { _ = try key.decrypt(iv: Array(repeating: 0, count: 16), [UInt8](repeating: 0, count: 15)) }
        #expect(throws: SessionCryptoError.badCiphertext) { _ = try key.decrypt(iv: [0], [UInt8](repeating: 0, count: 16)) }
    }
}

@Suite struct RequestDecodingTests {
    let base = "/org/freedesktop/secrets"

    @Test func callsDecodeToTheirRequestsAndPathsToTheirObjects() throws {
        #expect(SecretObject(path: base) == .service)
        #expect(SecretObject(path: base + "/collection/default") == .collection("default"))
        #expect(SecretObject(path: base + "/aliases/default/abc") == .item(collection: .alias("default"), id: "abc"))
        #expect(SecretObject(path: base + "/collection/a/b/c") == .unknown)
        #expect(SecretObject(path: base + "/collection//x") == .unknown)
        let r = try SecretRequest.decode(path: base, interface: nil, member: "SearchItems",
                                         arguments: [.stringDictionary([("service", "forge")])])
        #expect(r == .searchItems(collection: nil, attributes: [.init("service", "forge")]))
        #expect(SecretPaths.element("my vault-2") == "my_20vault_2d2")
    }

    @Test func wrongSignaturesUnknownMembersAndPathsAreTheirDBusErrors() {
        func name(_ path: String, _ interface: String?, _ member: String, _ args: [DBusValue]) -> String {
            do {
                _ = try SecretRequest.decode(path: path, interface: interface, member: member, arguments: args)
                return "decoded"
            } catch { return error.name }
        }
        #expect(name(base, "org.freedesktop.Secret.Service", "OpenSession", [.string("plain")]) == "org.freedesktop.DBus.Error.InvalidArgs")
        #expect(name(base, "org.freedesktop.Secret.Service", "Frob", []) == "org.freedesktop.DBus.Error.UnknownMethod")
        #expect(name(base + "/nowhere", "org.freedesktop.Secret.Item", "Delete", []) == "org.freedesktop.DBus.Error.UnknownObject")
        #expect(name(base + "/collection/d", "org.freedesktop.Secret.Item", "GetSecret", [.objectPath("/")]) == "org.freedesktop.DBus.Error.UnknownMethod")
        #expect(name(base, nil, "SearchItems", [.stringDictionary([("a", "1")]) ]) == "decoded")
        let twice = DBusValue.dictionary(key: "s", value: "s", [DBusEntry(.string("a"), .string("1")), DBusEntry(.string("a"), .string("2"))])
        #expect(name(base, nil, "SearchItems", [twice]) == "org.freedesktop.DBus.Error.InvalidArgs")
    }

    @Test func valuesSurviveSerializationAndMalformedBytesReadAsDefaults() throws {
        let v = DBusValue.structure([.objectPath("/a/b"), .bytes(DBusBytes([1, 2, 3])), .bytes(DBusBytes([])), .string("text/plain")])
        let bytes = try #require(serialized(v))
        #expect(dbusValue(serialized: bytes, signature: "(oayays)") == v)
        #expect(dbusValue(serialized: [0xff, 0xff], signature: "(oayays)") != nil, "GLib reads untrusted bytes as defaults, never traps")
        #expect(dbusValue(serialized: [], signature: "(((") == nil, "an invalid signature is refused")
        // Found by the fuzz target's smoke pass (Fuzz/corpus/secret-service/regression-indefinite-type):
        // GLib aborts on a value of an indefinite type ("r", "*", "?"); it is refused first.
        for indefinite in ["(r)", "(*)", "(?)", "a{?s}"] { #expect(dbusValue(serialized: [], signature: indefinite) == nil) }
        #expect(serialized(.objectPath("not a path")) == nil)
        #expect(serialized(.array(element: "s", [.int32(1)])) == nil, "an element of another type")
    }
}
