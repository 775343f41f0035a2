#!/usr/bin/env bash
# The concurrency and crash suite (Tests/IntegrationTests/ConcurrencyTests.swift) as a soak: the
# same races as the test suite's 20 rounds, for as many rounds as asked, through the debug build.
#
#   bench/races.sh [ROUNDS] [TEST]     ROUNDS default 200; TEST a test name of ConcurrencyTests
#                                      (writersOverlapping, concurrentEdits, sigkillDuringInit,
#                                      getsThroughASession, twoUnlocksAtOnce; default: all of them)
#   REPEAT=N bench/races.sh ...        the whole run N times (default 1)
#
# Each race prints one line of figures (rounds, time, commands per kind and exit code); they go
# to bench/results/races.txt with the machine's description, the full output to races.log.
# Exit status: 0 when every run passed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-200}
TEST=${2:-}
REPEAT=${REPEAT:-1}
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive number, not '$ROUNDS'"
[[ -z $TEST || $TEST =~ ^[A-Za-z]+$ ]] || die "TEST must be a test name, not '$TEST'"

cd "$ROOT"
say "bench: swift build --build-tests"
swift build --build-tests 2>&1 | grep -E 'error:' && die "the build failed"
VAULT=$ROOT/.build/debug/vault
filter="ConcurrencyTests${TEST:+.$TEST}"

: >"$RESULTS/races.log"
failed=0
{
    machine_info
    echo "ConcurrencyTests, $ROUNDS rounds per race${TEST:+ ($TEST only)}, $REPEAT run(s), debug build, cheap KDF (8 MiB, 1 pass)"
} | tee "$RESULTS/races.txt"
for run in $(seq 1 "$REPEAT"); do
    say "bench: run $run of $REPEAT: VAULT_RACE_ROUNDS=$ROUNDS swift test --skip-build --filter $filter"
    log=$BUILD/races-run.log
    t0=$SECONDS
    if VAULT_RACE_ROUNDS=$ROUNDS swift test --skip-build --filter "$filter" >"$log" 2>&1; then
        outcome=passed
    else
        outcome=FAILED
        failed=1
    fi
    cat "$log" >>"$RESULTS/races.log"
    {
        echo
        echo "run $run: $outcome in $((SECONDS - t0)) s"
        grep -E '^ConcurrencyTests\.' "$log" || true
        [[ $outcome == passed ]] || grep -E '^(✘|↳ (round|run) )' "$log" | head -40
    } | tee -a "$RESULTS/races.txt"
done
say "bench: figures in $RESULTS/races.txt, full output in $RESULTS/races.log"
exit "$failed"
