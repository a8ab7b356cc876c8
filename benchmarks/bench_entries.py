#!/usr/bin/env python3
"""A run's entries into msgpack bytes: msgpack's Packer against the writer of entries.py.

    .venv/bin/python benchmarks/bench_entries.py                  # 100 B and 1 KiB
    .venv/bin/python benchmarks/bench_entries.py --repeat 9

In one process, no sockets. Entries ``[payload, 0, None, seq, ts]`` as a node numbers a
client's publishes (:mod:`zbroker.node.publishes`), timed best of ``--repeat`` repeats
(``timeit``):

* **entries**: a run of 252 entries (a 1 KiB link frame's run) and of 512 (a 100 B one)
  packed by ``msgpack.Packer().pack``, against ``wire.entries.written`` (the C writer of
  ``entries.pxd`` where the module is compiled); ns per entry, and their ratio.
* **frames**: a MSGR frame of one run of 1, 4, 8, 16, 32 entries as a link flush makes it:
  packed in one call (``encode_link``) against spliced with the run's entries written
  (``splice.spliced_msgr``); ns per frame. Below ``WRITE_MIN_ENTRIES`` a run is packed.

Printed with how many of zbroker's compiled modules run compiled; run from its source
the writer writes nothing and the second column is n/a. Like every benchmark here it
measures a copy of the sources (``_common.snapshot_sources``).
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Callable
from typing import Any

from _common import snapshot_sources

#: a run's entries as a link frame holds them: (payload bytes, entries)
RUNS = ((100, 512), (1024, 252))
FRAME_ENTRIES = (1, 4, 8, 16, 32)


def _entries(size: int, n: int) -> list[list[Any]]:
    ts = time.time()
    return [[bytes([i % 251]) * size, 0, None, 1_000_000 + i, ts] for i in range(n)]


def _best(fn: Callable[[], object], repeat: int, per: int) -> float:
    number = max(1, 200_000 // per)
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number / per * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timeit repeats (best taken)")
    args = parser.parse_args()
    snapshot_sources()
    import msgpack

    from zbroker import _compiled, wire
    from zbroker.wire import entries, splice

    loaded = _compiled.loaded()
    print(f"compiled: {sum(loaded.values())} of {len(loaded)} modules; writer: {entries.WRITES}")
    print(f"{'entries':<28}{'Packer ns':>12}{'written ns':>12}{'ratio':>8}")
    for size, n in RUNS:
        run = _entries(size, n)
        packer = msgpack.Packer()
        assert not entries.WRITES or entries.written(run) == packer.pack(run)
        a = _best(lambda: packer.pack(run), args.repeat, n)  # noqa: B023
        if entries.WRITES:
            b = _best(lambda: entries.written(run), args.repeat, n)  # noqa: B023
            print(f"{f'{n} x {size} B, per entry':<28}{a:>12.1f}{b:>12.1f}{a / b:>7.2f}x")
        else:
            print(f"{f'{n} x {size} B, per entry':<28}{a:>12.1f}{'n/a':>12}")
    print(f"{'MSGR frame of one run':<28}{'packed ns':>12}{'spliced ns':>12}{'ratio':>8}")
    for size, _ in RUNS:
        for n in FRAME_ENTRIES:
            runs = [["BENCH.DATA", "A", 1, ("A",), None, _entries(size, n)]]
            a = _best(lambda: wire.encode_link(wire.MSGR, runs), args.repeat, 1)  # noqa: B023
            if splice.spliced_msgr(runs) is None:
                print(f"{f'{n} x {size} B':<28}{a:>12.0f}{'(packed)':>12}")
                continue
            b = _best(lambda: splice.spliced_msgr(runs), args.repeat, 1)  # noqa: B023
            print(f"{f'{n} x {size} B':<28}{a:>12.0f}{b:>12.0f}{a / b:>7.2f}x")


if __name__ == "__main__":
    main()
