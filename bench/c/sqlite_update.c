/* Raw SQLite UPDATE throughput for N rows the size of a vault item, in one transaction.
 *
 *   sqlite_update DBPATH N [REPEATS=5] [SECURE_DELETE=1] [SEALED_BYTES=227] [CACHE_KIB=0]
 *
 * Makes DBPATH with the vault's items table and the vault's pragmas (WAL, synchronous=NORMAL,
 * foreign_keys=ON, secure_delete=ON unless SECURE_DELETE=0), fills it with N rows (16-byte id,
 * 32-byte name index, 24-byte nonce, SEALED_BYTES-byte sealed record), then measures, REPEATS times each,
 * with every new value made before the clock starts:
 *   update      BEGIN; N x UPDATE items SET name_mac=?,nonce=?,sealed=?,generation=? WHERE id=?; COMMIT
 *   rotate-sql  the statements a vault rotation runs: BEGIN; SELECT every row (copied out);
 *               UPDATE items SET name_mac=id; the N UPDATEs above; COMMIT
 * CACHE_KIB > 0 sets PRAGMA cache_size to that many KiB (the vault keeps SQLite's default, 2 MiB).
 * Prints one JSON object per line, like seal_throughput.
 */
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ID = 16, MAC = 32, NONCE = 24 };
static long SEALED = 227;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void ok(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void exec(sqlite3 *db, const char *sql) { ok(sqlite3_exec(db, sql, NULL, NULL, NULL), db, sql); }

static void fill(unsigned char *p, size_t n) {
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(p, 1, n, f) != n) { perror("urandom"); exit(1); }
    fclose(f);
}

static void report(const char *what, long n, const double *ms, int reps) {
    double sum = 0, min = ms[0], var = 0;
    for (int i = 0; i < reps; i++) { sum += ms[i]; if (ms[i] < min) min = ms[i]; }
    double mean = sum / reps;
    for (int i = 0; i < reps; i++) var += (ms[i] - mean) * (ms[i] - mean);
    printf("{\"what\":\"%s\",\"n\":%ld,\"mean_ms\":%.3f,\"sd_ms\":%.3f,\"min_ms\":%.3f,\"ns_per_record\":%.1f}\n", what, n,
           mean, reps > 1 ? sqrt(var / (reps - 1)) : 0, min, mean * 1e6 / n);
    fflush(stdout);
}

static void updates(sqlite3 *db, sqlite3_stmt *up, long n, const unsigned char *ids, const unsigned char *macs,
                    const unsigned char *nonces, const unsigned char *sealed, int gen) {
    for (long i = 0; i < n; i++) {
        sqlite3_bind_blob(up, 1, macs + i * MAC, MAC, SQLITE_STATIC);
        sqlite3_bind_blob(up, 2, nonces + i * NONCE, NONCE, SQLITE_STATIC);
        sqlite3_bind_blob(up, 3, sealed + i * SEALED, SEALED, SQLITE_STATIC);
        sqlite3_bind_int64(up, 4, gen);
        sqlite3_bind_blob(up, 5, ids + i * ID, ID, SQLITE_STATIC);
        ok(sqlite3_step(up), db, "update");
        if (sqlite3_changes(db) != 1) { fprintf(stderr, "update missed a row\n"); exit(1); }
        sqlite3_reset(up);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s DBPATH N [REPEATS] [SECURE_DELETE] [SEALED_BYTES] [CACHE_KIB]\n", argv[0]); return 2; }
    const char *path = argv[1];
    long n = atol(argv[2]);
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    int secure = argc > 4 ? atoi(argv[4]) : 1;
    if (argc > 5) SEALED = atol(argv[5]);
    long cache_kib = argc > 6 ? atol(argv[6]) : 0;
    unsigned char *ids = malloc(n * ID), *macs = malloc(n * MAC), *nonces = malloc(n * NONCE), *sealed = malloc(n * SEALED);
    double *ms = calloc(reps, sizeof *ms);
    if (!ids || !macs || !nonces || !sealed || !ms) return 1;
    fill(ids, n * ID);
    sqlite3 *db;
    remove(path);
    ok(sqlite3_open(path, &db), db, "open");
    sqlite3_busy_timeout(db, 5000);
    exec(db, "PRAGMA journal_mode=WAL");
    exec(db, "PRAGMA foreign_keys=ON");
    exec(db, "PRAGMA synchronous=NORMAL");
    exec(db, secure ? "PRAGMA secure_delete=ON" : "PRAGMA secure_delete=OFF");
    char label[96], pragma[64];
    snprintf(label, sizeof label, "%s%s", secure ? "" : ", secure_delete off", "");
    if (cache_kib > 0) {
        snprintf(pragma, sizeof pragma, "PRAGMA cache_size=-%ld", cache_kib);
        exec(db, pragma);
        snprintf(label + strlen(label), sizeof label - strlen(label), ", cache %ld KiB", cache_kib);
    }
    char what[128];
    exec(db, "CREATE TABLE items(id BLOB PRIMARY KEY, name_mac BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL,"
             " nonce BLOB NOT NULL, sealed BLOB NOT NULL)");
    sqlite3_stmt *ins, *up, *sel, *clear;
    ok(sqlite3_prepare_v2(db, "INSERT INTO items(id, name_mac, generation, nonce, sealed) VALUES(?,?,?,?,?)", -1, &ins, NULL), db, "prepare");
    ok(sqlite3_prepare_v2(db, "UPDATE items SET name_mac=?, nonce=?, sealed=?, generation=? WHERE id=?", -1, &up, NULL), db, "prepare");
    ok(sqlite3_prepare_v2(db, "SELECT id, name_mac, nonce, sealed, generation FROM items", -1, &sel, NULL), db, "prepare");
    ok(sqlite3_prepare_v2(db, "UPDATE items SET name_mac = id", -1, &clear, NULL), db, "prepare");
    fill(macs, n * MAC); fill(nonces, n * NONCE); fill(sealed, n * SEALED);
    exec(db, "BEGIN");
    for (long i = 0; i < n; i++) {
        sqlite3_bind_blob(ins, 1, ids + i * ID, ID, SQLITE_STATIC);
        sqlite3_bind_blob(ins, 2, macs + i * MAC, MAC, SQLITE_STATIC);
        sqlite3_bind_int64(ins, 3, 1);
        sqlite3_bind_blob(ins, 4, nonces + i * NONCE, NONCE, SQLITE_STATIC);
        sqlite3_bind_blob(ins, 5, sealed + i * SEALED, SEALED, SQLITE_STATIC);
        ok(sqlite3_step(ins), db, "insert");
        sqlite3_reset(ins);
    }
    exec(db, "COMMIT");
    int gen = 1;

    for (int r = 0; r < reps; r++) {
        fill(macs, n * MAC); fill(nonces, n * NONCE); fill(sealed, n * SEALED);
        double t = now_ms();
        exec(db, "BEGIN");
        updates(db, up, n, ids, macs, nonces, sealed, ++gen);
        exec(db, "COMMIT");
        ms[r] = now_ms() - t;
    }
    snprintf(what, sizeof what, "update%s", label);
    report(what, n, ms, reps);

    unsigned char *copy = malloc(n * (ID + MAC + NONCE + SEALED));
    if (!copy) return 1;
    for (int r = 0; r < reps; r++) {
        fill(macs, n * MAC); fill(nonces, n * NONCE); fill(sealed, n * SEALED);
        double t = now_ms();
        exec(db, "BEGIN");
        long k = 0;
        while (sqlite3_step(sel) == SQLITE_ROW) {
            unsigned char *row = copy + k * (ID + MAC + NONCE + SEALED);
            memcpy(row, sqlite3_column_blob(sel, 0), ID);
            memcpy(row + ID, sqlite3_column_blob(sel, 1), MAC);
            memcpy(row + ID + MAC, sqlite3_column_blob(sel, 2), NONCE);
            memcpy(row + ID + MAC + NONCE, sqlite3_column_blob(sel, 3), SEALED);
            (void)sqlite3_column_int64(sel, 4);
            k++;
        }
        sqlite3_reset(sel);
        if (k != n) { fprintf(stderr, "read %ld rows of %ld\n", k, n); return 1; }
        ok(sqlite3_step(clear), db, "clear index");
        sqlite3_reset(clear);
        updates(db, up, n, ids, macs, nonces, sealed, ++gen);
        exec(db, "COMMIT");
        ms[r] = now_ms() - t;
    }
    snprintf(what, sizeof what, "rotate-sql%s", label);
    report(what, n, ms, reps);
    sqlite3_finalize(ins); sqlite3_finalize(up); sqlite3_finalize(sel); sqlite3_finalize(clear);
    sqlite3_close(db);
    return 0;
}
