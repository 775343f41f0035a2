#!/usr/bin/env python3
"""Where a short-lived process spends its time, from `perf script` output of `perf record -g`.

Reads `perf script -F comm,tid,ip,sym,dso` on stdin and keeps the samples of one command name
(argv[1]). Each sample is charged to the shared object of its innermost frame (the leaf); kernel
samples are split by what the kernel was doing, read from the kernel part of the call chain
(page faults, execve, mmap/mprotect, mlock/madvise, exit/munmap teardown, file opens, reads, ...).
User-space call chains are not used (the libraries have no frame pointers), so "ld-linux" means
the dynamic loader's own code: symbol lookup and relocation.

usage: perf script -i perf.data -F comm,tid,ip,sym,dso | perf_leaf.py COMM [RUNS FREQ [JSON_OUT]]
With RUNS (how many processes were recorded) and FREQ (perf record -F) it also prints
milliseconds per process; with JSON_OUT it writes {category: ms per run} there as well.
prints a table: category, share of samples, ms per run.
"""
import collections, re, sys

comm = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 0
freq = int(sys.argv[3]) if len(sys.argv) > 3 else 0
json_out = sys.argv[4] if len(sys.argv) > 4 else None

samples = collections.Counter()
syms = collections.Counter()
total = 0


def kernel_kind(frames):
    names = " ".join(f[1] for f in frames)
    if "exc_page_fault" in names or "asm_exc_page_fault" in names:
        return "kernel: page faults"
    if "execve" in names or "load_elf_binary" in names or "begin_new_exec" in names:
        return "kernel: execve"
    if "exit_mmap" in names or "do_exit" in names or "do_group_exit" in names or "__x64_sys_exit" in names:
        return "kernel: exit (address-space teardown)"
    if "mlock" in names or "munlock" in names:
        return "kernel: mlock/munlock"
    if "madvise" in names:
        return "kernel: madvise"
    if "getrandom" in names:
        return "kernel: getrandom"
    if "pwrite" in names or "fdatasync" in names or "fsync" in names or "pread" in names:
        return "kernel: database file I/O"
    if "munmap" in names:
        return "kernel: munmap"
    if "mmap" in names or "mprotect" in names:
        return "kernel: mmap/mprotect"
    if "openat" in names or "newfstatat" in names or "statx" in names or "access" in names:
        return "kernel: open/stat (library search path)"
    if "show_map" in names or "seq_read" in names:
        return "kernel: reading /proc/self/maps"
    if "read" in names:
        return "kernel: read"
    if "connect" in names or "unix_" in names or "sendto" in names or "recvfrom" in names or "sock_" in names:
        return "kernel: socket"
    if "schedule" in names or "futex" in names:
        return "kernel: scheduling/futex"
    return "kernel: other"


def flush(head, frames):
    global total
    if not head or not frames:
        return
    if head.split()[0] != comm:
        return
    total += 1
    leaf_ip, leaf_sym, leaf_dso = frames[0]
    if leaf_dso == "[kernel.kallsyms]":
        samples[kernel_kind([f for f in frames if f[2] == "[kernel.kallsyms]"])] += 1
    else:
        name = leaf_dso.rsplit("/", 1)[-1]
        name = re.sub(r"\.so[.0-9]*$", ".so", name)
        samples[name] += 1
    syms[(leaf_sym, leaf_dso.rsplit("/", 1)[-1])] += 1


head, frames = None, []
line_re = re.compile(r"^\s*([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$")
for line in sys.stdin:
    if not line.strip():
        flush(head, frames)
        head, frames = None, []
        continue
    if not line.startswith((" ", "\t")):
        flush(head, frames)
        head, frames = line.strip(), []
        continue
    m = line_re.match(line)
    if m:
        frames.append((m.group(1), m.group(2), m.group(3)))
flush(head, frames)

if total == 0:
    sys.exit(f"no samples of {comm}")
ms = (lambda n: f"{n / freq / runs * 1000:7.2f}") if runs and freq else (lambda n: "")
print(f"{'where (leaf frame)':45} {'share':>7} {'ms/run' if runs and freq else ''}")
for k, n in samples.most_common(25):
    print(f"{k:45} {100 * n / total:6.1f}% {ms(n)}")
print(f"{'total':45} {100.0:6.1f}% {ms(total)}   ({total} samples)")
if json_out and runs and freq:
    import json
    json.dump({k: n / freq / runs * 1000 for k, n in samples.items()} | {"total": total / freq / runs * 1000},
              open(json_out, "w"), indent=1)
print("\nhottest leaf symbols:")
for (s, d), n in syms.most_common(15):
    print(f"  {100 * n / total:5.1f}%  {s}  [{d}]")
