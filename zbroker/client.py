"""Client: publish to and subscribe from a zbroker node.

    with Client("tcp://127.0.0.1:7100") as client:
        sub = client.subscribe("PRICE.>", lambda msg: print(msg.topic, msg.payload))
        client.publish("PRICE.STOCK.IBM", b"101.5")
        ...
        sub.unsubscribe()

The client is given the node's well-known address only; a HELLO request returns the publish
and delivery ports. Threads: publish() sends on the caller's thread (under a lock, on a
socket nothing else touches); one client thread owns the control and delivery sockets and
runs every callback, in arrival order. Other threads reach it through an inproc channel.

``subscribe()`` returns once the node has the subscription: after the pattern the client
subscribes a one-off sync key on the same connection, and the node echoes it back only
after it has processed what came before it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import msgpack
import zmq
import zmq.backend

from . import wire
from .const import (
    DEFAULT_BROKER,
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_HWM,
    DEFAULT_PORT,
    DEFAULT_PUBLISH_TIMEOUT,
)
from .errors import (
    BrokerUnreachable,
    ClientClosed,
    ConfigError,
    PayloadError,
    ProtocolError,
    PublishTimeout,
    RequestError,
)
from .topics import validate_pattern, validate_publish_topic

__all__ = ["Client", "Message", "MessageId", "Subscription", "parse_address"]

log = logging.getLogger("zbroker.client")

_TOPIC_CACHE_MAX = 4096


def parse_address(address: str) -> tuple[str, int]:
    """``tcp://host:port``, ``host:port`` or ``host`` → (host, port). IPv6 in brackets."""
    text = address.strip()
    if "://" not in text:
        text = "tcp://" + text
    parts = urlsplit(text)
    if parts.scheme != "tcp" or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(f"broker address {address!r} is not of the form tcp://HOST:PORT")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ConfigError(f"broker address {address!r} has a bad port") from exc
    return parts.hostname, port


def _endpoint(host: str, port: int) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


@dataclass(frozen=True, slots=True)
class MessageId:
    """The ID the origin node assigned: ``(origin broker, its incarnation, sequence)``."""

    origin: str
    incarnation: int
    seq: int

    def __str__(self) -> str:
        return f"{self.origin}:{self.incarnation}:{self.seq}"


class Message:
    """A delivered message (treat as read-only).

    ``payload`` is what the publisher passed: ``bytes``, or the decoded value when the
    publisher sent an object (``payload_type`` says which: ``"bytes"`` or ``"msgpack"``).
    ``raw`` is the payload as it crossed the wire. ``pattern`` is the subscription it was
    delivered for. ``id`` is the :class:`MessageId` the origin node assigned.

    A plain slotted class rather than a frozen dataclass: one is built per delivery, and a
    frozen dataclass's ``__init__`` costs about 1.5 us more per message.
    """

    __slots__ = (
        "headers",
        "incarnation",
        "origin",
        "pattern",
        "payload",
        "payload_type",
        "raw",
        "seq",
        "timestamp",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        payload: Any,
        payload_type: str,
        headers: dict[str, Any],
        origin: str,
        incarnation: int,
        seq: int,
        timestamp: float,
        pattern: str,
        raw: bytes,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.payload_type = payload_type
        self.headers = headers
        self.origin = origin
        self.incarnation = incarnation
        self.seq = seq
        self.timestamp = timestamp
        self.pattern = pattern
        self.raw = raw

    @property
    def id(self) -> MessageId:
        return MessageId(self.origin, self.incarnation, self.seq)

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, payload={self.payload!r}, "
            f"payload_type={self.payload_type!r}, headers={self.headers!r}, id={self.id}, "
            f"timestamp={self.timestamp!r}, pattern={self.pattern!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]


_EMPTY: dict[str, Any] = {}


def _message(pattern: str, fields: list[Any]) -> Message:
    """Build a Message from a delivery envelope's fields (raises ProtocolError)."""
    try:
        topic, raw, fmt, headers, origin, inc, seq, ts = fields
    except (TypeError, ValueError) as exc:
        raise ProtocolError("bad_shape", "delivery envelope must be an 8-element array") from exc
    if type(topic) is not str or type(raw) is not bytes:
        raise ProtocolError("bad_type", "delivery envelope has wrong field types")
    if fmt == wire.FMT_MSGPACK:
        try:
            payload = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as exc:
            raise ProtocolError("not_msgpack", "payload marked msgpack does not decode") from exc
        ptype = "msgpack"
    elif fmt == wire.FMT_BYTES:
        payload, ptype = raw, "bytes"
    else:
        raise ProtocolError("bad_type", f"unknown payload format {fmt!r}")
    return Message(topic, payload, ptype, headers or {}, origin, inc, seq, ts, pattern, raw)


class Subscription:
    """A handle on one subscription; ``unsubscribe()`` ends it (idempotent)."""

    __slots__ = ("_active", "_client", "callback", "pattern")

    def __init__(self, client: Client, pattern: str, callback: Callable[[Message], Any]) -> None:
        self._client = client
        self.pattern = pattern
        self.callback = callback
        self._active = True

    @property
    def active(self) -> bool:
        return self._active

    def unsubscribe(self) -> None:
        if self._active:
            self._active = False
            self._client._remove(self)

    def __repr__(self) -> str:
        return f"<Subscription {self.pattern!r}{'' if self._active else ' (ended)'}>"


class Client:
    """A connection to one node. Thread-safe; callbacks run on the client's own thread."""

    def __init__(
        self,
        broker: str = DEFAULT_BROKER,
        *,
        timeout: float = DEFAULT_CLIENT_TIMEOUT,
        publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT,
        hwm: int = DEFAULT_HWM,
    ) -> None:
        self.address = broker
        self.timeout = timeout
        self.publish_timeout = publish_timeout
        self._host, self._port = parse_address(broker)
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._hwm = hwm
        self._closed = False
        self._subs: dict[str, tuple[Subscription, ...]] = {}
        self._subs_lock = threading.Lock()
        self._topic_heads: dict[str, bytes] = {}
        self._cmds: queue.SimpleQueue[tuple[str, Any, Future[Any] | None]] = queue.SimpleQueue()
        self._cmd_endpoint = f"inproc://zbroker-client-{uuid.uuid4().hex}"
        self._cmd_lock = threading.Lock()
        self._pub_lock = threading.Lock()
        self._token = f"{uuid.uuid4().hex[:12]}".encode()
        self._sync_counter = itertools.count(1)
        self.hello: dict[str, Any] = {}
        ready: Future[dict[str, Any]] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="zbroker-client", daemon=True
        )
        self._thread.start()
        try:
            self.hello = ready.result(timeout + 1.0)
        except FutureTimeout:
            self._abort()
            raise BrokerUnreachable(
                f"no zbroker node answered at {broker} within {timeout:g} s"
            ) from None
        except BaseException:
            self._abort()
            raise
        self._cmd = self._ctx.socket(zmq.PAIR)
        self._cmd.setsockopt(zmq.LINGER, 0)
        self._cmd.connect(self._cmd_endpoint)
        self._push = self._ctx.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, hwm)
        # a bounded flush of what was published just before close()
        self._push.setsockopt(zmq.LINGER, int(publish_timeout * 1000))
        if ":" in self._host:
            self._push.setsockopt(zmq.IPV6, 1)
        self._push.connect(_endpoint(self._host, self.hello["ports"]["publish"]))
        # the Cython send, skipping pyzmq's Python wrapper (hot path; same behaviour)
        self._send: Callable[[bytes, int], Any] = zmq.backend.Socket.send.__get__(self._push)

    # -- public API ------------------------------------------------------------------------

    @property
    def broker_id(self) -> str:
        """The ID of the node this client is connected to."""
        return str(self.hello["broker_id"])

    def publish(
        self, topic: str, payload: Any = b"", headers: dict[str, Any] | None = None
    ) -> None:
        """Publish ``payload`` on ``topic``.

        ``bytes`` (or bytearray/memoryview) travel as they are; any other msgpack-able value
        is encoded and subscribers receive it decoded (``Message.payload_type`` tells them
        which). Raises InvalidTopic/ReservedTopic, PayloadError, PublishTimeout, ClientClosed.
        """
        if self._closed:
            raise ClientClosed("client is closed")
        head = self._topic_heads.get(topic)
        if head is None:
            validate_publish_topic(topic)
            if len(self._topic_heads) >= _TOPIC_CACHE_MAX:
                self._topic_heads.clear()
            # msgpack fixarray(4) + the topic: the constant start of every frame on it
            head = self._topic_heads[topic] = b"\x94" + msgpack.packb(topic)
        if type(payload) is bytes:
            raw, fmt = payload, wire.FMT_BYTES
        elif isinstance(payload, bytes | bytearray | memoryview):
            raw, fmt = bytes(payload), wire.FMT_BYTES
        else:
            try:
                raw, fmt = msgpack.packb(payload), wire.FMT_MSGPACK
            except (TypeError, ValueError, OverflowError) as exc:
                raise PayloadError(f"payload cannot be encoded with msgpack: {exc}") from exc
        if headers is None:
            # [topic, payload, fmt, nil]: the same bytes wire.encode_publish would produce
            frame = head + msgpack.packb(raw) + (b"\x00\xc0" if fmt == 0 else b"\x01\xc0")
        else:
            if not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers):
                raise PayloadError("headers must be a dict with string keys")
            try:
                frame = wire.encode_publish(topic, raw, fmt, headers)
            except (TypeError, ValueError, OverflowError) as exc:
                raise PayloadError(f"headers cannot be encoded with msgpack: {exc}") from exc
        with self._pub_lock:
            if self._closed:
                raise ClientClosed("client is closed")
            try:
                self._send(frame, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
            if not self._push.poll(int(self.publish_timeout * 1000), zmq.POLLOUT):
                raise PublishTimeout(
                    f"node at {self.address} did not take the message within "
                    f"{self.publish_timeout:g} s (it is down or overloaded)"
                )
            self._send(frame, zmq.NOBLOCK)

    def subscribe(self, pattern: str, callback: Callable[[Message], Any]) -> Subscription:
        """Call ``callback(message)`` for every message matching ``pattern``.

        Returns once the node has the subscription; raises InvalidTopic for a bad pattern
        and BrokerUnreachable if the node does not confirm within the timeout.
        """
        validate_pattern(pattern)
        sub = Subscription(self, pattern, callback)
        with self._subs_lock:
            self._subs[pattern] = (*self._subs.get(pattern, ()), sub)
        try:
            self._command("sub", pattern).result(self.timeout)
        except FutureTimeout:
            sub.unsubscribe()
            raise BrokerUnreachable(
                f"node at {self.address} did not confirm subscription {pattern!r} within "
                f"{self.timeout:g} s"
            ) from None
        return sub

    def messages(self, pattern: str, timeout: float | None = None) -> Iterator[Message]:
        """Iterate over messages matching ``pattern``; stop after ``timeout`` seconds without
        one (``None``: never). The subscription ends when the iterator is closed."""
        q: queue.SimpleQueue[Message] = queue.SimpleQueue()
        sub = self.subscribe(pattern, q.put)
        try:
            while True:
                try:
                    yield q.get(timeout=timeout)
                except queue.Empty:
                    return
        finally:
            sub.unsubscribe()

    def status(self) -> dict[str, Any]:
        """The node's status (see :meth:`zbroker.Broker.status`)."""
        return self.request(wire.STATUS)

    def routes(self, pattern: str | None = None) -> list[dict[str, Any]]:
        """The node's interest table (best entry per pattern and origin): pattern, origin,
        path, hops, next-hop link (None = local). ``pattern`` keeps overlapping ones."""
        if pattern is not None:
            validate_pattern(pattern)
        body = self.request(wire.ROUTES, {"pattern": pattern} if pattern else {})
        routes: list[dict[str, Any]] = body.get("routes", [])
        return routes

    def request(self, op: int, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a control request and wait for its reply (raises RequestError on ERROR)."""
        fut = self._command("req", (op, body or {}))
        try:
            result: dict[str, Any] = fut.result(self.timeout)
        except FutureTimeout:
            raise BrokerUnreachable(
                f"node at {self.address} did not answer within {self.timeout:g} s"
            ) from None
        return result

    def close(self) -> None:
        """Stop the client thread and close every socket (bounded wait)."""
        if self._closed:
            return
        with self._pub_lock:
            self._closed = True
            self._push.close()
        try:
            with self._cmd_lock:
                self._cmds.put(("stop", None, None))
                self._cmd.send(b"x")
        except zmq.ZMQError:
            pass
        self._thread.join(5.0)
        self._cmd.close()
        self._ctx.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- user thread -> client thread ----------------------------------------------------

    def _command(self, name: str, arg: Any) -> Future[Any]:
        if self._closed:
            raise ClientClosed("client is closed")
        fut: Future[Any] = Future()
        with self._cmd_lock:
            self._cmds.put((name, arg, fut))
            self._cmd.send(b"x")
        return fut

    def _remove(self, sub: Subscription) -> None:
        with self._subs_lock:
            left = tuple(s for s in self._subs.get(sub.pattern, ()) if s is not sub)
            if left:
                self._subs[sub.pattern] = left
            else:
                self._subs.pop(sub.pattern, None)
        if not self._closed:
            try:
                self._command("unsub", sub.pattern)
            except (ClientClosed, zmq.ZMQError):
                pass

    def _abort(self) -> None:
        self._closed = True
        self._cmds.put(("stop", None, None))
        try:
            poke = self._ctx.socket(zmq.PAIR)
            poke.setsockopt(zmq.LINGER, 0)
            poke.connect(self._cmd_endpoint)
            poke.send(b"x")
            poke.close()
        except zmq.ZMQError:
            pass
        self._thread.join(5.0)
        self._ctx.term()

    # -- the client thread -----------------------------------------------------------------

    def _run(self, ready: Future[dict[str, Any]]) -> None:
        ctx = self._ctx
        cmd = ctx.socket(zmq.PAIR)
        cmd.bind(self._cmd_endpoint)
        control = ctx.socket(zmq.DEALER)
        sub = ctx.socket(zmq.SUB)
        sockets = (cmd, control, sub)
        for s in sockets:
            s.setsockopt(zmq.LINGER, 0)
        if ":" in self._host:
            control.setsockopt(zmq.IPV6, 1)
            sub.setsockopt(zmq.IPV6, 1)
        sub.setsockopt(zmq.RCVHWM, self._hwm)
        try:
            control.connect(_endpoint(self._host, self._port))
            hello = self._hello(control, cmd)
            if hello is None:
                if not ready.done():
                    ready.set_exception(
                        BrokerUnreachable(
                            f"no zbroker node answered at {self.address} within {self.timeout:g} s"
                        )
                    )
                return
            sub.connect(_endpoint(self._host, hello["ports"]["deliver"]))
            ready.set_result(hello)
            _ClientLoop(self, cmd, control, sub).run()
        except Exception as exc:  # report, never leave the constructor waiting
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.exception("client thread crashed")
        finally:
            for s in sockets:
                s.close()

    def _hello(self, control: zmq.Socket[bytes], cmd: zmq.Socket[bytes]) -> dict[str, Any] | None:
        control.send(wire.encode_control(wire.HELLO, 0, {}))
        poller = zmq.Poller()
        poller.register(control, zmq.POLLIN)
        poller.register(cmd, zmq.POLLIN)
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            events = dict(poller.poll(int(left * 1000) + 1))
            if cmd in events:
                return None
            if control in events:
                try:
                    op, _, body = wire.decode_control(control.recv())
                except ProtocolError:
                    continue
                if op == wire.HELLO and isinstance(body.get("ports"), dict):
                    return body
        return None


class _ClientLoop:
    """The client thread's loop: commands, control replies, deliveries."""

    def __init__(
        self,
        client: Client,
        cmd: zmq.Socket[bytes],
        control: zmq.Socket[bytes],
        sub: zmq.Socket[bytes],
    ) -> None:
        self.client = client
        self.cmd = cmd
        self.control = control
        self.sub = sub
        self.refs: dict[str, int] = {}
        self.pending: dict[int, tuple[Future[Any], float]] = {}
        self.syncs: dict[bytes, Future[Any]] = {}
        self.req_ids = itertools.count(1)
        self.running = True
        self.patterns: dict[bytes, str] = {}  # delivery-frame prefix -> pattern

    def run(self) -> None:
        poller = zmq.Poller()
        for s in (self.cmd, self.control, self.sub):
            poller.register(s, zmq.POLLIN)
        while self.running:
            for sock, _ in poller.poll(500):
                if sock is self.sub:
                    self._on_deliver()
                elif sock is self.control:
                    self._on_control()
                else:
                    self._on_command()
            self._expire(time.monotonic())

    def _on_command(self) -> None:
        c = self.client
        while True:
            try:
                self.cmd.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            name, arg, fut = c._cmds.get_nowait()
            if name == "stop":
                self.running = False
            elif name == "sub":
                n = self.refs.get(arg, 0)
                self.refs[arg] = n + 1
                if n == 0:
                    self.sub.subscribe(arg.encode() + b"\0")
                key = wire.SYNC_PREFIX + c._token + b"." + str(next(c._sync_counter)).encode()
                self.syncs[key] = fut  # type: ignore[assignment]
                self.sub.subscribe(key)
            elif name == "unsub":
                n = self.refs.get(arg, 0)
                if n <= 1:
                    self.refs.pop(arg, None)
                    if n == 1:
                        self.sub.unsubscribe(arg.encode() + b"\0")
                else:
                    self.refs[arg] = n - 1
                if fut is not None:
                    fut.set_result(None)
            elif name == "req":
                op, body = arg
                req_id = next(self.req_ids)
                assert fut is not None
                self.pending[req_id] = (fut, time.monotonic() + c.timeout + 1.0)
                self.control.send(wire.encode_control(op, req_id, body))

    def _on_control(self) -> None:
        while True:
            try:
                frame = self.control.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                op, req_id, body = wire.decode_control(frame)
            except ProtocolError as exc:
                log.warning("bad control reply from node: %s", exc)
                continue
            entry = self.pending.pop(req_id, None)
            if entry is None:
                continue
            fut = entry[0]
            if op == wire.ERROR:
                fut.set_exception(RequestError(str(body.get("message", "request failed"))))
            else:
                fut.set_result(body)

    def _on_deliver(self) -> None:
        recv = self.sub.recv
        subs = self.client._subs
        patterns = self.patterns
        unpackb = msgpack.unpackb
        sync = wire.SYNC_PREFIX[0]
        for _ in range(1024):
            try:
                frame = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if frame[0] == sync:
                fut = self.syncs.pop(frame, None)
                self.sub.unsubscribe(frame)
                if fut is not None and not fut.done():
                    fut.set_result(None)
                continue
            nul = frame.find(b"\0")
            try:
                key = frame[:nul]
                pattern = patterns.get(key)
                if pattern is None:
                    pattern = patterns[key] = key.decode("utf-8")
                fields = unpackb(memoryview(frame)[nul + 1 :], raw=False, strict_map_key=False)
                msg = _message(pattern, fields)
            except (ProtocolError, ValueError, msgpack.UnpackException) as exc:
                log.warning("dropped malformed delivery: %s", exc)
                continue
            for s in subs.get(pattern, ()):
                try:
                    s.callback(msg)
                except Exception:
                    log.exception("subscriber callback for %r raised", pattern)

    def _expire(self, now: float) -> None:
        if self.pending:
            for req_id in [r for r, (_, dl) in self.pending.items() if dl < now]:
                fut, _ = self.pending.pop(req_id)
                if not fut.done():
                    fut.set_exception(BrokerUnreachable("the node did not answer in time"))
