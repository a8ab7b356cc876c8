"""Durable subscriptions, the consumer's side: open, detach, delete, receive, acknowledge.

User threads open and end durable subscriptions here (requests to the node); the client
thread hands this part each DELIVER, runs the callback, and sends the cumulative
acknowledgements once per drain of a session. Every durable request and frame goes to the
durable's home node over a session of its own (:mod:`.durable_session`), never to
whichever node the client failed over to; when that session reconnects (or its node
restarted) it reopens the durables that live there: what was not acknowledged comes again,
marked ``redelivered``.

Leaving (``unsubscribe()``, from any thread or the subscription's own callback, or
``Client.close()``) runs no further callback of that subscription: the client acknowledges
exactly what its callback ran on (at the end of the drain that ran it), then DURABLE_CLOSE
follows on the same session (from the command queue), and what else was delivered comes
again, flagged, to the next consumer (of a shared durable: to the others). An exclusive
durable opened again on this client before its old window was read skips the rest of that
window until the node answers the open (its cumulative acknowledgement would otherwise
cover what was skipped); the node sends it all again after its answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import zmq

from .. import wire
from ..config import validate_broker_id
from ..errors import BrokerUnreachable, ClientClosed, ConfigError, NoSuchDurable, ProtocolError
from .messages import Message, Subscription, message_from_fields
from .sessions import Session

__all__ = ["Durables"]

log = logging.getLogger("zbroker.client")


class Durables:
    """One client's durable subscriptions (at most one handle per name)."""

    def __init__(self, command: Callable[[str, Any], Future[Any]], timeout: float) -> None:
        self._command = command  # a command to the client thread
        self._timeout = timeout
        # name -> (handle, credit, bounds): what to reopen on reconnect
        self._open: dict[str, tuple[Subscription, int, dict[str, Any]]] = {}
        #: name -> the node's DURABLE_OPEN reply (``Client.durable_info``)
        self.info: dict[str, dict[str, Any]] = {}
        self._acks: dict[str, int] = {}  # name -> highest q processed, not yet acked
        self.malformed = 0  # messages that could not be read (dropped, acknowledged)
        self._acks_each: dict[str, list[int]] = {}  # shared: name -> q processed
        #: name -> the lowest q delivered while it was not open here, until the node
        #: answers an open of it again: the rest of that window is stale (see ``deliver``)
        self._skipped: dict[str, int] = {}

    # -- user threads --------------------------------------------------------------------

    def subscribe(
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
        sub = Subscription(self._end, pattern, callback)
        sub.durable = name
        previous = self._open.get(name)
        self._open[name] = (sub, credit, bounds)
        try:
            self.info[name] = self._request(
                name,
                wire.DURABLE_OPEN,
                {"name": name, "pattern": pattern, "credit": credit, **bounds},
            )
        except BaseException:
            # refused (e.g. another pattern): an earlier subscription by this name stays
            if previous is not None:
                self._open[name] = previous
            else:
                self._open.pop(name, None)
            raise
        return sub

    def detach(self, name: str) -> None:
        entry = self._open.get(name)
        if entry is not None:
            entry[0].unsubscribe()

    def delete(self, name: str, missing_ok: bool) -> int:
        validate_broker_id(name, "durable subscription name")
        self._open.pop(name, None)
        reply = self._request(name, wire.DURABLE_DELETE, {"name": name})
        # (a node before the found key: taken as found, as it cannot say)
        if not missing_ok and reply.get("found", True) is False:
            raise NoSuchDurable(
                f"no durable subscription named {name!r} on the nodes reachable: nothing deleted"
            )
        return int(reply.get("deleted", 0))

    def _request(self, name: str, op: int, body: dict[str, Any]) -> dict[str, Any]:
        """A request to durable ``name``'s home node (or the primary's, for a new one),
        waited for."""
        fut = self._command("dreq", (name, op, body))
        try:
            # (the client thread fails it after the client's timeout; this is a backstop)
            result: dict[str, Any] = fut.result(self._timeout + 5.0)
        except FutureTimeout:
            raise BrokerUnreachable(f"durable {name!r}: no answer in time") from None
        return result

    def leave(self) -> None:
        """The client closes: every durable subscription ends as ``unsubscribe()`` ends
        it (no callback runs after this; the node stops sending and keeps storing)."""
        for sub, _, _ in list(self._open.values()):
            sub.unsubscribe()

    def _end(self, sub: Subscription) -> None:
        assert sub.durable is not None
        entry = self._open.get(sub.durable)
        if entry is not None and entry[0] is sub:
            del self._open[sub.durable]
            self._close_on_node(sub.durable)

    def _close_on_node(self, name: str) -> None:
        try:
            self._command("dsend", (name, wire.DURABLE_CLOSE, {"name": name}))
        except (ClientClosed, zmq.ZMQError):
            pass

    # -- the client thread ---------------------------------------------------------------

    def deliver(self, body: dict[str, Any]) -> None:
        """A durable subscription's message: run the callback, then acknowledge it."""
        name = body.get("name")
        q = body.get("q")
        if not isinstance(name, str) or type(q) is not int:
            return
        entry = self._open.get(name)
        if entry is None or (name in self._skipped and not entry[2].get("shared")):
            # detached meanwhile (unsubscribe(), its own callback, close()): it is neither
            # processed nor acknowledged, so it comes again, flagged, to the next consumer.
            # An exclusive durable opened again here before the node answered skips the
            # rest of the old window too: its cumulative acknowledgement would cover what
            # was skipped (the node sends it all again after the open's answer)
            self._skipped[name] = min(q, self._skipped.get(name, q))
            return
        sub = entry[0]
        try:
            msg = message_from_fields(sub.pattern, body["msg"])
        except (ProtocolError, KeyError, TypeError) as exc:
            # dropped, and acknowledged all the same: else it would come again for ever
            # (and with credit 1 hold the durable's window)
            log.warning("dropped a malformed message of durable %r: %s", name, exc)
            self.malformed += 1
        else:
            msg.redelivered = bool(body.get("redelivered"))
            try:
                sub.callback(msg)
            except Exception:
                log.exception("durable subscriber callback for %r raised", name)
        # acknowledgements are cumulative: one per subscription per drain (flush_acks);
        # a shared durable's list exactly what this consumer processed
        if entry[2].get("shared"):
            self._acks_each.setdefault(name, []).append(q)
        elif q > self._acks.get(name, 0):
            self._acks[name] = q

    def flush_acks(self, session: Session | None) -> None:
        """Acknowledge what was processed since the last call (None: the session is gone,
        so what it delivered comes again)."""
        if self._acks and session is not None:
            for name, upto in self._acks.items():
                session.send(wire.encode_control(wire.DURABLE_ACK, 0, {"name": name, "upto": upto}))
        if self._acks_each and session is not None:
            for name, qs in self._acks_each.items():
                session.send(wire.encode_control(wire.DURABLE_ACK, 0, {"name": name, "qs": qs}))
        self._acks.clear()
        self._acks_each.clear()

    def open_body(self, name: str) -> dict[str, Any] | None:
        """The DURABLE_OPEN body of durable subscription ``name`` (None: not open)."""
        entry = self._open.get(name)
        if entry is None:
            return None
        sub, credit, bounds = entry
        return {"name": name, "pattern": sub.pattern, "credit": credit, **bounds}

    def opened(self, name: str) -> None:
        """The node answered an open of ``name`` (client thread, in order with its
        deliveries): what it sends from now on is for the subscription open here."""
        self._skipped.pop(name, None)

    def reattach(self, session: Session, names: list[str]) -> None:
        """After a reconnect to their home: reopen durable subscriptions ``names`` (the
        unacknowledged messages come again)."""
        for name in names:
            self.opened(name)  # (what the old session or node sent before is gone)
            entry = self._open.get(name)
            if entry is None:
                continue  # (detached meanwhile)
            sub, credit, bounds = entry
            body = {"name": name, "pattern": sub.pattern, "credit": credit, **bounds}
            session.send(wire.encode_control(wire.DURABLE_OPEN, 0, body))
