#!/usr/bin/env python3
"""How each thread of a chain's processes uses the CPU during a flood, from ``/proc``.

    .venv/bin/python benchmarks/threads_chain.py                 # 100-byte flood, 5 s
    .venv/bin/python benchmarks/threads_chain.py --size 1024 --seconds 10

``chain_run.py``'s chain and clients (nodes A, B, C as ``zbroker start`` processes on
127.0.0.1; a subscriber on C, a publisher flooding A), but instead of sampling with
``perf`` it reads ``/proc/PID/task/TID/{stat,status}`` of every process (the nodes, the
publisher ``pub``, the subscriber ``sub``) before and after ``--seconds`` of flood and
prints per thread: its share of one core, its voluntary context switches per second (it
waited: a poll, a lock, the GIL) and its involuntary ones (it was preempted), then the
msg/s published and delivered during the window and each process's CPU µs per message
delivered. Needs no ``perf``. Every process it starts is stopped by its PID.

    .venv/bin/python benchmarks/threads_chain.py --syscalls --rate 2000   # needs perf

``--syscalls`` counts instead, with ``perf stat`` on every process at once (the system
call tracepoints of :data:`CALLS`, all calls, context switches), and prints per process
each count per message (published when paced, else delivered): at a low rate, where a
message's latency and CPU go to waking up and looking around (a poll of every socket),
not to the work.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: per thread id: (name, CPU seconds, voluntary switches, involuntary switches)
Threads = dict[int, tuple[str, float, int, int]]
TICK = os.sysconf("SC_CLK_TCK")
ORDER = ("pub", "A", "B", "C", "sub")


def threads_of(pid: int) -> Threads:
    """Every thread of process ``pid`` as it is now (those that exit while read: left out)."""
    out: Threads = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
                vol = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
                inv = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
                out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICK, vol, inv)
    return out


def window(pids: dict[str, int], seconds: float) -> dict[str, Threads]:
    """Per process: each thread alive throughout, with what it did during ``seconds``
    (its name, CPU seconds, voluntary and involuntary switches)."""
    before = {name: threads_of(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    after = {name: threads_of(pid) for name, pid in pids.items()}
    return {
        name: {
            tid: (n, cpu - was[1], vol - was[2], inv - was[3])
            for tid, (n, cpu, vol, inv) in sorted(after[name].items())
            if (was := before[name].get(tid)) is not None
        }
        for name in pids
    }


#: the system calls ``--syscalls`` counts one by one (every call is counted in "all")
CALLS = ("poll", "getpid", "epoll_wait", "read", "write", "sendto", "recvfrom", "futex")


def stat_counts(text: str) -> dict[str, int]:
    """``perf stat -x ,`` output (its stderr) as {event: count}; an event perf could not
    count is left out. The event's name: a tracepoint's last part, ``sys_enter_`` cut
    (``raw_syscalls:sys_enter`` is "all")."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or not fields[0].isdigit():
            continue  # (a comment, a blank line, "<not counted>")
        name = fields[2].rsplit(":", 1)[-1].removeprefix("sys_enter_")
        out["all" if name == "sys_enter" else name] = int(fields[0])
    return out


def stat_unusable() -> str | None:
    """Why ``perf stat`` cannot count the system call tracepoints here (None: it can):
    not installed, or not permitted (root, or ``kernel.perf_event_paranoid`` -1 and
    tracefs readable). Tried on a short ``sleep`` of its own (a process that sleeps
    throughout an attach reads "<not counted>": it never ran)."""
    if shutil.which("perf") is None:
        return "perf not found (apt-get install linux-perf)"
    cmd = ["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "--", "sleep", "0.01"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:  # (run() has killed it by its PID)
        return "perf stat did not end within 30 s"
    if out.returncode != 0 or not stat_counts(out.stderr).get("all"):
        why = (out.stderr.strip().splitlines() or ["no output"])[-2:]
        return f"perf stat failed (uid {os.geteuid()}): " + " / ".join(why)
    return None


def count_syscalls(pids: dict[str, int], seconds: float) -> dict[str, dict[str, int]]:
    """``perf stat`` on every process of ``pids`` at once for ``seconds``: per process,
    its counts (:func:`stat_counts`). Each perf is stopped by its PID if it overruns."""
    from chain_run import stop_processes  # (benchmarks/ on the path: main's import)

    events = ["raw_syscalls:sys_enter", *(f"syscalls:sys_enter_{c}" for c in CALLS)]
    cmd = ["perf", "stat", "-x", ",", *(a for e in events for a in ("-e", e))]
    cmd += ["-e", "context-switches"]
    running = {
        name: subprocess.Popen(
            [*cmd, "-p", str(pid), "--", "sleep", f"{seconds:g}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, pid in pids.items()
    }
    try:
        return {
            name: stat_counts(p.communicate(timeout=seconds + 60)[1]) for name, p in running.items()
        }
    finally:
        stop_processes(list(running.values()))


def print_syscalls(
    counts: dict[str, dict[str, int]], rate: float, per: str, seconds: float
) -> None:
    """Each process's counts per message (``rate`` messages a second, ``per`` says which)
    over perf's ``seconds`` (the flood's window is longer: perf's start and end)."""
    n = rate * seconds
    print(f"per message {per}: system calls (all, then by call) and context switches")
    for name in ORDER:
        c = counts.get(name, {})
        if not c or not n:
            print(f"{name:8} perf counted nothing (is perf installed and permitted?)")
            continue
        parts = [f"{k} {c.get(k, 0) / n:.2f}" for k in ("all", *CALLS, "context-switches")]
        print(f"{name:8} " + "  ".join(parts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="the window read (default 5)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--rate", type=int, default=0, help="msg/s, paced (default: flood)")
    ap.add_argument("--syscalls", action="store_true", help="count system calls (perf stat)")
    args = ap.parse_args(argv)
    why = stat_unusable() if args.syscalls else None
    if why is not None:
        print(f"--syscalls cannot count: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from _common import snapshot_sources

    copy = snapshot_sources()
    import bench_node as bn
    import chain_run as cr

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{cr.utc()}, load {load}, sources {bn.source_digest()}, {bn.compiled_state()}")
    with tempfile.TemporaryDirectory(prefix="zbroker-threads-") as t:
        if args.syscalls:
            counts, published, delivered, elapsed = cr.run_flood(
                args, Path(t), copy, lambda p: count_syscalls(_roles(p), args.seconds)
            )
        else:
            threads, published, delivered, elapsed = cr.run_flood(
                args, Path(t), copy, lambda p: window(_roles(p), args.seconds)
            )
    print(f"{args.size}-byte payloads, {args.seconds:g} s: {published:,.0f} msg/s published on A,")
    print(f"{delivered:,.0f} msg/s delivered on C")
    if args.syscalls:
        # paced, per message published: the subscriber counts deliveries per 1,024 only
        # (exact enough in a flood, a few percent short in a 5 s window at 2,000 msg/s)
        rate, per = (published, "published") if args.rate else (delivered, "delivered")
        print_syscalls(counts, rate, per, args.seconds)
    else:
        print_threads(threads, delivered, elapsed)
    return 0


def _roles(pids: dict[str, int]) -> dict[str, int]:
    """The PIDs of the processes reported, in :data:`ORDER`."""
    return {n: pids[n] for n in ORDER}


def print_threads(threads: dict[str, Threads], delivered: float, elapsed: float) -> None:
    print(f"{'process':8} {'thread':16} {'% core':>7} {'waits/s':>9} {'preempted/s':>12}")
    for name in ORDER:
        total = 0.0
        for thread, cpu, vol, inv in threads[name].values():
            total += cpu
            if cpu > 0 or vol > 0:
                print(
                    f"{name:8} {thread:16} {100 * cpu / elapsed:7.1f} {vol / elapsed:9,.0f} "
                    f"{inv / elapsed:12,.0f}"
                )
        per = total / (delivered * elapsed) * 1e6 if delivered else float("nan")
        print(f"{name:8} {'(all threads)':16} {100 * total / elapsed:7.1f}   {per:.2f} us/msg")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
