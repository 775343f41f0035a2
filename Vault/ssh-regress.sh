#!/bin/sh
# OpenSSH's own agent regress tests against an agent binary:
#   Vault/ssh-regress.sh AGENT [TEST...]
# AGENT is the program the tests start as "ssh-agent" (/usr/bin/ssh-agent, or vault's
# .build/debug/vault-ssh-agent); a path to `vault` itself runs `vault ssh-agent` (through a
# two-line wrapper, since TEST_SSH_SSHAGENT names one program). TEST defaults to agent
# agent-timeout agent-subprocess agent-restrict.
#
# How (regress/README.regress): Debian's openssh-tests ships the tests, built helpers included
# (mkdtemp, netcat, check-perm), in /usr/lib/openssh/regress. Each test runs as
#   sh test-exec.sh OBJ SCRIPT
# in a writable copy of that folder (OBJ: the copy; the driver writes keys and configs there). The
# programs under test come from TEST_SSH_x (SSH, SSHD, SSHAGENT, SSHADD, SSHKEYGEN, SFTPSERVER):
# TEST_SSH_SSHAGENT is the agent, TEST_SSH_SSHD /usr/sbin/sshd (not on every user's PATH). sshd runs as `sshd -i` from a ProxyCommand, so no port is opened;
# as root it needs its privilege-separation folder /run/sshd. TEST_SSH_UNSAFE_PERMISSIONS=1 lets
# the copy live under a world-readable /tmp. A test passes when it prints "ok <its name>" and exits
# 0; a failure prints "FATAL" or "failed ..." and leaves failed-regress.log in the copy.
#
# Exit: 0 when every test passed, 1 when one failed, 77 (skipped) without openssh-tests.
set -u
agent=${1:?usage: ssh-regress.sh AGENT [TEST...]}
shift
[ $# -gt 0 ] || set -- agent agent-timeout agent-subprocess agent-restrict
src=/usr/lib/openssh/regress
if [ ! -f "$src/test-exec.sh" ]; then
	echo "skipped: OpenSSH's regress tests are not installed (Debian package openssh-tests)"
	exit 77
fi
case $agent in /*) ;; *) agent=$(pwd)/$agent ;; esac
[ -x "$agent" ] || { echo "not an executable: $agent" >&2; exit 2; }
if [ "$(id -u)" = 0 ] && [ ! -d /run/sshd ]; then mkdir -p /run/sshd && chmod 755 /run/sshd; fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ssh-regress.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
case $agent in
*/vault)
	printf '#!/bin/sh\nexec "%s" ssh-agent "$@"\n' "$agent" > "$work/vault-ssh-agent-wrapper"
	chmod 755 "$work/vault-ssh-agent-wrapper"
	agent=$work/vault-ssh-agent-wrapper ;;
esac
status=0
for t in "$@"; do
	obj=$work/$t
	cp -a "$src" "$obj" || exit 1
	(cd "$obj" && env -u SSH_AUTH_SOCK -u SSH_AGENT_PID \
		TEST_SHELL=sh \
		PATH="$PATH:/usr/sbin:/sbin" \
		TEST_SSH_SSHAGENT="$agent" \
		TEST_SSH_SSHD=/usr/sbin/sshd \
		TEST_SSH_SFTPSERVER=/usr/lib/openssh/sftp-server \
		TEST_SSH_UNSAFE_PERMISSIONS=1 \
		sh test-exec.sh "$obj" "$obj/$t.sh" </dev/null)
	r=$?
	if [ $r -ne 0 ]; then
		status=1
		echo "FAILED: $t (exit $r)"
		[ -f "$obj/failed-regress.log" ] && tail -n 40 "$obj/failed-regress.log"
	fi
done
exit $status
