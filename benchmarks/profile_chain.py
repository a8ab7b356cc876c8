#!/usr/bin/env python3
"""Where a chain's nodes spend their CPU during a flood, sampled with ``perf``.

    .venv/bin/python benchmarks/profile_chain.py                 # 5 s per node, ~20 s
    .venv/bin/python benchmarks/profile_chain.py --seconds 10 --top 15

Three ``zbroker start`` processes (``.venv/bin/zbroker``, discovery off, each with its
own data directory in a temporary directory, free ports on 127.0.0.1): A; B with
``--peer`` A; C with ``--peer`` B (duplex links, as ``bench_network.py``'s chain). A
subscriber on C (``PROF.>``) and, once a probe published on A has reached it, a
publisher flooding ``PROF.x`` on A with 100-byte payloads (``--size``; or paced at
``--rate`` msg/s) (Python clients, each in its
own process). After a second of flood, ``perf record -F 499 -g -p PID -- sleep S`` runs
on every node at once, then ``perf report --no-children --sort dso,sym -g none`` (with
``--stdio -n``: the same percentages, sample counts beside them) on each recording.

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
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from _common import REPO, snapshot_sources

HOST = "127.0.0.1"
TOPIC = "PROF.x"
PATTERN = "PROF.>"
PAYLOAD = b"M" * 100
NODES = "ABC"
FREQ = 499
REPORT = ["--no-children", "--sort", "dso,sym", "-g", "none"]
#: a line of ``perf report --stdio -n``: percent, samples, DSO, [.] or [k], symbol
LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
T = TypeVar("T")


# -- the clients (child processes) ----------------------------------------------------------


def flood_publisher(endpoint: str, go: Any, stop: Any, sent: Any, size: int, rate: int) -> None:
    """Publish ``size`` bytes on TOPIC from ``go`` until ``stop``, as fast as it can or
    ``rate`` a second (sleeping in between, as a paced publisher does); ``sent`` counts."""
    import bench_node as bn

    bn._guard_child()
    from zbroker import Client

    with Client(endpoint) as client:
        publish, payload = client.publish, PAYLOAD[:1] * size
        go.wait(60)
        n = 0
        if rate:
            step, due = 1.0 / rate, time.monotonic()
            while not stop.is_set():
                publish(TOPIC, payload)
                n += 1
                sent.value = n
                due += step
                time.sleep(max(0.0, due - time.monotonic()))
            return
        while not stop.is_set():
            for _ in range(1024):
                publish(TOPIC, payload)
            n += 1024
            sent.value = n


def subscriber(endpoint: str, ready: Any, first: Any, stop: Any, got: Any) -> None:
    """Subscribe to PATTERN; ``first`` once a message arrives; ``got`` counts them."""
    import bench_node as bn

    bn._guard_child()
    from zbroker import Client, Message

    n = 0

    def on_message(msg: Message) -> None:
        nonlocal n
        n += 1
        if not n & 1023 or n == 1:
            got.value = n
            first.set()

    with Client(endpoint) as client:
        client.subscribe(PATTERN, on_message)
        ready.set()
        stop.wait(600)


# -- the nodes ------------------------------------------------------------------------------


def zbroker_command() -> str:
    """The ``zbroker`` entry point of this checkout's virtualenv (else the one beside
    the Python running this script)."""
    for candidate in (REPO / ".venv" / "bin" / "zbroker", Path(sys.executable).parent / "zbroker"):
        if candidate.is_file():
            return str(candidate)
    raise SystemExit("no zbroker entry point in .venv/bin (pip install -e . first)")


def start_nodes(tmp: Path, procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, str]:
    """Start A, B (dials A) and C (dials B) into ``procs``; return their endpoints once
    each answers and every link is up."""
    from bench_network import _wait
    from bench_queues import free_ports

    from zbroker import Client

    env = {k: v for k, v in os.environ.items() if not k.startswith("ZBROKER_")}
    env["ZBROKER_DISCOVERY"] = "false"
    ports = dict(zip(NODES, free_ports(len(NODES)), strict=True))
    endpoints = {name: f"tcp://{HOST}:{port}" for name, port in ports.items()}
    zbroker = zbroker_command()
    for i, name in enumerate(NODES):
        cmd = [zbroker, "start", "--id", name, "--host", HOST, "--port", str(ports[name])]
        cmd += ["--data-dir", str(tmp / name), "--log-level", "warning", "--no-discovery"]
        if i:
            cmd += ["--peer", endpoints[NODES[i - 1]]]
        with open(tmp / f"{name}.log", "wb") as log:
            procs[name] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _wait(lambda e=endpoints[name]: _answers(e), 30, f"node {name} answering")
    want = {"A": 1, "B": 2, "C": 1}

    def links_up() -> bool:
        for name, endpoint in endpoints.items():
            with Client(endpoint, timeout=5.0) as c:
                links = c.status()["links"]
            if sum(ln["state"] == "up" for ln in links) != want[name]:
                return False
        return True

    _wait(links_up, 30, "chain links up", step=0.1)
    return endpoints


def _answers(endpoint: str) -> bool:
    from zbroker import BrokerUnreachable, Client

    try:
        with Client(endpoint, timeout=1.0):
            return True
    except BrokerUnreachable:
        return False


def stop_processes(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """SIGTERM each (by its PID), then SIGKILL what is still running after 10 s."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(5)


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


def mapped_copies(pid: int, copy: str) -> int:
    """How many of the snapshot's extension modules process ``pid`` has mapped."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return 0
    return len({ln.split()[-1] for ln in maps.splitlines() if copy in ln and ln.endswith(".so")})


def wait_crossing(endpoint: str, first: Any, timeout: float = 30.0) -> float:
    """Publish probes on A until the subscriber on C has one; return the seconds."""
    from zbroker import Client

    t0 = time.monotonic()
    with Client(endpoint) as client:
        while not first.is_set():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"no message from A reached C within {timeout:g} s")
            client.publish(TOPIC, b"probe")
            first.wait(0.05)
    return time.monotonic() - t0


def run_flood(
    args: argparse.Namespace, tmp: Path, copy: str, during: Callable[[dict[str, int]], T]
) -> tuple[T, float, float, float]:
    """Start the chain and the clients, call ``during(pids)`` after a second of flood
    (the PIDs of nodes A, B, C and of the clients, ``pub`` and ``sub``), stop them all (by
    PID); return what it returned, the msg/s published on A and delivered on C during it,
    and how long it took (s)."""
    import bench_node as bn

    nodes: dict[str, subprocess.Popen[bytes]] = {}
    children: list[Any] = []
    ctx = mp.get_context("spawn")
    ready, first, go, stop = (ctx.Event() for _ in range(4))
    sent, got = ctx.RawValue("q", 0), ctx.RawValue("q", 0)
    try:
        endpoints = start_nodes(tmp, nodes)
        pids = {name: p.pid for name, p in nodes.items()}
        print("nodes: " + ", ".join(f"{n} pid {pids[n]} at {endpoints[n]}" for n in NODES))
        print("B dials A, C dials B; extension modules of the copy mapped per node: ", end="")
        print(", ".join(f"{n} {mapped_copies(pids[n], copy)}" for n in NODES))
        children.append(bn._start(ctx, subscriber, endpoints["C"], ready, first, stop, got))
        if not ready.wait(60):
            raise TimeoutError("the subscriber on C never subscribed")
        print(
            f"a probe published on A reached C after {wait_crossing(endpoints['A'], first):.2f} s"
        )
        children.append(
            bn._start(ctx, flood_publisher, endpoints["A"], go, stop, sent, args.size, args.rate)
        )
        go.set()
        time.sleep(1.0)  # the flood under way
        s0, g0, t0 = sent.value, got.value, time.monotonic()
        result = during({**pids, "sub": children[0].pid, "pub": children[1].pid})
        elapsed = time.monotonic() - t0
        s1, g1 = sent.value, got.value
    finally:
        stop.set()
        bn._stop_procs(children, 5)
        stop_processes(list(nodes.values()))
    return result, (s1 - s0) / elapsed, (g1 - g0) / elapsed, elapsed


def sample_chain(args: argparse.Namespace, perf: str, tmp: Path, copy: str) -> int:
    """Record each node under the flood (:func:`run_flood`), then print the reports."""

    def during(pids: dict[str, int]) -> dict[str, float]:
        print(f"perf record on every node for {args.seconds:g} s, from {_utc()}")
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


def _utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


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
        print(f"{_utc()}, load {load}, sources {bn.source_digest()}, {bn.compiled_state()}")
        print(f"perf record -F {FREQ} -g -p PID -- sleep {args.seconds:g}; ", end="")
        print(f"perf report {' '.join(REPORT)} --stdio -n")
        with contextlib.suppress(KeyboardInterrupt):
            return sample_chain(args, perf, tmp, copy)
    return 130


if __name__ == "__main__":
    sys.exit(main())
