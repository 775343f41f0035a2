#!/bin/bash
# (The project's copy of the systemd-nspawn recipe measured in SYSTEMD.md; DebianPackageTests use it.)
# Boot a real systemd (PID 1 of its own namespaces) on a throw-away copy-on-write overlay of this
# machine's root, with systemd-nspawn (Debian package systemd-container). Needs root.
#
#   boot-container.sh start [NAME]     boot, wait until `systemctl is-system-running` settles, print how to reach it
#   boot-container.sh exec  NAME CMD…  run CMD inside (nsenter into all its namespaces)
#   boot-container.sh root  NAME       print the host path of its root (write unit files there, then daemon-reload)
#   boot-container.sh stop  [NAME]     clean poweroff, then remove mounts, cgroups and state: nothing is left behind
#   boot-container.sh status [NAME]
#
# Environment: SDC_TIMEOUT (seconds to wait for boot/shutdown, default 60), SDC_MASK (units to mask in
# the container, default "postgresql.service"), SDC_NSPAWN_ARGS (extra systemd-nspawn options, e.g.
# "--bind-ro=/some/dir" or "--bind=/some/dir"), SDC_BASE (scratch folder, default /tmp/sdc-NAME).
# Everything the container writes goes to a tmpfs upper layer and vanishes at stop; the host root is
# the read-only lower layer, so what is installed on the host (build trees included) is visible inside.
set -euo pipefail

cmd=${1:-}; name=${2:-sdc}
[[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,30}$ ]] || { echo "bad name: $name" >&2; exit 2; }
base=${SDC_BASE:-/tmp/sdc-$name}
timeout=${SDC_TIMEOUT:-60}

die() { echo "boot-container: $*" >&2; exit 1; }
need_root() { [[ $(id -u) == 0 ]] || die "must run as root"; }

nspawn_pid() { [[ -s $base/nspawn.pid ]] && kill -0 "$(cat "$base/nspawn.pid")" 2>/dev/null && cat "$base/nspawn.pid"; }
# The container's PID 1 is the child of systemd-nspawn whose comm is "systemd".
leader() {
    local np; np=$(nspawn_pid) || return 1
    local c; for c in $(pgrep -P "$np" || true); do
        [[ $(cat /proc/$c/comm 2>/dev/null) == systemd ]] && { echo "$c"; return 0; }
    done
    return 1
}
inside() { local l; l=$(leader) || die "container $name is not running"; nsenter -t "$l" -a "$@"; }

cleanup() {
    local m lp
    # If systemd-nspawn died without halting the container (SIGKILL), its PID 1 lives on: killing the
    # init of a PID namespace kills everything in it.
    if [[ -s $base/leader.pid ]]; then
        lp=$(cat "$base/leader.pid")
        [[ $(cat /proc/$lp/comm 2>/dev/null) == systemd ]] && kill -KILL "$lp" 2>/dev/null && sleep 0.5
    fi
    for m in "$base/root" "$base/lower" "$base"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    [[ -d $base ]] && rmdir "$base" 2>/dev/null || true
    # nspawn (without a host systemd) puts itself in /supervisor and the container in /payload of the
    # name=systemd and unified hierarchies and leaves them; rmdir only removes cgroups without processes
    local g; for g in /sys/fs/cgroup/{systemd,unified}/{payload,supervisor}; do
        [[ -d $g ]] && find "$g" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    # /run on this host is not a tmpfs, so nspawn refuses to remove this itself
    rm -rf "/run/systemd/nspawn/propagate/$name" "/run/systemd/nspawn/unix-export/$name"
    return 0
}

start() {
    need_root
    command -v systemd-nspawn >/dev/null || die "install the Debian package systemd-container"
    nspawn_pid >/dev/null && die "container $name already running (stop it first)"
    cleanup
    mkdir -p "$base"
    mount -t tmpfs -o mode=0700 sdc-tmpfs "$base"
    mkdir -p "$base/lower" "$base/upper" "$base/work" "$base/root"
    mount --bind / "$base/lower"                        # not recursive: no /dev, /proc, /tmp contents of the host
    mount -o remount,bind,ro "$base/lower"
    mount -t overlay overlay -o "lowerdir=$base/lower,upperdir=$base/upper,workdir=$base/work" "$base/root"
    local r=$base/root
    rm -f "$r/dev/console"                              # the image's /dev holds a stray file; nspawn wants /dev empty
    systemd-id128 new > "$r/etc/machine-id"             # own machine id (journal, DynamicUser= need none shared)
    echo "$name" > "$r/etc/hostname"
    local u; for u in ${SDC_MASK-postgresql.service}; do ln -sf /dev/null "$r/etc/systemd/system/$u"; done
    # shellcheck disable=SC2086
    R="$r" N="$name" X="${SDC_NSPAWN_ARGS:-}" P="$base/nspawn.pid" setsid bash -c 'echo $$ > "$P"
                    exec systemd-nspawn -q -D "$R" -M "$N" --register=no --keep-unit \
                         --console=pipe -b $X' </dev/null >"$base.log" 2>&1 &
    while [[ ! -s $base/nspawn.pid ]]; do sleep 0.05; done

    local t0=$SECONDS l="" st=""
    while (( SECONDS - t0 < timeout )); do
        nspawn_pid >/dev/null || { cat "$base.log" >&2; cleanup; die "systemd-nspawn exited during boot"; }
        if l=$(leader) && st=$(nsenter -t "$l" -a systemctl is-system-running 2>/dev/null); then :; fi
        case $st in running|degraded) break;; esac
        sleep 0.2
    done
    case $st in running|degraded) ;; *) stop; die "boot did not finish in ${timeout}s (state: ${st:-none})";; esac
    echo "$l" > "$base/leader.pid"
    echo "container $name: $st after $((SECONDS - t0))s; leader pid $l; nspawn pid $(nspawn_pid)"
    inside systemd-analyze time 2>/dev/null | head -1 || true
    [[ $st == degraded ]] && inside systemctl --failed --no-pager --plain || true
    cat <<EOF
reach it:  nsenter -t $l -a systemctl status        (or: $0 exec $name systemctl status)
files:     $r   (e.g. put units in $r/etc/systemd/system, then exec $name systemctl daemon-reload)
stop:      $0 stop $name
EOF
}

stop() {
    need_root
    local np; np=$(nspawn_pid) && [[ $(cat /proc/$np/comm 2>/dev/null) == systemd-nspawn ]] || { cleanup; echo "container $name: not running (cleaned up)"; return 0; }
    kill -TERM "$np"                                     # nspawn asks the container's systemd to halt cleanly
    local t0=$SECONDS
    while kill -0 "$np" 2>/dev/null && (( SECONDS - t0 < timeout )); do sleep 0.2; done
    if kill -0 "$np" 2>/dev/null; then
        echo "container $name: no clean halt in ${timeout}s, killing" >&2
        kill -KILL "$np"; sleep 1
    fi
    echo "container $name: stopped after $((SECONDS - t0))s"
    cleanup
    rm -f "$base.log"
}

case $cmd in
    start) start ;;
    stop) stop ;;
    exec) shift 2; inside "$@" ;;
    root) echo "$base/root" ;;
    status) if l=$(leader); then nsenter -t "$l" -a systemctl is-system-running || true; else echo "not running"; exit 3; fi ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
