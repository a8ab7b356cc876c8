"""LAN discovery (mDNS) end to end, between real ``zbroker start`` processes in Linux
network namespaces joined by a bridge: nodes of a group find each other (one link per
pair, over IPv4 and IPv6) and not those of another group; messages cross the mesh once;
a node stopped or killed leaves the others' peers, and rejoins; a client on
``zeroconf://GROUP`` fails over; a bad interface is one logged error.

The LAN, the processes in it and the eth0 guard are :mod:`.netns_lan` (its docstring says
how the network is kept apart: mDNS never leaves the namespaces); what the nodes show and
the waits for it, :mod:`.netns_views`. Nodes are inspected with ``zbroker peers --json`` /
``zbroker status --json`` run inside the namespaces; timings come from
``netns_helpers/nsclient.py monitor`` (a client polling the node every 50 ms and printing
each change with ``time.time()``). Measured figures go to
``/tmp/zbroker_netns_figures.json`` (and are printed: run with ``-s``). Security on the
LAN (CURVE and allowlists with discovery): :mod:`.test_discovery_netns_secure`.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from typing import Any

import pytest

from tests.integration.netns_lan import (
    HEARTBEAT_TIMEOUT,
    PORT,
    V6,
    WAIT,
    ZBROKER,
    Net,
    assert_eth0_clean,
    endpoint,
    require_netns,
    v4,
)
from tests.integration.netns_lan import eth0_guard as eth0_guard  # (fixtures)
from tests.integration.netns_lan import group as group
from tests.integration.netns_lan import net as net
from tests.integration.netns_views import (
    figures as figures,  # (a fixture)
)
from tests.integration.netns_views import (
    incarnation,
    log_time,
    poll_routes,
    precondition,
    start_mesh,
    start_monitors,
    view_of,
    wait_gone,
    wait_mesh,
)

require_netns()

pytestmark = pytest.mark.slow


def test_three_nodes_discover_each_other_one_link_per_pair(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    t0 = time.time()
    where = start_mesh(net, group)
    raw = wait_mesh(net, where)
    for node_id, (peers, status) in raw.items():
        assert all("mdns" in p["found_by"] for p in peers), (node_id, peers)
        kinds = sorted(ln["kind"] for ln in status["links"])
        assert set(kinds) <= {"discovered", "accepted"}
        # exactly one link came up on each node per peer, and none went down since
        assert status["counters"]["links_up"] == 2, (node_id, status["counters"])
        assert status["counters"]["links_down"] == 0, (node_id, status["counters"])
        assert status["counters"]["handshakes_refused"] == 0, (node_id, status["counters"])
        assert status["discovery"]["error"] is None
        assert status["discovery"]["interfaces"] == [v4(where[node_id][0])]
    all_links = [ln for _, st in raw.values() for ln in st["links"]]
    assert sum(ln["kind"] == "discovered" for ln in all_links) == 3
    assert sum(ln["kind"] == "accepted" for ln in all_links) == 3
    dialled = sorted(
        (node_id, ln["peer"])
        for node_id, (_, st) in raw.items()
        for ln in st["links"]
        if ln["kind"] == "discovered"
    )
    assert dialled == [("n1", "n2"), ("n1", "n3"), ("n2", "n3")]
    # figure: start of the first node to the last link up (from the nodes' own logs)
    ups = [
        log_time(line)
        for proc in net.procs.started[:3]
        for line in proc.stderr_text().splitlines()
        if re.search(r" INFO zbroker\.node: link \S+ (to|from) \S+ .* is up$", line)
    ]
    assert len(ups) == 6
    figures["mesh_3_nodes_all_links_up_s"] = round(max(ups) - t0, 3)


def test_message_from_ns1_reaches_subscriber_in_ns3_exactly_once(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    n = 500
    net.start_node(1, "n1", group)
    net.start_node(2, "n2", group)
    where12 = {"n1": (1, endpoint(v4(1))), "n2": (2, endpoint(v4(2)))}
    wait_mesh(net, where12)
    warm = net.helper(1, "pub", "--broker", endpoint(v4(1)), "--topic", "WARM.tick",
                      "--interval", "0.01")  # fmt: skip
    warm.wait_for(lambda e: e.get("event") == "publishing")
    # the third node and a subscriber on it, both in ns3
    t_start = time.time()
    net.start_node(3, "n3", group)
    sub = net.helper(3, "sub", "--broker", endpoint(v4(3)), "--pattern", "DATA.>",
                     "--pattern", "WARM.>")  # fmt: skip
    first = sub.wait_for(lambda e: e.get("event") == "msg" and e["topic"] == "WARM.tick")
    assert first["origin"] == "n1" and first["via"] == "n3"
    figures["third_node_start_to_first_delivery_from_ns1_s"] = round(first["t"] - t_start, 3)
    warm.stop()
    where = {**where12, "n3": (3, endpoint(v4(3)))}
    wait_mesh(net, where)
    # n1 knows n3's interest in DATA.> (the subscription is confirmed, the advert is in)
    routes = poll_routes(net, 1, "DATA.x", lambda rs: any(r["origin"] == "n3" for r in rs))
    assert any(r["origin"] == "n3" for r in routes), routes
    lines = "".join(f"{k}\n" for k in range(n)) + "END\n"
    res = net.run(1, "pub", "DATA.x", "-", "--broker", endpoint(v4(1)), input=lines)
    assert res.returncode == 0, res.stderr
    assert f"published {n + 1} message(s)" in res.stderr
    sub.wait_for(lambda e: e.get("event") == "msg" and e["payload"] == "END")
    data = [e for e in sub.msgs("DATA.") if e["payload"] != "END"]
    payloads = [e["payload"] for e in data]
    assert len(payloads) == n, f"{len(payloads)} delivered, expected {n}"
    assert sorted(payloads, key=int) == [str(k) for k in range(n)]  # each exactly once
    assert payloads == [str(k) for k in range(n)]  # in order (one origin, one path)
    assert {e["origin"] for e in data} == {"n1"} and {e["via"] for e in data} == {"n3"}
    assert len({e["seq"] for e in data}) == n
    st3 = net.status(3, endpoint(v4(3)))
    assert st3["counters"]["delivered"] >= n + 1


def test_sigterm_node_leaves_others_peers_promptly(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    where = start_mesh(net, group)
    wait_mesh(net, where)
    mons = start_monitors(net, where, ("n1", "n2"))
    marks = {k: len(m.drain()) for k, m in mons.items()}
    node3 = net.procs.started[2]
    t_term = time.time()
    node3.send_signal(signal.SIGTERM)
    gone = {k: wait_gone({k: m}, "n3", since=marks[k])[k] for k, m in mons.items()}
    took = {k: round(t - t_term, 3) for k, t in gone.items()}
    figures["sigterm_to_removal_everywhere_s"] = max(took.values())
    assert max(took.values()) <= 2.0, took
    for node_id in ("n1", "n2"):
        i, ep = where[node_id]
        view = view_of(net.peers(i, ep), net.status(i, ep))
        assert view is not None
        assert set(view["peers"]) == {"n1", "n2"} - {node_id}
        assert [ln[2] for ln in view["links"]] == list({"n1", "n2"} - {node_id})


def test_sigterm_node_process_exits(net: Net, group: str) -> None:
    node = net.start_node(1, "n1", group)
    with precondition("node up with discovery"):
        assert node.wait_stderr("announced n1", WAIT), node.stderr_text()
        assert net.status(1, endpoint(v4(1))) is not None
    node.send_signal(signal.SIGTERM)
    try:
        rc = node.wait(8.0)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"node still running 8 s after SIGTERM; stderr tail: {node.stderr_text()[-600:]!r}"
        ) from None
    assert rc == 0


def test_sigkill_node_dropped_after_heartbeat_timeout(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    where = start_mesh(net, group)
    wait_mesh(net, where)
    mons = start_monitors(net, where, ("n1", "n2"))
    marks = {k: len(m.drain()) for k, m in mons.items()}
    node3 = net.procs.started[2]
    t_kill = time.time()
    node3.popen.kill()  # SIGKILL, by PID
    node3.wait(5)
    gone = {k: wait_gone({k: m}, "n3", since=marks[k])[k] for k, m in mons.items()}
    took = {k: round(t - t_kill, 3) for k, t in gone.items()}
    figures["sigkill_to_removal_everywhere_s"] = max(took.values())
    figures["sigkill_to_removal_per_node_s"] = took
    # no goodbye: only the link heartbeat notices (3 s); never earlier, at most 1.5 s later
    # (the last heartbeat from n3 arrived up to one interval, 1 s, before the kill)
    assert min(took.values()) >= HEARTBEAT_TIMEOUT - 1.0 - 0.1, took
    assert max(took.values()) <= HEARTBEAT_TIMEOUT + 1.5, took
    # n1 and n2 keep their own link
    wait_mesh(net, {k: where[k] for k in ("n1", "n2")})


def test_sigkill_node_rejoins_after_restart(net: Net, group: str) -> None:
    where = start_mesh(net, group)
    with precondition("mesh up, then n3 killed and dropped"):
        wait_mesh(net, where)
        mons = start_monitors(net, where, ("n1", "n2"))
        marks = {k: len(m.drain()) for k, m in mons.items()}
        node3 = net.procs.started[2]
        node3.popen.kill()  # SIGKILL, by PID
        node3.wait(5)
        for k, m in mons.items():
            wait_gone({k: m}, "n3", since=marks[k])
        again = net.start_node(3, "n3", group)
        assert again.wait_stderr("announced n3", WAIT), again.stderr_text()
        # the same data directory: a strictly larger incarnation (it follows the clock)
        assert incarnation(again.stderr_text()) > incarnation(node3.stderr_text())
    # links up again: the full mesh as before the crash (bounded: 20 s after the announce)
    wait_mesh(net, where, timeout=20.0)


def test_nodes_of_another_group_do_not_join(net: Net, group: str) -> None:
    other = f"x-{group}"[:60]
    nodes = [net.start_node(i, f"n{i}", group, log_level="debug") for i in (1, 2, 3)]
    where = {f"n{i}": (i, endpoint(v4(i))) for i in (1, 2, 3)}
    stranger = net.start_node(3, "x4", other, port=7200, log_level="debug")
    ep4 = endpoint(v4(3), 7200)
    # positive evidence that each side found the other and filtered it out by group
    for node_id in ("n1", "n2", "n3"):
        assert stranger.wait_stderr(f"ignoring node {node_id} of group {group!r}", WAIT), (
            stranger.stderr_text()[-3000:]
        )
    for proc in nodes:
        assert proc.wait_stderr(f"ignoring node x4 of group {other!r}", WAIT)
    raw = wait_mesh(net, where)
    for node_id, (peers, status) in raw.items():
        assert "x4" not in {p["id"] for p in peers}, node_id
        assert status["counters"]["handshakes_refused"] == 0
    assert net.peers(3, ep4) == []
    st4 = net.status(3, ep4)
    assert st4["group"] == other
    assert st4["links"] == []
    assert st4["discovery"]["peers"] == 0
    assert st4["counters"]["links_up"] == 0 and st4["counters"]["handshakes_refused"] == 0


def test_zeroconf_client_fails_over_on_sigkill(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    # n1 alone first, so the client (which takes whichever node it finds first) is on n1
    node1 = net.start_node(1, "n1", group)
    assert node1.wait_stderr("announced n1", WAIT), node1.stderr_text()
    sub = net.helper(2, "sub", "--broker", f"zeroconf://{group}", "--interface", v4(2),
                     "--want", "n1", "--pattern", "FO.>", "--report-candidates")  # fmt: skip
    sub.wait_for(lambda e: e.get("event") == "subscribed" and e["broker"] == "n1")
    net.start_node(2, "n2", group)
    net.start_node(3, "n3", group)
    where = {f"n{i}": (i, endpoint(v4(i))) for i in (1, 2, 3)}
    wait_mesh(net, where)
    # the client has found the two others on the LAN by now
    sub.wait_for(
        lambda e: (
            e.get("event") == "candidates"
            and sorted(e["endpoints"]) == sorted(ep for _, ep in where.values())
        )
    )
    pub = net.helper(3, "pub", "--broker", endpoint(v4(3)), "--topic", "FO.tick",
                     "--interval", "0.01")  # fmt: skip
    sub.wait_for(lambda e: e.get("event") == "msg" and e["via"] == "n1")
    mark = len(sub.drain())
    t_kill = time.time()
    node1.popen.kill()  # SIGKILL, by PID
    node1.wait(5)
    after = sub.wait_for(lambda e: e.get("event") == "msg" and e["via"] != "n1", start=mark)
    failover = round(after["t"] - t_kill, 3)
    figures["client_failover_sigkill_to_first_message_s"] = failover
    assert after["via"] in ("n2", "n3")
    assert failover <= 3.0, failover
    # it keeps receiving: 100 more messages through the new node, then the end marker
    i0 = after["payload"]["i"]
    sub.wait_for(
        lambda e: e.get("event") == "msg" and e["via"] != "n1" and e["payload"]["i"] >= i0 + 100
    )
    pub.stop()
    done = pub.wait_for(lambda e: e.get("event") == "done")
    sub.wait_for(lambda e: e.get("event") == "msg" and e["payload"]["i"] == -1)
    got = [e["payload"]["i"] for e in sub.msgs("FO.") if e["payload"]["i"] >= 0]
    assert len(got) == len(set(got)), "duplicate deliveries"
    tail = sorted(i for i in got if i >= i0)
    # every message published after the failover arrived, exactly once
    assert tail == list(range(i0, done["last"] + 1)), (i0, done["last"], len(tail))
    assert {e["via"] for e in sub.msgs("FO.") if e["payload"]["i"] >= i0} == {after["via"]}
    sub.stop()


def test_unjoinable_interface_logs_one_error_and_keeps_running(net: Net, group: str) -> None:
    node = net.start_node(1, "n1", group, interfaces=("198.18.0.99",))
    assert node.wait_stderr("LAN discovery is off", WAIT), node.stderr_text()
    ep = endpoint(v4(1))
    status = net.status(1, ep)
    assert status is not None and status["broker_id"] == "n1"
    assert "198.18.0.99" in status["discovery"]["error"]
    # publish/subscribe still work on it
    sub = net.helper(1, "sub", "--broker", ep, "--pattern", "T7.>")
    sub.wait_for(lambda e: e.get("event") == "subscribed")
    body = "".join(f"{k}\n" for k in range(10)) + "END\n"
    assert net.cli(1, "pub", "T7.x", "-", "--broker", ep, input=body) == {}
    sub.wait_for(lambda e: e.get("event") == "msg" and e["payload"] == "END")
    assert [e["payload"] for e in sub.msgs("T7.")] == [*(str(k) for k in range(10)), "END"]
    assert node.poll() is None
    assert net.status(1, ep) is not None
    errors = [line for line in node.stderr_text().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
    assert "discovery" in errors[0] and "198.18.0.99" in errors[0]
    assert "Traceback" not in node.stderr_text()


def test_ipv6_discovery_links(net: Net, group: str) -> None:
    for i in (1, 2):
        net.start_node(i, f"v{i}", group, host="::", interfaces=(f"{V6}{i}",))
    where = {f"v{i}": (i, endpoint(f"{V6}{i}")) for i in (1, 2)}
    raw = wait_mesh(net, where)
    for node_id, (_, status) in raw.items():
        assert status["discovery"]["interfaces"] == [f"{V6}{node_id[1]}"]
        assert status["discovery"]["error"] is None
    (link,) = raw["v1"][1]["links"]
    assert link["uri"] == f"tcp://[{V6}2]:{PORT}"


def test_cli_pub_and_sub_with_zeroconf_broker(net: Net, group: str) -> None:
    """`zbroker sub/pub --broker zeroconf://GROUP` find a node on the LAN by mDNS."""
    n = 5
    net.start_node(1, "n1", group)
    net.start_node(3, "n3", group)
    wait_mesh(net, {"n1": (1, endpoint(v4(1))), "n3": (3, endpoint(v4(3)))})
    sub = net.start(
        3, ZBROKER, "sub", "CLI.>", "--broker", f"zeroconf://{group}", "--interface", v4(3),
        "--count", str(n), "--json", "--timeout", "10",
    )  # fmt: skip
    assert sub.wait_stderr("subscribed to CLI.>", WAIT), sub.stderr_text()
    # the subscription is confirmed on its node; wait until n1 has the interest
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        routes = net.cli(1, "routes", "CLI.x", "--json", "--broker", endpoint(v4(1))) or []
        routes += net.cli(3, "routes", "CLI.x", "--json", "--broker", endpoint(v4(3))) or []
        if len([r for r in routes if r["pattern"] == "CLI.>"]) >= 2:
            break
        time.sleep(0.1)
    res = net.run(
        1, "pub", "CLI.x", "hello", "--count", str(n),
        "--broker", f"zeroconf://{group}", "--interface", v4(1), "--timeout", "10",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert sub.wait(20) == 0, sub.stderr_text()
    lines = [json.loads(x) for x in sub.stdout_text().splitlines() if x.strip()]
    assert [(e["topic"], e["payload"]) for e in lines] == [("CLI.x", "hello")] * n


def test_no_mdns_or_test_traffic_on_eth0(eth0_guard: dict[str, Any]) -> None:
    """Runs last in the module: the capture started before the first test."""
    if eth0_guard["skip"]:
        pytest.skip(eth0_guard["skip"])
    assert_eth0_clean(eth0_guard)
