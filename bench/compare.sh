#!/usr/bin/env bash
# vault next to pass and keepassxc-cli (Debian packages) on the same N logins (default 10,000):
# get, list, search and import, median of RUNS wall times, and the ratio of each to vault.
#
#   bench/compare.sh                    N=10000 RUNS=5
#
# vault runs inside an unlock session (as a script would after `vault unlock`); pass with a warm
# gpg-agent and a passphrase-less key; keepassxc-cli with its database password on stdin and a
# KDF tuned to 100 ms (`import -t 100`), which every keepassxc-cli command pays (it has no
# session). Import: vault's JSON import (passcode, KDF 8 MiB / 1 pass); keepassxc-cli's XML
# import; pass has none, so its row is the one-gpg-process batch encryption of N entries (a lower
# bound of any pass import). Results: bench/results/compare.{md,txt}.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-10000}
RUNS=${RUNS:-5}
need pass:pass gpg:gnupg keepassxc-cli:keepassxc-minimal /usr/bin/time:time python3:python3
vault_binary
make_env
OUT=$RESULTS/compare.txt
: > "$OUT"
machine_info | tee -a "$OUT" >&2

declare -A T
# timeit KEY CMD...: the median of RUNS wall times of CMD (stdin from $IN when set), in T[KEY].
timeit() {
    local key=$1; shift
    local times=()
    for ((r = 0; r < RUNS; r++)); do
        /usr/bin/time -o "$WORK/time" -f "%e" "$@" <"${IN:-/dev/null}" >/dev/null 2>"$WORK/err" \
            || say "bench: $key failed: $(tail -2 "$WORK/err")"
        times+=("$(tail -1 "$WORK/time")")
    done
    T[$key]=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    say "bench: $key ${T[$key]} s"
}

python3 - "$N" "$WORK" <<'PY'
import base64, json, os, secrets, sys, uuid
from xml.sax.saxutils import escape
n, work = int(sys.argv[1]), sys.argv[2]
items = [{"name": f"item{i:06d}", "username": f"user{i}@example.com", "password": secrets.token_urlsafe(18),
          "url": f"https://ex{i}.example.com/login"} for i in range(n)]
json.dump(items, open(f"{work}/items.json", "w"))
os.makedirs(f"{work}/plain")
for it in items:
    open(f"{work}/plain/{it['name']}", "w").write(f"{it['password']}\nusername: {it['username']}\nurl: {it['url']}\n")
u = lambda: base64.b64encode(uuid.uuid4().bytes).decode()
with open(f"{work}/items.xml", "w") as f:
    f.write('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<KeePassFile><Meta><Generator>bench</Generator></Meta>'
            f'<Root><Group><UUID>{u()}</UUID><Name>Root</Name>')
    for it in items:
        f.write(f'<Entry><UUID>{u()}</UUID>'
                f'<String><Key>Title</Key><Value>{escape(it["name"])}</Value></String>'
                f'<String><Key>UserName</Key><Value>{escape(it["username"])}</Value></String>'
                f'<String><Key>Password</Key><Value ProtectInMemory="True">{escape(it["password"])}</Value></String>'
                f'<String><Key>URL</Key><Value>{escape(it["url"])}</Value></String></Entry>')
    f.write('</Group></Root></KeePassFile>\n')
PY

# --- import ---------------------------------------------------------------------------------------
"$VAULT" init --vault cmp --kdf-memory 8 --kdf-ops 1 --no-fingerprint --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1
RUNS_SAVED=$RUNS RUNS=1
IN=$WORK/items.json timeit "vault import" "$VAULT" import --vault cmp --passcode-fd 3 3<"$PASSCODE"
KDBX_PW=$WORK/kdbx-pw
printf 'bench-db-password\nbench-db-password\n' > "$KDBX_PW"
IN=$KDBX_PW timeit "keepassxc-cli import" keepassxc-cli import -q -p -t 100 "$WORK/items.xml" "$WORK/db.kdbx"
printf 'bench-db-password\n' > "$KDBX_PW"

export GNUPGHOME=$WORK/gnupg PASSWORD_STORE_DIR=$WORK/pass
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' --quick-gen-key 'vault bench <bench@example.invalid>' future-default default never 2>/dev/null
KEY=$(gpg --batch --with-colons --list-keys | awk -F: '/^fpr/{print $10; exit}')
pass init "$KEY" >/dev/null 2>&1
encrypt_store() {
    cp -a "$WORK/plain/." "$PASSWORD_STORE_DIR/"
    (cd "$PASSWORD_STORE_DIR" && find . -maxdepth 1 -type f ! -name '*.gpg' ! -name '.gpg-id' -printf '%f\n' \
        | gpg --batch --quiet --yes --trust-model always -r "$KEY" --encrypt-files 2>/dev/null \
        && find . -maxdepth 1 -type f ! -name '*.gpg' ! -name '.gpg-id' -delete)
}
timeit "pass import (batch gpg)" bash -c "$(declare -f encrypt_store); WORK=$WORK PASSWORD_STORE_DIR=$PASSWORD_STORE_DIR KEY=$KEY encrypt_store"
RUNS=$RUNS_SAVED
pass show item000042 >/dev/null   # warm gpg-agent

# --- get, list, search ----------------------------------------------------------------------------
"$VAULT" unlock --vault cmp --timeout 3600 --passcode-fd 3 3<"$PASSCODE" >/dev/null 2>&1 || die "vault unlock failed"
timeit "vault get" "$VAULT" get item004242 --vault cmp --field password --no-input
timeit "pass get" pass show item004242
IN=$KDBX_PW timeit "keepassxc-cli get" keepassxc-cli show -q -s -a Password "$WORK/db.kdbx" item004242
timeit "vault list" "$VAULT" ls --vault cmp --no-input
timeit "pass list" pass ls
IN=$KDBX_PW timeit "keepassxc-cli list" keepassxc-cli ls -q "$WORK/db.kdbx"
timeit "vault search" "$VAULT" search ex4242 --vault cmp --no-input
timeit "pass search" pass find item00424
IN=$KDBX_PW timeit "keepassxc-cli search" keepassxc-cli search -q "$WORK/db.kdbx" ex4242

{
    printf '\n%s logins, median of %s runs (import: 1 run)\n\n' "$N" "$RUNS"
    printf '| operation | vault | pass | keepassxc-cli | pass / vault | keepassxc-cli / vault |\n|---|---|---|---|---|---|\n'
    for op in import get list search; do
        v=${T["vault $op"]}
        p=${T["pass $op"]:-${T["pass import (batch gpg)"]}}
        k=${T["keepassxc-cli $op"]}
        printf '| %s | %s s | %s s | %s s | %s | %s |\n' "$op" "$v" "$p" "$k" \
            "$(python3 -c "print(f'{$p/max($v,0.001):.1f}x')")" "$(python3 -c "print(f'{$k/max($v,0.001):.1f}x')")"
    done
} | tee -a "$OUT" >&2
cp "$OUT" "$RESULTS/compare.md"
say "bench: results in $RESULTS/compare.md"
