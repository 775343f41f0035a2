#!/usr/bin/env bash
# The main job, end to end, on a machine without a fingerprint reader: libfprint's own
# virtual_device driver stands in for the sensor (libfprint's real device, enrol and match code;
# only the finger is simulated, by ./virtual-reader writing to the driver's socket).
#
# Run as root, the match runs in the system key authority: the demo creates the system user
# vault-auth and an ordinary user vault-demo, starts vault-authd as vault-auth (as its systemd unit
# would, here with setpriv: PID 1 is not systemd), and runs every vault step as vault-demo, with
# no VAULT_AUTHORITY: a vault-authd answering at /run/vault-auth/socket is the default. Run as anyone else, or with VAULT_AUTHORITY=embedded, the match runs in
# the vault process itself (the embedded authority). At the end it stops the daemon and removes its
# state; the two users stay (the next run reuses them; `userdel vault-demo` removes the demo user).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/setup.sh"
cd "$here/.."
bin="${VAULT_BIN_DIR:-$(swift build --show-bin-path)}"
vault="$bin/vault"
reader="$bin/virtual-reader"
authd="$bin/vault-authd"

# Bold headings on a terminal only (NO_COLOR, TERM=dumb and a pipe get plain text).
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ] && [ "${TERM:-dumb}" != dumb ]; then
  step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  step() { printf '\n== %s\n' "$*"; }
fi
say() { printf '   %s\n' "$*"; }
note() { printf 'demo: %s\n' "$*"; }

umask 077   # the demo's passcode files stay private, also in system mode where the folder is 0755
demo=$(mktemp -d /tmp/vault-demo.XXXXXX)
mode=embedded authd_pid="" run_dir=/run/vault-auth made_run=0 demo_user=vault-demo
# vault_argv: sets VARGV to the command line that runs vault: as the demo user against
# vault-authd in system mode (with the runtime folder only once step 3b has made one for it:
# root's is not the demo user's).
vault_argv() {
  local user_runtime=""
  case ${XDG_RUNTIME_DIR:-} in "$demo"/*) user_runtime=$XDG_RUNTIME_DIR ;; esac
  if [ "$mode" = system ]; then
    VARGV=(setpriv --reuid="$demo_user" --regid="$demo_user" --init-groups
      env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$demo/user" TERM="${TERM:-dumb}" ${NO_COLOR:+"NO_COLOR=$NO_COLOR"}
      VAULT_HOME="${VAULT_HOME:-}" XDG_STATE_HOME="${XDG_STATE_HOME:-}" ${user_runtime:+"XDG_RUNTIME_DIR=$user_runtime"}
      "$vault")
  else
    VARGV=("$vault")
  fi
}
# v ARGS...: runs vault (see vault_argv).
v() { vault_argv; "${VARGV[@]}" "$@"; }
# at_terminal PROMPT=>ANSWER... -- ARGS...: runs vault ARGS on a pseudo-terminal this demo drives,
# as a person at a terminal would: its screen is shown as it is, and each time PROMPT appears
# ANSWER is typed (\n is Enter; @FILE types the first line of FILE, so the passcode is in no
# argv). What the terminal echoes is on the screen: a secret typed at vault's prompts is not.
at_terminal() {
  local rules=()
  while [ "$1" != -- ]; do rules+=("$1"); shift; done
  shift
  vault_argv
  say "at a terminal: vault $*"
  python3 - "${#rules[@]}" "${rules[@]}" "${VARGV[@]}" "$@" <<'PY'
import os, pty, select, sys, time
n = int(sys.argv[1]); rules = [r.split("=>", 1) for r in sys.argv[2:2 + n]]; argv = sys.argv[2 + n:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
screen, done, start = b"", 0, time.time()
while True:
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try: data = os.read(fd, 4096)
        except OSError: data = b""
        if not data: break
        sys.stdout.buffer.write(data); sys.stdout.flush(); screen += data
    while done < len(rules) and rules[done][0].encode() in screen:
        answer = rules[done][1]
        if answer.startswith("@"):
            with open(answer[1:], "rb") as f: text = f.readline()
        else:
            text = answer.replace("\\n", "\n").encode()
        time.sleep(0.3)
        os.write(fd, text)
        screen = screen.split(rules[done][0].encode(), 1)[1]
        done += 1
    if time.time() - start > 120: os.kill(pid, 9)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
PY
}
# user_folder DIR: a private folder of the user who runs the vault steps.
user_folder() {
  mkdir -p -m 700 "$1"
  if [ "$mode" = system ]; then chown "$demo_user:$demo_user" "$1"; fi
}
running() { [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null || echo Z)" != Z ]; }
stop_authd() {
  if [ -n "$authd_pid" ]; then
    kill "$authd_pid" 2>/dev/null || true
    for _ in $(seq 50); do running "$authd_pid" || break; sleep 0.1; done
    kill -KILL "$authd_pid" 2>/dev/null || true
    wait "$authd_pid" 2>/dev/null || true
    authd_pid=""
  fi
  if ((made_run)); then rm -rf "$run_dir"; made_run=0; fi
}
cleanup() {
  local status=$?
  v lock --all >/dev/null 2>&1 || true
  pkill -f "agent --socket $demo" 2>/dev/null || true
  if [ "$mode" = system ]; then
    if [ "$status" != 0 ] && [ -s "$demo/authd.log" ]; then note "vault-authd's log:"; tail -20 "$demo/authd.log" >&2; fi
    stop_authd
  fi
  rm -rf "$demo"
}
trap cleanup EXIT

# ensure_user NAME USERADD-OPTIONS...: creates the user unless it exists (retrying while another
# useradd holds the lock on /etc/passwd).
ensure_user() {
  local name=$1; shift
  for _ in $(seq 25); do
    id -u "$name" >/dev/null 2>&1 && return 0
    useradd "$@" "$name" 2>/dev/null && return 0
    sleep 0.2
  done
  id -u "$name" >/dev/null 2>&1
}
# authority_kind: what the built vault reports under "authority" > "kind", as the demo user.
authority_kind() {
  local verb out kind
  for verb in status doctor; do
    out=$(v "$verb" --json 2>/dev/null) || true
    kind=$(printf '%s' "$out" | python3 -c 'import json, sys
try: print(json.load(sys.stdin)["authority"]["kind"])
except Exception: pass')
    if [ -n "$kind" ]; then echo "$kind"; return; fi
  done
  echo "unknown"
}
# start_system_authority: vault-authd as vault-auth on the virtual reader, mapped by hand from
# Vault/vault-authd.service (User=, RuntimeDirectory=, StateDirectory=, UMask=, LimitCORE=,
# NoNewPrivileges=, CapabilityBoundingSet=). Fails when it does not answer as the system authority.
start_system_authority() {
  ensure_user vault-auth --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin --comment "vault key authority" || { note "cannot create the user vault-auth"; return 1; }
  ensure_user "$demo_user" --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin --comment "vault demo user" || { note "cannot create the user $demo_user"; return 1; }
  if [ -S "$run_dir/socket" ] && python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$run_dir/socket" 2>/dev/null; then
    note "a vault-authd already answers on $run_dir/socket; the demo leaves it alone"
    return 1
  fi
  chmod 0755 "$demo"   # both users traverse it; each keeps its files in a 0700 folder of its own
  install -d -o "$demo_user" -g "$demo_user" -m 0700 "$demo/user"
  install -d -o vault-auth -g vault-auth -m 0700 "$demo/authd-state" "$demo/reader"
  rm -rf "$run_dir"
  install -d -o vault-auth -g vault-auth -m 0755 "$run_dir"
  made_run=1
  export FP_VIRTUAL_DEVICE="$demo/reader/reader.sock"   # the daemon's reader; root feeds it
  ( umask 077; ulimit -c 0
    exec setpriv --reuid=vault-auth --regid=vault-auth --init-groups --inh-caps=-all --bounding-set=-all --no-new-privs \
      env -i PATH=/usr/bin:/bin RUNTIME_DIRECTORY="$run_dir" STATE_DIRECTORY="$demo/authd-state" \
      FP_DRIVERS_WHITELIST=virtual_device FP_VIRTUAL_DEVICE="$FP_VIRTUAL_DEVICE" \
      "$authd" --socket "$run_dir/socket" --state "$demo/authd-state" --test-mode
  ) >"$demo/authd.log" 2>&1 &
  authd_pid=$!
  for _ in $(seq 50); do
    [ -S "$run_dir/socket" ] && break
    running "$authd_pid" || break
    sleep 0.1
  done
  if [ ! -S "$run_dir/socket" ]; then
    if running "$authd_pid"; then
      note "vault-authd opened no socket at $run_dir/socket within 5 s"
    else
      local status=0; wait "$authd_pid" 2>/dev/null || status=$?; authd_pid=""
      note "vault-authd ended at once (status $status) without opening $run_dir/socket"
    fi
    return 1
  fi
  mode=system
  export VAULT_HOME="$demo/user/vaults" XDG_STATE_HOME="$demo/user/state"
  local kind; kind=$(authority_kind)
  if [ "$kind" != system ]; then
    note "the built vault does not use the system authority yet (vault status --json: authority kind '$kind')"
    mode=embedded
    return 1
  fi
}

if [ "${VAULT_AUTHORITY:-}" = embedded ]; then
  note "VAULT_AUTHORITY=embedded: the match runs in the vault process (the embedded authority)"
elif [ "$(id -u)" != 0 ]; then
  note "the system authority (vault-authd as its own user) needs root: this demo runs the embedded one"
  note "(sudo ./Vault/demo.sh runs the system one)"
elif start_system_authority; then
  note "system authority: vault-authd (pid $authd_pid) runs as vault-auth; the vault steps run as $demo_user"
else
  stop_authd
  chmod 0700 "$demo"
  note "running the embedded demo instead (the match runs in the vault process, as root)"
fi

if [ "$mode" = embedded ]; then
  # Forced, so that a vault-authd installed on this machine does not take the demo's requests.
  export VAULT_AUTHORITY=embedded
  export VAULT_HOME="$demo/vaults" XDG_STATE_HOME="$demo/state"
  export FP_VIRTUAL_DEVICE="$demo/reader.sock" FP_DRIVERS_WHITELIST=virtual_device
fi
printf 'correct horse battery\n' > "$demo/passcode"       # for the demo only: a real passcode is typed
printf 'work passcode 42\n' > "$demo/work-passcode"
cheap=(--kdf-memory 64 --kdf-ops 2)                        # a lighter Argon2id than the default, to keep the demo quick

touches=()
touch_with() { # touch_with FINGER N: the finger touches the virtual reader N times (in the background)
  local finger=$1 n=${2:-1}
  # A pause between touches, as a finger lifts: libfprint's virtual_device can hand a SCAN sent
  # back to back to the step that just finished, and the last touch is then lost.
  ( for _ in $(seq "$n"); do "$reader" device --wait 30 "$FP_VIRTUAL_DEVICE" SCAN "$finger" >/dev/null; sleep 0.3; done ) &
  touches+=($!)
}
touched() { # waits for the touches started so far (not for the daemon, also a child of this shell)
  local t
  for t in "${touches[@]}"; do wait "$t" || true; done
  touches=()
}
expect_exit() { # expect_exit CODE MEANING COMMAND...: runs a command that must fail with CODE
  local want=$1 meaning=$2; shift 2
  set +e; NO_COLOR=1 "$@" 2>"$demo/stderr"; local got=$?; set -e
  if [ "$got" != "$want" ]; then cat "$demo/stderr" >&2; echo "demo: expected exit $want ($meaning), got $got" >&2; exit 1; fi
  # An expected failure is not an error of the demo: its message, quoted, not in red.
  say "expected: exit $got ($meaning)"
  sed -n 's/^vault: error: /   vault said: /p; s/^vault: hint: /   vault hint: /p' "$demo/stderr"
}

step "1. Create the vault 'personal' and enrol a finger (5 touches of the right index finger)"
touch_with alice-right-index 5
v init --vault personal "${cheap[@]}" --finger right-index --passcode-fd 3 3<"$demo/passcode" > "$demo/recovery-key"
touched
say "the recovery key went to stdout (here a file, $(wc -c <"$demo/recovery-key") bytes); it is shown once"

step "2. Save two logins (the passwords come from stdin, never from the command line)"
printf 'gh-token-0451\n' | v add github --vault personal --username alice --url https://github.com --password-stdin --passcode-fd 3 3<"$demo/passcode"
v add prod-db --vault personal --username admin --generate --passcode-fd 3 3<"$demo/passcode"
v ls --vault personal --passcode-fd 3 3<"$demo/passcode"

step "2b. What a person meets: Enter at the touch prompt chooses the passcode, typed at a real prompt (nothing echoes)"
at_terminal "touch the fingerprint reader=>\n" "passcode for vault 'personal': =>@$demo/passcode" -- ls --vault personal
say "and a login's summary, the password masked, after a touch:"
touch_with alice-right-index
at_terminal -- get github --vault personal
touched

step "3. A script fetches a password: the finger unlocks it, no keyboard (--no-input)"
touch_with alice-right-index
token=$(v get github --vault personal --field password --no-input --reason "deploy script")
touched
say "the script got '$token'"

step "3b. One touch opens an unlock session: the script fetches logins without touching again"
export XDG_RUNTIME_DIR="$demo/run"; user_folder "$XDG_RUNTIME_DIR"
touch_with alice-right-index
v unlock --vault personal --no-input --timeout 2m
touched
for i in 1 2 3; do say "fetch $i without a finger: $(v get github --vault personal --field password --no-input)"; done
v status --vault personal | sed -n "s/^vault 'personal': /   vault 'personal': /p"
v lock --vault personal
say "after 'vault lock' the next request needs a finger again:"
touch_with alice-right-index
say "fetch after the lock, one touch: $(v get github --vault personal --field password --no-input)"
touched

step "4. A stranger's finger is refused three times (one evaluation allows 3 tries)"
touch_with mallory 3
expect_exit 10 "3 fingers did not match" v get github --vault personal --field password --no-input
touched

step "5. Two more failures lock fingerprint out (5 in a row); a script without the passcode stops with exit 17"
touch_with mallory 2
expect_exit 17 "locked out" v get github --vault personal --field password --no-input --policy biometrics
touched
v status --vault personal | sed -n 's/^  failed matches: /   failed matches: /p'
say "even the right finger is not asked for now:"
expect_exit 17 "locked out" v get github --vault personal --field password --no-input

step "6. The passcode is the fallback, and it lifts the lockout"
v get github --vault personal --field password --passcode-fd 3 3<"$demo/passcode" >/dev/null
v status --vault personal | sed -n 's/^  failed matches: /   failed matches: /p'
touch_with alice-right-index
say "fingerprint works again: $(v get github --vault personal --field username --no-input)"
touched

step "7. A second vault 'work' is bound to the same enrolled finger"
v init --vault work "${cheap[@]}" --passcode-fd 3 3<"$demo/work-passcode" >/dev/null
printf 'jira-pass-77\n' | v add jira --vault work --password-stdin --passcode-fd 3 3<"$demo/work-passcode"
touch_with alice-right-index
say "work/jira by finger: $(v get jira --vault work --field password --no-input)"
touched

step "8. A second finger is enrolled through 'personal' (its passcode): the domain state changes"
touch_with alice-left-index 5
v enroll --vault personal --finger left-index --passcode-fd 3 3<"$demo/passcode"
touched
v fingers
say "'work' was bound to the old set of fingers, so its fingerprint slot no longer opens:"
expect_exit 20 "the enrolled fingers changed since 'work' was bound" v get jira --vault work --field password --no-input
say "'personal' was re-bound when it enrolled, and the new finger opens it:"
touch_with alice-left-index
say "personal/github by the left index: $(v get github --vault personal --field password --no-input)"
touched

step "9. 'work' follows the hint: its passcode, and its keys are rotated and bound to the new prints"
v unlock --vault work --passcode --rotate --passcode-fd 3 3<"$demo/work-passcode"
say "(that also opened a session for 'work'; lock it, so the finger below is the one that opens it)"
v lock --vault work
touch_with alice-right-index
say "work/jira by finger: $(v get jira --vault work --field password --no-input)"
touched

step "Done: every step above ran libfprint's real enrol and match code on its virtual reader."
if [ "$mode" = system ]; then
  say "the match ran in vault-authd (user vault-auth), every vault command as the user $demo_user"
  stop_authd
  say "vault-authd is stopped and its state removed; the users vault-auth and $demo_user stay"
else
  say "the match ran in the vault process itself (the embedded authority)"
fi
