"""Batches of publish runs (client protocol 3): the wire checks, the grouping of publish
frames into runs, and what a client's publisher sends to a node of each protocol.

A batch of runs is ``[[topic, [[payload, fmt, headers], ...]], ...]``: the node decodes it
once and checks and routes each run's topic once. The rules are a publish frame's, so a
malformed run or entry is counted as a publish frame with the same fault would be, and the
rest of the frame is taken. The publisher tests use a real PULL socket on 127.0.0.1 as the
node's publish port.
"""

from __future__ import annotations

import copy
import itertools
import random
import time
from typing import Any

import msgpack
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import PublishTimeout, wire
from zbroker.client import publish_wire, publisher
from zbroker.client.credentials import Credentials
from zbroker.client.messages import encode_payload
from zbroker.client.publisher import Publisher
from zbroker.const import PUBLISH_BATCH, PUBLISH_LINGER, PUBLISH_TAIL_POLL_MS

HOST = "127.0.0.1"
pack = msgpack.packb


def _check(runs: list[Any]) -> tuple[int, list[Any], list[str]]:
    """(entries held, the runs as checked, the reasons counted)."""
    errors: list[tuple[str, str]] = []
    frame = wire.encode_publish_runs(runs)
    elements = wire.publish_elements(frame, errors)
    assert type(elements) is list and type(elements[0]) is list, "not taken for runs"
    held = wire.check_publish_runs(elements, errors, set())
    return held, elements, [reason for reason, _ in errors]


def test_a_batch_of_runs_is_taken_whole() -> None:
    runs = [
        ["R.a", [[b"1", 0, None], [b"\x01", 1, {"k": [1, 2]}]]],
        ["R.b", [[b"3", 0, None]]],
        ["R.a", [[b"4", 0, {}]]],
    ]
    held, checked, reasons = _check(copy.deepcopy(runs))
    assert (held, checked, reasons) == (4, runs, [])


def test_four_runs_are_not_taken_for_one_publish_frame() -> None:
    """A publish frame is a fixarray of 4 starting with its topic; a batch of four runs is
    a fixarray of 4 too, starting with an array (0x94 0x92...)."""
    runs = [[f"R.{i}", [[b"%d" % i, 0, None]]] for i in range(4)]
    frame = wire.encode_publish_runs(runs)
    assert frame[:2] == b"\x94\x92"
    held, checked, reasons = _check(runs)
    assert (held, checked, reasons) == (4, runs, [])


GOOD = [b"ok", 0, None]


@pytest.mark.parametrize(
    ("run", "held", "kept", "reasons"),
    [
        ("not a run", 1, None, ["bad_shape"]),
        (["R.a"], 1, None, ["bad_shape"]),
        (["R.a", [GOOD], 3], 1, None, ["bad_shape"]),
        (["R.a", b"entries"], 1, None, ["bad_shape"]),
        ([5, [GOOD, GOOD]], 2, None, ["bad_type", "bad_type"]),
        ([5, []], 1, None, ["bad_shape"]),  # a run without entries is malformed
        (["R..a", [GOOD, GOOD, GOOD]], 3, None, ["bad_topic"] * 3),
        (["$ZB.x", [GOOD]], 1, None, ["bad_topic"]),  # not publishable by a client
        (["R.*", [GOOD]], 1, None, ["bad_topic"]),
        # was: nothing to take or count, and a frame of them cost the sender one message
        # of the drain's budget however many topics the node checked (MSGR's rule now)
        (["R.a", []], 1, None, ["bad_shape"]),
        (["R.a", [GOOD, [b"x"], GOOD]], 3, ["R.a", [GOOD, GOOD]], ["bad_shape"]),
        (["R.a", [GOOD, "entry"]], 2, ["R.a", [GOOD]], ["bad_shape"]),
        (["R.a", [[b"x", 0, None, 1], GOOD]], 2, ["R.a", [GOOD]], ["bad_shape"]),
        (["R.a", [["text", 0, None], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", 2, None], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", True, None], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", 0, {1: 2}], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", 0, [1]], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
    ],
)
def test_a_bad_run_or_entry_is_counted_and_the_rest_taken(
    run: Any, held: int, kept: Any, reasons: list[str]
) -> None:
    before, after = ["R.z", [[b"first", 0, None]]], ["R.z", [[b"last", 1, None]]]
    got_held, checked, got = _check([before, run, after])
    assert got == reasons
    assert got_held == held + 2
    assert checked == [before, kept, after]


def test_check_publish_runs_learns_valid_topics() -> None:
    valid: set[str] = set()
    runs: list[Any] = [["R.a", [GOOD]], ["R..b", [GOOD]]]
    errors: list[tuple[str, str]] = []
    assert wire.check_publish_runs(runs, errors, valid) == 2
    assert valid == {"R.a"} and runs[1] is None and errors[0][0] == "bad_topic"


_VALUE = st.one_of(
    st.none(),
    st.builds(
        lambda t, p, f, h: [t, p, f, h],
        st.sampled_from(["A", "B", "C"]),
        st.binary(max_size=4),
        st.sampled_from([0, 1]),
        st.sampled_from([None, {"k": 1}]),
    ),
)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_VALUE, max_size=30))
def test_runs_of_publishes_keep_every_message_in_order(values: list[Any]) -> None:
    want = [list(v) for v in values if v is not None]
    runs = wire.runs_of_publishes(copy.deepcopy(values))
    assert [[topic, *e] for topic, entries in runs for e in entries] == want
    assert all(entries for _, entries in runs)  # no empty run
    # a run ends where the topic changes, and only there
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))


# -- the publisher, toward a real PULL socket ------------------------------------------------


class _Node:
    """A PULL socket standing for a node's publish port, and a publisher attached to it
    as to a node of ``client_protocol``."""

    def __init__(
        self,
        client_protocol: int | None,
        hwm: int = 10_000,
        timeout: float = 5.0,
        frame_max: int = 1024 * 1024,
    ) -> None:
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.RCVHWM, hwm)
        port = self.pull.bind_to_random_port(f"tcp://{HOST}")
        endpoint = f"tcp://{HOST}:{port}"
        self.pub = Publisher(
            self.ctx,
            address=endpoint,
            hwm=hwm,
            publish_timeout=timeout,
            fanout=None,
            credentials=Credentials(endpoint, None, None),
            check=lambda op, topic: None,
            wake=lambda: None,
            post=lambda item: None,
        )
        self.pub.attach(endpoint, endpoint, frame_max, client_protocol)

    def frames(self, n: int, limit: int = 1 << 30) -> tuple[list[list[Any]], list[str]]:
        """The publishes in what the socket received, until ``n`` (each ``[topic,
        payload, fmt, headers]``, as the node's checks give them), and each frame's form."""
        got: list[list[Any]] = []
        forms: list[str] = []
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            self.pub.flush_tail()  # (the client thread's part: a tail nobody filled)
            if not self.pull.poll(10):
                continue
            raw = self.pull.recv()
            assert len(raw) <= limit, f"a frame of {len(raw)} bytes, over {limit}"
            errors: list[tuple[str, str]] = []
            elements = wire.publish_elements(raw, errors)
            if type(elements[0]) is list:
                forms.append("runs")
                wire.check_publish_runs(elements, errors, set())
                got.extend([topic, *e] for topic, entries in elements for e in entries)
            else:
                forms.append("one" if elements[0] is raw else "batch")
                got.extend(v for v in wire.check_publishes(elements, errors, set()) if v)
            assert errors == []
        assert not self.pull.poll(100)  # nothing more
        return got, forms

    def close(self) -> None:
        self.pub.close(linger=0)
        self.pull.close()
        self.ctx.term()


@pytest.mark.parametrize(("protocol", "form"), [(3, "runs"), (2, "batch"), (None, "batch")])
def test_the_publisher_sends_runs_only_to_a_node_that_reads_them(
    protocol: int | None, form: str
) -> None:
    node = _Node(protocol)
    try:
        n = 500
        want = []
        for i in range(n):
            topic = f"P.{i // 7 % 3}"  # runs of 7 on one topic
            headers = {"i": i} if i % 5 == 0 else None
            node.pub.publish(topic, b"%d" % i, headers)
            want.append([topic, b"%d" % i, 0, headers])
        got, forms = node.frames(n)
        assert got == want  # every message once, in order
        assert forms[0] == "one"  # the first publish leaves alone, at once
        assert form in forms, forms  # a burst travels batched, in the node's form
        assert not ({"runs", "batch"} - {form}) & set(forms), forms  # and only that form
    finally:
        node.close()


def test_batched_headers_are_the_ones_given_at_publish() -> None:
    """A batched message leaves later than publish() returns: changing the headers dict
    afterwards does not change what was published."""
    node = _Node(3)
    try:
        headers: dict[str, Any] = {"n": 0}
        node.pub.publish("H.x", b"first")  # leaves alone: the next ones may batch
        for i in range(1, 100):
            headers["n"] = i
            node.pub.publish("H.x", b"%d" % i, headers)
        headers["n"] = -1
        got, forms = node.frames(100)
        assert [h for *_, h in got[1:]] == [{"n": i} for i in range(1, 100)]
        assert "runs" in forms
    finally:
        node.close()


def test_a_batched_publish_that_times_out_never_leaves_and_the_rest_do() -> None:
    """The node stops reading: publishes fill the socket, the batch fills, and one
    publish raises PublishTimeout. That message (batched or not) never reaches the node;
    every one before it, including those still in the batch then, does, once, in order."""
    node = _Node(3, hwm=1, timeout=0.5)
    try:
        payload = b"x" * 4000
        sent = 0
        with pytest.raises(PublishTimeout):
            for sent in range(100_000):  # (when it raises: the one that timed out)
                node.pub.publish("T.x", b"%06d" % sent + payload)
        assert sent > 0, "the first publish already timed out"
        got, forms = node.frames(sent)
        assert [p[:6] for _, p, _, _ in got] == [b"%06d" % i for i in range(sent)]
        assert "runs" in forms
    finally:
        node.close()


def test_the_tail_flusher_looks_less_often_during_a_flood_and_sends_its_tail() -> None:
    """While the publishing thread sends full batches itself (a flood), each look of the
    client thread's flusher doubles its poll up to PUBLISH_TAIL_POLL_MS and it stays
    armed; after the flood it sends the last batch once it is PUBLISH_LINGER old and
    disarms, its poll back at 1 ms. Every message arrives once, in order."""
    node = _Node(3)
    pub = node.pub
    try:
        pub.publish("F.x", b"0")  # leaves alone: the next ones come fast and batch
        n, polls = 1, []
        for _ in range(4):
            for _ in range(PUBLISH_BATCH + 10):  # at least one full batch leaves
                pub.publish("F.x", b"%d" % n)
                n += 1
            pub.flush_tail()
            assert pub.batch_state()[1]  # still armed: a flood's tail is still to come
            polls.append(pub.tail_poll)
        assert polls == [2, 4, 4, 4] == [min(2**i, PUBLISH_TAIL_POLL_MS) for i in (1, 2, 3, 4)]
        time.sleep(PUBLISH_LINGER * 2)
        pub.flush_tail()  # the flood is over: its last batch leaves, the flusher disarms
        assert pub.batch_state() == (0, False)
        assert pub.tail_poll == 1
        got, _ = node.frames(n)
        assert [p for _, p, _, _ in got] == [b"%d" % i for i in range(n)]
    finally:
        node.close()


def test_batches_cut_by_their_age_at_a_moderate_rate_keep_the_poll_fast() -> None:
    """Publishes a little under PUBLISH_LINGER apart (a moderate rate): the publisher
    sends each batch itself once a publish finds it old, a few messages each. That is no
    flood: the flusher keeps polling every millisecond (a tail after a short pause would
    otherwise wait up to PUBLISH_TAIL_POLL_MS), and sends the last batch after its linger."""
    node = _Node(3)
    pub = node.pub
    try:
        pub.publish("M.x", b"0")  # leaves alone: the next ones come within the linger
        n = 1
        for _ in range(5):
            for _ in range(3):
                pub.publish("M.x", b"%d" % n)
                n += 1
            time.sleep(PUBLISH_LINGER * 1.5)  # the next publish finds the batch old
            pub.publish("M.x", b"%d" % n)  # (sends it and starts the next)
            n += 1
            if pub.batch_state()[1]:
                pub.flush_tail()
                assert pub.tail_poll == 1
        time.sleep(PUBLISH_LINGER * 2)
        pub.flush_tail()
        assert pub.batch_state() == (0, False)
        got, _ = node.frames(n)
        assert [p for _, p, _, _ in got] == [b"%d" % i for i in range(n)]
    finally:
        node.close()


def test_a_lone_batch_is_sent_after_its_linger_and_the_poll_stays_fast() -> None:
    """A catch-up pair (the second publish within the linger of the first) leaves a
    batch of one that no flood follows: one look of the flusher waits out the linger and
    sends it, and disarms without slowing its poll."""
    node = _Node(3)
    pub = node.pub
    try:
        for r in range(3):
            time.sleep(0.005)  # a pause: the first of the pair leaves alone
            pub.publish("C.x", b"%d" % (2 * r))
            pub.publish("C.x", b"%d" % (2 * r + 1))
            if pub.batch_state() != (1, True):  # (the machine paused between the two)
                continue
            pub.flush_tail()
            assert pub.batch_state() == (0, False)
            assert pub.tail_poll == 1
        got, _ = node.frames(6)
        assert [p for _, p, _, _ in got] == [b"%d" % i for i in range(6)]
    finally:
        node.close()


_INT = st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry
_MESSAGE = st.tuples(
    st.sampled_from(["A", "B.c", "ü"]),
    st.one_of(st.binary(max_size=300), _INT, st.text(max_size=5)),
    st.one_of(st.none(), st.dictionaries(st.text(max_size=3), _INT, max_size=2)),
)


def _joined(entry: publish_wire.Entry) -> bytes:
    """An entry's bytes (a large payload's entry is its parts)."""
    return b"".join(entry) if isinstance(entry, tuple) else entry


@pytest.mark.parametrize("size", [0, 1, 255, 256, 1024, 65535, 65536, 70_000])
def test_an_entry_of_any_size_is_what_msgpack_would_write(size: int) -> None:
    """Each payload size's header (bin8, bin16, bin32), built without msgpack; a payload
    of 256 B or more without headers is not copied into its entry (its parts, the payload
    itself among them, are joined only with the batch), and alone it leaves as the publish
    frame msgpack would write."""
    payload = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    head = b"\x94" + pack("T")
    for value, headers in ((payload, None), (size, None), (payload, {"k": 1})):
        entry = publisher._entry("T", head, value, headers)
        raw, fmt = encode_payload(value)
        assert _joined(entry) == pack([raw, fmt, headers])
        assert publish_wire.frame_of(head, entry) == pack(["T", raw, fmt, headers])
        assert publish_wire.entry_frame("T", entry) == pack(["T", raw, fmt, headers])
    parts = publisher._entry("T", head, payload, None)
    if size >= 256:
        assert isinstance(parts, tuple) and parts[1] is payload
    else:
        assert type(parts) is bytes


@pytest.mark.parametrize(
    "sizes",
    [[10, 300, 10], [300, 10, 300], [300, 300], [10, 10], [10, 70_000, 20, 5]],
)
def test_runs_of_small_and_large_payloads_join_into_the_frame_msgpack_would_write(
    sizes: list[int],
) -> None:
    # a large payload's entry is its parts (joined only here), a small one's its bytes:
    # a run of either, or of both in any order, leaves as packing the runs gives
    head = b"\x94" + pack("T")
    payloads = [bytes([i]) * n for i, n in enumerate(sizes)]
    pairs = [("T", publisher._entry("T", head, p, None)) for p in payloads]
    pairs.append(("U", publisher._entry("U", b"\x94" + pack("U"), payloads[0], None)))
    batch, starts = publish_wire.runs_of(pairs)
    want = [["T", [[p, 0, None] for p in payloads]], ["U", [[payloads[0], 0, None]]]]
    assert publish_wire.batch_frame(batch, starts, True) == pack(want)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=20))
def test_a_batch_is_what_msgpack_would_write(messages: list[Any]) -> None:
    """The publisher encodes each entry itself (no msgpack call without headers) and joins
    the entries' bytes under their runs' heads: byte for byte what msgpack writes for the
    same runs; the older form holds the same messages as publish frames."""
    pairs = []
    want: list[list[Any]] = []
    for topic, payload, headers in messages:
        head = b"\x94" + pack(topic)
        entry = publisher._entry(topic, head, payload, headers)
        raw, fmt = encode_payload(payload)
        assert _joined(entry) == pack([raw, fmt, headers])
        pairs.append((topic, entry))
        if want and want[-1][0] == topic:
            want[-1][1].append([raw, fmt, headers])
        else:
            want.append([topic, [[raw, fmt, headers]]])
    batch, starts = publish_wire.runs_of(pairs)
    assert publish_wire.pairs(batch, starts) == pairs
    assert publish_wire.batch_frame(batch, starts, True) == pack(want)
    frames = publish_wire.batch_frame(batch, starts, False)
    errors: list[tuple[str, str]] = []
    values = wire.check_publishes(wire.publish_elements(frames, errors), errors, set())
    assert errors == []
    assert values == [[t, *e] for t, entries in want for e in entries]


@pytest.mark.parametrize("protocol", [3, 2])
def test_a_batch_never_outgrows_the_node_frame_limit(protocol: int) -> None:
    """However topics alternate and sizes vary (a run per message costs its run's head,
    an element of a publish batch its bin header), what the publisher counts of its
    pending batch is never less than the frame it would send, and every frame it sends
    fits the node's limit (the node drops a larger one whole)."""
    frame_max = 65_536
    node = _Node(protocol, frame_max=frame_max)
    rng = random.Random(7)
    topics = ["a", "b", "主题.长" * 3, "c.d"]
    want = []
    try:
        for i in range(3_000):
            topic = topics[i % len(topics)]
            payload = b"%06d" % i + b"x" * rng.choice((0, 100, 901, 4000, 8175))
            node.pub.publish(topic, payload)
            want.append([topic, payload, 0, None])
            pub = node.pub
            with pub._lock:  # the pending batch, as it would leave now
                if pub._batch:
                    frame = publish_wire.batch_frame(pub._batch, pub._starts, protocol >= 3)
                    assert len(frame) <= pub._batch_bytes + 3  # (+ the outer header)
                    assert len(frame) <= frame_max
        got, _ = node.frames(len(want), limit=frame_max)
        assert got == want
    finally:
        node.close()
