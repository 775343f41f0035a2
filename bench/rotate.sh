#!/usr/bin/env bash
# `vault rotate` (re-seals every item in one SQLite transaction), whole-process time at 10k and
# 100k items, release build, cheap KDF (Argon2id 8 MiB, 1 pass), next to what this machine can do:
#   - an empty vault's rotate (the fixed part: two Argon2id runs, slots, process start)
#   - Argon2id 8 MiB / 1 pass alone (C, libsodium)
#   - raw XChaCha20-Poly1305 seal, open+seal and full re-seal crypto for N records of the vault's
#     record size (C, libsodium: bench/c/seal_throughput.c)
#   - raw SQLite: N UPDATEs in one transaction, and the exact statements a rotation runs, on the
#     vault's schema and pragmas (C, libsqlite3: bench/c/sqlite_update.c); and the latter again
#     with a 128 MiB page cache (what-if)
#   - strace -c of one rotate (syscalls per item) and, with perf, where the time goes
#
#   bench/rotate.sh                SIZES="10000 100000" RUNS=10 RAW_REPEATS=5 PERF=1
# Results: bench/results/rotate.{md,json,txt}, rotate-raw.jsonl, rotate-profile.txt.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZES=${SIZES:-"10000 100000"}
RUNS=${RUNS:-10}
RAW_REPEATS=${RAW_REPEATS:-5}
PERF=${PERF:-1}

need hyperfine:hyperfine gcc:gcc strace:strace python3:python3 sqlite3:sqlite3 \
     /usr/include/sodium.h:libsodium-dev /usr/include/sqlite3.h:libsqlite3-dev
[[ $PERF == 1 ]] && need perf:linux-perf
vault_binary
cc_helper seal_throughput seal_throughput.c -lsodium -lm
cc_helper sqlite_update sqlite_update.c -lsqlite3 -lm
make_env

new_vault r0 0
for n in $SIZES; do new_vault "r$n" "$n"; done
# The raw baselines use records of the size the vault really writes (mean sealed length, 16-byte tag).
record=$(sqlite3 "$VAULT_HOME/r${SIZES##* }/vault.db" 'SELECT CAST(round(avg(length(sealed))) AS INTEGER) FROM items')
[[ $record =~ ^[0-9]+$ ]] || die "could not read the record size"
say "bench: sealed item size in the vault: $record bytes (plaintext $((record - 16)))"

# --- vault rotate: one hyperfine run (with a shell, for the passcode descriptor) ---------------------
cmds=(-n "vault rotate (0 items)" "$VAULT rotate --vault r0 --passcode-fd 3 3<$PASSCODE")
for n in $SIZES; do cmds+=(-n "vault rotate ($n items)" "$VAULT rotate --vault r$n --passcode-fd 3 3<$PASSCODE"); done
say "bench: hyperfine, $RUNS runs each"
hyperfine --style basic --warmup 1 --runs "$RUNS" \
    --export-json "$RESULTS/rotate.json" --export-markdown "$RESULTS/rotate.md" \
    "${cmds[@]}" >"$RESULTS/rotate.hyperfine.txt" 2>&1 || { cat "$RESULTS/rotate.hyperfine.txt"; die "hyperfine failed"; }

# --- the machine's limits ----------------------------------------------------------------------------
: >"$RESULTS/rotate-raw.jsonl"
# Argon2id at the default cost (256 MiB, 3 passes), for scale: what a rotation's two runs cost then.
"$BUILD/seal_throughput" 1 16 256 3 3 | grep argon2id >>"$RESULTS/rotate-raw.jsonl"
for n in $SIZES; do
    say "bench: raw crypto and SQLite, $n records"
    "$BUILD/seal_throughput" "$n" $((record - 16)) 8 1 "$RAW_REPEATS" >>"$RESULTS/rotate-raw.jsonl"
    "$BUILD/sqlite_update" "$WORK/raw.db" "$n" "$RAW_REPEATS" 1 "$record" >>"$RESULTS/rotate-raw.jsonl"
    rm -f "$WORK"/raw.db*
    # what-if: the same statements with a 128 MiB page cache instead of SQLite's default 2 MiB
    "$BUILD/sqlite_update" "$WORK/raw.db" "$n" "$RAW_REPEATS" 1 "$record" 131072 >>"$RESULTS/rotate-raw.jsonl"
    rm -f "$WORK"/raw.db*
done

# --- summary -----------------------------------------------------------------------------------------
{
    machine_info
    echo "vault rotate: $RUNS runs each after 1 warm-up (hyperfine, sh -c; every run rotates the same vault again)"
    echo "raw baselines: C programs (libsodium, libsqlite3), $RAW_REPEATS repeats each; records of $((record - 16)) bytes plaintext / $record sealed, the vault's mean"
    echo
    python3 - "$RESULTS/rotate.json" "$RESULTS/rotate-raw.jsonl" <<'PY'
import json, re, sys
rot = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
raw = {}
for line in open(sys.argv[2]):
    o = json.loads(line)
    raw[(o["what"], o["n"])] = o
fixed = rot["vault rotate (0 items)"]
print(f"{'':44} {'mean +- sd':>22}")
seen = set()
for (w, n), o in raw.items():
    if w.startswith("argon2id") and w not in seen:
        seen.add(w)
        label = w.replace("argon2id", "Argon2id") + ", once (C)"
        print(f"{label:44} {o['mean_ms']:9.2f} +- {o['sd_ms']:6.2f} ms   (a rotation runs it twice)")
print(f"{'vault rotate, 0 items (fixed part)':44} {fixed['mean']*1e3:9.2f} +- {fixed['stddev']*1e3:6.2f} ms")
for k, x in rot.items():
    m = re.search(r"\((\d+) items\)", k)
    n = int(m.group(1))
    if n == 0:
        continue
    mean, sd = x["mean"] * 1e3, x["stddev"] * 1e3
    per = (mean - fixed["mean"] * 1e3) / n * 1e3
    seal, os_, rs, gd = (raw[(w, n)] for w in ("seal", "open+seal", "reseal", "guarded"))
    up, rsql = raw[("update", n)], raw[("rotate-sql", n)]
    floor = rs["mean_ms"] + rsql["mean_ms"]
    print(f"\n{n} items")
    print(f"  {'vault rotate (whole process)':42} {mean:9.1f} +- {sd:6.1f} ms   {per:6.2f} us/item beyond the fixed part")
    print(f"  {'raw: seal only (random nonce + encrypt)':42} {seal['mean_ms']:9.1f} +- {seal['sd_ms']:6.1f} ms   {seal['ns_per_record']/1e3:6.2f} us/item")
    print(f"  {'raw: open + seal':42} {os_['mean_ms']:9.1f} +- {os_['sd_ms']:6.1f} ms   {os_['ns_per_record']/1e3:6.2f} us/item")
    print(f"  {'raw: re-seal crypto (open, 2 BLAKE2b, seal)':42} {rs['mean_ms']:9.1f} +- {rs['sd_ms']:6.1f} ms   {rs['ns_per_record']/1e3:6.2f} us/item")
    print(f"  {'raw: SQLite N UPDATEs, one transaction':42} {up['mean_ms']:9.1f} +- {up['sd_ms']:6.1f} ms   {up['ns_per_record']/1e3:6.2f} us/item")
    print(f"  {'raw: SQLite statements of a rotation':42} {rsql['mean_ms']:9.1f} +- {rsql['sd_ms']:6.1f} ms   {rsql['ns_per_record']/1e3:6.2f} us/item")
    print(f"  {'floor = re-seal crypto + rotation SQL':42} {floor:9.1f} ms           {floor/n*1e3:6.2f} us/item")
    print(f"  {'vault / floor (fixed part removed)':42} {(mean - fixed['mean']*1e3)/floor:9.2f} x")
    print(f"  {'for scale: sodium_malloc+free per record':42} {gd['mean_ms']:9.1f} +- {gd['sd_ms']:6.1f} ms   {gd['ns_per_record']/1e3:6.2f} us/item")
    big = raw.get(("rotate-sql, cache 131072 KiB", n))
    if big:
        print(f"  {'what-if: rotation SQL, cache_size 128 MiB':42} {big['mean_ms']:9.1f} +- {big['sd_ms']:6.1f} ms   {big['ns_per_record']/1e3:6.2f} us/item")
PY
} | tee "$RESULTS/rotate.txt"

# --- where a rotation's time goes ------------------------------------------------------------------
n=${SIZES%% *}
{
    echo
    echo "strace -c -f of one 'vault rotate' at $n items (calls per item = calls / $n):"
    strace -c -f "$VAULT" rotate --vault "r$n" --passcode-fd 3 3<"$PASSCODE" 2>&1 >/dev/null \
        | awk -v n="$n" '/^ *[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ { c = $4; name = $NF; printf "  %-12s %8d calls  %6.2f per item  %5.1f%% of syscall time\n", name, c, c / n, $1 }' | head -14
    if [[ $PERF == 1 ]] && perf stat -e task-clock true >/dev/null 2>&1; then
        echo
        echo "perf record of one 'vault rotate' at $n items, charged by leaf frame (ms inflated by perf):"
        perf record -q -o "$BUILD/rotate.perf.data" -F 5000 -g -- "$VAULT" rotate --vault "r$n" --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1
        perf script -i "$BUILD/rotate.perf.data" -F comm,tid,ip,sym,dso 2>/dev/null | python3 "$BENCH_DIR/tools/perf_leaf.py" vault 1 5000
    fi
} 2>&1 | tee "$RESULTS/rotate-profile.txt"
say "bench: results in $RESULTS/rotate.{txt,md,json}, rotate-raw.jsonl, rotate-profile.txt"
