#!/usr/bin/env bash
# Instructions (valgrind --tool=callgrind, counted, so the figure holds on a loaded machine) of one
# `vault import` of vault JSON with the passcode into an empty vault, for each binary named, and of
# the floor's import (bench/c/floor.c) of the same N logins. Per item is (import of N - import of
# an empty array) / N: start-up, the unlock (Argon2id) and the transaction are left out.
#
#   bench/import-instructions.sh BINARY [BINARY...]      N=10000
# Results: bench/results/import-instructions.txt
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-10000}
(($# >= 1)) || die "usage: bench/import-instructions.sh BINARY [BINARY...]"
need valgrind:valgrind python3:python3 gcc:gcc /usr/include/sodium.h:libsodium-dev /usr/include/sqlite3.h:libsqlite3-dev
FLOOR=$BUILD/floor
[[ $FLOOR -nt $BENCH_DIR/c/floor.c ]] || cc_helper floor floor.c -lsodium -lsqlite3
VAULT=$1
make_env
items_json "$N" "$WORK/items.json"
echo "[]" > "$WORK/empty.json"

{
    echo "# import of $N items into an empty vault, instructions per run (callgrind), $(date -u +%FT%TZ)"
    "$FLOOR" init "$WORK/floor0.db" "$PASSCODE" && "$FLOOR" init "$WORK/floor.db" "$PASSCODE"
    f0=$(instructions "$FLOOR" import "$WORK/floor0.db" "$PASSCODE" "$WORK/empty.json")
    f=$(instructions "$FLOOR" import "$WORK/floor.db" "$PASSCODE" "$WORK/items.json")
    floor=$(((f - f0) / N))
    printf 'floor\timport %s\tempty %s\tper item %s\n' "$f" "$f0" "$floor"
    k=0
    for bin in "$@"; do
        for v in e$k i$k; do
            "$bin" init --vault "$v" --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1 \
                || die "vault init --vault $v failed"
        done
        empty=$(instructions "$bin" import --vault e$k --passcode-fd 3 "$WORK/empty.json")
        total=$(instructions "$bin" import --vault i$k --passcode-fd 3 "$WORK/items.json")
        per=$(((total - empty) / N))
        printf '%s\timport %s\tempty %s\tper item %s\t%s x the floor\n' "$bin" "$total" "$empty" "$per" \
            "$(awk -v a="$per" -v b="$floor" 'BEGIN { printf "%.2f", a / b }')"
        k=$((k + 1))
    done
} | tee "$RESULTS/import-instructions.txt"
