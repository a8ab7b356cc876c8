"""Queue group membership, the consumer's side: join, leave, receive, acknowledge.

``subscribe(pattern, cb, queue="workers")`` makes this client a member of group
``workers`` on ``pattern`` at its node (QUEUE_JOIN): each message matching the pattern
goes to one member of the group network-wide, as a QDELIVER over the control
connection, at most ``credit`` unacknowledged; the client acknowledges (QUEUE_ACK,
cumulative, once per drain of the session) after the callback, which frees credit. After
a reconnect every membership joins again on the new node.

Leaving (``unsubscribe()`` or ``Client.close()``) runs no further callback of that
membership: the client acknowledges exactly what it processed, then QUEUE_LEAVE follows
on the same connection (acknowledgements go at the end of the drain that ran the
callbacks, the leave from the command queue, both on the client thread), and the node
gives whatever else was in flight to the other members. At most once: what was in
flight to a member when its connection died is lost.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import zmq

from .. import wire
from ..config import validate_broker_id
from ..errors import ClientClosed, ConfigError, ProtocolError
from .messages import Message, Subscription, message_from_fields
from .sessions import Session

__all__ = ["QueueMembers", "check_consumer_options"]

log = logging.getLogger("zbroker.client")


def check_consumer_options(
    callback: Any,
    queue: str | None,
    durable: str | None,
    shared: bool = False,
    selector: str | None = None,
) -> None:
    """What ``subscribe()`` refuses, with a clear error: a callback that cannot be called
    (every delivery would log the error it raises), and combinations of options."""
    if not callable(callback):
        raise TypeError(f"subscribe: callback must be callable, not {callback!r}")
    if shared and durable is None:
        raise ConfigError(
            "shared=True shares a durable subscription among consumers: it needs durable="
            "NAME (for live load balancing use queue=GROUP)"
        )
    if queue is not None and durable is not None:
        raise ConfigError(
            "a subscription is either a queue group member (queue=) or a durable "
            "subscription (durable=), not both"
        )
    if queue is not None and selector is not None:
        # (a group's members compete for every message of its pattern: one member's
        # selector would have to steer the pick on every node, which groups do not do)
        raise ConfigError(
            "a queue group member takes no selector (queue= with selector=): the members "
            "of a group compete for every message of its pattern"
        )
    if queue is not None:
        validate_broker_id(queue, "queue group name")


class QueueMembers:
    """One client's queue group memberships, by member number."""

    def __init__(
        self,
        request: Callable[[int, dict[str, Any]], dict[str, Any]],
        command: Callable[[str, Any], Future[Any]],
    ) -> None:
        self._request = request
        self._command = command
        self._ids = itertools.count(1)
        # member -> (handle, group, credit): what to join again on reconnect
        self._open: dict[int, tuple[Subscription, str, int]] = {}
        self._acks: dict[int, int] = {}  # member -> highest n processed, not yet acked

    # -- user threads --------------------------------------------------------------------

    def subscribe(
        self, pattern: str, callback: Callable[[Message], Any], group: str, credit: int
    ) -> Subscription:
        validate_broker_id(group, "queue group name")
        if type(credit) is not int or not 1 <= credit <= 100_000:
            raise ConfigError("credit must be an integer in 1..100000")
        member = next(self._ids)
        sub = Subscription(lambda s: self._end(member), pattern, callback)
        self._open[member] = (sub, group, credit)
        try:
            self._request(wire.QUEUE_JOIN, _join_body(member, pattern, group, credit))
        except BaseException:
            # a join that timed out may still reach the node (a node slow to answer):
            # a member nobody knows of here would hold its share of the group's messages
            # unprocessed, so it leaves too (after the join, on the same connection; a
            # node that never had it ignores the leave)
            self._end(member)
            raise
        return sub

    def leave(self) -> None:
        """The client closes: every membership ends at the node."""
        for member in list(self._open):
            self._end(member)

    def _end(self, member: int) -> None:
        if self._open.pop(member, None) is not None:
            try:
                self._command("send", (wire.QUEUE_LEAVE, {"member": member}))
            except (ClientClosed, zmq.ZMQError):
                pass

    # -- the client thread ---------------------------------------------------------------

    def deliver(self, body: dict[str, Any]) -> None:
        """Messages for one of our memberships: run the callback on each, in order, then
        acknowledge those it ran on."""
        member, n, msgs = body.get("member"), body.get("n"), body.get("msgs")
        entry = self._open.get(member) if type(member) is int else None
        if entry is None or type(n) is not int or type(msgs) is not list:
            return  # left meanwhile: not acknowledged, the node gives them to the others
        assert type(member) is int
        sub = entry[0]
        first = n - len(msgs) + 1
        done = 0  # the number of the last message processed (0: none of these)
        for i, fields in enumerate(msgs):
            if not sub.active or self._open.get(member) is not entry:
                # left (its own callback, another thread, close()): the rest is neither
                # processed nor acknowledged, so the node gives it to the others
                break
            done = first + i
            try:
                msg = message_from_fields(sub.pattern, fields)
            except (ProtocolError, KeyError, TypeError) as exc:
                log.warning("dropped malformed queue delivery: %s", exc)
                continue
            try:
                sub.callback(msg)
            except Exception:
                log.exception("queue group member callback for %r raised", entry[1])
        if done > self._acks.get(member, 0):
            self._acks[member] = done

    def flush_acks(self, session: Session | None) -> None:
        """Acknowledge what was processed since the last call (frees credit)."""
        if self._acks and session is not None:
            for member, upto in self._acks.items():
                body = {"member": member, "upto": upto}
                session.send(wire.encode_control(wire.QUEUE_ACK, 0, body))
        self._acks.clear()

    def rejoin(self, session: Session) -> None:
        """After a reconnect (or a node restart): join every group again."""
        self._acks.clear()  # (numbering starts again at the node)
        for member, (sub, group, credit) in list(self._open.items()):
            body = _join_body(member, sub.pattern, group, credit)
            session.send(wire.encode_control(wire.QUEUE_JOIN, 0, body))


def _join_body(member: int, pattern: str, group: str, credit: int) -> dict[str, Any]:
    return {"member": member, "pattern": pattern, "group": group, "credit": credit}
