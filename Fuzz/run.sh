#!/usr/bin/env bash
# Builds one libFuzzer target and runs it over its corpus (docs/fuzzing.md).
#
#   Fuzz/run.sh TARGET [ITERATIONS] [LIBFUZZER-OPTION...]
#
# TARGET is one of: frame handler record git docker import recovery references otpauth foreign secret-service sshagent. ITERATIONS defaults to
# 1000000 (libFuzzer's -runs). The modules are built with -sanitize=fuzzer,address into
# .build-fuzz (the normal build never sees it); the target is the shared logic in
# Tests/*/FuzzSmokeTests.swift plus Fuzz/Targets/TARGET.swift. The seeds in Fuzz/corpus/TARGET
# are read, never written: what libFuzzer learns goes to .build-fuzz/corpus/TARGET, crashes to
# .build-fuzz/artifacts/. Run it niced on a shared machine: nice -n 10 Fuzz/run.sh git.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

targets="frame handler record git docker import recovery references otpauth foreign secret-service sshagent"
usage() {
    echo "usage: Fuzz/run.sh TARGET [ITERATIONS] [LIBFUZZER-OPTION...]" >&2
    echo "targets: $targets" >&2
    exit 2
}
[ $# -ge 1 ] || usage
target=$1
shift
case " $targets " in *" $target "*) ;; *) echo "run.sh: error: unknown target '$target'" >&2; usage ;; esac
runs=1000000
if [ $# -ge 1 ] && [[ $1 =~ ^[0-9]+$ ]]; then runs=$1; shift; fi

scratch=.build-fuzz
build=$scratch/release
mkdir -p "$scratch/logs"
module=VaultAgent
[ "$target" = secret-service ] && module=SecretService
if ! { swift build -c release --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address --target VaultAgent &&
       swift build -c release --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address --target VaultInterchange &&
       swift build -c release --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address --target VaultSSH &&
       swift build -c release --scratch-path "$scratch" -Xswiftc -sanitize=fuzzer,address --target "$module"; } \
        >"$scratch/logs/build.log" 2>&1; then
    grep -E "error:" "$scratch/logs/build.log" >&2 || tail -20 "$scratch/logs/build.log" >&2
    echo "run.sh: error: the module build failed (log: $scratch/logs/build.log)" >&2
    exit 1
fi

extra_maps=() extra_objects=() extra_libs=()
case $target in
frame | handler) logic=Tests/VaultAgentTests/FuzzSmokeTests.swift ;;
secret-service)
    # The D-Bus layer and the service: GLib's GVariant reader and libgcrypt are part of the target.
    logic=Tests/SecretServiceTests/FuzzSmokeTests.swift
    extra_maps=(-Xcc -fmodule-map-file=Sources/CGio/module.modulemap -Xcc -fmodule-map-file=Sources/CGcrypt/module.modulemap
                $(pkg-config --cflags-only-I gio-2.0 | sed 's/-I/-Xcc -I/g'))
    extra_objects=("$build"/VaultDBus.build/*.o "$build"/SecretService.build/*.o)
    extra_libs=($(pkg-config --libs gio-2.0 libgcrypt))
    ;;
sshagent) logic=Tests/VaultSSHTests/FuzzSmokeTests.swift ;;
*) logic=Tests/VaultKitTests/FuzzSmokeTests.swift ;;
esac
binary=$build/fuzz-$target
# The harness sees VaultKit's `package` declarations as the package's own modules do: SwiftPM names
# the package after its folder (lowercased, other characters than letters, digits and _ made _), and so must swiftc here.
package_name=$(basename "$PWD" | tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9_]/_/g')
swiftc -O -sanitize=fuzzer,address -parse-as-library -swift-version 6 -package-name "$package_name" \
    -enable-upcoming-feature ExistentialAny -enable-upcoming-feature InternalImportsByDefault \
    -D VAULT_FUZZ_HARNESS -use-ld=lld -module-name "Fuzz_${target//-/_}" \
    -I "$build/Modules" \
    -Xcc -fmodule-map-file=Sources/CSodium/module.modulemap -Xcc -fmodule-map-file=Sources/CSQLite/module.modulemap \
    -Xcc -fmodule-map-file=Sources/CTSS2/module.modulemap -Xcc -fmodule-map-file=Sources/CArchive/module.modulemap \
    -Xcc -fmodule-map-file=Sources/CXML2/module.modulemap -Xcc -fmodule-map-file=Sources/CCrypto/module.modulemap "${extra_maps[@]}" \
    "Fuzz/Targets/$target.swift" "$logic" \
    "$build"/VaultSystem.build/*.o "$build"/VaultKit.build/*.o "$build"/VaultWire.build/*.o "$build"/VaultAgent.build/*.o "$build"/VaultSync.build/*.o "$build"/VaultInterchange.build/*.o \
    "$build"/VaultSSH.build/*.o "${extra_objects[@]}" $(pkg-config --libs libsodium sqlite3) "${extra_libs[@]}" -o "$binary"

work=$scratch/corpus/$target
artifacts=$scratch/artifacts
logs=$scratch/logs
mkdir -p "$work" "$artifacts" "$logs"
options=(-runs="$runs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1
         -artifact_prefix="$artifacts/$target-")
case $target in
git) options+=(-dict=Fuzz/dict/git.dict) ;;
recovery | secret-service | sshagent) ;;
*) options+=(-dict=Fuzz/dict/json.dict) ;;
esac

# The handler target makes its vault under TMPDIR: a private folder, on tmpfs when there is one.
tmp=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/vault-fuzz.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

log=$logs/$target.log
# libFuzzer reports a trap itself; Swift's backtracer would run under ASan and can hang there.
set +e
SWIFT_BACKTRACE=enable=no TMPDIR=$tmp/ "$binary" "${options[@]}" "$@" "$work" "Fuzz/corpus/$target" 2>&1 | tee "$log" |
    { grep --line-buffered -E "^#[0-9]+[[:space:]]+(INITED|DONE|pulse)|ERROR|Done|stat::|SUMMARY|finding|Fatal error" || true; }
status=${PIPESTATUS[0]}
set -e
summary=$(grep -E "^#[0-9]+[[:space:]]+(DONE|INITED)" "$log" | tail -1 || true)
echo "run.sh: $target: ${summary:-no libFuzzer summary} (log: $log)"
if ls "$artifacts/$target-"* >/dev/null 2>&1; then echo "run.sh: $target: artefacts in $artifacts:" && ls "$artifacts/$target-"*; fi
exit "$status"
