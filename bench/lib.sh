# shellcheck shell=bash
# Shared helpers for the benchmarks in bench/ (sourced, not run).
# Everything a benchmark makes lives in a throw-away folder under ${TMPDIR:-/tmp}, removed on exit
# (KEEP=1 keeps it); compiled helpers go to bench/.build, results to bench/results (both ignored).

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
RESULTS=$BENCH_DIR/results
BUILD=$BENCH_DIR/.build
mkdir -p "$RESULTS" "$BUILD"

say() { printf '%s\n' "$*" >&2; }
die() { say "bench: $*"; exit 1; }

# need CHECK:PACKAGE ... -- CHECK is a command name or an absolute path that must exist.
# Installs what is missing with apt-get as root; otherwise prints the command and stops.
need() {
    local missing=() spec check pkg
    for spec in "$@"; do
        check=${spec%%:*} pkg=${spec#*:}
        if [[ $check == /* ]]; then [[ -e $check ]] && continue
        else command -v "$check" >/dev/null 2>&1 && continue; fi
        [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ $(id -u) == 0 ]]; then
        say "bench: installing ${missing[*]}"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
            || die "apt-get install ${missing[*]} failed"
    else
        die "missing packages; run: sudo apt-get install -y ${missing[*]}"
    fi
}

# snapshot_sources: a copy of Package.swift, Sources and Tests in bench/.build/src (file times kept,
# so builds there are incremental). Builds run on the copy: the work tree may be edited while a
# benchmark builds ("input file ... was modified during the build"), and every binary a run
# measures (dynamic, --static-swift-stdlib) then comes from the same sources.
snapshot_sources() {
    SRC=$BUILD/src
    mkdir -p "$SRC"
    rm -rf "$SRC/Sources" "$SRC/Tests"
    cp -a "$ROOT/Package.swift" "$ROOT/Sources" "$ROOT/Tests" "$SRC/"
    [[ -e $ROOT/Package.resolved ]] && cp -a "$ROOT/Package.resolved" "$SRC/"
    export SRC
}

# swift_build SCRATCH [FLAGS...]: builds the vault product of the snapshot, release, into
# bench/.build/SCRATCH; prints the binary's path. A failed build (say, a half-edited file in the
# work tree) falls back to the binary left there by an earlier build, with a warning.
swift_build() {
    local scratch=$BUILD/$1; shift
    [[ -n ${SRC:-} ]] || snapshot_sources
    if (cd "$SRC" && swift build -c release --product vault --scratch-path "$scratch" "$@" >"$scratch.log" 2>&1); then :
    elif [[ -x $scratch/release/vault ]]; then
        say "bench: WARNING: swift build $* failed ($(grep -m1 'error:' "$scratch.log")); measuring the binary of an earlier build"
    else
        say "bench: swift build $* failed; see $scratch.log"
        return 1
    fi
    echo "$scratch/release/vault"
}

# The release binary as the README builds it: $VAULT_BIN if set, else
# `swift build -c release --static-swift-stdlib --product vault` of a snapshot of this tree
# (bench/.build/release-static).
vault_binary() {
    if [[ -n ${VAULT_BIN:-} ]]; then VAULT=$VAULT_BIN; else
        say "bench: swift build -c release --static-swift-stdlib --product vault (snapshot of the work tree in bench/.build/src)"
        VAULT=$(swift_build release-static --static-swift-stdlib) || die "no vault binary"
    fi
    [[ -x $VAULT ]] || die "no vault binary at $VAULT"
    export VAULT
}

# A hello-world built with swiftc -O from the same toolchain (the "bare Swift process").
hello_binary() {
    HELLO=$BUILD/hello
    [[ $HELLO -nt $BENCH_DIR/swift/hello.swift ]] || swiftc -O "$BENCH_DIR/swift/hello.swift" -o "$HELLO" \
        || die "swiftc failed"
    export HELLO
}

# cc NAME SOURCE [FLAGS...]: compiles bench/c/SOURCE into bench/.build/NAME with gcc -O2.
cc_helper() {
    local name=$1 src=$2; shift 2
    gcc -O2 -Wall -o "$BUILD/$name" "$BENCH_DIR/c/$src" "$@" || die "gcc $src failed"
}

# A throw-away vault environment: VAULT_HOME, XDG_STATE_HOME, XDG_RUNTIME_DIR (0700), a passcode file.
make_env() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/vault-bench.XXXXXX")
    mkdir -p "$WORK/home" "$WORK/state"
    mkdir -m 700 "$WORK/run"
    export VAULT_HOME=$WORK/home XDG_STATE_HOME=$WORK/state XDG_RUNTIME_DIR=$WORK/run
    unset VAULT_NAME
    PASSCODE=$WORK/passcode
    printf 'bench-passcode-%s\n' "$RANDOM$RANDOM" > "$PASSCODE"
    export WORK PASSCODE
    trap cleanup EXIT
}

# Ends what this benchmark started: the vault agent serving our socket (found by its exact
# socket path among processes, ended by pid), gpg-agent of our GNUPGHOME; removes WORK.
cleanup() {
    [[ -n ${WORK:-} && -d $WORK ]] || return 0
    "$VAULT" lock --all >/dev/null 2>&1 || true
    local sock="$WORK/run/vault/agent.sock" p
    for p in /proc/[0-9]*; do
        [[ -r $p/cmdline ]] || continue
        if tr '\0' '\n' < "$p/cmdline" 2>/dev/null | grep -qxF -- "$sock"; then kill "${p#/proc/}" 2>/dev/null || true; fi
    done
    if [[ -n ${GNUPGHOME:-} && $GNUPGHOME == "$WORK"/* ]]; then gpgconf --kill gpg-agent >/dev/null 2>&1 || true; fi
    if [[ ${KEEP:-0} == 1 ]]; then say "bench: kept $WORK"; else rm -rf "$WORK"; fi
}

# items_json N FILE: N logins like real ones (name, username, 24-char random password, one URL);
# sealed, each is 227 bytes (211 bytes of JSON + 16-byte tag) -- the record size of the C baselines.
items_json() {
    python3 - "$1" "$2" <<'PY'
import json, secrets, sys
n, path = int(sys.argv[1]), sys.argv[2]
items = [{"name": f"item{i:06d}", "username": f"user{i}@example.com", "password": secrets.token_urlsafe(18),
          "url": f"https://ex{i}.example.com/login"} for i in range(n)]
json.dump(items, open(path, "w"))
PY
}

# new_vault NAME N: init a vault with a cheap KDF (8 MiB, 1 pass) and import N items in one go.
new_vault() {
    local name=$1 n=$2
    "$VAULT" init --vault "$name" --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1 \
        || die "vault init --vault $name failed"
    if ((n > 0)); then
        items_json "$n" "$WORK/items-$n.json"
        local t0=$SECONDS
        "$VAULT" import --vault "$name" --passcode-fd 3 3<"$PASSCODE" <"$WORK/items-$n.json" >/dev/null 2>"$WORK/import.err" \
            || { cat "$WORK/import.err" >&2; die "vault import of $n items failed"; }
        say "bench: vault '$name': imported $n items in $((SECONDS - t0)) s"
    fi
}

# machine_info: one line for the record.
machine_info() {
    printf 'date: %s\nnproc: %s\ncpu: %s\nkernel: %s\nswift: %s\nvault: %s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(nproc)" \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), $(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') MHz$(grep -qw hypervisor /proc/cpuinfo && echo ', virtual machine'))" \
        "$(uname -r)" "$(swift --version 2>&1 | head -1)" "$VAULT, built from $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && [[ -z $(git status --porcelain -- Sources Package.swift 2>/dev/null) ]] || echo ' + uncommitted changes in Sources')"
}

# The instructions (callgrind's Ir total) of one run of BINARY ARGS..., the passcode on fd 3:
# a count that holds on a loaded machine.
instructions() {  # instructions BINARY ARGS...: the Ir total of one run
    local out=$WORK/callgrind.out
    rm -f "$out"
    valgrind --tool=callgrind --callgrind-out-file="$out" "$@" 3<"$PASSCODE" >/dev/null 2>"$WORK/valgrind.err" \
        || { cat "$WORK/valgrind.err" >&2; die "$* failed under valgrind"; }
    awk '/^summary:/ { print $2 }' "$out"
}
