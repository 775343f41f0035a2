#!/usr/bin/env bash
# Instructions (valgrind --tool=callgrind, counted, so the figure holds on a loaded machine) of one
# `vault export > /dev/null` with the passcode, for each binary named, on one vault of N logins
# made by the first binary. Each binary's total and the share of `vault --version` (start-up) are
# printed; the difference between two binaries of the same build mode is what their code changed.
#
#   bench/export-instructions.sh BINARY [BINARY...]      N=10000
# Results: bench/results/export-instructions.txt
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-10000}
(($# >= 1)) || die "usage: bench/export-instructions.sh BINARY [BINARY...]"
need valgrind:valgrind python3:python3
VAULT=$1
make_env
new_vault bench "$N"

{
    echo "# export of $N items, instructions per run (callgrind), $(date -u +%FT%TZ)"
    for bin in "$@"; do
        start=$(instructions "$bin" --version)
        total=$(instructions "$bin" export --vault bench --passcode-fd 3)
        printf '%s\texport %s\t--version %s\tper item %s\n' "$bin" "$total" "$start" $(((total - start) / N))
    done
} | tee "$RESULTS/export-instructions.txt"
