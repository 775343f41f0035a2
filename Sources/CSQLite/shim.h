#include <dlfcn.h>
#include <stddef.h>
#include <sqlite3.h>

/* SQLite is opened with dlopen by the first database a command opens, not linked: a `vault get`,
 * `ls` or credential-helper lookup inside an unlock session asks the agent and never opens a
 * database, and loading libsqlite3 cost each of them about half a millisecond at start. The module
 * map links nothing, so a direct call fails at link time; Swift calls through this table. */
struct vault_sqlite_api {
    __typeof__(&sqlite3_open_v2) _Nonnull sqlite3_open_v2;
    __typeof__(&sqlite3_errmsg) _Nonnull sqlite3_errmsg;
    __typeof__(&sqlite3_close_v2) _Nonnull sqlite3_close_v2;
    __typeof__(&sqlite3_extended_result_codes) _Nonnull sqlite3_extended_result_codes;
    __typeof__(&sqlite3_busy_timeout) _Nonnull sqlite3_busy_timeout;
    __typeof__(&sqlite3_exec) _Nonnull sqlite3_exec;
    __typeof__(&sqlite3_prepare_v2) _Nonnull sqlite3_prepare_v2;
    __typeof__(&sqlite3_last_insert_rowid) _Nonnull sqlite3_last_insert_rowid;
    __typeof__(&sqlite3_changes) _Nonnull sqlite3_changes;
    __typeof__(&sqlite3_finalize) _Nonnull sqlite3_finalize;
    __typeof__(&sqlite3_reset) _Nonnull sqlite3_reset;
    __typeof__(&sqlite3_clear_bindings) _Nonnull sqlite3_clear_bindings;
    __typeof__(&sqlite3_bind_int64) _Nonnull sqlite3_bind_int64;
    __typeof__(&sqlite3_bind_text) _Nonnull sqlite3_bind_text;
    __typeof__(&sqlite3_bind_blob) _Nonnull sqlite3_bind_blob;
    __typeof__(&sqlite3_bind_null) _Nonnull sqlite3_bind_null;
    __typeof__(&sqlite3_step) _Nonnull sqlite3_step;
    __typeof__(&sqlite3_column_count) _Nonnull sqlite3_column_count;
    __typeof__(&sqlite3_column_type) _Nonnull sqlite3_column_type;
    __typeof__(&sqlite3_column_int64) _Nonnull sqlite3_column_int64;
    __typeof__(&sqlite3_column_text) _Nonnull sqlite3_column_text;
    __typeof__(&sqlite3_column_bytes) _Nonnull sqlite3_column_bytes;
    __typeof__(&sqlite3_column_blob) _Nonnull sqlite3_column_blob;
};

/* Fills `api` (RTLD_NOW: a missing symbol fails here). Returns NULL, or the loader's message. */
static inline const char *_Nullable vault_sqlite_open(struct vault_sqlite_api *_Nonnull api) {
    void *h = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
#define VAULT_SQLITE_SYM(name) if (!(*(void **)&api->name = dlsym(h, #name))) return dlerror();
    VAULT_SQLITE_SYM(sqlite3_open_v2)
    VAULT_SQLITE_SYM(sqlite3_errmsg)
    VAULT_SQLITE_SYM(sqlite3_close_v2)
    VAULT_SQLITE_SYM(sqlite3_extended_result_codes)
    VAULT_SQLITE_SYM(sqlite3_busy_timeout)
    VAULT_SQLITE_SYM(sqlite3_exec)
    VAULT_SQLITE_SYM(sqlite3_prepare_v2)
    VAULT_SQLITE_SYM(sqlite3_last_insert_rowid)
    VAULT_SQLITE_SYM(sqlite3_changes)
    VAULT_SQLITE_SYM(sqlite3_finalize)
    VAULT_SQLITE_SYM(sqlite3_reset)
    VAULT_SQLITE_SYM(sqlite3_clear_bindings)
    VAULT_SQLITE_SYM(sqlite3_bind_int64)
    VAULT_SQLITE_SYM(sqlite3_bind_text)
    VAULT_SQLITE_SYM(sqlite3_bind_blob)
    VAULT_SQLITE_SYM(sqlite3_bind_null)
    VAULT_SQLITE_SYM(sqlite3_step)
    VAULT_SQLITE_SYM(sqlite3_column_count)
    VAULT_SQLITE_SYM(sqlite3_column_type)
    VAULT_SQLITE_SYM(sqlite3_column_int64)
    VAULT_SQLITE_SYM(sqlite3_column_text)
    VAULT_SQLITE_SYM(sqlite3_column_bytes)
    VAULT_SQLITE_SYM(sqlite3_column_blob)
#undef VAULT_SQLITE_SYM
    return NULL;
}
