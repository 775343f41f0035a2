#!/usr/bin/env bash
# Runs the whole test suite RUNS times in a row (default 3) with a busy loop on every core beside
# it, as on a shared CI machine: a test that depends on timing or on process-wide state shared by
# parallel tests fails here. Usage: ./Vault/test-under-load.sh [RUNS] [swift test options]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
runs="${1:-3}"; shift || true
source "$here/setup.sh"
cd "$here/.."
swift build --build-tests >&2
hogs=()
for _ in $(seq "$(nproc)"); do (while :; do :; done) & hogs+=($!); done
trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
for run in $(seq "$runs"); do
    start=$(date +%s)
    if ! swift test --skip-build "$@"; then
        echo "test-under-load: run $run of $runs failed" >&2
        exit 1
    fi
    echo "test-under-load: run $run of $runs passed in $(( $(date +%s) - start )) s with $(nproc) busy loops beside it" >&2
done
