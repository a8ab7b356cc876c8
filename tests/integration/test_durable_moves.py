"""A shared durable's home moves to its consumers (redistribution; features/durables/
moves.py and adoption.py), with in-thread :class:`~zbroker.Broker` s and real clients.

Counts are exact: every payload is collected, a grace period shows nothing more arrives,
and the sorted payloads prove none was lost or repeated; where no consumer died, none
comes flagged redelivered either."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.moves import (
    Slow,
    StallingTarget,
    backlog,
    consumed_once,
    counters,
    emptied_home,
    holds,
    publishing_until_moved,
)
from tests.integration.test_shared_remote import (
    GRACE,
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    chain,
    homed,
    link,
    queue_row,
)
from tests.ports import free_port
from zbroker import Broker


def test_backlog_moves_to_the_consumers_node_while_publishing_goes_on(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A holds 3,000 persistent messages and no consumer; a slow consumer on C takes
    from it over the network, then after redistribution_delay the durable and what is
    left of its backlog move to C, while a publisher on B keeps publishing (its messages
    reach A and C both during the move: C stores each once). Every message is consumed
    exactly once, none flagged, and A ends holding nothing."""
    a, b, c = chain(broker_factory)
    n = 3000
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), n)
    homed(client_factory, wait_until, [a, b, c], "billing", "A")
    got = Slow(0.0005)
    client_factory(c.endpoint).subscribe("bill.>", got, durable="billing", shared=True, credit=20)
    pub = client_factory(b.endpoint)
    total = n + publishing_until_moved(wait_until, pub, a, n, pause=0.002)
    assert wait_until(lambda: len(got) >= total, WAIT), (len(got), total)
    time.sleep(GRACE)
    assert sorted(got.payloads()) == list(range(total))
    assert not any(got.redelivered())
    # A moved part of its backlog (the rest C's consumer had taken over the network) and
    # C stored it; what reached C both ways (published during the move) was dropped once
    assert counters(a)["durable_redistributed"] > 0 and counters(a)["durable_moves"] == 1
    assert counters(c)["durable_adopted"] > 0
    row = queue_row(c, "billing")
    assert row is not None and row["home"] == "C" and row["stored"] == 0


def test_a_move_ends_while_the_old_home_keeps_publishing(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """The publisher is on A, the old home, and never pauses: A used to store each of its
    messages and move it, so a message or two was always stored or unanswered there and
    the durable never ended. At the handover A stops taking new messages (they reach C,
    which has interest, by the network): the move ends while publishing goes on, and
    every message is consumed once, none flagged."""
    a, c = _pair(broker_factory)
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), 500)
    homed(client_factory, wait_until, [a, c], "billing", "A")
    got = Collector()
    client_factory(c.endpoint).subscribe("bill.>", got, durable="billing", shared=True)
    pub = client_factory(a.endpoint)
    total = 500 + publishing_until_moved(wait_until, pub, a, 500, confirm_every=20)
    assert wait_until(lambda: len(got) >= total, WAIT), (len(got), total)
    time.sleep(GRACE)
    assert sorted(got.payloads()) == list(range(total))
    assert not any(got.redelivered())
    assert counters(a)["durable_moves"] == 1


def test_what_the_old_home_sent_the_targets_consumers_is_kept_unflagged(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """C's consumer takes A's backlog with a wide window, so when C adopts the durable
    A's deliveries are still on their way to C's member. C used to end the member once its
    consumer held nothing, drop what came after, and A moved those messages flagged
    redelivered though no consumer had seen them. The member now stays until ``done`` and
    keeps them: 5,000 messages consumed once, none flagged."""
    a, c = _pair(broker_factory)
    n = 5000
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), n)
    homed(client_factory, wait_until, [a, c], "billing", "A")
    got = Collector()
    client_factory(c.endpoint).subscribe("bill.>", got, durable="billing", shared=True, credit=500)
    assert wait_until(lambda: len(got) >= n, WAIT), len(got)
    time.sleep(GRACE)
    assert sorted(got.payloads()) == list(range(n))
    assert not any(got.redelivered()), sum(got.redelivered())
    assert wait_until(lambda: holds(c, "billing") and not holds(a, "billing"), WAIT)


def test_a_consumer_returning_sooner_keeps_the_durable(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """redistribution_delay = 3 s: A's consumer leaves and a new one attaches on A within
    it, while C consumes too: the durable stays on A, nothing moves."""
    a = broker_factory(broker_id="A", redistribution_delay=3.0)
    c = broker_factory(broker_id="C", links=(link("ca", a),))
    first = client_factory(a.endpoint).subscribe(
        "bill.>", Collector(), durable="billing", shared=True
    )
    homed(client_factory, wait_until, [a, c], "billing", "A")
    far = Collector()
    client_factory(c.endpoint).subscribe("bill.>", far, durable="billing", shared=True)
    assert wait_until(lambda: (queue_row(a, "billing") or {}).get("members") == {"A": 1, "C": 1})
    first.unsubscribe()
    time.sleep(1.0)
    back = Collector()
    client_factory(a.endpoint).subscribe("bill.>", back, durable="billing", shared=True)
    time.sleep(3.0)
    assert holds(a, "billing") and not holds(c, "billing")
    assert counters(a)["durable_moves"] == 0
    backlog(client_factory(a.endpoint), 200)
    assert wait_until(lambda: len(back) + len(far) >= 200, WAIT)
    time.sleep(GRACE)
    assert sorted(back.payloads() + far.payloads()) == list(range(200))


def test_the_home_moves_to_the_node_with_most_consumers_and_the_others_follow(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """Home A has no consumer; B has one, C two: the durable moves to C, and B's consumer
    attaches to C's durable (told ``moved``). A backlog of 2,000 published on A before
    and 1,000 published on B after is consumed once across the three consumers."""
    a, b, c = chain(broker_factory)
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), 2000)
    homed(client_factory, wait_until, [a, b, c], "billing", "A")
    cons = [Slow(0.001), Slow(0.001), Slow(0.001)]
    for node, col in zip((b, c, c), cons, strict=True):
        client_factory(node.endpoint).subscribe(
            "bill.>", col, durable="billing", shared=True, credit=10
        )
    assert wait_until(lambda: not holds(a, "billing"), WAIT)
    assert holds(c, "billing") and not holds(b, "billing")
    assert wait_until(lambda: (queue_row(c, "billing") or {}).get("members") == {"C": 2, "B": 1})
    backlog(client_factory(b.endpoint), 1000, start=2000)
    assert wait_until(lambda: sum(len(x) for x in cons) >= 3000, WAIT)
    time.sleep(GRACE)
    assert sorted(p for x in cons for p in x.payloads()) == list(range(3000))
    assert all(len(x) for x in cons), [len(x) for x in cons]


def test_a_message_moves_at_most_max_moves_times(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """max_moves = 1: the backlog moves A -> C with its consumer; when that consumer
    goes back to A, C's messages (each moved once) stay on C, counted as move_limited,
    and A's consumer takes them over the network: none lost, none repeated."""
    fast = {"redistribution_delay": 0.5, "max_moves": 1}
    a = broker_factory(broker_id="A", **fast)
    c = broker_factory(broker_id="C", links=(link("ca", a),), **fast)
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), 1000)
    homed(client_factory, wait_until, [a, c], "billing", "A")
    slow = Slow(0.01)
    sub = client_factory(c.endpoint).subscribe(
        "bill.>", slow, durable="billing", shared=True, credit=5
    )
    assert wait_until(lambda: holds(c, "billing") and not holds(a, "billing"), WAIT)
    sub.unsubscribe()
    homed(client_factory, wait_until, [a, c], "billing", "C")
    back = Slow(0.02)
    client_factory(a.endpoint).subscribe("bill.>", back, durable="billing", shared=True, credit=5)
    assert wait_until(lambda: counters(c)["durable_move_limited"] > 0, WAIT), (
        {k: v for k, v in counters(c).items() if "durable" in k or k == "dropped"},
        {k: v for k, v in counters(a).items() if "durable" in k or k == "dropped"},
        queue_row(c, "billing"),
        queue_row(a, "billing"),
        len(slow),
        len(back),
    )
    assert wait_until(lambda: len(slow) + len(back) >= 1000, WAIT)
    time.sleep(GRACE)
    assert sorted(slow.payloads() + back.payloads()) == list(range(1000)), (len(slow), len(back))
    limited = counters(c)["durable_move_limited"]
    assert 0 < limited <= 1000 - len(slow)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"redistribution_delay": -1}, "durables.redistribution_delay"),
        ({"redistribution_delay": "soon"}, "durables.redistribution_delay"),
        ({"max_moves": 0}, "durables.max_moves"),
    ],
)
def test_bad_move_settings_are_refused(options: dict[str, Any], message: str) -> None:
    from zbroker.config import NodeConfig
    from zbroker.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        NodeConfig(**options)


def test_a_consumer_whose_member_node_dies_reopens_through_another_node(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    dead_between: bool = False,
) -> None:
    """A client with the address list C, A consumes A's shared durable through C (a
    member). C stops: the client opens the durable again through A, the next node of its
    list; what C held goes to it flagged, and every message is processed (more than once
    only flagged)."""
    a = broker_factory(broker_id="A", redistribution_delay=86400.0)  # (the home stays)
    c = broker_factory(broker_id="C", links=(link("ca", a),))
    emptied_home(client_factory, a)
    homed(client_factory, wait_until, [a, c], "billing", "A")
    got = Slow(0.002)
    d = broker_factory(broker_id="D", links=(link("da", a),)) if dead_between else None
    for _ in range(50):  # (a client picks its node at random from its list: C wanted)
        client = client_factory(
            f"{c.endpoint},{d.endpoint},{a.endpoint}" if d else f"{c.endpoint},{a.endpoint}",
            heartbeat_interval=0.2,
            heartbeat_timeout=1.0,
            reconnect_initial_delay=0.1,
            reconnect_max_delay=0.5,
        )
        if client.status()["broker_id"] == "C":
            break
        client.close()
    client.subscribe("bill.>", got, durable="billing", shared=True, credit=10)
    assert wait_until(lambda: (queue_row(a, "billing") or {}).get("members") == {"A": 0, "C": 1})
    pub = client_factory(a.endpoint)
    backlog(pub, 600)
    assert wait_until(lambda: len(got) >= 100, WAIT)
    if d is not None:
        d.stop()  # (the next node of the list does not answer: the one after it is asked)
    c.stop()
    assert wait_until(lambda: (queue_row(a, "billing") or {}).get("members") == {"A": 1}, WAIT)
    assert wait_until(lambda: set(got.payloads()) == set(range(600)), WAIT), len(got)
    time.sleep(GRACE)
    plain = [m.payload for m in got.snapshot() if not m.redelivered]
    assert len(plain) == len(set(plain))  # each processed once, but for flagged copies


def test_a_reopen_goes_on_to_the_next_node_when_one_does_not_answer(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """As above with the list C, D, A where D stopped before C: the re-open through D
    times out and goes on to A (it used to wait for D for good)."""
    test_a_consumer_whose_member_node_dies_reopens_through_another_node(
        broker_factory, client_factory, wait_until, dead_between=True
    )


# -- defects found in review: crossing moves, a target or an old home stopping mid-move ----


def test_a_durable_arriving_is_not_moved_back_while_its_move_goes_on(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """C's slow consumer holds A's messages for longer than redistribution_delay, so C
    has no consumer of its own yet while A still advertises the durable: C must not offer
    it back (two crossing moves ended it on both nodes, every message lost). Exactly one
    node holds it at the end, every message consumed once, none flagged."""
    a, c = _pair(broker_factory)
    n = 20
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), n)
    homed(client_factory, wait_until, [a, c], "billing", "A")
    got = Slow(0.5)  # (its 5 in flight take 2.5 s: longer than the delay)
    client_factory(c.endpoint).subscribe("bill.>", got, durable="billing", shared=True, credit=5)
    assert wait_until(lambda: len(got) >= n, WAIT), len(got)
    time.sleep(GRACE)
    assert sorted(got.payloads()) == list(range(n))
    assert not any(got.redelivered())
    assert wait_until(lambda: holds(c, "billing") and not holds(a, "billing"), WAIT)
    assert counters(c)["durable_moves"] == 0  # (nothing went back)


def test_a_move_waits_for_a_target_that_stops_and_loses_nothing(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Any,
) -> None:
    """C, the target, stops in the middle of the move while its consumer holds 5
    messages: A moves nothing toward it while it has no route there (a message moved
    then was dropped: lost), and when C is back the rest moves: all 200 consumed."""
    a = broker_factory(broker_id="A", data_dir=tmp_path / "a")
    target = StallingTarget(broker_factory, client_factory, tmp_path, a, "ca")
    n = 200
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), n)
    homed(client_factory, wait_until, [a, target.node], "billing", "A")
    target.stall()
    assert wait_until(lambda: (queue_row(a, "billing") or {}).get("moving_to") == "C", WAIT)
    c2 = target.restart()
    homed(client_factory, wait_until, [a, c2], "billing", "C")
    consumed_once(client_factory, wait_until, a, c2, n, credit=50, timeout=WAIT)


def test_an_old_home_restarted_mid_move_offers_it_again(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Any,
) -> None:
    """A stops after C has taken the durable over but before the handover, and comes
    back: the store says the move was under way, so A offers it again and ends it (it used
    to keep it for good, storing every message a second time). What is published on A
    after its restart reaches C's consumer once, and A ends holding nothing."""
    port = free_port()
    a = broker_factory(broker_id="A", data_dir=tmp_path / "a", port=port)
    c = broker_factory(
        broker_id="C", links=(link("ca", a),), redistribution_delay=600.0, data_dir=tmp_path / "c"
    )
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), 50)
    homed(client_factory, wait_until, [a, c], "billing", "A")
    far = Collector()
    client_factory(c.endpoint).subscribe("bill.>", far, durable="billing", shared=True, credit=5)
    assert wait_until(lambda: (queue_row(a, "billing") or {}).get("moving_to") == "C", WAIT)
    assert wait_until(lambda: _consumed_at_home(c, "billing"), WAIT)
    a.stop()
    a2 = broker_factory(broker_id="A", data_dir=tmp_path / "a", port=port)
    backlog(client_factory(a2.endpoint), 100, start=1000)
    assert wait_until(lambda: not holds(a2, "billing"), WAIT), queue_row(a2, "billing")
    assert wait_until(lambda: len(far) >= 150, WAIT), len(far)
    time.sleep(GRACE)
    assert sorted(far.payloads()) == [*range(50), *range(1000, 1100)]
    assert not any(far.redelivered())


def _consumed_at_home(node: Broker, name: str) -> bool:
    """Does ``node`` hold durable ``name`` with its consumer as the durable's own (taken
    over from the old home: no longer the consumer of a member of it)?"""
    me = node.status()["broker_id"]
    return any(
        r.get("kind") == "shared_durable"
        and r["name"] == name
        and r["home"] == me
        and r["members"] == {me: 1}
        for r in node.status()["queues"]
    )


def _pair(broker_factory: BrokerFactory) -> tuple[Broker, Broker]:
    a = broker_factory(broker_id="A")
    return a, broker_factory(broker_id="C", links=(link("ca", a),))


def test_rows_dropped_on_the_way_to_a_target_two_hops_away_are_sent_again(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Any,
) -> None:
    """Chain A - B - C: A moves 10,000 messages to C, and C stops while rows are on their
    way. B's route to C goes with C, so B drops what reaches it for C (an internal message
    without a route); A had deleted those rows (lost). Now A deletes a row only when C
    answers it stored, and sends again what is unanswered when its route goes: after C is
    back every message is consumed."""
    a = broker_factory(broker_id="A", data_dir=tmp_path / "a")
    b = broker_factory(broker_id="B", links=(link("ba", a),), data_dir=tmp_path / "b")
    target = StallingTarget(broker_factory, client_factory, tmp_path, b, "cb")
    n = 10_000
    emptied_home(client_factory, a)
    backlog(client_factory(a.endpoint), n)
    homed(client_factory, wait_until, [a, b, target.node], "billing", "A")
    target.stall()
    assert wait_until(lambda: counters(a)["durable_redistributed"] > 0, WAIT)
    c2 = target.restart()
    homed(client_factory, wait_until, [a, b, c2], "billing", "C")
    consumed_once(client_factory, wait_until, a, c2, n, credit=500, timeout=60.0)
