#!/usr/bin/env python3
"""Where one message's pass goes at each node of a chain at a low rate, step by step.

    .venv/bin/python benchmarks/trace_pass.py                 # 2,000 msg/s for 5 s, ~2 min
    .venv/bin/python benchmarks/trace_pass.py --rate 500 --seconds 10
    .venv/bin/python benchmarks/trace_pass.py --pure          # the pure-Python path

``profile_chain.py --rate`` says what a node's CPU does in total; this says what lies on one
message's way through a node, in order. It copies the sources, writes a time stamp
(``time.perf_counter_ns``) at fixed places of the copy (:data:`MARKS`: the loop's poll, a
frame received, decoded, checked, relayed or taken, the batch's end, a link frame taken by
the shortcut (:mod:`zbroker.node.shortcut`, a lone message's way at B and C) and its
delivery frame sent, the link flush, the ROUTER's two sends, the pass's end), builds the
copy's compiled modules (as ``make build`` does; ``--pure``: none), and runs
``chain_run.py``'s chain (A, B dialing A, C dialing B: ``zbroker start`` processes,
discovery off) with its paced publisher on A and its subscriber on C. Each node writes its
stamps when it stops; printed per node, over the passes that handled a message (the first
quarter left out: warm-up): p50, p90, p99 and mean of each step between two stamps, and of
the whole way from the poll's return to the frame's send (or, on C, to the end of the
delivery); then the length of the passes that took no message while messages came (timers,
interest, requests: a message that comes meanwhile waits), and the longest. Last, between
the nodes: per frame, its send's return at A (or B) to the next node's poll returning for
it (every process stamps on one clock, ``CLOCK_MONOTONIC``): the link's way through
libzmq's threads of both processes and the loopback.

A stamp costs about 0.1 µs warm, more cold, so the steps are slightly longer than they
are unstamped; their sum against ``bench_latency.py``'s figures tells what share of a
chain's latency is the nodes' own work. An anchor that is not in the sources exactly once
stops the run with its name (the code moved: move the anchor). Every process is stopped
by its PID (``chain_run.stop_processes``).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

#: the checkout (as benchmarks/_common.py has it: this module is also imported by a test)
REPO = Path(__file__).resolve().parent.parent

TRACE_ENV = "ZB_PASS_TRACE_DIR"
#: the module the copy gets: stamps in a list, written by the node loop when it ends
TRACE_MODULE = (
    '''"""Time stamps of benchmarks/trace_pass.py (in its copy of the sources only)."""
import os
import time

T = []
_p = time.perf_counter_ns


def mark(i):
    if len(T) < 3_000_000:
        T.append((i, _p()))


def polled(poll, timeout):
    mark(0)
    ready = poll(timeout)
    mark(1)
    return ready


def dump():
    d = os.environ.get("'''
    + TRACE_ENV
    + """")
    if d:
        with open(os.path.join(d, f"trace-{os.getpid()}.txt"), "w") as f:
            f.writelines(f"{i} {t}\\n" for i, t in T)
"""
)
#: stamp number -> what has just happened
NAMES = {
    0: "poll called",
    1: "poll returned",
    2: "frame received",
    3: "frame decoded",
    4: "link frame handled",
    5: "messages reached the pipeline",
    6: "link runs checked",
    7: "relayed",
    8: "batch ended (sinks, deliveries)",
    10: "link send: identity",
    11: "link send: frame",
    12: "link frame sent",
    13: "publishes checked",
    14: "publishes taken",
    20: "handlers done",
    21: "adverts flushed",
    22: "outboxes flushed",
    23: "pass ended",
    24: "taken by the shortcut",
    25: "delivery: frame made",
    26: "delivery sent",
}
#: the stamps that say a pass took messages (a batch ended, or the shortcut took a frame),
#: and those that say its frame had left (a link's send, a delivery's send returned)
TOOK = (8, 24)
SENT = (12, 26)
#: (file, a line of it, stamp before it or None, stamp after it or None): the line (its
#: text without indentation) must be in the file as many times as the last field says
MARKS: list[tuple[str, str, int | None, int | None, int]] = [
    ("zbroker/node/kernel.py", "ready = self.poller.poller.poll(timeout)", None, None, 1),
    ("zbroker/node/kernel.py", "flush_adverts(self.links)", 20, 21, 1),
    ("zbroker/node/kernel.py", "flush_outboxes(self.links)", None, 22, 1),
    ("zbroker/node/kernel.py", "self.links.goodbye(time.monotonic())", None, None, 1),
    ("zbroker/node/kernel.py", "def _send_confirms(self) -> None:", None, None, 1),
    ("zbroker/links/dialer.py", "body = read(zmq.NOBLOCK)", None, 2, 1),
    ("zbroker/links/dialer.py", "value = wire.decode_frame(body)", None, 3, 1),
    (
        "zbroker/links/dialer.py",
        "budget -= table.on_frame(link, value, len(body), now)",
        None,
        4,
        1,
    ),
    ("zbroker/node/pipeline.py", "raw = recv(zmq.NOBLOCK)", None, 2, 1),
    ("zbroker/node/pipeline.py", "elements = publish_elements(raw, errors)", None, 3, 1),
    (
        "zbroker/node/pipeline.py",
        "self._counted(*take_runs(self, runs, out, plans, prepared))",
        13,
        14,
        1,
    ),
    ("zbroker/node/pipeline.py", "if op == _MSGR:", 5, None, 1),
    (
        "zbroker/node/pipeline.py",
        "loops = relay(self, runs, out)  # (a run's route once: .relay)",
        6,
        7,
        1,
    ),
    ("zbroker/node/pipeline.py", "self.end_batch(None, out)", None, 8, 2),
    ("zbroker/links/table.py", "send(link.ident, _NOBLOCK_MORE)", 10, 11, 1),
    ("zbroker/links/table.py", "send(frame, _NOBLOCK)", None, 12, 1),
    (
        "zbroker/links/dialer.py",
        "n = shortcut(link, body, now)  # (a flood's view too: walked in place)",
        None,
        24,
        1,
    ),
    (
        "zbroker/node/delivery.py",
        'self._send(b"".join((self.prefix[pattern], head, entries, U64.pack(n))), zmq.NOBLOCK)',
        25,
        26,
        1,
    ),
]
#: what the lines of MARKS without a stamp become (the poll, the pass's end, the dump)
REWRITE = {
    "ready = self.poller.poller.poll(timeout)": (
        "ready = _trace.polled(self.poller.poller.poll, timeout)"
    ),
    "self.links.goodbye(time.monotonic())": (
        "_trace.dump()\n{i}self.links.goodbye(time.monotonic())"
    ),
    "def _send_confirms(self) -> None:": "    _mark(23)\n\n{i}def _send_confirms(self) -> None:",
}


def stamp(text: str, rel: str) -> str:
    """``text`` (the file ``rel``) with the stamps of MARKS and the trace module imported."""
    lines = text.split("\n")
    for file, line, before, after, count in MARKS:
        if file != rel:
            continue
        at = [k for k, ln in enumerate(lines) if ln.strip() == line]
        if len(at) != count:
            raise SystemExit(f"{rel}: {line!r} found {len(at)} times, not {count} (moved?)")
        for k in at:
            indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
            body = REWRITE.get(line, line).replace("{i}", indent)
            if before is not None:
                body = f"_mark({before})\n{indent}{body}"
            if after is not None:
                body = f"{body}\n{indent}_mark({after})"
            lines[k] = indent + body
    first = lines.index("from __future__ import annotations") + 1
    lines.insert(first, "from zbroker import _trace\nfrom zbroker._trace import mark as _mark")
    return "\n".join(lines)


def patched_copy(pure: bool) -> Path:
    """The sources copied as every benchmark copies them (removed at exit), stamped, their
    compiled modules built (``pure``: none)."""
    from _common import snapshot_sources

    return Path(snapshot_sources(prepare=lambda tmp: _stamp_and_build(tmp, pure)))


def _stamp_and_build(tmp: Path, pure: bool) -> None:
    from _common import build_copy

    for rel in sorted({m[0] for m in MARKS}):
        path = tmp / rel
        path.write_text(stamp(path.read_text(), rel))
    (tmp / "zbroker" / "_trace.py").write_text(TRACE_MODULE)
    if pure:  # (the nodes' environment drops ZBROKER_* variables: no extensions instead)
        for ext in (tmp / "zbroker").rglob("*.so"):
            ext.unlink()
        return
    build_copy(tmp)  # (only the stamped modules no longer match their extensions)


def run_chain(args: argparse.Namespace, tmp: Path) -> dict[str, int]:
    """``chain_run.py``'s chain (data directories in ``tmp``, the stamped copy) under a
    paced publisher: a second of warm-up, then ``args.seconds``; the nodes' PIDs (each
    node writes its stamps when it is stopped)."""
    from chain_run import NODES, run_flood

    pids: dict[str, int] = {}

    def during(running: dict[str, int]) -> None:
        pids.update({n: running[n] for n in NODES})
        time.sleep(args.seconds)

    _, published, delivered, elapsed = run_flood(args, tmp, str(tmp), during)
    print(
        f"in {elapsed:.1f} s: {published:,.0f} msg/s published on A, "
        f"{delivered:,.0f} delivered on C (counted per 1,024)"
    )
    return pids


def passes(path: Path) -> tuple[list[list[tuple[int, int]]], list[float]]:
    """A node's stamps cut into passes (at each poll): those that took messages, and the
    length of each other pass while messages came (poll returned -> pass ended, µs; not
    the idle timer passes before the first message or after the last), the first quarter
    of each left out (warm-up)."""
    taken: list[list[tuple[int, int]]] = []
    other: list[tuple[int, float]] = []
    cur: list[tuple[int, int]] = []
    for line in path.read_text().splitlines():
        i, t = map(int, line.split())
        if i == 0 and cur:
            if any(m in TOOK for m, _ in cur):
                taken.append(cur)
            elif len(cur) > 2 and cur[-1][0] == 23:
                other.append((cur[1][1], (cur[-1][1] - cur[1][1]) / 1000))
            cur = []
        cur.append((i, t))
    taken = taken[len(taken) // 4 :]
    if not taken:
        return [], []
    first, last = taken[0][0][1], taken[-1][0][1]
    return taken, [d for at, d in other if first <= at <= last]


def _row(label: str, v: list[float]) -> str:
    v = sorted(v)
    n = len(v)
    return (
        f"  {label:58s} {n:7,d} {v[n // 2]:7.1f} {v[int(n * 0.9)]:7.1f} "
        f"{v[int(n * 0.99)]:7.1f} {sum(v) / n:7.1f}"
    )


def report(name: str, role: str, taken: list[list[tuple[int, int]]], other: list[float]) -> None:
    steps: dict[tuple[int, int], list[float]] = defaultdict(list)
    whole: list[float] = []
    for p in taken:
        for (a, ta), (b, tb) in itertools.pairwise(p):
            steps[a, b].append((tb - ta) / 1000)
        end = _sent_at(p) or next(t for m, t in p if m in TOOK)
        whole.append((end - p[1][1]) / 1000)
    print(f"\nnode {name} ({role}): {len(taken):,} passes that took messages; µs per pass")
    print(f"  {'step':58s} {'passes':>7s} {'p50':>7s} {'p90':>7s} {'p99':>7s} {'mean':>7s}")
    order = sorted(steps.items(), key=lambda kv: _first_at(taken, kv[0]))
    for (a, b), v in order:
        if len(v) >= len(taken) // 3:  # (not a path a few passes took: a second frame)
            print(_row(f"{NAMES[a]} -> {NAMES[b]}", v))
    print(_row("the way: poll returned -> sent (C: batch ended)", whole))
    if other:  # (timers, interest, requests: a message that comes meanwhile waits)
        print(_row("passes without a message: poll returned -> ended", other))
        print(f"  the longest pass without a message: {max(other):,.1f} µs")


def _first_at(taken: list[list[tuple[int, int]]], step: tuple[int, int]) -> int:
    """Where a step first comes in a pass (for the printed order)."""
    for p in taken[:50]:
        marks = [m for m, _ in p]
        for k in range(len(marks) - 1):
            if (marks[k], marks[k + 1]) == step:
                return k
    return 99


#: a frame sent that the next node's poll did not return for within this long (ns) is not
#: matched: that poll woke for something else, or the frame's pass was left out
HOP_MATCH_NS = 1_000_000


def _sent_at(p: list[tuple[int, int]]) -> int | None:
    """When a pass's frame had left (its link send or delivery send returned), or None."""
    return next((t for m, t in p if m in SENT), None)


def hops(sender: list[list[tuple[int, int]]], receiver: list[list[tuple[int, int]]]) -> list[float]:
    """Per frame the sender sent, µs from its send's return to the receiver's next poll
    return that took messages: libzmq's threads of both processes, the loopback, and the
    receiver's wake-up. Every process stamps with ``time.perf_counter_ns`` (on Linux
    ``CLOCK_MONOTONIC``, one clock for all of them), so stamps of two nodes compare."""
    woke = [p[1][1] for p in receiver]
    out: list[float] = []
    for p in sender:
        sent = _sent_at(p)
        if sent is None:
            continue
        k = bisect.bisect_left(woke, sent)
        if k < len(woke) and woke[k] - sent < HOP_MATCH_NS:
            out.append((woke[k] - sent) / 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rate", type=int, default=2000, help="msg/s, paced (default 2,000)")
    ap.add_argument(
        "--seconds", type=float, default=5.0, help="measured, after 1 s of warm-up (default 5)"
    )
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--pure", action="store_true", help="the pure-Python path (no extensions)")
    args = ap.parse_args(argv)
    if args.rate < 1 or args.seconds <= 0:
        ap.error("--rate must be at least 1 and --seconds positive")
    tmp = patched_copy(args.pure)
    import bench_node as bn

    os.environ[TRACE_ENV] = str(tmp)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load}, "
        f"sources {bn.source_digest()} (stamped), {bn.compiled_state()}"
    )
    print(f"chain A -> B -> C, {args.rate:,} msg/s of {args.size} B for {args.seconds:g} s")
    pids = run_chain(args, tmp)
    roles = {"A": "publisher's node", "B": "middle, only forwards", "C": "subscriber's node"}
    taken: dict[str, list[list[tuple[int, int]]]] = {}
    for name, pid in pids.items():
        path = tmp / f"trace-{pid}.txt"
        if not path.is_file():
            print(f"\nnode {name}: no stamps written (did it stop cleanly? see its log)")
            continue
        taken[name], other = passes(path)
        report(name, roles[name], taken[name], other)
    print("\nbetween the nodes: a frame's send returned -> the next node's poll returned; µs")
    print(f"  {'link':58s} {'frames':>7s} {'p50':>7s} {'p90':>7s} {'p99':>7s} {'mean':>7s}")
    for a, b in (("A", "B"), ("B", "C")):
        if a in taken and b in taken and (v := hops(taken[a], taken[b])):
            print(_row(f"{a} -> {b}", v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
