/* Raw libsodium throughput for records the size of a vault item, on this machine.
 *
 *   seal_throughput N [PLAINTEXT_BYTES=211] [KDF_MIB=8] [KDF_OPS=1] [REPEATS=5]
 *
 * A vault item row is XChaCha20-Poly1305-IETF over ~211 bytes of JSON (227 bytes sealed with the
 * tag), a fresh 24-byte random nonce per write, and ~70 bytes of associated data (label, vault id,
 * item id, format version, generation); its name index is a keyed BLAKE2b-256 of the name.
 * Measures, each REPEATS times over N records:
 *   seal        random nonce + encrypt                                   (the brief's baseline)
 *   open+seal   decrypt the old record, new nonce, encrypt               (the AEAD work of a re-seal)
 *   reseal      open + BLAKE2b check of the old index + new index + seal (all the crypto a rotation
 *               must do per item)
 *   guarded     sodium_malloc + sodium_free of a plaintext-sized buffer  (what putting each opened
 *               record in guarded memory costs)
 * and the Argon2id key derivation at KDF_MIB/KDF_OPS (a rotation runs it twice: unlock, new slot).
 * Prints one JSON object per line: {"what":..., "n":..., "mean_ms":..., "sd_ms":..., "min_ms":..., "ns_per_record":...}
 */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void report(const char *what, long n, const double *ms, int reps) {
    double sum = 0, min = ms[0], var = 0;
    for (int i = 0; i < reps; i++) { sum += ms[i]; if (ms[i] < min) min = ms[i]; }
    double mean = sum / reps;
    for (int i = 0; i < reps; i++) var += (ms[i] - mean) * (ms[i] - mean);
    double sd = reps > 1 ? sqrt(var / (reps - 1)) : 0;
    printf("{\"what\":\"%s\",\"n\":%ld,\"mean_ms\":%.3f,\"sd_ms\":%.3f,\"min_ms\":%.3f,\"ns_per_record\":%.1f}\n",
           what, n, mean, sd, min, n ? mean * 1e6 / n : 0);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s N [PLAINTEXT_BYTES] [KDF_MIB] [KDF_OPS] [REPEATS]\n", argv[0]); return 2; }
    long n = atol(argv[1]);
    size_t plen = argc > 2 ? (size_t)atol(argv[2]) : 211;
    size_t kdf_mib = argc > 3 ? (size_t)atol(argv[3]) : 8;
    unsigned long long kdf_ops = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
    int reps = argc > 5 ? atoi(argv[5]) : 5;
    if (sodium_init() < 0) return 1;
    enum { NONCE = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, TAG = crypto_aead_xchacha20poly1305_ietf_ABYTES,
           AD = 70, NAME = 10, MAC = 32 };
    size_t clen = plen + TAG;
    unsigned char key[32], key2[32], ikey[32], ikey2[32], ad[AD];
    randombytes_buf(key, sizeof key); randombytes_buf(key2, sizeof key2);
    randombytes_buf(ikey, sizeof ikey); randombytes_buf(ikey2, sizeof ikey2);
    randombytes_buf(ad, sizeof ad);
    unsigned char *plain = malloc(plen), *nonces = malloc(n * NONCE), *ct = malloc(n * clen),
                  *ct2 = malloc(n * clen), *names = malloc(n * NAME), *macs = malloc(n * MAC), *out = malloc(plen);
    double *ms = calloc(reps, sizeof *ms);
    if (!plain || !nonces || !ct || !ct2 || !names || !macs || !out || !ms) return 1;
    randombytes_buf(plain, plen);
    randombytes_buf(names, n * NAME);
    for (long i = 0; i < n; i++) crypto_generichash(macs + i * MAC, MAC, names + i * NAME, NAME, ikey, sizeof ikey);

    for (int r = 0; r < reps; r++) {               /* seal */
        double t = now_ms();
        for (long i = 0; i < n; i++) {
            randombytes_buf(nonces + i * NONCE, NONCE);
            crypto_aead_xchacha20poly1305_ietf_encrypt(ct + i * clen, NULL, plain, plen, ad, AD, NULL, nonces + i * NONCE, key);
        }
        ms[r] = now_ms() - t;
    }
    report("seal", n, ms, reps);

    for (int r = 0; r < reps; r++) {               /* open + seal */
        double t = now_ms();
        for (long i = 0; i < n; i++) {
            if (crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, ct + i * clen, clen, ad, AD, nonces + i * NONCE, key) != 0) return 3;
            unsigned char nonce[NONCE];
            randombytes_buf(nonce, NONCE);
            crypto_aead_xchacha20poly1305_ietf_encrypt(ct2 + i * clen, NULL, out, plen, ad, AD, NULL, nonce, key2);
        }
        ms[r] = now_ms() - t;
    }
    report("open+seal", n, ms, reps);

    for (int r = 0; r < reps; r++) {               /* open + index check + new index + seal */
        double t = now_ms();
        for (long i = 0; i < n; i++) {
            unsigned char mac[MAC], mac2[MAC], nonce[NONCE];
            if (crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, ct + i * clen, clen, ad, AD, nonces + i * NONCE, key) != 0) return 3;
            crypto_generichash(mac, MAC, names + i * NAME, NAME, ikey, sizeof ikey);
            if (sodium_memcmp(mac, macs + i * MAC, MAC) != 0) return 3;
            crypto_generichash(mac2, MAC, names + i * NAME, NAME, ikey2, sizeof ikey2);
            randombytes_buf(nonce, NONCE);
            crypto_aead_xchacha20poly1305_ietf_encrypt(ct2 + i * clen, NULL, out, plen, ad, AD, NULL, nonce, key2);
        }
        ms[r] = now_ms() - t;
    }
    report("reseal", n, ms, reps);

    for (int r = 0; r < reps; r++) {               /* guarded allocation per record */
        double t = now_ms();
        for (long i = 0; i < n; i++) {
            unsigned char *g = sodium_malloc(plen);
            if (!g) return 4;
            memcpy(g, plain, plen);
            sodium_free(g);
        }
        ms[r] = now_ms() - t;
    }
    report("guarded", n, ms, reps);

    for (int r = 0; r < reps; r++) {               /* Argon2id, once */
        unsigned char k[32], salt[crypto_pwhash_SALTBYTES];
        randombytes_buf(salt, sizeof salt);
        double t = now_ms();
        if (crypto_pwhash(k, sizeof k, "bench-passcode", 14, salt, kdf_ops, kdf_mib << 20, crypto_pwhash_ALG_ARGON2ID13) != 0) return 5;
        ms[r] = now_ms() - t;
    }
    char what[64];
    snprintf(what, sizeof what, "argon2id %zu MiB ops %llu", kdf_mib, kdf_ops);
    report(what, 0, ms, reps);
    return 0;
}
