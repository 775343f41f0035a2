internal import CTSS2
internal import Glibc
import FoundationEssentials
internal import VaultSystem

/// A TPM 2.0 reached through a tpm2-tss TCTI string (`device:/dev/tpmrm0`, or
/// `swtpm:path=SOCKET` in tests). Every operation opens its own connection and closes it before
/// returning, flushing every object and session it loaded (a TPM without a resource manager has
/// three transient slots, and a software TPM serves one client at a time).
package struct TPMDevice: Codable, Equatable, Sendable {
    /// The TCTI configuration string handed to `Tss2_TctiLdr_Initialize`.
    package var tcti: String

    /// A device reached through `tcti`.
    package init(tcti: String) { self.tcti = tcti }

    /// The kernel's resource-managed TPM device.
    package static let kernelDevicePath = "/dev/tpmrm0"

    /// `VAULT_TPM_TCTI` when set (`none` turns the TPM off), else the kernel's `/dev/tpmrm0` when it
    /// exists, else nil (no TPM).
    package static func fromEnvironment(_ environment: [String: String]) -> TPMDevice? {
        if let t = environment["VAULT_TPM_TCTI"], !t.isEmpty { return t == "none" ? nil : TPMDevice(tcti: t) }
        return FileManager.default.fileExists(atPath: kernelDevicePath) ? TPMDevice(tcti: "device:" + kernelDevicePath) : nil
    }
}

/// The two halves of a sealed TPM object (`TPM2B_PUBLIC` and `TPM2B_PRIVATE`, marshalled): what
/// is stored. The private half is encrypted under the TPM's storage key, so it opens only on the
/// TPM that made it.
package struct TPMSealedObject: Equatable, Sendable {
    /// The marshalled `TPM2B_PUBLIC` (attributes, policy digest, name algorithm).
    package var publicPart: [UInt8]
    /// The marshalled `TPM2B_PRIVATE` (the sealed data, encrypted by the TPM).
    package var privatePart: [UInt8]
    /// Creates a sealed object from its marshalled halves.
    package init(publicPart: [UInt8], privatePart: [UInt8]) {
        self.publicPart = publicPart
        self.privatePart = privatePart
    }
}

/// What a sealed object asks of whoever unseals it.
package struct TPMSealPolicy: Equatable, Sendable {
    /// Whether the object opens only while PCR 7 (Secure Boot state) holds the value it had at sealing.
    package var pcr7: Bool
    /// Whether a wrong authValue counts towards the TPM's dictionary-attack lockout (no `NODA`).
    package var dictionaryAttackProtected: Bool
    /// Creates a policy.
    package init(pcr7: Bool, dictionaryAttackProtected: Bool) {
        self.pcr7 = pcr7
        self.dictionaryAttackProtected = dictionaryAttackProtected
    }
}

/// The TPM's dictionary-attack state (`TPM2_GetCapability`, properties `TPM_PT_LOCKOUT_*`).
package struct TPMDictionaryAttackState: Equatable, Sendable {
    /// Authorization failures counted now (`failedTries`).
    package var failedTries: Int
    /// Failures at which the TPM locks DA-protected objects (`maxTries`).
    package var maxTries: Int
    /// Seconds of powered time after which one failure is forgotten (`recoveryTime`).
    package var recoverySeconds: Int
    /// Whether the TPM refuses DA-protected objects now.
    package var lockedOut: Bool { maxTries > 0 && failedTries >= maxTries }
    /// Wrong authValues left before the lockout.
    package var triesLeft: Int { max(0, maxTries - failedTries) }
}

/// Why a TPM operation failed, in the terms vault acts on (the response code is kept for the rest).
package enum TPMFailure: Error, Equatable, Sendable {
    /// The TCTI could not be loaded or the TPM did not answer.
    case unreachable(String)
    /// The authValue was wrong and the TPM counted it (`TPM_RC_AUTH_FAIL`).
    case wrongAuthorization
    /// The authValue was wrong on a `NODA` object (`TPM_RC_BAD_AUTH`): not counted.
    case wrongAuthorizationNotCounted
    /// The TPM is in dictionary-attack lockout (`TPM_RC_LOCKOUT`).
    case lockout
    /// The object's policy is not met: PCR 7 changed (`TPM_RC_POLICY_FAIL`).
    case policyFailed
    /// The object was sealed by another TPM, or altered (`TPM_RC_INTEGRITY`).
    case foreignObject
    /// The TPM has no free object slot (`TPM_RC_OBJECT_MEMORY`): something was not flushed.
    case outOfObjectMemory
    /// The stored object is not a marshalled public/private pair.
    case malformedObject
    /// Any other response code, with the call that returned it and libtss2's description.
    case other(call: String, code: UInt32, description: String)
}

/// tpm2-tss, opened on the first TPM operation (`dlopen`, see CTSS2/shim.h) instead of linked, so the
/// commands that never touch a TPM (`get`, `ls`, the helpers) do not load it with libcrypto.
private enum TSS2Library {
    /// The function table, or why the libraries could not be opened; loaded once, on first use.
    static let loaded: Result<vault_tss2_api, TPMFailure> = LibraryTable.load(vault_tss2_open)
        .mapError { .unreachable("tpm2-tss cannot be loaded (\($0.message)); install libtss2-esys-3.0.2-0 and libtss2-tcti-device0") }

    /// Throws `.unreachable` when tpm2-tss is missing; every connection asks this first.
    static func require() throws(TPMFailure) { _ = try loaded.get() }
}

/// The tpm2-tss functions. Reached only after `TSS2Library.require()` succeeded (a connection
/// exists), so the failure case cannot occur here.
private var tss: vault_tss2_api {
    guard case .success(let table) = TSS2Library.loaded else { preconditionFailure("tpm2-tss called before a connection was made") }
    return table
}

/// The one gate every tpm2-tss call passes through: a non-zero response code becomes a `TPMFailure`.
private enum TSS2 {
    static func check(_ rc: TSS2_RC, _ call: String) throws(TPMFailure) {
        guard rc != 0 else { return }
        // TPM-layer codes only (layer 0); format-one codes carry the handle, session or
        // parameter number in bits 6 and 8-11: strip them before comparing.
        let tpmLayer = rc & vault_tpm2_rc_layer_mask == 0
        let base = tpmLayer ? ((rc & 0x80) != 0 ? rc & 0xBF : rc) : rc
        switch base {
        case vault_tpm2_rc_auth_fail where tpmLayer: throw .wrongAuthorization
        case vault_tpm2_rc_bad_auth where tpmLayer: throw .wrongAuthorizationNotCounted
        case vault_tpm2_rc_lockout where tpmLayer: throw .lockout
        case vault_tpm2_rc_policy_fail where tpmLayer: throw .policyFailed
        case vault_tpm2_rc_integrity where tpmLayer: throw .foreignObject
        case vault_tpm2_rc_object_memory where tpmLayer: throw .outOfObjectMemory
        default:
            let text = tss.Tss2_RC_Decode(rc).map { String(cString: $0) } ?? "unknown"
            throw .other(call: call, code: rc, description: text)
        }
    }

    /// Zeroes a C value that held secret bytes (an authValue, a sensitive area) before it goes.
    static func wipe<T>(_ value: inout T) {
        withUnsafeMutableBytes(of: &value) { b in
            if let p = b.baseAddress { explicit_bzero(p, b.count) }
        }
    }

    /// Copies `bytes` into a TPM2B buffer tuple; the caller checked the size.
    static func fill<T>(_ buffer: inout T, from bytes: UnsafeRawBufferPointer) {
        withUnsafeMutableBytes(of: &buffer) { b in
            if let s = bytes.baseAddress, bytes.count > 0 { b.baseAddress!.copyMemory(from: s, byteCount: min(bytes.count, b.count)) }
        }
    }

    static func bytes<T>(of buffer: T, count: Int) -> [UInt8] {
        withUnsafeBytes(of: buffer) { Array($0.prefix(count)) }
    }
}

/// One connection: the TCTI and the ESYS context, finalized in `deinit`; every transient handle
/// it made is flushed there too, so no path leaves an object loaded.
private final class TSS2Connection {
    private var tcti: OpaquePointer?
    let context: OpaquePointer
    private var transients: [ESYS_TR] = []

    init(_ device: TPMDevice) throws(TPMFailure) {
        // libtss2 logs every failing response to standard error, the expected ones (a wrong
        // passcode) too: vault reports errors itself. TSS2_LOG set by the user still wins.
        setenv("TSS2_LOG", "all+NONE", 0)
        try TSS2Library.require()
        var t: OpaquePointer?
        let rc = tss.Tss2_TctiLdr_Initialize(device.tcti, &t)
        guard rc == 0, t != nil else {
            throw .unreachable("\(device.tcti): \(tss.Tss2_RC_Decode(rc).map { String(cString: $0) } ?? "cannot load the TCTI")")
        }
        var c: OpaquePointer?
        let erc = tss.Esys_Initialize(&c, t, nil)
        guard erc == 0, let c else {
            tss.Tss2_TctiLdr_Finalize(&t)
            throw .unreachable("\(device.tcti): \(tss.Tss2_RC_Decode(erc).map { String(cString: $0) } ?? "no answer")")
        }
        tcti = t
        context = c
        // A raw TPM (a simulator) may need TPM2_Startup; an already started one answers
        // TPM_RC_INITIALIZE, and the kernel's resource manager refuses it: none of that matters.
        if !device.tcti.hasPrefix("device") { _ = tss.Esys_Startup(context, TPM2_SU_CLEAR) }
    }

    deinit {
        for h in transients.reversed() { _ = tss.Esys_FlushContext(context, h) }
        var c: OpaquePointer? = context
        tss.Esys_Finalize(&c)
        tss.Tss2_TctiLdr_Finalize(&tcti)
    }

    /// Remembers a transient handle for the flush; `flush` lets it go early.
    func track(_ h: ESYS_TR) -> ESYS_TR { transients.append(h); return h }

    func flush(_ h: ESYS_TR) {
        if let i = transients.lastIndex(of: h) { transients.remove(at: i) }
        _ = tss.Esys_FlushContext(context, h)
    }

    /// The storage key: an ECC P-256 primary under the owner hierarchy from the standard SRK
    /// template (the same seed and template give the same key, so it is made again each time and
    /// never stored). `NODA`, so that a lockout caused by a passcode object never blocks loading.
    func storagePrimary() throws(TPMFailure) -> ESYS_TR {
        var sensitive = TPM2B_SENSITIVE_CREATE()
        var pub = TPM2B_PUBLIC()
        pub.publicArea.type = TPM2_ALG_ECC
        pub.publicArea.nameAlg = TPM2_ALG_SHA256
        pub.publicArea.objectAttributes = TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT | TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT
            | TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA
        pub.publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES
        pub.publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128
        pub.publicArea.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB
        pub.publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL
        pub.publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256
        pub.publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL
        var outside = TPM2B_DATA()
        var creationPCR = TPML_PCR_SELECTION()
        var handle: ESYS_TR = ESYS_TR_NONE
        try TSS2.check(tss.Esys_CreatePrimary(context, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
                                          &sensitive, &pub, &outside, &creationPCR, &handle, nil, nil, nil, nil),
                       "Esys_CreatePrimary")
        return track(handle)
    }

    /// A session salted by the storage key, with AES-128-CFB parameter encryption both ways: the
    /// secret and the authValue never cross the bus in clear. `policy`: a policy session.
    func saltedSession(_ primary: ESYS_TR, policy: Bool = false) throws(TPMFailure) -> ESYS_TR {
        var sym = TPMT_SYM_DEF()
        sym.algorithm = TPM2_ALG_AES
        sym.keyBits.aes = 128
        sym.mode.aes = TPM2_ALG_CFB
        var session: ESYS_TR = ESYS_TR_NONE
        try TSS2.check(tss.Esys_StartAuthSession(context, primary, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, nil,
                                             policy ? TPM2_SE_POLICY : TPM2_SE_HMAC, &sym, TPM2_ALG_SHA256, &session),
                       "Esys_StartAuthSession")
        _ = track(session)
        try TSS2.check(tss.Esys_TRSess_SetAttributes(context, session,
                                                 TPMA_SESSION_DECRYPT | TPMA_SESSION_ENCRYPT | TPMA_SESSION_CONTINUESESSION, 0xff),
                       "Esys_TRSess_SetAttributes")
        return session
    }

    /// PCR 7 of the SHA-256 bank.
    static func pcr7Selection() -> TPML_PCR_SELECTION {
        var s = TPML_PCR_SELECTION()
        s.count = 1
        s.pcrSelections.0.hash = TPM2_ALG_SHA256
        s.pcrSelections.0.sizeofSelect = 3
        s.pcrSelections.0.pcrSelect.0 = 0x80
        return s
    }

    /// Runs `TPM2_PolicyPCR` over the current PCR 7 in `session`.
    func policyPCR7(_ session: ESYS_TR) throws(TPMFailure) {
        var digest = TPM2B_DIGEST()
        var selection = TSS2Connection.pcr7Selection()
        try TSS2.check(tss.Esys_PolicyPCR(context, session, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &digest, &selection), "Esys_PolicyPCR")
    }
}

extension TPMDevice {
    /// The most bytes a sealed object holds (hardware may refuse more).
    package static let maximumSealedBytes = 128
    /// The authValue length vault uses (hardware may refuse longer ones).
    package static let authValueBytes = 32

    /// Seals `secret` (at most 128 bytes) in a KEYEDHASH object under the storage key.
    /// `authValue`: 32 bytes, or empty for none. With `policy.pcr7` the object opens only while
    /// PCR 7 holds its present value (and then the authValue is checked through `PolicyAuthValue`).
    /// - Throws: `TPMFailure`.
    package func seal(_ secret: borrowing SecretBytes, authValue: borrowing SecretBytes, policy: TPMSealPolicy) throws(TPMFailure) -> TPMSealedObject {
        guard secret.count > 0, secret.count <= TPMDevice.maximumSealedBytes, authValue.count == 0 || authValue.count == TPMDevice.authValueBytes else {
            throw .other(call: "seal", code: 0, description: "secret of \(secret.count) bytes or authValue of \(authValue.count) bytes")
        }
        let tpm = try TSS2Connection(self)
        let primary = try tpm.storagePrimary()
        let session = try tpm.saltedSession(primary)

        var sensitive = TPM2B_SENSITIVE_CREATE()
        defer { TSS2.wipe(&sensitive) }
        secret.withUnsafeBytes { s in
            sensitive.sensitive.data.size = UInt16(s.count)
            TSS2.fill(&sensitive.sensitive.data.buffer, from: s)
        }
        authValue.withUnsafeBytes { a in
            sensitive.sensitive.userAuth.size = UInt16(a.count)
            TSS2.fill(&sensitive.sensitive.userAuth.buffer, from: a)
        }
        var pub = TPM2B_PUBLIC()
        pub.publicArea.type = TPM2_ALG_KEYEDHASH
        pub.publicArea.nameAlg = TPM2_ALG_SHA256
        pub.publicArea.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT
            | (policy.pcr7 ? 0 : TPMA_OBJECT_USERWITHAUTH) | (policy.dictionaryAttackProtected ? 0 : TPMA_OBJECT_NODA)
        pub.publicArea.parameters.keyedHashDetail.scheme.scheme = TPM2_ALG_NULL
        if policy.pcr7 {
            pub.publicArea.authPolicy = try tpm.pcr7PolicyDigest(authValue: authValue.count > 0)
        }
        var outside = TPM2B_DATA()
        var creationPCR = TPML_PCR_SELECTION()
        var outPrivate: UnsafeMutablePointer<TPM2B_PRIVATE>?
        var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
        try TSS2.check(tss.Esys_Create(tpm.context, primary, session, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &pub, &outside, &creationPCR,
                                   &outPrivate, &outPublic, nil, nil, nil),
                       "Esys_Create")
        defer { tss.Esys_Free(outPrivate); tss.Esys_Free(outPublic) }
        guard let outPrivate, let outPublic else { throw .other(call: "Esys_Create", code: 0, description: "no object returned") }
        var publicBytes = [UInt8](repeating: 0, count: MemoryLayout<TPM2B_PUBLIC>.size)
        var privateBytes = [UInt8](repeating: 0, count: MemoryLayout<TPM2B_PRIVATE>.size)
        var pubLength = 0, privLength = 0
        try TSS2.check(tss.Tss2_MU_TPM2B_PUBLIC_Marshal(outPublic, &publicBytes, publicBytes.count, &pubLength), "Tss2_MU_TPM2B_PUBLIC_Marshal")
        try TSS2.check(tss.Tss2_MU_TPM2B_PRIVATE_Marshal(outPrivate, &privateBytes, privateBytes.count, &privLength), "Tss2_MU_TPM2B_PRIVATE_Marshal")
        return TPMSealedObject(publicPart: Array(publicBytes.prefix(pubLength)), privatePart: Array(privateBytes.prefix(privLength)))
    }

    /// Loads `object` under the storage key and unseals it with `authValue` (empty for none),
    /// satisfying the PCR 7 policy when the object carries one.
    /// - Throws: `TPMFailure`: `.wrongAuthorization` (counted), `.lockout`, `.policyFailed`,
    ///   `.foreignObject` (another TPM's object), `.malformedObject`.
    package func unseal(_ object: TPMSealedObject, authValue: borrowing SecretBytes) throws(TPMFailure) -> SecretBytes {
        var inPublic = TPM2B_PUBLIC()
        var inPrivate = TPM2B_PRIVATE()
        var offset = 0
        guard tss.Tss2_MU_TPM2B_PUBLIC_Unmarshal(object.publicPart, object.publicPart.count, &offset, &inPublic) == 0,
              offset == object.publicPart.count else { throw .malformedObject }
        offset = 0
        guard tss.Tss2_MU_TPM2B_PRIVATE_Unmarshal(object.privatePart, object.privatePart.count, &offset, &inPrivate) == 0,
              offset == object.privatePart.count else { throw .malformedObject }
        let usesPolicy = inPublic.publicArea.objectAttributes & TPMA_OBJECT_USERWITHAUTH == 0

        let tpm = try TSS2Connection(self)
        let primary = try tpm.storagePrimary()
        let loadSession = try tpm.saltedSession(primary)
        var handle: ESYS_TR = ESYS_TR_NONE
        try TSS2.check(tss.Esys_Load(tpm.context, primary, loadSession, ESYS_TR_NONE, ESYS_TR_NONE, &inPrivate, &inPublic, &handle), "Esys_Load")
        _ = tpm.track(handle)
        tpm.flush(loadSession)

        var auth = TPM2B_AUTH()
        defer { TSS2.wipe(&auth) }
        authValue.withUnsafeBytes { a in
            auth.size = UInt16(min(a.count, MemoryLayout.size(ofValue: auth.buffer)))
            TSS2.fill(&auth.buffer, from: a)
        }
        try TSS2.check(tss.Esys_TR_SetAuth(tpm.context, handle, &auth), "Esys_TR_SetAuth")

        let session = try tpm.saltedSession(primary, policy: usesPolicy)
        if usesPolicy {
            try tpm.policyPCR7(session)
            if authValue.count > 0 {
                try TSS2.check(tss.Esys_PolicyAuthValue(tpm.context, session, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE), "Esys_PolicyAuthValue")
            }
        }
        var out: UnsafeMutablePointer<TPM2B_SENSITIVE_DATA>?
        try TSS2.check(tss.Esys_Unseal(tpm.context, handle, session, ESYS_TR_NONE, ESYS_TR_NONE, &out), "Esys_Unseal")
        defer {
            if let out { TSS2.wipe(&out.pointee) }
            tss.Esys_Free(out)
        }
        guard let out else { throw .other(call: "Esys_Unseal", code: 0, description: "no data returned") }
        let size = Int(out.pointee.size)
        do {
            return try withUnsafeBytes(of: &out.pointee.buffer) { try SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0.prefix(size))) }
        } catch {
            throw .other(call: "Esys_Unseal", code: 0, description: "out of guarded memory")
        }
    }

    /// The TPM's dictionary-attack counter and parameters. Also the cheapest proof that the TPM answers.
    /// - Throws: `TPMFailure`.
    package func dictionaryAttackState() throws(TPMFailure) -> TPMDictionaryAttackState {
        let tpm = try TSS2Connection(self)
        var more: TPMI_YES_NO = 0
        var data: UnsafeMutablePointer<TPMS_CAPABILITY_DATA>?
        try TSS2.check(tss.Esys_GetCapability(tpm.context, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, TPM2_CAP_TPM_PROPERTIES,
                                          UInt32(vault_tpm2_pt_lockout_counter), 3, &more, &data),
                       "Esys_GetCapability")
        defer { tss.Esys_Free(data) }
        var state = TPMDictionaryAttackState(failedTries: 0, maxTries: 0, recoverySeconds: 0)
        guard let data else { return state }
        let properties = data.pointee.data.tpmProperties
        withUnsafeBytes(of: properties.tpmProperty) { raw in
            let list = raw.bindMemory(to: TPMS_TAGGED_PROPERTY.self)
            for p in list.prefix(Int(properties.count)) {
                switch p.property {
                case UInt32(vault_tpm2_pt_lockout_counter): state.failedTries = Int(p.value)
                case UInt32(vault_tpm2_pt_max_auth_fail): state.maxTries = Int(p.value)
                case UInt32(vault_tpm2_pt_lockout_interval): state.recoverySeconds = Int(p.value)
                default: break
                }
            }
        }
        return state
    }
}

extension TSS2Connection {
    /// The policy digest of "PCR 7 as it is now" (from a trial session), and `PolicyAuthValue` after it when the object has an authValue.
    func pcr7PolicyDigest(authValue: Bool) throws(TPMFailure) -> TPM2B_DIGEST {
        var sym = TPMT_SYM_DEF()
        sym.algorithm = TPM2_ALG_NULL
        var trial: ESYS_TR = ESYS_TR_NONE
        try TSS2.check(tss.Esys_StartAuthSession(context, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, nil,
                                             TPM2_SE_TRIAL, &sym, TPM2_ALG_SHA256, &trial),
                       "Esys_StartAuthSession")
        _ = track(trial)
        defer { flush(trial) }
        try policyPCR7(trial)
        if authValue {
            try TSS2.check(tss.Esys_PolicyAuthValue(context, trial, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE), "Esys_PolicyAuthValue")
        }
        var out: UnsafeMutablePointer<TPM2B_DIGEST>?
        try TSS2.check(tss.Esys_PolicyGetDigest(context, trial, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &out), "Esys_PolicyGetDigest")
        defer { tss.Esys_Free(out) }
        guard let out else { throw .other(call: "Esys_PolicyGetDigest", code: 0, description: "no digest") }
        return out.pointee
    }
}
