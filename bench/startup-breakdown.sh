#!/usr/bin/env bash
# Where the time of one `vault get NAME --field password` inside an unlock session goes.
#
#   bench/startup-breakdown.sh           RUNS=200 STATIC=1 PERF=1
#
# 1. Interleaved rounds (tools/interleave.py) of programs that differ by one thing each: an empty C program; the same
#    linked (no code run) against growing subsets of the vault binary's own NEEDED libraries
#    (Swift runtime, + FoundationEssentials, + Foundation/ICU, + SQLite/libsodium, + libfprint and
#    its GLib/GIO/GUsb/NSS stack = every library vault loads); Swift hello-worlds with and
#    without Foundation; `vault version`; `vault get` in a session; and what-ifs: the same binary
#    with the libfprint stack swapped for empty stand-ins (tools/stub_libs.sh), and (STATIC=1) vault
#    built with --static-swift-stdlib into bench/.build/static (Package.swift untouched), with and
#    without that stack. Differences of medians (and of CPU time) give the cost of each layer.
# 2. The agent alone (bench/tools/agent_rtt.py: the three requests a `get` makes, no process start).
# 3. ldd count, LD_DEBUG=statistics, strace -c, perf stat page faults, and (PERF=1) a perf profile
#    of 200 `vault get` runs charged by leaf shared object (bench/tools/perf_leaf.py).
# Called by get-in-session.sh with BREAKDOWN_VAULT/BREAKDOWN_ITEM and its environment; standalone
# it makes its own 1k-item vault. Results: bench/results/startup-breakdown.{json,txt}, agent-rtt.json.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUNS=${RUNS:-200}
STATIC=${STATIC:-1}
PERF=${PERF:-1}

need gcc:gcc strace:strace python3:python3 readelf:binutils patchelf:patchelf \
     /usr/include/sodium.h:libsodium-dev /usr/include/sqlite3.h:libsqlite3-dev
[[ $PERF == 1 ]] && need perf:linux-perf
[[ -n ${VAULT:-} ]] || vault_binary
hello_binary

if [[ -z ${BREAKDOWN_VAULT:-} ]]; then
    make_env
    new_vault v1000 1000
    "$VAULT" unlock --vault v1000 --passcode-fd 3 --timeout 3600 3<"$PASSCODE" >/dev/null 2>&1 || die "vault unlock failed"
    BREAKDOWN_VAULT=v1000 BREAKDOWN_ITEM=item000500
fi
GET="$VAULT get $BREAKDOWN_ITEM --vault $BREAKDOWN_VAULT --field password --no-input"
$GET >/dev/null || die "vault get in session failed"
OUT=$RESULTS/startup-breakdown.txt
: >"$OUT"
log() { printf '%s\n' "$*" | tee -a "$OUT"; }

# --- helper programs -------------------------------------------------------------------------------
swiftc -O "$BENCH_DIR/swift/hello_foundation.swift" -o "$BUILD/hello_foundation" 2>/dev/null || die "swiftc failed"
SWIFTLIB=$(dirname "$(readlink -f "$(command -v swiftc)")")/../lib/swift/linux
[[ -e $SWIFTLIB/libswiftCore.so ]] || SWIFTLIB=$(ldd "$VAULT" | awk '/libswiftCore.so/{print $3}' | xargs dirname)
mapfile -t NEEDED < <(readelf -d "$VAULT" | awk '/NEEDED/{gsub(/[][]/, "", $5); print $5}')
pick() { # pick REGEX... : the NEEDED entries matching any REGEX, as -l: flags
    local lib re
    for lib in "${NEEDED[@]}"; do
        [[ $lib == ld-linux* || $lib == libc.so* ]] && continue
        for re in "$@"; do if [[ $lib =~ $re ]]; then printf -- '-l:%s ' "$lib"; break; fi; done
    done
}
SW='^libswift|^libdispatch|^libBlocksRuntime'
ESS='^libFoundationEssentials'
FND='^libFoundation\.|^libFoundationInternationalization'
DB='^libsqlite3|^libsodium'
FP='^libfprint|^libglib|^libgobject|^libgio|^libgusb|^libgudev'
# shellcheck disable=SC2054  # -Wl,a,b is one linker flag
L=(-Wl,--no-as-needed -L"$SWIFTLIB" -Wl,-rpath,"$SWIFTLIB")
cc_helper c_empty empty.c
# pick prints several -l: flags: split on purpose.
# shellcheck disable=SC2046
{
cc_helper c_swift empty.c "${L[@]}" $(pick "$SW")
cc_helper c_swift_ess empty.c "${L[@]}" $(pick "$SW" "$ESS")
cc_helper c_swift_fnd empty.c "${L[@]}" $(pick "$SW" "$ESS" "$FND")
cc_helper c_swift_fnd_db empty.c "${L[@]}" $(pick "$SW" "$ESS" "$FND" "$DB")
cc_helper c_all empty.c "${L[@]}" $(pick '.')
cc_helper c_fprint_only empty.c "${L[@]}" $(pick "$FP")
cc_helper c_swift_ess_db empty.c "${L[@]}" $(pick "$SW" "$ESS" "$DB")
}
lacking=$(comm -23 <(printf '%s\n' "${NEEDED[@]}" | grep -v -e '^ld-linux' -e '^libc\.so' | sort) <(readelf -d "$BUILD/c_all" | awk '/NEEDED/{gsub(/[][]/, "", $5); print $5}' | sort))
[[ -z $lacking ]] || say "bench: c_all lacks: $lacking"

# What-if binaries (nothing in Sources or Package.swift changes):
#  - the same vault with the libfprint/GLib/GIO stack replaced by empty stand-ins (tools/stub_libs.sh):
#    what `get` would cost if libfprint were opened only by the commands that use a reader;
#  - vault built with --static-swift-stdlib (its own scratch path), with and without that stack.
FPRE='^lib(fprint|glib|gobject|gio)'
GETARGS="get $BREAKDOWN_ITEM --vault $BREAKDOWN_VAULT --field password --no-input"
whatif=()
"$BENCH_DIR/tools/stub_libs.sh" "$VAULT" "$BUILD/nofprint" "$FPRE"
"$BUILD/nofprint/vault" $GETARGS >/dev/null || die "the stubbed binary failed a get (it called libfprint?)"
whatif+=("what-if: vault get in session, libfprint stack not loaded" "$BUILD/nofprint/vault $GETARGS")
if [[ $STATIC == 1 ]]; then
    say "bench: building vault with --static-swift-stdlib into bench/.build/static (same snapshot)"
    if SV=$(swift_build static --static-swift-stdlib); then
        "$BENCH_DIR/tools/stub_libs.sh" "$SV" "$BUILD/static-nofprint" "$FPRE"
        whatif+=("what-if: vault version, --static-swift-stdlib" "$SV version"
                 "what-if: vault get in session, --static-swift-stdlib" "$SV $GETARGS"
                 "what-if: vault version, --static-swift-stdlib, libfprint stack not loaded" "$BUILD/static-nofprint/vault version"
                 "what-if: vault get in session, --static-swift-stdlib, libfprint stack not loaded" "$BUILD/static-nofprint/vault $GETARGS")
    else
        say "bench: no --static-swift-stdlib build; skipping it"
    fi
fi

# --- 1. layers (interleaved rounds: see tools/interleave.py for why not hyperfine here) -------------
say "bench: $RUNS interleaved rounds of $(( ${#whatif[@]} / 2 + 12 )) programs"
python3 "$BENCH_DIR/tools/interleave.py" --rounds "$RUNS" --warmup 20 --json "$RESULTS/startup-breakdown.json" \
    "C: empty" "$BUILD/c_empty" \
    "C: + Swift runtime libs" "$BUILD/c_swift" \
    "C: + FoundationEssentials" "$BUILD/c_swift_ess" \
    "C: + Foundation, FoundationInternationalization (ICU)" "$BUILD/c_swift_fnd" \
    "C: + SQLite, libsodium" "$BUILD/c_swift_fnd_db" \
    "C: + libfprint stack = all of vault's libraries" "$BUILD/c_all" \
    "C: libfprint stack alone" "$BUILD/c_fprint_only" \
    "C: Swift runtime + FoundationEssentials + SQLite + libsodium" "$BUILD/c_swift_ess_db" \
    "Swift: hello" "$HELLO" \
    "Swift: hello + Foundation" "$BUILD/hello_foundation" \
    "vault version" "$VAULT version" \
    "vault get in session" "$GET" \
    "${whatif[@]}" >/dev/null

# --- 2. the agent alone -------------------------------------------------------------------------------
DB_PATH=$VAULT_HOME/$BREAKDOWN_VAULT/vault.db
python3 "$BENCH_DIR/tools/agent_rtt.py" "$XDG_RUNTIME_DIR/vault/agent.sock" "$DB_PATH" "$BREAKDOWN_ITEM" 500 >"$RESULTS/agent-rtt.json"

{ machine_info; echo; } | tee -a "$OUT" >/dev/null
python3 - "$RESULTS/startup-breakdown.json" "$RESULTS/agent-rtt.json" <<'PY' | tee -a "$OUT"
import json, sys
r = json.load(open(sys.argv[1]))
agent = json.load(open(sys.argv[2]))
# Layers are differences of medians over interleaved rounds: a median is not moved by the odd slow
# run another process on this 2-core machine causes. CPU time (user + sys of that child, from
# wait4) is the second view: it does not grow while a process waits for a core.
m = lambda k: r[k]["median_ms"]
c = lambda k: r[k]["cpu_median_ms"]
print(f"each program, {next(iter(r.values()))['rounds']} interleaved rounds (ms): wall median, mean +- sd, CPU median")
for k, x in r.items():
    print(f"  {k:80} {x['median_ms']:6.2f}   {x['mean_ms']:6.2f} +- {x['sd_ms']:4.2f}   CPU {x['cpu_median_ms']:6.2f}")
get, getc = m("vault get in session"), c("vault get in session")
layers = [
    ("exec + libc (empty C program)", None, "C: empty"),
    ("load Swift runtime libs", "C: empty", "C: + Swift runtime libs"),
    ("load FoundationEssentials", "C: + Swift runtime libs", "C: + FoundationEssentials"),
    ("load Foundation + FoundationInternationalization/ICU", "C: + FoundationEssentials", "C: + Foundation, FoundationInternationalization (ICU)"),
    ("load SQLite + libsodium", "C: + Foundation, FoundationInternationalization (ICU)", "C: + SQLite, libsodium"),
    ("load libfprint + GLib/GObject/GIO/GUsb/GUdev/NSS/pixman", "C: + SQLite, libsodium", "C: + libfprint stack = all of vault's libraries"),
    ("vault's own start-up and 'version' (vault version - all libs)", "C: + libfprint stack = all of vault's libraries", "vault version"),
]
rows = [(k, m(b) - (m(a) if a else 0), c(b) - (c(a) if a else 0)) for k, a, b in layers]
a = agent["connect+contains+item+release"]["median_us"] / 1e3
rows += [
    ("agent: connect + contains + item + release (agent_rtt.py)", a, None),
    ("client-side get work (get - version - agent)", get - m("vault version") - a, getc - c("vault version")),
]
print(f"\nbreakdown of 'vault get in session' (differences of medians between the programs above):")
print(f"  {'':66} {'wall, median':>14} {'CPU user+sys':>14}")
for k, v, cpu in rows:
    cs = f"{cpu:6.2f} ms" if cpu is not None else "   (agent)"
    print(f"  {k:66} {v:6.2f} ms {100*v/get:4.0f}%   {cs}")
print(f"  {'total: vault get in session':66} {get:6.2f} ms         {getc:6.2f} ms")
print("  (the agent's time is another process's, so it is in the get's wall time but not its CPU time;")
print("   in the CPU column the last row is all of the get's own work beyond 'vault version')")
print("\nagent alone, per request (us, mean/median):")
for k, v in agent.items():
    print(f"  {k:32} {v['mean_us']:7.1f} / {v['median_us']:7.1f}")
hello = m("Swift: hello")
print("\nwhat-if (medians; the C rows are load cost alone, a lower bound for a vault built that way):")
print(f"  bare Swift hello: {hello:.2f} ms; 3x = {3*hello:.2f} ms")
print(f"  libraries vault loads today (C: all): {m('C: + libfprint stack = all of vault' + chr(39) + 's libraries'):.2f} ms")
print(f"  without libfprint stack (C: Swift+Foundation+SQLite+sodium): {m('C: + SQLite, libsodium'):.2f} ms")
print(f"  ... and FoundationEssentials instead of Foundation: {m('C: Swift runtime + FoundationEssentials + SQLite + libsodium'):.2f} ms")
for k in r:
    if k.startswith("what-if"):
        print(f"  {k[9:]:74} {m(k):6.2f} ms  = {m(k)/hello:4.2f} x hello")
PY

# --- 3. counters ----------------------------------------------------------------------------------------
{
    echo
    echo "shared objects loaded (ldd): vault $(ldd "$VAULT" | grep -c '=>') , Swift hello $(ldd "$HELLO" | grep -c '=>'), libfprint stack alone $(ldd "$BUILD/c_fprint_only" | grep -c '=>')"
    echo "  NEEDED by vault: ${NEEDED[*]}"
    echo
    echo "LD_DEBUG=statistics, vault get in session:"
    LD_DEBUG=statistics $GET 2>&1 >/dev/null | sed 's/^ *[0-9]*: */  /' | grep -v '^ *$'
    echo
    echo "strace -c -f, vault get in session (syscall counts):"
    strace -c -f $GET 2>&1 >/dev/null | awk 'NR<=14 || / total$/'
    echo
    echo "strace -c -f, Swift hello:"
    strace -c -f "$HELLO" 2>&1 >/dev/null | tail -1
} 2>&1 | tee -a "$OUT"
if [[ $PERF == 1 ]] && perf stat -e page-faults true >/dev/null 2>&1; then
    {
        echo
        echo "perf stat (50 runs each): task-clock and page faults"
        for p in "$HELLO" "$BUILD/c_all" "$VAULT version" "$GET"; do
            printf '  %-40s ' "$(basename "${p%% *}") ${p#* }"
            # shellcheck disable=SC2086
            perf stat -r 50 -x, -e task-clock,page-faults $p 2>&1 >/dev/null | awk -F, '{printf "%s %s  ", $1, $3}'
            echo
        done
        echo
        echo "perf record of 200 'vault get in session' runs, charged by the leaf frame's object (ms/run inflated by perf):"
        perf record -q -o "$BUILD/perf.data" -F 20000 -g -- sh -c "for i in \$(seq 200); do $GET >/dev/null; done" >/dev/null 2>&1
        perf script -i "$BUILD/perf.data" -F comm,tid,ip,sym,dso 2>/dev/null \
            | python3 "$BENCH_DIR/tools/perf_leaf.py" vault 200 20000 "$BUILD/perf-get.json"
        perf record -q -o "$BUILD/perf-version.data" -F 20000 -g -- sh -c "for i in \$(seq 200); do $VAULT version >/dev/null; done" >/dev/null 2>&1
        perf script -i "$BUILD/perf-version.data" -F comm,tid,ip,sym,dso 2>/dev/null \
            | python3 "$BENCH_DIR/tools/perf_leaf.py" vault 200 20000 "$BUILD/perf-version.json" >/dev/null
        echo
        echo "what 'get in session' adds to 'vault version', by leaf object (perf, ms/run; the agent's own time is not in it):"
        python3 - "$BUILD/perf-get.json" "$BUILD/perf-version.json" <<'PY'
import json, sys
g, v = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rows = sorted(((g.get(k, 0) - v.get(k, 0), k) for k in set(g) | set(v) if k != "total"), reverse=True)
print(f"  {'':45} {'get':>7} {'version':>8} {'added':>7}")
for d, k in rows[:12]:
    print(f"  {k:45} {g.get(k, 0):7.2f} {v.get(k, 0):8.2f} {d:7.2f}")
print(f"  {'total':45} {g['total']:7.2f} {v['total']:8.2f} {g['total'] - v['total']:7.2f}")
PY
        echo
        echo "the get's own code, inclusive share of all its samples (Swift frames have frame pointers; demangled):"
        perf report -i "$BUILD/perf.data" --comm vault --children --sort sym --stdio -g none 2>/dev/null \
            | grep -E '\$s|swift_dynamicCast|swift_conformsToProtocolMaybe' | head -40 \
            | awk '{ p = $1; $1 = $2 = $3 = ""; sub(/^ +/, ""); print p "\t" $0 }' \
            | while IFS=$'\t' read -r p sym; do printf '  %7s  %s\n' "$p" "$(swift demangle --simplified "$sym" 2>/dev/null | sed 's/.*---> //' | cut -c1-110)"; done
    } 2>&1 | tee -a "$OUT"
else
    log "perf not usable here; skipped perf stat/record"
fi
say "bench: results in $RESULTS/startup-breakdown.{txt,json}, agent-rtt.json"
