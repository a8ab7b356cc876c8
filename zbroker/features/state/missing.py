"""Missing-topic notifications: a subscribe or fetch that matched no stateful topic (on
any node) waits for the handlers that may create it.

* A client registers a handler for a branch (``STATE_HANDLER``); the node notifies, per
  request, **one** handler of the **most specific** registered branch the pattern meets
  (the most literal segments; the first registered among equals): a ``STATE_MISSING``
  frame to that client, answered ``proceed`` or ``cancel``. A client that went away is
  forgotten and the next handler tried.
* The notification also travels to the node's primaries (links with ``replicate``),
  under the seed's conditions: the link is up, the pattern meets one of its branches,
  no replica matches (the query found no topic anywhere, replicas included), the primary
  has no topic the pattern matches (it answers ``proceed`` then), and a handler is
  registered there (else it answers ``none``). A primary asks its own primaries in turn
  (tiers of fan-out), never one that asked on the way (the ask carries their IDs:
  replicate links in a cycle would pass it round for ever). A pattern a local branch
  (``[routing] local``) covers is never asked over a link, and a primary answers an ask
  for one its local branch covers ``none``, judging the rest without its local topics.
* The request waits for every handler asked: any ``cancel`` cancels it; no handler
  reachable (every answer ``none``) proceeds with a warning and a counter; a link that
  drops while asked counts as ``proceed`` (warning, counter); past the timeout
  (``missing_topic_timeout``) what has not answered counts as ``proceed`` (logged,
  counted).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidTopic
from ...links.state import Link
from ...node import Request
from ...node.context import Context
from ...routing.branches import covers, holds
from ...topics import patterns_overlap, validate_pattern
from ...wire import frames
from ...wire.control import encode_control
from ...wire.link import encode_link
from ...wire.state import check_missing_ask, check_missing_reply
from .replication import Replicas
from .topics import StateTopics

__all__ = ["MissingTopics"]

log = logging.getLogger("zbroker.state")

_LOCAL = ""  # the key of this node's own handler among what a wait waits for


@dataclass(eq=False)
class Wait:
    pattern: str
    done: Callable[[str], None]
    deadline: float
    waiting: set[str] = field(default_factory=set)  # _LOCAL, or links' engine ids
    verdicts: list[str] = field(default_factory=list)


def specificity(branch: str) -> tuple[int, int]:
    segs = branch.split(".")
    return sum(s not in ("*", ">") for s in segs), len(segs)


class MissingTopics:
    def __init__(
        self,
        ctx: Context,
        topics: StateTopics,
        replicas: Replicas,
        send: Callable[[Link, bytes], None],
    ) -> None:
        self._ctx = ctx
        self._topics = topics
        self._replicas = replicas
        self._send = send  # a link frame, after the pass's link flush
        self.timeout = ctx.config.missing_topic_timeout
        self.handlers: dict[str, list[bytes]] = {}  # branch -> client connections
        self.waits: dict[str, Wait] = {}
        self._ids = itertools.count(1)
        self.counts = {"notified": 0, "cancelled": 0, "unhandled": 0, "link_lost": 0}
        self.counts["timeouts"] = 0
        self.counts["loops"] = 0  # asks that came back round a cycle of replicate links

    def relevant(self, pattern: str) -> bool:
        """Could a handler be asked about ``pattern`` (here, or through a primary)?"""
        return any(patterns_overlap(b, pattern) for b in self.handlers) or any(
            r.link is not None and any(patterns_overlap(b, pattern) for b in r.branches)
            for r in self._replicas.by_name.values()
        )

    # -- requests from clients ---------------------------------------------------------------

    def register(self, req: Request) -> None:
        branch = req.body.get("branch")
        try:
            validate_pattern(branch)
        except InvalidTopic as exc:
            self._ctx.error(req, str(exc))
            return
        assert isinstance(branch, str)
        idents = [i for i in self.handlers.get(branch, []) if i != req.ident]
        if not req.body.get("remove"):
            idents.append(req.ident)
        if idents:
            self.handlers[branch] = idents
        else:
            self.handlers.pop(branch, None)
        self._ctx.reply(req, frames.STATE_HANDLER, {})

    def verdict(self, req: Request) -> None:
        """A handler's answer (one-way)."""
        mid, verdict = req.body.get("id"), req.body.get("verdict")
        w = self.waits.get(mid) if isinstance(mid, str) else None
        if w is None or _LOCAL not in w.waiting or verdict not in ("proceed", "cancel"):
            return  # (late: past the timeout; or malformed)
        w.waiting.discard(_LOCAL)
        w.verdicts.append(str(verdict))
        self._maybe_done(str(mid))

    # -- asking --------------------------------------------------------------------------------

    def ask(
        self,
        pattern: str,
        node: str,
        done: Callable[[str], None],
        came_by: Link | None = None,
        path: tuple[str, ...] = (),
    ) -> None:
        """Ask the handlers about ``pattern`` (a request on ``node`` matched nothing;
        ``path``: the nodes that asked this one, on the way);
        ``done(verdict)``: ``proceed``, ``cancel`` or ``none`` (nobody to ask)."""
        ctx = self._ctx
        mid = f"{ctx.broker_id}/{ctx.incarnation}/m{next(self._ids)}"
        timeout = self.timeout if came_by is None else self.timeout * 0.9
        w = self.waits[mid] = Wait(pattern, done, time.monotonic() + timeout)
        if self._notify(mid, pattern, node):
            w.waiting.add(_LOCAL)
        onward = [*path, ctx.broker_id]
        # a pattern a local branch covers is asked here only: its topics exist on this
        # node alone, and the pattern itself must not leave it
        kept = covers(ctx.engine.local_branches, pattern)
        for r in () if kept else self._replicas.by_name.values():
            link = r.link
            # (a primary that asked already on the way: replicate links in a cycle)
            if link is None or link is came_by or link.peer in onward:
                continue
            if any(patterns_overlap(b, pattern) for b in r.branches):
                self._send(link, encode_link(frames.MISSING_ASK, mid, pattern, node, onward))
                w.waiting.add(link.engine_id)
        self._maybe_done(mid)

    def _notify(self, mid: str, pattern: str, node: str) -> bool:
        """Notify one handler of the most specific branch ``pattern`` meets (False: none)."""
        branches = sorted(
            (b for b in self.handlers if patterns_overlap(b, pattern)),
            key=specificity,
            reverse=True,
        )
        for branch in branches:
            for ident in list(self.handlers[branch]):
                body = {"id": mid, "pattern": pattern, "node": node, "branch": branch}
                frame = encode_control(frames.STATE_MISSING, 0, body)
                try:
                    sent = self._ctx.send_to(ident, frame)
                except Exception:  # (its queue is full: try the next)
                    sent = False
                if sent:
                    self.counts["notified"] += 1
                    return True
                self.handlers[branch].remove(ident)  # that client is gone
            if not self.handlers[branch]:
                del self.handlers[branch]
        return False

    def _maybe_done(self, mid: str) -> None:
        w = self.waits.get(mid)
        if w is None or w.waiting:
            return
        del self.waits[mid]
        if "cancel" in w.verdicts:
            self.counts["cancelled"] += 1
            w.done("cancel")
        elif all(v == "none" for v in w.verdicts):
            w.done("none")
        else:
            w.done("proceed")

    # -- links -----------------------------------------------------------------------------

    def on_ask(self, link: Link, value: list[Any]) -> int:
        mid, pattern, node, path = check_missing_ask(value)

        def reply(verdict: str) -> None:
            self._send(link, encode_link(frames.MISSING_REPLY, mid, verdict))

        kept = self._ctx.engine.local_branches
        values, _ = self._topics.values(pattern)
        if kept:  # (another node hears nothing of a local branch's topics, nor of them)
            values = [v for v in values if not holds(kept, v[0])]
        if covers(kept, pattern):
            reply("none")  # what a handler here made of it would never leave this node
        elif values:
            reply("proceed")  # the primary has a topic it matches: no notification
        elif self._ctx.broker_id in path:
            # asked already on the way (replicate links in a cycle): its handler and
            # primaries were asked then, and that ask waits for this very answer
            self.counts["loops"] += 1
            reply("none")
        else:
            self.ask(pattern, node, reply, came_by=link, path=path)
        return 1

    def on_reply(self, link: Link, value: list[Any]) -> int:
        mid, verdict = check_missing_reply(value)
        w = self.waits.get(mid)
        if w is not None and link.engine_id in w.waiting:
            w.waiting.discard(link.engine_id)
            w.verdicts.append(verdict)
            self._maybe_done(mid)
        return 1

    def link_down(self, link: Link) -> None:
        for mid, w in list(self.waits.items()):
            if link.engine_id in w.waiting:
                self.counts["link_lost"] += 1
                log.warning(
                    "missing topic %r: link %s dropped while its handlers were asked: proceeding",
                    w.pattern,
                    link.name,
                )
                w.waiting.discard(link.engine_id)
                w.verdicts.append("proceed")
                self._maybe_done(mid)

    def tick(self, now: float) -> None:
        for mid, w in list(self.waits.items()):
            if now >= w.deadline:
                self.counts["timeouts"] += 1
                log.info(
                    "missing topic %r: no answer from %d handler(s) in %.3g s: proceeding",
                    w.pattern,
                    len(w.waiting),
                    self.timeout,
                )
                w.verdicts.extend("proceed" for _ in w.waiting)
                w.waiting.clear()
                self._maybe_done(mid)

    def status(self) -> dict[str, Any]:
        return {**self.counts, "handlers": sorted(self.handlers), "waiting": len(self.waits)}
