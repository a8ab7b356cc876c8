"""What every child role of the benchmarks does besides its own work: watch for the
parent's exit and the hard deadline, keep an absolute send schedule, and stamp the
latency payload."""

from __future__ import annotations

import os
import threading
import time

from bn_settings import CHILD_DEADLINE_S


def _guard_child() -> None:
    """Exit this child if the parent disappears or the hard deadline passes."""
    guard(CHILD_DEADLINE_S)


def guard(deadline_s: float) -> None:
    """Exit this child if the parent disappears or ``deadline_s`` passes."""
    parent = os.getppid()
    end = time.monotonic() + deadline_s

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent or time.monotonic() > end:
                os._exit(3)

    threading.Thread(target=watch, daemon=True, name="bench-guard").start()


def _pace(i: int, t0: int, interval_ns: float) -> None:
    """Sleep until message ``i``'s slot (absolute schedule: no drift)."""
    delay = t0 + i * interval_ns - time.perf_counter_ns()
    if delay > 0:
        time.sleep(delay / 1e9)


def _latency_payload(seq: int, size: int) -> bytes:
    """perf_counter_ns (end-to-end clock), seq, time_ns (to split the hops at the node's
    CLOCK_REALTIME receive stamp), zero padding to ``size``."""
    wall = time.time_ns()
    return (
        time.perf_counter_ns().to_bytes(8, "little")
        + seq.to_bytes(8, "little")
        + wall.to_bytes(8, "little")
        + bytes(size - 24)
    )
