#!/usr/bin/env python3
"""Where a chain's nodes spend their CPU during a flood, sampled with ``perf``.

    .venv/bin/python benchmarks/profile_chain.py                 # 5 s per node, ~20 s
    .venv/bin/python benchmarks/profile_chain.py --seconds 10 --top 15

The chain of ``chain_run.py``: three ``zbroker start`` processes (A; B dialing A; C
dialing B; discovery off, free ports on 127.0.0.1), a subscriber on C and a publisher on
A flooding 100-byte payloads (``--size``; or paced at ``--rate`` msg/s), Python clients,
each in its own process. After a second of flood, ``perf record -F 499 -g -p PID --
sleep S`` runs on every node at once, then ``perf report --no-children --sort dso,sym -g
none`` (with ``--stdio -n``: the same percentages, sample counts beside them) on each
recording.

Printed per node: the samples, the node's CPU use during the recording (from ``/proc``),
the percent per DSO, the same grouped (the interpreter, the kernel, msgpack, libc, libzmq,
pyzmq, zbroker's compiled modules) and the top ``--top`` symbols; before that the flood's
rates during the recording (published on A, delivered on C). Needs ``perf`` (``--perf``,
default ``/usr/bin/perf`` or one on ``PATH``) and the right to attach to the nodes (root,
or ``kernel.perf_event_paranoid`` low enough): without them it says why and exits with
status 2. Every process it starts (nodes, clients, perf) is stopped by its PID when it
ends, fails or is interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from _common import snapshot_sources
from chain_run import NODES, run_flood, stop_processes, utc

FREQ = 499
REPORT = ["--no-children", "--sort", "dso,sym", "-g", "none"]
#: a line of ``perf report --stdio -n``: percent, samples, DSO, [.] or [k], symbol
LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")


# -- perf -----------------------------------------------------------------------------------


def perf_usable(perf: str | None, tmp: Path) -> str | None:
    """Why ``perf`` cannot sample here (None: it can): missing, or not permitted."""
    if perf is None or not os.access(perf, os.X_OK):
        return f"perf not found ({perf or 'not on PATH'}; apt-get install linux-perf, or --perf)"
    paranoid = Path("/proc/sys/kernel/perf_event_paranoid")
    level = paranoid.read_text().strip() if paranoid.exists() else "?"
    sleeper = subprocess.Popen(["sleep", "2"])
    try:
        cmd = [perf, "record", "-F", str(FREQ), "-g", "-o", str(tmp / "probe.data")]
        cmd += ["-p", str(sleeper.pid), "--", "sleep", "0.2"]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        stop_processes([sleeper])
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["no output"])[-3:]
        return f"perf record failed (uid {os.geteuid()}, perf_event_paranoid {level}): " + (
            " / ".join(why)
        )
    return None


def perf_report(perf: str, data: Path) -> list[tuple[float, int, str, str]]:
    """(percent, samples, DSO, symbol) of every line of the report, as perf sorts them."""
    out = subprocess.run(
        [perf, "report", "-i", str(data), *REPORT, "--stdio", "-n"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m and not line.lstrip().startswith("#"):
            sym = m.group(5) if m.group(4) == "." else m.group(5) + " [k]"
            rows.append((float(m.group(1)), int(m.group(2)), m.group(3), sym))
    return rows


def record(perf: str, pids: dict[str, int], seconds: float, tmp: Path) -> dict[str, float]:
    """``perf record`` on every node at once for ``seconds``; return each node's CPU
    seconds during it (from ``/proc``; an empty dict if a recording failed)."""
    import bench_node as bn

    cpu0 = {name: bn._cpu_seconds(pid) for name, pid in pids.items()}
    recorders: list[subprocess.Popen[bytes]] = []
    try:
        for name, pid in pids.items():
            cmd = [perf, "record", "-F", str(FREQ), "-g", "-o", str(tmp / f"{name}.data")]
            cmd += ["-p", str(pid), "--", "sleep", f"{seconds:g}"]
            with open(tmp / f"perf-{name}.log", "wb") as log:
                recorders.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        for p in recorders:
            p.wait(seconds + 60)
    finally:
        stop_processes(recorders)  # (only those still running: an interruption)
    cpu = {name: bn._cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
    failed = [name for name, p in zip(pids, recorders, strict=True) if p.returncode != 0]
    for name in failed:
        print(f"perf record on node {name} failed:")
        print((tmp / f"perf-{name}.log").read_text(errors="replace").strip())
    return {} if failed else cpu


def group_of(dso: str, compiled: frozenset[str]) -> str:
    """The kind of code a DSO of the report is."""
    if dso.startswith("[kernel") or dso == "[vdso]":
        return "kernel"
    if dso.startswith(("libpython", "python")):
        return "interpreter"
    if "cpython" in dso and dso.split(".", 1)[0] in compiled:
        return "zbroker compiled"
    if dso.startswith("_cmsgpack"):
        return "msgpack"
    if dso.startswith("libzmq"):
        return "libzmq"
    if dso.startswith(("_zmq", "_device", "_poll", "_proxy")) or "zmq" in dso:
        return "pyzmq"
    if dso.startswith(("libc.so", "libc-", "libm.so")):
        return "libc"
    return "other"


Row = tuple[float, int, str, str]


def print_node(name: str, role: str, rows: list[Row], cpu: float, seconds: float, top: int) -> None:
    """One node's report: samples, CPU use, percent per group and per DSO, top symbols."""
    from zbroker import _compiled

    compiled = frozenset(m.rpartition(".")[2] for m in _compiled.COMPILED)
    samples = sum(r[1] for r in rows)
    by_dso: dict[str, float] = defaultdict(float)
    by_group: dict[str, float] = defaultdict(float)
    for pct, _, dso, _ in rows:
        by_dso[dso] += pct
        by_group[group_of(dso, compiled)] += pct
    print(f"\nnode {name} ({role}): {samples:,} samples, {cpu / seconds:.0%} of one core")
    groups = sorted(by_group.items(), key=lambda kv: -kv[1])
    print("  by kind:  " + ", ".join(f"{g} {p:.1f} %" for g, p in groups))
    print("  by DSO:")
    for dso, pct in sorted(by_dso.items(), key=lambda kv: -kv[1]):
        if pct >= 0.5:
            print(f"    {pct:6.2f} %  {dso}")
    for line in detail(rows, compiled):
        print("  " + line)
    print(f"  top {top} symbols:")
    for pct, n, dso, sym in rows[:top]:
        print(f"    {pct:6.2f} % {n:>6}  {dso:<42} {sym}")


def detail(rows: list[Row], compiled: frozenset[str]) -> list[str]:
    """msgpack's share split into packing and unpacking, and the interpreter's and
    zbroker's largest functions."""
    msgpack = {"packing": 0.0, "unpacking": 0.0, "other": 0.0}
    largest: dict[str, list[str]] = {"interpreter": [], "zbroker compiled": []}
    for pct, _, dso, sym in rows:
        group = group_of(dso, compiled)
        if group == "msgpack":
            kind = "unpacking" if "npack" in sym else "packing" if "ack" in sym else "other"
            msgpack[kind] += pct
        elif group in largest and len(largest[group]) < 5:
            label = sym if group == "interpreter" else cython_name(sym, dso)
            largest[group].append(f"{label} {pct:.1f}")
    lines = ["msgpack: " + ", ".join(f"{k} {v:.1f} %" for k, v in msgpack.items())]
    lines += [f"{g}, largest: " + ", ".join(v) for g, v in largest.items() if v]
    return lines


def cython_name(sym: str, dso: str) -> str:
    """``module.function`` for a symbol of a compiled zbroker module (Cython mangles
    ``zbroker.wire.runs._check_entries`` as ``__pyx_pw_7zbroker_4wire_4runs_9_check_entries``);
    the symbol as it is if it is not one."""
    from zbroker import _compiled

    leaf = dso.split(".", 1)[0]
    for module in _compiled.COMPILED:
        mangled = "_".join(f"{len(part)}{part}" for part in module.split(".")) + "_"
        if module.endswith("." + leaf) and mangled in sym:
            rest = sym.split(mangled, 1)[1].split(".", 1)[0]
            return f"{leaf}.{rest.lstrip('0123456789')}"
    return sym


def sample_chain(args: argparse.Namespace, perf: str, tmp: Path, copy: str) -> int:
    """Record each node under the flood (:func:`run_flood`), then print the reports."""

    def during(pids: dict[str, int]) -> dict[str, float]:
        print(f"perf record on every node for {args.seconds:g} s, from {utc()}")
        return record(perf, {n: pids[n] for n in NODES}, args.seconds, tmp)

    cpu, published, delivered, elapsed = run_flood(args, tmp, copy, during)
    if not cpu:
        return 1
    print(
        f"during the recording: {published:,.0f} msg/s published on A, "
        f"{delivered:,.0f} msg/s delivered on C"
    )
    roles = {"A": "publisher's node", "B": "middle, only forwards", "C": "subscriber's node"}
    for name in NODES:
        rows = perf_report(perf, tmp / f"{name}.data")
        print_node(name, roles[name], rows, cpu[name], elapsed, args.top)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="perf record time per node")
    ap.add_argument("--top", type=int, default=10, help="symbols printed per node")
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--rate", type=int, default=0, help="msg/s, paced (default: flood)")
    ap.add_argument("--perf", default=None, help="perf binary (default /usr/bin/perf or PATH)")
    args = ap.parse_args(argv)
    # SIGTERM as an interruption: the finally blocks stop every process started here
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    perf = args.perf or (
        "/usr/bin/perf" if os.access("/usr/bin/perf", os.X_OK) else shutil.which("perf")
    )
    with tempfile.TemporaryDirectory(prefix="zbroker-prof-") as t:
        tmp = Path(t)
        why = perf_usable(perf, tmp)
        if why is not None or perf is None:
            print(f"cannot sample: {why}", file=sys.stderr)
            return 2
        copy = snapshot_sources()
        import bench_node as bn

        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{utc()}, load {load}, sources {bn.source_digest()}, {bn.compiled_state()}")
        print(f"perf record -F {FREQ} -g -p PID -- sleep {args.seconds:g}; ", end="")
        print(f"perf report {' '.join(REPORT)} --stdio -n")
        with contextlib.suppress(KeyboardInterrupt):
            return sample_chain(args, perf, tmp, copy)
    return 130


if __name__ == "__main__":
    sys.exit(main())
