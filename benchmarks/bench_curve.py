#!/usr/bin/env python3
"""The cost of CurveZMQ on the non-persistent path: plain vs. CURVE, side by side.

    .venv/bin/python benchmarks/bench_curve.py            # 3 runs of each mode, 200,000 msgs
    .venv/bin/python benchmarks/bench_curve.py --quick    # 1 run of each, 50,000 msgs
    .venv/bin/python benchmarks/bench_curve.py --json     # machine-readable result on stdout

One run = a node process (``zbroker.Broker``), a subscriber process (``Client.subscribe``
with a counting callback) and a publisher process (``Client.publish`` of 100-byte
payloads as fast as it can), every socket on 127.0.0.1. In CURVE mode the node has
``security`` on (its key pair, a permissions file letting the benchmark's client key
publish and subscribe to everything) and both clients use ``keys``/``server_key``: every
frame on the three TCP connections is encrypted, and the node checks the publisher's key
for each publish and approves the subscription. Runs alternate plain, CURVE, plain, ...
so every mode sees the same machine; the medians are compared. Two CURVE modes: ``curve``
gives the client ``publish = ["BENCH.>"]`` (the node checks the sender's key against the
topic of every publish, about 1.5 us of Python per message), ``curve-open`` gives it
``publish = [">"]`` (nothing to check: the node's publish path is the plain one, only
the transport is encrypted):

    slowdown = plain delivered msg/s / CURVE delivered msg/s      (target <= 1.5)

Delivered msg/s is what the subscriber received over the window from the publisher's
first send to the subscriber's last receive; lost (published - delivered: the XPUB drops
for a subscriber that cannot keep up) is printed too. The machine has 2 cores and is
shared: the load average at start and end is printed with the figures.

Every child process is stopped by its PID in a ``finally`` block, and exits on its own
if its parent goes away or a hard deadline passes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import snapshot_sources
from bn_child import guard
from bn_procs import _Inbox

HOST = "127.0.0.1"
TOPIC = "BENCH.DATA"
PAYLOAD = b"x" * 100
IDLE_END_S = 3.0
CHILD_DEADLINE_S = 300.0
TARGET_SLOWDOWN = 1.5


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def _guard_child() -> None:
    """Exit this child if the parent disappears or the hard deadline passes."""
    guard(CHILD_DEADLINE_S)


def _cpu_s() -> float:
    """CPU time of this process so far, every thread (libzmq's I/O threads included)."""
    t = os.times()
    return t.user + t.system


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_opts(secure: dict[str, str] | None) -> dict[str, Any]:
    if secure is None:
        return {}
    return {"keys": secure["client_secret"], "server_key": secure["node_public"]}


def node_main(q: Any, data_dir: str, secure: dict[str, str] | None, stop: Any) -> None:
    _guard_child()
    from zbroker import Broker

    opts: dict[str, Any] = {}
    if secure is not None:
        opts = {
            "security": True,
            "key_dir": Path(secure["key_dir"]),
            "clients": Path(secure["clients"]),
        }
    broker = Broker(host=HOST, port=0, data_dir=Path(data_dir), **opts).start()
    try:
        q.put(("node", broker.endpoint))
        stop.wait(CHILD_DEADLINE_S)
        st = broker.status()
        q.put(("node_status", {"received": st["counters"]["received"], "security": st["security"]}))
    finally:
        broker.stop()


def sub_main(q: Any, endpoint: str, secure: dict[str, str] | None, n: int) -> None:
    _guard_child()
    from zbroker import Client

    count = 0
    last = 0
    done = threading.Event()

    def on_msg(msg: Any) -> None:
        nonlocal count, last
        count += 1
        last = time.perf_counter_ns()
        if count >= n:
            done.set()

    with Client(endpoint, **_client_opts(secure)) as client:
        client.subscribe(TOPIC, on_msg)
        cpu0 = _cpu_s()
        q.put(("sub_ready", True))
        seen = -1
        while not done.wait(IDLE_END_S):
            if count == seen and count > 0:
                break  # the publisher finished and nothing more comes: the rest was lost
            seen = count
        cpu = _cpu_s() - cpu0
        q.put(("sub", {"count": count, "last_ns": last, "missed": client.missed, "cpu_s": cpu}))


def pub_main(q: Any, endpoint: str, secure: dict[str, str] | None, n: int) -> None:
    _guard_child()
    from zbroker import Client

    with Client(endpoint, publish_timeout=30.0, **_client_opts(secure)) as client:
        publish = client.publish
        cpu0 = _cpu_s()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            publish(TOPIC, PAYLOAD)
        t1 = time.perf_counter_ns()
        q.put(("pub", {"t0_ns": t0, "t1_ns": t1, "cpu_s": _cpu_s() - cpu0}))


def _stop(procs: list[Any]) -> None:
    for p in procs:
        p.join(10)
    for p in procs:
        if p.is_alive():
            p.terminate()  # by PID
            p.join(3)
        if p.is_alive():
            p.kill()
            p.join(2)


def run_once(
    ctx: Any, tmp: Path, mode: str, secure: dict[str, str] | None, n: int, k: int
) -> dict[str, Any]:
    q = ctx.Queue()
    inbox = _Inbox(q)
    stop = ctx.Event()
    procs: list[Any] = []
    try:
        node = ctx.Process(target=node_main, args=(q, str(tmp / f"node-{k}"), secure, stop))
        node.start()
        procs.append(node)
        endpoint = inbox.get("node", 30)
        sub = ctx.Process(target=sub_main, args=(q, endpoint, secure, n))
        sub.start()
        procs.append(sub)
        inbox.get("sub_ready", 30)
        node_cpu0 = _proc_cpu_s(node.pid)
        pub = ctx.Process(target=pub_main, args=(q, endpoint, secure, n))
        pub.start()
        procs.append(pub)
        p = inbox.get("pub", 240)
        s = inbox.get("sub", 240)
        node_cpu = _proc_cpu_s(node.pid) - node_cpu0
        stop.set()
        node_st = inbox.get("node_status", 30)
    finally:
        stop.set()
        _stop(procs)
    window = max(s["last_ns"] - p["t0_ns"], 1) / 1e9
    return {
        "mode": mode,
        "published": n,
        "delivered": s["count"],
        "lost": n - s["count"],
        "node_received": node_st["received"],
        "delivered_per_s": s["count"] / window,
        "publish_per_s": n / max(p["t1_ns"] - p["t0_ns"], 1) * 1e9,
        "auth_failures": node_st["security"].get("auth_failures", 0),
        # CPU per delivered message (all threads): a figure the machine's load disturbs less
        "cpu_us_per_msg": {
            "node": node_cpu / max(s["count"], 1) * 1e6,
            "publisher": p["cpu_s"] / n * 1e6,
            "subscriber": s["cpu_s"] / max(s["count"], 1) * 1e6,
        },
    }


MODES = ("plain", "curve", "curve-open")


def make_keys(tmp: Path) -> dict[str, dict[str, str]]:
    from zbroker.security import generate_keys, load_key_pair

    key_dir = tmp / "keys"
    generate_keys(key_dir)
    client_secret, _ = generate_keys(key_dir, "bench")
    keys = {
        "key_dir": str(key_dir),
        "client_secret": str(client_secret),
        "node_public": load_key_pair(key_dir)[0].decode(),
    }
    out = {}
    # "curve": the client may publish to BENCH.> only, so the node checks every publish;
    # "curve-open": it may publish anywhere, so the node has nothing to check per message
    for mode, pattern in (("curve", "BENCH.>"), ("curve-open", ">")):
        clients = tmp / f"{mode}.toml"
        clients.write_text(
            f'[bench]\nkey_file = "keys/bench.key"\npublish = ["{pattern}"]\n'
            'subscribe = ["BENCH.>"]\n'
        )
        out[mode] = {**keys, "clients": str(clients)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1 run of each mode, 50,000 messages")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each mode (median counts)")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.messages = 1, 50_000
    os.environ["ZBROKER_DISCOVERY"] = "false"
    snapshot_sources()
    import zmq

    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    load_start = os.getloadavg()
    runs = run_all(args.repeat, args.messages)
    med = medians(runs)
    slowdown = med["plain"]["delivered_per_s"] / med["curve"]["delivered_per_s"]
    pub_slowdown = med["plain"]["publish_per_s"] / med["curve"]["publish_per_s"]
    open_slowdown = med["plain"]["delivered_per_s"] / med["curve-open"]["delivered_per_s"]
    result = {
        "date": started,
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "nproc": os.cpu_count(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "messages": args.messages,
        "repeat": args.repeat,
        "runs": runs,
        "median": med,
        "slowdown": round(slowdown, 3),
        "publish_slowdown": round(pub_slowdown, 3),
        "open_slowdown": round(open_slowdown, 3),
        "cpu_ratio": {
            mode: {
                role: _cpu_ratio(med[mode][f"cpu_{role}"], med["plain"][f"cpu_{role}"])
                for role in ("node", "publisher", "subscriber")
            }
            for mode in ("curve", "curve-open")
        },
        "target": TARGET_SLOWDOWN,
        "ok": slowdown <= TARGET_SLOWDOWN,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result, (slowdown, pub_slowdown, open_slowdown))
    return 0


def _cpu_ratio(mode: float, plain: float) -> float | None:
    """mode/plain CPU, or None when plain measured no CPU (a run of a few messages can
    end within one tick of the CPU clock)."""
    return round(mode / plain, 3) if plain else None


def _times(ratio: float | None) -> str:
    return "n/a (too short to measure)" if ratio is None else f"{ratio:.2f}x"


def run_all(repeat: int, messages: int) -> list[dict[str, Any]]:
    """``repeat`` rounds of every mode in turn, each run logged as it ends."""
    tmp = Path(tempfile.mkdtemp(prefix="zbroker-bench-curve-"))
    ctx = mp.get_context("spawn")
    runs: list[dict[str, Any]] = []
    try:
        secure = make_keys(tmp)
        k = 0
        for i in range(repeat):
            for mode in MODES:
                k += 1
                r = run_once(ctx, tmp, mode, secure.get(mode), messages, k)
                runs.append(r)
                cpu = r["cpu_us_per_msg"]
                log(
                    f"run {i + 1} {mode:10}: delivered {r['delivered_per_s']:>9,.0f} msg/s, "
                    f"publish {r['publish_per_s']:>9,.0f} msg/s, lost {r['lost']:,}; CPU us/msg "
                    f"node {cpu['node']:.2f} pub {cpu['publisher']:.2f} "
                    f"sub {cpu['subscriber']:.2f}"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return runs


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode, the median of each figure over its runs (CPU us/msg by role too)."""
    med = {
        mode: {
            key: statistics.median(r[key] for r in runs if r["mode"] == mode)
            for key in ("delivered_per_s", "publish_per_s", "lost")
        }
        for mode in MODES
    }
    for mode in MODES:
        for role in ("node", "publisher", "subscriber"):
            med[mode][f"cpu_{role}"] = statistics.median(
                r["cpu_us_per_msg"][role] for r in runs if r["mode"] == mode
            )
    return med


def print_result(result: dict[str, Any], slowdowns: tuple[float, float, float]) -> None:
    """The medians per mode, CPU ratios and the slowdowns against the target."""
    slowdown, pub_slowdown, open_slowdown = slowdowns
    med = result["median"]
    print(
        f"CURVE cost on the non-persistent path ({result['date']}, loadavg "
        f"{result['loadavg_start']} -> {result['loadavg_end']}; medians of {result['repeat']} "
        f"runs of {result['messages']:,} messages)"
    )
    for mode in MODES:
        m = med[mode]
        print(
            f"  {mode:10}  delivered {m['delivered_per_s']:>9,.0f} msg/s   publish "
            f"{m['publish_per_s']:>9,.0f} msg/s   lost {m['lost']:,.0f}   CPU us/msg: "
            f"node {m['cpu_node']:.2f}, publisher {m['cpu_publisher']:.2f}, "
            f"subscriber {m['cpu_subscriber']:.2f}"
        )
    for mode in ("curve", "curve-open"):
        c = result["cpu_ratio"][mode]
        print(
            f"  CPU {mode}/plain: node {_times(c['node'])}, publisher {_times(c['publisher'])}, "
            f"subscriber {_times(c['subscriber'])}"
        )
    verdict = "OK" if result["ok"] else "MISSED"
    print(
        f"  slowdown plain/curve (per-topic publish check): {slowdown:.2f}x delivered, "
        f"{pub_slowdown:.2f}x publish (target <= {TARGET_SLOWDOWN}x: {verdict})"
    )
    print(f"  slowdown plain/curve-open (no per-message check): {open_slowdown:.2f}x delivered")


if __name__ == "__main__":
    sys.exit(main())
