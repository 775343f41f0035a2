#include <tss2/tss2_esys.h>
#include <tss2/tss2_tctildr.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>

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
