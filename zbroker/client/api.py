"""Client: the public API of a connection to a zbroker node, and its composition root.

:class:`Client` builds the client's parts and gives each its own state: the
:class:`~.publisher.Publisher` (PUSH socket, lock, batching; ``Client.publish`` *is* its
``publish``), the :class:`~.subscriber.Subscriptions` registry, the
:class:`~.durables.Durables` consumer, and the :class:`~.thread.ClientThread`, which owns
the sessions with nodes, the SUB socket and every callback. User threads reach the client
thread only through the :class:`~.channel.Channel`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import TracebackType
from typing import Any

import zmq

from .. import selectors
from ..const import (
    DEFAULT_BROKER,
    DEFAULT_CLIENT_HEARTBEAT_INTERVAL,
    DEFAULT_CLIENT_HEARTBEAT_TIMEOUT,
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_CREDIT,
    DEFAULT_HWM,
    DEFAULT_PUBLISH_TIMEOUT,
    DEFAULT_RECONNECT_INITIAL,
    DEFAULT_RECONNECT_MAX,
    DEFAULT_RECONNECT_MULTIPLIER,
)
from ..errors import BrokerUnreachable, ClientClosed
from ..topics import validate_subscription
from .channel import Channel
from .credentials import Credentials
from .durables import Durables
from .fanout import Fanout
from .inspection import InspectMethods
from .locators import Locator, make_locator
from .messages import Message, Subscription
from .publisher import Publisher
from .queues import QueueMembers, check_consumer_options
from .reads import LogMethods
from .sessions import Settings, check_options
from .state import StateMethods
from .subscriber import Subscriptions
from .thread import ClientThread

__all__ = ["Client"]


class Client(StateMethods, LogMethods, InspectMethods):
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
        over: when its node stops answering heartbeats, or says it is stopping (LEAVING),
        or, found by zeroconf, leaves the group, it connects to another and re-subscribes
        its patterns; an endpoint that fails is retried with exponential backoff.
        ``fanout=True`` publishes every message to every node found, and connects only
        once ``min_brokers`` answer (subscriptions use one of them).

        Security (nodes with ``[security] enabled``): ``keys`` is this client's key pair,
        the path of its secret certificate (``zbroker keygen --out DIR --name NAME``
        writes ``NAME.key_secret``) or its 40-character Z85 secret key; ``server_key`` is
        the node's public key, Z85 text or the path of its ``node.key`` (for several
        addresses, a comma-separated list in the same order). Every socket then speaks
        CURVE; the node tells the client what it may publish and subscribe to, and
        publish/subscribe outside that raise :class:`~zbroker.errors.PermissionDenied`.
        """
        check_options(
            hwm,
            min_brokers,
            timeout=timeout,
            publish_timeout=publish_timeout,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            reconnect_initial_delay=reconnect_initial_delay,
            reconnect_max_delay=reconnect_max_delay,
        )
        self.address = broker
        self.timeout = timeout
        self.publish_timeout = publish_timeout
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.fanout = fanout
        self.min_brokers = min_brokers
        backoff = (reconnect_initial_delay, reconnect_max_delay, reconnect_multiplier)
        self._credentials = Credentials(broker, keys, server_key)
        self._locator: Locator = make_locator(broker, interfaces)
        self._closed = False
        self._compose(hwm, backoff)
        self._connect()

    def _compose(self, hwm: int, backoff: tuple[float, float, float]) -> None:
        """Build the parts; the client thread is built, not started."""
        ctx = self._ctx = zmq.Context[zmq.Socket[bytes]]()
        self._channel = Channel(ctx)
        fanout = Fanout(ctx, hwm, self.publish_timeout, self._credentials) if self.fanout else None
        self._publisher = Publisher(
            ctx,
            address=self.address,
            hwm=hwm,
            publish_timeout=self.publish_timeout,
            fanout=fanout,
            credentials=self._credentials,
            check=self._check,
            wake=self._channel.wake,
            post=self._post_persistent,
        )
        # the hot path: ``client.publish`` resolves straight to the publisher's method,
        # so a publish costs no call more than the publisher's own (see Client.publish)
        self.publish = self._publisher.publish  # type: ignore[method-assign]
        self._subscriptions = Subscriptions(self._command)
        self._durables = Durables(self._command, self.timeout)
        self.durable_info = self._durables.info
        self._queues = QueueMembers(self.request, self._command)
        settings = Settings(
            self.address,
            self.timeout,
            self.heartbeat_interval,
            self.heartbeat_timeout,
            backoff,
            self.fanout,
            self.min_brokers,
        )
        self._thread = ClientThread(
            ctx,
            settings,
            channel=self._channel,
            locator=self._locator,
            credentials=self._credentials,
            publisher=self._publisher,
            fanout=fanout,
            callbacks=self._subscriptions.by_pattern,
            durables=self._durables,
            queues=self._queues,
            hwm=hwm,
        )

    def _connect(self) -> None:
        """Start the client thread and wait for the first node's HELLO."""
        self._thread.start()
        try:
            self._thread.ready.result(self.timeout + 5.0)
        except FutureTimeout:
            self._abort()
            raise BrokerUnreachable(
                f"no zbroker node answered at {self.address} within {self.timeout:g} s"
                + self._credentials.unreachable_hint
            ) from None
        except BaseException:
            self._abort()
            raise
        self._channel.connect()

    def _check(self, kind: str, what: str) -> None:
        """Raise PermissionDenied if the node said this client may not ``kind`` ``what``
        (nodes without security send no permissions: everything is allowed)."""
        self._credentials.check(self.hello, kind, what)

    # -- public API ------------------------------------------------------------------------

    @property
    def hello(self) -> dict[str, Any]:
        """The HELLO reply of the node this client is connected to."""
        return self._thread.hello

    @property
    def broker_id(self) -> str:
        """The ID of the node this client is connected to."""
        return str(self.hello["broker_id"])

    @property
    def missed(self) -> int:
        """Deliveries the node's queue toward this client dropped (a slow consumer)."""
        return self._thread.subscriber.missed

    @property
    def malformed(self) -> int:
        """Messages delivered to this client that it could not read (a payload marked
        msgpack that does not decode, from a raw publisher): each dropped alone, logged,
        and for a durable subscription acknowledged; the others of its frame delivered."""
        return self._thread.subscriber.malformed + self._durables.malformed

    @property
    def _frame_max(self) -> int:
        # the node's max_frame_bytes as its HELLO announced it (0: unknown); zbroker.writer
        # sizes its requests by it
        return self._publisher.frame_max

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
        # (an instance's ``publish`` is its publisher's, set in _compose: this is reached
        # only through the class, as in ``Client.publish(client, ...)``)
        return self._publisher.publish(
            topic, payload, headers, persistent=persistent, confirm=confirm
        )

    def subscribe(
        self,
        pattern: str,
        callback: Callable[[Message], Any],
        *,
        selector: str | None = None,
        durable: str | None = None,
        queue: str | None = None,
        shared: bool = False,
        credit: int = DEFAULT_CREDIT,
        max_msgs: int = 0,
        max_bytes: int = 0,
        max_age: float = 0.0,
        overflow: str = "drop-oldest",
        initial: bool = True,
    ) -> Subscription:
        """Call ``callback(message)`` for every message matching ``pattern``: first the
        current value of each stateful topic it matches (``message.initial``; then
        ``Subscription.snapshot`` is set), then live ones (``initial=False``: only live).

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
        ``overflow="drop-oldest"`` (default) drops the oldest to make room, ``"reject-new"``
        keeps what is stored and refuses more (a persistent publish it would have to store
        fails to its publisher; other messages are not queued, counted). ``unsubscribe()``
        detaches; :meth:`delete_durable` deletes it and its stored messages.
        ``selector="region = 'EU' AND qty > 100"``: only messages whose headers it accepts
        (:mod:`zbroker.selectors`; a bad one raises SelectorError); with ``durable`` only
        those are stored, and reopening the durable with another selector is refused.
        ``shared=True`` shares durable NAME among consumers (each message to one of them);
        ``queue="GROUP"`` joins queue group GROUP: each matching message to ONE member
        network-wide (at most once; ``credit`` per member; ``zbroker.client.queues``).
        """
        validate_subscription(pattern)  # (not an internal branch of $ZB: ReservedTopic)
        self._check("subscribe", pattern)
        check_consumer_options(callback, queue, durable, shared, selector)
        if queue is not None:
            return self._queues.subscribe(pattern, callback, queue, credit)
        if durable is not None:
            bounds: dict[str, Any] = {"max_msgs": max_msgs, "max_bytes": max_bytes}
            bounds |= {"max_age": max_age, "overflow": overflow, "shared": shared}
            if selector is not None:  # (checked here: a bad one raises SelectorError)
                bounds["selector"] = selectors.canonical(selector)
            sub = self._durables.subscribe(pattern, callback, durable, credit, bounds)
            sub.selector = bounds.get("selector")
            return sub
        return self._subscribe_live(pattern, callback, initial=initial, selector=selector)

    def detach_durable(self, name: str) -> None:
        """Detach durable ``name`` (as ``unsubscribe()`` on its handle; safe from its own
        callback): the node keeps storing what comes for the next attach."""
        self._durables.detach(name)

    def delete_durable(self, name: str, *, missing_ok: bool = True) -> int:
        """Delete durable ``name`` and its stored messages at its home node; return how
        many went. A name no node holds deletes nothing (0), or with ``missing_ok=False``
        raises NoSuchDurable."""
        return self._durables.delete(name, missing_ok)

    def request(self, op: int, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a control request and wait for its reply (raises RequestError on ERROR)."""
        fut = self._submit(op, body or {})
        try:
            result: dict[str, Any] = fut.result(self.timeout)
        except FutureTimeout:
            raise BrokerUnreachable(
                f"node at {self.address} did not answer within {self.timeout:g} s"
            ) from None
        return result

    def close(self) -> None:
        """Stop the client thread and close every socket (bounded wait). A call still
        waiting for the node in another thread (a request, a subscribe, a confirmed
        publish) raises ClientClosed at once. Callbacks get no message after the one
        being delivered when it began. From a callback (the client thread) it returns at
        once: the thread stops and closes the rest when that callback returns."""
        if self._closed:
            return
        self._subscriptions.close()
        self._durables.leave()
        self._queues.leave()
        self._publisher.drain()  # what is batched goes to the socket (its linger sends it)
        self._closed = True
        self._publisher.close()
        self._channel.stop()
        self._stop_missing()
        if self._thread.is_current():  # (a thread cannot join itself)
            self._thread.after_stop(self._release)
            return
        self._thread.join(5.0)
        self._release()

    def _release(self) -> None:
        """The client thread has stopped: close what is left (user threads' sockets)."""
        self._channel.close()
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
        fut: Future[Any] = Future()
        self._post_command(name, arg, fut)
        return fut

    def _post_command(self, name: str, arg: Any, fut: Future[Any]) -> None:
        self._post_persistent((name, arg, fut), command=True)

    def _post_persistent(self, publish: Any, *, command: bool = False) -> None:
        """A persistent publish (or with ``command`` any command) to the client thread."""
        if self._closed:
            raise ClientClosed("client is closed")
        if not self._thread.is_alive():
            raise ClientClosed("the client's thread has stopped (see the log); close the client")
        self._channel.post(publish if command else ("persistent", publish, None))

    def _submit(self, op: int, body: dict[str, Any]) -> Future[Any]:
        """A control request; its future resolves with the reply."""
        return self._command("req", (op, body))

    def _abort(self) -> None:
        self._closed = True
        self._channel.stop()
        self._thread.join(5.0)
        self._publisher.close(linger=0)
        self._locator.close()
        if self._thread.is_alive():
            return  # (stuck: its context is left behind rather than the caller hung in term)
        # whatever socket a failed start left open is closed here: term() waits for them
        self._ctx.destroy(linger=0)
