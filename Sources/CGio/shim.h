#include <gio/gio.h>

/// G_VARIANT_TYPE is a cast macro Swift cannot import.
static inline const GVariantType *vault_variant_type(const char *type) { return (const GVariantType *)type; }
