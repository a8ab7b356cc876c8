"""The runs of ``bench_persistent.py``, from the parent's side: the persistent node, (b)
and (c) (a measured persistent publisher, with or without a durable subscriber attached),
(d) (a durable subscriber away while messages are stored, then its drain on return); the
node's counters before and after, and the CPU each process and the node's thread took."""

from __future__ import annotations

import os
import queue
import time
from typing import Any

import bench_node as bn
from persist_roles import dsub_main, pnode_main, ppub_main

log = bn.log
RUN_DEADLINE_S = 900  # the whole benchmark (SIGALRM in the parent)


def start_pnode(ctx: Any, tmp: str, stop: Any, profile_dir: str | None) -> dict[str, Any]:
    prof = os.path.join(profile_dir, "node.prof") if profile_dir else None
    for attempt in range(1, 4):
        q = ctx.Queue()
        data_dir = os.path.join(tmp, f"pnode{attempt}")
        proc = bn._start(ctx, pnode_main, q, data_dir, stop, RUN_DEADLINE_S + 60, prof)
        info = bn._Inbox(q).get("node", 30)
        if "error" not in info:
            return {"proc": proc, "pid": proc.pid, **info}
        log(f"  node start failed (attempt {attempt}/3): {info['error']}")
        bn._stop_procs([proc], 5)
    raise RuntimeError("the persistent node did not start in 3 attempts")


def _counters(client: Any, name: str | None = None) -> dict[str, Any]:
    st = client.status()
    c = st["counters"]
    out = {
        "received": c["received"],
        "delivered": c["delivered"],
        "durable_stored": c.get("durable_stored", 0),
        "durable_delivered": c.get("durable_delivered", 0),
        "dropped": dict(c["dropped"]),
        "retained_rows": st["store"]["retained_rows"] if st.get("store") else 0,
        "store_last_seq": st["store"]["last_seq"] if st.get("store") else 0,
    }
    if name is not None:
        out["durable"] = next((d for d in st.get("durables", []) if d["name"] == name), None)
    return out


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: after[k] - before[k]
        for k in (
            "received",
            "delivered",
            "durable_stored",
            "durable_delivered",
            "retained_rows",
            "store_last_seq",
        )
    }
    out["dropped"] = {
        k: v - before["dropped"].get(k, 0)
        for k, v in after["dropped"].items()
        if v - before["dropped"].get(k, 0)
    }
    return out


class _Meter:
    """CPU of the given processes and of the node thread, and the machine's load."""

    def __init__(self, pids: dict[str, int], node: dict[str, Any]) -> None:
        self.pids, self.node = pids, node
        self.ticks0 = bn._cpu_ticks()
        self.wall0 = time.monotonic()
        self.cpu0 = {k: bn._cpu_seconds(p) for k, p in pids.items()}
        self.th0 = bn._thread_cpu_seconds(node["pid"], node["node_tid"])

    def stop(self, n: int) -> dict[str, Any]:
        wall = time.monotonic() - self.wall0
        cpu = {k: bn._cpu_seconds(p) - self.cpu0[k] for k, p in self.pids.items()}
        th = bn._thread_cpu_seconds(self.node["pid"], self.node["node_tid"]) - self.th0
        load = bn._machine_load(self.ticks0, bn._cpu_ticks(), wall, sum(cpu.values()))
        per = {k: 1e6 * v / max(1, n) for k, v in cpu.items()}
        per["total"] = sum(per.values())
        return {
            "cpu_us_per_msg": per,
            "node_thread_us_per_msg": 1e6 * th / max(1, n),
            "node_cpu_pct": 100 * cpu.get("node", 0.0) / wall if wall > 0 else 0.0,
            **load,
        }


def _wait_warm(warmed: Any, inbox: Any) -> None:
    """Wait for a publisher's warm-up (or raise the error it reported)."""
    end = time.monotonic() + 120
    while not warmed.wait(0.2):
        err = inbox.stash.get("pub")
        if err is None:
            try:
                tag, value = inbox.q.get_nowait()
                inbox.stash[tag] = value
                err = inbox.stash.get("pub")
            except queue.Empty:
                pass
        if err is not None and "error" in err:
            raise RuntimeError(f"persistent publisher: {err['error']}")
        if time.monotonic() > end:
            raise TimeoutError("persistent publisher: no warm-up within 120 s")


def median_run(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


def _start_ppub(
    ctx: Any,
    q: Any,
    node: dict[str, Any],
    topic: str,
    n: int,
    window: int,
    events: tuple[Any, Any, Any],
    profile_out: str | None,
) -> Any:
    """The persistent publisher (tag ``pub``); ``events``: warmed, go, started."""
    warmed, go, started = events
    return bn._start(
        ctx,
        ppub_main,
        q,
        node["endpoint"],
        "pub",
        topic,
        n,
        window,
        warmed,
        go,
        started,
        RUN_DEADLINE_S,
        profile_out,
    )


def _start_dsub(
    ctx: Any,
    q: Any,
    node: dict[str, Any],
    tag: str,
    durable: tuple[str, str],
    n: int,
    credit: int,
    ready: Any,
    pub_done: Any,
) -> Any:
    """A durable subscriber; ``durable``: its name and pattern."""
    name, pattern = durable
    return bn._start(
        ctx,
        dsub_main,
        q,
        node["endpoint"],
        tag,
        name,
        pattern,
        n,
        credit,
        ready,
        pub_done,
        RUN_DEADLINE_S,
    )


def run_persistent(
    ctx: Any,
    node: dict[str, Any],
    status: Any,
    tag: str,
    n: int,
    window: int,
    credit: int,
    durable: bool,
    profile_dir: str | None = None,
) -> dict[str, Any]:
    """(b) without a durable subscriber, (c) with one attached (fresh name and topic)."""
    topic = f"PERSIST.{tag}.DATA"
    name = f"bench-{tag.lower()}"
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    warmed, go, started, ready, pub_done = (ctx.Event() for _ in range(5))
    procs = []
    deadline = RUN_DEADLINE_S
    pprof = os.path.join(profile_dir, "publisher.prof") if profile_dir else None
    try:
        pub = _start_ppub(ctx, q, node, topic, n, window, (warmed, go, started), pprof)
        procs.append(pub)
        pids = {"pub": pub.pid, "node": node["pid"]}
        if durable:
            pattern = f"PERSIST.{tag}.>"
            sub = _start_dsub(ctx, q, node, "sub", (name, pattern), n, credit, ready, pub_done)
            procs.append(sub)
            pids["sub"] = sub.pid
            if not ready.wait(60):
                raise TimeoutError("durable subscriber not ready")
        _wait_warm(warmed, inbox)
        before = _counters(status, name if durable else None)
        go.set()
        if not started.wait(120):
            raise TimeoutError("persistent publisher never started")
        meter = _Meter(pids, node)
        pub_res = inbox.get("pub", deadline)
        if "error" in pub_res:
            raise RuntimeError(f"persistent publisher: {pub_res['error']}")
        pub_done.set()
        sub_res = inbox.get("sub", deadline) if durable else None
        load = meter.stop(n)
    finally:
        go.set()
        pub_done.set()
        bn._stop_procs(procs)
    after = _counters(status, name if durable else None)
    res = _confirmed(n, window, pub_res, _delta(before, after), load)
    if durable and sub_res is not None:
        res.update(_durable(n, credit, pub_res, sub_res, after))
        res["deleted_after"] = status.delete_durable(name)
    return res


def _confirmed(
    n: int, window: int, pub_res: dict[str, Any], node: dict[str, Any], load: dict[str, Any]
) -> dict[str, Any]:
    """(b), and (c)'s publisher: what was confirmed and how fast."""
    confirm_s = (pub_res["t_end"] - pub_res["t_start"]) / 1e9
    return {
        "published": n,
        "window": window,
        "confirmed": pub_res["confirmed"],
        "errors": pub_res["errors"],
        "not_retained": pub_res["not_retained"],
        "confirm_out_of_order": pub_res["out_of_order"],
        "confirm_s": confirm_s,
        "confirmed_rate": pub_res["confirmed"] / confirm_s if confirm_s > 0 else 0.0,
        "pub_thread_us_per_msg": 1e6 * pub_res["thread_cpu_s"] / max(1, n),
        "pub_lost_node": pub_res["lost_node"],
        "node": node,
        **load,
    }


def _durable(
    n: int, credit: int, pub_res: dict[str, Any], sub_res: dict[str, Any], after: dict[str, Any]
) -> dict[str, Any]:
    """(c)'s durable subscriber: what it got and how fast."""
    window_s = (sub_res["t_last"] - pub_res["t_start"]) / 1e9 if sub_res["t_last"] else 0.0
    return {
        "credit": credit,
        "delivered": sub_res["delivered"],
        "unique": sub_res["unique"],
        "duplicates": sub_res["duplicates"],
        "redelivered": sub_res["redelivered"],
        "out_of_order": sub_res["out_of_order"],
        "out_of_range": sub_res["out_of_range"],
        "lost": n - sub_res["unique"],
        "sub_lost_node": sub_res["lost_node"],
        "sub_thread_alive": sub_res["client_thread_alive"],
        "delivered_s": window_s,
        "delivered_rate": sub_res["delivered"] / window_s if window_s > 0 else 0.0,
        "left_stored": (after.get("durable") or {}).get("stored"),
    }


def run_drain(
    ctx: Any, node: dict[str, Any], status: Any, n: int, window: int, credit: int
) -> dict[str, Any]:
    """(d): create + detach a durable subscription, publish n persistently, then time a
    returning subscriber's drain of the n stored messages."""
    name, pattern, topic = "bench-d", "PERSIST.D.>", "PERSIST.D.DATA"
    deadline = RUN_DEADLINE_S
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    warmed, go, started, ready, pub_done = (ctx.Event() for _ in range(5))
    procs = []
    try:
        creator = _start_dsub(ctx, q, node, "create", (name, pattern), 0, credit, ready, pub_done)
        procs.append(creator)
        created = inbox.get("create", 60)
        bn._stop_procs([creator])
        away = _counters(status, name)["durable"]
        log(f"  durable {name!r} created and detached: {away}")
        pub = _start_ppub(ctx, q, node, topic, n, window, (warmed, go, started), None)
        procs.append(pub)
        _wait_warm(warmed, inbox)
        go.set()
        pub_res = inbox.get("pub", deadline)
        if "error" in pub_res:
            raise RuntimeError(f"persistent publisher: {pub_res['error']}")
        bn._stop_procs([pub])
        stored = _counters(status, name)
        log(f"  {pub_res['confirmed']:,} confirmed; node reports {stored['durable']}")
        pub_done.set()
        sub = _start_dsub(ctx, q, node, "sub", (name, pattern), n, credit, ready, pub_done)
        procs.append(sub)
        meter = _Meter({"node": node["pid"]}, node)
        sub_res = inbox.get("sub", deadline)
        load = meter.stop(n)
        # the subscriber's own CPU from its subscribe() call on (its start-up excluded)
        per = load["cpu_us_per_msg"]
        per["sub"] = 1e6 * sub_res["cpu_s"] / max(1, n)
        per["total"] = per["node"] + per["sub"]
    finally:
        go.set()
        pub_done.set()
        bn._stop_procs(procs)
    after = _counters(status, name)
    res = _drained(n, credit, pub_res, sub_res, load)
    res["created"] = created["info"]
    res["stored_before_return"] = (stored.get("durable") or {}).get("stored")
    res["left_stored"] = (after.get("durable") or {}).get("stored")
    res["deleted_after"] = status.delete_durable(name)
    return res


def _drained(
    n: int, credit: int, pub_res: dict[str, Any], sub_res: dict[str, Any], load: dict[str, Any]
) -> dict[str, Any]:
    """(d)'s figures: the detached publisher's, the returning subscriber's. (The node's
    counts, ``created``, ``stored_before_return`` and ``left_stored``, are None here.)"""
    confirm_s = (pub_res["t_end"] - pub_res["t_start"]) / 1e9
    drain_s = (sub_res["t_last"] - sub_res["t_subscribe"]) / 1e9 if sub_res["t_last"] else 0.0
    return {
        "published": n,
        "credit": credit,
        "created": None,
        "confirmed": pub_res["confirmed"],
        "errors": pub_res["errors"],
        "confirmed_rate_detached": pub_res["confirmed"] / confirm_s if confirm_s > 0 else 0.0,
        "stored_before_return": None,
        "open_reply": sub_res["info"],
        "delivered": sub_res["delivered"],
        "unique": sub_res["unique"],
        "duplicates": sub_res["duplicates"],
        "redelivered": sub_res["redelivered"],
        "out_of_order": sub_res["out_of_order"],
        "lost": n - sub_res["unique"],
        "sub_lost_node": sub_res["lost_node"],
        "sub_thread_alive": sub_res["client_thread_alive"],
        "pub_lost_node": pub_res["lost_node"],
        "subscribe_call_s": (sub_res["t_subscribed"] - sub_res["t_subscribe"]) / 1e9,
        "first_delivery_s": (sub_res["t_first"] - sub_res["t_subscribe"]) / 1e9
        if sub_res["t_first"]
        else None,
        "drain_s": drain_s,
        "drain_rate": sub_res["delivered"] / drain_s if drain_s > 0 else 0.0,
        "left_stored": None,
        **load,
    }
