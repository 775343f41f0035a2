#!/usr/bin/env bash
# Start-up of `vault get` in a session with libfprint linked into vault (OLD) and with the reader in
# its own process (NEW, vault-reader): perf stat over RUNS runs each, in alternating blocks, plus what
# each binary maps.
#
#   OLD=/path/to/old/vault NEW=.build/release/vault bench/reader-process.sh      RUNS=200 BLOCKS=4
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
RUNS=${RUNS:-200}
BLOCKS=${BLOCKS:-4}
need perf:linux-perf
[[ -x ${OLD:-} && -x ${NEW:-} ]] || die "set OLD and NEW to two vault binaries"
VAULT=$NEW
make_env
new_vault v 100
"$NEW" unlock --vault v --passcode-fd 3 --timeout 3600 3<"$PASSCODE" >/dev/null 2>&1 || die "vault unlock failed"
for b in OLD NEW; do
    bin=${!b}
    [[ $("$bin" get item000050 --vault v --field password --no-input) != "" ]] || die "$b: get failed"
    printf '%s: %s: %d shared objects (ldd), libfprint/glib: %s\n' "$b" "$bin" "$(ldd "$bin" | wc -l)" \
        "$(ldd "$bin" | grep -cE 'libfprint|libglib' || true)"
done
per=$((RUNS / BLOCKS))
for ((i = 0; i < BLOCKS; i++)); do
    for b in OLD NEW; do
        bin=${!b}
        perf stat -r "$per" -x, -e task-clock -o "$WORK/$b.$i" \
            "$bin" get item000050 --vault v --field password --no-input >/dev/null
        wall=$( { TIMEFORMAT=%R; time (for ((j = 0; j < per; j++)); do "$bin" get item000050 --vault v --field password --no-input >/dev/null; done); } 2>&1 )
        printf '%s block %d: task-clock %s ms/run; wall %.2f ms/run (bash time over %d runs)\n' "$b" "$i" \
            "$(awk -F, '/task-clock/{printf "%.2f", $1}' "$WORK/$b.$i")" "$(echo "$wall * 1000 / $per" | bc -l)" "$per"
    done
done
"$NEW" lock --all >/dev/null 2>&1 || true
