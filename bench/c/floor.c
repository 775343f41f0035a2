/* The machine's floor for vault's commands: the least work a program with vault's schema, pragmas,
 * record encoding, record sizes and associated data can do for each one (docs/format.md). No
 * Swift, no allocation per item beyond what SQLite does, no checks vault's format does not make.
 *
 *   floor init   DB PASSFILE               an empty vault-like database (one passcode slot)
 *   floor import DB PASSFILE JSON          unlock; per item: 2 seals + name MAC + INSERT, one transaction
 *   floor get    DB PASSFILE NAME          unlock; one name MAC, one indexed SELECT, one open; prints the password
 *   floor sget   DB KEYFILE NAME           the same with the master key at hand (what a session holds)
 *   floor ls     DB PASSFILE               unlock; open + MAC-check every overview; names sorted, one a line
 *   floor search DB PASSFILE TERM          unlock; open + MAC-check every overview, match name/username/url/tag
 *   floor export DB PASSFILE               unlock; open both records + MAC-check; vault JSON, one object a line
 *   floor rotate DB PASSFILE               unlock; new key and slot (a second Argon2id); re-seal every row
 *   floor keyfile DB PASSFILE KEYFILE      unlock and write the master key to KEYFILE (for sget)
 *
 * Argon2id at 8 MiB / 1 pass (the benchmarks' vaults). The unlock is the passcode slot alone:
 * Argon2id, one XChaCha20-Poly1305 open of the 32-byte master key, three BLAKE2b key derivations.
 * JSON input is the benchmark's own (an array of flat objects of strings): parsed in place.
 *
 * For the index study (docs/performance.md), `init` takes FLOOR_SCHEMA: `vault` (the default:
 * vault's items table, a rowid table with two random-key indexes, id and name_mac),
 * `no-id-index` (id kept in the row but not indexed: one random-key index), `without-rowid`
 * (the table clustered on the random id); and import and rotate take FLOOR_CACHE_KIB (vault's
 * 131072, 128 MiB) for the page cache of their transaction.
 */
#include <sodium.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { KEY = 32, NONCE = 24, TAG = 16, ID = 16, MAC = 32, SALT = 16 };
static const char *ITEMS_TABLE =
    "CREATE TABLE items(id BLOB PRIMARY KEY, name_mac BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL,"
    " overview_nonce BLOB NOT NULL, overview BLOB NOT NULL, secrets_nonce BLOB NOT NULL, secrets BLOB NOT NULL)";

static sqlite3 *db;
static unsigned char vault_id[ID], vmk[KEY], item_key[KEY], index_key[KEY];
static long long generation = 1;

static void die(const char *what) {
    fprintf(stderr, "floor: %s%s%s\n", what, db ? ": " : "", db ? sqlite3_errmsg(db) : "");
    exit(1);
}
static void ok(int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) die(what);
}
static void exec(const char *sql) { ok(sqlite3_exec(db, sql, NULL, NULL, NULL), sql); }
static sqlite3_stmt *prep(const char *sql) {
    sqlite3_stmt *s;
    ok(sqlite3_prepare_v2(db, sql, -1, &s, NULL), sql);
    return s;
}

static void open_db(const char *path, int create) {
    ok(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOMUTEX, NULL), "open");
    sqlite3_busy_timeout(db, 5000);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA foreign_keys=ON");
    exec("PRAGMA synchronous=NORMAL");
    exec("PRAGMA secure_delete=ON");
}

/* ByteWriter: u32 big-endian lengths before every variable field. */
typedef struct { unsigned char b[160]; size_t n; } ad_t;
static void ad_u32(ad_t *a, uint32_t v) { for (int s = 24; s >= 0; s -= 8) a->b[a->n++] = v >> s; }
static void ad_bytes(ad_t *a, const void *p, size_t n) { ad_u32(a, n); memcpy(a->b + a->n, p, n); a->n += n; }
static void ad_u64(ad_t *a, uint64_t v) { for (int s = 56; s >= 0; s -= 8) a->b[a->n++] = v >> s; }
static void record_ad(ad_t *a, const unsigned char *id, int secrets, long long gen, const unsigned char *overview_nonce) {
    a->n = 0;
    ad_bytes(a, "vault-record-v2", 15);
    ad_bytes(a, vault_id, ID);
    ad_bytes(a, id, ID);
    if (secrets) ad_bytes(a, "secrets", 7); else ad_bytes(a, "overview", 8);
    ad_u32(a, 2);
    ad_u64(a, gen);
    if (secrets) ad_bytes(a, overview_nonce, NONCE);
}

static void derive(unsigned char *out, const unsigned char *key, const char *context) {
    crypto_generichash(out, KEY, (const unsigned char *)context, strlen(context), key, KEY);
}
static void keys_from_vmk(void) {
    derive(item_key, vmk, "vault/v1/item-key");
    derive(index_key, vmk, "vault/v1/name-index");
    unsigned char audit[KEY];
    derive(audit, vmk, "vault/v1/audit-key");
}
static void name_mac(unsigned char *out, const void *name, size_t n) {
    crypto_generichash(out, MAC, name, n, index_key, KEY);
}

static size_t read_passcode(const char *path, unsigned char *p, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) die("passcode file");
    size_t n = fread(p, 1, cap, f);
    fclose(f);
    while (n && (p[n - 1] == '\n' || p[n - 1] == '\r')) n--;
    return n;
}

static void kek_from(unsigned char *kek, const char *passfile, const unsigned char *salt) {
    unsigned char pass[256];
    size_t n = read_passcode(passfile, pass, sizeof pass);
    if (crypto_pwhash(kek, KEY, (const char *)pass, n, salt, 1, 8u << 20, crypto_pwhash_ALG_ARGON2ID13)) die("argon2id");
    sodium_memzero(pass, sizeof pass);
}

static void slot_ad(ad_t *a, long long gen) {
    a->n = 0;
    ad_bytes(a, "vault-slot-v1", 13);
    ad_bytes(a, vault_id, ID);
    ad_u64(a, 1);
    ad_bytes(a, "passcode", 8);
    ad_u64(a, gen);
}

static void write_slot(const char *passfile) {
    unsigned char salt[SALT], kek[KEY], nonce[NONCE], wrapped[KEY + TAG];
    randombytes_buf(salt, SALT);
    randombytes_buf(nonce, NONCE);
    kek_from(kek, passfile, salt);
    ad_t a;
    slot_ad(&a, generation);
    crypto_aead_xchacha20poly1305_ietf_encrypt(wrapped, NULL, vmk, KEY, a.b, a.n, NULL, nonce, kek);
    exec("DELETE FROM slots");
    sqlite3_stmt *s = prep("INSERT INTO slots(id, kind, generation, params, nonce, wrapped) VALUES(1,'passcode',?,?,?,?)");
    sqlite3_bind_int64(s, 1, generation);
    sqlite3_bind_blob(s, 2, salt, SALT, SQLITE_STATIC);
    sqlite3_bind_blob(s, 3, nonce, NONCE, SQLITE_STATIC);
    sqlite3_bind_blob(s, 4, wrapped, sizeof wrapped, SQLITE_STATIC);
    ok(sqlite3_step(s), "insert slot");
    sqlite3_finalize(s);
}

static void read_meta(void) {
    sqlite3_stmt *s = prep("SELECT value FROM meta WHERE key='vault_id'");
    if (sqlite3_step(s) != SQLITE_ROW || sqlite3_column_bytes(s, 0) != ID) die("no vault id");
    memcpy(vault_id, sqlite3_column_blob(s, 0), ID);
    sqlite3_finalize(s);
    s = prep("SELECT value FROM meta WHERE key='key_generation'");
    if (sqlite3_step(s) != SQLITE_ROW) die("no generation");
    generation = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
}

static void unlock(const char *passfile) {
    read_meta();
    sqlite3_stmt *s = prep("SELECT params, nonce, wrapped FROM slots WHERE kind='passcode'");
    if (sqlite3_step(s) != SQLITE_ROW) die("no passcode slot");
    unsigned char kek[KEY];
    kek_from(kek, passfile, sqlite3_column_blob(s, 0));
    ad_t a;
    slot_ad(&a, generation);
    if (sqlite3_column_bytes(s, 2) != KEY + TAG ||
        crypto_aead_xchacha20poly1305_ietf_decrypt(vmk, NULL, NULL, sqlite3_column_blob(s, 2), KEY + TAG, a.b, a.n,
                                                   sqlite3_column_blob(s, 1), kek))
        die("wrong passcode");
    sqlite3_finalize(s);
    keys_from_vmk();
}

/* Record encoding (docs/format.md): version, kind, then tag + LEB128 length + bytes. */
typedef struct { unsigned char *b; size_t n, cap; } buf_t;
static void put(buf_t *w, const void *p, size_t n) {
    if (w->n + n > w->cap) { w->cap = (w->n + n) * 2; w->b = realloc(w->b, w->cap); if (!w->b) die("memory"); }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void put_byte(buf_t *w, unsigned char c) { put(w, &c, 1); }
static void field(buf_t *w, unsigned char tag, const void *p, size_t n) {
    put_byte(w, tag);
    size_t v = n;
    do { unsigned char low = v & 0x7f; v >>= 7; put_byte(w, v ? low | 0x80 : low); } while (v);
    put(w, p, n);
}
static void field_i64(buf_t *w, unsigned char tag, long long t) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned long long)t >> (56 - 8 * i);
    field(w, tag, b, 8);
}

/* Reads the next field of a record; 0 at the end. */
static int next_field(const unsigned char *r, size_t n, size_t *off, unsigned char *tag, const unsigned char **v, size_t *len) {
    if (*off >= n) return 0;
    *tag = r[(*off)++];
    size_t l = 0;
    int shift = 0;
    for (;;) {
        if (*off >= n || shift > 28) die("bad record");
        unsigned char b = r[(*off)++];
        l |= (size_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
    if (l > n - *off) die("bad record");
    *v = r + *off;
    *len = l;
    *off += l;
    return 1;
}

/* Opens a row's overview into `plain` and checks its name against the row's name MAC. */
static size_t open_overview(sqlite3_stmt *s, int col, unsigned char *plain, const unsigned char **name, size_t *name_len) {
    const unsigned char *id = sqlite3_column_blob(s, col);
    const unsigned char *mac = sqlite3_column_blob(s, col + 1);
    const unsigned char *nonce = sqlite3_column_blob(s, col + 3);
    const unsigned char *c = sqlite3_column_blob(s, col + 4);
    int cn = sqlite3_column_bytes(s, col + 4);
    ad_t a;
    record_ad(&a, id, 0, sqlite3_column_int64(s, col + 2), NULL);
    unsigned long long pn;
    if (cn < TAG || crypto_aead_xchacha20poly1305_ietf_decrypt(plain, &pn, NULL, c, cn, a.b, a.n, nonce, item_key)) die("overview failed authentication");
    size_t off = 2;
    unsigned char tag;
    if (pn < 2 || plain[0] != 2 || plain[1] != 1 || !next_field(plain, pn, &off, &tag, name, name_len) || tag != 1) die("bad overview");
    unsigned char m[MAC];
    name_mac(m, *name, *name_len);
    if (sodium_memcmp(m, mac, MAC)) die("name MAC mismatch");
    return pn;
}

static size_t open_secrets(sqlite3_stmt *s, int col, unsigned char *plain) {
    const unsigned char *id = sqlite3_column_blob(s, col);
    const unsigned char *ononce = sqlite3_column_blob(s, col + 3);
    const unsigned char *nonce = sqlite3_column_blob(s, col + 5);
    const unsigned char *c = sqlite3_column_blob(s, col + 6);
    int cn = sqlite3_column_bytes(s, col + 6);
    ad_t a;
    record_ad(&a, id, 1, sqlite3_column_int64(s, col + 2), ononce);
    unsigned long long pn;
    if (cn < TAG || crypto_aead_xchacha20poly1305_ietf_decrypt(plain, &pn, NULL, c, cn, a.b, a.n, nonce, item_key)) die("secrets failed authentication");
    if (pn < 2 || plain[0] != 2 || plain[1] != 2) die("bad secrets record");
    return pn;
}

static void get(const char *name) {
    unsigned char mac[MAC], plain[4096];
    name_mac(mac, name, strlen(name));
    sqlite3_stmt *s = prep("SELECT id, name_mac, generation, overview_nonce, overview, secrets_nonce, secrets FROM items WHERE name_mac=?");
    sqlite3_bind_blob(s, 1, mac, MAC, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_ROW) die("no such item");
    if (sqlite3_column_bytes(s, 6) > (int)sizeof plain) die("record too large");
    size_t n = open_secrets(s, 0, plain), off = 2, len;
    unsigned char tag;
    const unsigned char *v;
    while (next_field(plain, n, &off, &tag, &v, &len)) {
        if (tag == 1) { fwrite(v, 1, len, stdout); fputc('\n', stdout); break; }
    }
    sodium_memzero(plain, sizeof plain);
    sqlite3_finalize(s);
}

/* ls: every name, sorted (vault sorts its listing). */
typedef struct { char *s; size_t n; } name_t;
static int by_name(const void *a, const void *b) {
    const name_t *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}
static void ls(void) {
    sqlite3_stmt *s = prep("SELECT id, name_mac, generation, overview_nonce, overview FROM items");
    size_t cap = 1024, count = 0;
    name_t *names = malloc(cap * sizeof *names);
    unsigned char plain[4096];
    while (sqlite3_step(s) == SQLITE_ROW) {
        const unsigned char *name;
        size_t len;
        if (sqlite3_column_bytes(s, 4) > (int)sizeof plain) die("record too large");
        open_overview(s, 0, plain, &name, &len);
        if (count == cap) names = realloc(names, (cap *= 2) * sizeof *names);
        names[count].s = malloc(len);
        memcpy(names[count].s, name, len);
        names[count++].n = len;
    }
    qsort(names, count, sizeof *names, by_name);
    for (size_t i = 0; i < count; i++) { fwrite(names[i].s, 1, names[i].n, stdout); fputc('\n', stdout); }
    sqlite3_finalize(s);
}

static int contains_folded(const unsigned char *h, size_t hn, const char *needle, size_t nn) {
    if (nn > hn) return 0;
    for (size_t i = 0; i + nn <= hn; i++) {
        size_t k = 0;
        while (k < nn && (h[i + k] >= 'A' && h[i + k] <= 'Z' ? h[i + k] | 0x20 : h[i + k]) == (unsigned char)needle[k]) k++;
        if (k == nn) return 1;
    }
    return 0;
}
static void search(const char *term) {
    sqlite3_stmt *s = prep("SELECT id, name_mac, generation, overview_nonce, overview FROM items");
    unsigned char plain[4096];
    size_t tn = strlen(term);
    while (sqlite3_step(s) == SQLITE_ROW) {
        const unsigned char *name, *v;
        size_t len, n, off = 2, vl;
        unsigned char tag;
        if (sqlite3_column_bytes(s, 4) > (int)sizeof plain) die("record too large");
        n = open_overview(s, 0, plain, &name, &len);
        while (next_field(plain, n, &off, &tag, &v, &vl)) {
            if ((tag == 1 || tag == 3 || tag == 4 || tag == 5) && contains_folded(v, vl, term, tn)) {
                fwrite(name, 1, len, stdout);
                fputc('\n', stdout);
                break;
            }
        }
    }
    sqlite3_finalize(s);
}

static void json_string(buf_t *w, const unsigned char *p, size_t n) {
    static const char hex[] = "0123456789abcdef";
    put_byte(w, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        put(w, p + run, i - run);
        run = i + 1;
        if (c == '"' || c == '\\') { put_byte(w, '\\'); put_byte(w, c); }
        else if (c == '\n') put(w, "\\n", 2);
        else if (c == '\t') put(w, "\\t", 2);
        else { char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]}; put(w, e, 6); }
    }
    put(w, p + run, n - run);
    put_byte(w, '"');
}
static long long i64_of(const unsigned char *v) {
    unsigned long long u = 0;
    for (int i = 0; i < 8; i++) u = u << 8 | v[i];
    return (long long)u;
}

/* export: vault's JSON of each item (the keys vault writes for the benchmark's logins). */
static void export(void) {
    sqlite3_stmt *s = prep("SELECT id, name_mac, generation, overview_nonce, overview, secrets_nonce, secrets FROM items");
    unsigned char op[4096], sp[4096];
    buf_t w = {0};
    char num[32];
    int first = 1;
    put_byte(&w, '[');
    while (sqlite3_step(s) == SQLITE_ROW) {
        const unsigned char *name, *v;
        size_t len, vl, off = 2;
        unsigned char tag;
        if (sqlite3_column_bytes(s, 4) > (int)sizeof op || sqlite3_column_bytes(s, 6) > (int)sizeof sp) die("record too large");
        size_t on = open_overview(s, 0, op, &name, &len);
        size_t sn = open_secrets(s, 0, sp);
        if (!first) put(&w, ",\n", 2);
        first = 0;
        put_byte(&w, '{');
        int urls = 0;
        long long created = 0, modified = 0;
        while (next_field(op, on, &off, &tag, &v, &vl)) {
            switch (tag) {
            case 1: put(&w, "\"name\":", 7); json_string(&w, v, vl); break;
            case 2: put(&w, ",\"type\":\"login\"", 15); break;
            case 3: put(&w, ",\"username\":", 12); json_string(&w, v, vl); break;
            case 4:
                if (urls++) put_byte(&w, ','); else put(&w, ",\"urls\":[", 9);
                json_string(&w, v, vl);
                break;
            case 6: created = i64_of(v); break;
            case 7: modified = i64_of(v); break;
            default: break;
            }
        }
        if (urls) put_byte(&w, ']');
        put(&w, num, snprintf(num, sizeof num, ",\"created\":%lld", created));
        put(&w, num, snprintf(num, sizeof num, ",\"modified\":%lld", modified));
        off = 2;
        while (next_field(sp, sn, &off, &tag, &v, &vl))
            if (tag == 1) { put(&w, ",\"password\":", 12); json_string(&w, v, vl); }
        put_byte(&w, '}');
        sodium_memzero(sp, sn);
        if (w.n >= 1 << 16) { fwrite(w.b, 1, w.n, stdout); sodium_memzero(w.b, w.n); w.n = 0; }
    }
    put(&w, "]\n", 2);
    fwrite(w.b, 1, w.n, stdout);
    sodium_memzero(w.b, w.n);
    sqlite3_finalize(s);
}

/* The benchmark's JSON: [{"k":"v",...},...], strings without escapes other than \" and \\. */
static const char *skip_ws(const char *p) { while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++; return p; }
static const char *string_at(const char *p, const char **s, size_t *n) {
    if (*p != '"') die("json: string expected");
    const char *q = ++p;
    while (*q != '"') { if (!*q) die("json: unterminated string"); if (*q == '\\') q++; q++; }
    *s = p;
    *n = q - p;
    return q + 1;
}

static void seal_record(const buf_t *plain, unsigned char *nonce, unsigned char *out, const unsigned char *id, int secrets,
                        const unsigned char *overview_nonce) {
    ad_t a;
    record_ad(&a, id, secrets, generation, overview_nonce);
    randombytes_buf(nonce, NONCE);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out, NULL, plain->b, plain->n, a.b, a.n, NULL, nonce, item_key);
}

static void large_cache(void) {
    char pragma[64];
    const char *kib = getenv("FLOOR_CACHE_KIB");
    snprintf(pragma, sizeof pragma, "PRAGMA cache_size = -%ld", kib ? atol(kib) : 131072L);
    exec(pragma);
}

static void import(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("input");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *text = malloc(size + 1);
    if (!text || fread(text, 1, size, f) != (size_t)size) die("read input");
    text[size] = 0;
    fclose(f);
    large_cache();
    exec("BEGIN IMMEDIATE");
    sqlite3_stmt *ins = prep("INSERT INTO items(id, name_mac, generation, overview_nonce, overview, secrets_nonce, secrets)"
                             " VALUES(?,?,?,?,?,?,?) ON CONFLICT(name_mac) DO NOTHING");
    buf_t ov = {0}, se = {0};
    unsigned char id[ID], mac[MAC], on[NONCE], sn[NONCE], oc[4096], sc[4096];
    long long now = time(NULL);
    long count = 0;
    const char *p = skip_ws(text);
    if (*p++ != '[') die("json: array expected");
    for (p = skip_ws(p); *p != ']'; p = skip_ws(p)) {
        if (*p++ != '{') die("json: object expected");
        const char *name = 0, *user = 0, *pass = 0, *url = 0;
        size_t nn = 0, un = 0, pn = 0, urn = 0;
        for (p = skip_ws(p); *p != '}';) {
            const char *k, *v;
            size_t kn, vn;
            p = skip_ws(string_at(p, &k, &kn));
            if (*p++ != ':') die("json: ':' expected");
            p = skip_ws(string_at(skip_ws(p), &v, &vn));
            if (kn == 4 && !memcmp(k, "name", 4)) name = v, nn = vn;
            else if (kn == 8 && !memcmp(k, "username", 8)) user = v, un = vn;
            else if (kn == 8 && !memcmp(k, "password", 8)) pass = v, pn = vn;
            else if (kn == 3 && !memcmp(k, "url", 3)) url = v, urn = vn;
            if (*p == ',') p = skip_ws(p + 1);
        }
        p = skip_ws(p + 1);
        if (*p == ',') p++;
        if (!name) die("json: an item without a name");
        ov.n = se.n = 0;
        put_byte(&ov, 2); put_byte(&ov, 1);
        field(&ov, 1, name, nn);
        field(&ov, 2, "\0", 1);
        if (user) field(&ov, 3, user, un);
        if (url) field(&ov, 4, url, urn);
        field_i64(&ov, 6, now);
        field_i64(&ov, 7, now);
        field(&ov, 8, pass ? "\2" : "\0", 1);
        put_byte(&se, 2); put_byte(&se, 2);
        if (pass) field(&se, 1, pass, pn);
        if (ov.n + TAG > sizeof oc || se.n + TAG > sizeof sc) die("item too large");
        randombytes_buf(id, ID);
        seal_record(&ov, on, oc, id, 0, NULL);
        seal_record(&se, sn, sc, id, 1, on);
        sodium_memzero(se.b, se.n);
        name_mac(mac, name, nn);
        sqlite3_bind_blob(ins, 1, id, ID, SQLITE_STATIC);
        sqlite3_bind_blob(ins, 2, mac, MAC, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 3, generation);
        sqlite3_bind_blob(ins, 4, on, NONCE, SQLITE_STATIC);
        sqlite3_bind_blob(ins, 5, oc, ov.n + TAG, SQLITE_STATIC);
        sqlite3_bind_blob(ins, 6, sn, NONCE, SQLITE_STATIC);
        sqlite3_bind_blob(ins, 7, sc, se.n + TAG, SQLITE_STATIC);
        ok(sqlite3_step(ins), "insert");
        if (sqlite3_changes(db) != 1) die("a name given twice or already in the vault");
        sqlite3_reset(ins);
        count++;
    }
    sqlite3_finalize(ins);
    exec("COMMIT");
    sodium_memzero(text, size);
    fprintf(stderr, "floor: imported %ld items\n", count);
}

/* rotate: a new master key and slot (a second Argon2id); every row's records re-sealed and its
 * name re-indexed, in batches of 512 rows by rowid, one transaction (what vault's rotation does). */
typedef struct { long long rowid; unsigned char mac[MAC], on[NONCE], sn[NONCE], oc[1024], sc[1024]; int ol, sl; } row_t;
static row_t rows[512];

static void rotate(const char *passfile) {
    unsigned char old_item[KEY], old_index[KEY], new_item[KEY], new_index[KEY];
    memcpy(old_item, item_key, KEY);
    memcpy(old_index, index_key, KEY);
    long long old_gen = generation, new_gen = generation + 1;
    large_cache();
    exec("BEGIN IMMEDIATE");
    randombytes_buf(vmk, KEY);
    keys_from_vmk();
    memcpy(new_item, item_key, KEY);
    memcpy(new_index, index_key, KEY);
    sqlite3_stmt *batch = prep("SELECT rowid, id, name_mac, generation, overview_nonce, overview, secrets_nonce, secrets"
                               " FROM items WHERE rowid > ? ORDER BY rowid LIMIT 512");
    sqlite3_stmt *up = prep("UPDATE items SET name_mac=?, generation=?, overview_nonce=?, overview=?, secrets_nonce=?, secrets=? WHERE rowid=?");
    long long after = 0, done = 0;
    unsigned char op[1024], sp[1024];
    buf_t b = {0};
    for (;;) {
        sqlite3_bind_int64(batch, 1, after);
        int k = 0;
        while (sqlite3_step(batch) == SQLITE_ROW) {
            row_t *r = &rows[k++];
            const unsigned char *name, *id = sqlite3_column_blob(batch, 1);
            size_t len;
            if (sqlite3_column_bytes(batch, 5) > (int)sizeof op || sqlite3_column_bytes(batch, 7) > (int)sizeof sp) die("record too large");
            r->rowid = sqlite3_column_int64(batch, 0);
            memcpy(item_key, old_item, KEY);
            memcpy(index_key, old_index, KEY);
            generation = old_gen;
            size_t on = open_overview(batch, 1, op, &name, &len);
            size_t sn = open_secrets(batch, 1, sp);
            memcpy(item_key, new_item, KEY);
            memcpy(index_key, new_index, KEY);
            generation = new_gen;
            name_mac(r->mac, name, len);
            b.n = 0;
            put(&b, op, on);
            seal_record(&b, r->on, r->oc, id, 0, NULL);
            r->ol = on + TAG;
            b.n = 0;
            put(&b, sp, sn);
            seal_record(&b, r->sn, r->sc, id, 1, r->on);
            r->sl = sn + TAG;
            sodium_memzero(sp, sn);
            sodium_memzero(b.b, b.n);
        }
        sqlite3_reset(batch);
        if (k == 0) break;
        after = rows[k - 1].rowid;
        for (int i = 0; i < k; i++) {
            row_t *r = &rows[i];
            sqlite3_bind_blob(up, 1, r->mac, MAC, SQLITE_STATIC);
            sqlite3_bind_int64(up, 2, new_gen);
            sqlite3_bind_blob(up, 3, r->on, NONCE, SQLITE_STATIC);
            sqlite3_bind_blob(up, 4, r->oc, r->ol, SQLITE_STATIC);
            sqlite3_bind_blob(up, 5, r->sn, NONCE, SQLITE_STATIC);
            sqlite3_bind_blob(up, 6, r->sc, r->sl, SQLITE_STATIC);
            sqlite3_bind_int64(up, 7, r->rowid);
            ok(sqlite3_step(up), "update");
            sqlite3_reset(up);
            done++;
        }
    }
    sqlite3_finalize(batch);
    sqlite3_finalize(up);
    generation = new_gen;
    write_slot(passfile);
    sqlite3_stmt *g = prep("UPDATE meta SET value=? WHERE key='key_generation'");
    sqlite3_bind_int64(g, 1, new_gen);
    ok(sqlite3_step(g), "generation");
    sqlite3_finalize(g);
    exec("COMMIT");
    fprintf(stderr, "floor: re-sealed %lld items\n", done);
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: floor init|import|get|sget|ls|search|export|rotate|keyfile DB PASSFILE|KEYFILE [ARG]\n"); return 2; }
    if (sodium_init() < 0) die("sodium_init");
    const char *cmd = argv[1], *path = argv[2], *secret = argv[3];
    if (!strcmp(cmd, "init")) {
        remove(path);
        open_db(path, 1);
        randombytes_buf(vault_id, ID);
        randombytes_buf(vmk, KEY);
        exec("BEGIN IMMEDIATE");
        exec("CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);"
             "CREATE TABLE slots(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, generation INTEGER NOT NULL,"
             " params BLOB NOT NULL, nonce BLOB NOT NULL, wrapped BLOB NOT NULL);"
             "CREATE TABLE audit(id INTEGER PRIMARY KEY, generation INTEGER NOT NULL, nonce BLOB NOT NULL, sealed BLOB NOT NULL)");
        const char *schema = getenv("FLOOR_SCHEMA");
        if (!schema || !strcmp(schema, "vault")) exec(ITEMS_TABLE);
        else if (!strcmp(schema, "no-id-index"))
            exec("CREATE TABLE items(id BLOB NOT NULL, name_mac BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL,"
                 " overview_nonce BLOB NOT NULL, overview BLOB NOT NULL, secrets_nonce BLOB NOT NULL, secrets BLOB NOT NULL)");
        else if (!strcmp(schema, "without-rowid"))
            exec("CREATE TABLE items(id BLOB PRIMARY KEY, name_mac BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL,"
                 " overview_nonce BLOB NOT NULL, overview BLOB NOT NULL, secrets_nonce BLOB NOT NULL, secrets BLOB NOT NULL) WITHOUT ROWID");
        else die("FLOOR_SCHEMA: vault, no-id-index or without-rowid");
        sqlite3_stmt *s = prep("INSERT INTO meta(key, value) VALUES('vault_id', ?), ('key_generation', 1)");
        sqlite3_bind_blob(s, 1, vault_id, ID, SQLITE_STATIC);
        ok(sqlite3_step(s), "meta");
        sqlite3_finalize(s);
        write_slot(secret);
        exec("COMMIT");
        exec("PRAGMA wal_checkpoint(TRUNCATE)");
    } else if (!strcmp(cmd, "sget")) {
        if (argc < 5) die("sget needs a name");
        open_db(path, 0);
        read_meta();
        FILE *f = fopen(secret, "rb");
        if (!f || fread(vmk, 1, KEY, f) != KEY) die("key file");
        fclose(f);
        keys_from_vmk();
        get(argv[4]);
    } else {
        open_db(path, 0);
        unlock(secret);
        if (!strcmp(cmd, "import") && argc > 4) import(argv[4]);
        else if (!strcmp(cmd, "get") && argc > 4) get(argv[4]);
        else if (!strcmp(cmd, "ls")) ls();
        else if (!strcmp(cmd, "search") && argc > 4) search(argv[4]);
        else if (!strcmp(cmd, "export")) export();
        else if (!strcmp(cmd, "rotate")) rotate(secret);
        else if (!strcmp(cmd, "keyfile") && argc > 4) {
            FILE *f = fopen(argv[4], "wb");
            if (!f || fwrite(vmk, 1, KEY, f) != KEY) die("key file");
            fclose(f);
        } else die("unknown command or missing argument");
    }
    sodium_memzero(vmk, KEY);
    sqlite3_close(db);
    return 0;
}
