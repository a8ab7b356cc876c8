"""The child processes of a benchmark run: the one registry of every process started
(``_PROCS``, shared by every benchmark that imports ``bench_node``: whatever a failed run
left running is stopped from it by PID), how a child is started and stopped, and the inbox
that sorts the children's results by role."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from typing import Any

from bn_settings import log

_PROCS: list[mp.process.BaseProcess] = []


def _start(ctx: Any, target: Any, *args: Any) -> Any:
    p = ctx.Process(target=target, args=args, daemon=True)
    p.start()
    _PROCS.append(p)
    return p


class _Inbox:
    """Results from children, tagged by role; they may arrive in any order."""

    def __init__(self, q: Any) -> None:
        self.q = q
        self.stash: dict[str, Any] = {}

    def get(self, key: str, timeout: float) -> Any:
        end = time.monotonic() + timeout
        while key not in self.stash:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no '{key}' result from a child within {timeout:g} s")
            try:
                tag, value = self.q.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            self.stash[tag] = value
        return self.stash.pop(key)


def _stop_procs(procs: list[Any], timeout: float = 10.0) -> None:
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            log(f"  process {p.pid} still running: SIGTERM")
            p.terminate()  # by PID
            p.join(3)
        if p.is_alive():
            p.kill()
            p.join(2)
