#include <dlfcn.h>
#include <stddef.h>
#include <archive.h>
#include <archive_entry.h>

/* libarchive is opened with dlopen when a 1PUX archive is imported, not linked: it pulls in six
 * compression libraries that every other command would load at start. The module map links
 * nothing, so a direct call fails at link time; Swift calls through this table. The archive is
 * read through callbacks (a block at a time from the file descriptor, with seeks on a regular
 * file), never from one buffer of the whole file. */
struct vault_archive_api {
    __typeof__(&archive_read_new) _Nonnull archive_read_new;
    __typeof__(&archive_read_free) _Nonnull archive_read_free;
    __typeof__(&archive_read_support_format_zip) _Nonnull archive_read_support_format_zip;
    __typeof__(&archive_read_set_read_callback) _Nonnull archive_read_set_read_callback;
    __typeof__(&archive_read_set_seek_callback) _Nonnull archive_read_set_seek_callback;
    __typeof__(&archive_read_set_callback_data) _Nonnull archive_read_set_callback_data;
    __typeof__(&archive_read_open1) _Nonnull archive_read_open1;
    __typeof__(&archive_read_next_header) _Nonnull archive_read_next_header;
    __typeof__(&archive_read_data) _Nonnull archive_read_data;
    __typeof__(&archive_error_string) _Nonnull archive_error_string;
    __typeof__(&archive_entry_pathname) _Nonnull archive_entry_pathname;
    __typeof__(&archive_entry_filetype) _Nonnull archive_entry_filetype;
};

/* Fills `api` (RTLD_NOW: a missing symbol fails here). Returns NULL, or the loader's message. */
static inline const char *_Nullable vault_archive_open(struct vault_archive_api *_Nonnull api) {
    void *h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
#define VAULT_ARCHIVE_SYM(name) if (!(*(void **)&api->name = dlsym(h, #name))) return dlerror();
    VAULT_ARCHIVE_SYM(archive_read_new)
    VAULT_ARCHIVE_SYM(archive_read_free)
    VAULT_ARCHIVE_SYM(archive_read_support_format_zip)
    VAULT_ARCHIVE_SYM(archive_read_set_read_callback)
    VAULT_ARCHIVE_SYM(archive_read_set_seek_callback)
    VAULT_ARCHIVE_SYM(archive_read_set_callback_data)
    VAULT_ARCHIVE_SYM(archive_read_open1)
    VAULT_ARCHIVE_SYM(archive_read_next_header)
    VAULT_ARCHIVE_SYM(archive_read_data)
    VAULT_ARCHIVE_SYM(archive_error_string)
    VAULT_ARCHIVE_SYM(archive_entry_pathname)
    VAULT_ARCHIVE_SYM(archive_entry_filetype)
#undef VAULT_ARCHIVE_SYM
    return NULL;
}
