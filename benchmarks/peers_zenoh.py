"""Zenoh in ``bench_peers``: a session's configuration (one ``tcp/127.0.0.1`` endpoint,
no multicast or gossip scouting) and a router or a line of routers, each a Python process
in router mode (R2 -> R1, R3 -> R2). :func:`zenoh_router_main` is a multiprocessing
("spawn") target, so it lives at module level."""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # children's guard, starting processes, the inbox
from peers_topology import HOST, _free_port, _stop_topology


def _zenoh_config(mode: str, listen: int | None, connect: list[int]) -> Any:
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", f'"{mode}"')
    # network safety: no multicast scouting, no gossip; only the endpoints given here
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("scouting/gossip/enabled", "false")
    conf.insert_json5("listen/endpoints", f'["tcp/{HOST}:{listen}"]' if listen else "[]")
    conf.insert_json5("connect/endpoints", str([f"tcp/{HOST}:{p}" for p in connect]))
    return conf


def zenoh_router_main(q: Any, stop: Any, listen: int, connect: list[int]) -> None:
    bn._guard_child()
    import zenoh

    try:
        session = zenoh.open(_zenoh_config("router", listen, connect))
    except Exception as exc:
        q.put(("router", {"error": f"{type(exc).__name__}: {exc}"}))
        return
    try:
        q.put(("router", {"zid": str(session.info.zid())}))
        stop.wait(bn.CHILD_DEADLINE_S)
    finally:
        # zenoh's stubs leave Session.close() unannotated; without the bench extra zenoh is
        # not installed at all (Any), and the ignore goes unused
        session.close()  # type: ignore[no-untyped-call, unused-ignore]


def _start_zenoh(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    stop = ctx.Event()
    topo: dict[str, Any] = {"procs": [], "stop": stop, "pids": []}
    ports: list[int] = []
    try:
        for i in range(hops):
            q = ctx.Queue()
            port = _free_port()
            proc = bn._start(ctx, zenoh_router_main, q, stop, port, ports[-1:])
            topo["procs"].append(proc)
            info = bn._Inbox(q).get("router", 30)
            if "error" in info:
                raise RuntimeError(f"zenoh router: {info['error']}")
            ports.append(port)
            topo["pids"].append((f"R{i + 1}", proc.pid))
    except BaseException:
        _stop_topology(topo)
        raise
    topo["pub_at"], topo["sub_at"] = str(ports[0]), str(ports[-1])
    return topo
