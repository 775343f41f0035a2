#!/usr/bin/env bash
# What the TPM costs, on swtpm: a passcode unlock with the passcode on the TPM against a plain one
# (same Argon2id cost), and, as root, vault-authd with its secrets sealed against file permissions
# only: one daemon request (`vault fingers`) and a whole fingerprint unlock (`vault ls` with a
# virtual reader's scan). Medians of RUNS (default 20). The TPM calls alone (seal, unseal, in
# process): swift test --filter fiftySealsAndUnsealsInARow prints their medians.
# VAULT_BIN=/path/to/vault measures that binary (vault-authd and virtual-reader beside it);
# default: the debug build of this work tree (swift build first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need swtpm:swtpm swtpm_ioctl:swtpm-tools tpm2_dictionarylockout:tpm2-tools /usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0:libtss2-tcti-swtpm0
RUNS=${RUNS:-20}
VAULT=${VAULT_BIN:-$ROOT/.build/debug/vault}
BIN=$(dirname "$VAULT")
[[ -x $VAULT && -x $BIN/vault-authd && -x $BIN/virtual-reader ]] || die "no $VAULT (run swift build, or set VAULT_BIN)"
W=$(mktemp -d "${TMPDIR:-/tmp}/vault-bench-tpm.XXXXXX")
chmod 755 "$W"
OUT=$RESULTS/tpm-$(date -u +%Y%m%dT%H%M%SZ).txt
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    swtpm_ioctl -s --unix "$W/tpm/s.ctrl" >/dev/null 2>&1 || true
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$W"
}
trap cleanup EXIT

mkdir -m 755 "$W/tpm"
swtpm socket --tpm2 --tpmstate dir="$W/tpm" --server type=unixio,path="$W/tpm/s",mode=0666 \
    --ctrl type=unixio,path="$W/tpm/s.ctrl",mode=0666 --flags not-need-init,startup-clear >/dev/null 2>&1 &
for _ in $(seq 200); do [[ -S $W/tpm/s.ctrl ]] && break; sleep 0.01; done
TCTI="swtpm:path=$W/tpm/s"
TPM2TOOLS_TCTI=$TCTI tpm2_dictionarylockout -s -n 1000 -t 1 -l 1 >/dev/null 2>&1

now() { date +%s%N; }
# median_ms CMD...: runs CMD RUNS times, prints the median wall time in ms.
median_ms() {
    local t=() a b
    for _ in $(seq "$RUNS"); do
        a=$(now); "$@" >/dev/null 2>&1 || die "failed: $*"; b=$(now)
        t+=($(( (b - a) / 1000 )))
    done
    printf '%s\n' "${t[@]}" | sort -n | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.1f", m/1000}'
}

# Results to the terminal and the file; no subshell, so the cleanup sees every daemon started.
exec > >(tee "$OUT")
echo "# bench/tpm.sh $(date -u +%FT%TZ), commit $(git -C "$ROOT" rev-parse --short HEAD), $VAULT, $(swtpm --version | head -1 | grep -o 'version [0-9.]*' | sed 's/version/swtpm/'), RUNS=$RUNS"
echo "# $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The passcode on the TPM (embedded authority, no reader).
H=$W/user; mkdir -m 700 "$H"
export VAULT_HOME=$H/v XDG_STATE_HOME=$H/s HOME=$H VAULT_TPM_TCTI=$TCTI
echo "bench passcode" > "$W/pc"
"$VAULT" init --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$W/pc" >/dev/null 2>&1
plain=$(median_ms sh -c "'$VAULT' ls --passcode-fd 3 3<'$W/pc'")
"$VAULT" settings --passcode-on-tpm on --passcode-fd 3 3<"$W/pc" >/dev/null 2>&1
ontpm=$(median_ms sh -c "'$VAULT' ls --passcode-fd 3 3<'$W/pc'")
echo "vault ls, passcode (Argon2id 8 MiB/1): plain ${plain} ms, on the TPM ${ontpm} ms"
unset VAULT_HOME XDG_STATE_HOME VAULT_TPM_TCTI

# 2. vault-authd with and without the TPM (root: a system user and setpriv).
if [[ $(id -u) != 0 ]]; then
    echo "vault-authd: skipped (needs root: useradd, setpriv)"
    exit 0
fi
id -u vault-auth >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin vault-auth
id -u vault-bench >/dev/null 2>&1 || useradd -m -s /bin/sh vault-bench
UH=$(getent passwd vault-bench | cut -d: -f6)
for mode in none tpm; do
    rm -rf "$UH/.local/share/vault" "$UH/.local/state/vault"
    R=$W/run-$mode S=$W/state-$mode
    install -d -o vault-auth -g vault-auth -m 0755 "$R"; install -d -o vault-auth -g vault-auth -m 0700 "$S"
    arg=none; [[ $mode == tpm ]] && arg=$TCTI
    setpriv --reuid=vault-auth --regid=vault-auth --init-groups --inh-caps=-all env -i PATH=/usr/bin:/bin \
        FP_VIRTUAL_DEVICE="$R/reader.sock" FP_DRIVERS_WHITELIST=virtual_device \
        "$BIN/vault-authd" --socket "$R/socket" --state "$S" --test-mode --tpm "$arg" 2>"$W/authd-$mode.log" &
    pids+=($!)
    for _ in $(seq 300); do [[ -S $R/socket ]] && break; sleep 0.02; done
    as_user() { setpriv --reuid=vault-bench --regid=vault-bench --init-groups env -i HOME="$UH" PATH=/usr/bin:/bin \
        VAULT_AUTHORITY=system VAULT_AUTHD_SOCKET="$R/socket" "$VAULT" "$@"; }
    scans() { for _ in $(seq "$1"); do "$BIN/virtual-reader" device --wait 15 "$R/reader.sock" "SCAN bench" >/dev/null 2>&1 || true; done; }
    chmod 644 "$W/pc"
    scans 5 & as_user init --kdf-memory 8 --kdf-ops 1 --passcode-fd 3 3<"$W/pc" >/dev/null 2>&1; wait $!
    as_user ls --passcode-fd 3 3<"$W/pc" >/dev/null 2>&1
    export -f as_user scans; export R UH VAULT BIN W
    one=$(median_ms bash -c 'as_user fingers')
    unlock=$(median_ms bash -c 'scans 1 & as_user ls --no-input; s=$?; wait; exit $s')
    echo "vault-authd secrets $mode: vault fingers (one request) ${one} ms, fingerprint unlock (vault ls, one scan) ${unlock} ms"
    kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
done
say "bench: results in $OUT"
