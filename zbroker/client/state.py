"""Topics with state, the client's side: ``set``, ``remove``, ``fetch``, ``topics`` and
subscriptions that start with a snapshot (mixed into :class:`~.api.Client`).

A snapshot subscription subscribes first, then asks the node for the current values of
every stateful topic its pattern matches (``STATE_FETCH`` with ``snapshot``); a
:class:`~zbroker.stateful.SnapshotGate` holds the live messages until the snapshot is in,
delivers the values (``Message.initial``), sets ``Subscription.snapshot``, then the live
messages the snapshot did not cover (by version).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import selectors
from ..errors import BrokerUnreachable, RequestError, SubscriptionCancelled, ZBrokerError
from ..stateful import OWNER, REMOVED, VERSION, SnapshotGate, Value
from ..topics import validate_pattern, validate_publish_topic
from ..wire import frames
from .messages import Message, Subscription, encode_payload, message_from_fields

if TYPE_CHECKING:
    from .subscriber import Subscriptions
    from .thread import ClientThread

__all__ = ["InitialMessage", "MissingTopic", "StateMethods", "value_message"]

log = logging.getLogger("zbroker.client")


class InitialMessage(Message):
    """A stateful topic's current value as a snapshot (or a fetch) gave it. A value is
    not a message the network numbered: its ``id`` is ``OWNER:0:0`` (no live message
    has seq 0); its topic and ``version`` name it."""

    __slots__ = ()
    initial = True


def value_message(pattern: str, v: Value) -> Message:
    """A state value ``[topic, payload, fmt, headers, version, owner, updated, replica_of]``
    as a Message flagged ``initial``; its headers carry the version and owner."""
    headers = dict(v[3]) if v[3] else {}
    headers[VERSION] = v[4]
    headers[OWNER] = v[5]
    # (made as one, not re-classed after: a compiled Message's class cannot be assigned)
    fields = [v[0], v[1], v[2], headers, v[5], 0, 0, v[6]]
    return message_from_fields(pattern, fields, InitialMessage)


def _stamp(msg: Message) -> tuple[str, int, str, int] | None:
    h = msg.headers
    version = h.get(VERSION) if h else None
    if type(version) is not int:
        return None
    removed = h.get(REMOVED)
    # True for a removal, SESSION_LOST (2) for a replica whose primary's session was lost
    flag = removed if type(removed) is int else int(bool(removed))
    return msg.topic, version, str(h.get(OWNER, "")), flag


@dataclass(frozen=True, slots=True)
class MissingTopic:
    """A subscribe or fetch of ``pattern`` on node ``node`` matched no stateful topic;
    ``branch`` is the handler's registered branch."""

    pattern: str
    node: str
    branch: str


MissingHandler = Callable[[MissingTopic], Any]


class StateMethods:
    """The stateful-topic methods of :class:`~.api.Client`."""

    _thread: ClientThread
    _missing: dict[str, MissingHandler] | None = None
    _missing_pool: ThreadPoolExecutor | None = None

    timeout: float
    request: Callable[..., dict[str, Any]]
    _check: Callable[[str, str], None]
    _command: Callable[[str, Any], Future[Any]]
    _submit: Callable[[int, dict[str, Any]], Future[Any]]
    _post_command: Callable[[str, Any, Future[Any]], None]
    _subscriptions: Subscriptions

    def set(self, topic: str, value: Any, headers: dict[str, Any] | None = None) -> int:
        """Set stateful ``topic``'s value (created if needed; this client's node becomes its
        owner) and publish it to subscribers. Returns once the node stored it (it survives
        a crash of the node); returns the value's version."""
        validate_publish_topic(topic)
        self._check("publish", topic)
        payload, fmt = encode_payload(value)
        body = {"topic": topic, "payload": payload, "fmt": fmt, "headers": headers}
        return int(self.request(frames.STATE_SET, body)["version"])

    def remove(self, pattern: str) -> int:
        """Remove every stateful topic ``pattern`` matches, on every node; subscribers get
        a message flagged ``removed``. Returns how many were removed."""
        validate_pattern(pattern)
        self._check("publish", pattern)
        return int(self.request(frames.STATE_REMOVE, {"pattern": pattern})["removed"])

    def fetch(self, pattern: str) -> list[Message]:
        """The current value of every stateful topic ``pattern`` matches (on any node),
        by topic, without subscribing."""
        validate_pattern(pattern)
        self._check("subscribe", pattern)
        values = self.request(frames.STATE_FETCH, {"pattern": pattern})["values"]
        return [value_message(pattern, v) for v in sorted(values, key=lambda v: str(v[0]))]

    def topics(self, pattern: str = ">") -> list[dict[str, Any]]:
        """The stateful topics ``pattern`` matches: topic, size (payload bytes), owner
        (where it lives), version, updated (epoch seconds), replica_of (a primary's, or
        None)."""
        validate_pattern(pattern)
        self._check("subscribe", pattern)
        values = self.request(frames.STATE_FETCH, {"pattern": pattern})["values"]
        return [
            {
                "topic": v[0],
                "size": len(v[1]),
                "owner": v[5],
                "version": v[4],
                "updated": v[6],
                "replica_of": v[7],
            }
            for v in sorted(values, key=lambda v: str(v[0]))
        ]

    def on_missing_topic(self, branch: str, handler: MissingHandler) -> None:
        """Handle missing topics under ``branch`` (a pattern): when a subscribe or fetch
        (on this client's node or, through fan-out links, on a secondary) matches no
        stateful topic, and ``branch`` is the most specific branch with a handler, the node
        calls ``handler(MissingTopic)`` (on a thread of its own: it may ``set`` the topic)
        and holds the request until it returns ``"proceed"`` (or True) or ``"cancel"``
        (or False: ``subscribe``/``fetch`` raise SubscriptionCancelled). A handler that
        raises proceeds. Registered with the node this client is connected to."""
        validate_pattern(branch)
        self._check("subscribe", branch)
        if self._missing is None:
            self._missing = {}
            self._missing_pool = ThreadPoolExecutor(4, thread_name_prefix="zbroker-missing")
            self._thread.on_missing = self._missing_notice
        self._missing[branch] = handler
        self.request(frames.STATE_HANDLER, {"branch": branch})

    def _stop_missing(self) -> None:
        """(closing) End the handlers' pool: its threads go (a handler running ends on
        its own; one not started is cancelled)."""
        if self._missing_pool is not None:
            self._missing_pool.shutdown(wait=False, cancel_futures=True)

    def _missing_notice(self, body: dict[str, Any]) -> None:
        """(client thread) A notice: run its handler on the pool, send the verdict."""
        handler = (self._missing or {}).get(str(body.get("branch")))
        pool = self._missing_pool
        if handler is None or pool is None:
            return
        notice = MissingTopic(str(body.get("pattern")), str(body.get("node")), str(body["branch"]))

        def run() -> None:
            try:
                answer = handler(notice)
            except Exception:
                log.exception("missing-topic handler for %r raised: proceeding", notice.branch)
                answer = "proceed"
            verdict = "cancel" if answer is False or answer == "cancel" else "proceed"
            self._command(
                "send", (frames.STATE_MISSING, {"id": body.get("id"), "verdict": verdict})
            )

        pool.submit(run)

    def _subscribe_live(
        self,
        pattern: str,
        callback: Callable[[Message], Any],
        *,
        initial: bool,
        selector: str | None = None,
    ) -> Subscription:
        """A plain subscription: with ``initial``, its snapshot first (with ``selector``,
        only the values whose headers it accepts)."""
        if initial:
            return self._subscribe_state(pattern, callback, selector)
        sub, name = self._subscriptions.add(pattern, callback, selector)
        try:
            self._command("sub", name).result(self.timeout)
        except FutureTimeout:
            sub.unsubscribe()
            raise BrokerUnreachable(
                f"node did not confirm subscription {pattern!r} within {self.timeout:g} s"
            ) from None
        return sub

    def _subscribe_state(
        self, pattern: str, callback: Callable[[Message], Any], selector: str | None
    ) -> Subscription:
        """Subscribe, then take the snapshot (see the module docstring). Everything the
        gate does runs on the client thread: live messages, and the snapshot's answer
        (its Future has its callback before the client thread can resolve it)."""

        def deliver(msg: Message) -> None:
            try:
                callback(msg)
            except Exception:
                log.exception("subscriber callback for %r raised", pattern)

        def complete() -> None:
            sub.snapshot.set()

        gate = SnapshotGate(deliver, _initial(pattern, selector, deliver), complete, _stamp)

        def answered(fut: Future[Any]) -> None:
            error = fut.exception()
            if error is None:
                body = fut.result()
                values, gone = body.get("values", []), body.get("gone", [])
                gate.snapshot(values, gone)
                if not values and not gone:
                    # nothing to join: live messages go straight to the callback (no
                    # call per message added to a plain subscription)
                    sub.callback = callback
            elif isinstance(error, RequestError) and not isinstance(error, SubscriptionCancelled):
                # a node without topics with state (older): the subscription is live only
                log.debug("no snapshot for %r: %s", pattern, error)
                gate.snapshot([], [])

        sub, name = self._subscriptions.add(pattern, gate.live, selector)
        try:
            self._command("sub", name).result(self.timeout)
            answer: Future[Any] = Future()
            answer.add_done_callback(answered)
            self._post_command(
                "req", (frames.STATE_FETCH, {"pattern": pattern, "snapshot": True}), answer
            )
            try:
                answer.result(self.timeout)
            except SubscriptionCancelled:
                raise
            except RequestError:
                pass  # (a node without topics with state: live only, see answered)
            if not sub.snapshot.wait(self.timeout):
                raise FutureTimeout
        except FutureTimeout:
            sub.unsubscribe()
            raise BrokerUnreachable(
                f"node did not confirm subscription {pattern!r} and its snapshot within "
                f"{self.timeout:g} s"
            ) from None
        except ZBrokerError:
            sub.unsubscribe()
            raise
        return sub


def _initial(
    pattern: str, selector: str | None, deliver: Callable[[Message], None]
) -> Callable[[Any], None]:
    """The snapshot's values as messages to ``deliver`` (with a selector, only the values
    whose headers it accepts: the node filters the live messages by it)."""
    selects = selectors.selector(selector) if selector is not None else None

    def initial(v: Any) -> None:
        msg = value_message(pattern, v)
        if selects is None or selects(msg.headers):
            deliver(msg)

    return initial
