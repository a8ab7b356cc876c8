"""What a client's publisher sends to a node of each protocol, and when: runs only to a
node that reads them (client protocol 3), batched publishes with their own headers, a
timed-out publish never leaving, the tail flusher and the linger (batches cut by age keep
the poll fast), and frames within the node's limit. A real PULL socket on 127.0.0.1
stands for the node's publish port.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
import zmq

from zbroker import PublishTimeout, wire
from zbroker.client import publish_wire
from zbroker.client.credentials import Credentials
from zbroker.client.publisher import Publisher
from zbroker.const import PUBLISH_BATCH, PUBLISH_LINGER, PUBLISH_TAIL_POLL_MS

HOST = "127.0.0.1"

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
