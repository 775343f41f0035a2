#!/usr/bin/env bash
# The 1M-item index study of issue 27: bench/c/floor.c's import and rotate at SIZES items with
# vault's items table (a rowid table: rows in insertion order, two random-key indexes, id and
# name_mac), with the id not indexed, with the table clustered on the random id (WITHOUT ROWID),
# and with vault's table and a larger page cache. Wall and CPU time of each (/usr/bin/time).
#
#   bench/index-study.sh                SIZES="100000 1000000" CACHES="131072 524288"
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need /usr/bin/time:time python3:python3 gcc:gcc /usr/include/sodium.h:libsodium-dev /usr/include/sqlite3.h:libsqlite3-dev
SIZES=${SIZES:-"100000 1000000"}
CACHES=${CACHES:-"131072 524288"}
cc_helper floor floor.c -lsodium -lsqlite3
FLOOR=$BUILD/floor
VAULT=true make_env
OUT=$RESULTS/index-study.txt
: > "$OUT"
timed() {  # LABEL CMD...
    local label=$1; shift
    /usr/bin/time -o "$WORK/time" -f "%e %U %S %M" "$@" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; die "$label failed"; }
    read -r e u s m < "$WORK/time"
    printf '%-52s %8.2f s wall %8.2f s cpu %8.1f MB\n' "$label" "$e" "$(echo "$u + $s" | bc -l)" "$(echo "$m/1024" | bc -l)" | tee -a "$OUT" >&2
}
for n in $SIZES; do
    items_json "$n" "$WORK/items.json"
    for schema in vault no-id-index without-rowid; do
        for cache in $CACHES; do
            [[ $schema != vault && $cache != "${CACHES%% *}" ]] && continue
            rm -f "$WORK"/f.db*
            FLOOR_SCHEMA=$schema "$FLOOR" init "$WORK/f.db" "$PASSCODE"
            FLOOR_CACHE_KIB=$cache timed "$n: import, $schema, cache $((cache / 1024)) MiB" "$FLOOR" import "$WORK/f.db" "$PASSCODE" "$WORK/items.json"
            [[ $schema == without-rowid ]] && continue
            FLOOR_CACHE_KIB=$cache timed "$n: rotate, $schema, cache $((cache / 1024)) MiB" "$FLOOR" rotate "$WORK/f.db" "$PASSCODE"
        done
    done
done
say "bench: results in $OUT"
