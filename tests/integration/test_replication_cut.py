"""Sync answers with a part missing, on in-thread nodes: a node behind the primary that
never answers (the link is ``partial``, asked again with a growing wait), one whose link
goes down while it is asked (its part is missing, not gone), and a fetch whose removals
take many frames."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import FAST_LINK
from zbroker import Broker
from zbroker.config import LinkConfig
from zbroker.features.state import feature as state_feature
from zbroker.features.state import replication as state_replication

from .test_replication_sync import (
    BrokerFactory,
    ClientFactory,
    answered,
    counts,
    fan,
    replication,
    silence,
    values,
    wait_for,
)


def behind(broker_factory: BrokerFactory, p: Broker, **options: Any) -> Broker:
    """X, linked to P (its link up): a node behind the primary."""
    link = LinkConfig(name="xp", uri=p.endpoint, **FAST_LINK)
    x = broker_factory(broker_id="X", links=(link,), **options)
    wait_for(lambda: x.status()["links"][0]["state"] == "up", lambda: x.status()["links"])
    return x


def test_a_branch_that_never_answers_leaves_the_link_partial_and_asked_less_often(
    broker_factory: BrokerFactory, client_factory: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """X, behind P, hangs: every answer P sends S is cut, with P's own part whole. S is
    ``partial`` after the first (not ``syncing`` for ever), and asks again after a wait
    that doubles up to the cap; once X answers again, the next sync completes."""
    monkeypatch.setattr(state_feature, "QUERY_TIMEOUT", 1.0)  # (short attempts)
    monkeypatch.setattr(state_replication, "RETRY_FIRST", 0.3)
    monkeypatch.setattr(state_replication, "RETRY_MAX", 1.2)
    p = broker_factory(broker_id="P")
    x = behind(broker_factory, p)
    client_factory(p.endpoint).set("PRICE.A", "a-value")
    client_factory(x.endpoint).set("PRICE.Z", "z-value")
    speak = silence(x)
    s = broker_factory(broker_id="S", links=(fan(p),))
    seen: dict[int, tuple[str, int, float, int]] = {}

    def watch() -> bool:
        rep = replication(s)
        if rep["retries"]:
            seen[rep["retries"]] = (rep["state"], rep["syncs"], rep["retry_delay"], rep["topics"])
        return bool(rep["retries"] >= 4)

    wait_for(watch, lambda: replication(s))
    for k, got in seen.items():  # 0.3, 0.6, 1.2, 1.2, ...
        assert got == ("partial", 0, min(0.3 * 2 ** (k - 1), 1.2), 1), (k, got)
    assert counts(s) == (0, 1, 0)  # P's PRICE.A
    speak()
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    rep = replication(s)
    assert (rep["syncs"], rep["topics"], rep["retry_delay"]) == (1, 2, None)
    assert values(client_factory(s.endpoint)) == [
        ("PRICE.A", "a-value", "P"),
        ("PRICE.Z", "z-value", "X"),
    ]


def test_a_node_going_down_while_asked_is_a_missing_part_not_a_removal(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S, restarted, syncs again; X (hung) goes down while P waits for its part: P's
    answer lacks PRICE.Z, but only because X could not answer, so S keeps its replica."""
    p = broker_factory(broker_id="P")
    x = behind(broker_factory, p)
    client_factory(p.endpoint).set("PRICE.A", "a-value")
    client_factory(x.endpoint).set("PRICE.Z", "z-value")
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    assert counts(s) == (0, 2, 0)
    s.stop()
    # (only X's link going down ends P's wait; no retry comes before the test looks)
    monkeypatch.setattr(state_feature, "QUERY_TIMEOUT", 30.0)
    monkeypatch.setattr(state_feature, "RELAY_TIMEOUT", 30.0)
    monkeypatch.setattr(state_replication, "RETRY_FIRST", 60.0)
    silence(x)
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: p.status()["state"]["queries_pending"] == 1, lambda: p.status()["state"])
    x.stop()
    wait_for(lambda: answered(s), lambda: replication(s))
    rep = replication(s)
    assert (rep["state"], rep["syncs"], rep["retries"], rep["topics"]) == ("partial", 0, 1, 2)
    assert counts(s) == (0, 2, 0)  # PRICE.Z's replica is kept, not removed


def test_a_fetch_honours_more_removals_than_one_frame_holds(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    """Y holds older values of N topics that X removed: X's answer to Y's fetch carries N
    removals, far more than one frame of the small max_frame_bytes both nodes have; every
    one of them must reach Y, so none of Y's values comes back."""
    n = 400
    small = {"max_frame_bytes": 1024}
    topics = [f"T.{'x' * 180}.{i:04d}" for i in range(n)]
    y = broker_factory(broker_id="Y", data_dir=tmp_path / "Y", **small)
    cy = client_factory(y.endpoint)
    for t in topics:
        cy.set(t, "old")
    cy.close()
    y.stop()
    x = broker_factory(broker_id="X", **small)
    cx = client_factory(x.endpoint)
    for t in topics:
        cx.set(t, "newer")
    assert cx.remove("T.>") == n
    assert counts(x) == (0, 0, n)
    y_link = LinkConfig(name="yx", uri=x.endpoint, **FAST_LINK)
    y = broker_factory(broker_id="Y", data_dir=tmp_path / "Y", links=(y_link,), **small)
    wait_for(lambda: y.status()["links"][0]["state"] == "up", lambda: y.status()["links"])
    cy = client_factory(y.endpoint)
    assert cy.fetch("T.>") == []  # (X's removals are newer than every value here)
    assert cx.fetch("T.>") == []
    assert y.status()["state"]["queries_expired"] == 0  # (every answer came whole)
    assert counts(y) == (n, 0, 0)  # (Y's values stay stored: nothing makes it give up)


def test_an_owner_out_of_reach_at_a_sync_is_forgotten_not_outranked(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    """Was (an audit): S, restarted while X (PRICE.Z's owner) was away, got a whole answer
    without PRICE.Z and wrote a removal at a version X never made; once X was back, that
    tombstone outranked X's value in every fetch, X's own included, and no sync could
    undo it. Now S forgets the replica (no tombstone, subscribers told as for a lost
    session), and takes it again at its next sync."""
    p = broker_factory(broker_id="P")
    x = behind(broker_factory, p, data_dir=tmp_path / "X")
    client_factory(p.endpoint).set("PRICE.A", "a-value")
    client_factory(x.endpoint).set("PRICE.Z", "z-value")
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    assert counts(s) == (0, 2, 0)
    s.stop()
    x.stop()
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    assert counts(s) == (0, 1, 0)  # PRICE.Z forgotten: no tombstone
    assert values(client_factory(s.endpoint)) == [("PRICE.A", "a-value", "P")]
    x = behind(broker_factory, p, data_dir=tmp_path / "X")
    both = [("PRICE.A", "a-value", "P"), ("PRICE.Z", "z-value", "X")]
    for node in (x, p):
        assert values(client_factory(node.endpoint)) == both, node.broker_id
    s.stop()
    s = broker_factory(broker_id="S", data_dir=tmp_path / "S", links=(fan(p),))
    wait_for(lambda: replication(s)["state"] == "in sync", lambda: replication(s))
    assert counts(s) == (0, 2, 0)
    assert values(client_factory(s.endpoint)) == both
