"""The client's parts, each on its own: requests, deliveries, message fields, addresses.

And the rule that holds them apart: no module of ``zbroker/client`` touches another
object's private attributes (only ``self._...``), so every part is reached through its
interface.
"""

from __future__ import annotations

import ast
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

import msgpack
import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from zbroker import wire
from zbroker.client import Message, parse_address
from zbroker.client.credentials import Credentials
from zbroker.client.locators import StaticLocator, make_locator
from zbroker.client.messages import (
    encode_payload,
    message_from_fields,
    messages_from_envelopes,
    messages_from_runs,
)
from zbroker.client.requests import Requests
from zbroker.client.sessions import SessionEvents, Sessions, Settings
from zbroker.client.subscriber import Subscriber, Subscriptions
from zbroker.errors import (
    BrokerUnreachable,
    ConfigError,
    PayloadError,
    PermissionDenied,
    ProtocolError,
    RequestError,
)

CLIENT_DIR = Path(__file__).resolve().parent.parent / "zbroker" / "client"


def _foreign_private_attributes(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", sorted(CLIENT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_no_client_part_reaches_into_another(path: Path) -> None:
    assert _foreign_private_attributes(path.read_text()) == []


def test_the_private_attribute_check_finds_one() -> None:
    assert _foreign_private_attributes("x = client._subs\ny = self._own\n") == ["1: client._subs"]


# -- requests ----------------------------------------------------------------------------


class FakeSession:
    def __init__(self, frame_max: int = 0, up: bool = True) -> None:
        self.frame_max = frame_max
        self.up = up
        self.sent: list[tuple[int, int, dict[str, Any]]] = []

    def send(self, frame: bytes) -> bool:
        if self.up:
            self.sent.append(wire.decode_control(frame))
        return self.up


def _session(**kw: Any) -> Any:
    return cast(Any, FakeSession(**kw))


def test_a_request_waits_for_a_node_then_resolves_with_its_reply() -> None:
    requests = Requests(timeout=5.0)
    fut: Future[Any] = Future()
    requests.submit(wire.STATUS, {}, fut, None)
    session = _session()
    requests.send_waiting(session)
    [(op, req_id, body)] = session.sent
    assert (op, body) == (wire.STATUS, {})
    requests.reply(op, req_id, {"ok": 1})
    assert fut.result(0) == {"ok": 1}
    requests.send_waiting(session)  # sent once only
    assert len(session.sent) == 1


@pytest.mark.parametrize(
    ("message", "error"),
    [("permission denied: bob may not", PermissionDenied), ("no such thing", RequestError)],
)
def test_an_error_reply_fails_the_request(message: str, error: type[Exception]) -> None:
    requests = Requests(timeout=5.0)
    fut: Future[Any] = Future()
    session = _session()
    requests.submit(wire.STATUS, {}, fut, session)
    requests.reply(wire.ERROR, session.sent[0][1], {"message": message})
    with pytest.raises(error, match=message):
        fut.result(0)


def test_a_request_over_the_nodes_frame_limit_fails_at_once() -> None:
    requests = Requests(timeout=5.0)
    fut: Future[Any] = Future()
    session = _session(frame_max=100)
    requests.submit(wire.PUBLISH, {"payload": b"x" * 200}, fut, session)
    assert session.sent == []
    with pytest.raises(PayloadError, match="over the node's limit of 100 bytes"):
        fut.result(0)


def test_a_request_that_cannot_be_encoded_fails_at_once() -> None:
    requests = Requests(timeout=5.0)
    fut: Future[Any] = Future()
    session = _session()
    requests.submit(wire.STATUS, {"x": object()}, fut, session)
    assert session.sent == []
    with pytest.raises(PayloadError, match="cannot be encoded"):
        fut.result(0)


def test_a_request_that_cannot_be_sent_fails_at_once() -> None:
    requests = Requests(timeout=5.0)
    fut: Future[Any] = Future()
    requests.submit(wire.STATUS, {}, fut, _session(up=False))
    with pytest.raises(BrokerUnreachable, match="could not be sent"):
        fut.result(0)


def test_a_request_without_a_reply_expires_and_is_not_sent_later() -> None:
    requests = Requests(timeout=0.5)
    fut: Future[Any] = Future()
    requests.submit(wire.STATUS, {}, fut, None)
    requests.expire(time.monotonic())
    assert not fut.done()
    requests.expire(time.monotonic() + 1.0)
    with pytest.raises(BrokerUnreachable, match="did not answer in time"):
        fut.result(0)
    session = _session()
    requests.send_waiting(session)
    assert session.sent == []


# -- deliveries ----------------------------------------------------------------------------


def _envelope(seq: int) -> bytes:
    return wire.encode_delivery_body("A.B", b"%d" % seq, wire.FMT_BYTES, None, "N", 1, seq, 0.0)


def _frame(pattern: str, last: int, seqs: list[int]) -> bytes:
    bodies = [_envelope(s) for s in seqs]
    body = bodies[0] if len(bodies) == 1 else wire.encode_delivery_batch(bodies)
    return pattern.encode() + b"\0" + body + last.to_bytes(8, "big")


def _runs_frame(pattern: str, last: int, seqs: list[int]) -> bytes:
    """The same messages as :func:`_frame`'s, as a batch of runs (split in two runs when
    there are several, as a frame holding two origins' runs would be)."""
    entries = [[b"%d" % s, wire.FMT_BYTES, None, s, 0.0] for s in seqs]
    half = len(entries) // 2 or 1
    runs = [["A.B", "N", 1, part] for part in (entries[:half], entries[half:]) if part]
    packed: bytes = msgpack.packb(runs)
    return pattern.encode() + b"\0" + packed + last.to_bytes(8, "big")


_MALFORMED = {  # a frame each form's reader must drop (and live on)
    "envelopes": msgpack.packb([1, 2]),
    "runs": msgpack.packb([["A.B", "N", 1, [[b"x", 0, None, 4, 0.0]]], {"a": 1, "b": 2}]),
}


@pytest.mark.parametrize("form", ["envelopes", "runs"])
def test_the_subscriber_delivers_batches_and_counts_gaps_in_messages(form: str) -> None:
    """One frame of three messages, then a lost frame of two, then one: the callback
    sees every message that came, in order, and the gap is two messages. The same with
    batches of runs, and a malformed frame in the middle is dropped without harm."""
    frame = _frame if form == "envelopes" else _runs_frame
    ctx = zmq.Context()
    xpub = ctx.socket(zmq.XPUB)
    xpub.bind("inproc://client-parts")
    got: list[Message] = []
    subs = Subscriptions(lambda name, arg: Future())
    subs.add("A.>", got.append)
    subscriber = Subscriber(ctx, 1000, subs.by_pattern)
    try:
        subscriber.sock.connect("inproc://client-parts")
        subscriber.subscribe("A.>", Future())
        assert xpub.poll(5000) and xpub.recv() == b"\x01A.>\0"
        xpub.recv()  # the sync key
        xpub.send(frame("A.>", 3, [1, 2, 3]))
        xpub.send(b"A.>\0" + _MALFORMED[form] + (4).to_bytes(8, "big"))
        xpub.send(frame("A.>", 6, [6]))
        deadline = time.monotonic() + 5.0
        while len(got) < 4 and time.monotonic() < deadline:
            if subscriber.sock.poll(100):
                subscriber.on_frames(time.monotonic() + 1.0)
        assert [m.payload for m in got] == [b"1", b"2", b"3", b"6"]
        assert {m.pattern for m in got} == {"A.>"}
        assert subscriber.missed == 2
        assert subscriber.take_gaps() == {"A.>": 2}
        assert subscriber.take_gaps() == {}
    finally:
        subscriber.close()
        xpub.close(linger=0)
        ctx.term()


# -- message fields and payloads -----------------------------------------------------------


def test_message_from_fields_decodes_a_msgpack_payload() -> None:
    raw = msgpack.packb({"a": [1, 2]})
    msg = message_from_fields("P", ["T", raw, wire.FMT_MSGPACK, None, "N", 1, 7, 2.5])
    assert (msg.topic, msg.payload, msg.payload_type, msg.headers) == (
        "T",
        {"a": [1, 2]},
        "msgpack",
        {},
    )
    assert (str(msg.id), msg.pattern, msg.raw) == ("N:1:7", "P", raw)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ([1, 2, 3], "bad_shape"),
        (None, "bad_shape"),
        ([1, b"x", 0, None, "N", 1, 1, 0.0], "bad_type"),
        (["T", "x", 0, None, "N", 1, 1, 0.0], "bad_type"),
        (["T", b"x", 9, None, "N", 1, 1, 0.0], "bad_type"),
        (["T", b"\xc1", wire.FMT_MSGPACK, None, "N", 1, 1, 0.0], "not_msgpack"),
    ],
)
def test_message_from_fields_refuses_a_bad_envelope(fields: Any, reason: str) -> None:
    with pytest.raises(ProtocolError) as info:
        message_from_fields("P", fields)
    assert info.value.reason == reason


def test_encode_payload() -> None:
    assert encode_payload(bytearray(b"ab")) == (b"ab", wire.FMT_BYTES)
    assert encode_payload([1, "x"]) == (msgpack.packb([1, "x"]), wire.FMT_MSGPACK)
    with pytest.raises(PayloadError):
        encode_payload(object())


# -- addresses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("tcp://h:1", ("h", 1)),
        ("h:2", ("h", 2)),
        ("tcp://[::1]:3", ("::1", 3)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    "address",
    [
        "udp://h:1",
        "tcp://h:x",
        "tcp://h:1/path",
        # hosts ZeroMQ refuses (the client hung on them) and an unclosed IPv6 bracket
        # (a ValueError with a traceback from the CLI)
        "foo bar",
        "tcp://-x:1",
        "tcp://\u00e9:1",
        "tcp://[::1:1",
        "tcp://[1.2.3.4]:1",
    ],
)
def test_parse_address_refuses(address: str) -> None:
    with pytest.raises(ConfigError):
        parse_address(address)


def test_a_candidate_zeromq_refuses_fails_with_backoff_and_leaves_no_socket() -> None:
    """A candidate endpoint ZeroMQ will not connect to (one found by discovery is not
    parsed) is a failed node: it raised out of the client thread, which died leaving the
    socket open, and the constructor then hung in Context.term."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    settings = Settings("x", 1.0, 0.5, 1.5, (0.1, 1.0, 2.0), False, 1)
    events = cast(SessionEvents, object())
    sessions = Sessions(
        ctx, StaticLocator(["tcp://foo bar:1"]), Credentials("tcp://h:1", None, None),
        settings, zmq.Poller(), events,
    )  # fmt: skip
    sessions.tick(time.monotonic())  # raised ZMQError
    sessions.tick(time.monotonic())  # (waits out its backoff: not tried again at once)
    assert sessions.primary is None and sessions.up() == []
    sessions.close()
    ctx.term()  # returns: no socket was left open


def test_a_static_locator_lists_its_addresses_in_order() -> None:
    locator = make_locator("tcp://b:2, a:1,tcp://[::1]:3", None)
    assert isinstance(locator, StaticLocator)
    assert locator.candidates() == ["tcp://b:2", "tcp://a:1", "tcp://[::1]:3"]


_FIELD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.just(msgpack.packb({"a": 1})),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


def _built(build: Any) -> Any:
    try:
        return ("ok", build())
    except ProtocolError as exc:
        return ("error", exc.reason, exc.detail)


@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.text(max_size=3),
                st.binary(max_size=3),
                st.sampled_from([0, 1, 2, False]),
                st.one_of(st.none(), st.just({}), st.just({"k": "v"})),
                st.text(max_size=2),
                st.integers(0, 9),
                st.integers(0, 9),
                st.floats(0, 9),
            ).map(list),
            st.lists(_FIELD, min_size=8, max_size=8),
        ),
        max_size=6,
    )
)
def test_messages_from_envelopes_answers_as_message_from_fields(envelopes: list[Any]) -> None:
    """The subscriber's bulk builder (a bytes payload built inline) gives the messages,
    or the error, that message_from_fields gives one envelope at a time."""
    bulk = _built(lambda: messages_from_envelopes("P.>", envelopes))
    one = _built(lambda: [message_from_fields("P.>", list(e)) for e in envelopes])
    assert bulk == one


_ENTRY = st.one_of(
    st.tuples(
        st.binary(max_size=3),
        st.sampled_from([0, 1, 2, False]),
        st.one_of(st.none(), st.just({}), st.just({"k": "v"})),
        st.integers(0, 9),
        st.floats(0, 9),
    ).map(list),
    st.lists(_FIELD, min_size=5, max_size=5),
)


@given(
    st.lists(
        st.tuples(
            st.one_of(st.text(max_size=3), _FIELD),
            st.one_of(st.text(max_size=2), _FIELD),
            st.one_of(st.integers(0, 9), _FIELD),
            st.lists(_ENTRY, min_size=1, max_size=4),
        ).map(list),
        max_size=4,
    )
)
def test_messages_from_runs_answers_as_the_envelopes_spelled_out(runs: list[Any]) -> None:
    """A delivery frame's runs give the messages, or the error, that the same messages
    as 8-element envelopes give."""
    spelled = [
        [t, *e[:3], origin, inc, *e[3:]] for t, origin, inc, entries in runs for e in entries
    ]
    assert _built(lambda: messages_from_runs("P.>", runs)) == _built(
        lambda: messages_from_envelopes("P.>", spelled)
    )
