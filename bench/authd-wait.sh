#!/usr/bin/env bash
# What a request through vault-authd waits for beyond the work it does: a passcode `get` of an
# ordinary user whose vault is bound to the system authority, RUNS times (default 40); for each
# run the wall time and the CPU time (user + system of vault, from wait4) are taken, and the
# medians of both and of their difference are printed. Before the shared FrameServer the
# connection's thread picked up each answer on a 10 ms tick; the goal (issue 27) is
# wall <= CPU + 2 ms. Needs root (useradd, setpriv), like bench/tpm.sh.
# VAULT_BIN=/path/to/vault measures that binary (vault-authd beside it); default the debug build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $(id -u) == 0 ]] || die "needs root (a system user for vault-authd, setpriv)"
RUNS=${RUNS:-40}
VAULT=${VAULT_BIN:-$ROOT/.build/debug/vault}
BIN=$(dirname "$VAULT")
[[ -x $VAULT && -x $BIN/vault-authd ]] || die "no $VAULT (run swift build, or set VAULT_BIN)"
W=$(mktemp -d "${TMPDIR:-/tmp}/vault-bench-authd.XXXXXX")
chmod 755 "$W"
OUT=$RESULTS/authd-wait-$(date -u +%Y%m%dT%H%M%SZ).txt
daemon=
cleanup() {
    [[ -n $daemon ]] && kill "$daemon" 2>/dev/null || true
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$W"
}
trap cleanup EXIT

id -u vault-auth >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin vault-auth
id -u vault-bench >/dev/null 2>&1 || useradd -m -s /bin/sh vault-bench
UH=$(getent passwd vault-bench | cut -d: -f6)
rm -rf "$UH/.local/share/vault" "$UH/.local/state/vault"
R=$W/run S=$W/state
install -d -o vault-auth -g vault-auth -m 0755 "$R"
install -d -o vault-auth -g vault-auth -m 0700 "$S"
setpriv --reuid=vault-auth --regid=vault-auth --init-groups --inh-caps=-all env -i PATH=/usr/bin:/bin \
    "$BIN/vault-authd" --socket "$R/socket" --state "$S" --test-mode --tpm none 2>"$W/authd.log" &
daemon=$!
for _ in $(seq 300); do [[ -S $R/socket ]] && break; sleep 0.02; done
[[ -S $R/socket ]] || die "vault-authd did not start: $(cat "$W/authd.log")"
echo "bench passcode" > "$W/pc"
chmod 644 "$W/pc"
as_user=(setpriv --reuid=vault-bench --regid=vault-bench --init-groups env -i HOME="$UH" PATH=/usr/bin:/bin
         VAULT_AUTHORITY=system VAULT_AUTHD_SOCKET="$R/socket" "$VAULT")
"${as_user[@]}" init --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$W/pc" >/dev/null 2>&1 || die "init failed"
"${as_user[@]}" add bench-item --username u --password-stdin --passcode-fd 3 3<"$W/pc" <<<"s3cret" >/dev/null 2>&1 || die "add failed"

exec > >(tee "$OUT")
echo "# bench/authd-wait.sh $(date -u +%FT%TZ), commit $(git -C "$ROOT" rev-parse --short HEAD), $VAULT, RUNS=$RUNS"
echo "# $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# The same get with the embedded authority (no daemon) of a second vault, for what is not the daemon's.
embedded=(setpriv --reuid=vault-bench --regid=vault-bench --init-groups env -i HOME="$UH" PATH=/usr/bin:/bin
          VAULT_HOME="$UH/.local/share/vault-embedded" XDG_STATE_HOME="$UH/.local/state/vault-embedded" "$VAULT")
rm -rf "$UH/.local/share/vault-embedded" "$UH/.local/state/vault-embedded"
"${embedded[@]}" init --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$W/pc" >/dev/null 2>&1 || die "init failed"
"${embedded[@]}" add bench-item --username u --password-stdin --passcode-fd 3 3<"$W/pc" <<<"s3cret" >/dev/null 2>&1 || die "add failed"
measure() {
/usr/bin/python3 - "$@" <<'EOF'
import os, sys, time, statistics
label, runs, pc, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
wall, cpu = [], []
for _ in range(runs):
    fd = os.open(pc, os.O_RDONLY)
    null = os.open(os.devnull, os.O_WRONLY)
    err = os.open(pc + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    t = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.dup2(fd, 3); os.set_inheritable(3, True); os.dup2(null, 1); os.dup2(err, 2)
        os.execvp(argv[0], argv)
    _, status, ru = os.wait4(pid, 0)
    wall.append((time.monotonic() - t) * 1000)
    cpu.append((ru.ru_utime + ru.ru_stime) * 1000)
    os.close(fd); os.close(null); os.close(err)
    if status != 0:
        sys.exit(f"bench: the get failed (exit {os.waitstatus_to_exitcode(status)}): {open(pc + '.err').read().strip()}")
waits = [w - c for w, c in zip(wall, cpu)]
print(f"passcode get, {label}: wall {statistics.median(wall):.1f} ms, CPU {statistics.median(cpu):.1f} ms, "
      f"wall - CPU {statistics.median(waits):.1f} ms (medians of {runs}; goal wall <= CPU + 2 ms)")
EOF
}
measure "through vault-authd" "$RUNS" "$W/pc" "${as_user[@]}" get bench-item --field password --passcode-fd 3
measure "embedded authority" "$RUNS" "$W/pc" "${embedded[@]}" get bench-item --field password --passcode-fd 3
rm -rf "$UH/.local/share/vault-embedded" "$UH/.local/state/vault-embedded"
say "bench: results in $OUT"
