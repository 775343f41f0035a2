#!/usr/bin/env bash
# Builds the Debian packages of vault from a stripped release build (the binaries install.sh
# installs, laid out the Debian way) with dpkg-shlibdeps, dpkg-gencontrol and dpkg-deb:
# vault_VERSION_amd64.deb, and vault-fprintd_VERSION_all.deb (the daemon's fprintd backend).
# No root needed. install.sh stays for other distributions.
#
#   ./Vault/package.sh [--from DIR] [--version V] [--output DIR] [--lintian]
#
#   --from DIR     package the binaries found in DIR instead of a release build (the tests package the
#                  debug build this way: its Swift runtime is the toolchain's, so that package only
#                  runs where the toolchain is, and Depends: names only the Debian libraries)
#   --version V    the Debian version (default: what `vault --version` prints, revision -1)
#   --output DIR   where the two .deb go (default: the current folder)
#   --lintian      run lintian on the packages; any error (E:) fails
#
# Layout: /usr/bin (vault, its helpers vault-agent, vault-ssh-agent, vault-reader and
# vault-clipboard beside it, where vault looks for them, vault-authd, the credential-helper links),
# /usr/lib/systemd/system and /user, /usr/lib/sysusers.d, /usr/lib/udev/rules.d,
# /usr/share/polkit-1/rules.d, vault(1), vault-authd(8), the bash, zsh and fish completions,
# /usr/share/doc/vault. vault-fprintd: the unit's drop-in in
# /usr/lib/systemd/system/vault-authd.service.d. The maintainer scripts are in Vault/debian/.
set -euo pipefail
umask 022
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

usage() { sed -n '7,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "vault package: error: $1" >&2; [ -z "${2:-}" ] || echo "vault package: hint: $2" >&2; exit 1; }
from="" version="" output="." lintian=0
while (($#)); do
  case $1 in
    --from|--version|--output)
      (($# > 1)) || { echo "vault package: error: $1 needs a value" >&2; exit 2; }
      case $1 in --from) from=$2 ;; --version) version=$2 ;; --output) output=$2 ;; esac; shift ;;
    --from=*) from=${1#--from=} ;;
    --version=*) version=${1#--version=} ;;
    --output=*) output=${1#--output=} ;;
    --lintian) lintian=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "vault package: error: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
say() { printf 'vault package: %s\n' "$*"; }

for tool in dpkg-deb dpkg-shlibdeps dpkg-gencontrol strip gzip; do
  command -v "$tool" >/dev/null || die "no $tool on PATH" "sudo apt-get install dpkg-dev binutils"
done
output=$(mkdir -p "$output" && cd "$output" && pwd) || die "cannot write to $output"

helpers=(vault-agent vault-ssh-agent vault-reader vault-clipboard)
binaries=(vault "${helpers[@]}" vault-authd)

# 1. The binaries: a release build with Swift's runtime linked in, as install.sh builds them.
if [ -n "$from" ]; then
  bin=$(cd "$from" 2>/dev/null && pwd) || die "no folder $from"
else
  command -v swift >/dev/null || die "the Swift toolchain is not on PATH" "build first and pass --from .build/release"
  build=(swift build -c release --static-swift-stdlib)
  say "building: ${build[*]} (the log: .build/package-build.log)"
  mkdir -p "$root/.build"
  (cd "$root" && "${build[@]}" >"$root/.build/package-build.log" 2>&1) ||
    { tail -n 40 "$root/.build/package-build.log" >&2; die "the release build failed (.build/package-build.log)"; }
  bin=$(cd "$root" && "${build[@]}" --show-bin-path)
fi
for b in "${binaries[@]}"; do
  [ -x "$bin/$b" ] || die "no $b in $bin"
done

# 2. The version, from the one place it is written: what `vault --version` prints.
upstream=$("$bin/vault" --version | sed -n 's/^vault \([0-9][0-9A-Za-z.+~]*\)$/\1/p')
[ -n "$upstream" ] || die "'$bin/vault --version' printed no version"
version=${version:-$upstream-1}
[[ $version =~ ^[0-9][0-9A-Za-z.+~]*-[0-9A-Za-z.+~]+$ ]] || die "'$version' is not a Debian version UPSTREAM-REVISION" "for example $upstream-1"
deb="$output/vault_${version}_amd64.deb"
fprintd_deb="$output/vault-fprintd_${version}_all.deb"

# The package is assembled in a scratch folder laid out as dpkg-dev expects it: debian/control,
# debian/changelog, and the package's files under debian/vault.
work=$(mktemp -d "${TMPDIR:-/tmp}/vault-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
pkg="$work/debian/vault"
mkdir -p "$pkg/DEBIAN" "$work/debian/vault-fprintd/DEBIAN"
cp "$here/debian/control" "$work/debian/control"
# Reproducible: every date (the changelog's, the files' mtimes through dpkg-deb) is the last
# commit's, when there is one.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
maintainer=$(sed -n 's/^Maintainer: //p' "$here/debian/control")
{
  printf 'vault (%s) unstable; urgency=medium\n\n' "$version"
  printf '  * vault %s, packaged by Vault/package.sh.\n\n' "$upstream"
  printf ' -- %s  %s\n' "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} > "$work/debian/changelog"

# 3. The files, each with the mode Debian gives it.
# put MODE SOURCE TARGET: installs SOURCE as $pkg/TARGET.
put() { install -D -m "$1" "$2" "$pkg/$3"; }
# Stripped as dh_strip strips executables: the symbols are a quarter of each binary (docs/performance.md).
for b in "${binaries[@]}"; do
  put 0755 "$bin/$b" "usr/bin/$b"
  strip --remove-section=.comment --remove-section=.note "$pkg/usr/bin/$b"
done
for helper in git-credential-vault docker-credential-vault; do
  ln -s vault "$pkg/usr/bin/$helper"
done
# Units, with ExecStart in /usr/bin; the agent's documentation is the manual page.
# unit SOURCE TARGET
unit() {
  install -d "$(dirname "$pkg/$2")"
  sed -e 's#/usr/local/bin/#/usr/bin/#g' -e 's#^Documentation=file://%h/.*#Documentation=man:vault(1)#' \
      -e 's#^Description=vault key authority.*#&\nDocumentation=man:vault-authd(8) man:vault(1)#' "$1" > "$pkg/$2"
  chmod 0644 "$pkg/$2"
}
unit "$here/vault-authd.service" usr/lib/systemd/system/vault-authd.service
unit "$here/vault-agent.service" usr/lib/systemd/user/vault-agent.service
unit "$here/vault-ssh-agent.service" usr/lib/systemd/user/vault-ssh-agent.service
put 0644 "$here/vault-auth.sysusers" usr/lib/sysusers.d/vault-auth.conf
put 0644 "$here/70-vault-auth.rules" usr/lib/udev/rules.d/70-vault-auth.rules
put 0644 "$here/50-vault-auth-fprintd.rules" usr/share/polkit-1/rules.d/50-vault-auth-fprintd.rules
# The manual page and the completions, from the binary's command table.
# generated TARGET ARGS...: `vault ARGS` as TARGET.
generated() {
  local target=$1; shift
  install -d "$(dirname "$pkg/$target")"
  "$bin/vault" "$@" > "$pkg/$target"
  chmod 0644 "$pkg/$target"
}
generated usr/share/man/man1/vault.1 manpage
# vault-authd(8), an administrator's page: its --help (options, environment, limits) as roff.
install -d "$pkg/usr/share/man/man8"
{
  printf '.\\" vault-authd(8), generated by Vault/package.sh from vault-authd --help\n'
  printf '.TH VAULT\\-AUTHD 8 "" "vault %s" "System Administration"\n' "$upstream"
  printf '.SH NAME\nvault\\-authd \\- the system key authority of vault\n'
  printf '.SH DESCRIPTION\n.nf\n'
  "$bin/vault-authd" --help | sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^[.']/\\\\\&&/"
  printf '.fi\n.SH FILES\n.TP\n/usr/lib/systemd/system/vault\\-authd.service\nthe unit, as the system user vault\\-auth\n'
  printf '.TP\n/var/lib/vault\\-auth\nthe state of every user (removed when the package is purged)\n'
  printf '.TP\n/run/vault\\-auth/socket\nthe socket vault connects to\n'
  printf '.SH SEE ALSO\n\\fBvault\\fR(1), \\fBsystemd.exec\\fR(5)\n'
} > "$pkg/usr/share/man/man8/vault-authd.8"
chmod 0644 "$pkg/usr/share/man/man8/vault-authd.8"
gzip -9n "$pkg/usr/share/man/man1/vault.1" "$pkg/usr/share/man/man8/vault-authd.8"
generated usr/share/bash-completion/completions/vault completion bash
generated usr/share/zsh/vendor-completions/_vault completion zsh
generated usr/share/fish/vendor_completions.d/vault.fish completion fish
put 0644 "$here/debian/copyright" usr/share/doc/vault/copyright
install -d "$pkg/usr/share/doc/vault"
gzip -9n -c "$work/debian/changelog" > "$pkg/usr/share/doc/vault/changelog.Debian.gz"
chmod 0644 "$pkg/usr/share/doc/vault/changelog.Debian.gz"
put 0644 "$here/debian/vault.lintian-overrides" usr/share/lintian/overrides/vault
for script in postinst prerm postrm; do
  install -m 0755 "$here/debian/$script" "$pkg/DEBIAN/$script"
done

# 4. Depends: from the shared libraries the binaries link (dpkg-shlibdeps), and the libraries vault
# opens with dlopen, which no ELF header names (Sources/C*/shim.h): those every command needs are
# Depends, those of one feature Recommends (libarchive, libxml2: imports; libcrypto: the SSH agent's
# RSA, ECDSA and DSA keys; tpm2-tss: a TPM).
dlopen_depends=(libsqlite3.so.0 libnettle.so.8)
dlopen_recommends=(libarchive.so.13 libxml2.so.2 libcrypto.so.3 libtss2-esys.so.0 libtss2-tctildr.so.0 libtss2-mu.so.0 libtss2-rc.so.0)
# packages SONAME...: the Debian packages that hold these libraries here, comma-separated.
packages() {
  local soname path owner list=()
  for soname in "$@"; do
    path=$(/sbin/ldconfig -p | awk -v s="$soname" '$1 == s && /x86-64/ {print $NF; exit}')
    [ -n "$path" ] || die "$soname is not installed here" "./Vault/setup.sh installs what vault builds with"
    owner=$(dpkg-query -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1) ||
      die "no Debian package holds $path"
    [ -n "$owner" ] || die "no Debian package holds $path"
    list+=("$owner")
  done
  local IFS=,
  printf '%s' "${list[*]}" | sed 's/,/, /g'
}
shlibdeps=(dpkg-shlibdeps -Tdebian/vault.substvars)
noise='^$'
# The toolchain's Swift runtime belongs to no package: a build linked to it (the debug build) is
# packaged for this machine only, with the Debian libraries in Depends; what dpkg-shlibdeps says
# of the toolchain's libraries is left out.
if readelf -d "$bin/vault" | grep -q 'libswiftCore\.so'; then
  say "note: $bin links the toolchain's Swift runtime: this package runs only where that toolchain is"
  shlibdeps+=(--ignore-missing-info -l"$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")/lib/swift/linux")
  noise="no dependency information found for|can't extract name and version from library name|could avoid a useless dependency"
fi
(cd "$work" && "${shlibdeps[@]}" "${binaries[@]/#/debian/vault/usr/bin/}" 2> "$work/shlibdeps.log") ||
  { cat "$work/shlibdeps.log" >&2; die "dpkg-shlibdeps failed"; }
grep -v -E "$noise" "$work/shlibdeps.log" >&2 || true
# `vault` carries GCC's static libstdc++ (Sources/vault/link/libstdc++.so): Built-Using names the
# source package it came from, as Debian's policy asks of a statically linked library.
stdcxx=$(dpkg-query -S "$(gcc -print-file-name=libstdc++.a | xargs readlink -f)" 2>/dev/null | head -n 1 | cut -d: -f1)
[ -n "$stdcxx" ] || die "no Debian package holds libstdc++.a" "./Vault/setup.sh installs what vault builds with"
{
  echo "dlopen:Depends=$(packages "${dlopen_depends[@]}")"
  echo "dlopen:Recommends=$(packages "${dlopen_recommends[@]}")"
  echo "misc:Built-Using=$(dpkg-query -W -f='${source:Package} (= ${source:Version})' "$stdcxx")"
} >> "$work/debian/vault.substvars"
(cd "$work" && dpkg-gencontrol -pvault -v"$version" -Tdebian/vault.substvars -Pdebian/vault)


# 5. vault-fprintd, the fprintd backend: the unit's drop-in that gives vault-authd
# CAP_DAC_READ_SEARCH to read fprintd's prints. Its own package, so that only a machine that wants
# fprintd grants the capability (install.sh installs it when fprintd is there).
pkg="$work/debian/vault-fprintd"
unit "$here/vault-authd.service.d/fprintd.conf" usr/lib/systemd/system/vault-authd.service.d/fprintd.conf
put 0644 "$here/debian/copyright" usr/share/doc/vault-fprintd/copyright
install -m 0644 "$work/debian/vault/usr/share/doc/vault/changelog.Debian.gz" "$pkg/usr/share/doc/vault-fprintd/"
put 0644 "$here/debian/vault-fprintd.lintian-overrides" usr/share/lintian/overrides/vault-fprintd
for script in postinst postrm; do
  install -m 0755 "$here/debian/vault-fprintd.$script" "$pkg/DEBIAN/$script"
done
: > "$work/debian/vault-fprintd.substvars"
(cd "$work" && dpkg-gencontrol -pvault-fprintd -v"$version" -Tdebian/vault-fprintd.substvars -Pdebian/vault-fprintd)

# md5sums, as dh_md5sums writes them; then the two packages.
for pkg in "$work/debian/vault" "$work/debian/vault-fprintd"; do
  (cd "$pkg" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum > DEBIAN/md5sums)
  chmod 0644 "$pkg/DEBIAN/md5sums" "$pkg/DEBIAN/control"
done
dpkg-deb --root-owner-group --build "$work/debian/vault" "$deb" >/dev/null
say "built $deb"
dpkg-deb --field "$deb" Version Installed-Size Depends Recommends | sed 's/^/vault package:   /'
dpkg-deb --root-owner-group --build "$work/debian/vault-fprintd" "$fprintd_deb" >/dev/null
say "built $fprintd_deb"
dpkg-deb --field "$fprintd_deb" Depends | sed 's/^/vault package:   /'

if ((lintian)); then
  command -v lintian >/dev/null || die "lintian is not installed" "sudo apt-get install lintian"
  say "lintian $deb $fprintd_deb"
  report=$(lintian --info --display-info "$deb" "$fprintd_deb" 2>&1) || true
  [ -z "$report" ] || printf '%s\n' "$report"
  if grep -q '^E: ' <<<"$report"; then die "lintian reports errors"; fi
  say "lintian: no error"
fi
