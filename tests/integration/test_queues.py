"""Queue groups over real nodes: in-thread :class:`~zbroker.Broker` s linked on 127.0.0.1,
real :class:`~zbroker.Client` s as members.

Counts are exact: every message a group must get is counted across its members (the total
is known, so the wait ends on it), then a grace period shows nothing more arrives (no
message doubled), and the payload sets prove none was lost or repeated.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig, QueueRule
from zbroker.errors import BrokerUnreachable, ConfigError, RequestError

WAIT = 20.0
GRACE = 0.5
N = 300
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def link(name: str, to: Broker) -> LinkConfig:
    return LinkConfig(name=name, uri=to.endpoint, **FAST_LINK)


def group_row(broker: Broker, group: str) -> dict[str, Any] | None:
    for row in broker.status()["queues"]:
        if row.get("group") == group:
            return dict(row)
    return None


def members_seen(broker: Broker, group: str) -> dict[str, int]:
    row = group_row(broker, group)
    return {} if row is None else dict(row["members"])


def wait_total(wait_until: WaitUntil, collectors: list[Collector], n: int) -> None:
    assert wait_until(lambda: sum(len(c) for c in collectors) >= n, WAIT), [
        len(c) for c in collectors
    ]
    time.sleep(GRACE)
    got = [p for c in collectors for p in c.payloads()]
    assert len(got) == n, [len(c) for c in collectors]
    assert sorted(got) == list(range(n))


def test_one_member_per_message_and_plain_subscribers_get_all(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    c = client_factory(broker.endpoint)
    members = [Collector() for _ in range(3)]
    for m in members:
        c.subscribe("jobs.>", m, queue="workers")
    other = Collector()
    c.subscribe("jobs.>", other, queue="auditors")
    plain = Collector()
    c.subscribe("jobs.>", plain)
    for i in range(N):
        c.publish("jobs.a", i)
    wait_total(wait_until, members, N)  # one copy per message in group "workers"
    wait_total(wait_until, [other], N)  # and one in group "auditors"
    wait_total(wait_until, [plain], N)  # the plain subscriber has every message
    assert all(len(m) > 0 for m in members), [len(m) for m in members]
    row = group_row(broker, "workers")
    assert row is not None and row["delivered"] == N and row["members"] == {broker.broker_id: 3}


def test_chain_members_far_away(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    c = broker_factory(broker_id="C", links=(link("cb", b),))
    cc = client_factory(c.endpoint)
    members = [Collector(), Collector()]
    for m in members:
        cc.subscribe("jobs.>", m, queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"C": 2}, WAIT)
    pub = client_factory(a.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)
    wait_total(wait_until, members, N)
    assert b.status()["queues"][0]["delivered"] == 0  # B only relays


def test_local_first_then_round_robin(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    c1, c2, c3 = Collector(), Collector(), Collector()
    # (credit for all: the member here never falls behind, so nothing spills over to B)
    ca.subscribe("jobs.>", c1, queue="workers", credit=N)
    cb.subscribe("jobs.>", c2, queue="workers")
    cb.subscribe("jobs.>", c3, queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"A": 1, "B": 2}, WAIT)
    for i in range(N):
        ca.publish("jobs.x", i)
    wait_total(wait_until, [c1, c2, c3], N)
    assert (len(c1), len(c2), len(c3)) == (N, 0, 0)  # local_first: the member on A


def test_round_robin_over_members_network_wide(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A", queues=(QueueRule(group="workers", policy="round_robin"),))
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    c1, c2, c3 = Collector(), Collector(), Collector()
    ca.subscribe("jobs.>", c1, queue="workers")
    cb.subscribe("jobs.>", c2, queue="workers", credit=1000)
    cb.subscribe("jobs.>", c3, queue="workers", credit=1000)
    assert wait_until(lambda: members_seen(a, "workers") == {"A": 1, "B": 2}, WAIT)
    for i in range(N):
        ca.publish("jobs.x", i)
    wait_total(wait_until, [c1, c2, c3], N)
    # members weigh their node: A gets exactly a third, B two thirds, shared between its two
    assert len(c1) == N // 3
    assert len(c2) + len(c3) == 2 * N // 3
    assert abs(len(c2) - len(c3)) <= N // 10, (len(c2), len(c3))


def test_member_leaves_the_rest_take_over(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    near, far = Collector(), Collector()
    sub = ca.subscribe("jobs.>", near, queue="workers")
    cb.subscribe("jobs.>", far, queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"A": 1, "B": 1}, WAIT)
    sub.unsubscribe()
    assert wait_until(lambda: members_seen(a, "workers") == {"B": 1}, WAIT)
    for i in range(N):
        ca.publish("jobs.x", i)
    wait_total(wait_until, [near, far], N)
    assert len(near) == 0


def test_a_join_that_timed_out_leaves_no_member_behind(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A join the node answered after the client's timeout made a member at the node
    that the client did not know: it took its share of the group's messages (half of
    them, with one other member) and never processed nor acknowledged them."""
    a = broker_factory(broker_id="A")
    slow = client_factory(a.endpoint, timeout=0.3, heartbeat_timeout=10.0)
    busy = threading.Event()

    def hold(node: Any) -> None:
        busy.set()
        time.sleep(1.5)  # the node's loop answers nothing meanwhile

    holder = threading.Thread(target=a.call, args=(hold,))
    holder.start()
    try:
        assert busy.wait(WAIT)
        with pytest.raises(BrokerUnreachable):
            slow.subscribe("jobs.>", Collector(), queue="workers")
    finally:
        holder.join()
    worker = Collector()
    client_factory(a.endpoint).subscribe("jobs.>", worker, queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"A": 1}, WAIT)
    publisher = client_factory(a.endpoint)
    for i in range(N):
        publisher.publish("jobs.x", i)
    wait_total(wait_until, [worker], N)


def test_no_member_anywhere_nothing_is_sent(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    cb = client_factory(b.endpoint)
    sub = cb.subscribe("jobs.>", Collector(), queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"B": 1}, WAIT)
    sub.unsubscribe()
    assert wait_until(lambda: members_seen(a, "workers") == {}, WAIT)
    ca = client_factory(a.endpoint)
    for i in range(50):
        ca.publish("jobs.x", i)
    barrier = Collector()
    ca.subscribe("sync", barrier)
    ca.publish("sync", 1)
    assert barrier.wait_for(1)
    assert a.status()["queues_totals"]["picked"] == 0
    assert all(ln["msgs_out"] == 0 for ln in a.status()["links"])


def test_bad_queue_options_are_clear_errors(broker: Broker, client_factory: ClientFactory) -> None:
    c = client_factory(broker.endpoint)
    with pytest.raises(ConfigError, match="not both"):
        c.subscribe("jobs.>", Collector(), queue="workers", durable="billing")
    with pytest.raises(ConfigError, match="queue group name"):
        c.subscribe("jobs.>", Collector(), queue="bad name!")
    with pytest.raises(RequestError, match="queue group name"):
        c.request(30, {"group": "$bad", "pattern": "jobs.>", "member": 1})
    with pytest.raises(RequestError, match="credit"):
        c.request(30, {"group": "w", "pattern": "jobs.>", "member": 1, "credit": 0})


def test_queue_config(tmp_path: Path) -> None:
    from zbroker.config import config_from_mapping

    cfg = config_from_mapping({"queue": [{"group": "w", "policy": "weighted"}]}, "n.toml")
    assert cfg.queues == (QueueRule(group="w", policy="weighted"),)
    with pytest.raises(ConfigError, match="policy 'rr' is not one of"):
        config_from_mapping({"queue": [{"group": "w", "policy": "rr"}]}, "n.toml")
    with pytest.raises(ConfigError, match="queue #1: group: 'w w' is not a valid name"):
        config_from_mapping({"queue": [{"group": "w w"}]}, "n.toml")
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_mapping({"queue": [{"group": "w", "conduit": 1}]}, "n.toml")


def test_queues_and_routes_commands(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    import json

    from tests.integration.cli_runs import invoke

    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    client_factory(b.endpoint).subscribe("jobs.>", Collector(), queue="workers", credit=7)
    client_factory(a.endpoint).subscribe("bill.>", Collector(), durable="billing", shared=True)
    assert wait_until(lambda: members_seen(a, "workers") == {"B": 1}, WAIT)
    assert wait_until(
        lambda: any(r.get("members") == 1 for r in a.call(lambda n: n.engine.interest())), WAIT
    )
    text = invoke("queues", "--broker", a.endpoint)
    assert text.exit_code == 0, text.output
    assert "workers" in text.output and "B:1" in text.output and "billing" in text.output
    rows = json.loads(invoke("queues", "--json", "--broker", a.endpoint).output)
    kinds = {r["kind"]: r for r in rows}
    assert kinds["group"]["members"] == {"B": 1}
    assert kinds["shared_durable"]["members"] == {"A": 1}
    routes = invoke("routes", "--broker", a.endpoint)
    assert "jobs.> [queue workers: 1 member(s), 7 free credit]" in routes.output, routes.output
    # with a PATTERN too: a group's entry is matched by its members' pattern
    only = invoke("routes", "jobs.>", "--broker", a.endpoint)
    assert "jobs.> [queue workers: 1 member(s), 7 free credit]" in only.output, only.output
    assert invoke("routes", "other.>", "--broker", a.endpoint).output.strip() == "no routes"


def test_mesh_no_duplicate_queue_subs(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """ActiveMQ's "no duplicate queue subs": in a triangle the member's interest reaches A
    by two paths; each message still crosses one link once and arrives once."""
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    c = broker_factory(broker_id="C", links=(link("ca", a), link("cb", b)))
    member = Collector()
    client_factory(c.endpoint).subscribe("jobs.>", member, queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"C": 1}, WAIT)
    assert wait_until(lambda: members_seen(b, "workers") == {"C": 1}, WAIT)
    pub = client_factory(a.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)
    wait_total(wait_until, [member], N)
    assert b.status()["queues_totals"]["forwarded"] == 0  # the direct link only
    assert a.status()["queues_totals"]["forwarded"] == N


def test_migrate_consumer(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """ActiveMQ's "migrate consumer": the only member moves from A to C (chain A-B-C);
    what is published after the move reaches it on C, each message once."""
    a = broker_factory(broker_id="A")
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    c = broker_factory(broker_id="C", links=(link("cb", b),))
    before, after = Collector(), Collector()
    sub = client_factory(a.endpoint).subscribe("jobs.>", before, queue="workers")
    pub = client_factory(a.endpoint)
    for i in range(100):
        pub.publish("jobs.x", i)
    wait_total(wait_until, [before], 100)
    sub.unsubscribe()
    client_factory(c.endpoint).subscribe("jobs.>", after, queue="workers")
    assert wait_until(lambda: members_seen(a, "workers") == {"C": 1}, WAIT)
    for i in range(100, 100 + N):
        pub.publish("jobs.x", i)
    assert wait_until(lambda: len(after) >= N, WAIT)
    time.sleep(GRACE)
    assert sorted(after.payloads()) == list(range(100, 100 + N))


@pytest.mark.parametrize("down_for", [0.0, 2.0])
def test_members_rejoin_after_a_node_restart(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: WaitUntil,
    down_for: float,
) -> None:
    """The node restarts under connected members (at once: the incarnation tells; or
    down past the clients' heartbeat timeout): they join again by themselves."""
    port, data = free_port(), tmp_path / "restart"
    node = broker_factory(port=port, data_dir=data)
    members = [Collector(), Collector()]
    clients = [
        client_factory(node.endpoint, heartbeat_interval=0.2, heartbeat_timeout=1.0)
        for _ in members
    ]
    for c, m in zip(clients, members, strict=True):
        c.subscribe("jobs.>", m, queue="workers")
    node.stop()
    time.sleep(down_for)
    node = broker_factory(port=port, data_dir=data)
    assert wait_until(lambda: members_seen(node, "workers") == {node.broker_id: 2}, WAIT)
    pub = client_factory(node.endpoint)
    for i in range(N):
        pub.publish("jobs.x", i)
    wait_total(wait_until, members, N)


def test_local_first_spills_over_to_free_credit_elsewhere(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    """A member here that has used up its credit while messages wait for it no longer
    takes every message: they go to a member elsewhere that advertises free credit, and
    so does what already waited here for it. It used to take them all, and past the
    node's bound (hwm 50) the oldest were dropped while the other member sat idle."""
    a = broker_factory(broker_id="A", hwm=50)
    b = broker_factory(broker_id="B", links=(link("ba", a),))
    ca, cb, pub = (client_factory(x.endpoint) for x in (a, b, a))
    release = threading.Event()
    slow: list[int] = []

    def hold(msg: Any) -> None:
        slow.append(msg.payload)
        release.wait(WAIT)

    far = Collector()
    ca.subscribe("jobs.>", hold, queue="w", credit=1)
    cb.subscribe("jobs.>", far, queue="w", credit=1000)
    assert wait_until(lambda: members_seen(a, "w") == {"A": 1, "B": 1}, WAIT)
    pub.publish("jobs.x", 0)
    assert wait_until(lambda: slow == [0], WAIT)
    pub.publish("jobs.x", 1)  # waits on A (its member has no room), then goes to B
    assert far.wait_for(1, WAIT) and far.payloads() == [1]
    for i in range(2, N + 2):
        pub.publish("jobs.x", i)
    assert far.wait_for(N + 1, WAIT), len(far)
    release.set()
    time.sleep(GRACE)
    assert sorted(far.payloads()) == list(range(1, N + 2))
    assert slow == [0]
    row = group_row(a, "w")
    assert row is not None and (row["pending"], row["dropped"]) == (0, 0)
