#include <dlfcn.h>
#include <stddef.h>
#include <nettle/hmac.h>

/* Nettle is opened with dlopen on the first one-time code, not linked: only `vault otp`, a
 * `vault://ITEM/otp` reference and `get --field otp` need it, and loading it costs every other
 * command's start. The module map links nothing, so a direct call fails at link time; Swift calls
 * through this table, filled by vault_nettle_open. */
struct vault_nettle_api {
    __typeof__(&nettle_hmac_sha1_set_key) _Nonnull nettle_hmac_sha1_set_key;
    __typeof__(&nettle_hmac_sha1_update) _Nonnull nettle_hmac_sha1_update;
    __typeof__(&nettle_hmac_sha1_digest) _Nonnull nettle_hmac_sha1_digest;
    __typeof__(&nettle_hmac_sha256_set_key) _Nonnull nettle_hmac_sha256_set_key;
    __typeof__(&nettle_hmac_sha256_update) _Nonnull nettle_hmac_sha256_update;
    __typeof__(&nettle_hmac_sha256_digest) _Nonnull nettle_hmac_sha256_digest;
    __typeof__(&nettle_hmac_sha512_set_key) _Nonnull nettle_hmac_sha512_set_key;
    __typeof__(&nettle_hmac_sha512_update) _Nonnull nettle_hmac_sha512_update;
    __typeof__(&nettle_hmac_sha512_digest) _Nonnull nettle_hmac_sha512_digest;
};

/* Fills `api` (RTLD_NOW: a missing symbol fails here). Returns NULL, or the loader's message. */
static inline const char *_Nullable vault_nettle_open(struct vault_nettle_api *_Nonnull api) {
    void *h = dlopen("libnettle.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
#define VAULT_NETTLE_SYM(name) if (!(*(void **)&api->name = dlsym(h, #name))) return dlerror();
    VAULT_NETTLE_SYM(nettle_hmac_sha1_set_key)
    VAULT_NETTLE_SYM(nettle_hmac_sha1_update)
    VAULT_NETTLE_SYM(nettle_hmac_sha1_digest)
    VAULT_NETTLE_SYM(nettle_hmac_sha256_set_key)
    VAULT_NETTLE_SYM(nettle_hmac_sha256_update)
    VAULT_NETTLE_SYM(nettle_hmac_sha256_digest)
    VAULT_NETTLE_SYM(nettle_hmac_sha512_set_key)
    VAULT_NETTLE_SYM(nettle_hmac_sha512_update)
    VAULT_NETTLE_SYM(nettle_hmac_sha512_digest)
#undef VAULT_NETTLE_SYM
    return NULL;
}
