#include <dlfcn.h>
#include <stddef.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_tctildr.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>

/* tpm2-tss is opened with dlopen on the first TPM operation, not linked: most vault commands never
 * touch a TPM, and loading libtss2 with libcrypto costs every one of them about a millisecond.
 * The module map links nothing, so a direct call to a tss2 function fails at link time; Swift
 * calls the functions through this table, filled by vault_tss2_open. */
struct vault_tss2_api {
    __typeof__(&Esys_Create) _Nonnull Esys_Create;
    __typeof__(&Esys_CreatePrimary) _Nonnull Esys_CreatePrimary;
    __typeof__(&Esys_Finalize) _Nonnull Esys_Finalize;
    __typeof__(&Esys_FlushContext) _Nonnull Esys_FlushContext;
    __typeof__(&Esys_Free) _Nonnull Esys_Free;
    __typeof__(&Esys_GetCapability) _Nonnull Esys_GetCapability;
    __typeof__(&Esys_Initialize) _Nonnull Esys_Initialize;
    __typeof__(&Esys_Load) _Nonnull Esys_Load;
    __typeof__(&Esys_PolicyAuthValue) _Nonnull Esys_PolicyAuthValue;
    __typeof__(&Esys_PolicyGetDigest) _Nonnull Esys_PolicyGetDigest;
    __typeof__(&Esys_PolicyPCR) _Nonnull Esys_PolicyPCR;
    __typeof__(&Esys_StartAuthSession) _Nonnull Esys_StartAuthSession;
    __typeof__(&Esys_Startup) _Nonnull Esys_Startup;
    __typeof__(&Esys_TRSess_SetAttributes) _Nonnull Esys_TRSess_SetAttributes;
    __typeof__(&Esys_TR_SetAuth) _Nonnull Esys_TR_SetAuth;
    __typeof__(&Esys_Unseal) _Nonnull Esys_Unseal;
    __typeof__(&Tss2_TctiLdr_Initialize) _Nonnull Tss2_TctiLdr_Initialize;
    __typeof__(&Tss2_TctiLdr_Finalize) _Nonnull Tss2_TctiLdr_Finalize;
    __typeof__(&Tss2_MU_TPM2B_PRIVATE_Marshal) _Nonnull Tss2_MU_TPM2B_PRIVATE_Marshal;
    __typeof__(&Tss2_MU_TPM2B_PRIVATE_Unmarshal) _Nonnull Tss2_MU_TPM2B_PRIVATE_Unmarshal;
    __typeof__(&Tss2_MU_TPM2B_PUBLIC_Marshal) _Nonnull Tss2_MU_TPM2B_PUBLIC_Marshal;
    __typeof__(&Tss2_MU_TPM2B_PUBLIC_Unmarshal) _Nonnull Tss2_MU_TPM2B_PUBLIC_Unmarshal;
    __typeof__(&Tss2_RC_Decode) _Nonnull Tss2_RC_Decode;
};

/* Fills `api` with the functions vault calls, opening each library once (RTLD_NOW: a missing
 * symbol fails here, not in the middle of a TPM command). Returns NULL, or the loader's message. */
static inline const char *_Nullable vault_tss2_open(struct vault_tss2_api *_Nonnull api) {
    void *h;
#define VAULT_TSS2_LIB(file) if (!(h = dlopen(file, RTLD_NOW | RTLD_LOCAL))) return dlerror();
#define VAULT_TSS2_SYM(name) if (!(*(void **)&api->name = dlsym(h, #name))) return dlerror();
    VAULT_TSS2_LIB("libtss2-esys.so.0")
    VAULT_TSS2_SYM(Esys_Create)
    VAULT_TSS2_SYM(Esys_CreatePrimary)
    VAULT_TSS2_SYM(Esys_Finalize)
    VAULT_TSS2_SYM(Esys_FlushContext)
    VAULT_TSS2_SYM(Esys_Free)
    VAULT_TSS2_SYM(Esys_GetCapability)
    VAULT_TSS2_SYM(Esys_Initialize)
    VAULT_TSS2_SYM(Esys_Load)
    VAULT_TSS2_SYM(Esys_PolicyAuthValue)
    VAULT_TSS2_SYM(Esys_PolicyGetDigest)
    VAULT_TSS2_SYM(Esys_PolicyPCR)
    VAULT_TSS2_SYM(Esys_StartAuthSession)
    VAULT_TSS2_SYM(Esys_Startup)
    VAULT_TSS2_SYM(Esys_TRSess_SetAttributes)
    VAULT_TSS2_SYM(Esys_TR_SetAuth)
    VAULT_TSS2_SYM(Esys_Unseal)
    VAULT_TSS2_LIB("libtss2-tctildr.so.0")
    VAULT_TSS2_SYM(Tss2_TctiLdr_Initialize)
    VAULT_TSS2_SYM(Tss2_TctiLdr_Finalize)
    VAULT_TSS2_LIB("libtss2-mu.so.0")
    VAULT_TSS2_SYM(Tss2_MU_TPM2B_PRIVATE_Marshal)
    VAULT_TSS2_SYM(Tss2_MU_TPM2B_PRIVATE_Unmarshal)
    VAULT_TSS2_SYM(Tss2_MU_TPM2B_PUBLIC_Marshal)
    VAULT_TSS2_SYM(Tss2_MU_TPM2B_PUBLIC_Unmarshal)
    VAULT_TSS2_LIB("libtss2-rc.so.0")
    VAULT_TSS2_SYM(Tss2_RC_Decode)
#undef VAULT_TSS2_LIB
#undef VAULT_TSS2_SYM
    return NULL;
}

/* Expression macros do not import into Swift: the return codes vault tells apart, as constants. */
static const TSS2_RC vault_tpm2_rc_auth_fail = TPM2_RC_AUTH_FAIL;
static const TSS2_RC vault_tpm2_rc_bad_auth = TPM2_RC_BAD_AUTH;
static const TSS2_RC vault_tpm2_rc_lockout = TPM2_RC_LOCKOUT;
static const TSS2_RC vault_tpm2_rc_policy_fail = TPM2_RC_POLICY_FAIL;
static const TSS2_RC vault_tpm2_rc_integrity = TPM2_RC_INTEGRITY;
static const TSS2_RC vault_tpm2_rc_object_memory = TPM2_RC_OBJECT_MEMORY;
static const TSS2_RC vault_tpm2_rc_initialize = TPM2_RC_INITIALIZE;
static const TSS2_RC vault_tpm2_rc_retry = TPM2_RC_RETRY;
static const TSS2_RC vault_tpm2_rc_yielded = TPM2_RC_YIELDED;
static const TSS2_RC vault_tpm2_rc_testing = TPM2_RC_TESTING;
static const TSS2_RC vault_tpm2_rc_value = TPM2_RC_VALUE;
static const TSS2_RC vault_tpm2_rc_size = TPM2_RC_SIZE;
static const TSS2_RC vault_tpm2_rc_layer_mask = TSS2_RC_LAYER_MASK;

/* Dictionary-attack properties (TPM2_PT_VAR + n: expression macros). */
static const TPM2_PT vault_tpm2_pt_lockout_counter = TPM2_PT_LOCKOUT_COUNTER;
static const TPM2_PT vault_tpm2_pt_max_auth_fail = TPM2_PT_MAX_AUTH_FAIL;
static const TPM2_PT vault_tpm2_pt_lockout_interval = TPM2_PT_LOCKOUT_INTERVAL;
