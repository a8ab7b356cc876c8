"""Malformed queue group frames: QMSGS and QCAP on a handshaken link, QUEUE_JOIN / ACK /
LEAVE requests from a raw connection, thousands of them, random and mutated. The node
counts what is malformed, keeps its link and its loop, and a real member of a real group
still gets every message of a normal publisher exactly once."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import Collector
from tests.integration.fuzz_common import LINK_PEER, RawPeer
from zbroker import Broker, Client, wire
from zbroker.errors import ProtocolError
from zbroker.routing.groups import group_key

WAIT = 20.0
FRAMES = int(os.environ.get("ZBROKER_FUZZ_FRAMES", "3000"))
# the fuzz never names the real group's key with a topic it matches: such an entry would
# legitimately reach the real member
FUZZ_KEYS = [group_key("fz", "fz.>"), group_key("w", "other.>"), "$ZB.Q.", "jobs.>", ""]


def valid_entry(rng: random.Random, me: str) -> list[Any]:
    return [
        f"fz.{rng.randrange(9)}",
        b"x" * rng.randrange(4),
        0,
        None,
        LINK_PEER,
        1,
        rng.randrange(1, 1 << 20),
        time.time(),
        [LINK_PEER],
        [rng.choice([me, LINK_PEER, "nobody"]), rng.choice(FUZZ_KEYS)],
    ]


ODD: list[Any] = [None, -1, (1 << 64) - 1, -(1 << 63), "s", b"b", [], {}, [[]], 1.5, float("nan")]
ODD += [True, {"a": [1]}]


def mutate(rng: random.Random, value: Any) -> Any:
    if isinstance(value, list) and value and rng.random() < 0.7:
        value = list(value)
        i = rng.randrange(len(value))
        choice = rng.randrange(4)
        if choice == 0:
            value[i] = rng.choice(ODD)
        elif choice == 1:
            value[i] = mutate(rng, value[i])
        elif choice == 2:
            del value[i]
        else:
            value.append(rng.choice(ODD))
        return value
    return rng.choice(ODD)


def fuzz_frame(rng: random.Random, me: str) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:
        entries = [mutate(rng, valid_entry(rng, me)) for _ in range(rng.randrange(1, 5))]
        return wire.encode_qmsgs(entries)
    if kind == 1:
        return wire.encode_qmsgs([valid_entry(rng, me) for _ in range(rng.randrange(1, 5))])
    cap = [rng.choice(FUZZ_KEYS), rng.choice([me, "x", LINK_PEER]), rng.randrange(1 << 40), 1, 1]
    frame = bytes(msgpack.packb([wire.QCAP, [cap]]))
    if kind == 2:
        return frame
    if kind == 3:
        return frame[: rng.randrange(1, 8)]
    return bytes(msgpack.packb(mutate(rng, [rng.choice([wire.QMSGS, wire.QCAP]), [cap]])))


def control_body(rng: random.Random) -> dict[str, Any]:
    body = {"group": "fzg", "pattern": "jobs.>", "member": rng.randrange(5), "credit": 5}
    body |= {"upto": rng.randrange(10)}
    for key in rng.sample(sorted(body), rng.randrange(len(body) + 1)):
        body[key] = rng.choice(ODD)
    return body


@pytest.mark.slow
def test_queue_frames_fuzzed(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    b = broker_factory(broker_id="fzq", max_frame_bytes=65536)
    member = Collector()
    client_factory(b.endpoint).subscribe("jobs.>", member, queue="w")
    raw = RawPeer(b)
    try:
        raw.handshake()
        seed = int(os.environ.get("ZBROKER_FUZZ_SEED", random.randrange(1 << 30)))
        print("fuzz seed", seed)
        rng = random.Random(seed)
        for i in range(FRAMES):
            raw.link.send(fuzz_frame(rng, "fzq"))
            if i % 4 == 0:
                op = rng.choice([wire.QUEUE_JOIN, wire.QUEUE_ACK, wire.QUEUE_LEAVE])
                raw.control.send(wire.encode_control(op, rng.choice([0, 7]), control_body(rng)))
            if i % 500 == 0:
                raw.link.send(wire.encode_link(wire.HEARTBEAT))
        assert raw.ping(raw.link) and raw.ping()
        pub = client_factory(b.endpoint)
        for i in range(200):
            pub.publish("jobs.x", i)
        assert member.wait_for(200, WAIT)
        time.sleep(0.3)
        assert sorted(member.payloads()) == list(range(200))
        dropped = b.status()["counters"]["dropped"]
        assert dropped.get("internal_error", 0) == 0
        assert sum(v for k, v in dropped.items() if k.startswith("bad_input.")) > 0
        assert [ln["state"] for ln in b.status()["links"]] == ["up"]
    finally:
        raw.close()


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text() | st.binary(), st.lists, max_leaves=12))
def test_queue_decoders_raise_only_protocol_errors(value: Any) -> None:
    for decode in (
        lambda v: wire.decode_qmsgs([wire.QMSGS, v]),
        lambda v: wire.decode_qcap([wire.QCAP, v]),
        # what the node runs on a frame's entries: a bad one becomes None, never raises
        lambda v: wire.check_qmsgs(wire.decode_qmsgs([34, [v]]), (set(), set(), set()), []),
    ):
        try:
            decode(value)
        except ProtocolError:
            pass
