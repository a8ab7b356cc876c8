"""Selectors across a chain of real ``zbroker start`` processes, A - B - C: subscribers
with selectors on C, a publisher on A. Exactly the selected messages arrive, once each,
and the link counters prove the filtering happened upstream: A sent B only what a
selector behind B accepts, and B sent C the same; the messages nobody selects never
left A."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Client

HOST = "127.0.0.1"
WAIT = 20.0
N = 300
BARRIER = {"region": "EU", "qty": 10_000}


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


def link_to(client: Client, peer: str) -> dict[str, Any]:
    links: list[dict[str, Any]] = [ln for ln in client.status()["links"] if ln["peer"] == peer]
    (link,) = links
    return link


@pytest.mark.slow
def test_selectors_filter_upstream_across_a_chain_of_processes(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    client_factory: Callable[..., Client],
    tmp_path: Path,
) -> None:
    ports = {n: free_port() for n in "ABC"}
    peers = {"A": [], "B": ["A"], "C": ["B"]}
    nodes = {}
    for n in "ABC":
        args = ["start", "--port", str(ports[n]), "--data-dir", str(tmp_path / n), "--id", n]
        for p in peers[n]:
            args += ["--peer", endpoint(ports[p])]
        nodes[n] = procs.zbroker(*args, "--log-level", "warning", "--no-discovery")
    for n in "ABC":
        wait_ready(endpoint(ports[n]), WAIT, nodes[n])
    a, c = client_factory(endpoint(ports["A"])), client_factory(endpoint(ports["C"]))
    eu_big, negative = Collector(), Collector()
    c.subscribe("ORD.>", eu_big, selector="region = 'EU' AND qty > 100")
    c.subscribe("ORD.>", negative, selector="qty < 0 OR region = 'EU' AND qty >= 10000")
    want = {
        "((region = 'EU') AND (qty > 100))",
        "((qty < 0) OR ((region = 'EU') AND (qty >= 10000)))",
    }

    def selectors_at_a() -> set[str]:
        return {s for r in a.routes("ORD.>") if r["origin"] == "C" for s in r.get("selectors", ())}

    assert wait_until(lambda: selectors_at_a() == want, WAIT), a.routes()
    before_ab = link_to(a, "B")["msgs_out"]
    regions = ("EU", "US", "APAC")
    for i in range(N):
        a.publish(f"ORD.{i % 5}", i, {"region": regions[i % 3], "qty": i})
    a.publish("ORD.end", b"end", BARRIER)
    selected = [i for i in range(N) if i % 3 == 0 and i > 100]
    assert eu_big.wait_for(len(selected) + 1, WAIT)
    assert negative.wait_for(1, WAIT)
    assert [m.payload for m in eu_big.snapshot()] == [*selected, b"end"]
    assert [m.payload for m in negative.snapshot()] == [b"end"]
    # upstream filtering: A sent B exactly the selected messages and the barrier, and so
    # did B to C (the barrier once: one copy per link, two subscriptions behind it)
    assert link_to(a, "B")["msgs_out"] - before_ab == len(selected) + 1
    b = client_factory(endpoint(ports["B"]))
    assert link_to(b, "C")["msgs_out"] == len(selected) + 1
    assert link_to(b, "A")["msgs_in"] == len(selected) + 1
    for n in "ABC":
        assert nodes[n].poll() is None, nodes[n].stderr_text()
        assert "Traceback" not in nodes[n].stderr_text()
