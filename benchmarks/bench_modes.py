"""Direct against hosted routing on one topology: entries, memory, convergence (issue 16).

    .venv/bin/python benchmarks/bench_modes.py                       # mesh200, ~2 min
    .venv/bin/python benchmarks/bench_modes.py --topology T.toml --host 'ORD.>=n001'

Runs :func:`zbroker.simulate_modes.compare_modes` (what ``zbroker simulate --compare``
prints) on ``config/topologies/mesh200.toml`` with the whole tree (``>``) hosted on n000
and n100, prints the mode table, then the ratios direct / hosted side by side: interest
entries (all nodes, and the nodes that are not hosts), the memory of the interest tables
(a deep size of each node's table; see :mod:`zbroker.simulate_modes`), and convergence
after the subscriptions are placed (virtual time, simulator events, rounds of
advertisement, wall-clock seconds). Entries, events, rounds, virtual time, frames and hops
are deterministic for a topology and seed; the table bytes move by a few hundredths of a
percent between runs (randomized string hashing); the wall-clock figures depend on the
machine and its load.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import time
from pathlib import Path

from _common import REPO, snapshot_sources

SOURCES = snapshot_sources()

from zbroker.simulate import load_topology  # noqa: E402
from zbroker.simulate_modes import compare_modes, format_modes, parse_hosts  # noqa: E402

#: (figure, label) of the side-by-side ratios
RATIOS = (
    ("interest_entries", "interest entries, all nodes"),
    ("entries_non_host_total", "interest entries, non-host nodes"),
    ("table_bytes", "table bytes, all nodes"),
    ("table_bytes_non_host_mean", "table bytes, non-host node mean"),
    ("convergence_virtual_ms", "convergence, virtual ms"),
    ("convergence_events", "convergence, simulator events"),
    ("convergence_rounds", "convergence, advert rounds"),
    ("convergence_wall_seconds", "convergence, wall seconds"),
    ("advert_frames", "advert frames"),
    ("mean_hops", "mean hops per delivery"),
)


def digest(root: Path) -> str:
    """sha256 (12 hex digits) of the sources measured (the copy)."""
    h = hashlib.sha256()
    for path in sorted((root / "zbroker").rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def _cell(value: float | int) -> str:
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"


def ratios(result: dict[str, object]) -> str:
    direct, hosted = result["direct"], result["hosted"]
    assert isinstance(direct, dict) and isinstance(hosted, dict)
    lines = [f"{'figure':36}{'direct':>16}{'hosted':>16}{'direct/hosted':>15}"]
    for key, label in RATIOS:
        d, h = direct[key], hosted[key]
        ratio = f"{d / h:.2f}" if h else "-"
        lines.append(f"{label:36}{_cell(d):>16}{_cell(h):>16}{ratio:>15}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--topology", type=Path, default=REPO / "config" / "topologies" / "mesh200.toml"
    )
    parser.add_argument("--host", action="append", default=None, metavar="PATTERN=NODE,...")
    args = parser.parse_args()
    hosts = parse_hosts(tuple(args.host or [">=n000,n100"]))
    load = os.getloadavg()
    print(f"bench_modes: {' '.join(sys.argv[1:]) or '(defaults)'}")
    print(
        f"  {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; python "
        f"{platform.python_version()}; {os.cpu_count()} CPUs; load average at start "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; zbroker sources sha256 "
        f"{digest(Path(SOURCES))}"
    )
    print(f"  topology {args.topology}")
    t0 = time.perf_counter()
    result = compare_modes(load_topology(args.topology), hosts)
    print(format_modes(result))
    print()
    print(ratios(result))
    load = os.getloadavg()
    print(
        f"\n{time.perf_counter() - t0:.1f} s in all; load average at the end "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


if __name__ == "__main__":
    main()
