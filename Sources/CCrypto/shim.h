#include <dlfcn.h>
#include <stddef.h>
#include <openssl/bn.h>
#include <openssl/decoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/params.h>

/* OpenSSL's libcrypto is opened with dlopen by the SSH agent's first RSA, ECDSA or DSA key, not
 * linked: `vault get` and every other command never load it (Ed25519 is libsodium's). The module
 * map links nothing, so a direct call fails at link time; Swift calls through this table, filled
 * by vault_crypto_open. Only OpenSSL 3's non-deprecated EVP and OSSL_PARAM interfaces are used. */
struct vault_crypto_api {
    __typeof__(&BN_bin2bn) _Nonnull BN_bin2bn;
    __typeof__(&BN_bn2binpad) _Nonnull BN_bn2binpad;
    __typeof__(&BN_num_bits) _Nonnull BN_num_bits;
    __typeof__(&BN_clear_free) _Nonnull BN_clear_free;
    __typeof__(&BN_new) _Nonnull BN_new;
    __typeof__(&BN_sub) _Nonnull BN_sub;
    __typeof__(&BN_value_one) _Nonnull BN_value_one;
    __typeof__(&BN_div) _Nonnull BN_div;
    __typeof__(&BN_CTX_new) _Nonnull BN_CTX_new;
    __typeof__(&BN_CTX_free) _Nonnull BN_CTX_free;
    __typeof__(&OSSL_PARAM_BLD_new) _Nonnull OSSL_PARAM_BLD_new;
    __typeof__(&OSSL_PARAM_BLD_free) _Nonnull OSSL_PARAM_BLD_free;
    __typeof__(&OSSL_PARAM_BLD_push_BN) _Nonnull OSSL_PARAM_BLD_push_BN;
    __typeof__(&OSSL_PARAM_BLD_push_utf8_string) _Nonnull OSSL_PARAM_BLD_push_utf8_string;
    __typeof__(&OSSL_PARAM_BLD_push_octet_string) _Nonnull OSSL_PARAM_BLD_push_octet_string;
    __typeof__(&OSSL_PARAM_BLD_push_uint) _Nonnull OSSL_PARAM_BLD_push_uint;
    __typeof__(&OSSL_PARAM_BLD_to_param) _Nonnull OSSL_PARAM_BLD_to_param;
    __typeof__(&OSSL_PARAM_free) _Nonnull OSSL_PARAM_free;
    __typeof__(&EVP_PKEY_CTX_new_from_name) _Nonnull EVP_PKEY_CTX_new_from_name;
    __typeof__(&EVP_PKEY_CTX_new_from_pkey) _Nonnull EVP_PKEY_CTX_new_from_pkey;
    __typeof__(&EVP_PKEY_CTX_free) _Nonnull EVP_PKEY_CTX_free;
    __typeof__(&EVP_PKEY_CTX_set_params) _Nonnull EVP_PKEY_CTX_set_params;
    __typeof__(&EVP_PKEY_fromdata_init) _Nonnull EVP_PKEY_fromdata_init;
    __typeof__(&EVP_PKEY_fromdata) _Nonnull EVP_PKEY_fromdata;
    __typeof__(&EVP_PKEY_keygen_init) _Nonnull EVP_PKEY_keygen_init;
    __typeof__(&EVP_PKEY_generate) _Nonnull EVP_PKEY_generate;
    __typeof__(&EVP_PKEY_get_bn_param) _Nonnull EVP_PKEY_get_bn_param;
    __typeof__(&EVP_PKEY_get_octet_string_param) _Nonnull EVP_PKEY_get_octet_string_param;
    __typeof__(&EVP_PKEY_public_check) _Nonnull EVP_PKEY_public_check;
    __typeof__(&EVP_PKEY_pairwise_check) _Nonnull EVP_PKEY_pairwise_check;
    __typeof__(&EVP_PKEY_free) _Nonnull EVP_PKEY_free;
    __typeof__(&EVP_MD_CTX_new) _Nonnull EVP_MD_CTX_new;
    __typeof__(&EVP_MD_CTX_free) _Nonnull EVP_MD_CTX_free;
    __typeof__(&EVP_DigestSignInit_ex) _Nonnull EVP_DigestSignInit_ex;
    __typeof__(&EVP_DigestSign) _Nonnull EVP_DigestSign;
    __typeof__(&EVP_DigestVerifyInit_ex) _Nonnull EVP_DigestVerifyInit_ex;
    __typeof__(&EVP_DigestVerify) _Nonnull EVP_DigestVerify;
    __typeof__(&ERR_clear_error) _Nonnull ERR_clear_error;
    __typeof__(&EVP_CIPHER_fetch) _Nonnull EVP_CIPHER_fetch;
    __typeof__(&EVP_CIPHER_free) _Nonnull EVP_CIPHER_free;
    __typeof__(&EVP_CIPHER_CTX_new) _Nonnull EVP_CIPHER_CTX_new;
    __typeof__(&EVP_CIPHER_CTX_free) _Nonnull EVP_CIPHER_CTX_free;
    __typeof__(&EVP_CIPHER_CTX_ctrl) _Nonnull EVP_CIPHER_CTX_ctrl;
    __typeof__(&EVP_DecryptInit_ex2) _Nonnull EVP_DecryptInit_ex2;
    __typeof__(&EVP_DecryptUpdate) _Nonnull EVP_DecryptUpdate;
    __typeof__(&EVP_DecryptFinal_ex) _Nonnull EVP_DecryptFinal_ex;
    __typeof__(&OSSL_DECODER_CTX_new_for_pkey) _Nonnull OSSL_DECODER_CTX_new_for_pkey;
    __typeof__(&OSSL_DECODER_CTX_set_passphrase) _Nonnull OSSL_DECODER_CTX_set_passphrase;
    __typeof__(&OSSL_DECODER_from_data) _Nonnull OSSL_DECODER_from_data;
    __typeof__(&OSSL_DECODER_CTX_free) _Nonnull OSSL_DECODER_CTX_free;
    __typeof__(&EVP_PKEY_is_a) _Nonnull EVP_PKEY_is_a;
    __typeof__(&EVP_PKEY_get_utf8_string_param) _Nonnull EVP_PKEY_get_utf8_string_param;
    __typeof__(&EVP_PKEY_get_raw_private_key) _Nonnull EVP_PKEY_get_raw_private_key;
    __typeof__(&EVP_PKEY_get_raw_public_key) _Nonnull EVP_PKEY_get_raw_public_key;
};

/* EVP_CIPHER_CTX_ctrl's command that sets a GCM tag before EVP_DecryptFinal_ex. */
static const int vault_crypto_gcm_set_tag = EVP_CTRL_GCM_SET_TAG;

/* EVP_PKEY_fromdata's selections (macros Swift cannot import). */
static const int vault_crypto_keypair = EVP_PKEY_KEYPAIR;
static const int vault_crypto_public_key = EVP_PKEY_PUBLIC_KEY;

/* Fills `api` (RTLD_NOW: a missing symbol fails here). Returns NULL, or the loader's message. */
static inline const char *_Nullable vault_crypto_open(struct vault_crypto_api *_Nonnull api) {
    void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
#define VAULT_CRYPTO_SYM(name) if (!(*(void **)&api->name = dlsym(h, #name))) return dlerror();
    VAULT_CRYPTO_SYM(BN_bin2bn)
    VAULT_CRYPTO_SYM(BN_bn2binpad)
    VAULT_CRYPTO_SYM(BN_num_bits)
    VAULT_CRYPTO_SYM(BN_clear_free)
    VAULT_CRYPTO_SYM(BN_new)
    VAULT_CRYPTO_SYM(BN_sub)
    VAULT_CRYPTO_SYM(BN_value_one)
    VAULT_CRYPTO_SYM(BN_div)
    VAULT_CRYPTO_SYM(BN_CTX_new)
    VAULT_CRYPTO_SYM(BN_CTX_free)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_new)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_free)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_push_BN)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_push_utf8_string)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_push_octet_string)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_push_uint)
    VAULT_CRYPTO_SYM(OSSL_PARAM_BLD_to_param)
    VAULT_CRYPTO_SYM(OSSL_PARAM_free)
    VAULT_CRYPTO_SYM(EVP_PKEY_CTX_new_from_name)
    VAULT_CRYPTO_SYM(EVP_PKEY_CTX_new_from_pkey)
    VAULT_CRYPTO_SYM(EVP_PKEY_CTX_free)
    VAULT_CRYPTO_SYM(EVP_PKEY_CTX_set_params)
    VAULT_CRYPTO_SYM(EVP_PKEY_fromdata_init)
    VAULT_CRYPTO_SYM(EVP_PKEY_fromdata)
    VAULT_CRYPTO_SYM(EVP_PKEY_keygen_init)
    VAULT_CRYPTO_SYM(EVP_PKEY_generate)
    VAULT_CRYPTO_SYM(EVP_PKEY_get_bn_param)
    VAULT_CRYPTO_SYM(EVP_PKEY_get_octet_string_param)
    VAULT_CRYPTO_SYM(EVP_PKEY_public_check)
    VAULT_CRYPTO_SYM(EVP_PKEY_pairwise_check)
    VAULT_CRYPTO_SYM(EVP_PKEY_free)
    VAULT_CRYPTO_SYM(EVP_MD_CTX_new)
    VAULT_CRYPTO_SYM(EVP_MD_CTX_free)
    VAULT_CRYPTO_SYM(EVP_DigestSignInit_ex)
    VAULT_CRYPTO_SYM(EVP_DigestSign)
    VAULT_CRYPTO_SYM(EVP_DigestVerifyInit_ex)
    VAULT_CRYPTO_SYM(EVP_DigestVerify)
    VAULT_CRYPTO_SYM(ERR_clear_error)
    VAULT_CRYPTO_SYM(EVP_CIPHER_fetch)
    VAULT_CRYPTO_SYM(EVP_CIPHER_free)
    VAULT_CRYPTO_SYM(EVP_CIPHER_CTX_new)
    VAULT_CRYPTO_SYM(EVP_CIPHER_CTX_free)
    VAULT_CRYPTO_SYM(EVP_CIPHER_CTX_ctrl)
    VAULT_CRYPTO_SYM(EVP_DecryptInit_ex2)
    VAULT_CRYPTO_SYM(EVP_DecryptUpdate)
    VAULT_CRYPTO_SYM(EVP_DecryptFinal_ex)
    VAULT_CRYPTO_SYM(OSSL_DECODER_CTX_new_for_pkey)
    VAULT_CRYPTO_SYM(OSSL_DECODER_CTX_set_passphrase)
    VAULT_CRYPTO_SYM(OSSL_DECODER_from_data)
    VAULT_CRYPTO_SYM(OSSL_DECODER_CTX_free)
    VAULT_CRYPTO_SYM(EVP_PKEY_is_a)
    VAULT_CRYPTO_SYM(EVP_PKEY_get_utf8_string_param)
    VAULT_CRYPTO_SYM(EVP_PKEY_get_raw_private_key)
    VAULT_CRYPTO_SYM(EVP_PKEY_get_raw_public_key)
#undef VAULT_CRYPTO_SYM
    return NULL;
}
