"""A subscriber on ``>`` beside a hosted branch, with real processes (rule 8 and
:mod:`zbroker.routing.hostward`).

Four ``zbroker start`` processes on 127.0.0.1 in a mesh: a triangle W - P - R (P dials W,
R dials P and W) and the host H of ``ORDERS.>`` behind R (H dials R). The publisher's way
to the host is P - R - H; the host's way to W is H - R - W, which crosses R, on the
publisher's way. A client on W subscribes to ``>`` (wider than the branch), one on H to
``ORDERS.*`` (inside it); a client on P publishes N messages on ``ORDERS.k`` and N on
``PRICE.k``. Before the fix the host served W's ``>`` along H - R - W, the loop rule
refused the copy at H (R is on the path) and W got none of the hosted topic. (W holds no
inside subscription: one would make R claim W, which hid the defect.)

Assertions, exact: each subscription gets each of its messages once (2N on W, N on H),
W's hosted part of ``>`` went toward the host only (R and H hold it, P does not), and R
carried the hosted messages to W itself (it claimed W) while H sent none back. Every
process is stopped by PID (the ``procs`` fixture).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import link_toml, node_toml
from zbroker import Client
from zbroker.routing.hosts import HOST_PREFIX

from .test_forward_faults import status

pytestmark = pytest.mark.slow

WAIT = 30.0
N = 300
HOST = '\n[[host]]\npattern = "ORDERS.>"\n'
DIALS = {"W": (), "P": ("W",), "R": ("P", "W"), "H": ("R",)}


def routes(ep: str) -> list[dict[str, Any]]:
    with Client(ep, timeout=5.0) as c:
        rows: list[dict[str, Any]] = c.routes()
        return rows


def keys(ep: str) -> set[tuple[str, str]]:
    return {(r["pattern"], r["origin"]) for r in routes(ep)}


def links_out(ep: str) -> dict[str, int]:
    """Messages each link of a node has sent, by link name."""
    return {ln["name"]: ln["msgs_out"] for ln in status(ep)["links"]}


def test_a_wide_subscriber_whose_way_crosses_the_publishers_gets_each_message_once(
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
) -> None:
    ports = {n: free_port() for n in DIALS}

    def ep(name: str) -> str:
        return f"tcp://127.0.0.1:{ports[name]}"

    for name, peers in DIALS.items():
        links = "".join(link_toml(f"{name.lower()}{p.lower()}", ports[p]) for p in peers)
        text = node_toml(name, ports[name], tmp_path / name, links)
        config = tmp_path / f"{name}.toml"
        config.write_text(text + (HOST if name == "H" else ""))
        proc = procs.zbroker("start", "--config", str(config))
        wait_ready(ep(name), proc=proc)
    with (
        Client(ep("W"), timeout=10.0) as cw,
        Client(ep("H"), timeout=10.0) as ch,
        Client(ep("P"), timeout=10.0) as cp,
    ):
        wide, inside = Collector(), Collector()
        cw.subscribe(">", wide)
        ch.subscribe("ORDERS.*", inside)
        # W's ">" everywhere; its hosted part toward the host only (via R, not P)
        part = ("ORDERS.>", "W")
        assert wait_until(lambda: part in keys(ep("R")) & keys(ep("H")), WAIT)
        assert wait_until(
            lambda: {(">", "W"), (HOST_PREFIX + "ORDERS.>", "H")} <= keys(ep("P")), WAIT
        )
        assert part not in keys(ep("P"))
        (row,) = [r for r in routes(ep("W")) if (r["pattern"], r["origin"]) == part]
        assert row["hosted_part_of"] == [">"] and row["link"] is None
        before = {n: links_out(ep(n)) for n in "RH"}
        for i in range(N):
            cp.publish("ORDERS.k", i)
            cp.publish("PRICE.k", i)
        assert wide.wait_for(2 * N, WAIT), wide.topics()
        assert inside.wait_for(N, WAIT), inside.topics()
        time.sleep(1.0)  # a copy doubled would arrive by now
        assert wide.topics() == {"ORDERS.k": N, "PRICE.k": N}
        assert inside.topics() == {"ORDERS.k": N}
        assert [m.payload for m in wide.snapshot() if m.topic == "ORDERS.k"] == list(range(N))
    after = {n: links_out(ep(n)) for n in "RH"}
    # R claimed W: the hosted copies went R -> W; the host sent nothing back toward R
    assert after["R"]["rw"] - before["R"]["rw"] == N
    assert after["H"]["hr"] - before["H"]["hr"] == 0
