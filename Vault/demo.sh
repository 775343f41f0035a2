#!/usr/bin/env bash
# The main job, end to end, on a machine without a fingerprint reader: libfprint's own
# virtual_device driver stands in for the sensor (libfprint's real device, enrol and match code;
# only the finger is simulated, by ./virtual-reader writing to the driver's socket).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/setup.sh"
cd "$here/.."
bin="$(swift build --show-bin-path)"
vault="$bin/vault"
reader="$bin/virtual-reader"

demo=$(mktemp -d /tmp/vault-demo.XXXXXX)
trap '"$vault" lock --all >/dev/null 2>&1 || true; pkill -f "agent --socket $demo" 2>/dev/null || true; rm -rf "$demo"' EXIT
export VAULT_HOME="$demo/vaults" XDG_STATE_HOME="$demo/state"
export FP_VIRTUAL_DEVICE="$demo/reader.sock" FP_DRIVERS_WHITELIST=virtual_device
printf 'correct horse battery\n' > "$demo/passcode"       # for the demo only: a real passcode is typed
printf 'work passcode 42\n' > "$demo/work-passcode"
cheap=(--kdf-memory 64 --kdf-ops 2)                        # a lighter Argon2id than the default, to keep the demo quick

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
touch_with() { # touch_with FINGER N: the finger touches the virtual reader N times (in the background)
  local finger=$1 n=${2:-1}
  ( for _ in $(seq "$n"); do "$reader" device --wait 30 "$FP_VIRTUAL_DEVICE" SCAN "$finger" >/dev/null; done ) &
}
expect_exit() { # expect_exit CODE COMMAND...: runs a command that must fail with CODE
  local want=$1; shift
  set +e; "$@"; local got=$?; set -e
  if [ "$got" != "$want" ]; then echo "demo: expected exit $want, got $got" >&2; exit 1; fi
  say "-> exit $got, as expected"
}

step "1. Create the vault 'personal' and enrol a finger (5 touches of the right index finger)"
touch_with alice-right-index 5
"$vault" init --vault personal "${cheap[@]}" --finger right-index --passcode-fd 3 3<"$demo/passcode" > "$demo/recovery-key"
wait
say "the recovery key went to stdout (here a file, $(wc -c <"$demo/recovery-key") bytes); it is shown once"

step "2. Save two logins (the passwords come from stdin, never from the command line)"
printf 'gh-token-0451\n' | "$vault" add github --vault personal --username alice --url https://github.com --password-stdin --passcode-fd 3 3<"$demo/passcode"
"$vault" add prod-db --vault personal --username admin --generate --passcode-fd 3 3<"$demo/passcode"
"$vault" ls --vault personal --passcode-fd 3 3<"$demo/passcode"

step "3. A script fetches a password: the finger unlocks it, no keyboard (--no-input)"
touch_with alice-right-index
token=$("$vault" get github --vault personal --field password --no-input --reason "deploy script")
wait
say "the script got '$token'"

step "3b. One touch opens an unlock session: the script fetches logins without touching again"
export XDG_RUNTIME_DIR="$demo/run"; mkdir -p -m 700 "$XDG_RUNTIME_DIR"
touch_with alice-right-index
"$vault" unlock --vault personal --no-input --timeout 2m
wait
for i in 1 2 3; do say "fetch $i without a finger: $("$vault" get github --vault personal --field password --no-input)"; done
"$vault" status --vault personal --json | python3 -c 'import json,sys; s=json.load(sys.stdin)["session"]; print("   session open, idle time left:", s["idle_left"], "s")'
"$vault" lock --vault personal
say "after 'vault lock' a script gets exit 19 (session ended):"
expect_exit 19 "$vault" get github --vault personal --field password --no-input

step "4. A stranger's finger is refused three times (one evaluation allows 3 tries)"
touch_with mallory 3
expect_exit 10 "$vault" get github --vault personal --field password --no-input
wait

step "5. Two more failures lock fingerprint out (5 in a row); a script without the passcode stops with exit 17"
touch_with mallory 2
expect_exit 17 "$vault" get github --vault personal --field password --no-input --policy biometrics
wait
"$vault" status --vault personal --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print("   lockout:", s["lockout"])'
say "even the right finger is not asked for now:"
expect_exit 17 "$vault" get github --vault personal --field password --no-input

step "6. The passcode is the fallback, and it lifts the lockout"
"$vault" get github --vault personal --field password --passcode-fd 3 3<"$demo/passcode" >/dev/null
"$vault" status --vault personal --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print("   lockout:", s["lockout"])'
touch_with alice-right-index
say "fingerprint works again: $("$vault" get github --vault personal --field username --no-input)"
wait

step "7. A second vault 'work' is bound to the same enrolled finger"
"$vault" init --vault work "${cheap[@]}" --passcode-fd 3 3<"$demo/work-passcode" >/dev/null
printf 'jira-pass-77\n' | "$vault" add jira --vault work --password-stdin --passcode-fd 3 3<"$demo/work-passcode"
touch_with alice-right-index
say "work/jira by finger: $("$vault" get jira --vault work --field password --no-input)"
wait

step "8. A second finger is enrolled through 'personal' (its passcode): the domain state changes"
touch_with alice-left-index 5
"$vault" enroll --vault personal --finger left-index --passcode-fd 3 3<"$demo/passcode"
wait
"$vault" fingers
say "'work' was bound to the old set of fingers, so its fingerprint slot no longer opens:"
expect_exit 20 "$vault" get jira --vault work --field password --no-input
say "'personal' was re-bound when it enrolled, and the new finger opens it:"
touch_with alice-left-index
say "personal/github by the left index: $("$vault" get github --vault personal --field password --no-input)"
wait

step "9. 'work' follows the hint: its passcode, and its keys are rotated and bound to the new prints"
"$vault" unlock --vault work --passcode --rotate --passcode-fd 3 3<"$demo/work-passcode"
say "(that also opened a session for 'work'; lock it: the next request learns the session ended, exit 19)"
"$vault" lock --vault work
expect_exit 19 "$vault" get jira --vault work --field password --no-input
touch_with alice-right-index
say "work/jira by finger: $("$vault" get jira --vault work --field password --no-input)"
wait

step "Done: every step above ran libfprint's real enrol and match code on its virtual reader."
