#!/usr/bin/env bash
# `vault sync` through a local bare repository at N items (issue 26's "seconds at 100,000"):
# the first sync, a clone on a second vault (another machine's copy), a sync of 10 changed items,
# the other copy bringing those 10 in, and a sync with nothing to do. Wall time of each step.
#
#   bench/sync.sh                       N=100000 CHANGES=10
#   VAULT_BIN=.build/debug/vault bench/sync.sh    (measure a given binary, say a debug build)
#
# Results: bench/results/sync.txt (and on stderr).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-100000}
CHANGES=${CHANGES:-10}

need git:git python3:python3
vault_binary
make_env

remote=$WORK/remote.git
git init --quiet --bare "$remote"
new_vault a "$N"

out=$RESULTS/sync.txt
: >"$out"
step() { # step LABEL COMMAND...: runs it, records its wall time in seconds
    local label=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >"$WORK/step.out" 2>"$WORK/step.err" || { cat "$WORK/step.err" >&2; die "$label failed"; }
    t1=$(date +%s.%N)
    printf '%-48s %8.2f s\n' "$label" "$(python3 -c "print($t1 - $t0)")" | tee -a "$out" >&2
}
v() { "$VAULT" "$@" --passcode-fd 3 3<"$PASSCODE"; }

"$VAULT" remote set "$remote" --vault a >/dev/null 2>&1
step "first sync ($N items)" v sync --vault a --no-input
step "clone on a second copy" v clone "$remote" --vault b --no-input
for i in $(seq 1 "$CHANGES"); do
    printf 'changed-%s\n' "$i" | "$VAULT" edit "$(printf 'item%06d' "$i")" --vault a --password-stdin --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1 \
        || die "edit of item $i failed"
done
step "sync of $CHANGES changed items" v sync --vault a --no-input
step "the other copy brings the $CHANGES in" v sync --vault b --no-input
step "sync with nothing to do" v sync --vault a --no-input
got=$("$VAULT" get "item000001" --vault b --field password --passcode-fd 3 --no-input 3<"$PASSCODE")
[[ $got == changed-1 ]] || die "the second copy did not get the change (item000001's password is '$got')"
printf 'remote: %s objects in packs, %s loose\n' \
    "$(git --git-dir="$remote" count-objects -v | awk '/^in-pack/ {print $2}')" \
    "$(git --git-dir="$remote" count-objects -v | awk '/^count/ {print $2}')" | tee -a "$out" >&2
machine_info >>"$out" 2>/dev/null || true
