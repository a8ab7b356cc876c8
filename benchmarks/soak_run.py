"""One soak run (``soak.py``), from the parent's side: the chain's nodes, the load (the
publishers, the churning subscribers, the persistent publisher), the load period with its
samples and the durable subscriber's restarts, the wind-down (the chain idle, the durable
drained), and the result with its verdicts. Every child it starts is stopped by PID in
:meth:`Soak.close`."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import bench_node as bn
from soak_durable import DurableGenerations
from soak_report import SAMPLE_HEADER, print_sample
from soak_roles import DURABLE, NODE_IDS, PATTERN, node_main, persist_pub_main, rate_pub_main
from soak_subscribers import churn_sub_main
from soak_verdicts import check_persistent, rss_mb, rss_verdict

log = bn.log
DRAIN_TIMEOUT_S = 90.0  # after the load stops: the durable subscriber catches up
SETUP_S = 300.0  # a child's deadline beyond the run's length


@dataclass
class _Load:
    """The load's processes and the counters they share with the parent."""

    churn: Any
    churn_received: Any
    sent_vals: list[Any]
    pubs: list[Any]
    confirmed: Any
    ppub: Any
    pids: dict[str, int]  # the nodes'


def _wait(pred: Any, timeout: float, what: str, step: float = 0.1) -> float:
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(step)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ctx = mp.get_context("spawn")
        self.tmp = tempfile.mkdtemp(prefix="zbroker-soak-")
        self.q = self.ctx.Queue()
        self.inbox = bn._Inbox(self.q)
        self.node_stop = self.ctx.Event()
        self.load_stop = self.ctx.Event()  # the publishers
        self.churn_stop = self.ctx.Event()  # the churning subscribers, once the chain is idle
        self.go = self.ctx.Event()
        self.deadline = args.minutes * 60 + SETUP_S
        self.nodes: list[dict[str, Any]] = []
        self.clients: dict[str, Any] = {}
        self.durables = DurableGenerations(
            self.ctx, self.inbox, self.tmp, args.credit, self.deadline
        )
        self.profile_path: str | None = None

    # nodes

    def start_nodes(self) -> None:
        from zbroker import Client

        for name in NODE_IDS:
            peers = (self.nodes[-1]["endpoint"],) if self.nodes else ()
            prof = None
            if self.args.profile_node and name.endswith("-" + self.args.profile_node):
                prof = self.profile_path = os.path.join(self.tmp, f"{name}.prof")
            proc = bn._start(
                self.ctx,
                node_main,
                self.q,
                name,
                os.path.join(self.tmp, name),
                peers,
                self.node_stop,
                self.deadline,
                prof,
            )
            info = self.inbox.get(name, 30)
            if "error" in info:
                raise RuntimeError(f"node {name}: {info['error']}")
            self.nodes.append({"name": name, "proc": proc, "pid": proc.pid, **info})
            self.clients[name] = Client(info["endpoint"])
            log(
                f"  node {name} pid {proc.pid} at {info['endpoint']}"
                + (f", dials {peers[0]}" if peers else "")
            )

        def links_up() -> bool:
            want = {0: 1, 1: 2, 2: 1}
            for i, nd in enumerate(self.nodes):
                links = self.clients[nd["name"]].status()["links"]
                if sum(1 for ln in links if ln["state"] == "up") != want[i]:
                    return False
            return True

        _wait(links_up, 30, "chain links up")
        log("  chain links up")

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.clients[name].status()
        return result

    # the run

    def run(self) -> dict[str, Any]:
        a = self.args
        result: dict[str, Any] = {}
        log(
            f"soak: chain A-B-C, {a.minutes:g} min, {a.rate:,.0f} msg/s non-persistent on A "
            f"({a.publishers} publisher(s)), {a.subscribers} churning subscribers on C "
            f"(every {a.churn_s:g} s), persistent {a.persistent_rate:,.0f} msg/s on "
            f"{a.persistent_node}, durable "
            f"subscriber restart every {a.durable_restart_s:g} s (away {a.durable_away_s:g} s)"
        )
        self.start_nodes()
        self.durables.endpoint = self.nodes[2]["endpoint"]
        self.durables.start()
        load = self._start_load()
        others = {
            "pubs": [p.pid for p in load.pubs],
            "churn": load.churn.pid,
            "ppub": load.ppub.pid,
        }
        time.sleep(2.0)  # clients connected (each waits for go)
        samples = self._load_period(load, result)
        self._stop_load(load, result)
        state = result["ppub"]["state"]
        n_confirmed = state.count(1)
        self._drain(result)
        C = self.nodes[2]["name"]
        result["durable_final"] = [d for d in self.status(C)["durables"] if d["name"] == DURABLE]
        result["nodes_final"] = self._nodes_final()
        result["samples"] = samples
        result["others_pids"] = others
        history = self.durables.history
        result["durable_subscribers"] = [
            {k: v for k, v in h.items() if k != "path"} for h in history
        ]
        paths = [h["path"] for h in history]
        result["persistent"] = check_persistent(paths, state, n_confirmed)
        result["rss"] = rss_verdict(samples, a.minutes * 60, a.rss_bound_mb)
        return result

    def _start_load(self) -> _Load:
        """The churning subscribers on C (their interest reaching A), the publishers on A
        and the persistent publisher, each waiting for ``go``."""
        a = self.args
        A = self.nodes[0]["name"]
        churn_ready = self.ctx.Event()
        churn_received = self.ctx.Value("q", 0, lock=False)
        churn = bn._start(
            self.ctx,
            churn_sub_main,
            self.q,
            self.nodes[2]["endpoint"],
            a.subscribers,
            a.churn_s,
            churn_ready,
            self.churn_stop,
            churn_received,
            self.deadline,
        )
        if not churn_ready.wait(60):
            raise TimeoutError("churning subscribers not ready")
        _wait(
            lambda: any(
                r["pattern"] == PATTERN for r in self.clients[A].routes() if r["link"] is not None
            ),
            30,
            "C's interest at A",
        )
        sent_vals = [self.ctx.Value("q", 0, lock=False) for _ in range(a.publishers)]
        pubs = [
            bn._start(
                self.ctx,
                rate_pub_main,
                self.q,
                f"pub{i}",
                self.nodes[0]["endpoint"],
                a.rate / a.publishers,
                self.load_stop,
                self.go,
                sent_vals[i],
                self.deadline,
            )
            for i in range(a.publishers)
        ]
        confirmed = self.ctx.Value("q", 0, lock=False)
        ppub = bn._start(
            self.ctx,
            persist_pub_main,
            self.q,
            self.nodes["ABC".index(a.persistent_node)]["endpoint"],
            a.persistent_rate,
            a.persistent_threads,
            self.load_stop,
            self.go,
            confirmed,
            self.deadline,
        )
        pids = {"A": self.nodes[0]["pid"], "B": self.nodes[1]["pid"], "C": self.nodes[2]["pid"]}
        return _Load(churn, churn_received, sent_vals, pubs, confirmed, ppub, pids)

    def _load_period(self, load: _Load, result: dict[str, Any]) -> list[dict[str, Any]]:
        """``go``, then the load for the run's length: a sample every ``--sample-s``, the
        durable subscriber's restarts; the samples, the nodes' CPU and the machine's load."""
        a = self.args
        pids = load.pids
        samples: list[dict[str, Any]] = []
        duration = a.minutes * 60
        t0 = time.monotonic()
        ticks0 = bn._cpu_ticks()
        cpu0 = {k: bn._cpu_seconds(p) for k, p in pids.items()}
        self.go.set()
        log(f"load started; sampling every {a.sample_s:g} s")
        log(SAMPLE_HEADER)
        prev: dict[str, Any] | None = None
        next_sample = t0 + a.sample_s
        self.durables.plan(t0, a.durable_restart_s, a.durable_away_s)
        while True:
            now = time.monotonic()
            if now - t0 >= duration:
                break
            self.durables.turn(now)
            if now >= next_sample:
                next_sample += a.sample_s
                s = self.sample(now - t0, load)
                print_sample(s, prev)
                samples.append(s)
                prev = s
            time.sleep(0.1)
        final = self.sample(time.monotonic() - t0, load)
        print_sample(final, prev)
        samples.append(final)
        ticks1 = bn._cpu_ticks()
        wall = time.monotonic() - t0
        cpu1 = {k: bn._cpu_seconds(p) for k, p in pids.items()}
        result["node_cpu_pct"] = {k: 100 * (cpu1[k] - cpu0[k]) / wall for k in pids}
        result["machine_load"] = bn._machine_load(ticks0, ticks1, wall, 0.0)
        return samples

    def _stop_load(self, load: _Load, result: dict[str, Any]) -> None:
        """The publishers stop and report; once the chain is idle, the churning subscribers."""
        A, C = self.nodes[0]["name"], self.nodes[2]["name"]
        log("load period over: stopping the publishers ...")
        self.load_stop.set()
        result["publishers"] = [self.inbox.get(f"pub{i}", 60) for i in range(len(load.pubs))]
        result["ppub"] = self.inbox.get("ppub", 60)
        bn._stop_procs([*load.pubs, load.ppub])

        def chain_idle() -> bool:  # C's link has taken in all that A received
            got: int = self.status(A)["counters"]["received"]
            links: list[dict[str, int]] = self.status(C)["links"]
            return sum(ln["msgs_in"] for ln in links) >= got

        try:
            result["chain_idle_after_s"] = _wait(chain_idle, 30, "chain idle", 0.1)
        except TimeoutError as exc:
            result["chain_idle_after_s"] = None
            log(f"  {exc}")
        time.sleep(0.5)  # the last deliveries reach the subscribers
        log("  ... and the churning subscribers")
        self.churn_stop.set()
        result["churn"] = self.inbox.get("churn", 60)
        bn._stop_procs([load.churn])

    def _drain(self, result: dict[str, Any]) -> None:
        """A durable subscriber attached until the durable subscription is empty."""
        C = self.nodes[2]["name"]
        if self.durables.current is None:
            self.durables.start()
        t_drain = time.monotonic()

        def drained() -> bool:
            ds = [d for d in self.status(C)["durables"] if d["name"] == DURABLE]
            return bool(ds and ds[0]["stored"] == 0 and ds[0]["in_flight"] == 0)

        try:
            _wait(drained, DRAIN_TIMEOUT_S, "durable subscription drained", 0.2)
            result["drain_after_load_s"] = time.monotonic() - t_drain
        except TimeoutError as exc:
            result["drain_after_load_s"] = None
            log(f"  {exc}")
        time.sleep(0.5)
        self.durables.stop(False)

    def _nodes_final(self) -> dict[str, Any]:
        final: dict[str, Any] = {}
        for nd in self.nodes:
            st = self.status(nd["name"])
            final[nd["name"]] = {
                "counters": st["counters"],
                "links": [
                    {k: ln[k] for k in ("name", "peer", "state", "msgs_in", "msgs_out", "drops")}
                    for ln in st["links"]
                ],
                "store": st["store"],
            }
        return final

    def sample(self, t: float, load: _Load) -> dict[str, Any]:
        s: dict[str, Any] = {"t": round(t, 1)}
        s["rss_mb"] = {k: round(rss_mb(p), 1) for k, p in load.pids.items()}
        s["sent"] = sum(v.value for v in load.sent_vals)
        s["sub_received"] = load.churn_received.value
        s["confirmed"] = load.confirmed.value
        s["durable_delivered"] = self.durables.delivered.value
        s["ticks"] = bn._cpu_ticks()
        for key, name in zip(("A", "B", "C"), NODE_IDS, strict=True):
            try:
                c = self.status(name)
            except Exception as exc:  # a node too busy to answer: record, go on
                s[key] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            cnt = c["counters"]
            s[key] = {
                "received": cnt["received"],
                "forwarded": cnt["forwarded"],
                "delivered": cnt["delivered"],
                "dropped": sum(cnt["dropped"].values()),
                "links_down": cnt["links_down"],
                "durable_stored": cnt.get("durable_stored", 0),
                "durable_depth": next(
                    (d["stored"] for d in c.get("durables", []) if d["name"] == DURABLE), 0
                ),
            }
        return s

    def close(self) -> None:
        for c in self.clients.values():
            with contextlib.suppress(Exception):
                c.close()
        self.clients.clear()
        self.load_stop.set()
        self.churn_stop.set()
        self.go.set()
        if self.durables.current is not None:
            self.durables.current["stop"].set()
        self.node_stop.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        if self.profile_path and os.path.exists(self.profile_path):
            print(
                f"\n==== cProfile: node {self.args.profile_node}'s node thread, whole run "
                "(sorted by tottime, top 35) ===="
            )
            st = pstats.Stats(self.profile_path, stream=sys.stdout)
            st.strip_dirs().sort_stats("tottime").print_stats(35)
        shutil.rmtree(self.tmp, ignore_errors=True)
