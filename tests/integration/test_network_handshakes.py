"""Handshakes between the nodes of a network, refused and not: a link to itself, another
node under our broker ID, a peer of another group, a peer that never answers (each refused
or failed, counted, and said in the log and in status), and several links between one pair
(all come up). In-thread nodes (:mod:`.network`, which also says how these tests wait and
count)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import zmq

from tests.helpers import Collector
from tests.integration.network import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    N,
    Net,
    WaitUntil,
    assert_exact,
    counters,
    entries,
    has_route,
    link_named,
    links_of,
    pump,
    routes,
    wait_links,
)
from tests.integration.network import net as net  # (the fixture)
from tests.node_configs import FAST_LINK
from zbroker import wire

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.status_text import format_status
else:
    from zbroker.cli.status_text import format_status

# -- 12. handshake refusals -----------------------------------------------------------------------


def test_link_to_self_is_refused_and_counted(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A", net.link("A", "A", name="self"))
    assert wait_until(lambda: link_named(a, "self")["state"] == "refused", WAIT), links_of(a)
    ln = link_named(a, "self")
    assert "self" in (ln["last_error"] or "")
    # one handshake, both of whose halves are this node: its acceptor refused, its dialer
    # was refused
    assert wait_until(lambda: counters(a)["handshakes_refused"] == 2, WAIT), counters(a)
    # not retried: the count stays put (redials would come every 0.1-0.5 s)
    time.sleep(4 * FAST_LINK["reconnect_initial_delay"] + GRACE)
    assert counters(a)["handshakes_refused"] == 2
    assert link_named(a, "self")["state"] == "refused"
    assert counters(a)["links_up"] == 0
    assert len(links_of(a)) == 1  # no accepted half either
    assert any("refused link to self (A)" in r.getMessage() for r in caplog.records), caplog.text


def test_another_node_under_our_broker_id_is_named_as_such_and_retried(
    net: Net,
    broker_factory: BrokerFactory,
    caplog: pytest.LogCaptureFixture,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """Two nodes configured with one broker ID (a copied config or data directory) would
    break the loop rules, which go by broker ID: the handshake is refused, and both sides
    say that another node uses the ID (not "link to self", which it is not). The dialer
    keeps retrying: the operator will rename one of them."""
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A")
    twin = broker_factory(
        broker_id="A",
        port=net.port("A2"),
        data_dir=tmp_path / "data-twin",
        links=(net.link("A2", "A", name="twin"),),
    )
    assert wait_until(lambda: counters(twin)["handshakes_refused"] >= 2, WAIT), links_of(twin)
    ln = link_named(twin, "twin")
    assert ln["state"] in ("waiting", "handshaking")  # retried, not given up
    assert "another node uses our broker ID 'A'" in (ln["last_error"] or ""), ln
    assert counters(a)["handshakes_refused"] >= 2
    assert counters(a)["links_up"] == 0 and counters(twin)["links_up"] == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "zbroker.node"]
    assert not any("to self" in m for m in messages), messages
    assert any("another node uses our broker ID 'A'" in m for m in messages), messages


def test_peer_in_another_group_is_refused_and_logged(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A", net.link("A", "B"), group="east")
    b = net.start("B", group="west")
    assert wait_until(lambda: counters(b)["handshakes_refused"] >= 1, WAIT), counters(b)

    def refused() -> bool:
        return "west" in (link_named(a, "ab")["last_error"] or "")

    assert wait_until(refused, WAIT), links_of(a)
    assert links_of(b) == []
    assert link_named(a, "ab")["state"] != "up"
    assert counters(a)["links_up"] == 0 and counters(b)["links_up"] == 0
    messages = [r.getMessage() for r in caplog.records if r.name == "zbroker.node"]
    # logged by both sides: the acceptor that refused and the dialer that was refused
    assert sum("'east'" in m and "'west'" in m for m in messages) >= 2, messages


def test_a_peer_that_never_answers_is_said_in_the_log_and_in_status(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    """Nothing listens at the link's address: the node says so at once (a warning naming
    the address), then only at attempts 2, 4, 8... (an outage does not flood the log), and
    `zbroker status` shows why the link is not up. When the peer comes, the link comes up
    and the error is gone."""
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    a = net.start("A", net.link("A", "B"))  # B's port is reserved; B is not started yet

    def warned() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "zbroker.node" and "no answer from" in r.getMessage()
        ]

    assert wait_until(lambda: link_named(a, "ab")["attempts"] >= 3, WAIT), links_of(a)
    assert wait_until(lambda: link_named(a, "ab")["state"] == "waiting", WAIT), links_of(a)
    logged = warned()
    assert logged[:2] == [
        f"link ab: no answer from {net.uri('B')} to the handshake (attempt {n}; nothing "
        f"listening there, or not a zbroker node); next attempt in {d:.1f} s"
        for n, d in ((1, 0.1), (2, 0.2))
    ], logged
    assert not any("(attempt 3;" in m for m in logged), logged  # 3 is not a power of two
    ln = link_named(a, "ab")
    assert ln["last_error"] == "no answer to the handshake"
    text = format_status(a.status())
    assert f"\n  ab (waiting): no answer to the handshake (attempt {ln['attempts']})" in text

    b = net.start("B")
    wait_links(wait_until, {a: {("ab", "B")}, b: {("ab", "A")}})
    assert link_named(a, "ab")["last_error"] is None
    assert link_named(a, "ab")["attempts"] == 0
    assert "no answer" not in format_status(a.status())


def test_several_links_between_one_pair_all_come_up(
    net: Net, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = net.start("A", net.link("A", "B", name="one"), net.link("A", "B", name="two"))
    b = net.start("B")
    wait_links(wait_until, {a: {("one", "B"), ("two", "B")}, b: {("one", "A"), ("two", "A")}})
    got = Collector()
    client_factory(b.endpoint).subscribe("PAIR.>", got)
    # heard over both links; the tie goes to the lower link name
    assert wait_until(
        lambda: entries(a) == 2 and has_route(a, "PAIR.>", "B", hops=1, via="one"), WAIT
    ), routes(a)
    pump(client_factory(a.endpoint), "PAIR.X", N, got, end="PAIR.END")
    assert_exact(got, "PAIR.X", range(N), "PAIR.END")
    assert link_named(a, "one")["msgs_out"] == N + 1
    assert link_named(a, "two")["msgs_out"] == 0
    assert counters(b)["duplicates"] == 0
    assert counters(a)["handshakes_refused"] == 0 and counters(b)["handshakes_refused"] == 0


def test_a_malformed_answer_to_the_handshake_is_said_as_such(
    net: Net, caplog: pytest.LogCaptureFixture, wait_until: WaitUntil
) -> None:
    """Something answers the link's HELLO, but not as a zbroker node does (a WELCOME
    without an id): the dial times out as before, but says it was answered, malformed,
    rather than that nothing listens there (an audit)."""
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    fake = ctx.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake.bind(net.uri("B"))
    try:
        a = net.start("A", net.link("A", "B"))
        assert fake.poll(int(WAIT * 1000)), "no HELLO came"
        ident, _ = fake.recv_multipart()
        fake.send_multipart([ident, wire.encode_link(wire.LINK_WELCOME, {"id": 5})])

        def error() -> str:
            return str(link_named(a, "ab")["last_error"] or "")

        assert wait_until(lambda: error().startswith("malformed answer: bad_type"), WAIT), links_of(
            a
        )
        said = [r.getMessage() for r in caplog.records if "malformed answer from" in r.getMessage()]
        assert said and "LINK_WELCOME needs an id string" in said[0], said
    finally:
        fake.close()
        ctx.term()
