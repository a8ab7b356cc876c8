"""The durable subscriber on C across a soak run: one process per generation, attached,
then closed cleanly or SIGKILLed (alternately) on a schedule, away for a while, attached
again; what each generation reported and the file it wrote its deliveries to."""

from __future__ import annotations

import os
import time
from typing import Any

import bench_node as bn
from soak_subscribers import durable_sub_main

log = bn.log


class DurableGenerations:
    def __init__(self, ctx: Any, inbox: Any, tmp: str, credit: int, deadline: float) -> None:
        self.ctx, self.inbox, self.tmp = ctx, inbox, tmp
        self.credit, self.deadline = credit, deadline
        self.endpoint = ""  # C's, once the nodes run
        self.current: dict[str, Any] | None = None
        self.gen = 0
        self.history: list[dict[str, Any]] = []
        self.delivered = ctx.Value("q", 0, lock=False)
        # the restart schedule (plan())
        self.next_restart = 0.0
        self.reattach_at: float | None = None
        self.kill_next = False
        self.restart_s = self.away_s = 0.0

    def start(self) -> None:
        self.gen += 1
        gen = self.gen
        ready, stop = self.ctx.Event(), self.ctx.Event()
        path = os.path.join(self.tmp, f"durable-{gen}.log")
        proc = bn._start(
            self.ctx,
            durable_sub_main,
            self.inbox.q,
            gen,
            self.endpoint,
            self.credit,
            path,
            ready,
            stop,
            self.delivered,
            self.deadline,
        )
        if not ready.wait(30):
            raise TimeoutError(f"durable subscriber {gen} not attached within 30 s")
        opened = self.inbox.get(f"dsub{gen}-open", 10)
        self.current = {
            "gen": gen,
            "proc": proc,
            "stop": stop,
            "path": path,
            "started": time.monotonic(),
            "open": opened,
        }
        log(
            f"  durable subscriber #{gen} (pid {proc.pid}) attached: stored "
            f"{opened.get('stored')}, created {opened.get('created')}"
        )

    def stop(self, kill: bool) -> None:
        d = self.current
        if d is None:
            return
        self.current = None
        proc = d["proc"]
        if kill:
            proc.kill()  # SIGKILL by PID: no DURABLE_CLOSE, unacknowledged in flight
            proc.join(5)
            res: dict[str, Any] = {"killed": True}
        else:
            d["stop"].set()
            res = dict(self.inbox.get(f"dsub{d['gen']}", 30), killed=False)
            bn._stop_procs([proc], 10)
        res.update(
            gen=d["gen"], path=d["path"], open=d["open"], ran_s=time.monotonic() - d["started"]
        )
        self.history.append(res)
        log(
            f"  durable subscriber #{d['gen']} {'SIGKILLed' if kill else 'closed'} after "
            f"{res['ran_s']:.1f} s"
        )

    def plan(self, t0: float, restart_s: float, away_s: float) -> None:
        """The first restart ``restart_s`` after ``t0``; each one away ``away_s``."""
        self.restart_s, self.away_s = restart_s, away_s
        self.next_restart = t0 + restart_s
        self.reattach_at = None
        self.kill_next = False

    def turn(self, now: float) -> None:
        """Whatever the schedule says is due at ``now``: attach again, or go away."""
        if self.reattach_at is not None and now >= self.reattach_at:
            self.start()
            self.reattach_at = None
            self.next_restart = time.monotonic() + self.restart_s
        elif self.reattach_at is None and now >= self.next_restart:
            self.stop(self.kill_next)
            self.kill_next = not self.kill_next
            self.reattach_at = time.monotonic() + self.away_s
