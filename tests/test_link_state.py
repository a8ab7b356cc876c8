"""The link state machine's rules (zbroker/links/state.py), sans-IO: a link, a clock we
move by hand, and what :func:`due` says; the handshake checks and frame cutting too."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.config import LinkConfig
from zbroker.const import LINK_BATCH, PROTOCOL_VERSION
from zbroker.errors import ProtocolError
from zbroker.links.handshake import (
    Me,
    hello_body,
    parse_hello,
    peer_frame_max,
    problem,
    welcome_body,
)
from zbroker.links.outbox import ADVERT_BATCH, advert_chunks, cut_runs, queued
from zbroker.links.state import Due, Link, LinkKind, LinkState, due, link_key


def dialer(**cfg: Any) -> Link:
    return Link.dialing(LinkConfig(name="ab", uri="tcp://127.0.0.1:7200", **cfg))


def test_rule_2_a_waiting_dialer_dials_at_its_deadline() -> None:
    link = dialer()
    assert link.state is LinkState.WAITING and due(link, 0.0) is Due.DIAL
    link.dialling(10.0)
    assert (link.state, link.attempts, link.deadline) == (LinkState.HANDSHAKING, 1, 13.0)
    assert due(link, 12.9) is None


def test_rule_3_no_answer_waits_an_exponential_capped_backoff() -> None:
    link = dialer(reconnect_initial_delay=0.5, reconnect_multiplier=2.0, reconnect_max_delay=3.0)
    delays = []
    now = 0.0
    for _ in range(6):
        link.dialling(now)
        now = link.deadline
        assert due(link, now) is Due.HANDSHAKE_TIMEOUT
        delays.append(link.wait("no answer", now))
        assert link.state is LinkState.WAITING and due(link, now) is None
        now = link.deadline
        assert due(link, now) is Due.DIAL
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert link.last_error == "no answer"


def test_rule_4_heartbeats_and_silence() -> None:
    link = dialer(heartbeat_interval=1.0, heartbeat_timeout=3.0)
    link.dialling(0.0)
    link.went_up(0.0)
    assert (link.state, link.attempts, link.ups) == (LinkState.UP, 0, 1)
    assert due(link, 0.5) is None
    assert due(link, 1.0) is Due.HEARTBEAT
    link.last_sent = 1.0
    assert due(link, 1.5) is None
    link.last_recv = 2.0
    assert due(link, 4.9) is Due.HEARTBEAT  # sent nothing since 1.0
    link.last_sent = 4.9
    assert due(link, 5.1) is Due.SILENT  # nothing heard for more than 3 s


def test_rule_5_down_from_up_redials_at_once_else_after_backoff() -> None:
    link = dialer(reconnect_initial_delay=0.5)
    link.dialling(0.0)
    link.went_up(0.0)
    link.went_down("peer said goodbye", was_up=True, now=7.0)
    assert (link.state, link.deadline, link.last_error) == (
        LinkState.WAITING,
        7.0,
        "peer said goodbye",
    )
    link.dialling(7.0)
    link.went_down("refused", was_up=False, now=8.0)
    assert link.deadline == 8.5


def test_rule_5_max_attempts_make_a_dialer_give_up() -> None:
    link = dialer(reconnect_max_attempts=2, reconnect_initial_delay=0.1)
    now = 0.0
    for _ in range(2):
        assert due(link, now) is Due.DIAL
        link.dialling(now)
        link.wait("no answer", link.deadline)
        now = link.deadline
    assert due(link, now) is Due.GIVE_UP
    link.went_down("x", was_up=False, now=now)
    assert link.state is LinkState.FAILED and due(link, now + 100) is None


def test_acceptor_links_never_dial_and_name_themselves_by_peer() -> None:
    link = Link(
        name="ab",
        kind=LinkKind.ACCEPTED,
        duplex=False,
        options=LinkConfig(name="ab", uri="tcp://x:1").options,
        heartbeat_interval=1.0,
        heartbeat_timeout=3.0,
        peer="A",
    )
    assert due(link, 100.0) is None  # WAITING, but not a dialer
    assert (link.dialer, link.can_send, link.can_receive) == (False, False, True)
    assert link.engine_id == "A/ab" and link_key(link) == "A/ab/accepted"
    link.set_peer_frame_max(1000)
    assert (link.frame_limit, link.batch_bytes) == (1000 + 64 * 1024, 1000)


# -- handshakes ---------------------------------------------------------------------------

ME = Me("A", 3, "mark", "g", 1 << 20)


def test_hello_round_trip_and_refusals() -> None:
    cfg = LinkConfig(name="ab", uri="tcp://127.0.0.1:1", ttl=4, include=("X.>",))
    other = Me("B", 1, "m2", "g", 4096)
    hello = parse_hello(hello_body(other, "ab", cfg), own_max=1 << 20)
    assert (hello.peer, hello.name, hello.incarnation, hello.peer_max_frame) == ("B", "ab", 1, 4096)
    assert hello.options.ttl == 4 and hello.options.include == ("X.>",)
    assert problem(ME, "B", hello_body(other, "ab", cfg)) is None
    assert "link to self" in str(problem(ME, "A", welcome_body(ME)))
    assert "another node uses our broker ID" in str(problem(ME, "A", {"instance": "other"}))
    assert "group" in str(problem(ME, "B", {"group": "h", "version": PROTOCOL_VERSION}))
    assert "protocol version" in str(problem(ME, "B", {"group": "g", "version": 99}))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ttl", 0),
        ("ttl", "1"),
        ("conduit", 1),
        ("include", "X"),
        ("heartbeat_timeout", 0),
        ("heartbeat_timeout", 1.0),  # not above the interval (1.0): silent between beats
        ("heartbeat_interval", 5.0),
        ("incarnation", -1),
        ("incarnation", 1 << 63),  # beyond what a message's incarnation may be on the wire
        ("incarnation", 1.0),
        ("incarnation", None),
    ],
)
def test_a_malformed_hello_names_its_field(field: str, value: Any) -> None:
    body = hello_body(Me("B", 1, "m", "g", 4096), "ab", LinkConfig(name="ab", uri="tcp://x:1"))
    body[field] = value
    with pytest.raises(ProtocolError, match=field):
        parse_hello(body, own_max=1 << 20)


def test_peer_frame_max_defaults_to_ours_and_is_bounded() -> None:
    assert peer_frame_max({}, 777) == 777
    with pytest.raises(ProtocolError):
        peer_frame_max({"max_frame_bytes": 10}, 777)


# -- cutting frames --------------------------------------------------------------------------


def _run(*sizes: int, topic: str = "T", first: int = 1) -> list[Any]:
    entries = [[b"x" * n, 0, None, first + i, 1.0] for i, n in enumerate(sizes)]
    return [topic, "A", 1, ["A"], None, entries]


def _encode(chunk: list[Any]) -> bytes:
    return wire.encode_link(wire.MSGR, chunk)


def _counts(frames: list[tuple[bytes, int, str]]) -> list[int]:
    return [n for _, n, _ in frames]


def test_frames_are_cut_by_count_and_by_bytes() -> None:
    small = [_run(*[10] * (LINK_BATCH + 3))]
    assert _counts(list(cut_runs(small, 1 << 18, 1 << 20, _encode))) == [LINK_BATCH, 3]
    large = [_run(400, 400, 400, 400, 400)]
    # cut before the payload that would pass 1,000 bytes, the run split where frames end
    assert _counts(list(cut_runs(large, 1000, 1 << 20, _encode))) == [2, 2, 1]
    assert queued(small + large) == LINK_BATCH + 3 + 5


def test_a_message_too_large_for_any_frame_comes_out_alone_and_over_the_limit() -> None:
    out = list(cut_runs([_run(10, 5000, 10)], 100_000, 2000, _encode))
    assert _counts(out) == [1, 1, 1]
    assert [len(f) > 2000 for f, _, _ in out] == [False, True, False]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=40), min_size=1, max_size=8),
    st.integers(1, 5000),
    st.integers(600, 20_000),
)
def test_cutting_runs_keeps_every_message_once_in_order(
    runs: list[list[int]], most: int, limit: int
) -> None:
    """Whatever the runs and limits: every message comes out once, in order, each frame
    within LINK_BATCH messages and (but for one message alone, too large) ``limit``
    bytes, and each frame decodes to runs whose heads are their sources'."""
    box = [_run(*sizes, topic=f"T{k}", first=100 * k) for k, sizes in enumerate(runs)]
    frames = list(cut_runs(box, most, limit, _encode))
    got = []
    for frame, n, topic in frames:
        value = wire.decode_frame(frame)
        assert value[0] == wire.MSGR and 1 <= n <= LINK_BATCH
        entries = [(r[0], e[3], len(e[0])) for r in value[1] for e in r[5]]
        assert len(entries) == n and topic == value[1][0][0]
        assert n == 1 or len(frame) <= limit
        got += entries
    assert got == [(r[0], e[3], len(e[0])) for r in box for e in r[5]]


def test_advert_frames_hold_at_most_advert_batch_entries() -> None:
    entries = [[f"P.{i}", "A", None] for i in range(5000)]
    chunks = advert_chunks(entries, 1 << 30)
    assert [len(c) for c in chunks] == [ADVERT_BATCH, ADVERT_BATCH, 5000 - 2 * ADVERT_BATCH]


def test_advert_chunks_keep_every_entry_and_an_empty_table_is_one_frame() -> None:
    entries = [[f"P.{i}", "A", ["A", "B"]] for i in range(100)]
    chunks = advert_chunks(entries, 200)
    assert len(chunks) > 1 and [e for c in chunks for e in c] == entries
    assert advert_chunks([], 200) == [[]]
