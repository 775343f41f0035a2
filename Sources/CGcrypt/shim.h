#include <gcrypt.h>

/// gcry_control is variadic, which Swift cannot call: the one initialisation vault-secret-service
/// needs (secure memory for the session keys, no warning on stderr when it cannot be locked).
static inline int vault_gcrypt_init(void) {
    if (!gcry_check_version(GCRYPT_VERSION)) return 0;
    gcry_control(GCRYCTL_DISABLE_SECMEM_WARN);
    gcry_control(GCRYCTL_INIT_SECMEM, 65536, 0);
    gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
    return 1;
}
