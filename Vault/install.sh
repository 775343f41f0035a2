#!/usr/bin/env bash
# Installs vault the Linux way: the release binaries (vault-reader, the reader process vault starts, goes
# next to vault), the credential helpers, the system unit of the key authority (vault-authd) and the user
# unit of the agent, the vault-auth system user and the udev rule that gives it the readers. Safe to rerun.
#
#   sudo ./Vault/install.sh [--dry-run] [--from DIR]
#
#   --dry-run   print each step, change nothing (no build either)
#   --from DIR  install the binaries found in DIR instead of building them
#   PREFIX      where the binaries go (default /usr/local: /usr/local/bin)
#   DESTDIR     stage everything under this folder (packaging, tests): no root needed, and no user,
#               udev or systemd changes on this machine
#
# Configuration goes where the administrator's own files go: /etc/systemd/system, /etc/systemd/user,
# /etc/sysusers.d, /etc/udev/rules.d.
set -euo pipefail
umask 022
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

usage() { sed -n '6,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
dry_run=0 from=""
while (($#)); do
  case $1 in
    --dry-run) dry_run=1 ;;
    --from) (($# > 1)) || { echo "vault install: error: --from needs a folder" >&2; exit 2; }; from=$2; shift ;;
    --from=*) from=${1#--from=} ;;
    -h|--help) usage; exit 0 ;;
    *) echo "vault install: error: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

prefix=${PREFIX:-/usr/local}
prefix=${prefix%/}
dest=${DESTDIR:-}
dest=${dest%/}
bindir="$prefix/bin"
((dry_run)) && printf 'vault install: dry run: each step is printed, nothing is changed\n'

say() { printf 'vault install: %s\n' "$*"; }
# run CMD...: prints the command, then runs it unless --dry-run.
run() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  ((dry_run)) || "$@"
}

if ((!dry_run)) && [ -z "$dest" ] && [ "$(id -u)" != 0 ]; then
  echo "vault install: error: installing into / needs root" >&2
  echo "vault install: hint: run 'sudo ./Vault/install.sh', or set DESTDIR to stage the files elsewhere" >&2
  exit 1
fi

# 1. The binaries.
if [ -n "$from" ]; then
  bin=$(cd "$from" 2>/dev/null && pwd) || { echo "vault install: error: no folder $from" >&2; exit 1; }
else
  build=(swift build -c release --static-swift-stdlib)
  if ((dry_run)); then
    bin="$root/.build/release"
    printf '+ (cd %s && %s)\n' "$root" "${build[*]}"
  else
    command -v swift >/dev/null || {
      echo "vault install: error: the Swift toolchain is not on PATH" >&2
      echo "vault install: hint: sudo resets PATH: run 'sudo env PATH=\"\$PATH\" ./Vault/install.sh', or build first and pass --from .build/release" >&2
      exit 1
    }
    # Under sudo, build as the person who owns the checkout: a root-owned .build would break their
    # next `swift build`.
    as_owner=()
    owner=$(stat -c %u "$root")
    if [ "$(id -u)" = 0 ] && [ "$owner" != 0 ]; then
      as_owner=(setpriv --reuid="$owner" --regid="$(stat -c %g "$root")" --init-groups
                env HOME="$(getent passwd "$owner" | cut -d: -f6)" PATH="$PATH")
    fi
    printf '+ (cd %s && %s)\n' "$root" "${build[*]}"
    (cd "$root" && "${as_owner[@]}" "${build[@]}")
    bin=$(cd "$root" && "${as_owner[@]}" "${build[@]}" --show-bin-path)
  fi
fi
if ((!dry_run)); then
  for b in vault vault-agent vault-authd vault-reader; do
    [ -x "$bin/$b" ] || { echo "vault install: error: no $b in $bin" >&2; exit 1; }
  done
fi

for b in vault vault-agent vault-authd vault-reader; do
  run install -D -m 0755 "$bin/$b" "$dest$bindir/$b"
done
# The credential helpers are the same binary under another name.
for helper in git-credential-vault docker-credential-vault; do
  run ln -sfn vault "$dest$bindir/$helper"
done

# 2. The units, with ExecStart pointing at this PREFIX.
# unit SOURCE TARGET: installs a unit file whose ExecStart names /usr/local/bin.
unit() {
  printf '+ sed s#/usr/local/bin/#%s/#g %s > %s (mode 0644)\n' "$bindir" "$1" "$2"
  ((dry_run)) && return
  install -d -m 0755 "$(dirname "$2")"
  local tmp="$2.tmp.$$"
  sed "s#/usr/local/bin/#$bindir/#g" "$1" > "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$2"
}
unit "$here/vault-authd.service" "$dest/etc/systemd/system/vault-authd.service"
unit "$here/vault-agent.service" "$dest/etc/systemd/user/vault-agent.service"

# 3. The system user and the readers.
run install -D -m 0644 "$here/vault-auth.sysusers" "$dest/etc/sysusers.d/vault-auth.conf"
run install -D -m 0644 "$here/70-vault-auth.rules" "$dest/etc/udev/rules.d/70-vault-auth.rules"
# fprintd: polkit lets vault-auth claim the reader for a user's name (inert without fprintd); with
# fprintd installed, the unit's drop-in gives the daemon CAP_DAC_READ_SEARCH to read fprintd's prints.
run install -D -m 0644 "$here/50-vault-auth-fprintd.rules" "$dest/etc/polkit-1/rules.d/50-vault-auth-fprintd.rules"
if [ -x /usr/libexec/fprintd ] || [ "${FPRINTD:-}" = 1 ]; then
  unit "$here/vault-authd.service.d/fprintd.conf" "$dest/etc/systemd/system/vault-authd.service.d/fprintd.conf"
fi

if [ -n "$dest" ]; then
  say "staged under $dest: the vault-auth user, udev and systemd are left to the machine that installs it"
  say "there: systemd-sysusers vault-auth.conf; udevadm control --reload-rules; systemctl daemon-reload; systemctl enable --now vault-authd"
  exit 0
fi

if getent passwd vault-auth >/dev/null; then
  say "the system user vault-auth exists"
elif command -v systemd-sysusers >/dev/null && run systemd-sysusers /etc/sysusers.d/vault-auth.conf; then
  :
else
  # systemd-sysusers is missing or failed: the same user by hand (sysusers.d's "u vault-auth -").
  say "systemd-sysusers cannot create the user here: useradd instead"
  run useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
      --comment "vault key authority" vault-auth
fi
if ((!dry_run)) && ! getent passwd vault-auth >/dev/null; then
  echo "vault install: error: the system user vault-auth could not be created" >&2
  exit 1
fi

if command -v udevadm >/dev/null && [ -S /run/udev/control ]; then
  run udevadm control --reload-rules
  run udevadm trigger --subsystem-match=usb --action=change
else
  say "udev is not running here: the rule applies when a reader is next plugged in, or at boot"
fi

# A machine booted with systemd has /run/systemd/system (sd_booted(3)).
if [ -d /run/systemd/system ]; then
  run systemctl daemon-reload
  say "start the key authority now and at every boot:"
  say "  sudo systemctl enable --now vault-authd"
  say "the agent, for each user who wants it at login: systemctl --user enable --now vault-agent"
else
  say "PID 1 is $(cat /proc/1/comm 2>/dev/null || echo unknown), not systemd: systemctl cannot start vault-authd here"
  say "on a machine booted with systemd: sudo systemctl enable --now vault-authd"
  say "here, start it by hand as its user (see Vault/demo.sh):"
  say "  install -d -o vault-auth -g vault-auth -m 0755 /run/vault-auth; install -d -o vault-auth -g vault-auth -m 0700 /var/lib/vault-auth"
  say "  setpriv --reuid=vault-auth --regid=vault-auth --init-groups --inh-caps=-all --no-new-privs env -i $bindir/vault-authd &"
fi
