#!/usr/bin/env bash
# vault against the machine's floor (issue 27): every ratio of the issue's table next to its goal,
# in one run of paired medians of interleaved runs, with the start-up's relocations and page faults.
#
#   bench/floor.sh                      N=100000 ROUNDS=200 LONG_ROUNDS=5 AGENT_N=$N
#
# Builds (release, --static-swift-stdlib, every product: the agent is measured too) a snapshot of
# the work tree, a static Swift hello-world, and bench/c/floor.c (vault's schema, pragmas, record
# encoding and associated data in C over libsodium and SQLite: the least a program can do for each
# command). Then bench/tools/floor_table.py makes a vault and a floor database of the same N logins
# and times both sides in interleaved rounds. AGENT_N=1000000 adds the agent's memory after
# listing a million items (about 1 min more). VAULT_DIR=folder measures the vault, vault-agent and
# vault-reader binaries there instead of building. Results: bench/results/floor.{md,json}.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need python3:python3 swiftc:swiftc gcc:gcc /usr/include/sodium.h:libsodium-dev /usr/include/sqlite3.h:libsqlite3-dev sqlite3:sqlite3
if [[ -n ${VAULT_DIR:-} ]]; then
    VAULT=$VAULT_DIR/vault
else
    say "bench: swift build -c release --static-swift-stdlib (snapshot of the work tree in bench/.build/src)"
    snapshot_sources
    (cd "$SRC" && swift build -c release --static-swift-stdlib --scratch-path "$BUILD/release-static" >"$BUILD/release-static.log" 2>&1) \
        || die "swift build failed; see $BUILD/release-static.log"
    VAULT=$BUILD/release-static/release/vault
fi
[[ -x $VAULT ]] || die "no vault binary at $VAULT"
export VAULT
HELLO=$BUILD/hello-static
[[ $HELLO -nt $BENCH_DIR/swift/hello.swift ]] || swiftc -O -static-stdlib "$BENCH_DIR/swift/hello.swift" -o "$HELLO" || die "swiftc failed"
FLOOR=$BUILD/floor
[[ $FLOOR -nt $BENCH_DIR/c/floor.c ]] || cc_helper floor floor.c -lsodium -lsqlite3
export HELLO FLOOR
make_env
OUT=$RESULTS/floor.md
{
    machine_info
    echo
    JSON=$RESULTS/floor.json python3 "$BENCH_DIR/tools/floor_table.py"
} | tee "$OUT"
say "bench: results in $OUT and $RESULTS/floor.json"
