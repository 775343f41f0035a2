#!/usr/bin/env python3
"""Signature latency through SSH agents, interleaved (bench/ssh-sign.sh runs it).

usage: ssh_sign.py proto N PUBFILE NAME=SOCKET...   N rounds of what ssh and ssh-keygen do per use:
                                                      connect, REQUEST_IDENTITIES, SIGN_REQUEST, close
       ssh_sign.py keygen N PUBFILE NAME=SOCKET...  N runs of `ssh-keygen -Y sign -n git -f PUBFILE`
In each round every agent is asked once, in turn, so a busy moment of the machine hits them alike.
Prints one line per agent: median, p90, min and max in ms.
"""
import base64, os, socket, statistics, struct, subprocess, sys, tempfile, time

mode, n, pub = sys.argv[1], int(sys.argv[2]), sys.argv[3]
agents = [a.split("=", 1) for a in sys.argv[4:]]
blob = base64.b64decode(open(pub).read().split()[1])


def string(b):
    return struct.pack(">I", len(b)) + b


def recv_exact(c, k):
    b = bytearray()
    while len(b) < k:
        chunk = c.recv(k - len(b))
        if not chunk:
            raise SystemExit("the agent closed the connection")
        b += chunk
    return bytes(b)


def message(c):
    (length,) = struct.unpack(">I", recv_exact(c, 4))
    if length > 256 * 1024:
        raise SystemExit("reply over 256 KiB")
    return recv_exact(c, length)


def proto(sock):
    t = time.perf_counter()
    c = socket.socket(socket.AF_UNIX)
    c.connect(sock)
    c.sendall(string(b"\x0b"))
    if message(c)[0] != 12:
        raise SystemExit(f"{sock}: no identities answer")
    c.sendall(string(b"\x0d" + string(blob) + string(os.urandom(32)) + struct.pack(">I", 0)))
    reply = message(c)
    c.close()
    dt = time.perf_counter() - t
    if reply[0] != 14:
        raise SystemExit(f"{sock}: no signature (reply type {reply[0]})")
    return dt


work = tempfile.mkdtemp()
msg = os.path.join(work, "msg")


def keygen(sock):
    with open(msg, "w") as f:
        f.write("a commit\n")
    env = dict(os.environ, SSH_AUTH_SOCK=sock)
    t = time.perf_counter()
    r = subprocess.run(["/usr/bin/ssh-keygen", "-Y", "sign", "-n", "git", "-f", pub, msg], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{sock}: ssh-keygen -Y sign failed: {r.stderr.decode()}")
    os.unlink(msg + ".sig")
    return dt


run = proto if mode == "proto" else keygen
times = {name: [] for name, _ in agents}
for _ in range(n):
    for name, sock in agents:
        times[name].append(run(sock) * 1000)
for name, _ in agents:
    t = sorted(times[name])
    p90 = t[min(len(t) - 1, int(round(0.9 * (len(t) - 1))))]
    print(f"{name:28s} median {statistics.median(t):7.2f} ms  p90 {p90:7.2f} ms  min {t[0]:7.2f}  max {t[-1]:7.2f}  (n={len(t)})")
