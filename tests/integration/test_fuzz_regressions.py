"""Regression tests of the bugs the fuzzing of :mod:`.test_fuzz` found: one minimal repro
per bug (each crashed the node loop or miscounted, until fixed in the session that wrote
the fuzz test; the list is in :mod:`.test_fuzz`'s docstring)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import zmq

from tests.integration.fuzz_common import (
    LIMIT,
    LINK_PEER,
    WAIT,
    RawPeer,
    _entry,
    bad_reasons,
    check_no_tracebacks,
    counters,
    link_hello,
    wait_for,
)
from tests.integration.fuzz_common import raw as raw  # (the fixture: a node and raw sockets to it)
from zbroker import Client, wire
from zbroker import selectors as selectors_module
from zbroker.identity import EPOCH


def _assert_survives(
    raw: RawPeer, caplog: pytest.LogCaptureFixture, via: zmq.Socket[bytes]
) -> None:
    """The node handled the frame just sent on ``via`` and is still serving."""
    # two PINGs on the same connection, one after the other: the second is handled in a
    # later poll pass than the frame under test, so after that pass's end-of-pass work
    # (store commit, durable delivery)
    for _ in range(2):
        assert raw.ping(via), "the node stopped answering"
    assert raw.b.running, "the node loop crashed"
    check_no_tracebacks(caplog)


def _send_msgs_entry(raw: RawPeer, caplog: pytest.LogCaptureFixture, entry: list[Any]) -> int:
    """Send one MSGS entry on a fresh link; return how much bad input the node counted."""
    raw.handshake()
    before: int = counters(raw.b)["bad_input"]
    raw.link.send(wire.encode_link(wire.MSGS, [entry]))
    _assert_survives(raw, caplog, raw.link)
    after: int = counters(raw.b)["bad_input"]
    return after - before


@pytest.mark.parametrize(
    ("field", "element"),
    [("targets", [1]), ("targets", {"a": 1}), ("path", [1])],
    ids=["targets-array", "targets-map", "path-array"],
)
def test_regression_msgs_unhashable_path_or_targets_is_bad_input(
    raw: RawPeer, caplog: pytest.LogCaptureFixture, field: str, element: Any
) -> None:
    """Was: TypeError (unhashable) in RoutingEngine.route crashed the node loop."""
    assert _send_msgs_entry(raw, caplog, _entry(**{field: ["orig", element]})) == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("inc", 2**63), ("seq", 2**64 - 1), ("ts", 2**63), ("ts", math.nan)],
    ids=["inc-2**63", "seq-2**64-1", "ts-2**63", "ts-nan"],
)
@pytest.mark.parametrize("stored_by", ["retention", "durable"])
def test_regression_msgs_numbers_the_store_cannot_hold_are_bad_input(
    raw: RawPeer, caplog: pytest.LogCaptureFixture, field: str, value: Any, stored_by: str
) -> None:
    """Was: OverflowError (int over 2**63-1) or IntegrityError (NaN ts: NOT NULL) at the
    store commit crashed the node loop."""
    if stored_by == "durable":
        raw.open_durable()
    topic = "R.x" if stored_by == "retention" else "T.x"
    assert _send_msgs_entry(raw, caplog, _entry(topic=topic, **{field: value})) == 1


@pytest.mark.parametrize(
    ("op", "body"),
    [
        (wire.READ, {"pattern": ">", "start": 2**63, "limit": 10}),
        (wire.READ, {"pattern": ">", "start": 0, "end": 2**64 - 1, "limit": 10}),
        (wire.DURABLE_OPEN, {"name": "d2", "pattern": "T.>", "credit": 1, "max_msgs": 2**63}),
    ],
    ids=["read-start", "read-end", "durable-open-max-msgs"],
)
def test_regression_requests_with_ints_over_int64_are_answered(
    raw: RawPeer, caplog: pytest.LogCaptureFixture, op: int, body: dict[str, Any]
) -> None:
    """Was: OverflowError in SQLite crashed the node loop."""
    assert raw.request(op, body) is not None, "no answer"
    _assert_survives(raw, caplog, raw.control)


def test_regression_durable_ack_over_int64_is_survived(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: OverflowError at the store commit crashed the node loop."""
    raw.open_durable()
    raw.control.send(wire.encode_control(wire.DURABLE_ACK, 0, {"name": "d1", "upto": 2**63}))
    _assert_survives(raw, caplog, raw.control)


def test_regression_link_message_with_int_header_keys_reaches_a_durable(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: msgpack.unpackb (strict map keys) in Node._pump_durables crashed the node loop."""
    raw.open_durable()
    assert _send_msgs_entry(raw, caplog, _entry(headers={1: "int key"})) == 0
    if not raw.delivers:
        raw.expect(raw.control, lambda v: v[0] == wire.DELIVER)
    assert [d["msg"][3] for d in raw.delivers] == [{1: "int key"}], raw.delivers


def test_regression_nested_int_header_keys_can_be_read_back(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: msgpack.unpackb (strict map keys) in Node._read crashed the node loop. An
    ordinary Client may publish a nested map with int keys (see test_wire)."""
    with Client(raw.b.endpoint, timeout=WAIT) as client:
        client.publish("R.x", b"", headers={"h": {1: "int key"}})
        assert wait_for(lambda: counters(raw.b)["received"] == 1)
    reply = raw.request(wire.READ, {"pattern": ">", "start": 0, "limit": 10})
    assert reply is not None and reply[0] == wire.READ, reply
    assert [row[4] for row in reply[2]["rows"]] == [{"h": {1: "int key"}}]
    _assert_survives(raw, caplog, raw.control)


def test_regression_reserved_topic_stays_reserved_after_a_link_delivery(raw: RawPeer) -> None:
    """Was: a $ZB topic a link delivered entered the node's cache of valid topics, after
    which raw clients could publish to it."""
    b = raw.b
    raw.handshake()
    raw.link.send(wire.encode_link(wire.MSGS, [_entry(topic="$ZB.x")]))
    assert raw.ping(raw.link)
    before = counters(b)
    raw.push.send(wire.encode_publish("$ZB.x", b"forged", 0, None))
    raw.push.send(wire.encode_publish("T.sentinel", b"", 0, None))
    handled = before["received"] + before["bad_input"] + 2
    assert wait_for(lambda: counters(b)["received"] + counters(b)["bad_input"] >= handled)
    after = counters(b)
    assert after["received"] == before["received"] + 1, "the $ZB publish was accepted"
    assert bad_reasons(after)["bad_topic"] == bad_reasons(before)["bad_topic"] + 1


def test_regression_second_hello_on_a_connection_leaves_no_orphan_link(raw: RawPeer) -> None:
    """Was: a second LINK_HELLO with another link name on a linked connection orphaned the
    first link: gone from status, up in the routing engine forever (never timed out)."""
    b = raw.b
    raw.handshake(heartbeat_timeout=1.0)
    raw.handshake(name="other", heartbeat_timeout=1.0)
    # no heartbeats from here on: every link of this connection must time out
    assert wait_for(lambda: not [x for x in b.status()["links"] if x["state"] == "up"])
    time.sleep(1.5)
    c = counters(b)
    up = [x for x in b.status()["links"] if x["state"] == "up"]
    assert c["links_up"] - c["links_down"] == len(up), (c["links_up"], c["links_down"], up)


@pytest.mark.parametrize("bad", ["1048576", 63, 1 << 31, 1.5e6, True, [65536]])
def test_a_hello_with_a_bad_max_frame_bytes_is_refused(raw: RawPeer, bad: Any) -> None:
    """The frame limit a peer states decides how we cut frames for it: a value that is not
    an integer in 64..2**30 refuses the handshake (malformed, no retry), no link."""
    raw.link.send(wire.encode_link(wire.LINK_HELLO, {**link_hello(), "max_frame_bytes": bad}))
    value = raw.expect(raw.link, lambda v: v[0] in (wire.LINK_WELCOME, wire.LINK_REFUSE))
    assert value is not None and value[0] == wire.LINK_REFUSE, value
    assert "max_frame_bytes" in value[1]["reason"] and value[1]["retry"] is False
    assert raw.b.status()["links"] == []
    assert counters(raw.b)["bad_input"] == 0


@pytest.mark.parametrize(("interval", "timeout"), [(1.0, 0.2), (0.5, 0.5)])
def test_a_hello_whose_timeout_is_not_above_its_interval_is_refused(
    raw: RawPeer, interval: float, timeout: float
) -> None:
    """Was: accepted (a LinkConfig refuses it), and the node declared the link silent
    between two of the peer's heartbeats, again after every handshake."""
    hello = {**link_hello(), "heartbeat_interval": interval, "heartbeat_timeout": timeout}
    raw.link.send(wire.encode_link(wire.LINK_HELLO, hello))
    value = raw.expect(raw.link, lambda v: v[0] in (wire.LINK_WELCOME, wire.LINK_REFUSE))
    assert value is not None and value[0] == wire.LINK_REFUSE, value
    assert "heartbeat_timeout must exceed" in value[1]["reason"] and value[1]["retry"] is False
    assert raw.b.status()["links"] == []
    assert counters(raw.b)["links_up"] == 0 and counters(raw.b)["handshakes_refused"] == 1


def test_the_handshake_states_each_sides_frame_limit(raw: RawPeer) -> None:
    """WELCOME states the node's max_frame_bytes; the link keeps the peer's (or, from a
    peer that states none, a node older than the field, the node's own)."""
    raw.link.send(wire.encode_link(wire.LINK_HELLO, {**link_hello(), "max_frame_bytes": 4096}))
    value = raw.expect(raw.link, lambda v: v[0] in (wire.LINK_WELCOME, wire.LINK_REFUSE))
    assert value is not None and value[0] == wire.LINK_WELCOME, value
    assert value[1]["max_frame_bytes"] == LIMIT
    [link] = raw.b.status()["links"]
    assert link["peer_max_frame_bytes"] == 4096
    raw.handshake(name="older")  # link_hello() states no limit
    assert {x["name"]: x["peer_max_frame_bytes"] for x in raw.b.status()["links"]} == {
        "older": LIMIT
    }


def test_an_advert_with_a_selector_that_does_not_compile_keeps_its_other_entries(
    raw: RawPeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the whole ADVERT was refused (bad_advert). A valid selector's canonical text,
    which nodes advertise, may be longer than a selector the parser takes (250 times
    ``a=1 AND b=2`` joined by OR: 3,746 characters, canonical 6,248): the node that got
    it lost every entry of the frame, and messages for them were never sent."""
    monkeypatch.setattr(selectors_module, "_cache", {})  # the peer is another process
    canonical = "(" + " OR ".join(["((a = 1) AND (b = 2))"] * 250) + ")"
    b = raw.b
    raw.handshake()
    entries = [
        ["SEL.>", LINK_PEER, [LINK_PEER], False, [canonical]],
        ["PLAIN.x", LINK_PEER, [LINK_PEER]],
    ]
    raw.link.send(wire.encode_link(wire.ADVERT, True, entries))
    assert raw.ping(raw.link)
    assert counters(b)["bad_input"] == 0
    with Client(b.endpoint, timeout=WAIT) as client:
        client.publish("PLAIN.x", b"plain")
        client.publish("SEL.y", b"widened", headers={"a": 0})  # sent on: the entry widened
    got: list[str] = []

    def msgr(v: list[Any]) -> bool:
        if v[0] == wire.MSGR:
            got.extend(run[0] for run in v[1] for _ in run[5])
        return len(got) >= 2

    assert raw.expect(raw.link, msgr) is not None, got
    assert got == ["PLAIN.x", "SEL.y"]


def test_a_run_whose_path_does_not_end_with_the_link_peer_is_bad_input(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    """Was (an audit): a linked peer could send runs in another node's name (its path not
    ending with the peer) with far-future seqs, which moved that origin's dedupe floor
    past its real messages: they were then dropped as duplicates. Such a run is bad input,
    the second time too (when the shortcut knows its head), and moves nothing."""
    got: list[bytes] = []
    with Client(raw.b.endpoint, timeout=10) as sub:
        sub.subscribe("T.>", lambda m: got.append(m.payload))
        raw.handshake()
        before = bad_reasons(counters(raw.b))["path_not_from_peer"]
        spoofed = ["T.x", "other", 1, ["other"], None, [[b"spoof", 0, None, 10**15, 1.0]]]
        for _ in range(2):
            raw.link.send(wire.encode_link(wire.MSGR, [spoofed]))
        real = ["T.x", "other", 1, ["other", LINK_PEER], None, [[b"real", 0, None, 1, 1.0]]]
        raw.link.send(wire.encode_link(wire.MSGR, [real]))
        _assert_survives(raw, caplog, raw.link)
        assert wait_for(lambda: got == [b"real"]), got
        assert bad_reasons(counters(raw.b))["path_not_from_peer"] == before + 2
        time.sleep(0.2)
        assert got == [b"real"]


def test_an_unreadable_message_is_dropped_alone_by_the_subscriber(raw: RawPeer) -> None:
    """Was (an audit): a payload marked msgpack that does not decode, published raw, made
    the subscriber drop its whole delivery frame (the good messages with it, and the next
    frame then looked like a gap); now only that message is dropped, and counted."""
    got: list[bytes] = []
    with Client(raw.b.endpoint, timeout=10) as sub:
        sub.subscribe("T.>", lambda m: got.append(m.payload))
        unhashable = b"\x81\x91\x01\x01"  # {[1]: 1}: msgpack, but no Python dict holds it
        entries = [[b"good1", 0, None], [b"\xc1", 1, None], [b"good2", 0, None]]
        entries.insert(2, [unhashable, 1, None])
        raw.push.send(wire.encode_publish_runs([["T.a", entries]]))
        raw.push.send(wire.encode_publish("T.a", b"after", 0, None))
        assert wait_for(lambda: len(got) == 3), got
        assert got == [b"good1", b"good2", b"after"]
        assert (sub.malformed, sub.missed) == (2, 0)


def test_an_unreadable_message_does_not_hold_a_durable_window(raw: RawPeer) -> None:
    """Was (an audit): a durable consumer dropped an unreadable message without
    acknowledging it, so with credit 1 it came again for ever and nothing after it did."""
    got: list[bytes] = []
    with Client(raw.b.endpoint, timeout=10) as sub:
        sub.subscribe("T.>", lambda m: got.append(m.payload), durable="poison", credit=1)
        raw.push.send(wire.encode_publish("T.a", b"\xc1", 1, None))
        for i in range(3):
            raw.push.send(wire.encode_publish("T.a", b"good%d" % i, 0, None))
        assert wait_for(lambda: len(got) == 3), got
        assert got == [b"good0", b"good1", b"good2"] and sub.malformed == 1
        time.sleep(0.3)
        assert len(got) == 3 and sub.malformed == 1  # not delivered again


def test_an_unreadable_retained_message_is_skipped_by_a_read(raw: RawPeer) -> None:
    """Was (an audit): one retained message marked msgpack that does not decode (a raw
    publisher's) made every read and replay of its range fail; it is skipped, logged."""
    raw.push.send(wire.encode_publish("R.a", b"one", 0, None))
    raw.push.send(wire.encode_publish("R.a", b"\xc1", 1, None))
    raw.push.send(wire.encode_publish("R.a", b"three", 0, None))
    with Client(raw.b.endpoint, timeout=10) as reader:
        assert wait_for(lambda: reader.log_range()[1] == 3)
        assert [(m.log_seq, m.payload) for m in reader.read("R.>")] == [(1, b"one"), (3, b"three")]


def test_a_qcap_entry_with_no_group_key_or_a_stamp_from_the_future_is_bad_input(
    raw: RawPeer, caplog: pytest.LogCaptureFixture
) -> None:
    """Was (an audit): a malformed key was ignored uncounted, and a stamp of 2**63-1 was
    kept for good (no real update, stamped by its origin's clock, could replace it)."""
    raw.handshake()
    gkey = "$ZB.Q.w.jobs.>"
    # (capacity is kept only for an origin the node has an entry of: the peer's members)
    raw.link.send(wire.encode_link(wire.ADVERT, True, [[gkey, LINK_PEER, [LINK_PEER]]]))
    before = bad_reasons(counters(raw.b))["bad_value"]
    entries = [("nokey", LINK_PEER, 1, 1, 1), (gkey, LINK_PEER, 2**63 - 1, 1, 1)]
    raw.link.send(wire.encode_qcap(entries))
    _assert_survives(raw, caplog, raw.link)
    assert bad_reasons(counters(raw.b))["bad_value"] == before + 2
    # neither was kept: a real capacity, stamped now, is taken for that group and origin
    # (and none for an origin without an entry here: nothing would ever remove it)
    stamp = ((int(time.time()) - EPOCH) << 32) | 5
    raw.link.send(wire.encode_qcap([(gkey, "other", stamp, 2, 7), (gkey, LINK_PEER, stamp, 2, 7)]))

    def held(node: Any) -> dict[tuple[str, str], Any]:
        groups = next(f for f in node.features if type(f).__name__ == "QueueGroups")
        return dict(groups._groups.capacity)

    assert wait_for(lambda: (gkey, LINK_PEER) in raw.b.call(held))
    assert raw.b.call(held) == {(gkey, LINK_PEER): (stamp, 2, 7)}
