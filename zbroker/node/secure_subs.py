"""Subscriptions with security on: the XPUB is in manual mode, so a subscription takes
effect (for the connection that sent it) only when the sender's key may subscribe to
the pattern. Manual mode reports every connection's (un)subscribe, so the node counts
them per (pattern, user) to know when the last one leaves; the unsubscriptions libzmq
sends for a closed connection carry no user id.
"""

from __future__ import annotations

import logging

import zmq

from ..security import Security
from .delivery import Delivery

__all__ = ["SecureSubscriptions"]

log = logging.getLogger("zbroker.node")


class SecureSubscriptions:
    def __init__(self, delivery: Delivery, security: Security) -> None:
        self._delivery = delivery
        self._security = security

    def on_subscriptions(self, budget: int) -> None:
        sock = self._delivery.sock
        for _ in range(budget):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                user: str | None = str(frame.get("User-Id"))
            except zmq.ZMQError:
                user = None  # libzmq's own unsubscription for a closed connection
            parsed = self._delivery.parse(frame.bytes)
            if parsed is None:
                continue
            subscribe, key, pattern = parsed
            if pattern is None:
                if user is not None:
                    sock.setsockopt(zmq.SUBSCRIBE if subscribe else zmq.UNSUBSCRIBE, key)
                if subscribe:
                    self._delivery.echo(key)
            elif subscribe:
                assert user is not None
                self._subscribe(user, key, pattern)
            else:
                self._unsubscribe(user, key, pattern)
            log.debug("local interest %s %s (%s)", "+" if subscribe else "-", pattern, user)

    def _subscribe(self, user: str, key: bytes, pattern: str) -> None:
        sec = self._security
        if not sec.may_subscribe(user, pattern):
            sec.refuse("subscribe to", user, pattern)
            return
        self._delivery.sock.setsockopt(zmq.SUBSCRIBE, key)  # for the connection that asked
        holders = sec.sub_counts.get(pattern)
        if holders is None:
            holders = sec.sub_counts[pattern] = {}
            self._delivery.first(pattern)
        holders[user] = holders.get(user, 0) + 1

    def _unsubscribe(self, user: str | None, key: bytes, pattern: str) -> None:
        counts = self._security.sub_counts
        holders = counts.get(pattern)
        if holders is None:
            return
        if user is None:
            user = next(iter(holders))  # a closed connection: any holder's count
        elif user not in holders:
            return  # it never held it (refused, or a stray unsubscribe)
        else:
            self._delivery.sock.setsockopt(zmq.UNSUBSCRIBE, key)
        left = holders[user] - 1
        if left:
            holders[user] = left
        else:
            del holders[user]
        if not holders:
            del counts[pattern]
            self._delivery.last(pattern)
