"""Two nodes under one broker ID seen by a third (zbroker/links/handshake.py, sans-IO):
which links that are up make a newcomer a rival (refused) and which are a restarted
peer's former process (taken down)."""

from __future__ import annotations

import pytest

from zbroker.errors import ProtocolError
from zbroker.links.handshake import Repeats, describe, instance_of, rival, starts_of
from zbroker.links.state import Link, LinkKind, LinkState
from zbroker.routing import LinkOptions


def up(name: str, peer: str, instance: str, starts: int, kind: LinkKind) -> Link:
    link = Link(
        name=name,
        kind=kind,
        duplex=True,
        options=LinkOptions(),
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
        peer=peer,
        peer_incarnation=1_000 + starts,  # (the clock's: decides nothing here)
        peer_instance=instance,
        peer_starts=starts,
    )
    link.went_up(0.0)
    return link


def test_another_process_under_the_id_with_no_more_starts_is_a_rival() -> None:
    # a second node on a fresh data directory has a larger incarnation (the clock's) but
    # no more starts than the node that is up: it is no restart of it
    first = up("up1", "dup", "aaaa", 3, LinkKind.ACCEPTED)
    for starts in (1, 3):  # fewer or as many: not a restart of the node that is up
        found = rival([first], "dup", "bbbb", starts)
        assert found.other is first and found.stale == ()
        why = found.problem(describe("up2", False, "dup", "bbbb"))
        assert why is not None
        assert why.startswith(
            "two nodes use broker ID 'dup': refused link up2 (from dup, process bbbb"
        )
        assert "kept link up1 (from dup, process aaaa)" in why


def test_more_starts_is_the_peer_restarted_its_former_links_are_stale() -> None:
    old = [
        up("up1", "dup", "aaaa", 3, LinkKind.ACCEPTED),
        up("t-dup", "dup", "aaaa", 3, LinkKind.STATIC),
    ]
    found = rival(old, "dup", "bbbb", 4)
    assert found.other is None and found.stale == tuple(old)
    assert found.problem("link x") is None


def test_what_decides_nothing() -> None:
    same = up("up1", "dup", "aaaa", 3, LinkKind.ACCEPTED)
    other_peer = up("up2", "other", "cccc", 9, LinkKind.ACCEPTED)
    unmarked = up("up3", "dup", "", 9, LinkKind.ACCEPTED)  # a node from before the mark
    down = up("up4", "dup", "dddd", 9, LinkKind.STATIC)
    down.state = LinkState.WAITING
    links = [same, other_peer, unmarked, down]
    assert rival(links, "dup", "aaaa", 3).other is None  # the same process: a second link
    assert rival(links, "dup", "", 3).other is None  # the newcomer states no mark
    assert rival([other_peer, unmarked, down], "dup", "zzzz", 1).other is None


def test_instance_of_checks_the_field() -> None:
    assert instance_of({}) == ""
    assert instance_of({"instance": "ab12"}) == "ab12"
    for bad in (7, "", "x" * 65):
        with pytest.raises(ProtocolError):
            instance_of({"instance": bad})


def test_repeats_says_the_first_time_then_once_per_interval() -> None:
    said = Repeats(interval=60.0)
    assert said.due("k", 0.0) == 0
    assert said.due("k", 1.0) is None
    assert said.due("k", 59.0) is None
    assert said.due("other", 59.0) == 0
    assert said.due("k", 61.0) == 2  # two went unsaid since
    assert said.due("k", 62.0) is None


def test_starts_of_checks_the_field_and_falls_back_on_the_incarnation() -> None:
    assert starts_of({"starts": 4}, 99) == 4
    assert starts_of({}, 7) == 7  # an older node: its incarnation counted its starts
    for bad in (-1, "3", 1.5):
        with pytest.raises(ProtocolError):
            starts_of({"starts": bad}, 1)
