#!/usr/bin/env python3
"""Runs several commands in interleaved rounds and reports each one's wall and CPU time.

hyperfine runs all the runs of one command, then all of the next: on a shared 2-core machine a
burst of someone else's work lands on one command and skews every difference between commands.
Here each round runs every command once, in a fresh random order, so slow periods hit all of them
alike; medians then give differences that hold to a tenth of a millisecond.

Commands are started with posix_spawn (no shell) with output to /dev/null; wall time is taken
around spawn..wait4, CPU time (user + sys) from wait4's rusage of that child alone. The spawn
cost of this script is in every wall time alike (it is about the same as hyperfine's -N).

usage: interleave.py --rounds R [--warmup W] [--json OUT] NAME COMMAND [NAME COMMAND ...]
COMMAND is split on spaces (no quoting).
"""
import argparse, json, os, random, shutil, statistics, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=200)
ap.add_argument("--warmup", type=int, default=10)
ap.add_argument("--json")
ap.add_argument("pairs", nargs="+")
a = ap.parse_args()
if len(a.pairs) % 2:
    sys.exit("NAME COMMAND pairs expected")
cmds = [(a.pairs[i], a.pairs[i + 1].split()) for i in range(0, len(a.pairs), 2)]
for _, argv in cmds:
    argv[0] = shutil.which(argv[0]) or sys.exit(f"{argv[0]}: not found")
devnull = os.open(os.devnull, os.O_RDWR)
acts = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]


def run(argv):
    t = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=acts)
    _, status, ru = os.wait4(pid, 0)
    wall = (time.perf_counter_ns() - t) / 1e6
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)}: exit {os.waitstatus_to_exitcode(status)}")
    return wall, (ru.ru_utime + ru.ru_stime) * 1e3


wall = {n: [] for n, _ in cmds}
cpu = {n: [] for n, _ in cmds}
for r in range(a.warmup + a.rounds):
    order = list(cmds)
    random.shuffle(order)
    for n, argv in order:
        w, c = run(argv)
        if r >= a.warmup:
            wall[n].append(w)
            cpu[n].append(c)

out = {n: {"median_ms": statistics.median(wall[n]), "mean_ms": statistics.fmean(wall[n]),
           "sd_ms": statistics.stdev(wall[n]), "cpu_median_ms": statistics.median(cpu[n]),
           "cpu_mean_ms": statistics.fmean(cpu[n]), "rounds": a.rounds} for n, _ in cmds}
if a.json:
    json.dump(out, open(a.json, "w"), indent=1)
w = max(len(n) for n, _ in cmds)
print(f"{'':{w}}  {'wall median':>11}  {'mean +- sd':>16}  {'CPU median':>10}")
for n, _ in cmds:
    o = out[n]
    print(f"{n:{w}}  {o['median_ms']:8.2f} ms  {o['mean_ms']:6.2f} +- {o['sd_ms']:4.2f} ms  {o['cpu_median_ms']:7.2f} ms")
