"""The fuzz run of :mod:`.test_fuzz`: the raw sockets to every port of one node, the frames
sent through them (each one first through :mod:`.fuzz_oracle`, which adds its expected
outcome), the normal traffic among them, and the syncs that wait until the node has handled
everything sent so far. The frames themselves come from :mod:`.fuzz_frames`."""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgpack
import zmq
from zmq.utils.monitor import recv_monitor_message

from tests.integration.fuzz_common import HOST, LINK_IDENT, LINK_PEER, WAIT, link_hello
from tests.integration.fuzz_frames import FrameGen
from tests.integration.fuzz_oracle import (
    StagingOracle,
    control_outcome,
    decoded,
    ends_link,
    is_hello_map,
    is_staging_request,
    publish_outcome,
    subscription_outcome,
)
from zbroker import Broker, Client, PublishTimeout, wire
from zbroker.const import PROTOCOL_VERSION

MARK = b"NORM"  # normal traffic lives under NORM.>; no fuzz frame contains these bytes
ROUND = 2500  # frames between two synchronisations with the node
NORMAL_EVERY = 40  # one normal publish per this many fuzz frames


def routing_id(sock: zmq.Socket[bytes]) -> bytes:
    """The routing id a DEALER was given (the option is bytes; pyzmq types it int | bytes)."""
    ident = sock.getsockopt(zmq.ROUTING_ID)
    assert isinstance(ident, bytes)
    return ident


class Fuzz:
    """The fuzzing sockets, the expected outcome, and the normal traffic of one run."""

    def __init__(self, b: Broker, seed: int, normal: Client) -> None:
        self.b = b
        self.seed = seed
        self.normal = normal
        self.staging = StagingOracle()  # rows a commit publishes count as accepted too
        self.gen = FrameGen(random.Random(seed), b.broker_id, self.staging.staging.token_state)
        self.rng = self.gen.rng
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sockets: list[zmq.Socket[bytes]] = []
        self.monitors: dict[zmq.Socket[bytes], str] = {}  # monitor socket -> fuzz socket
        self.disconnects: list[str] = []  # fuzz sockets whose connection dropped
        ports = b.ports
        self.push = self._connect(zmq.PUSH, ports["publish"], "push")
        self.pre = [
            self._connect(zmq.DEALER, ports["control"], f"fz-pre-{i}", ident=True) for i in range(2)
        ]
        self.hello = self._connect(zmq.DEALER, ports["control"], "fz-hello", ident=True)
        self.link = self._connect(zmq.DEALER, ports["control"], LINK_IDENT.decode(), ident=True)
        self.xsub = self._connect(zmq.XSUB, ports["deliver"], "xsub")
        self.sub = self._connect(zmq.SUB, ports["deliver"], "sub")
        self.dealers = [*self.pre, self.hello, self.link]
        # expectations
        self.bad: Counter[str] = Counter()
        self.accepted = 0  # fuzz frames the node must take as publishes
        self.sent: Counter[str] = Counter()
        self.normal_sent = 0
        self.slowest_ping = 0.0  # seconds: the normal client's slowest PING during the run
        self.keys_used: set[bytes] = set()
        self.subscribed: dict[zmq.Socket[bytes], list[bytes]] = {self.xsub: [], self.sub: []}
        self.link_trouble: list[list[Any]] = []
        self.sync_id = itertools.count(10**15)
        self.last_heartbeat = 0.0
        self.linked_at = 0.0
        self._bases: dict[str, Callable[[], list[Any]]] = {
            "pre": self._pre_base,
            "hello": self.gen.hello,
            "link": self.gen.link,
        }

    def _pre_base(self) -> list[Any]:
        return self.gen.control() if self.rng.random() < 0.6 else self.gen.link()

    def _connect(self, kind: int, port: int, name: str, ident: bool = False) -> zmq.Socket[bytes]:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 2000)
        if ident:
            s.setsockopt(zmq.ROUTING_ID, name.encode())
        # a dropped connection loses the frames queued on it: the oracle would be wrong
        self.monitors[s.get_monitor_socket(zmq.EVENT_DISCONNECTED)] = name
        s.connect(f"tcp://{HOST}:{port}")
        self.sockets.append(s)
        return s

    def close(self) -> None:
        for s in self.sockets:
            s.disable_monitor()
        for m in self.monitors:
            m.close(linger=0)
        for s in self.sockets:
            s.close(linger=0)
        self.ctx.term()

    # -- plumbing -------------------------------------------------------------------------

    def alive(self) -> None:
        assert self.b.running, f"the node is gone (seed {self.seed}, after {self.total} frames)"

    @property
    def total(self) -> int:
        return sum(self.sent.values())

    def send(self, sock: zmq.Socket[bytes], frame: bytes | list[bytes]) -> None:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                if isinstance(frame, list):
                    sock.send_multipart(frame, zmq.NOBLOCK)
                else:
                    sock.send(frame, zmq.NOBLOCK)
                return
            except zmq.Again:
                self.alive()
                assert time.monotonic() < deadline, f"node stopped reading (seed {self.seed})"
                self.drain()
                time.sleep(0.001)

    def drain(self) -> set[bytes]:
        """Read whatever the node sent to the fuzz sockets; return the sync tokens seen."""
        seen: set[bytes] = set()
        for s in (*self.dealers, self.xsub, self.sub):
            for _ in range(10_000):
                try:
                    data = s.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if s.type == zmq.DEALER:
                    try:
                        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
                    except (ValueError, msgpack.UnpackException):
                        continue
                    if (
                        s is self.link
                        and type(value) is list
                        and value[:1] in ([wire.LINK_REFUSE], [wire.BYE])
                    ):
                        self.link_trouble.append(value)
                    if (
                        type(value) is list
                        and len(value) == 3
                        and value[0] == wire.PING
                        and type(value[1]) is int
                    ):
                        seen.add(str(value[1]).encode() + b"@" + routing_id(s))
                elif data.startswith(wire.SYNC_PREFIX + b"fzsync-"):
                    seen.add(data)
        for m, name in self.monitors.items():
            while m.poll(0):
                event = recv_monitor_message(m)
                if event["event"] == zmq.EVENT_DISCONNECTED:
                    self.disconnects.append(name)
        return seen

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now - self.last_heartbeat >= 0.25:
            self.send(self.link, wire.encode_link(wire.HEARTBEAT))
            self.last_heartbeat = now

    def sync(self) -> None:
        """Wait until the node has handled everything sent to the control and deliver
        sockets so far (a PING per DEALER, a sync key per subscriber socket)."""
        want: set[bytes] = set()
        for d in self.dealers:
            n = next(self.sync_id)
            self.send(d, wire.encode_control(wire.PING, n, {}))
            want.add(str(n).encode() + b"@" + routing_id(d))
        for s in (self.xsub, self.sub):
            key = wire.SYNC_PREFIX + b"fzsync-" + str(next(self.sync_id)).encode()
            self._subscribe(s, key)
            want.add(key)
        deadline = time.monotonic() + WAIT
        while want:
            want -= self.drain()
            if not want:
                break
            self.alive()
            assert time.monotonic() < deadline, (
                f"node did not answer within {WAIT:g} s (hang?) seed {self.seed}: {want}"
            )
            self.heartbeat()
            time.sleep(0.002)

    def _subscribe(self, s: zmq.Socket[bytes], key: bytes, subscribe: bool = True) -> None:
        if s.type == zmq.XSUB:
            self.send(s, (b"\x01" if subscribe else b"\x00") + key)
        elif subscribe:
            s.subscribe(key)
        else:
            s.unsubscribe(key)

    # -- one frame per socket kind --------------------------------------------------------

    def publish_frame(self) -> None:
        gen = self.gen
        while True:
            r = gen.rng.random()
            if r < 0.1:
                frame = gen.publish_batch()
            elif r < 0.2:
                frame = gen.publish_runs()
            else:
                fuzzed = gen.fuzz(gen.publish)
                if isinstance(fuzzed, list):  # a PULL takes each part as a frame of its own
                    fuzzed = fuzzed[0] if fuzzed else b""
                frame = fuzzed
            if MARK in frame or LINK_PEER.encode() in frame:
                continue
            break
        bad, accepted = publish_outcome(frame)
        self.accepted += accepted
        self.bad.update(bad)
        self.send(self.push, frame)
        self.sent["publish"] += 1

    def control_frame(self, target: str) -> None:
        gen = self.gen
        while True:
            frame = gen.fuzz(self._bases[target])
            parts = frame if isinstance(frame, list) else [frame]
            if any(MARK in p or LINK_PEER.encode() in p for p in parts):
                continue
            if isinstance(frame, list):
                if len(frame) == 1:
                    frame = frame[0]
                else:
                    target = "pre"
                    break
            value = decoded(frame)
            # keep every DEALER's link state predictable: handshakes only from "hello",
            # link frames (types 17-22) never from "hello", nothing that ends the link
            # from "link"
            if is_hello_map(value):
                target = "hello"
            elif (target == "hello" and value is not None and value[0] in wire.LINK_TYPES) or (
                target == "link" and ends_link(value)
            ):
                target = "pre"
            break
        if isinstance(frame, list):
            self.bad["bad_frame_count"] += 1
            sock = self.rng.choice(self.pre)
        else:
            if is_staging_request(value):
                target = "pre"  # one connection: the node sees them in the oracle's order
            bad, published = control_outcome(frame, target == "link", self.staging)
            self.bad.update(bad)
            self.accepted += published
            sock = {"pre": self.rng.choice(self.pre), "hello": self.hello, "link": self.link}[
                target
            ]
            if is_staging_request(value):
                sock = self.pre[0]
        self.send(sock, frame)
        self.sent[f"control-{target}"] += 1

    def subscription_frame(self) -> None:
        gen, rng = self.gen, self.rng
        s = self.xsub if rng.random() < 0.75 else self.sub
        r = rng.random()
        if s is self.xsub and r < 0.4:
            msg = gen.user_message()
            self.bad["bad_subscription"] += 1
            self.send(s, msg)
        elif r < 0.85 or not self.subscribed[s]:
            # a key never used before: the XPUB passes a subscribe up only if it is new
            key = gen.subscription_key()
            if key in self.keys_used or MARK in key or LINK_PEER.encode() in key:
                return
            if key[:1] == b"\x01":
                # libzmq 4.3's SUB takes the unsubscribe of a key that starts with byte 1
                # for a subscribe of the rest (its cancel message is tested for the
                # subscribe marker first): its own count of that rest goes up, and a later
                # unsubscribe of the rest is never sent. Such a key goes through the XSUB,
                # whose messages carry their marker. (No client key starts with byte 1.)
                s = self.xsub
            self.keys_used.add(key)
            self.subscribed[s].append(key)
            self._count_subscription(b"\x01" + key)
            self._subscribe(s, key)
        else:
            # an unsubscribe of a key this socket holds once: passed up by the XPUB
            keys = self.subscribed[s]
            key = keys.pop(rng.randrange(len(keys)))
            self._count_subscription(b"\x00" + key)
            self._subscribe(s, key, subscribe=False)
        self.sent["deliver"] += 1

    def _count_subscription(self, msg: bytes) -> None:
        reason = subscription_outcome(msg)
        if reason is not None:
            self.bad[reason] += 1

    # -- the whole run --------------------------------------------------------------------

    def handshake(self) -> None:
        self.send(self.link, wire.encode_link(wire.LINK_HELLO, link_hello()))
        assert self.link.poll(int(WAIT * 1000)), "no answer to a valid LINK_HELLO"
        value = wire.decode_frame(self.link.recv())
        assert value[0] == wire.LINK_WELCOME, value
        info = wire.check_link_map(value)
        assert (info["id"], info["version"]) == (self.b.broker_id, PROTOCOL_VERSION)
        self.last_heartbeat = self.linked_at = time.monotonic()

    def good_staged_commit(self) -> None:
        """One well-formed STAGE and its STAGE_COMMIT, through the oracle like any staging
        frame: every run applies at least one commit, whatever its seed generates (the
        coverage assertion at the end failed for a seed whose mutants applied none)."""
        row = ["FZ.staged", b"row", 0, None]
        for op, body in (
            (wire.STAGE, {"token": "fzt-good", "part": 0, "rows": [row]}),
            (wire.STAGE_COMMIT, {"tokens": [["fzt-good", 1]]}),
        ):
            frame = wire.encode_control(op, 0, body)
            bad, published = control_outcome(frame, False, self.staging)
            assert not bad, bad
            self.accepted += published
            self.send(self.pre[0], frame)
            self.sent["control-pre"] += 1

    def run(self, frames: int) -> None:
        kinds = ("publish", "pre", "hello", "link", "deliver")
        weights = (30, 24, 8, 30, 8)
        since_normal = 0
        self.good_staged_commit()
        while self.total < frames:
            for kind in self.rng.choices(kinds, weights, k=ROUND):
                if kind == "publish":
                    self.publish_frame()
                elif kind == "deliver":
                    self.subscription_frame()
                else:
                    self.control_frame(kind)
                since_normal += 1
                if since_normal >= NORMAL_EVERY:
                    since_normal = 0
                    self.alive()
                    try:
                        self.normal.publish("NORM.seq", self.normal_sent)
                    except PublishTimeout:
                        self.alive()  # a crash explains it best
                        raise
                    self.normal_sent += 1
                    self.heartbeat()
            self.drain()
            self.sync()
            self.alive()
            started = time.monotonic()
            self.normal.request(wire.PING)  # the node keeps answering a normal client
            self.slowest_ping = max(self.slowest_ping, time.monotonic() - started)
        # the last frame on the PUSH: a publish, so "every publish counted" means "every
        # frame of the PUSH handled" (a PULL handles one connection's frames in order)
        self.send(self.push, wire.encode_publish("FZ.end", b"", 0, None))
        self.accepted += 1
        self.sent["publish"] += 1
        self.sync()
