#!/usr/bin/env bash
# stub_libs.sh BINARY OUT_DIR REGEX
# What-if helper: copies BINARY to OUT_DIR/vault with the shared libraries whose names match REGEX
# (and, through them, everything they pull in) replaced by empty stand-ins: each stand-in has the
# real library's SONAME and symbol versions and defines only the symbols BINARY imports from it,
# as functions that trap. The copy's RUNPATH is OUT_DIR first, then the original RUNPATH.
# The copy loads as if those libraries were opened lazily (dlopen) only when needed; any command
# that really calls into them dies with SIGILL, so a measured command that succeeds never used them.
set -euo pipefail
bin=$1 out=$2 re=$3
mkdir -p "$out"
cp "$bin" "$out/vault"
nm -D --undefined-only "$bin" | awk '{print $2}' >"$out/imports.txt"
while read -r lib path; do
    [[ $lib =~ $re ]] || continue
    nm -D --defined-only "$path" | awk '{print $3}' | sed 's/@.*//' | sort -u >"$out/defined.txt"
    : >"$out/stub.c"
    : >"$out/versions.txt"
    while read -r sym; do
        name=${sym%%@*}
        grep -qxF "$name" "$out/defined.txt" || continue
        printf 'void %s(void) { __builtin_trap(); }\n' "$name" >>"$out/stub.c"
        [[ $sym == *@* ]] && echo "${sym##*@}" >>"$out/versions.txt"
    done <"$out/imports.txt"
    # shellcheck disable=SC2054  # -Wl,a,b is one linker flag
    flags=(-shared -fPIC -O2 -o "$out/$lib" -Wl,-soname,"$lib")
    if [[ -s $out/versions.txt ]]; then
        sort -u "$out/versions.txt" | awk '{printf "%s { global: *; };\n", $1}' >"$out/versions.map"
        # shellcheck disable=SC2054
        flags+=(-Wl,--version-script="$out/versions.map")
    fi
    gcc "${flags[@]}" -x c "$out/stub.c"
done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r l p; do
             readelf -d "$bin" | grep -q "NEEDED.*\[$l\]" && echo "$l $p"; done)
old=$(readelf -d "$bin" | sed -n 's/.*R[UN]*PATH).*\[\(.*\)\]/\1/p' | sed "s|\$ORIGIN|$(dirname "$(readlink -f "$bin")")|g")
patchelf --set-rpath "$out${old:+:$old}" "$out/vault"
rm -f "$out/imports.txt" "$out/defined.txt" "$out/stub.c" "$out/versions.txt" "$out/versions.map"
