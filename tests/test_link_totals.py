"""The monitor's per-link totals (:class:`zbroker.features.monitor.snapshot.LinkTotals`):
they outlive a link for FORGET_AFTER, so a counter does not fall back when a link goes
down and up; a key with nothing counted goes at once (an audit saw a dialled link's
``peer=""`` series, from before its handshake named the peer, linger for an hour)."""

from __future__ import annotations

from zbroker.config import LinkConfig
from zbroker.features.monitor.snapshot import FORGET_AFTER, LinkTotals
from zbroker.links.state import Link


def test_a_key_with_nothing_counted_goes_at_once_and_a_counted_one_is_kept() -> None:
    link = Link.dialing(LinkConfig(name="ab", uri="tcp://127.0.0.1:1"))
    totals = LinkTotals()
    assert totals.update([link], 0.0) == {("ab", "", "static"): (0, 0, 0, 0, 0)}
    link.peer = "B"  # the handshake named the peer: a new key
    link.msgs_in, link.bytes_in = 3, 300
    assert totals.update([link], 1.0) == {("ab", "B", "static"): (3, 0, 300, 0, 0)}
    totals.fold(link, gone_at=2.0)  # it went down: its totals stay for FORGET_AFTER
    assert totals.update([], 3.0) == {("ab", "B", "static"): (3, 0, 300, 0, 0)}
    assert totals.update([], 2.0 + FORGET_AFTER) == {}
