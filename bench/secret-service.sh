#!/usr/bin/env bash
# What the Secret Service's wiping allocator costs: `secret-tool lookup` through two
# `vault secret-service` instances serving the same vault, each on a session bus of its own, one
# with the heap settings the service sets itself (glibc.malloc.perturb, no tcache: every block
# freed is overwritten) and one with them turned off (GLIBC_TUNABLES=glibc.malloc.perturb=0, which
# the service takes as set and leaves alone); interleaved rounds (bench/tools/interleave.py), then
# each service's resident size.
#
#   bench/secret-service.sh            ITEMS=50 ROUNDS=50 VAULT_BIN=.build/debug/vault
#
# VAULT_BIN defaults to the debug build of this tree (vault-secret-service must sit beside it).
# Results: bench/results/secret-service.{txt,json}.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ITEMS=${ITEMS:-50}
ROUNDS=${ROUNDS:-50}
VAULT_BIN=${VAULT_BIN:-$ROOT/.build/debug/vault}

need secret-tool:libsecret-tools dbus-daemon:dbus gdbus:libglib2.0-bin python3:python3
vault_binary
[[ -x $(dirname "$VAULT")/vault-secret-service ]] || die "no vault-secret-service beside $VAULT"
make_env
new_vault default 0
"$VAULT" unlock --scope user --passcode-fd 3 --timeout 3600 3<"$PASSCODE" >/dev/null 2>&1 || die "vault unlock failed"

PIDS=()
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; cleanup; }
trap stop_all EXIT

# start_bus: a session bus of its own; sets BUS (its address).
start_bus() {
    local out
    out=$(dbus-daemon --session --fork --print-address=1 --print-pid=1) || die "dbus-daemon failed"
    BUS=$(sed -n 1p <<<"$out")
    PIDS+=("$(sed -n 2p <<<"$out")")
}

# serve ADDRESS [ENV=VALUE...]: the service on that bus; sets SERVICE_PID.
serve() {
    local address=$1; shift
    env DBUS_SESSION_BUS_ADDRESS="$address" "$@" "$VAULT" secret-service 2>"$WORK/service.$RANDOM.err" &
    SERVICE_PID=$!
    PIDS+=("$SERVICE_PID")
    for _ in $(seq 100); do
        # Asked of the bus, not the name: a call to an unowned name could activate another keyring.
        DBUS_SESSION_BUS_ADDRESS=$address gdbus call --session -d org.freedesktop.DBus -o /org/freedesktop/DBus \
            -m org.freedesktop.DBus.NameHasOwner org.freedesktop.secrets 2>/dev/null | grep -q true && return 0
        sleep 0.1
    done
    die "the service did not answer"
}

start_bus; WIPING_BUS=$BUS
start_bus; PLAIN_BUS=$BUS
serve "$WIPING_BUS"; WIPING_PID=$SERVICE_PID
serve "$PLAIN_BUS" GLIBC_TUNABLES=glibc.malloc.perturb=0; PLAIN_PID=$SERVICE_PID
grep -qa 'glibc.malloc.perturb=165' "/proc/$WIPING_PID/environ" || die "the wiping service runs without its heap settings"
grep -qa 'glibc.malloc.perturb=0' "/proc/$PLAIN_PID/environ" || die "the plain service was not left alone"

t0=$SECONDS
for i in $(seq "$ITEMS"); do
    printf 'perf-Secret-%s-%s' "$i" "$RANDOM$RANDOM" | DBUS_SESSION_BUS_ADDRESS=$WIPING_BUS \
        secret-tool store --label="perf $i" service perf n "$i" || die "secret-tool store failed"
done
say "bench: stored $ITEMS items in $((SECONDS - t0)) s"

n=$(( (ITEMS + 1) / 2 ))
python3 "$BENCH_DIR/tools/interleave.py" --rounds "$ROUNDS" --warmup 5 --json "$RESULTS/secret-service.json" \
    "wiping heap (the service's own settings)" "env DBUS_SESSION_BUS_ADDRESS=$WIPING_BUS secret-tool lookup service perf n $n" \
    "plain heap (GLIBC_TUNABLES=glibc.malloc.perturb=0)" "env DBUS_SESSION_BUS_ADDRESS=$PLAIN_BUS secret-tool lookup service perf n $n" \
    | tee "$RESULTS/secret-service.txt"
for p in "$WIPING_PID:wiping" "$PLAIN_PID:plain"; do
    printf 'resident size, %s heap: %s\n' "${p#*:}" "$(awk '/VmRSS/ {print $2, $3}' "/proc/${p%%:*}/status")"
done | tee -a "$RESULTS/secret-service.txt"
machine_info >>"$RESULTS/secret-service.txt" 2>/dev/null || true
