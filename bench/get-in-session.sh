#!/usr/bin/env bash
# `vault get NAME --field password` inside an unlock session, whole-process time, in one hyperfine
# run next to (a) a bare Swift hello-world (swiftc -O, same toolchain) and (b) `pass show NAME`
# with a warm gpg-agent, at 1k, 10k and 100k items.
#
#   bench/get-in-session.sh            SIZES="1000 10000 100000" RUNS=200 WARMUP=20 BREAKDOWN=auto
#
# Goal (issue): within about 3x the bare Swift process, and flat from 1k to 100k items.
# BREAKDOWN=auto runs bench/startup-breakdown.sh when vault is above 3x (always|never also work).
# Results: bench/results/get-in-session.{md,json,txt}.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZES=${SIZES:-"1000 10000 100000"}
RUNS=${RUNS:-200}
WARMUP=${WARMUP:-20}
BREAKDOWN=${BREAKDOWN:-auto}

need hyperfine:hyperfine pass:pass gpg:gnupg gpgconf:gnupg python3:python3 swiftc:swiftc
command -v swiftc >/dev/null || die "the Swift toolchain is needed"
vault_binary
hello_binary
make_env

# --- vaults: one per size, each with an open unlock session ---------------------------------------
for n in $SIZES; do
    new_vault "v$n" "$n"
    "$VAULT" unlock --vault "v$n" --passcode-fd 3 --timeout 3600 3<"$PASSCODE" >/dev/null 2>&1 || die "vault unlock --vault v$n failed"
done

# --- pass: a throw-away GNUPGHOME with a passphrase-less ed25519/cv25519 key ----------------------
export GNUPGHOME=$WORK/gnupg PASSWORD_STORE_DIR=$WORK/pass
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
    --quick-gen-key 'vault bench <bench@example.invalid>' future-default default never 2>/dev/null
KEY=$(gpg --batch --with-colons --list-keys | awk -F: '/^fpr/{print $10; exit}')
pass init "$KEY" >/dev/null 2>&1
# One store, one folder per size (pass show reads only the file it is given, so the folder holding
# n entries is what changes between sizes). Each entry is encrypted separately, as `pass insert`
# would, but by one gpg process (--encrypt-files) instead of one per entry.
for n in $SIZES; do
    t0=$SECONDS
    d=$PASSWORD_STORE_DIR/s$n
    mkdir -p "$d"
    python3 - "$n" "$d" <<'PY'
import os, secrets, sys
n, d = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    with open(f"{d}/item{i:06d}", "w") as f:
        f.write(f"{secrets.token_urlsafe(18)}\nusername: user{i}@example.com\nurl: https://ex{i}.example.com/login\n")
PY
    (cd "$d" && find . -maxdepth 1 -type f ! -name '*.gpg' -printf '%f\n' \
        | gpg --batch --quiet --yes --trust-model always -r "$KEY" --encrypt-files 2>/dev/null \
        && find . -maxdepth 1 -type f ! -name '*.gpg' -delete)
    say "bench: pass store s$n: $(find "$d" -name '*.gpg' | wc -l) entries in $((SECONDS - t0)) s"
done

# --- one hyperfine run: bare Swift, pass at each size, vault at each size -------------------------
cmds=(-n "bare Swift (hello, swiftc -O)" "$HELLO")
for n in $SIZES; do
    name=$(printf 'item%06d' $((n / 2)))
    pass show "s$n/$name" >/dev/null                    # warm gpg-agent (and check it answers)
    "$VAULT" get "$name" --vault "v$n" --field password --no-input >/dev/null || die "vault get in session v$n failed"
    cmds+=(-n "pass show ($n items)" "pass show s$n/$name")
done
for n in $SIZES; do
    name=$(printf 'item%06d' $((n / 2)))
    cmds+=(-n "vault get in session ($n items)" "$VAULT get $name --vault v$n --field password --no-input")
done
say "bench: hyperfine, $RUNS runs each after $WARMUP warm-ups"
hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" \
    --export-json "$RESULTS/get-in-session.json" --export-markdown "$RESULTS/get-in-session.md" \
    "${cmds[@]}" >"$RESULTS/get-in-session.hyperfine.txt" 2>&1 || { cat "$RESULTS/get-in-session.hyperfine.txt"; die "hyperfine failed"; }

# --- cross-check: the same commands in interleaved rounds (tools/interleave.py) --------------------
# hyperfine runs one command's runs back to back; on a shared machine a busy spell then lands on
# one command only. Interleaving spreads it over all of them; the ratios below should agree.
pairs=()
for ((i = 0; i < ${#cmds[@]}; i += 3)); do pairs+=("${cmds[i+1]}" "${cmds[i+2]}"); done
say "bench: interleaved cross-check, $((RUNS / 2)) rounds"
python3 "$BENCH_DIR/tools/interleave.py" --rounds $((RUNS / 2)) --warmup 10 --json "$RESULTS/get-in-session.interleaved.json" \
    "${pairs[@]}" >/dev/null

# --- summary --------------------------------------------------------------------------------------
{
    machine_info
    echo "runs: $RUNS each after $WARMUP warm-ups, one hyperfine run (-N, no shell)"
    echo
    python3 - "$RESULTS/get-in-session.json" "$RESULTS/get-in-session.interleaved.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))["results"]
il = json.load(open(sys.argv[2]))
by = {x["command"]: x for x in r}
base = r[0]
def ms(x): return f"{x['mean']*1e3:6.2f} +- {x['stddev']*1e3:4.2f} ms"
def ratio(a, b):
    q = a["mean"] / b["mean"]
    return q, q * math.hypot(a["stddev"] / a["mean"], b["stddev"] / b["mean"])
print(f"{'command':38} {'mean +- sd':>18}   {'median':>7}   {'x bare Swift':>13}   {'CPU user+sys':>12}")
for x in r:
    q, e = ratio(x, base)
    print(f"{x['command']:38} {ms(x)}   {x['median']*1e3:5.2f} ms   {q:5.2f} +- {e:4.2f}   {(x['user']+x['system'])*1e3:6.2f} ms")
vault = [x for x in r if x["command"].startswith("vault")]
passes = [x for x in r if x["command"].startswith("pass")]
print()
for v, p in zip(vault, passes):
    q, e = ratio(v, p)
    print(f"{v['command']}: {q:.2f} +- {e:.2f} x pass show")
if len(vault) > 1:
    q, e = ratio(vault[-1], vault[0])
    print(f"vault, largest / smallest vault: {q:.3f} +- {e:.3f}")
worst = max(ratio(v, base)[0] for v in vault)
print(f"\nworst vault / bare Swift (hyperfine means): {worst:.2f} (goal: about 3 or less)")
names = list(il)
b = il[names[0]]
print(f"\ncross-check, {b['rounds']} interleaved rounds: wall median, x bare Swift; CPU (user+sys) median, x bare Swift")
for n in names:
    o = il[n]
    print(f"  {n:38} {o['median_ms']:6.2f} ms  {o['median_ms']/b['median_ms']:5.2f}x    CPU {o['cpu_median_ms']:6.2f} ms  {o['cpu_median_ms']/b['cpu_median_ms']:5.2f}x")
open(sys.argv[1] + ".worst", "w").write(f"{worst}\n")
PY
} | tee "$RESULTS/get-in-session.txt"

worst=$(cat "$RESULTS/get-in-session.json.worst"); rm -f "$RESULTS/get-in-session.json.worst"
if [[ $BREAKDOWN == always ]] || { [[ $BREAKDOWN == auto ]] && python3 -c "import sys; sys.exit(0 if $worst > 3 else 1)"; }; then
    n=${SIZES%% *}
    say "bench: above 3x: profiling where the time goes (bench/startup-breakdown.sh)"
    BREAKDOWN_VAULT="v$n" BREAKDOWN_ITEM=$(printf 'item%06d' $((n / 2))) "$BENCH_DIR/startup-breakdown.sh"
fi
