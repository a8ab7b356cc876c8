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
from pathlib import Path
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit

import msgpack
import zmq
import zmq.backend

from . import wire
from .config import validate_broker_id
from .const import (
    DEFAULT_BROKER,
    DEFAULT_CLIENT_HEARTBEAT_INTERVAL,
    DEFAULT_CLIENT_HEARTBEAT_TIMEOUT,
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_HWM,
    DEFAULT_PORT,
    DEFAULT_PUBLISH_TIMEOUT,
    DEFAULT_RECONNECT_INITIAL,
    DEFAULT_RECONNECT_MAX,
    DEFAULT_RECONNECT_MULTIPLIER,
    PUBLISH_BATCH,
    PUBLISH_BATCH_BYTES,
    PUBLISH_LINGER,
)
from .errors import (
    BrokerUnreachable,
    ClientClosed,
    ConfigError,
    PayloadError,
    PermissionDenied,
    ProtocolError,
    PublishTimeout,
    RequestError,
)
from .topics import match, validate_pattern, validate_publish_topic

__all__ = ["Client", "Message", "MessageId", "Subscription", "parse_address"]

log = logging.getLogger("zbroker.client")

_TOPIC_CACHE_MAX = 4096
_monotonic = time.monotonic
_packb = msgpack.packb


# why a node may not answer, said with BrokerUnreachable: a secure node answers only
# clients with known keys, and a plain client's handshake fails there without a word
_CURVE_HINT = " (check keys and server_key: the node refuses keys it does not know)"
_PLAIN_HINT = " (is a node running there? one with security on needs keys and server_key)"

_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


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


def _encode_payload(payload: Any) -> tuple[bytes, int]:
    """(payload bytes, fmt): bytes-like as they are, anything else msgpack-encoded."""
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload), wire.FMT_BYTES
    try:
        return msgpack.packb(payload), wire.FMT_MSGPACK
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(f"payload cannot be encoded with msgpack: {exc}") from exc


class _StaticLocator:
    """Candidates from a fixed list of addresses, in the order given."""

    def __init__(self, endpoints: list[str]) -> None:
        self._endpoints = endpoints

    def candidates(self) -> list[str]:
        return self._endpoints

    def close(self) -> None:
        pass


class _ZeroconfLocator:
    """Candidates found on the LAN by mDNS: nodes of one group, in broker-ID order."""

    def __init__(self, group: str, interfaces: list[str] | None) -> None:
        from zeroconf import InterfaceChoice, ServiceBrowser, Zeroconf

        from .discovery import SERVICE_TYPE

        self.group = group
        self._nodes: dict[str, str] = {}  # broker id -> endpoint
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._zc = Zeroconf(interfaces=interfaces or InterfaceChoice.All)
        except (OSError, ValueError) as exc:
            raise BrokerUnreachable(
                f"zeroconf://{group}: cannot join mDNS multicast on "
                f"{', '.join(interfaces or ['all interfaces'])}: {exc}"
            ) from exc
        self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        from zeroconf import ServiceStateChange

        from .discovery import parse_txt

        if self._closed:
            return
        instance = name[: -len(service_type) - 1] if name.endswith(service_type) else name
        try:
            if state_change is ServiceStateChange.Removed:
                with self._lock:
                    self._nodes.pop(instance, None)
                return
            info = zeroconf.get_service_info(service_type, name, timeout=3000)
            peer = parse_txt(info.properties or {}) if info is not None else None
            if peer is None or peer["group"] != self.group:
                return
            with self._lock:
                self._nodes[peer["id"]] = peer["endpoints"][0]
        except Exception:  # a closing zeroconf or a bad record must not kill its thread
            if not self._closed:
                log.exception("client discovery failed for %s", name)

    def candidates(self) -> list[str]:
        with self._lock:
            return [self._nodes[k] for k in sorted(self._nodes)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._browser.cancel()
        finally:
            self._zc.close()


def _make_locator(broker: str, interfaces: list[str] | None) -> _StaticLocator | _ZeroconfLocator:
    text = broker.strip()
    if text.startswith("zeroconf://"):
        group = text[len("zeroconf://") :].strip("/") or "default"
        validate_broker_id(group, f"broker address {broker!r}: group")
        return _ZeroconfLocator(group, interfaces)
    endpoints = []
    for part in text.split(","):
        host, port = parse_address(part)
        endpoints.append(_endpoint(host, port))
    if not endpoints:
        raise ConfigError(f"broker address {broker!r} names no node")
    return _StaticLocator(endpoints)


_ALL: Any = object()  # "no permissions sent": a node without security allows everything


def _curve_options(
    broker: str, keys: str | Path | None, server_key: str | Path | None
) -> tuple[tuple[bytes, bytes] | None, dict[str, bytes]]:
    """(own key pair, node endpoint -> node public key; "*" for every endpoint)."""
    if keys is None and server_key is None:
        return None, {}
    if keys is None or server_key is None:
        raise ConfigError("security needs both keys (this client's) and server_key (the node's)")
    from .security import load_key_pair, read_public_key

    pair = load_key_pair(keys)
    if broker.strip().startswith("zeroconf://"):
        raise ConfigError("keys/server_key need tcp:// addresses (not zeroconf://)")
    parts = [p for p in str(server_key).split(",") if p.strip()]
    if len(parts) == 1:
        return pair, {"*": read_public_key(parts[0])}
    endpoints = [_endpoint(*parse_address(a)) for a in broker.split(",")]
    if len(parts) != len(endpoints):
        raise ConfigError(
            f"server_key lists {len(parts)} keys for {len(endpoints)} node addresses: give "
            "one key, or one per address in the same order"
        )
    return pair, {ep: read_public_key(k) for ep, k in zip(endpoints, parts, strict=True)}


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
        "log_seq",
        "origin",
        "pattern",
        "payload",
        "payload_type",
        "raw",
        "redelivered",
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
        log_seq: int | None = None,
        redelivered: bool = False,
    ) -> None:
        self.log_seq = log_seq  # retention-log sequence (messages from Client.read)
        # a durable subscription's message sent before and not acknowledged (the
        # subscriber may have seen it)
        self.redelivered = redelivered
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

    __slots__ = ("_active", "_client", "callback", "durable", "pattern")

    def __init__(self, client: Client, pattern: str, callback: Callable[[Message], Any]) -> None:
        self._client = client
        self.pattern = pattern
        self.callback = callback
        self.durable: str | None = None
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
        heartbeat_interval: float = DEFAULT_CLIENT_HEARTBEAT_INTERVAL,
        heartbeat_timeout: float = DEFAULT_CLIENT_HEARTBEAT_TIMEOUT,
        reconnect_initial_delay: float = DEFAULT_RECONNECT_INITIAL,
        reconnect_max_delay: float = DEFAULT_RECONNECT_MAX,
        reconnect_multiplier: float = DEFAULT_RECONNECT_MULTIPLIER,
        interfaces: list[str] | None = None,
        fanout: bool = False,
        min_brokers: int = 1,
        keys: str | Path | None = None,
        server_key: str | Path | None = None,
    ) -> None:
        """Connect to a node.

        ``broker`` is ``tcp://HOST:PORT``, a comma-separated list of them, or
        ``zeroconf://GROUP`` (find nodes of GROUP on the LAN; ``interfaces`` names the
        addresses to browse on, default all). With several candidates the client fails
        over: when its node stops answering heartbeats (or says goodbye) it connects to
        another and re-subscribes its patterns; an endpoint that fails is retried with
        exponential backoff. ``fanout=True`` publishes every message to every node found,
        and connects only once ``min_brokers`` answer (subscriptions use one of them).

        Security (nodes with ``[security] enabled``): ``keys`` is this client's key pair,
        the path of its secret certificate (``zbroker keygen --out DIR --name NAME``
        writes ``NAME.key_secret``) or its 40-character Z85 secret key; ``server_key`` is
        the node's public key, Z85 text or the path of its ``node.key`` (for several
        addresses, a comma-separated list in the same order). Every socket then speaks
        CURVE; the node tells the client what it may publish and subscribe to, and
        publish/subscribe outside that raise :class:`~zbroker.errors.PermissionDenied`.
        """
        self.address = broker
        self.timeout = timeout
        self.publish_timeout = publish_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._backoff = (reconnect_initial_delay, reconnect_max_delay, reconnect_multiplier)
        self.fanout = fanout
        self.min_brokers = max(1, min_brokers)
        self._curve, self._server_keys = _curve_options(broker, keys, server_key)
        self._locator = _make_locator(broker, interfaces)
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
        # publish sockets: created here, connected and disconnected by the client thread
        # under _pub_lock as it (re)connects, used by publish() under the same lock
        self._pushes: dict[str, zmq.Socket[bytes]] = {}
        # durable subscriptions: name -> (handle, credit, max_msgs); reopened on reconnect
        self._durables: dict[str, tuple[Subscription, int, dict[str, Any]]] = {}
        self.durable_info: dict[str, dict[str, Any]] = {}
        #: deliveries the node's queue toward this client dropped (a slow consumer)
        self.missed = 0
        self._push = self._new_push()
        self._send: Callable[[bytes, int], Any] = zmq.backend.Socket.send.__get__(self._push)
        # publish batching (under _pub_lock): publishes that come fast leave together in
        # one frame ([frame: bin, ...]), at most PUBLISH_BATCH of them; see _batch_limits
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._batch_since = 0.0  # when the oldest publish in the batch was made
        self._last_send = 0.0  # when a frame last went to the PUSH socket
        self._batch_item_max = 0  # a larger frame goes alone; 0: the node takes no batches
        self._frame_max = 0  # the node's max_frame_bytes (from its HELLO); 0: not known
        self._batch_full = 0  # bytes after which a batch leaves
        self._flusher_armed = False  # the client thread flushes batch tails (see _flush_tail)
        ready: Future[dict[str, Any]] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="zbroker-client", daemon=True
        )
        self._thread.start()
        try:
            self.hello = ready.result(timeout + 5.0)
        except FutureTimeout:
            self._abort()
            raise BrokerUnreachable(
                f"no zbroker node answered at {broker} within {timeout:g} s"
                + (_CURVE_HINT if self._curve else _PLAIN_HINT)
            ) from None
        except BaseException:
            self._abort()
            raise
        self._cmd = self._ctx.socket(zmq.PAIR)
        self._cmd.setsockopt(zmq.LINGER, 0)
        # wake-up bytes are tiny and must never be refused: no high-water mark
        self._cmd.setsockopt(zmq.SNDHWM, 0)
        self._cmd.connect(self._cmd_endpoint)

    def _secure(self, sock: zmq.Socket[bytes], endpoint: str) -> None:
        """With keys: make ``sock``'s next connect (to the node at ``endpoint``) CURVE."""
        if self._curve is None:
            return
        key = self._server_keys.get(endpoint) or self._server_keys.get("*")
        if key is None:
            raise ConfigError(f"no server_key for {endpoint}")
        sock.setsockopt(zmq.CURVE_SERVERKEY, key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self._curve[0])
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._curve[1])

    def _check(self, kind: str, what: str) -> None:
        """Raise PermissionDenied if the node said this client may not ``kind`` ``what``
        (nodes without security send no permissions: everything is allowed)."""
        perms = self.hello.get("permissions", _ALL) if self._curve is not None else _ALL
        if perms is _ALL:
            return
        allowed = (perms or {}).get(kind) or []
        if kind == "publish":
            ok = any(match(p, what) for p in allowed)
        else:
            from .security import covers

            ok = any(covers(p, what) for p in allowed)
        if not ok:
            raise PermissionDenied(
                f"permission denied: {self.hello.get('user') or 'this key'} may not {kind} "
                f"to {what!r} (allowed: "
                f"{', '.join(allowed) or 'nothing'})"
            )

    def _new_push(self) -> zmq.Socket[bytes]:
        push = self._ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDHWM, self._hwm)
        # queue only toward a connection that is up: during a failover publish() waits
        # (up to publish_timeout) for the next node instead of filling a dead pipe
        push.setsockopt(zmq.IMMEDIATE, 1)
        push.setsockopt(zmq.IPV6, 1)
        # a bounded flush of what was published just before close()
        push.setsockopt(zmq.LINGER, int(self.publish_timeout * 1000))
        return push

    # -- public API ------------------------------------------------------------------------

    @property
    def broker_id(self) -> str:
        """The ID of the node this client is connected to."""
        return str(self.hello["broker_id"])

    def publish(
        self,
        topic: str,
        payload: Any = b"",
        headers: dict[str, Any] | None = None,
        *,
        persistent: bool = False,
        confirm: bool = False,
    ) -> Any:
        """Publish ``payload`` on ``topic``.

        ``bytes`` (or bytearray/memoryview) travel as they are; any other msgpack-able value
        is encoded and subscribers receive it decoded (``Message.payload_type`` tells them
        which). Raises InvalidTopic/ReservedTopic, PayloadError (also for a message over the
        node's max_frame_bytes, which it would drop), PublishTimeout, ClientClosed.

        ``persistent=True`` sends the message as a request that the node answers once its
        store has committed it (retained topics are then on disk): the call returns a
        ``Future`` of that confirmation, or, with ``confirm=True``, waits for it and returns
        it (``{"id": [origin, incarnation, seq], "retained_seq": n or None}``).
        """
        if persistent or confirm:
            return self._publish_persistent(topic, payload, headers, wait=confirm)
        if self._closed:
            raise ClientClosed("client is closed")
        head = self._topic_heads.get(topic)
        if head is None:
            validate_publish_topic(topic)
            self._check("publish", topic)  # once per topic: the cache holds allowed ones
            if len(self._topic_heads) >= _TOPIC_CACHE_MAX:
                self._topic_heads.clear()
            # msgpack fixarray(4) + the topic: the constant start of every frame on it
            head = self._topic_heads[topic] = b"\x94" + msgpack.packb(topic)
        if type(payload) is bytes:  # the common case, inline
            raw, fmt = payload, wire.FMT_BYTES
        else:
            raw, fmt = _encode_payload(payload)
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
        if self._frame_max and len(frame) > self._frame_max:
            # the node would count and drop it: say so here instead
            raise PayloadError(self._too_large(len(frame)))
        if self.fanout:
            self._publish_fanout(frame)
            return
        wake = False
        with self._pub_lock:
            if self._closed:
                raise ClientClosed("client is closed")
            now = _monotonic()
            batch = self._batch
            if len(frame) <= self._batch_item_max and (
                batch or now - self._last_send < PUBLISH_LINGER
            ):
                # publishes are coming fast: this one joins (or starts) a batch
                if not batch:
                    self._batch_since = now
                    self._batch_bytes = 0
                batch.append(frame)
                self._batch_bytes += len(frame) + 5  # + its bin header, at most 5 bytes
                if (
                    len(batch) < PUBLISH_BATCH
                    and self._batch_bytes <= self._batch_full
                    and now - self._batch_since < PUBLISH_LINGER
                ):
                    if self._flusher_armed:
                        return
                    # the client thread sends the batch if no publish comes to fill it
                    self._flusher_armed = wake = True
                elif self._flush_batch(now):
                    return
                queued = True  # (unless wake) no room: wait below for the batch to leave
            else:
                queued = False
                if not batch or self._flush_batch(now):  # what came before leaves first
                    try:
                        self._send(frame, zmq.NOBLOCK)
                        self._last_send = now
                        return
                    except zmq.Again:
                        pass
        if wake:
            self._wake()
            return
        # no room, or between nodes during a failover: wait without holding the lock, so
        # the client thread can connect the next node
        deadline = _monotonic() + self.publish_timeout
        while True:
            with self._pub_lock:
                if self._closed:
                    raise ClientClosed("client is closed")
                now = _monotonic()
                if queued:
                    if not any(f is frame for f in self._batch) or self._flush_batch(now):
                        return  # our batch has left (here, or from another thread)
                elif not self._batch or self._flush_batch(now):
                    try:
                        self._send(frame, zmq.NOBLOCK)
                        self._last_send = now
                        return
                    except zmq.Again:
                        pass
                left = deadline - now
                if left <= 0:
                    if queued:  # not taken: it must not leave later
                        self._batch = [f for f in self._batch if f is not frame]
                        self._batch_bytes = sum(len(f) + 5 for f in self._batch)
                    raise PublishTimeout(
                        f"node at {self.address} did not take the message within "
                        f"{self.publish_timeout:g} s (it is down or overloaded)"
                    )
            self._push.poll(int(min(left, 0.05) * 1000) + 1, zmq.POLLOUT)

    def _flush_batch(self, now: float) -> bool:
        """Send the pending publish batch (under _pub_lock); False if there is no room."""
        batch = self._batch
        if not batch:
            return True
        try:
            if len(batch) == 1:
                self._send(batch[0], zmq.NOBLOCK)
            elif self._batch_bytes <= self._batch_full + self._batch_item_max:
                self._send(_packb(batch), zmq.NOBLOCK)
            else:  # made for a node with a larger limit (before a failover): one by one
                while batch:
                    self._send(batch[0], zmq.NOBLOCK)
                    del batch[0]
        except zmq.Again:
            return False
        batch.clear()
        self._batch_bytes = 0
        self._last_send = now
        return True

    def _flush_tail(self) -> None:
        """From the client thread (woken when a batch starts, then every ms while armed):
        send a batch no publish came to fill, once it is PUBLISH_LINGER old.

        The rest of the linger is waited out here rather than until the next 1 ms poll: a
        lone publish that joined a batch (a paced publisher catching up after a late
        wake-up) then leaves within about the linger, not a millisecond later. The
        flusher disarms when it sends a tail or finds no batch, and the next batch wakes
        it; it stays armed (1 ms polls) only while a flood keeps replacing the batch.
        """
        with self._pub_lock:
            now = _monotonic()
            if self._closed:
                self._flusher_armed = False
                return
            if not self._batch:
                # nothing waits (the publisher sent it): back to slow polls, so the next
                # batch wakes this thread. Staying armed while a paced publisher went on
                # meant a wake-up every millisecond competing with it for the GIL.
                self._flusher_armed = False
                return
            since = self._batch_since
            left = since + PUBLISH_LINGER - now
            if left <= 0:
                if self._flush_batch(now):  # no room: again at the next poll
                    self._flusher_armed = False
                return
        time.sleep(left)  # at most PUBLISH_LINGER, without the lock: publishes go on
        with self._pub_lock:
            if self._closed:
                self._flusher_armed = False
            elif self._batch and self._batch_since == since and self._flush_batch(_monotonic()):
                self._flusher_armed = False  # (a batch started since is a publisher's own)

    def _batch_limits(self, hello: dict[str, Any]) -> None:
        """Size publish batches for the node that answered ``hello`` (under _pub_lock). A
        node that does not announce ``publish_batch`` gets no batches."""
        node = hello.get("publish_batch")
        # (the node announces its max_frame_bytes: no larger publish would be taken)
        self._frame_max = node if type(node) is int and node > 0 else 0
        limit = min(PUBLISH_BATCH_BYTES, node) - 64 if type(node) is int and node >= 1024 else 0
        # a batch of small frames that leaves once past `full` stays within `limit`
        self._batch_item_max = limit // 8
        self._batch_full = limit - limit // 8

    def _too_large(self, size: int) -> str:
        return (
            f"message of {size} bytes (topic, payload and headers, encoded) is over the "
            f"node's limit of {self._frame_max} bytes (its max_frame_bytes)"
        )

    def _wake(self) -> None:
        with self._cmd_lock:
            try:
                self._cmd.send(b"x", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass  # the thread is behind or gone; its 50 ms tick still flushes

    def _publish_persistent(
        self, topic: str, payload: Any, headers: dict[str, Any] | None, *, wait: bool
    ) -> Any:
        validate_publish_topic(topic)
        self._check("publish", topic)
        raw, fmt = _encode_payload(payload)
        if headers is not None and (
            not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers)
        ):
            raise PayloadError("headers must be a dict with string keys")
        body = {"topic": topic, "payload": raw, "fmt": fmt, "headers": headers}
        if self._frame_max and len(raw) + len(topic) > self._frame_max - 256:
            # near the limit: measure the request as the node will (the largest req id)
            try:
                size = len(wire.encode_control(wire.PUBLISH, 2**32 - 1, body))
            except (TypeError, ValueError, OverflowError) as exc:
                raise PayloadError(f"headers cannot be encoded with msgpack: {exc}") from exc
            if size > self._frame_max:
                raise PayloadError(self._too_large(size))
        with self._pub_lock:
            if self._batch and not self._closed:
                self._flush_batch(_monotonic())  # what was published before goes first
        fut = self._command("req", (wire.PUBLISH, body))
        if not wait:
            return fut
        try:
            return fut.result(self.publish_timeout)
        except FutureTimeout:
            raise PublishTimeout(
                f"node at {self.address} did not confirm the message within "
                f"{self.publish_timeout:g} s"
            ) from None

    def read(
        self, pattern: str = ">", start_seq: int = 1, end_seq: int | None = None, limit: int = 1000
    ) -> list[Message]:
        """Messages of the node's retention log with ``start_seq <= seq < end_seq`` (None:
        up to the newest) whose topic matches ``pattern``, oldest first, at most ``limit``.
        Each has ``log_seq``. Sequences that expired from the log are simply absent: compare
        ``start_seq`` with :meth:`log_range` to detect it."""
        validate_pattern(pattern)
        self._check("subscribe", pattern)
        out: list[Message] = []
        start = start_seq
        while len(out) < limit:
            body = {"pattern": pattern, "start": start, "limit": min(limit - len(out), 10_000)}
            if end_seq is not None:
                body["end"] = end_seq
            reply = self.request(wire.READ, body)
            for seq, topic, raw, fmt, headers, origin, inc, oseq, ts in reply["rows"]:
                msg = _message(pattern, [topic, raw, fmt, headers, origin, inc, oseq, ts])
                msg.log_seq = seq
                out.append(msg)
            nxt = int(reply["next"])
            # a page may hold no rows and still not be the end: a sparse pattern's scan is
            # bounded per request (READ_SCAN_ROWS), so go on while `next` moves
            if nxt <= start or nxt >= (end_seq if end_seq is not None else reply["last_seq"] + 1):
                break
            start = nxt
        return out

    def log_range(self) -> tuple[int, int]:
        """(first, last) sequence of the node's retention log; first > last when empty."""
        reply = self.request(wire.READ, {"pattern": ">", "start": 0, "end": 0, "limit": 1})
        return int(reply["first_seq"]), int(reply["last_seq"])

    def _publish_fanout(self, frame: bytes) -> None:
        deadline = time.monotonic() + self.publish_timeout
        pending = None
        while True:
            with self._pub_lock:
                if self._closed:
                    raise ClientClosed("client is closed")
                if pending is None:
                    pending = set(self._pushes)
                for ep in list(pending):
                    push = self._pushes.get(ep)
                    if push is None:
                        pending.discard(ep)  # that node is gone: nothing to send to
                        continue
                    try:
                        push.send(frame, zmq.NOBLOCK)
                        pending.discard(ep)
                    except zmq.Again:
                        pass
                if not pending and self._pushes:
                    return
            if time.monotonic() >= deadline:
                raise PublishTimeout(
                    f"fan-out publish: {len(pending or ())} node(s) did not take the message "
                    f"within {self.publish_timeout:g} s"
                )
            time.sleep(0.005)

    def subscribe(
        self,
        pattern: str,
        callback: Callable[[Message], Any],
        *,
        durable: str | None = None,
        credit: int = 100,
        max_msgs: int = 0,
        max_bytes: int = 0,
        max_age: float = 0.0,
        overflow: str = "drop-oldest",
    ) -> Subscription:
        """Call ``callback(message)`` for every message matching ``pattern``.

        Returns once the node has the subscription; raises InvalidTopic for a bad pattern
        and BrokerUnreachable if the node does not confirm within the timeout.

        ``durable="NAME"`` opens (or reattaches to) a durable subscription: the node keeps
        its interest and stores matching messages while no subscriber is attached, and
        delivers them on return (from any process using the same name), then continues
        live. At most ``credit`` messages are unacknowledged at a time; each is
        acknowledged after ``callback`` returns, and one not acknowledged before a
        disconnect is delivered again with ``message.redelivered`` set. ``max_msgs``,
        ``max_bytes`` (topic + payload) and ``max_age`` (seconds) bound what is stored
        (0 = unbounded; while a subscriber is attached, the first two bound what waits to
        be sent: what is in flight to it is bounded by ``credit``):
        ``overflow="drop-oldest"`` (default) drops the oldest to make room,
        ``"reject-new"`` keeps what is stored and refuses more — a persistent publish
        that a full durable would have to store fails with an error to its publisher;
        other messages are not queued (counted). ``unsubscribe()`` on the
        handle detaches; :meth:`delete_durable` deletes it and its stored messages.
        """
        validate_pattern(pattern)
        self._check("subscribe", pattern)
        if durable is not None:
            bounds = {
                "max_msgs": max_msgs,
                "max_bytes": max_bytes,
                "max_age": max_age,
                "overflow": overflow,
            }
            return self._subscribe_durable(pattern, callback, durable, credit, bounds)
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

    def _subscribe_durable(
        self,
        pattern: str,
        callback: Callable[[Message], Any],
        name: str,
        credit: int,
        bounds: dict[str, Any],
    ) -> Subscription:
        validate_broker_id(name, "durable subscription name")
        if type(credit) is not int or not 1 <= credit <= 100_000:
            raise ConfigError("credit must be an integer in 1..100000")
        sub = Subscription(self, pattern, callback)
        sub.durable = name
        previous = self._durables.get(name)
        self._durables[name] = (sub, credit, bounds)
        try:
            self.durable_info[name] = self.request(
                wire.DURABLE_OPEN, {"name": name, "pattern": pattern, "credit": credit, **bounds}
            )
        except BaseException:
            # refused (e.g. another pattern): an earlier subscription by this name stays
            if previous is not None:
                self._durables[name] = previous
            else:
                self._durables.pop(name, None)
            raise
        return sub

    def detach_durable(self, name: str) -> None:
        """Stop receiving durable subscription ``name`` (same as ``unsubscribe()`` on its
        handle): the node keeps its interest and stores what comes for the next attach.
        Safe to call from its own callback: later messages are not acknowledged."""
        entry = self._durables.get(name)
        if entry is not None:
            entry[0].unsubscribe()

    def delete_durable(self, name: str) -> int:
        """Delete durable subscription ``name`` and its stored messages (on the node this
        client is connected to); return how many stored messages went with it."""
        validate_broker_id(name, "durable subscription name")
        self._durables.pop(name, None)
        return int(self.request(wire.DURABLE_DELETE, {"name": name}).get("deleted", 0))

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

    def peers(self) -> list[dict[str, Any]]:
        """The node's peers: id, found_by (mdns/config/inbound), state, endpoint, links."""
        peers: list[dict[str, Any]] = self.request(wire.PEERS).get("peers", [])
        return peers

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
        for name in list(self._durables):
            # tell the node we are leaving, so it stops sending and keeps storing
            try:
                self._command("send", (wire.DURABLE_CLOSE, {"name": name}))
            except (ClientClosed, zmq.ZMQError):
                pass
        # publishes still in a batch: handed to the socket (its linger sends them)
        deadline = _monotonic() + self.publish_timeout
        while True:
            with self._pub_lock:
                if not self._batch or self._flush_batch(_monotonic()):
                    break
            if _monotonic() >= deadline:
                log.warning("closing: %d batched publishes not taken by the node", len(self._batch))
                break
            self._push.poll(10, zmq.POLLOUT)
        with self._pub_lock:
            self._closed = True
            self._push.close()
            for push in self._pushes.values():
                push.close()
            self._pushes.clear()
        try:
            with self._cmd_lock:
                self._cmds.put(("stop", None, None))
                self._cmd.send(b"x", zmq.NOBLOCK)  # a dead client thread must not hang us
        except zmq.ZMQError:
            pass
        self._thread.join(5.0)
        self._cmd.close()
        self._locator.close()
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
        if not self._thread.is_alive():
            raise ClientClosed("the client's thread has stopped (see the log); close the client")
        with self._cmd_lock:
            self._cmds.put((name, arg, fut))
            try:
                self._cmd.send(b"x", zmq.NOBLOCK)
            except zmq.Again:
                pass  # the thread is behind; it drains the command queue on its next wake
        return fut

    def _remove(self, sub: Subscription) -> None:
        if sub.durable is not None:
            entry = self._durables.get(sub.durable)
            if entry is not None and entry[0] is sub:
                del self._durables[sub.durable]
                if not self._closed:
                    try:
                        self._command("send", (wire.DURABLE_CLOSE, {"name": sub.durable}))
                    except (ClientClosed, zmq.ZMQError):
                        pass
            return
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
        with self._pub_lock:
            self._push.close(linger=0)
            for push in self._pushes.values():
                push.close(linger=0)
            self._pushes.clear()
        self._locator.close()
        self._ctx.term()

    # -- the client thread -----------------------------------------------------------------

    def _run(self, ready: Future[dict[str, Any]]) -> None:
        ctx = self._ctx
        cmd = ctx.socket(zmq.PAIR)
        cmd.setsockopt(zmq.RCVHWM, 0)
        cmd.bind(self._cmd_endpoint)
        sub = ctx.socket(zmq.SUB)
        for s in (cmd, sub):
            s.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.IPV6, 1)
        sub.setsockopt(zmq.RCVHWM, self._hwm)
        loop = _ClientLoop(self, cmd, sub, ready)
        try:
            loop.run()
        except Exception as exc:  # report, never leave the constructor waiting
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.exception("client thread crashed")
        finally:
            loop.close()
            cmd.close()
            sub.close()


def _send(session: _Session | None, frame: bytes) -> bool:
    """Send on a session without ever blocking or raising in the client thread: a node
    that does not read is caught by the heartbeat, not by a stuck thread."""
    if session is None:
        return False
    try:
        session.dealer.send(frame, zmq.NOBLOCK)
        return True
    except zmq.ZMQError:
        return False


class _Session:
    """One node the client talks to: its control DEALER and liveness."""

    __slots__ = ("deadline", "dealer", "endpoint", "hello", "last_ping", "last_seen", "state")

    def __init__(self, endpoint: str, dealer: zmq.Socket[bytes], deadline: float) -> None:
        self.endpoint = endpoint
        self.dealer = dealer
        self.state = "hello"
        self.deadline = deadline
        self.hello: dict[str, Any] = {}
        self.last_seen = 0.0
        self.last_ping = 0.0


class _ClientLoop:
    """The client thread's loop: sessions with nodes (connect, heartbeat, fail over),
    commands from user threads, control replies, deliveries."""

    def __init__(
        self,
        client: Client,
        cmd: zmq.Socket[bytes],
        sub: zmq.Socket[bytes],
        ready: Future[dict[str, Any]],
    ) -> None:
        self.client = client
        self.cmd = cmd
        self.sub = sub
        self.ready = ready
        self.ready_deadline = time.monotonic() + client.timeout
        self.refs: dict[str, int] = {}
        self.pending: dict[int, tuple[Future[Any], float]] = {}
        self.waiting: list[tuple[int, int, dict[str, Any]]] = []  # requests with no node yet
        self.syncs: dict[bytes, Future[Any]] = {}
        self.req_ids = itertools.count(1)
        self.running = True
        self.patterns: dict[bytes, str] = {}  # delivery-frame prefix -> pattern
        self.pseq: dict[str, int] = {}  # last delivery sequence seen per pattern
        self.gaps: dict[str, int] = {}  # missed deliveries not yet reported
        self.acks: dict[str, int] = {}  # durable name -> highest q processed, not yet acked
        self.sessions: dict[str, _Session] = {}
        self.by_socket: dict[zmq.Socket[bytes], _Session] = {}
        self.primary: _Session | None = None
        self.failures: dict[str, tuple[int, float]] = {}  # endpoint -> (count, retry at)
        self.cursor = -1  # the first attempt takes the first candidate
        self.poller = zmq.Poller()
        self.poller.register(cmd, zmq.POLLIN)
        self.poller.register(sub, zmq.POLLIN)

    def run(self) -> None:
        next_tick = 0.0
        c = self.client
        while self.running:
            # 1 ms while a flood keeps a batch open (see Client._flush_tail)
            for sock, _ in self.poller.poll(1 if c._flusher_armed else 50):
                if sock is self.sub:
                    self._on_deliver()
                elif sock is self.cmd:
                    self._on_command()
                else:
                    self._on_session(self.by_socket[sock])
            if c._flusher_armed:
                c._flush_tail()
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + 0.05
                self._tick(now)

    def close(self) -> None:
        for session in list(self.sessions.values()):
            session.dealer.close(linger=200)  # bounded: lets a last DURABLE_CLOSE out
        self.sessions.clear()

    # -- sessions --------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        c = self.client
        if not c._cmds.empty():
            self._on_command()  # a wake-up byte that could not be sent
        alive = set(c._locator.candidates())
        for session in list(self.sessions.values()):
            if session.state == "hello" and now > session.deadline:
                self._fail(session, now, "no answer")
            elif session.state == "up":
                if now - session.last_seen > c.heartbeat_timeout and not (
                    int(session.dealer.getsockopt(zmq.EVENTS)) & zmq.POLLIN
                ):  # frames waiting to be read: the node is alive, we were busy
                    self._fail(session, now, f"no heartbeat for {c.heartbeat_timeout:g} s")
                elif session.endpoint not in alive:
                    self._fail(session, now, "it left the network (goodbye)")
                elif now - session.last_ping >= c.heartbeat_interval:
                    session.last_ping = now
                    _send(session, wire.encode_control(wire.PING, 0, {}))
        self._connect_more(now)
        if self.gaps and self.primary is not None:
            body = self.gaps
            self.gaps = {}
            _send(self.primary, wire.encode_control(wire.GAPS, 0, body))
        if not self.ready.done():
            up = [s for s in self.sessions.values() if s.state == "up"]
            if self.primary is not None and len(up) >= (c.min_brokers if c.fanout else 1):
                self.ready.set_result(self.primary.hello)
            elif now > self.ready_deadline:
                found = " (no node found)"
                if alive:
                    found = _CURVE_HINT if c._curve is not None else _PLAIN_HINT
                self.ready.set_exception(
                    BrokerUnreachable(
                        f"no zbroker node answered at {c.address} within {c.timeout:g} s{found}"
                        if not c.fanout
                        else f"fan-out: {len(up)} of the {c.min_brokers} nodes needed answered "
                        f"at {c.address} within {c.timeout:g} s"
                    )
                )
                self.running = False
        self._expire(now)

    def _connect_more(self, now: float) -> None:
        c = self.client
        candidates = c._locator.candidates()
        if not candidates:
            return
        ready_to_try = [
            ep
            for ep in candidates
            if ep not in self.sessions and self.failures.get(ep, (0, 0.0))[1] <= now
        ]
        if c.fanout:
            for ep in ready_to_try:
                self._open(ep, now)
        elif self.primary is None and not any(s.state == "hello" for s in self.sessions.values()):
            if ready_to_try:
                # round robin from where the last attempt left off
                self.cursor = (self.cursor + 1) % len(ready_to_try)
                self._open(ready_to_try[self.cursor], now)

    def _open(self, endpoint: str, now: float) -> None:
        dealer = self.client._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        # requests are bounded by the caller (windows, credit): never refuse one locally
        dealer.setsockopt(zmq.SNDHWM, 0)
        dealer.setsockopt(zmq.IPV6, 1)
        self.client._secure(dealer, endpoint)
        dealer.connect(endpoint)
        session = _Session(endpoint, dealer, now + self.client.timeout)
        self.sessions[endpoint] = session
        self.by_socket[dealer] = session
        self.poller.register(dealer, zmq.POLLIN)
        dealer.send(wire.encode_control(wire.HELLO, 0, {}))

    def _close(self, session: _Session) -> None:
        self.sessions.pop(session.endpoint, None)
        self.by_socket.pop(session.dealer, None)
        self.poller.unregister(session.dealer)
        session.dealer.close(linger=0)

    def _fail(self, session: _Session, now: float, why: str) -> None:
        c = self.client
        was_up = session.state == "up"
        self._close(session)
        count = self.failures.get(session.endpoint, (0, 0.0))[0] + 1
        initial, cap, mult = c._backoff
        self.failures[session.endpoint] = (count, now + min(initial * mult ** (count - 1), cap))
        if was_up:
            log.warning(
                "lost node %s at %s: %s", session.hello.get("broker_id"), session.endpoint, why
            )
            self._unplug(session)
        if session is self.primary:
            self.primary = None
            others = [s for s in self.sessions.values() if s.state == "up"]
            if others:
                self._make_primary(others[0])

    def _on_session(self, session: _Session) -> None:
        try:
            self._drain_session(session)
        finally:
            if self.acks and self.session_alive(session):
                for name, upto in self.acks.items():
                    _send(
                        session,
                        wire.encode_control(wire.DURABLE_ACK, 0, {"name": name, "upto": upto}),
                    )
            self.acks.clear()

    def _drain_session(self, session: _Session) -> None:
        now = time.monotonic()
        while True:
            try:
                frame = session.dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            session.last_seen = now
            try:
                op, req_id, body = wire.decode_control(frame)
            except ProtocolError as exc:
                log.warning("bad control reply from node: %s", exc)
                continue
            if req_id == 0 and op == wire.DELIVER:
                self._on_durable(session, body)
                continue
            if req_id == 0 and op == wire.PING and session.state == "up":
                inc = body.get("incarnation")
                if inc is not None and inc != session.hello.get("incarnation"):
                    # the node restarted under us faster than our heartbeat noticed
                    log.info("node restarted: incarnation %s at %s", inc, session.endpoint)
                    session.hello = {**session.hello, "incarnation": inc}
                    if session is self.primary:
                        self._reattach_durables(session)
                continue
            if req_id == 0:
                if op == wire.HELLO and session.state == "hello":
                    if not isinstance(body.get("ports"), dict):
                        continue
                    session.state = "up"
                    session.hello = body
                    session.last_ping = now
                    self.failures.pop(session.endpoint, None)
                    self._plug(session)
                    if self.primary is None:
                        self._make_primary(session)
                continue
            entry = self.pending.pop(req_id, None)
            if entry is None:
                continue
            fut = entry[0]
            if op == wire.ERROR:
                text = str(body.get("message", "request failed"))
                error = PermissionDenied if text.startswith("permission denied") else RequestError
                fut.set_exception(error(text))
            else:
                fut.set_result(body)
            if not self.session_alive(session):
                return

    def _on_durable(self, session: _Session, body: dict[str, Any]) -> None:
        """A durable subscription's message: run the callback, then acknowledge it."""
        name = body.get("name")
        entry = self.client._durables.get(name) if isinstance(name, str) else None
        q = body.get("q")
        if entry is None or type(q) is not int:
            return  # detached meanwhile: it stays unacknowledged, so it comes back later
        sub = entry[0]
        try:
            msg = _message(sub.pattern, body["msg"])
        except (ProtocolError, KeyError, TypeError) as exc:
            log.warning("dropped malformed durable delivery: %s", exc)
            return
        msg.redelivered = bool(body.get("redelivered"))
        try:
            sub.callback(msg)
        except Exception:
            log.exception("durable subscriber callback for %r raised", name)
        # acknowledgements are cumulative: one per subscription per drain (see _on_session)
        assert isinstance(name, str)
        if q > self.acks.get(name, 0):
            self.acks[name] = q

    def session_alive(self, session: _Session) -> bool:
        return self.sessions.get(session.endpoint) is session

    def _data_endpoint(self, session: _Session, port_name: str) -> str:
        host = urlsplit(session.endpoint).hostname or ""
        return _endpoint(host, int(session.hello["ports"][port_name]))

    def _plug(self, session: _Session) -> None:
        """Connect publishing to a node that just answered (fan-out: every node)."""
        c = self.client
        if c.fanout:
            push = c._new_push()
            c._secure(push, session.endpoint)
            push.connect(self._data_endpoint(session, "publish"))
            with c._pub_lock:
                if c._closed:
                    push.close(linger=0)
                    return
                c._pushes[session.endpoint] = push

    def _unplug(self, session: _Session) -> None:
        c = self.client
        if c.fanout:
            with c._pub_lock:
                push = c._pushes.pop(session.endpoint, None)
            if push is not None:
                push.close(linger=0)
        if session is self.primary:
            self.sub.disconnect(self._data_endpoint(session, "deliver"))
            if not c.fanout:
                with c._pub_lock:
                    if not c._closed:
                        c._push.disconnect(self._data_endpoint(session, "publish"))

    def _make_primary(self, session: _Session) -> None:
        """Subscriptions (and, without fan-out, publishing) go through this node. The SUB
        socket re-sends every subscription on the new connection by itself."""
        c = self.client
        self.primary = session
        c.hello = session.hello
        self.pseq.clear()  # another node numbers its sends afresh
        c._topic_heads.clear()  # topics allowed by the last node: this one checks afresh
        c._secure(self.sub, session.endpoint)
        self.sub.connect(self._data_endpoint(session, "deliver"))
        if not c.fanout:
            with c._pub_lock:
                c._batch_limits(session.hello)
                if not c._closed:
                    c._secure(c._push, session.endpoint)
                    c._push.connect(self._data_endpoint(session, "publish"))
        if self.ready.done():
            log.info("connected to node %s at %s", session.hello.get("broker_id"), session.endpoint)
        for req_id, op, body in self.waiting:
            self._send_request(session, req_id, op, body)
        self.waiting.clear()
        if self.ready.done():
            self._reattach_durables(session)

    def _reattach_durables(self, session: _Session) -> None:
        """After a reconnect: reopen durable subscriptions (unacknowledged ones come again)."""
        for name, (sub, credit, bounds) in list(self.client._durables.items()):
            body = {"name": name, "pattern": sub.pattern, "credit": credit, **bounds}
            _send(session, wire.encode_control(wire.DURABLE_OPEN, 0, body))

    def _on_command(self) -> None:
        c = self.client
        while True:  # the wake-up bytes only wake us: the queue says what to do
            try:
                self.cmd.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        while True:
            try:
                name, arg, fut = c._cmds.get_nowait()
            except queue.Empty:
                return
            if name == "stop":
                self.running = False
            elif name == "sub":
                n = self.refs.get(arg, 0)
                self.refs[arg] = n + 1
                if n == 0:
                    self.pseq.pop(arg, None)  # what we missed while away is no gap
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
            elif name == "send":
                op, body = arg
                if self.primary is not None:
                    _send(self.primary, wire.encode_control(op, 0, body))
                if fut is not None:
                    fut.set_result(None)
            elif name == "req":
                op, body = arg
                req_id = next(self.req_ids)
                assert fut is not None
                self.pending[req_id] = (fut, time.monotonic() + c.timeout)
                if self.primary is None:
                    self.waiting.append((req_id, op, body))  # sent once a node answers
                else:
                    self._send_request(self.primary, req_id, op, body)

    def _send_request(self, session: _Session, req_id: int, op: int, body: Any) -> None:
        """Send a pending request, or fail it at once: a request over the node's
        max_frame_bytes is counted and dropped there without a reply, so it would only
        have waited out the client's timeout as if the node were gone."""
        frame = wire.encode_control(op, req_id, body)
        limit = self.client._frame_max
        if limit and len(frame) > limit:
            error: Exception = PayloadError(
                f"request of {len(frame)} bytes is over the node's limit of {limit} bytes "
                "(its max_frame_bytes)"
            )
        elif _send(session, frame):
            return
        else:
            error = BrokerUnreachable("the request could not be sent")
        pending = self.pending.pop(req_id, None)
        if pending is not None and not pending[0].done():
            pending[0].set_exception(error)

    def _on_deliver(self) -> None:
        recv = self.sub.recv
        subs = self.client._subs
        patterns = self.patterns
        pseq = self.pseq
        unpackb = msgpack.unpackb
        sync = wire.SYNC_PREFIX[0]
        events = cast("Callable[[int], int]", self.sub.getsockopt)
        for i in range(1024):
            # after the frame poll() announced, ask the socket rather than end on
            # zmq.Again: at low rates that exception was a large part of a delivery's cost
            if i and not events(_EVENTS) & _POLLIN:
                return
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
                fields = unpackb(memoryview(frame)[nul + 1 : -8], raw=False, strict_map_key=False)
                # one message (its envelope starts with the topic) or a batch of envelopes
                if type(fields) is list and fields and type(fields[0]) is list:
                    msgs = [_message(pattern, f) for f in fields]
                else:
                    msgs = [_message(pattern, fields)]
            except (ProtocolError, ValueError, msgpack.UnpackException) as exc:
                log.warning("dropped malformed delivery: %s", exc)
                continue
            n = int.from_bytes(frame[-8:], "big")  # the batch's last message
            first = n - len(msgs) + 1
            last = pseq.get(pattern)
            if last is not None and first > last + 1:
                # the node's queue toward us overflowed: count, and tell the node
                missed = first - last - 1
                self.client.missed += missed
                self.gaps[pattern] = self.gaps.get(pattern, 0) + missed
            pseq[pattern] = n
            for msg in msgs:
                # looked up per message: a callback may unsubscribe in the middle of a batch
                for s in subs.get(pattern, ()):
                    try:
                        s.callback(msg)
                    except Exception:
                        log.exception("subscriber callback for %r raised", pattern)

    def _expire(self, now: float) -> None:
        if self.pending:
            for req_id in [r for r, (_, dl) in self.pending.items() if dl < now]:
                fut, _ = self.pending.pop(req_id)
                self.waiting = [w for w in self.waiting if w[0] != req_id]
                if not fut.done():
                    fut.set_exception(BrokerUnreachable("the node did not answer in time"))
