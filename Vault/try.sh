#!/usr/bin/env bash
# Try vault by hand, without a fingerprint reader: a shell with the built `vault` first on PATH,
# a throw-away vault folder (VAULT_HOME and the state and runtime folders under one temporary
# folder, removed when the shell ends) and libfprint's virtual reader in place of a sensor.
# `touch-finger NAME [N]` is a finger touching that reader (N times; in the background with `&`
# before a command that waits for it, or from another terminal: it names the reader's socket).
# The match runs in the vault process (the embedded authority), as for any user without vault-authd.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/setup.sh"
cd "$here/.."
bin="${VAULT_BIN_DIR:-$(swift build --show-bin-path)}"
umask 077
try=$(mktemp -d /tmp/vault-try.XXXXXX)
mkdir -p "$try/bin" "$try/run" "$try/home"
cleanup() {
  VAULT_HOME="$try/vaults" XDG_RUNTIME_DIR="$try/run" "$bin/vault" lock --all >/dev/null 2>&1 || true
  rm -rf "$try"
}
trap cleanup EXIT
cat > "$try/bin/touch-finger" <<TOUCH
#!/bin/sh
# touch-finger NAME [N]: the finger NAME touches the virtual reader N times (default 1), each
# once vault has the reader open and waits for it. Different names are different fingers.
finger=\${1:?usage: touch-finger NAME [N]}; n=\${2:-1}
i=0
while [ "\$i" -lt "\$n" ]; do
  "$bin/virtual-reader" device --wait 60 "$try/reader.sock" SCAN "\$finger" >/dev/null || exit 1
  i=\$((i + 1)); sleep 0.3
done
TOUCH
chmod 0700 "$try/bin/touch-finger"
cat > "$try/rc" <<RC
PS1='(vault try) \w\$ '
cat <<'TOUR'
vault try: 'vault' is the build in $bin, its vaults live in $try
(removed when this shell ends), and libfprint's virtual reader stands in for a sensor.
A quick tour, line by line:
  touch-finger alice 5 &      # alice's finger, ready for the 5 touches of an enrolment
  vault init                  # a passcode (twice), the recovery key, then the enrolment
  printf 'hunter2\n' | vault add github --username alice --password-stdin
  touch-finger alice &        # one touch...
  vault get github            # ...unlocks: the summary, the password masked
  touch-finger mallory 3 &    # another finger: 3 tries, then exit 10
  vault get github --no-input; echo "exit \$?"
  vault status                # the lockout count, in words
  vault help                  # everything else; vault manpage | man -l -
'exit' ends it and removes the vaults.
TOUR
RC
env -i PATH="$try/bin:$bin:/usr/bin:/bin" HOME="$try/home" TERM="${TERM:-dumb}" LANG="${LANG:-C.UTF-8}" \
  ${NO_COLOR:+"NO_COLOR=$NO_COLOR"} VAULT_HOME="$try/vaults" XDG_STATE_HOME="$try/state" XDG_RUNTIME_DIR="$try/run" \
  VAULT_AUTHORITY=embedded FP_VIRTUAL_DEVICE="$try/reader.sock" FP_DRIVERS_WHITELIST=virtual_device \
  bash --noprofile --rcfile "$try/rc" -i
