#!/usr/bin/env bash
# Instructions (valgrind --tool=callgrind, counted, so the figure holds on a loaded machine) of the
# commands that read every item row, with the passcode, for each binary named: `ls`, `ls --json`,
# `search`, `export` and `rotate`, on one vault of N logins made by the first binary, and of
# `--version` (start-up) and `rotate` of an empty vault. Per item: (command − --version) / N, and
# for rotate (rotate of N − rotate of 0) / N. Each binary rotates the same vault once (the rows
# stay as many and as large).
#
#   bench/rows-instructions.sh BINARY [BINARY...]      N=10000 TERM_=ex1 OPS="ls ls-json search export rotate"
# Results: bench/results/rows-instructions.txt
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-10000}
TERM_=${TERM_:-ex1}
OPS=${OPS:-ls ls-json search export rotate}
(($# >= 1)) || die "usage: bench/rows-instructions.sh BINARY [BINARY...]"
need valgrind:valgrind python3:python3
VAULT=$1
make_env
new_vault bench "$N"
new_vault empty 0

{
    echo "# $N items, instructions per run (callgrind), per item after start-up, $(date -u +%FT%TZ)"
    for bin in "$@"; do
        start=$(instructions "$bin" --version)
        line="$bin	--version $start"
        for op in $OPS; do
            case $op in
                ls) total=$(instructions "$bin" ls --vault bench --passcode-fd 3) ;;
                ls-json) total=$(instructions "$bin" ls --json --vault bench --passcode-fd 3) ;;
                search) total=$(instructions "$bin" search "$TERM_" --vault bench --passcode-fd 3) ;;
                export) total=$(instructions "$bin" export --vault bench --passcode-fd 3) ;;
                rotate)
                    base=$(instructions "$bin" rotate --vault empty --passcode-fd 3)
                    total=$(instructions "$bin" rotate --vault bench --passcode-fd 3)
                    line+="	rotate-0 $base	rotate $total per item $(((total - base) / N))"
                    continue ;;
                *) die "unknown op $op" ;;
            esac
            line+="	$op $total per item $(((total - start) / N))"
        done
        printf '%s\n' "$line"
    done
} | tee "$RESULTS/rows-instructions.txt"
