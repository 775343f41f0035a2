#!/usr/bin/env bash
# Installs the Debian packages vault builds and tests with, then builds it.
# Sourced by demo.sh and test.sh; safe to run again.
set -euo pipefail
packages=(libsodium-dev libstdc++-12-dev libfprint-2-dev libglib2.0-dev libsqlite3-dev libarchive-dev nettle-dev libxml2-dev libxcb1-dev pkg-config python3 git xvfb xclip
  swtpm swtpm-tools tpm2-tools libtss2-dev libtss2-tcti-swtpm0 zsh fish man-db
  fprintd dbus python3-dbusmock polkitd
  keepassxc pass gnupg oathtool golang-go
  libssl-dev openssh-client openssh-server openssh-tests
  libgcrypt20-dev libsecret-1-dev libsecret-tools gnome-keyring python3-secretstorage python3-keyring dbus-daemon
  libglib2.0-bin pinentry-tty
  dpkg-dev lintian systemd-container)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "vault setup: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  else
    echo "vault setup: missing Debian packages; run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# VAULT_BIN_DIR names binaries built already (the tests run the demo so): nothing is built.
if [ -n "${VAULT_BIN_DIR:-}" ]; then return 0 2>/dev/null || exit 0; fi
command -v swift >/dev/null || { echo "vault setup: the Swift toolchain is not on PATH" >&2; exit 1; }
# One line while it builds; the compiler's output goes to a file, shown when the build fails.
build_log="${VAULT_BUILD_LOG:-.build/setup-build.log}"
mkdir -p "$(dirname "$build_log")"
printf 'vault setup: building vault (swift build -c %s; the full log: %s) ... ' "${VAULT_BUILD_CONFIG:-debug}" "$build_log" >&2
build_start=$SECONDS
if swift build -c "${VAULT_BUILD_CONFIG:-debug}" >"$build_log" 2>&1; then
  echo "done in $((SECONDS - build_start)) s" >&2
else
  echo "FAILED; the build's output:" >&2
  cat "$build_log" >&2
  exit 1
fi
