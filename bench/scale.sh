#!/usr/bin/env bash
# Record format 2 at scale: import, ls, search, get, export and rotate of 10k and 100k items
# (SIZES="10000 100000 1000000" adds a million), without a session (the passcode, cheap KDF
# 8 MiB / 1 pass) and inside an unlock session, with wall time (median of RUNS) and peak memory
# (max RSS of the process, /usr/bin/time), and the agent's resident memory after a listing.
#
#   bench/scale.sh                      SIZES="10000 100000" RUNS=5
#
# Goals (issue 11): in a session at 100k, ls and search <= 0.3 s, get <= 2x a bare Swift process,
# agent RSS <= 40 MB after listing; without a session (KDF aside) ls of 100k <= 0.6 s, import and
# export <= 1.5 s with peak <= 100 MB, rotate <= 1.5 s with peak <= 80 MB; at 1M nothing grows
# faster than linearly. "KDF aside" subtracts the same command on an empty vault (process start,
# one Argon2id run, the unlock). Results: bench/results/scale.{md,txt}.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZES=${SIZES:-"10000 100000"}
RUNS=${RUNS:-5}
need /usr/bin/time:time python3:python3 swiftc:swiftc
vault_binary
hello_binary
make_env
OUT=$RESULTS/scale.txt
: > "$OUT"
machine_info | tee -a "$OUT" >&2

# measure LABEL CMD...: RUNS runs; records the median wall time, the median CPU time (user + system:
# what the process itself cost, steadier than wall time on a loaded machine) and the peak RSS
# (stdout of CMD discarded, stdin from $IN when set, the passcode file on fd 3).
measure() {
    local label=$1; shift
    local times=() cpus=() peak=0 line e u s m
    for ((r = 0; r < RUNS; r++)); do
        /usr/bin/time -o "$WORK/time" -f "%e %U %S %M" "$@" <"${IN:-/dev/null}" 3<"$PASSCODE" >/dev/null 2>"$WORK/err" \
            || { say "bench: $label failed: $(tail -2 "$WORK/err")"; }
        read -r e u s m < <(tail -1 "$WORK/time")
        times+=("$e")
        cpus+=("$(echo "$u + $s" | bc -l)")
        ((m > peak)) && peak=$m
    done
    local median cpu
    median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    cpu=$(printf '%s\n' "${cpus[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.2f", a[int((NR+1)/2)]}')
    printf '%-44s %7s s wall %7s s cpu %8.1f MB\n' "$label" "$median" "$cpu" "$(echo "$peak/1024" | bc -l)" | tee -a "$OUT" >&2
}

# A command on an empty vault: what "KDF aside" subtracts.
"$VAULT" init --vault empty --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1
measure "baseline: ls of an empty vault (passcode)" "$VAULT" ls --vault empty --passcode-fd 3
measure "bare Swift process (hello, swiftc -O)" "$HELLO"

for n in $SIZES; do
    say "bench: --- $n items ---"
    items_json "$n" "$WORK/items-$n.json"
    "$VAULT" init --vault "v$n" --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1
    RUNS_SAVED=$RUNS RUNS=1
    IN=$WORK/items-$n.json measure "$n: import (passcode)" "$VAULT" import --vault "v$n" --passcode-fd 3
    RUNS=$RUNS_SAVED
    measure "$n: ls (passcode)" "$VAULT" ls --vault "v$n" --passcode-fd 3
    measure "$n: search 'ex4242' (passcode)" "$VAULT" search ex4242 --vault "v$n" --passcode-fd 3
    measure "$n: export (passcode)" "$VAULT" export --vault "v$n" --passcode-fd 3
    measure "$n: get --field password (passcode)" "$VAULT" get item000042 --field password --vault "v$n" --passcode-fd 3
    RUNS_SAVED=$RUNS RUNS=$(( RUNS < 3 ? RUNS : 3 ))
    measure "$n: rotate (passcode)" "$VAULT" rotate --vault "v$n" --passcode-fd 3
    RUNS=$RUNS_SAVED
    "$VAULT" unlock --vault "v$n" --timeout 3600 --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1 || die "unlock v$n failed"
    measure "$n: ls (session)" "$VAULT" ls --vault "v$n" --no-input
    measure "$n: search 'ex4242' (session)" "$VAULT" search ex4242 --vault "v$n" --no-input
    measure "$n: get --field password (session)" "$VAULT" get item000042 --field password --vault "v$n" --no-input
    agent=$(pgrep -f -- "--socket $WORK/run/vault/agent.sock" | head -1 || true)
    if [[ -n $agent ]]; then
        printf '%-44s %8s   %8.1f MB\n' "$n: agent RSS after listing" "" "$(awk '/VmRSS/ {print $2/1024}' /proc/"$agent"/status)" | tee -a "$OUT" >&2
        printf '%-44s %8s   %8.1f MB\n' "$n: agent peak RSS (VmHWM)" "" "$(awk '/VmHWM/ {print $2/1024}' /proc/"$agent"/status)" | tee -a "$OUT" >&2
    fi
    "$VAULT" lock --all >/dev/null 2>&1 || true
    # The agent exits idle later; end it now so the next size starts fresh.
    [[ -n ${agent:-} ]] && kill "$agent" 2>/dev/null || true
    rm -f "$WORK/items-$n.json"
done
{ echo '```'; cat "$OUT"; echo '```'; } > "$RESULTS/scale.md"
say "bench: results in $RESULTS/scale.md"
