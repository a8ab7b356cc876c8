"""Store-and-forward (PMSGS) and queue group (QMSGS) entries whose path does not end with
the link's peer: bad input, ``path_not_from_peer``, as plain messages are (the relay's
check, tests/integration/test_fuzz_regressions.py). Every node adds itself to a path
before it sends, so such an entry is a peer speaking for another node; it is counted
once, never delivered, and the rest of its frame is taken. A refused PMSGS entry is
acknowledged like any other bad entry (the PACK moves past it, a resend of it is not
counted again) and moves no dedupe: the real message of the same ID still arrives."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.fuzz_common import (
    LINK_PEER,
    RawPeer,
    bad_reasons,
    check_no_tracebacks,
    counters,
    wait_for,
)
from tests.integration.fuzz_common import raw as raw  # (the fixture: a node and raw sockets to it)
from zbroker import Client, wire
from zbroker.routing.groups import group_key


def _forged(raw: RawPeer) -> int:
    return bad_reasons(counters(raw.b))["path_not_from_peer"]


def _pmsg(lseq: int, topic: str, payload: bytes, pseq: int, path: list[str]) -> list[Any]:
    """A PMSGS entry of origin ``other`` (incarnation 1), message seq and pseq ``pseq``."""
    return [lseq, topic, payload, 0, None, "other", 1, pseq, 1.0, path, None, pseq]


def _acked(raw: RawPeer, upto: int) -> bool:
    """The node sent a PACK of epoch 1 covering ``upto``."""
    pack = raw.expect(raw.link, lambda v: v[0] == wire.PACK and v[1] == 1 and v[2] >= upto)
    return pack is not None


def test_a_pmsgs_entry_not_sent_by_the_link_peer_is_bad_input_and_acknowledged(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[bytes] = []
    with Client(raw.b.endpoint, timeout=10) as sub:
        sub.subscribe("T.>", lambda m: got.append(m.payload))
        raw.handshake()
        before = _forged(raw)
        frame = wire.encode_link(
            wire.PMSGS,
            1,
            1,
            [
                _pmsg(1, "T.x", b"forged", 5, ["other"]),  # (another node's ID last)
                _pmsg(2, "T.x", b"empty", 6, []),
                _pmsg(3, "T.x", b"real", 5, ["other", LINK_PEER]),  # (the forged one's ID)
                # no route: while the link's routes settle a good one would wait for a
                # resend, a forged one is taken (counted) so that it is not asked for again
                _pmsg(4, "U.x", b"unrouted", 7, ["other", "third"]),
            ],
        )
        raw.link.send(frame)
        assert _acked(raw, 4), "the PACK did not move past the refused entries"
        assert wait_for(lambda: got == [b"real"]), got
        assert _forged(raw) == before + 3
        raw.link.send(frame)  # a resend: taken before, so neither delivered nor counted
        assert _acked(raw, 4)
        assert raw.ping(raw.link) and raw.ping(raw.link)
        assert got == [b"real"]
        assert _forged(raw) == before + 3
        assert raw.b.status()["forward"]["persistent_duplicates"] == 0
    check_no_tracebacks(caplog)


def test_a_qmsgs_entry_not_sent_by_the_link_peer_is_bad_input(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    got: list[bytes] = []
    gkey = group_key("w", "jobs.>")
    me = raw.b.broker_id

    def entry(payload: bytes, path: list[str]) -> list[Any]:
        return ["jobs.x", payload, 0, None, "other", 1, 1, 1.0, path, [me, gkey]]

    with Client(raw.b.endpoint, timeout=10) as member:
        member.subscribe("jobs.>", lambda m: got.append(m.payload), queue="w")
        raw.handshake()
        before = _forged(raw)
        forged = [entry(b"forged", ["other"]), entry(b"empty", [])]
        raw.link.send(wire.encode_qmsgs([*forged, entry(b"real", ["other", LINK_PEER])]))
        assert wait_for(lambda: got == [b"real"]), got
        assert _forged(raw) == before + 2
        raw.link.send(wire.encode_qmsgs(forged))
        assert raw.ping(raw.link) and raw.ping(raw.link)
        assert wait_for(lambda: _forged(raw) == before + 4)
        assert got == [b"real"]
        assert raw.b.status()["queues_totals"]["unroutable"] == 0
    check_no_tracebacks(caplog)
