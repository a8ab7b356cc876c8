#!/usr/bin/env python3
"""A randomized fault run of a 5-node mesh (issue 18): nothing lost, nothing doubled.

    .venv/bin/python benchmarks/fault_mesh.py                   # 10 minutes, seed 1
    .venv/bin/python benchmarks/fault_mesh.py --minutes 1 --seed 7 --json

Five ``zbroker start`` processes on 127.0.0.1: a ring N1-N2-N3-N4-N5-N1 with the chord
N1-N3 (fast heartbeats). Two persistent publishers in this process (``confirm=True``), P1
with the address list N1,N2 and P2 with N3,N4, so a node killed under them makes them fail
over; a publish that fails is sent again (the idempotent producer makes that exactly once).
Two durable subscriber processes: ``d4`` on N4 (slow: 2 ms per message, so its credit
window fills) and ``d5`` on N5. A non-persistent publisher on N2 and a live subscriber on N5
(with ``on_gap``). Every link goes through a :class:`~cutproxy.CutProxy` (a TCP relay
in this process). On a random schedule (``--seed``) one fault at a time: SIGKILL of N1..N4
and a restart a moment later, SIGSTOP of one for 2-4 s then SIGCONT (which cuts every
link of that node: its peers declare them dead), or a cut of one link for 2-4 s while both
its nodes run. N5 stays up (the live subscriber's node).

At the end (every node up again) it checks, and prints with the faults survived:

* persistent + durable: every confirmed message reached both durables, exactly once apart
  from repeats flagged ``redelivered``; nothing unpublished arrived;
* order: per publisher, the deliveries form at most one in-order run per fault plus one
  (order holds along a route; a relay that dies holding messages delivers them on return,
  README "Messages that must not be missed");
* non-persistent: a loss is never silent: if the live subscriber missed any, it was told
  (gap notices) — what was lost is printed beside what the nodes counted.

:func:`run` is what ``tests/integration/test_fault_mesh.py`` runs at a small scale.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mesh_nodes import NODES, WAIT, Mesh, Proc, Start, inject_fault
from mesh_traffic import DURABLE, Live, PersistentPublisher

__all__ = ["NODES", "Report", "increasing_runs", "run"]


@dataclass
class Report:
    faults: list[str] = field(default_factory=list)
    confirmed: dict[str, int] = field(default_factory=dict)
    delivered: dict[str, int] = field(default_factory=dict)
    redelivered: dict[str, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    live_sent: int = 0
    live_received: int = 0
    live_gaps: int = 0
    counted_drops: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def increasing_runs(order: list[int]) -> int:
    """The fewest increasing subsequences covering ``order`` (its longest decreasing
    subsequence, by patience sorting)."""
    piles: list[int] = []
    for x in order:
        lo, hi = 0, len(piles)
        while lo < hi:
            mid = (lo + hi) // 2
            if piles[mid] < x:
                hi = mid
            else:
                lo = mid + 1
        if lo == len(piles):
            piles.append(x)
        else:
            piles[lo] = x
    return len(piles)


def _drain(proc: Proc, into: list[dict[str, Any]]) -> None:
    while True:
        line = proc.readline(0.01)
        if line is None:
            return
        into.append(json.loads(line))


def _check(report: Report, name: str, events: list[dict[str, Any]], pubs: dict[str, Any]) -> None:
    firsts: dict[str, list[int]] = {p: [] for p in pubs}
    seen: set[tuple[str, int]] = set()
    for e in events:
        key = (e["p"], e["i"])
        if key in seen:
            if not e["r"]:
                report.problems.append(f"{name}: {key} delivered twice, not flagged")
            report.redelivered[name] = report.redelivered.get(name, 0) + 1
            continue
        seen.add(key)
        firsts[e["p"]].append(e["i"])
    for p, pub in pubs.items():
        got = set(firsts[p])
        missing = pub.confirmed - got
        if missing:
            shown = ", ".join(map(str, sorted(missing)[:10]))
            report.problems.append(f"{name}: {len(missing)} confirmed of {p} missing ({shown})")
        if got - set(range(pub.n)):
            report.problems.append(f"{name}: messages of {p} that were never published")
        runs = increasing_runs(firsts[p])
        report.runs[f"{name}/{p}"] = runs
        if runs > len(report.faults) + 1:
            report.problems.append(f"{name}/{p}: {runs} in-order runs after {report.faults}")
    report.delivered[name] = len(seen)


def run(
    start: Start,
    tmp: Path,
    ports: dict[str, int],
    wait: Callable[..., bool],
    *,
    zbroker: str,
    seconds: float,
    faults: int,
    seed: int,
    rate: float = 40.0,
) -> Report:
    """The whole run; the caller stops every process ``start`` made (by PID)."""
    mesh = Mesh(start, tmp, ports, zbroker)
    try:
        return _run(mesh, start, tmp, wait, seconds=seconds, faults=faults, seed=seed, rate=rate)
    finally:
        mesh.close()


def _run(
    mesh: Mesh,
    start: Start,
    tmp: Path,
    wait: Callable[..., bool],
    *,
    seconds: float,
    faults: int,
    seed: int,
    rate: float,
) -> Report:
    subs = _start_mesh(mesh, start, tmp, wait)
    events: dict[str, list[dict[str, Any]]] = {name: [] for name in subs}
    n = int(seconds * rate)
    pubs = {
        "P1": PersistentPublisher("P1", f"{mesh.ep('N1')},{mesh.ep('N2')}", n, rate),
        "P2": PersistentPublisher("P2", f"{mesh.ep('N3')},{mesh.ep('N4')}", n, rate),
    }
    live = Live(mesh, rate * 5)
    _start_traffic(mesh, wait, pubs, live)
    report = Report()
    rng = random.Random(seed)
    gap = seconds / (faults + 1)
    for _ in range(faults):
        time.sleep(rng.uniform(0.5 * gap, gap))
        report.faults.append(inject_fault(mesh, rng, wait))
    for pub in pubs.values():
        pub.join(seconds * 10 + WAIT)
        if pub.error is not None or pub.is_alive():
            report.problems.append(f"publisher {pub.pub}: {pub.error or 'did not finish'}")
    live.stop.set()
    live.thread.join(WAIT)

    def complete() -> bool:
        for name, proc in subs.items():
            _drain(proc, events[name])
        return all(
            {(p, i) for p, pub in pubs.items() for i in pub.confirmed}
            <= {(e["p"], e["i"]) for e in events[name]}
            for name in subs
        )

    wait(complete, WAIT)
    time.sleep(1.0)  # repeats, if any, come now
    for name, proc in subs.items():
        _drain(proc, events[name])
        _check(report, name, events[name], pubs)
    report.confirmed = {p: len(pub.confirmed) for p, pub in pubs.items()}
    _tally_live(report, mesh, live)
    return report


def _start_mesh(mesh: Mesh, start: Start, tmp: Path, wait: Callable[..., bool]) -> dict[str, Proc]:
    """Every node, then the durable subscribers (``d4`` slow on N4, ``d5`` on N5), once
    their interest has reached N1."""
    from zbroker import Client

    for name in NODES:
        mesh.start(name)
    for name in NODES:
        if not mesh.up(name, wait):
            raise RuntimeError(f"{name} did not start")
    script = tmp / "durable.py"
    script.write_text(DURABLE)
    subs = {
        "d4": start([sys.executable, str(script), mesh.ep("N4"), "d4", "0.002"]),
        "d5": start([sys.executable, str(script), mesh.ep("N5"), "d5", "0"]),
    }
    for name, proc in subs.items():
        if proc.readline(WAIT) is None:
            raise RuntimeError(f"durable subscriber {name} did not start")

    def routed() -> bool:
        with Client(mesh.ep("N1"), timeout=5.0) as c:
            origins = {r["origin"] for r in c.routes() if r["pattern"] == "F.>"}
        return origins == {"N4", "N5"}

    if not wait(routed, WAIT):
        raise RuntimeError("the durables' interest did not reach N1")
    return subs


def _start_traffic(
    mesh: Mesh, wait: Callable[..., bool], pubs: dict[str, PersistentPublisher], live: Live
) -> None:
    """The live publisher once the live subscriber's interest reached N2, and the
    persistent publishers."""
    from zbroker import Client

    def live_routed() -> bool:  # N5's live interest has reached the live publisher's node
        with Client(mesh.ep("N2"), timeout=5.0) as c:
            return any(r["pattern"] == "L.>" and r["origin"] == "N5" for r in c.routes())

    if not wait(live_routed, WAIT):
        raise RuntimeError("the live subscriber's interest did not reach N2")
    live.thread.start()
    for pub in pubs.values():
        pub.start()


def _tally_live(report: Report, mesh: Mesh, live: Live) -> None:
    """The live stream's counts beside the drops the nodes counted; a silent loss is a
    problem."""
    from zbroker import Client

    report.live_sent, report.live_received, report.live_gaps = (
        live.sent, live.received, live.gaps,
    )  # fmt: skip
    for name in NODES:
        with Client(mesh.ep(name), timeout=5.0) as c:
            for reason, k in c.status()["counters"]["dropped"].items():
                report.counted_drops[reason] = report.counted_drops.get(reason, 0) + k
    live.sub_client.close()
    if not live.received:
        report.problems.append(f"the live subscriber got nothing of {live.sent} sent")
    if live.sent > live.received and not live.gaps:
        report.problems.append(f"{live.sent - live.received} live messages lost, nobody told")


class _Child:
    """A child process whose stdout lines a thread reads (the script's own Proc)."""

    def __init__(self, argv: list[str]) -> None:
        import queue
        import subprocess

        self.popen = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.put(line)

    def readline(self, timeout: float) -> str | None:
        import queue

        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)  # a stopped child cannot handle TERM
            self.popen.terminate()
            try:
                self.popen.wait(5)
            except Exception:
                self.popen.kill()


def _wait(cond: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return cond()


def main() -> None:
    import shutil
    import socket
    import tempfile

    from _common import REPO, snapshot_sources

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--faults", type=int, help="default: one every 20 s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=40.0, help="per persistent publisher")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    snapshot_sources()
    seconds = args.minutes * 60
    faults = args.faults if args.faults is not None else max(1, int(seconds // 20))
    children: list[_Child] = []

    def start(argv: list[str]) -> Proc:
        children.append(_Child(argv))
        return children[-1]

    ports = {}
    for name in NODES:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[name] = s.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="zbroker-faults-"))
    zbroker = str(Path(sys.executable).parent / "zbroker")
    began = time.monotonic()
    try:
        report = run(
            start, tmp, ports, _wait, zbroker=zbroker, seconds=seconds, faults=faults,
            seed=args.seed, rate=args.rate,
        )  # fmt: skip
    finally:
        for child in children:
            child.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    took = time.monotonic() - began
    if args.json:
        print(json.dumps({**report.__dict__, "seconds": took, "seed": args.seed}))
    else:
        print(f"fault_mesh: seed {args.seed}, {took:.0f} s, sources {REPO}")
        for i, f in enumerate(report.faults, 1):
            print(f"  fault {i}: {f}")
        checked = sum(report.delivered.values())
        print(f"  faults survived: {len(report.faults)}; persistent messages checked: {checked}")
        print(f"  confirmed {report.confirmed}, delivered (distinct) {report.delivered}")
        print(f"  redelivered (flagged) {report.redelivered}, in-order runs {report.runs}")
        print(
            f"  live: sent {report.live_sent}, received {report.live_received}, "
            f"gap notices {report.live_gaps}; nodes counted drops {report.counted_drops}"
        )
        print("  PASS" if not report.problems else f"  FAIL: {report.problems}")
    sys.exit(1 if report.problems else 0)


if __name__ == "__main__":
    main()
