#!/usr/bin/env python3
"""The cost of keeping the persistent dedupe with the store, per message, in one process.

    .venv/bin/python benchmarks/bench_seen.py            # 200,000 messages per case
    .venv/bin/python benchmarks/bench_seen.py --n 50000

``PersistentDedupe.seen`` for N persistent messages of one origin, a store commit every
``--pass-size`` messages (a poll pass), with the state kept in memory only (before) and
with the store (after: ``journal=store.seen``), side by side. Two streams: **in order**
(a chain or tree: the floor moves, nothing is above it) and **a branch** that sees every
third message (each one goes above the floor until the window folds it). The figure is
microseconds per message of dedupe + the pass's commit, on the same store file (WAL,
``synchronous=NORMAL``), which holds nothing else: the cost a relay adds to each
persistent message it takes from a link.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zbroker.features.forward import PersistentDedupe
from zbroker.store import Store


def measure(pseqs: list[int], kept: bool, pass_size: int) -> float:
    """Microseconds per message: dedupe of ``pseqs`` plus a commit per pass."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "s.db")
        d = PersistentDedupe(journal=store.seen if kept else None)
        seen = d.seen
        start = time.perf_counter()
        for i in range(0, len(pseqs), pass_size):
            for p in pseqs[i : i + pass_size]:
                seen("P", 1, p)
            store.commit()
        elapsed = time.perf_counter() - start
        store.close()
    return elapsed / len(pseqs) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=200_000, help="messages per case")
    ap.add_argument("--pass-size", type=int, default=1000, help="messages per store commit")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    args = ap.parse_args(argv)
    streams = {
        "in order": list(range(1, args.n + 1)),
        "branch (every 3rd)": list(range(1, 3 * args.n + 1, 3)),
    }
    print(
        f"{args.n} messages per case, a commit every {args.pass_size}; "
        f"us/message (best of {args.repeat})"
    )
    print(f"{'stream':<22}{'memory':>10}{'store':>10}{'added':>10}")
    for name, pseqs in streams.items():
        before = after = float("inf")
        for _ in range(args.repeat):  # alternated, so load drift falls on both
            before = min(before, measure(pseqs, False, args.pass_size))
            after = min(after, measure(pseqs, True, args.pass_size))
        print(f"{name:<22}{before:>10.2f}{after:>10.2f}{after - before:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
