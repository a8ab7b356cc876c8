"""A local branch with LAN discovery on: two ``zbroker start`` processes in network
namespaces find each other by mDNS and link; on n1, ``--local CACHE.>`` keeps the
branch home over the discovered link, while other topics flow as usual.

The namespaces, the eth0 guard and the helper client are those of :mod:`.netns_lan` (its
module docstring says how the network is kept apart)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration.netns_lan import WAIT, Net, assert_eth0_clean, endpoint, require_netns, v4
from tests.integration.netns_lan import eth0_guard as eth0_guard  # (fixtures)
from tests.integration.netns_lan import group as group
from tests.integration.netns_lan import net as net
from tests.integration.netns_views import wait_mesh

require_netns()


def wait_routes(nsnet: Net, i: int, want: set[tuple[str, str]]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT
    while True:
        routes = nsnet.cli(i, "routes", "--json", "--broker", endpoint(v4(i))) or []
        if want <= {(r["pattern"], r["origin"]) for r in routes} or time.monotonic() > deadline:
            return list(routes)
        time.sleep(0.05)


@pytest.mark.slow
def test_a_local_branch_stays_home_over_a_discovered_link(net: Net, group: str) -> None:
    net.start_node(1, "n1", group, extra=("--local", "CACHE.>"))
    net.start_node(2, "n2", group)
    ep1, ep2 = endpoint(v4(1)), endpoint(v4(2))
    raw = wait_mesh(net, {"n1": (1, ep1), "n2": (2, ep2)})
    assert [ln["kind"] for ln in raw["n1"][1]["links"]] == ["discovered"]
    far = net.helper(2, "sub", "--broker", ep2, "--pattern", "CACHE.>", "--pattern", "ORD.>")
    home = net.helper(1, "sub", "--broker", ep1, "--pattern", "CACHE.>")
    for h in (far, home):
        h.wait_for(lambda e: e.get("event") == "subscribed")
    routes = wait_routes(net, 1, {("ORD.>", "n2"), ("CACHE.>", "n2"), ("CACHE.>", "n1")})
    marked = {(r["pattern"], r["origin"]) for r in routes if r.get("local_branch")}
    assert marked == {("CACHE.>", "n2"), ("CACHE.>", "n1")}
    pubs = {
        t: net.helper(1, "pub", "--broker", ep1, "--topic", t, "--interval", "0.005")
        for t in ("CACHE.k", "ORD.k")
    }
    for p in pubs.values():
        p.wait_for(lambda e: e.get("event") == "publishing")
    far.wait_for(lambda e: e.get("event") == "msg" and e["payload"]["i"] >= 50)
    last = {}
    for t, p in pubs.items():
        assert p.stop() == 0
        last[t] = p.wait_for(lambda e: e.get("event") == "done")["last"]
    far.wait_for(lambda e: e.get("event") == "msg" and e["payload"]["i"] == -1)
    home.wait_for(lambda e: e.get("event") == "msg" and e["payload"]["i"] == -1)
    got_far = [(m["topic"], m["payload"]["i"]) for m in far.msgs()]
    got_home = [(m["topic"], m["payload"]["i"]) for m in home.msgs()]
    assert got_far == [("ORD.k", i) for i in [*range(last["ORD.k"] + 1), -1]]
    assert got_home == [("CACHE.k", i) for i in [*range(last["CACHE.k"] + 1), -1]]
    # n1 sent n2 the ORD messages and nothing else; n2 never heard of n1's CACHE interest
    status = net.status(1, ep1)
    assert status["interest"]["local_branches"] == ["CACHE.>"]
    (link,) = status["links"]
    assert link["msgs_out"] == last["ORD.k"] + 2
    far_routes = net.cli(2, "routes", "--json", "--broker", ep2) or []
    assert ("CACHE.>", "n1") not in {(r["pattern"], r["origin"]) for r in far_routes}


def test_no_mdns_or_test_traffic_on_eth0(eth0_guard: dict[str, Any]) -> None:
    """Last in the module: the module's capture on eth0 saw nothing of ours."""
    if eth0_guard["skip"]:
        pytest.skip(eth0_guard["skip"])
    assert_eth0_clean(eth0_guard)
