"""CPU accounting from /proc: the CPU time a process or one of its threads has used, and
the machine's steal and busy time, from which the load other processes put on the
machine during a run is told apart from the benchmark's own."""

from __future__ import annotations

import os


def _cpu_seconds(pid: int | str) -> float:
    """CPU time (user + system, all threads) a process has used so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _thread_cpu_seconds(pid: int, tid: int) -> float:
    """CPU time (user + system) one thread of a process has used so far (clock ticks)."""
    return _cpu_seconds(f"{pid}/task/{tid}")


def _cpu_ticks() -> tuple[int, int, int]:
    """(steal, busy, total) jiffies of the whole machine, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[7], v[0] + v[1] + v[2] + v[5] + v[6], sum(v)
    except (OSError, IndexError, ValueError):
        return 0, 0, 0


def _machine_load(
    t0: tuple[int, int, int], t1: tuple[int, int, int], wall_s: float, ours_s: float
) -> dict[str, float]:
    """Steal %, and how many cores everything / everything but this benchmark kept busy."""
    total = t1[2] - t0[2]
    hz = os.sysconf("SC_CLK_TCK")
    busy_cores = (t1[1] - t0[1]) / hz / wall_s if wall_s > 0 else 0.0
    return {
        "steal_pct": 100.0 * (t1[0] - t0[0]) / total if total > 0 else 0.0,
        "busy_cores": busy_cores,
        "other_cores": max(0.0, busy_cores - ours_s / wall_s) if wall_s > 0 else 0.0,
    }
