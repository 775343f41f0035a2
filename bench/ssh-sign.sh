#!/usr/bin/env bash
# The latency a signature has through vault's SSH agent next to OpenSSH's own, for one ed25519 key
# in three places: /usr/bin/ssh-agent (added with ssh-add), `vault ssh-agent` (added with ssh-add,
# in its memory) and `vault ssh-agent` offering the same key as a vault `ssh-key` item with
# --confirm none (released once by a finger on libfprint's virtual reader, then held until the
# unlock session ends). Two clients, interleaved round by round (bench/tools/ssh_sign.py):
#   proto   N rounds of connect, REQUEST_IDENTITIES, SIGN_REQUEST, close (what ssh does per login)
#   keygen  RUNS runs of `ssh-keygen -Y sign -n git` (what git runs per signed commit)
# and the first signature of the vault key alone (the release: `vault get` and the match).
#
#   bench/ssh-sign.sh        N (default 200), RUNS (default 30)
#
# VAULT_BIN=/path/to/vault measures that binary (vault-ssh-agent and virtual-reader beside it);
# default: the release build of this work tree when there is one, else its debug build (said so).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need ssh-agent:openssh-client python3:python3
N=${N:-200}
RUNS=${RUNS:-30}
if [[ -n ${VAULT_BIN:-} ]]; then VAULT=$VAULT_BIN
elif [[ -x $ROOT/.build/release/vault && -x $ROOT/.build/release/vault-ssh-agent ]]; then VAULT=$ROOT/.build/release/vault
else VAULT=$ROOT/.build/debug/vault; fi
BIN=$(dirname "$VAULT")
[[ -x $VAULT && -x $BIN/vault-ssh-agent && -x $BIN/virtual-reader ]] || die "no $VAULT with vault-ssh-agent and virtual-reader (run swift build, or set VAULT_BIN)"
case $BIN in */debug) build="DEBUG build ($BIN): vault's figures are higher than a release build's" ;; *) build="build $BIN" ;; esac
OUT=$RESULTS/ssh-sign-$(date -u +%Y%m%dT%H%M%SZ).txt

W=$(mktemp -d "${TMPDIR:-/tmp}/vault-bench-ssh.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    VAULT_HOME=$W/home XDG_STATE_HOME=$W/state XDG_RUNTIME_DIR=$W/run "$VAULT" lock --all >/dev/null 2>&1 || true
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/home" "$W/state" "$W/empty"
mkdir -m 700 "$W/run"
export VAULT_HOME=$W/home XDG_STATE_HOME=$W/state XDG_RUNTIME_DIR=$W/run
export FP_DRIVERS_WHITELIST=virtual_device FP_VIRTUAL_DEVICE=$W/reader.sock
unset SSH_AUTH_SOCK SSH_AGENT_PID
printf 'bench-passcode-%s\n' "$RANDOM$RANDOM" > "$W/passcode"
scans() { for _ in $(seq "$1"); do "$BIN/virtual-reader" device --wait 30 "$FP_VIRTUAL_DEVICE" "SCAN bench" >/dev/null 2>&1 || true; done; }

# The vault: a finger enrolled on the virtual reader, a user-scoped unlock session, the key.
scans 5 & sp=$!
"$VAULT" init --kdf-memory 8 --kdf-ops 1 --passcode-fd 3 3<"$W/passcode" >/dev/null 2>"$W/init.err" || { cat "$W/init.err" >&2; die "vault init failed"; }
wait "$sp" || true
"$VAULT" unlock --scope user --timeout 30m --passcode-fd 3 3<"$W/passcode" >/dev/null 2>&1 || die "vault unlock failed"
ssh-keygen -q -N '' -t ed25519 -C bench -f "$W/id" || die "ssh-keygen failed"
"$VAULT" ssh-key import bench "$W/id" --confirm none >/dev/null 2>"$W/import.err" || { cat "$W/import.err" >&2; die "vault ssh-key import failed"; }

# The agents, in the foreground, each on a socket of its own.
/usr/bin/ssh-agent -D -a "$W/openssh.sock" >/dev/null 2>&1 & pids+=($!)
VAULT_HOME=$W/empty "$BIN/vault-ssh-agent" -D -a "$W/vault-mem.sock" >/dev/null 2>&1 & pids+=($!)
"$BIN/vault-ssh-agent" -d -a "$W/vault-key.sock" >/dev/null 2>"$W/vault-key.log" & pids+=($!)
for s in openssh vault-mem vault-key; do
    for _ in $(seq 200); do [[ -S $W/$s.sock ]] && break; sleep 0.025; done
done
SSH_AUTH_SOCK=$W/openssh.sock ssh-add -q "$W/id" 2>/dev/null || die "ssh-add to ssh-agent failed"
SSH_AUTH_SOCK=$W/vault-mem.sock ssh-add -q "$W/id" 2>/dev/null || die "ssh-add to vault ssh-agent failed"
[[ $(SSH_AUTH_SOCK=$W/vault-key.sock ssh-add -L) == "$(cut -d' ' -f1,2 "$W/id.pub") bench" ]] || die "vault ssh-agent does not offer the vault key"

# The vault key's first signature: the release, with one finger.
scans 1 & sp=$!
first=$(python3 "$BENCH_DIR/tools/ssh_sign.py" proto 1 "$W/id.pub" "first=$W/vault-key.sock" | awk '{print $3 " ms"}')
wait "$sp" || true
agents=("ssh-agent (OpenSSH)=$W/openssh.sock" "vault ssh-agent, ssh-add=$W/vault-mem.sock" "vault ssh-agent, vault key=$W/vault-key.sock")
{
    echo "bench/ssh-sign.sh $(date -u +%FT%TZ) on $(nproc) cores (load $(cut -d' ' -f1-3 /proc/loadavg)); $build; $(ssh -V 2>&1)"
    echo "first signature of the vault key (vault get + a virtual-reader match, 1 sample): $first"
    echo "agent protocol (connect, list, sign, close), $N interleaved rounds:"
    python3 "$BENCH_DIR/tools/ssh_sign.py" proto "$N" "$W/id.pub" "${agents[@]}"
    echo "ssh-keygen -Y sign -n git (a process per signature), $RUNS interleaved runs:"
    python3 "$BENCH_DIR/tools/ssh_sign.py" keygen "$RUNS" "$W/id.pub" "${agents[@]}"
} | tee "$OUT"
grep -c "touch the fingerprint reader" "$W/vault-key.log" | sed 's/^/finger prompts during the run: /' | tee -a "$OUT"
say "bench: results in $OUT"
