#!/usr/bin/env python3
"""Store-and-forward throughput of two source trees, alternated in one sitting.

    .venv/bin/python benchmarks/bench_forward_compare.py --a /tmp/zbroker-old --b . --pairs 3

Each tree's own ``benchmarks/bench_forward.py`` runs its throughput part only (the chain
A -> B -> C of ``zbroker start`` processes, N persistent messages confirmed by A and stored
in C's durable; B and C take them from links, so their store-and-forward dedupe and
everything else on that path is measured), with this interpreter; that script copies its
tree's sources and imports zbroker from the copy only. Per pair the trees run A then B in
even pairs and B then A in odd ones, so drift of the machine's load falls on both alike.
Printed: every run, the median per tree and the ratio B/A. Each run is one child process,
stopped by its PID when it passes its time limit (``subprocess.run`` kills it).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

_FIGURES = re.compile(
    r"confirmed by A at ([\d,]+) msg/s; .* = ([\d,]+) msg/s end to end; C holds (\d+)"
)


def run(tree: Path, n: int) -> tuple[float, float, int]:
    """(confirmed msg/s, end-to-end msg/s, messages stored at C) of one run of ``tree``."""
    out = subprocess.run(
        [
            sys.executable,
            str(tree / "benchmarks" / "bench_forward.py"),
            "--faults",
            "",
            "--n",
            str(n),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    m = _FIGURES.search(out)
    if m is None:
        raise RuntimeError(f"no figures in the output of {tree}:\n{out}")
    return float(m[1].replace(",", "")), float(m[2].replace(",", "")), int(m[3])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--a", type=Path, required=True, help="the tree before")
    ap.add_argument("--b", type=Path, required=True, help="the tree after")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--n", type=int, default=20_000, help="persistent messages per run")
    args = ap.parse_args(argv)
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    runs: dict[str, list[tuple[float, float, int]]] = {"A": [], "B": []}
    for pair in range(args.pairs):
        for name in ("A", "B") if pair % 2 == 0 else ("B", "A"):
            r = run(trees[name], args.n)
            runs[name].append(r)
            print(
                f"pair {pair} {name}: confirmed {r[0]:,.0f} msg/s, end to end {r[1]:,.0f} "
                f"msg/s, C holds {r[2]}",
                flush=True,
            )
    med = {
        name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
        for name, rs in runs.items()
    }
    print(f"A = {trees['A']}\nB = {trees['B']}")
    print(f"{'median':<22}{'A':>12}{'B':>12}{'B/A':>8}")
    for i, label in enumerate(("confirmed msg/s", "end to end msg/s")):
        a, b = med["A"][i], med["B"][i]
        print(f"{label:<22}{a:>12,.0f}{b:>12,.0f}{b / a:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
