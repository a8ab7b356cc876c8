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
from typing import Any, Protocol

if __package__:  # imported as benchmarks.fault_mesh (the tests)
    from .cutproxy import CutProxy
else:  # run as a script
    from cutproxy import CutProxy

NODES = ("N1", "N2", "N3", "N4", "N5")
DIALS = {"N1": (), "N2": ("N1",), "N3": ("N2", "N1"), "N4": ("N3",), "N5": ("N4", "N1")}
FAULTY = ("N1", "N2", "N3", "N4")
WAIT = 120.0

NODE = '[node]\nid = "{id}"\nhost = "127.0.0.1"\nport = {port}\ndata_dir = "{data}"\n'
LINK = (
    '\n[[link]]\nname = "{name}"\nuri = "tcp://127.0.0.1:{port}"\nheartbeat_interval = 0.2\n'
    "heartbeat_timeout = 1.0\nreconnect_initial_delay = 0.1\nreconnect_max_delay = 0.5\n"
)
DURABLE = r"""
import json, sys, time
from zbroker import Client
endpoint, name, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
def on_message(msg):
    body = json.loads(msg.payload)
    print(json.dumps({"p": body["p"], "i": body["i"], "r": msg.redelivered}), flush=True)
    if delay:
        time.sleep(delay)
client = Client(endpoint, timeout=30.0)
client.subscribe("F.>", on_message, durable=name, credit=50)
print(json.dumps({"ready": True}), flush=True)
import threading
threading.Event().wait()
"""


class Proc(Protocol):
    """What the run needs of a process it started (tests pass their fixture's)."""

    popen: Any

    def readline(self, timeout: float) -> str | None: ...


Start = Callable[[list[str]], Proc]


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


class Mesh:
    def __init__(self, start: Start, tmp: Path, ports: dict[str, int], zbroker: str) -> None:
        self._start, self.ports, self._zbroker = start, ports, zbroker
        self.configs: dict[str, Path] = {}
        #: link name -> the relay it goes through (a link cut is a cut there)
        self.proxies: dict[str, CutProxy] = {}
        for name in NODES:
            text = NODE.format(id=name, port=ports[name], data=tmp / name)
            for peer in DIALS[name]:
                link = f"{name}-{peer}".lower()
                self.proxies[link] = CutProxy(ports[peer])
                text += LINK.format(name=link, port=self.proxies[link].port)
            self.configs[name] = tmp / f"{name}.toml"
            self.configs[name].write_text(text)
        self.procs: dict[str, Proc] = {}

    def ep(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def link_up(self, link: str) -> bool:
        """Does the node that dials ``link`` (``n3-n1``: N3) have it up?"""
        from zbroker import Client

        with Client(self.ep(link.split("-")[0].upper()), timeout=2.0) as c:
            return any(ln["name"] == link and ln["state"] == "up" for ln in c.status()["links"])

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()

    def start(self, name: str) -> None:
        self.procs[name] = self._start(
            [self._zbroker, "start", "--config", str(self.configs[name])]
        )

    def up(self, name: str, wait: Callable[..., bool]) -> bool:
        from zbroker import Client

        def answers() -> bool:
            try:
                with Client(self.ep(name), timeout=2.0) as c:
                    c.status()
                return True
            except Exception:
                return False

        return wait(answers, WAIT)


class PersistentPublisher(threading.Thread):
    def __init__(self, pub: str, address: str, n: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.pub, self.address, self.n, self.rate = pub, address, n, rate
        self.confirmed: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        from zbroker import Client

        try:
            with Client(self.address, timeout=10.0, publish_timeout=60.0) as c:
                start = time.monotonic()
                for i in range(self.n):
                    time.sleep(max(0.0, start + i / self.rate - time.monotonic()))
                    body = json.dumps({"p": self.pub, "i": i}).encode()
                    for _ in range(20):  # the same message again: its retry (idempotent)
                        try:
                            c.publish(f"F.{self.pub}", body, persistent=True, confirm=True)
                        except Exception:
                            time.sleep(0.5)
                            continue
                        self.confirmed.add(i)
                        break
                    else:
                        raise RuntimeError(f"message {i} not confirmed after 20 tries")
        except BaseException as exc:
            self.error = exc


class Live:
    """Non-persistent publisher on N2 and live subscriber on N5."""

    def __init__(self, mesh: Mesh, rate: float) -> None:
        from zbroker import Client

        self.sub_client = Client(mesh.ep("N5"), timeout=10.0)
        self.received = 0
        self.gaps = 0
        self.sent = 0
        self._lock = threading.Lock()
        handle = self.sub_client.subscribe("L.>", self._on_msg)
        handle.on_gap = self._on_gap
        self._mesh, self._rate = mesh, rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._publish, daemon=True)

    def _on_msg(self, msg: Any) -> None:
        with self._lock:
            self.received += 1

    def _on_gap(self, gap: Any) -> None:
        with self._lock:
            self.gaps += 1

    def _publish(self) -> None:
        from zbroker import Client

        with Client(self._mesh.ep("N2"), timeout=10.0) as c:
            start = time.monotonic()
            while not self.stop.is_set():
                time.sleep(max(0.0, start + self.sent / self._rate - time.monotonic()))
                try:
                    c.publish("L.X", b"x")
                except Exception:
                    continue  # the node is down: not sent, not counted
                self.sent += 1


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


def _fault(mesh: Mesh, rng: random.Random, wait: Callable[..., bool]) -> str:
    """One fault, undone before it returns (every node answers again)."""
    kind = rng.random()
    if kind >= 2 / 3:
        link = rng.choice(sorted(mesh.proxies))
        away = rng.uniform(2.0, 4.0)
        began = time.monotonic()
        mesh.proxies[link].cut()
        # both nodes run; the dialer must see its link die (heartbeat_timeout 1 s)
        died = wait(lambda: not mesh.link_up(link), away)
        time.sleep(max(0.0, away - (time.monotonic() - began)))
        mesh.proxies[link].mend()
        if not died:
            raise RuntimeError(f"link {link} stayed up through a {away:.1f} s cut")
        return f"cut link {link} {away:.1f} s, mended"
    name = rng.choice(FAULTY)
    proc = mesh.procs[name]
    if kind < 1 / 3:
        proc.popen.kill()
        proc.popen.wait(WAIT)
        time.sleep(rng.uniform(0.5, 2.0))
        mesh.start(name)
        what = f"SIGKILL {name}, restarted"
    else:
        proc.popen.send_signal(signal.SIGSTOP)
        away = rng.uniform(2.0, 4.0)
        time.sleep(away)
        proc.popen.send_signal(signal.SIGCONT)
        what = f"SIGSTOP {name} {away:.1f} s, SIGCONT"
    if not mesh.up(name, wait):
        raise RuntimeError(f"{name} did not come back after: {what}")
    return what


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
    events: dict[str, list[dict[str, Any]]] = {name: [] for name in subs}
    for name, proc in subs.items():
        if proc.readline(WAIT) is None:
            raise RuntimeError(f"durable subscriber {name} did not start")

    def routed() -> bool:
        with Client(mesh.ep("N1"), timeout=5.0) as c:
            origins = {r["origin"] for r in c.routes() if r["pattern"] == "F.>"}
        return origins == {"N4", "N5"}

    if not wait(routed, WAIT):
        raise RuntimeError("the durables' interest did not reach N1")
    n = int(seconds * rate)
    pubs = {
        "P1": PersistentPublisher("P1", f"{mesh.ep('N1')},{mesh.ep('N2')}", n, rate),
        "P2": PersistentPublisher("P2", f"{mesh.ep('N3')},{mesh.ep('N4')}", n, rate),
    }
    live = Live(mesh, rate * 5)

    def live_routed() -> bool:  # N5's live interest has reached the live publisher's node
        with Client(mesh.ep("N2"), timeout=5.0) as c:
            return any(r["pattern"] == "L.>" and r["origin"] == "N5" for r in c.routes())

    if not wait(live_routed, WAIT):
        raise RuntimeError("the live subscriber's interest did not reach N2")
    live.thread.start()
    for pub in pubs.values():
        pub.start()
    report = Report()
    rng = random.Random(seed)
    gap = seconds / (faults + 1)
    for _ in range(faults):
        time.sleep(rng.uniform(0.5 * gap, gap))
        report.faults.append(_fault(mesh, rng, wait))
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
    return report


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
