#!/usr/bin/env python3
"""Times the unlock-session agent alone, without the cost of starting a `vault` process.

Speaks the agent's wire format (docs: Sources/VaultCLI/Agent/AgentProtocol.swift): a frame is a
big-endian u32 length, then a big-endian u32 header length and a JSON header with "v": 1.
It replays what `vault get NAME --field password` sends inside a session -- connect, then
`contains`, `item`, `release` (the audit record) -- and, separately, each request alone.

usage: agent_rtt.py SOCKET DBPATH NAME [ROUNDS]
prints one JSON object: per-operation mean/median/sd in microseconds.
"""
import json, socket, statistics, struct, sys, time

sock_path, db, name = sys.argv[1], sys.argv[2], sys.argv[3]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 500


def frame(h):
    h = dict(h, v=1)
    j = json.dumps(h, sort_keys=True, separators=(",", ":")).encode()
    return struct.pack(">II", 4 + len(j), len(j)) + j


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise SystemExit("agent closed the connection")
        b += c
    return bytes(b)


def request(s, h):
    s.sendall(frame(h))
    (n,) = struct.unpack(">I", recv_exact(s, 4))
    body = recv_exact(s, n)
    (hl,) = struct.unpack(">I", body[:4])
    r = json.loads(body[4:4 + hl])
    if not r.get("ok"):
        raise SystemExit(f"agent error: {r}")
    return r


def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    return s


get_ops = [
    {"op": "contains", "vault": db, "name": "-"},
    {"op": "item", "vault": db, "name": name},
    {"op": "release", "vault": db, "item": name, "field": "password", "command": "bench"},
]


def timed(fn):
    t = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t) / 1000.0


def whole_get():
    s = connect()
    for h in get_ops:
        request(s, h)
    s.close()


results = {}
for _ in range(20):
    whole_get()
samples = [timed(whole_get) for _ in range(rounds)]
results["connect+contains+item+release"] = samples
s = connect()
for h in get_ops:
    key = h["op"]
    results[key] = [timed(lambda: request(s, h)) for _ in range(rounds)]
results["ping"] = [timed(lambda: request(s, {"op": "ping"})) for _ in range(rounds)]
s.close()
results["connect+close"] = [timed(lambda: connect().close()) for _ in range(rounds)]

out = {k: {"mean_us": round(statistics.fmean(v), 1), "median_us": round(statistics.median(v), 1),
           "sd_us": round(statistics.stdev(v), 1), "n": len(v)} for k, v in results.items()}
print(json.dumps(out, indent=1))
