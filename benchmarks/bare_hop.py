#!/usr/bin/env python3
"""How much of the chain's latency is node B's own pass: B as it is, beside B as a bare hop.

    .venv/bin/python benchmarks/bare_hop.py                       # 3 rounds, ~7 minutes
    .venv/bin/python benchmarks/bare_hop.py --rounds 5 --variants node,python

bench_peers.py's zbroker chain (A; B dialing A; C dialing B: bench_network's nodes, every
feature on) with its latency row's clients: a paced publisher on A (2,000 msg/s, 100 B)
and a subscriber on C. In a copy of the sources (its kernel given an import and two calls,
built as ``make build`` builds it), node B, once it has forwarded 50 messages (inside the run's
lead-in: the subscriber's interest has reached A), becomes what ``--variants`` names:

* ``node``: nothing changes but a call per pass that says so (the reference);
* ``phases``: each pass of B ends after the link flush (its link ticks kept): no events,
  no features' commit hooks, no store commit; what the phases after the send cost;
* ``work``: a loop like ``python``'s that does B's own work on each link frame from A
  (decode, checks, dedupe, route, encode, send: ``hop_steps.py``) and nothing of the pass
  or the pipeline around it: what a lean path keeping today's steps would cost;
* ``head``: ``work``, but a frame of one run whose head came before is read in C
  (``zb_run_head`` in ``bare_hop.c``: checked to its end), deduped by its seq range and
  sent on as its bytes behind the head B writes (``hop_steps.py``): a lean path's
  candidate;
* ``python``: a bare pyzmq loop (:func:`python_hop`) that moves each frame from B's DEALER
  (its link to A) to C's identity on B's ROUTER and back, nothing else: no decode,
  dedupe, route or counters (no relay a network could use, the bound a lean one in
  Python approaches);
* ``c``: the same loop in C on libzmq (``bare_hop.c``, built against the libzmq pyzmq
  loads, called through ctypes with the GIL released): the bound on libzmq's C API.

The variants alternate (their order reversed every other round) so each meets the same
machine. Printed: each run's p50 / p99 publish -> callback, lost, CPU µs per message of
each process; then per variant the median and range of p50 and p99, and the median p50
against ``node``'s. A B in a loop of its own (``work``, ``head``, ``python``, ``c``) no longer
answers the stop: its process is stopped by its PID after the others
(``bench_node._stop_procs``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq

VARIANTS = ("node", "phases", "work", "head", "python", "c")
VARIANT_ENV = "ZB_BARE_HOP"
LIB_ENV = "ZB_BARE_HOP_LIB"
C_SOURCE = Path(__file__).resolve().parent / "bare_hop.c"

#: the copy's switch (zbroker/_bare_hop.py there): which variant, when, and B's tick
SWITCH_MODULE = '''"""benchmarks/bare_hop.py's switch (in its copy of the sources only)."""
import os
import time

from .const import TICK_INTERVAL

VARIANT = os.environ.get("ZB_BARE_HOP", "node")


def _b(node):
    return node.broker_id == "bench-B"


def ready(node):
    return VARIANT not in ("node", "phases") and _b(node) and node.counters.forwarded >= 50


def skip_phases(node):
    return VARIANT == "phases" and _b(node) and not node.events and not node.confirms


def tick(node):  # (the kernel's tick, as _pass ends with it)
    now = time.monotonic()
    if now >= node._next_tick:
        node._next_tick = now + TICK_INTERVAL
        node.links.tick(now, node.dialer.dial)
        for f in node._timers:
            f.tick(now)


def run(node):
    import bare_hop  # (benchmarks/ is on the path of the node's process: spawned from it)

    bare_hop.take_over(node, VARIANT)
'''
#: (anchor in zbroker/node/kernel.py, what follows it in the copy)
PATCHES = (
    ("import zmq\n", "\nfrom .. import _bare_hop\n"),
    (
        "        while self._running:\n            self._pass()\n",
        "            if _bare_hop.ready(self):\n"
        "                _bare_hop.run(self)\n"
        "                break\n",
    ),
    (
        "        if self.links.dirty:\n            flush_outboxes(self.links)\n",
        "        if _bare_hop.skip_phases(self):\n"
        "            _bare_hop.tick(self)\n"
        "            return\n",
    ),
)


def patch_kernel(text: str) -> str:
    """The kernel's source with the switch's calls; each anchor must be there once."""
    for anchor, added in PATCHES:
        if text.count(anchor) != 1:
            raise RuntimeError(f"bare_hop: the kernel no longer has this once: {anchor!r}")
        text = text.replace(anchor, anchor + added)
    return text


def _prepare(tmp: Path) -> None:
    from _common import build_copy

    kernel = tmp / "zbroker" / "node" / "kernel.py"
    kernel.write_text(patch_kernel(kernel.read_text()))
    (tmp / "zbroker" / "_bare_hop.py").write_text(SWITCH_MODULE)
    build_copy(tmp)


# -- the bare hops -----------------------------------------------------------------------


def python_hop(
    dealer: zmq.Socket[bytes], router: zmq.Socket[bytes], ident: bytes, limit: int
) -> int:
    """Move frames DEALER -> (``ident``, frame) on the ROUTER, and ``ident``'s frames on
    the ROUTER -> DEALER (another identity's are dropped); return after ``limit`` frames
    moved (0: never)."""
    poller = zmq.Poller()
    poller.register(dealer, zmq.POLLIN)
    poller.register(router, zmq.POLLIN)
    nb, more, moved = zmq.NOBLOCK, zmq.SNDMORE, 0
    while True:
        for sock, _ in poller.poll():
            while True:
                try:
                    first = sock.recv(nb)
                except zmq.Again:
                    break
                if sock is dealer:
                    router.send(ident, more)
                    router.send(first)
                else:
                    frame = router.recv()
                    if first != ident:
                        continue
                    dealer.send(frame)
                moved += 1
                if moved == limit:
                    return moved


def build_c(out_dir: Path) -> Path:
    """``bare_hop.c`` built as a shared library against pyzmq's libzmq; RuntimeError
    saying why it cannot be (no C compiler, no bundled libzmq, a failed build)."""
    from peer_relays import _libzmq

    cc = shutil.which("gcc") or shutil.which("cc")
    lib = _libzmq()
    if cc is None or lib is None:
        raise RuntimeError("no C compiler" if cc is None else "no bundled libzmq in pyzmq.libs")
    out = out_dir / "libbarehop.so"
    cmd = [cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(C_SOURCE), str(lib)]
    done = subprocess.run(
        [*cmd, f"-Wl,-rpath,{lib.parent}"], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"{cc} failed: {done.stderr.strip()[-300:]}")
    return out


def c_hop(
    lib_path: str, dealer: zmq.Socket[bytes], router: zmq.Socket[bytes], ident: bytes, limit: int
) -> int:
    """:func:`python_hop` in C (``bare_hop.c``, the library at ``lib_path``)."""
    lib = ctypes.CDLL(lib_path)
    fn = lib.zb_bare_hop
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    fn.argtypes += [ctypes.c_long]
    fn.restype = ctypes.c_long
    return int(fn(dealer.underlying, router.underlying, ident, len(ident), limit))


def take_over(node: Any, variant: str) -> None:
    """In node B's thread: serve as a bare hop between its two links from now on."""
    dealer = next(iter(node.links.dialers.values())).socket
    router = node.sockets.control
    ident = next(ln.ident for ln in node.links.all() if not ln.dialer and ln.ident)
    if variant == "c":
        c_hop(os.environ[LIB_ENV], dealer, router, ident, 0)
    elif variant in ("work", "head"):
        import hop_steps

        if variant == "work":
            hop_steps.work_hop(node, dealer, router, ident)
        else:
            hop_steps.head_hop(node, dealer, router, ident, os.environ[LIB_ENV])
    else:
        python_hop(dealer, router, ident, 0)


# -- the runs ----------------------------------------------------------------------------


def run_one(ctx: Any, variant: str, case: dict[str, Any], tmp: str) -> dict[str, Any]:
    """One latency run of bench_peers' zbroker chain with B as ``variant``."""
    import bench_peers as bp

    os.environ[VARIANT_ENV] = variant  # (read by the nodes' processes: spawned after this)
    topo = bp._start_zbroker(ctx, 3, tmp)
    try:
        return bp.run_case(ctx, "zbroker", topo, case)
    finally:
        bp._stop_topology(topo)


def summary(results: dict[str, list[dict[str, Any]]]) -> None:
    ref = [r["latency"]["p50_ms"] for r in results.get("node", [])]
    base = statistics.median(ref) if ref else None  # (no "node" among the variants: none)
    print("\nper variant, µs: median p50 (range), median p99 (range)")
    for v, runs in results.items():
        p50 = [r["latency"]["p50_ms"] * 1e3 for r in runs]
        p99 = [r["latency"]["p99_ms"] * 1e3 for r in runs]
        vs = f", p50 {statistics.median(p50) - base * 1e3:+.0f} against node" if base else ""
        print(
            f"  {v:7} p50 {statistics.median(p50):5.0f} ({min(p50):.0f}-{max(p50):.0f}), "
            f"p99 {statistics.median(p99):5.0f} ({min(p99):.0f}-{max(p99):.0f}){vs}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds (every variant once each)")
    ap.add_argument("--seconds", type=float, default=5.0, help="per latency run (default 5)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS) or args.rounds < 1 or args.seconds <= 0:
        ap.error(f"--variants among {','.join(VARIANTS)}; --rounds >= 1; --seconds > 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="zbroker-barehop-")
    try:
        if "c" in variants or "head" in variants:
            os.environ[LIB_ENV] = str(build_c(Path(tmp)))
        from _common import snapshot_sources

        snapshot_sources(prepare=_prepare)
        import multiprocessing as mp

        import bench_node as bn

        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load}, ", end="")
        print(f"sources {bn.source_digest()} (B's switch added), {bn.compiled_state()}")
        n = int(bn.LATENCY_RATE * args.seconds) + bn.LATENCY_LEAD_IN
        case = {"mode": "latency", "n": n, "size": 100, "rate": bn.LATENCY_RATE}
        ctx = mp.get_context("spawn")
        results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        for i in range(args.rounds):
            for v in variants if i % 2 == 0 else variants[::-1]:
                r = run_one(ctx, v, case, tmp)
                results[v].append(r)
                cpu = " ".join(f"{k} {x:.0f}" for k, x in r["cpu_us_per_msg"].items())
                lat = r["latency"]
                print(
                    f"round {i + 1} {v:7} p50 {lat['p50_ms'] * 1e3:5.0f} p99 "
                    f"{lat['p99_ms'] * 1e3:5.0f} µs, lost {r['lost']}, CPU µs/msg {cpu}",
                    flush=True,
                )
        summary(results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
